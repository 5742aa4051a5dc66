"""Studies on the production topology: a real Redis, a real `smd api` (auth on, its sweeper) and two
real `smd worker` processes sharing a database (SQLite and PostgreSQL); users and keys made with the CLI.

- A 12-point study uses both workers, its children start in point order, and another user's single
  job submitted after the study started is not held back behind the study's remaining points.
- A worker SIGKILLed mid-study: its child resumes on another worker from its checkpoint, and the
  study's table equals the table of the same children run by the engine in this process.
"""
from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import httpx
import pytest

import smdengine
from tests.conftest import POSTGRES_ONLY
from tests.integration.procs import Processes, smd_cli
from tests.presetruns import run_children
from tests.servers import free_port

pytestmark = pytest.mark.integration   # and serial: tests/conftest.py SERIAL_MODULES
ENDED = {"succeeded", "failed", "cancelled", "partial"}


def nrq(trials: int, steps: int, record_every: int) -> dict:
    return {"kind": "nrq", "seed": 0, "device": "cpu",
            "params": {"dim": 10, "trials": trials, "steps": steps, "record_every": record_every}}


class Stack(Processes):
    """An API (auth on) and named workers (concurrency 1 each) on one Redis and one database."""

    def __init__(self, tmp, redis_url, database_url, users=("alice", "bob")):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        super().__init__(tmp, {**os.environ, "SMD_BROKER_URL": redis_url, "SMD_DATABASE_URL": database_url,
                               "SMD_STATE_DIR": str(tmp / "state"), "SMD_PORT": str(self.port), "SMD_AUTH": "on",
                               "SMD_FLUSH_SECONDS": "0.3", "SMD_LEASE_SECONDS": "3", "SMD_SWEEP_SECONDS": "0.5",
                               "SMD_CHECKPOINT_SECONDS": "0.5", "SMD_WORKER_CONCURRENCY": "1",
                               "SMD_WORKER_QUEUES": "cpu", "SMD_SOFT_SHUTDOWN_SECONDS": "2"})
        self.keys = {}
        for name in users:   # ~1 s a CLI run
            smd_cli(self.env, "users", "create", name)
            self.keys[name] = smd_cli(self.env, "keys", "create", name).strip()
        self.start_api(self.base)

    def client(self, user: str) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {self.keys[user]}"}, timeout=30)


@pytest.fixture
def stack(tmp_path, redis_url, database_url):
    s = Stack(tmp_path, redis_url, database_url)
    try:
        yield s
    finally:
        s.close()


def when(value: str) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC)


def wait_study(client: httpx.Client, study_id: str, done, timeout: float = 240, logs=lambda: "") -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(f"/v1/studies/{study_id}").json()
        if done(body):
            return body
        assert time.monotonic() < deadline, (body, logs())
        time.sleep(0.2)


def children(client: httpx.Client, study: dict) -> list[dict]:
    """Every child as its experiment (with started_at and worker), in study order."""
    return [client.get(f"/v1/experiments/{child['id']}").json()
            for child in sorted(study["children"], key=lambda c: c["index"])]


@POSTGRES_ONLY
def test_a_study_uses_both_workers_in_point_order_and_holds_back_no_other_user(stack):
    stack.start_worker("w1")
    stack.start_worker("w2")
    alice, bob = stack.client("alice"), stack.client("bob")
    # one child per claim ("fuse": false): this is about how single children spread over workers
    study = {"name": "twelve", "base": nrq(128, 6000, 200), "grid": {"params.lr": [0.05, 0.1, 0.2, 0.4],
                                                                      "params.weight_decay": [0.005, 0.01, 0.02]},
             "fuse": False}
    r = alice.post("/v1/studies", json=study)
    assert r.status_code == 202, r.text
    assert r.headers["Location"] == f"/v1/studies/{r.json()['id']}"
    study_id = r.json()["id"]
    wait_study(alice, study_id, lambda b: b["status"] == "running", logs=stack.logs)
    r = bob.post("/v1/experiments", json=nrq(64, 2000, 100))
    assert r.status_code == 202, r.text
    single = r.json()["id"]
    body = wait_study(alice, study_id, lambda b: b["status"] in ENDED, logs=stack.logs)
    assert body["status"] == "succeeded", (body, stack.logs())
    runs = children(alice, body)
    assert len(runs) == 12 and all(run["status"] == "succeeded" for run in runs)
    assert {run["worker"] for run in runs} == {"w1", "w2"}, [run["worker"] for run in runs]
    starts = [when(run["started_at"]) for run in runs]
    assert starts == sorted(starts)   # point order
    bobs = bob.get(f"/v1/experiments/{single}").json()
    deadline = time.monotonic() + 60
    while bobs["status"] != "succeeded":
        assert time.monotonic() < deadline, bobs
        time.sleep(0.2)
        bobs = bob.get(f"/v1/experiments/{single}").json()
    assert when(bobs["started_at"]) < starts[-1], (bobs["started_at"], [run["started_at"] for run in runs])
    assert bob.get(f"/v1/studies/{study_id}").status_code == 404   # alice's private study
    table = alice.get(f"/v1/studies/{study_id}/table").json()
    assert len(table["rows"]) == 12


@POSTGRES_ONLY
def test_a_worker_killed_mid_study_loses_nothing(alice_stack):
    stack = alice_stack
    stack.start_worker("w1")
    stack.start_worker("w2")
    alice = stack.client("alice")
    study = {"name": "killed", "base": nrq(256, 30_000, 300), "grid": {"params.lr": [0.1, 0.2]},
             "seeds": [0, 1]}
    r = alice.post("/v1/studies", json=study)
    assert r.status_code == 202, r.text
    study_id = r.json()["id"]

    busy: list[str] = []

    def mid_child(body: dict) -> bool:   # a worker is a third into a child: past its first checkpoints
        # (either worker: the first to claim may take every sibling as one fused batch)
        busy[:] = [alice.get(f"/v1/experiments/{c['id']}").json()["worker"]
                   for c in body["children"] if c["status"] == "running" and c["progress"] > 0.3]
        return bool(busy)

    wait_study(alice, study_id, mid_child, timeout=120, logs=stack.logs)
    stack.kill_worker(busy[0])
    stack.start_worker("w3")
    body = wait_study(alice, study_id, lambda b: b["status"] in ENDED, timeout=300, logs=stack.logs)
    assert body["status"] == "succeeded", (body, stack.logs())
    runs = children(alice, body)
    assert any(run["attempts"] == 2 for run in runs), [run["attempts"] for run in runs]
    served = alice.get(f"/v1/studies/{study_id}/table").json()
    # the same children run here uninterrupted, as one fused batch: bit for bit their runs alone
    # (tests/engine/test_fused.py), the per-update overhead paid once
    records, _ = run_children(smdengine.expand_study(study), fuse=True)
    local = smdengine.study_table(records)
    assert [{k: v for k, v in row.items() if k != "experiment_id"} for row in served["rows"]] == \
           [{k: v for k, v in row.items() if k != "experiment_id"} for row in local]
