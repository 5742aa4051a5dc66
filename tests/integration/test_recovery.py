"""A job system that loses nothing, on the production topology: a real (append-only) Redis, real
`smd worker` processes and a real `smd api` process (with its sweeper), on PostgreSQL (the burst of
requests on SQLite too; SQLite's own multi-process scenarios: test_embedded.py).

Short leases and sweeps make recovery take seconds: SMD_LEASE_SECONDS=3, SMD_SWEEP_SECONDS=0.5,
SMD_CHECKPOINT_SECONDS=0.5.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import POSTGRES_ONLY, small_spec
from tests.integration.procs import (
    Processes,
    RestartableRedis,
    attempts,
    results,
    submit,
    wait_checkpoint,
    wait_status,
)
from tests.servers import free_port

pytestmark = pytest.mark.integration   # and serial: tests/conftest.py SERIAL_MODULES
TERMINAL = {"succeeded", "failed", "cancelled"}
# ~5 s of work on one idle CPU core, with 200 recorded points
LONG = small_spec(trials=256, steps=40_000, record_every=200)
ENDLESS = small_spec(trials=256, steps=5_000_000, record_every=1000)


class Stack(Processes):
    """The API and workers on one database and a restartable (append-only) Redis."""

    def __init__(self, tmp, database_url):
        self.database_url = database_url
        self.redis = RestartableRedis(tmp)
        self.redis.start()
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        super().__init__(tmp, {**os.environ, "SMD_BROKER_URL": self.redis.url, "SMD_DATABASE_URL": database_url,
                               "SMD_STATE_DIR": str(tmp / "state"), "SMD_PORT": str(self.port),
                               "SMD_FLUSH_SECONDS": "0.3", "SMD_LEASE_SECONDS": "3", "SMD_SWEEP_SECONDS": "0.5",
                               "SMD_CHECKPOINT_SECONDS": "0.5", "SMD_MAX_ATTEMPTS": "3",
                               "SMD_SOFT_SHUTDOWN_SECONDS": "2", "SMD_AUTH": "off"})

    def close(self):
        super().close()
        self.redis.stop()


@pytest.fixture
def stack(tmp_path, database_url):
    s = Stack(tmp_path, database_url)
    try:
        s.start_api(s.base)
        yield s
    finally:
        s.close()


@POSTGRES_ONLY
def test_sigkilled_worker_job_resumes_from_checkpoint_with_equal_results(stack):
    stack.start_worker("w1")
    exp_id = submit(stack, LONG)
    checkpoint_step = wait_checkpoint(stack, exp_id)
    stack.kill_worker("w1")
    stack.start_worker("w2")
    done = wait_status(stack.base, exp_id, TERMINAL, timeout=180)
    assert done["status"] == "succeeded", stack.logs()
    assert done["attempts"] == 2
    history = attempts(stack, exp_id)
    assert [(n, w, o) for n, w, o, _ in history] == [(1, "w1", "lost"), (2, "w2", "succeeded")]
    assert history[1][3] >= checkpoint_step > 0          # attempt 2 resumed, did not start over
    reference = submit(stack, LONG)                       # the same spec, never interrupted
    assert wait_status(stack.base, reference, TERMINAL, timeout=180)["status"] == "succeeded"
    resumed, uninterrupted = results(stack, exp_id), results(stack, reference)
    assert resumed["series"]["step"] == [*range(0, 40_000, 200), 40_000]
    assert resumed == uninterrupted


@POSTGRES_ONLY
def test_job_that_kills_its_worker_every_time_fails_after_max_attempts(stack):
    exp_id = submit(stack, ENDLESS)
    for attempt in (1, 2, 3):
        stack.start_worker(f"w{attempt}")
        deadline = time.monotonic() + 60
        while True:
            body = httpx.get(f"{stack.base}/v1/experiments/{exp_id}").json()
            if body["status"] == "running" and body["attempts"] == attempt:
                break
            assert time.monotonic() < deadline, (body, stack.logs())
            time.sleep(0.1)
        stack.kill_worker(f"w{attempt}")
    stack.start_worker("w4")
    done = wait_status(stack.base, exp_id, TERMINAL, timeout=60)
    assert done["status"] == "failed" and done["attempts"] == 3, done
    assert "lost during each of its 3 attempts" in done["error"]
    assert [o for _, _, o, _ in attempts(stack, exp_id)] == ["lost", "lost", "lost"]
    time.sleep(2)   # no fourth start: the worker that is still up never runs it
    assert httpx.get(f"{stack.base}/v1/experiments/{exp_id}").json()["attempts"] == 3


@POSTGRES_ONLY
def test_redis_restart_mid_job_runs_it_once(stack):
    stack.start_worker("w1")
    stack.start_worker("w2")
    exp_id = submit(stack, LONG)
    wait_status(stack.base, exp_id, {"running"}, timeout=60)
    stack.redis.stop()
    time.sleep(1.0)
    stack.redis.start()
    done = wait_status(stack.base, exp_id, TERMINAL, timeout=180)
    assert done["status"] == "succeeded", stack.logs()
    assert done["attempts"] == 1
    assert [o for _, _, o, _ in attempts(stack, exp_id)] == ["succeeded"]
    after = submit(stack, small_spec())                  # the queue works after the restart
    assert wait_status(stack.base, after, TERMINAL, timeout=60)["status"] == "succeeded", stack.logs()
    time.sleep(2)   # a redelivered message must not start the finished job again
    assert attempts(stack, exp_id)[-1][0] == 1


@POSTGRES_ONLY   # the cancel rules on SQLite: tests/store, tests/api; SQLite's processes: test_embedded.py
def test_cancel_queued_and_running(stack):
    stack.start_worker("w1")
    running = submit(stack, ENDLESS)
    wait_status(stack.base, running, {"running"}, timeout=60)
    queued = submit(stack, small_spec())                 # behind the running one (one worker)
    assert httpx.post(f"{stack.base}/v1/experiments/{queued}/cancel").status_code == 202
    time.sleep(1.5)   # let the second job's message reach the worker's queue
    deadline = time.monotonic() + 30
    while httpx.get(f"{stack.base}/v1/experiments/{running}").json()["step"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    t0 = time.monotonic()
    assert httpx.post(f"{stack.base}/v1/experiments/{running}/cancel").status_code == 202
    done = wait_status(stack.base, running, TERMINAL, timeout=10)
    assert done["status"] == "cancelled" and time.monotonic() - t0 < 5 and 0 < done["progress"] < 1
    assert len(results(stack, running)["series"]["step"]) > 0          # partial results kept
    never = httpx.get(f"{stack.base}/v1/experiments/{queued}").json()
    assert never["status"] == "cancelled" and never["attempts"] == 0 and never["started_at"] is None
    assert attempts(stack, queued) == []


@POSTGRES_ONLY   # SQLite's restarted service: tests/integration/test_embedded.py
def test_api_restart_while_jobs_run_loses_nothing(stack):
    stack.start_worker("w1")
    ids = [submit(stack, LONG), submit(stack, small_spec())]
    wait_status(stack.base, ids[0], {"running"}, timeout=60)
    os.killpg(stack.api.pid, signal.SIGKILL)
    stack.api.wait(10)
    late = None
    try:
        httpx.post(f"{stack.base}/v1/experiments", json=small_spec(), timeout=2)
    except httpx.HTTPError:
        late = "refused"
    assert late == "refused"
    stack.start_api(stack.base)
    ids.append(submit(stack, small_spec()))
    for exp_id in ids:
        done = wait_status(stack.base, exp_id, TERMINAL, timeout=180)
        assert done["status"] == "succeeded" and done["attempts"] == 1, (done, stack.logs())
    assert results(stack, ids[0])["series"]["step"] == [*range(0, 40_000, 200), 40_000]


@POSTGRES_ONLY
def test_stopped_worker_gives_its_job_back(stack):
    """SIGTERM (a deploy, a scale-down): soft shutdown, then the pool process hands the job back;
    another worker resumes it from its checkpoint without waiting for the lease to expire."""
    stack.start_worker("w1")
    exp_id = submit(stack, ENDLESS)
    wait_checkpoint(stack, exp_id)
    proc = stack.workers.pop("w1")
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    history = attempts(stack, exp_id)
    assert [(w, o) for _, w, o, _ in history] == [("w1", "released")], stack.logs()
    assert httpx.get(f"{stack.base}/v1/experiments/{exp_id}").json()["status"] == "queued"
    stack.start_worker("w2")
    deadline = time.monotonic() + 60
    while len(attempts(stack, exp_id)) < 2 or attempts(stack, exp_id)[1][3] is None:
        assert time.monotonic() < deadline, stack.logs()
        time.sleep(0.1)
    assert attempts(stack, exp_id)[1][:2] == (2, "w2") and attempts(stack, exp_id)[1][3] > 0   # resumed
    httpx.post(f"{stack.base}/v1/experiments/{exp_id}/cancel")
    assert wait_status(stack.base, exp_id, TERMINAL, timeout=30)["status"] == "cancelled"


def test_many_concurrent_requests_do_not_jam_the_api(stack):
    """120 requests at once against one API process: each route releases its pooled connection
    before the next thread-pool hop (15 connections, 40 threads used to deadlock at ~55)."""
    import asyncio

    exp_id = submit(stack, small_spec())

    async def burst():
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(base_url=stack.base, timeout=20, limits=limits) as client:
            paths = [f"/v1/experiments/{exp_id}", f"/v1/experiments/{exp_id}/results?max_points=10",
                     "/v1/experiments?limit=5"] * 40
            return await asyncio.gather(*(client.get(p) for p in paths), return_exceptions=True)

    t0 = time.monotonic()
    answers = asyncio.run(burst())
    errors = [a for a in answers if isinstance(a, Exception) or a.status_code != 200]
    assert not errors, errors[:3]
    assert time.monotonic() - t0 < 20


@POSTGRES_ONLY
def test_sigterm_to_the_pool_process_hands_its_job_back(stack):
    """SIGTERM straight to the pool process running a job (a cold shutdown's terminate, an OOM
    killer's polite first step): it checkpoints and gives the job back, then exits; the worker's
    new pool process resumes the job."""
    stack.start_worker("w1")
    exp_id = submit(stack, ENDLESS)
    wait_checkpoint(stack, exp_id)
    main = stack.workers["w1"].pid
    [pool] = [int(p) for p in (Path(f"/proc/{main}/task/{main}/children").read_text().split())]
    os.kill(pool, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while len(attempts(stack, exp_id)) < 2 or attempts(stack, exp_id)[1][3] is None:
        assert time.monotonic() < deadline, stack.logs()
        time.sleep(0.1)
    first, second = attempts(stack, exp_id)
    assert first[2] == "released" and second[:2] == (2, "w1") and second[3] > 0, stack.logs()
    httpx.post(f"{stack.base}/v1/experiments/{exp_id}/cancel")
    assert wait_status(stack.base, exp_id, TERMINAL, timeout=30)["status"] == "cancelled"
