#!/usr/bin/env bash
# Make sure a `redis-server` binary is available for the test suite.
#
# The tests start their own private redis-server processes on free ports; this script only
# installs the binary. It never starts (or leaves running) a system redis service: while
# apt-get runs, a policy-rc.d that forbids service starts is put in place if none exists.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi

# shellcheck source=scripts/_root.sh
. "$(dirname "$0")/_root.sh"
root_for_apt ensure-redis "redis-server is not on PATH: install Redis (>= 6; 'sudo apt-get install redis-server'" \
    "on Debian) so that 'redis-server' is on PATH, then re-run."

echo "ensure-redis: installing redis-server with apt-get ..." >&2

POLICY=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
    if [ "$created_policy" -eq 1 ]; then
        "${SUDO[@]}" rm -f "$POLICY"
    fi
}
trap cleanup EXIT
if [ ! -e "$POLICY" ]; then
    # exit 101 = "action forbidden": invoke-rc.d will not start the redis service.
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    created_policy=1
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null

if ! command -v redis-server >/dev/null 2>&1; then
    echo "ensure-redis: apt-get finished but redis-server is still not on PATH." >&2
    exit 1
fi
echo "ensure-redis: $(redis-server --version)" >&2
