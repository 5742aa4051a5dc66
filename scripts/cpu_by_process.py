"""Where a test run's CPU goes, by kind of process: samples /proc every half second and adds each process's
CPU time (user + system) to a category named by its own command line or, failing that, its nearest classified
ancestor's (a worker's pool process counts as the worker). Linux only; for finding what to make cheaper in
`make test`, whose limit is the two cores' total CPU, not waiting.

    python scripts/cpu_by_process.py OUT.json &      # then run the suite; stop the sampler with SIGTERM
    ./scripts/run-tests.sh .venv 2; kill %1

OUT.json is rewritten every 10 s and at SIGTERM: {category: CPU seconds}, largest first. A process that ends
between two samples loses at most its last half second; processes already running when sampling starts
count only from then.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")
RULES = [   # (text in the command line, category): the first that matches names the process
    ("--ignore=tests/api/test_schemathesis", "pytest main session"), ("schemathesis", "fuzz"),
    ("chrom", "chromium"), ("postgres", "postgres"), ("redis-server", "redis"), ("mlflow", "mlflow"),
    ("smdcli.main serve", "smd serve"), ("smdcli.main worker", "smd worker"), ("smdcli.main api", "smd api"),
    ("celery", "celery"), ("pytest", "pytest"), ("smdcli.main", "smd (other commands)"),
    ("ruff", "lint"), ("mypy", "lint"),
]


def command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def classify(cmdline: str) -> str | None:
    return next((name for text, name in RULES if text in cmdline), None)


def category(pid: int, parents: dict[int, int]) -> str:
    at = pid
    for _ in range(30):
        if name := classify(command(at)):
            return name
        at = parents.get(at, 0)
        if at <= 1:
            break
    return "other: " + command(pid)[:40]


def snapshot() -> dict[int, tuple[int, int, int]]:
    """pid → (start time, parent pid, CPU ticks so far)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()   # after the command name, which may hold spaces
        out[int(name)] = (int(fields[19]), int(fields[1]), int(fields[11]) + int(fields[12]))
    return out


def main(path: str) -> None:
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    seen = {pid: (start, ticks) for pid, (start, _, ticks) in snapshot().items()}
    totals: collections.Counter[str] = collections.Counter()
    written = time.monotonic()
    while True:
        time.sleep(0.5)
        now = snapshot()
        parents = {pid: parent for pid, (_, parent, _) in now.items()}
        for pid, (start, _, ticks) in now.items():
            before = seen.get(pid)
            spent = ticks - before[1] if before and before[0] == start else ticks
            if spent > 0:
                totals[category(pid, parents)] += spent / TICKS
            seen[pid] = (start, ticks)
        if stopping or time.monotonic() - written > 10:
            with open(path, "w") as f:
                json.dump({k: round(v, 1) for k, v in totals.most_common()}, f, indent=1)
            written = time.monotonic()
            if stopping:
                return


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu-by-process.json")
