#!/usr/bin/env bash
# The whole suite, as `make test` runs it: ruff + mypy and the schema fuzzing at the lowest CPU priority
# (nice 19), alongside the main pytest session at normal priority.
#
# Why side by side: the main session leaves about a fifth of the two cores idle (its fault scenarios wait
# on leases, sweeps and servers), and lint and fuzzing assert on no timing, so they take that idle time
# instead of two minutes of their own before it. At nice 19 they get ~1.5% of a core while the main
# session wants it, so its timing-sensitive scenarios see the same CPU as before.
#
# Usage: scripts/run-tests.sh VENV WORKERS   (make test passes .venv and PYTEST_WORKERS)
# Exit status: 0 when lint, fuzzing and the main session all pass; otherwise 1, after all three have ended
# and the logs of the side jobs are printed.
set -uo pipefail
venv=${1:?usage: run-tests.sh VENV WORKERS}
workers=${2:-2}
py="$venv/bin/python"
fuzz_tests=tests/api/test_schemathesis.py
logs=$(mktemp -d "${TMPDIR:-/tmp}/smd-test-logs.XXXXXX")

side() {   # side NAME COMMAND...: run at nice 19 in the background, output to $logs/NAME.log, status to .rc
    local name=$1; shift
    ( nice -n 19 "$@" >"$logs/$name.log" 2>&1; echo $? >"$logs/$name.rc" ) &
}

side lint bash -c "'$venv/bin/ruff' check . && '$venv/bin/mypy'"
# schemathesis reports each API operation as a subtest, which only --dist load keeps; no cache: the main
# session writes pytest's cache
side fuzz "$py" -m pytest -q -p no:cacheprovider -n "$workers" --dist load "$fuzz_tests"
echo ">> lint and $fuzz_tests run at nice 19 alongside the main session (their logs follow it)"

"$py" -m pytest -q -n "$workers" --dist loadfile --durations=15 -m "not paper" --ignore="$fuzz_tests"
main=$?
wait
status=0
for name in lint fuzz; do
    rc=$(cat "$logs/$name.rc" 2>/dev/null || echo 1)
    echo ">> $name (exit $rc):"
    if [ "$rc" -eq 0 ]; then tail -n 3 "$logs/$name.log"; else cat "$logs/$name.log"; status=1; fi
done
rm -rf "$logs"
[ "$main" -eq 0 ] || status=1
echo ">> main session exit $main; make test exit $status"
exit "$status"
