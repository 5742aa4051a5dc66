"""GET /v1/experiments over 10 000 stored experiments: how long the list queries of issue 20 take.

Seeds a temporary SQLite database through the store (10 000 nrq experiments with summaries, 3 tags each
from 20, lr from 8 values), then times, in one process through the ASGI app (FastAPI's TestClient, no
network), the first page (50 items) of each query, best-of and p50/p99 over ``--repeat`` calls:

  newest          no filter
  tag             tag=t7
  param           param.params.lr=0.1
  summary+order   summary.au_rms.lt=0.05 & order_by=-summary.au_rms & include=summary
  all             tag + param + summary + order
  order page 100  order_by=-summary.au_rms, the 100th page (its cursor from walking the 99 before)
  csv             /v1/experiments.csv?tag=t7 (every match, ~1 500 rows)

Target: each list query < 100 ms (p50) on the development machine. ``--postgres URL`` runs the same on a
PostgreSQL database instead (it must be empty: the bench creates its tables).

    .venv/bin/python bench/list_query.py [--n 10000] [--repeat 30] [--postgres URL]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from _machine import load_average
from fastapi.testclient import TestClient  # noqa: E402

from api.main import create_app  # noqa: E402
from store.settings import Settings  # noqa: E402

QUERIES = {
    "newest": ("/v1/experiments", {}),
    "tag": ("/v1/experiments", {"tag": "t7"}),
    "param": ("/v1/experiments", {"param.params.lr": 0.1}),
    "summary+order": ("/v1/experiments", {"summary.au_rms.lt": 0.05, "order_by": "-summary.au_rms",
                                          "include": "summary"}),
    "all": ("/v1/experiments", {"tag": "t7", "param.params.lr": 0.1, "summary.au_rms.lt": 0.05,
                                "order_by": "-summary.au_rms"}),
    "order page 100": ("/v1/experiments", {"order_by": "-summary.au_rms"}),
    "csv": ("/v1/experiments.csv", {"tag": "t7"}),
}
DEEP = {"order page 100": 99}   # pages walked before the timed one
LRS = [0.0125 * 2 ** (i / 2) for i in range(8)]


def seed(url: str, n: int) -> None:
    """n succeeded experiments of the user "local" (the app made it: auth off), 1000 per transaction."""
    from sqlalchemy import select

    from store.db import run
    from store.models import Experiment, ExperimentTag, Status, User

    owner_id = run(url, lambda s: s.scalars(select(User.id).where(User.name == "local")).one())
    rng = random.Random(0)

    def batch(start: int):
        def work(session):
            for i in range(start, min(n, start + 1000)):
                lr = LRS[i % len(LRS)]
                au = (2 * lr * 0.01) ** 0.5 * (1 + 0.05 * rng.uniform(-1, 1))
                spec = {"kind": "nrq", "seed": i, "device": "cpu",
                        "params": {"dim": 10, "lr": lr, "weight_decay": 0.01, "trials": 100, "steps": 1000,
                                   "record_every": 10, "dtype": "float64"}}
                session.add(Experiment(kind="nrq", name=f"run {i}", spec=spec, status=Status.succeeded,
                                       progress=1.0, step=1000, total_steps=1000, owner_id=owner_id,
                                       visibility="private", priority=1, revision=1,
                                       summary={"au_rms": au, "risk": rng.random()},
                                       tag_rows=[ExperimentTag(tag=f"t{t}") for t in rng.sample(range(20), 3)]))
        return work

    for start in range(0, n, 1000):
        run(url, batch(start))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--postgres", help="an empty PostgreSQL database URL instead of a temporary SQLite file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.postgres or f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
        settings = Settings(database_url=url, state_dir=Path(tmp) / "state", auth="off", sweeper=False)
        with TestClient(create_app(settings)) as client:
            client.get("/v1/experiments")   # the app has migrated and made the user "local"
            t0 = time.perf_counter()
            seed(settings.db_url, args.n)
            print(f"{args.n} experiments seeded in {time.perf_counter() - t0:.1f} s ({url.split(':')[0]}); "
                  f"load {load_average()}")
            print(f"{'query':16}{'matches':>9}{'best ms':>10}{'p50 ms':>9}{'p99 ms':>9}")
            worst = 0.0
            for name, (path, params) in QUERIES.items():
                for _ in range(DEEP.get(name, 0)):
                    params = {**params, "cursor": client.get(path, params=params).json()["next_cursor"]}
                first = client.get(path, params=params)
                assert first.status_code == 200, first.text
                matches = (first.json()["total"] if path.endswith("experiments")
                           else first.text.count("\n") - 1)
                times = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    client.get(path, params=params)
                    times.append(1000 * (time.perf_counter() - t0))
                times.sort()
                p50, p99 = statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]
                if path.endswith("experiments"):
                    worst = max(worst, p50)
                print(f"{name:16}{matches:9d}{times[0]:10.1f}{p50:9.1f}{p99:9.1f}")
            print(f"slowest list query p50 {worst:.1f} ms: {'within' if worst < 100 else 'OVER'} the 100 ms target; "
                  f"load {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
