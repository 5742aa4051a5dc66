#!/usr/bin/env bash
# Make sure a Chromium browser is available for the dashboard's browser tests (tests/browser).
#
# Playwright drives the Debian `chromium` package (never a browser downloaded by Playwright): the
# tests find it on PATH, or at $SMD_CHROMIUM. This script only installs the package.
set -euo pipefail

if [ -n "${SMD_CHROMIUM:-}" ] && [ -x "${SMD_CHROMIUM}" ]; then
    exit 0
fi
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi

# shellcheck source=scripts/_root.sh
. "$(dirname "$0")/_root.sh"
root_for_apt ensure-chromium "chromium is not on PATH: install it ('sudo apt-get install chromium' on Debian)" \
    "and re-run, or set SMD_CHROMIUM=/path/to/chromium."

echo "ensure-chromium: installing chromium with apt-get ..." >&2
install() {
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
}
# the package index that ensure-redis/ensure-postgres fetched is reused; fetched again only if that fails
install || { "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq && install; }

if ! command -v chromium >/dev/null 2>&1; then
    echo "ensure-chromium: apt-get finished but chromium is still not on PATH." >&2
    exit 1
fi
echo "ensure-chromium: $(chromium --version 2>/dev/null)" >&2
