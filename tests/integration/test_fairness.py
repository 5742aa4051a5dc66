"""Fair share on the production topology, auth on: a real Redis, a real `smd api` and ONE `smd worker`
(concurrency 1) sharing a database (SQLite and PostgreSQL); users and keys made with the CLI.

User A queues 20 short jobs, then user B queues one: workers take jobs round-robin between users,
so B's job starts before A's third one instead of waiting behind all twenty."""
from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime

import httpx
import pytest

from tests.conftest import POSTGRES_ONLY, small_spec
from tests.integration.procs import TEARDOWN_SECONDS, smd_cli, spawn, stop, wait_http
from tests.servers import free_port

pytestmark = pytest.mark.integration   # and serial: tests/conftest.py SERIAL_MODULES
SHORT = small_spec(trials=64, steps=2000, record_every=100)   # about half a second of work
A_JOBS = 20


@pytest.fixture
def stack(tmp_path, redis_url, database_url):
    """(base URL, {user: key}, logs): an API (auth on) and one worker sharing Redis and a database."""
    port = free_port()
    env = {**os.environ, "SMD_BROKER_URL": redis_url, "SMD_DATABASE_URL": database_url,
           "SMD_STATE_DIR": str(tmp_path / "state"), "SMD_PORT": str(port), "SMD_HOST": "127.0.0.1",
           "SMD_FLUSH_SECONDS": "0.3", "SMD_AUTH": "on", "SMD_WORKER_CONCURRENCY": "1",
           "SMD_WORKER_QUEUES": "cpu", "SMD_WORKER_NAME": "w1"}
    keys = {}
    for name, admin in (("alice", False), ("bob", False), ("root", True)):
        smd_cli(env, "users", "create", name, *(["--admin"] if admin else []))
        keys[name] = smd_cli(env, "keys", "create", name).strip()
        assert keys[name].startswith("smd_"), keys[name]
    worker = spawn([sys.executable, "-m", "smdcli.main", "worker"], env, tmp_path / "worker.log")
    api = spawn([sys.executable, "-m", "smdcli.main", "api"], env, tmp_path / "api.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz", api, tmp_path / "api.log")
        yield base, keys, tmp_path
    finally:
        stop(api, worker, timeout=TEARDOWN_SECONDS)


def logs(folder) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(folder.glob("*.log")))


def when(value: str) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC)


@POSTGRES_ONLY
def test_one_users_burst_does_not_hold_back_anothers_job(stack):
    base, keys, folder = stack
    clients = {name: httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)
               for name, key in keys.items()}
    try:
        root, alice, bob = clients["root"], clients["alice"], clients["bob"]

        def submit(client, **extra) -> str:
            r = client.post("/v1/experiments", json={**SHORT, **extra})
            assert r.status_code == 202, r.text
            return r.json()["id"]

        def wait_idle(timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while True:
                body = root.get("/v1/queue", params={"all": "true"}).json()
                if not body["jobs"]:
                    return
                assert time.monotonic() < deadline, (body, logs(folder))
                time.sleep(0.2)

        # warm the worker up (process start, imports) with a job of a third user: A and B stay never served
        warm = submit(root)
        wait_idle(90)
        assert root.get(f"/v1/experiments/{warm}").json()["status"] == "succeeded", logs(folder)

        # a1 long enough (~10× SHORT) to outlast the submission of A's other jobs and B's over HTTP: with a1 as
        # short as the rest, a2 and a3 could start before b1 even exists (seen: a1 ran 0.14 s, b1 came 0.42 s later)
        long_first = {**SHORT["params"], "steps": 10 * SHORT["params"]["steps"]}
        a_ids = [submit(alice, name=f"a{i + 1}", **({"params": long_first} if i == 0 else {})) for i in range(A_JOBS)]
        b_id = submit(bob, name="b1")
        # through the real server: B's job is next (A already has one running or served) or already running
        [b_job] = bob.get("/v1/queue").json()["jobs"]
        assert b_job["id"] == b_id and (b_job["position"] == 1 or b_job["status"] == "running"), b_job

        wait_idle(60)
        rows = {i: alice.get(f"/v1/experiments/{i}").json() for i in a_ids}
        rows[b_id] = bob.get(f"/v1/experiments/{b_id}").json()
        assert {row["status"] for row in rows.values()} == {"succeeded"}, (rows, logs(folder))
        assert {row["worker"] for row in rows.values()} == {"w1"}
        order = [rows[i]["name"] for i in sorted(rows, key=lambda i: when(rows[i]["started_at"]))]
        first = rows[a_ids[0]]
        print(f"start order: {' '.join(order)} (b1 submitted "
              f"{(when(rows[b_id]['created_at']) - when(first['started_at'])).total_seconds():.2f} s after a1 started; "
              f"a1 ran {(when(first['finished_at']) - when(first['started_at'])).total_seconds():.2f} s)")
        b_started = when(rows[b_id]["started_at"])
        assert b_started < when(rows[a_ids[2]]["started_at"]), order
        assert order.index("b1") <= 2 and [n for n in order if n != "b1"] == [f"a{i + 1}" for i in range(A_JOBS)]
        # the worker ran one job at a time
        spans = sorted((when(r["started_at"]), when(r["finished_at"])) for r in rows.values())
        assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False)), spans

        # a wrong key is a 401 with the scheme to use; B cannot see A's private job, as if it did not exist
        r = httpx.get(f"{base}/v1/experiments/{a_ids[0]}", headers={"Authorization": f"Bearer {keys['bob']}x"})
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer", r.text
        r = httpx.get(f"{base}/v1/queue", headers={"Authorization": "Bearer smd_000000000000_" + "x" * 43})
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer", r.text
        r = bob.get(f"/v1/experiments/{a_ids[0]}")
        assert r.status_code == 404 and a_ids[0] in r.json()["detail"], r.text
        assert bob.get("/v1/queue", params={"all": "true"}).status_code == 403
        stats = root.get("/v1/queue").json()["queues"]["cpu"]
        assert stats["queued"] == 0 and stats["running"] == 0 and stats["mean_duration_seconds"] > 0
    finally:
        for client in clients.values():
            client.close()
