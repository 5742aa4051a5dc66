"""`smd api` with SMD_API_WORKERS=2: two processes serve one port, and they keep no state of their own: a
request answers the same whichever process takes it (the ETag of an experiment, a 304 for it, a change
seen at once by every connection), and SIGTERM stops them all."""
from __future__ import annotations

import os
import signal
import sys
import time

import httpx
import pytest

from tests.integration.procs import children, cmdline, spawn, stop, wait_http
from tests.servers import free_port

pytestmark = pytest.mark.integration


def test_two_api_processes_answer_alike(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "SMD_STATE_DIR": str(tmp_path / "state"), "SMD_PORT": str(port), "SMD_AUTH": "off",
           "SMD_API_WORKERS": "2", "SMD_LOG_LEVEL": "WARNING"}
    api = spawn([sys.executable, "-m", "smdcli.main", "api"], env, tmp_path / "api.log")
    try:
        wait_http(f"{base}/healthz", api, tmp_path / "api.log")
        served = [c for c in children(api.pid) if "spawn_main" in cmdline(c)]
        assert len(served) == 2, [cmdline(c) for c in children(api.pid)]
        with httpx.Client(base_url=base) as one:   # no worker runs here: the job stays queued
            made = one.post("/v1/experiments", json={"kind": "nrq", "params": {"steps": 1000}})
            assert made.status_code == 202, made.text
            experiment_id = made.json()["id"]
            etag = one.get(f"/v1/experiments/{experiment_id}").headers["ETag"]
        # a fresh connection each: the kernel spreads them over both processes
        for _ in range(12):
            with httpx.Client(base_url=base) as c:
                assert c.get(f"/v1/experiments/{experiment_id}").headers["ETag"] == etag
                assert c.get(f"/v1/experiments/{experiment_id}", headers={"If-None-Match": etag}).status_code == 304
        with httpx.Client(base_url=base) as c:
            assert c.post(f"/v1/experiments/{experiment_id}/cancel").status_code in (200, 202)
        for _ in range(12):   # the change is seen at once by every process
            with httpx.Client(base_url=base) as c:
                r = c.get(f"/v1/experiments/{experiment_id}", headers={"If-None-Match": etag})
                assert r.status_code == 200 and r.json()["status"] == "cancelled" and r.headers["ETag"] != etag
        os.killpg(api.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while api.poll() is None or any(cmdline(p) for p in served):
            assert time.monotonic() < deadline, "the API processes did not stop on SIGTERM"
            time.sleep(0.1)
    finally:
        stop(api, timeout=2)
