#!/usr/bin/env bash
# Make sure the PostgreSQL server binaries (`initdb`, `pg_ctl`, `postgres`) exist for the tests.
#
# The tests (tests/servers.py) make their own throw-away cluster with initdb in a temporary
# directory and start `postgres` on a free port; this script only installs the binaries. Found
# means: in $PG_BINDIR if set, else on PATH, else in the highest /usr/lib/postgresql/*/bin
# (Debian/Ubuntu keep them off PATH). Otherwise Debian's `postgresql` package is installed with
# apt-get (as root, or with passwordless sudo). No cluster is started: a policy-rc.d forbids
# service starts while apt-get runs (if none exists), and a createcluster.d drop-in stops
# postgresql-common from even creating the default cluster `main`; both are removed afterwards.
#
#   scripts/ensure-postgres.sh                 ensure (install if missing); quiet when found
#   scripts/ensure-postgres.sh --print-bindir  print the directory found; exit 1 if none (never installs)
set -euo pipefail

PG_LIBROOT="${PG_LIBROOT:-/usr/lib/postgresql}"

# Print the bin directory holding initdb and pg_ctl; return 1 if there is none.
find_bindir() {
    local d initdb
    if [ -n "${PG_BINDIR:-}" ]; then
        [ -x "$PG_BINDIR/initdb" ] && [ -x "$PG_BINDIR/pg_ctl" ] && { echo "$PG_BINDIR"; return 0; }
        return 1
    fi
    if initdb="$(command -v initdb)" && command -v pg_ctl >/dev/null; then
        dirname "$(readlink -f "$initdb")"
        return 0
    fi
    # highest major version first (sort -V: 9.6 < 10 < 15 < 16)
    while IFS= read -r d; do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
            echo "$d"
            return 0
        fi
    done < <(find "$PG_LIBROOT" -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -rV)
    return 1
}

if [ "${1:-}" = "--print-bindir" ]; then
    find_bindir
    exit
elif [ $# -gt 0 ]; then
    echo "usage: $0 [--print-bindir]" >&2
    exit 2
fi

if find_bindir >/dev/null; then
    exit 0
fi

if [ -n "${PG_BINDIR:-}" ]; then
    echo "ensure-postgres: PG_BINDIR=$PG_BINDIR has no executable initdb and pg_ctl." >&2
    exit 1
fi

# shellcheck source=scripts/_root.sh
. "$(dirname "$0")/_root.sh"
root_for_apt ensure-postgres "initdb/pg_ctl are not on PATH nor in $PG_LIBROOT/*/bin: install the PostgreSQL" \
    "server (>= 13; 'sudo apt-get install postgresql' on Debian) so that 'initdb' and 'pg_ctl' are on PATH" \
    "(or set PG_BINDIR to their directory), then re-run."

echo "ensure-postgres: installing postgresql with apt-get ..." >&2

POLICY=/usr/sbin/policy-rc.d
NOCLUSTER=/etc/postgresql-common/createcluster.d/zz-ensure-postgres-no-main.conf
created_policy=0
created_nocluster=0
cleanup() {
    if [ "$created_policy" -eq 1 ]; then
        "${SUDO[@]}" rm -f "$POLICY"
    fi
    if [ "$created_nocluster" -eq 1 ]; then
        "${SUDO[@]}" rm -f "$NOCLUSTER"
    fi
}
trap cleanup EXIT
if [ ! -e "$POLICY" ]; then
    # exit 101 = "action forbidden": invoke-rc.d will not start the postgresql service.
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    created_policy=1
fi
if [ ! -e "$NOCLUSTER" ]; then
    # Read by pg_createcluster via the `include_dir` of postgresql-common's createcluster.conf:
    # the package's postinst then skips creating (and so starting) the cluster 15/main.
    "${SUDO[@]}" mkdir -p "$(dirname "$NOCLUSTER")"
    echo "create_main_cluster = false" | "${SUDO[@]}" tee "$NOCLUSTER" >/dev/null
    created_nocluster=1
fi

APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
apt_update() { "${APT[@]}" update -qq; }
apt_install() { "${APT[@]}" install -y -qq --no-install-recommends postgresql >/dev/null; }

# Share the package index with scripts/ensure-redis.sh (`make test` runs it first): update only
# when there is no index at all, or when installing from the present one fails (stale index).
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
    apt_update
    apt_install
elif ! apt_install; then
    echo "ensure-postgres: install failed; updating the package index and retrying ..." >&2
    apt_update
    apt_install
fi

if ! bindir="$(find_bindir)"; then
    echo "ensure-postgres: apt-get finished but initdb/pg_ctl are still not on PATH nor in $PG_LIBROOT/*/bin." >&2
    exit 1
fi
echo "ensure-postgres: $("$bindir/initdb" --version) in $bindir" >&2
