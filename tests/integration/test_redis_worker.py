"""End to end on the production topology: a real redis-server, a real `smd worker` process and a
real `smd api` process, on SQLite and PostgreSQL."""
from __future__ import annotations

import itertools
import os
import sys

import httpx
import pytest

from tests.conftest import small_spec
from tests.integration.procs import TEARDOWN_SECONDS, spawn, stop, wait_http, wait_status
from tests.servers import free_port

pytestmark = pytest.mark.integration
_redis_db = itertools.count(1)


@pytest.fixture
def service(tmp_path, redis_url, database_url):
    """(base URL, procs): an API and a worker sharing a Redis broker and a database."""
    port = free_port()
    env = {**os.environ, "SMD_BROKER_URL": redis_url.rsplit("/", 1)[0] + f"/{next(_redis_db) % 16}",
           "SMD_DATABASE_URL": database_url, "SMD_STATE_DIR": str(tmp_path / "state"),
           "SMD_PORT": str(port), "SMD_FLUSH_SECONDS": "0.3", "SMD_AUTH": "off"}
    worker = spawn([sys.executable, "-m", "smdcli.main", "worker"], env, tmp_path / "worker.log")
    api = spawn([sys.executable, "-m", "smdcli.main", "api"], env, tmp_path / "api.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz", api, tmp_path / "api.log")
        yield base, {"worker": worker, "api": api, "logs": tmp_path}
    finally:
        stop(api, worker, timeout=TEARDOWN_SECONDS)


def test_submit_poll_results_plot(service):
    base, procs = service
    r = httpx.post(f"{base}/v1/experiments", json=small_spec(trials=200, steps=2000, record_every=50))
    assert r.status_code == 202, r.text
    exp_id = r.json()["id"]
    assert r.headers["location"] == f"/v1/experiments/{exp_id}"
    done = wait_status(base, exp_id, {"succeeded", "failed", "cancelled"})
    assert done["status"] == "succeeded", (done, (procs["logs"] / "worker.log").read_text()[-3000:])
    doc = httpx.get(f"{base}/v1/experiments/{exp_id}/results").json()
    assert len(doc["series"]["step"]) == 41 and len(doc["series"]["risk"]) == 41
    # tail risk near the stationary prediction (200 trials: loose, this is a plumbing test)
    assert abs(doc["summary"]["risk"] / doc["summary"]["risk_stationary"] - 1) < 0.25
    png = httpx.get(f"{base}/v1/experiments/{exp_id}/plots/risk.png")
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")


def test_cancel_running_job_via_worker(service):
    base, _ = service
    exp_id = httpx.post(f"{base}/v1/experiments", json=small_spec(trials=256, steps=5_000_000)).json()["id"]
    wait_status(base, exp_id, {"running"}, timeout=60)
    assert httpx.post(f"{base}/v1/experiments/{exp_id}/cancel").status_code == 202
    done = wait_status(base, exp_id, {"cancelled", "succeeded", "failed"}, timeout=15)
    assert done["status"] == "cancelled" and done["progress"] < 1
