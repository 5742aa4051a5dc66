#!/usr/bin/env bash
# Make sure libfaketime's `faketime` is available for the clock-skew test (tests/integration/test_clock_skew.py).
#
# That test runs a real `smd worker` whose wall clock is set 10 minutes back with libfaketime, as a worker
# host with a wrong clock. This script only installs Debian's `faketime` package (the `faketime` command
# and its LD_PRELOAD library); it starts nothing.
set -euo pipefail

if command -v faketime >/dev/null 2>&1; then
    exit 0
fi

# shellcheck source=scripts/_root.sh
. "$(dirname "$0")/_root.sh"
root_for_apt ensure-faketime "faketime is not on PATH: install it ('sudo apt-get install faketime' on Debian)" \
    "and re-run; without it the clock-skew test is skipped."

echo "ensure-faketime: installing faketime with apt-get ..." >&2
install() {
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends faketime >/dev/null
}
# the package index that the other ensure-*.sh fetched is reused; fetched again only if that fails
install || { "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq && install; }

if ! command -v faketime >/dev/null 2>&1; then
    echo "ensure-faketime: apt-get finished but faketime is still not on PATH." >&2
    exit 1
fi
echo "ensure-faketime: $(command -v faketime)" >&2
