"""When each test ran, and in which pytest-xdist process: a pytest plugin and its report, for finding where
`make test`'s wall time goes (are the two processes' loads even, which modules fill them).

    PYTEST_ADDOPTS="-p tests.timeline" SMD_TIMELINE_DIR=/tmp/tl make test
    python -m tests.timeline /tmp/tl          # per process: its span, then its modules, longest first

Each test process appends one JSON line per test (node id, start and end, Unix seconds, setup and teardown
included) to ``<SMD_TIMELINE_DIR>/<xdist worker id>-<pid>.jsonl``; the xdist controller, which only relays
its workers' reports, writes nothing.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path

_started: dict[str, float] = {}
_controller = False


def _out() -> Path | None:
    folder = os.environ.get("SMD_TIMELINE_DIR")
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Path(folder) / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.jsonl"


def pytest_configure(config) -> None:
    global _controller   # it relays its workers' reports, which they write
    _controller = not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def pytest_runtest_logstart(nodeid, location) -> None:
    _started[nodeid] = time.time()


def pytest_runtest_logfinish(nodeid, location) -> None:
    out = None if _controller else _out()
    if out is not None and nodeid in _started:
        with out.open("a") as f:
            f.write(json.dumps({"id": nodeid, "start": _started.pop(nodeid), "end": time.time()}) + "\n")


def report(folder: Path) -> str:
    lines = []
    for path in sorted(folder.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        if not rows:
            continue
        modules: dict[str, float] = collections.defaultdict(float)
        for row in rows:
            modules[row["id"].split("::")[0]] += row["end"] - row["start"]
        span = max(r["end"] for r in rows) - min(r["start"] for r in rows)
        lines.append(f"{path.stem}: {len(rows)} tests, {span:.0f} s from first start to last end, "
                     f"{sum(modules.values()):.0f} s in tests")
        lines += [f"  {seconds:7.1f} s  {module}" for module, seconds in
                  sorted(modules.items(), key=lambda item: -item[1])]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
