"""A database that goes away mid-job (issue 15, point 5): a real PostgreSQL is stopped and started
again on the same port while a real `smd worker` runs a job and a real `smd api` (with its sweeper)
serves. The job rides out the outages in the same attempt, with exact results; an attempt lost while
the database was down does not count (SMD_MAX_ATTEMPTS=1 throughout, so any counted loss would fail
the job); the API answers 503 while the database is down.

Short leases and sweeps: SMD_LEASE_SECONDS=3 (renewed every second), SMD_SWEEP_SECONDS=0.5.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import small_spec
from tests.integration.procs import Processes, attempts, results, submit, wait_checkpoint, wait_http, wait_status
from tests.servers import free_port, redis_server, restartable_postgres

pytestmark = pytest.mark.integration   # and serial: tests/conftest.py SERIAL_MODULES
TERMINAL = {"succeeded", "failed", "cancelled"}
LEASE = 3.0
# ~5-10 s of work on a CPU core, 300 recorded points
SPEC = small_spec(trials=256, steps=60_000, record_every=200)


class Stack(Processes):
    def __init__(self, tmp: Path, pg, redis_url: str):
        self.pg = pg
        self.database_url = pg.url
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        super().__init__(tmp, {
            **os.environ, "SMD_BROKER_URL": redis_url, "SMD_DATABASE_URL": pg.url,
            "SMD_STATE_DIR": str(tmp / "state"), "SMD_PORT": str(self.port), "SMD_AUTH": "off",
            "SMD_FLUSH_SECONDS": "0.3", "SMD_CHECKPOINT_SECONDS": "0.5", "SMD_LEASE_SECONDS": str(LEASE),
            "SMD_SWEEP_SECONDS": "0.5", "SMD_MAX_ATTEMPTS": "1", "SMD_SOFT_SHUTDOWN_SECONDS": "2",
            "SMD_DB_RETRY_SECONDS": "2", "SMD_DB_REQUEST_RETRY_SECONDS": "0.5", "SMD_WORKER_DB_WAIT_SECONDS": "60"})
        self.start_api()
        self.reference: dict | None = None


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("outage")
    with restartable_postgres() as pg, redis_server() as redis_url:
        s = Stack(tmp, pg, redis_url)
        try:
            wait_http(f"{s.base}/healthz", s.api, tmp / "api.log")
            s.start_worker("w1")
            yield s
        finally:
            s.close()


def reference(stack) -> dict:
    """The results of the same spec run without interruption (once per module)."""
    if stack.reference is None:
        exp_id = submit(stack, SPEC)
        assert wait_status(stack.base, exp_id, TERMINAL, timeout=180)["status"] == "succeeded", stack.logs()
        stack.reference = results(stack, exp_id)
    return stack.reference


def outage(stack, seconds: float) -> None:
    stack.pg.stop()
    time.sleep(seconds)
    stack.pg.start()


def finished(stack, exp_id) -> dict:
    done = wait_status(stack.base, exp_id, TERMINAL, timeout=180)
    assert done["status"] == "succeeded", (done, stack.logs())
    got = results(stack, exp_id)
    assert got["series"]["step"] == [*range(0, 60_000, 200), 60_000]
    assert got == reference(stack)                      # exact: equal to an uninterrupted run
    assert f"experiment {exp_id} failed" not in stack.logs()
    return done


def test_job_rides_out_an_outage_shorter_than_its_lease(stack):
    exp_id = submit(stack, SPEC)
    wait_checkpoint(stack, exp_id)
    outage(stack, LEASE - 0.5)
    done = finished(stack, exp_id)
    assert done["attempts"] == 1 and [o for _, _, o, _ in attempts(stack, exp_id)] == ["succeeded"]


def test_job_rides_out_several_short_outages(stack):
    exp_id = submit(stack, SPEC)
    wait_checkpoint(stack, exp_id)
    for _ in range(4):
        outage(stack, 1.5)
        time.sleep(0.7)
    done = finished(stack, exp_id)
    assert done["attempts"] == 1 and [o for _, _, o, _ in attempts(stack, exp_id)] == ["succeeded"]


def test_job_rides_out_an_outage_longer_than_its_lease(stack):
    """The lease lapses during the outage; the sweeper waits a lease period after the database is
    back before expiring anything, the worker renews meanwhile and goes on in the same attempt."""
    exp_id = submit(stack, SPEC)
    wait_checkpoint(stack, exp_id)
    outage(stack, 2.5 * LEASE)
    done = finished(stack, exp_id)
    assert done["attempts"] == 1 and [o for _, _, o, _ in attempts(stack, exp_id)] == ["succeeded"]


def test_attempt_lost_during_an_outage_does_not_count(stack):
    """The worker dies while the database is down: its lease lapses within the outage, the attempt
    ends `interrupted`, and with SMD_MAX_ATTEMPTS=1 the job still gets its next attempt, which
    resumes from the checkpoint."""
    exp_id = submit(stack, SPEC)
    checkpoint_step = wait_checkpoint(stack, exp_id)
    stack.pg.stop()
    stack.kill_worker("w1")
    time.sleep(LEASE + 1)
    stack.pg.start()
    stack.start_worker("w2")
    done = finished(stack, exp_id)
    history = attempts(stack, exp_id)
    assert [(n, w, o) for n, w, o, _ in history] == [(1, "w1", "interrupted"), (2, "w2", "succeeded")], history
    assert history[1][3] >= checkpoint_step > 0 and done["attempts"] == 2


def test_api_answers_503_while_the_database_is_down(stack):
    exp_id = submit(stack, SPEC)
    stack.pg.stop()
    try:
        t0 = time.monotonic()
        r = httpx.get(f"{stack.base}/v1/experiments/{exp_id}", timeout=10)
        assert r.status_code == 503, r.text
        assert time.monotonic() - t0 < 5
        assert int(r.headers["Retry-After"]) > 0 and "database" in r.json()["detail"]
        assert httpx.post(f"{stack.base}/v1/experiments", json=SPEC, timeout=10).status_code == 503
        ready = httpx.get(f"{stack.base}/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["database"].startswith("error")
    finally:
        stack.pg.start()
    assert httpx.get(f"{stack.base}/v1/experiments/{exp_id}", timeout=10).status_code == 200
    assert httpx.get(f"{stack.base}/readyz", timeout=10).status_code == 200
    httpx.post(f"{stack.base}/v1/experiments/{exp_id}/cancel", timeout=10)
    assert wait_status(stack.base, exp_id, TERMINAL, timeout=60)["status"] in ("cancelled", "succeeded")
