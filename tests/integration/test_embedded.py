"""The embedded default exactly as `make run` starts it: SQLite file, filesystem broker, one
supervised worker child. Includes a worker killed by SIGKILL mid-job: the job is not lost."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import httpx
import pytest

from store import jobs
from tests.conftest import REPO, small_spec
from tests.dbutil import session_scope
from tests.integration.procs import TEARDOWN_SECONDS, group_members, spawn, stop, wait_http, wait_status
from tests.servers import free_port

pytestmark = pytest.mark.integration   # and serial: tests/conftest.py SERIAL_MODULES


@pytest.fixture
def embedded(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMD_")}
    env.update(SMD_PORT=str(port), SMD_STATE_DIR=str(tmp_path / "state"), SMD_FLUSH_SECONDS="0.3",
               SMD_CHECKPOINT_SECONDS="0.5", SMD_SWEEP_SECONDS="0.5")
    log = tmp_path / "serve.log"
    proc = spawn(["make", "--no-print-directory", "run"], env, log, cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz", proc, log, timeout=300)  # make may first install the venv
        yield base, proc, tmp_path
    finally:
        stop(proc, timeout=TEARDOWN_SECONDS)


def test_make_run_end_to_end(embedded):
    base, _, tmp = embedded
    health = httpx.get(f"{base}/healthz").json()
    assert health["broker"] == "filesystem" and health["database"] == "ok"
    exp_id = httpx.post(f"{base}/v1/experiments", json=small_spec()).json()["id"]
    done = wait_status(base, exp_id, {"succeeded", "failed", "cancelled"})
    assert done["status"] == "succeeded", (tmp / "serve.log").read_text()[-3000:]
    assert (tmp / "state" / "smd.sqlite3").exists()
    doc = httpx.get(f"{base}/v1/experiments/{exp_id}/results", params={"max_points": 5}).json()
    assert len(doc["series"]["step"]) == 5 and doc["summary"]["au_rms"] > 0
    png = httpx.get(f"{base}/v1/experiments/{exp_id}/plots/au.png")
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")


def test_sigkilled_worker_does_not_lose_the_job(embedded):
    """The supervisor restarts the worker and expires its lease at once; attempt 2 resumes from the
    checkpoint and ends with the results of an uninterrupted run. A second service started on the same state
    folder or port is refused."""
    base, proc, tmp = embedded
    # a second service on the same state folder (it expired this one's leases, its worker having the same name,
    # before it failed on the port), or on the same port, is refused before it touches a job (before its sweep)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMD_")}
    port = base.rsplit(":", 1)[1]
    for state, listen, reason in ((tmp / "state", str(free_port()), "uses the state folder"),
                                  (tmp / "other", port, f"cannot listen on 127.0.0.1:{port}")):
        second = subprocess.run(["make", "--no-print-directory", "run"], cwd=REPO, capture_output=True, text=True,
                                timeout=120, env={**env, "SMD_STATE_DIR": str(state), "SMD_PORT": listen})
        assert second.returncode != 0 and "refusing to start" in second.stderr and reason in second.stderr, \
            second.stderr[-2000:]
    spec = small_spec(trials=256, steps=20_000, record_every=100)
    exp_id = httpx.post(f"{base}/v1/experiments", json=spec).json()["id"]
    wait_status(base, exp_id, {"running"}, timeout=60)
    db = f"sqlite:///{tmp / 'state' / 'smd.sqlite3'}"
    deadline = time.monotonic() + 60
    while True:
        with session_scope(db) as s:
            stored = jobs.load_checkpoint(s, exp_id)
            if stored is not None and stored.step > 0:
                break
        assert time.monotonic() < deadline, (tmp / "serve.log").read_text()[-3000:]
        time.sleep(0.1)
    workers = group_members(os.getpgid(proc.pid), "smdcli.main worker")
    assert workers, "no worker process found"
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    done = wait_status(base, exp_id, {"succeeded", "failed", "cancelled"}, timeout=180)
    assert done["status"] == "succeeded", (tmp / "serve.log").read_text()[-3000:]
    assert done["attempts"] == 2
    with session_scope(db) as s:
        history = jobs.attempts(s, exp_id)
    assert [a.outcome for a in history] == ["lost", "succeeded"] and history[1].resumed_from_step > 0
    reference = httpx.post(f"{base}/v1/experiments", json=spec).json()["id"]
    assert wait_status(base, reference, {"succeeded", "failed", "cancelled"}, timeout=180)["status"] == "succeeded"
    docs = [httpx.get(f"{base}/v1/experiments/{i}/results").json() for i in (exp_id, reference)]
    assert docs[0]["series"]["step"] == [*range(0, 20_000, 100), 20_000]  # complete, no duplicated points
    assert [{k: d[k] for k in ("series", "theory", "summary")} for d in docs][0] == \
        {k: docs[1][k] for k in ("series", "theory", "summary")}


def test_restarted_service_loses_nothing(embedded):
    """`make run` stopped with Ctrl-C (SIGINT to its whole process group, as a terminal sends) and started
    again on the same state directory while a job runs, another waits and an event stream watches the first:
    the running job is handed back (``released``) by a warm shutdown that ends on its own, without an error,
    and the stream is closed; both jobs complete, the first resumed from its checkpoint by attempt 2."""
    base, proc, tmp = embedded
    # ~2.5 s of updates on an idle machine: the stop comes right after its first checkpoint (0.5 s in)
    spec = small_spec(trials=256, steps=20_000, record_every=200)
    running = httpx.post(f"{base}/v1/experiments", json=spec).json()["id"]
    waiting = httpx.post(f"{base}/v1/experiments", json=small_spec()).json()["id"]
    wait_status(base, running, {"running"}, timeout=60)
    db = f"sqlite:///{tmp / 'state' / 'smd.sqlite3'}"
    deadline = time.monotonic() + 60
    while True:
        with session_scope(db) as s:
            if jobs.load_checkpoint(s, running) is not None:
                break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # a dashboard open on the running job: its event stream ends only with the job, and held the stop off
    streaming = threading.Event()

    closed = threading.Event()

    def watch() -> None:
        try:
            with httpx.stream("GET", f"{base}/v1/experiments/{running}/events", timeout=None) as events:
                streaming.set()
                for _ in events.iter_lines():
                    pass
        except httpx.HTTPError:   # closed mid-stream by the stopping server
            pass
        closed.set()

    threading.Thread(target=watch, daemon=True).start()
    assert streaming.wait(10)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(45)   # the warm shutdown's ~7 s, at most 3 + 20 + 5 s
    assert closed.wait(5)
    log = (tmp / "serve.log").read_text()
    # no pool process ended by a signal or an exit code, no cold shutdown after the warm one's deadline
    assert not any(word in log for word in ("ERROR", "Cold shutdown", "Soft Shutdown")), log[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMD_")}
    env.update(SMD_PORT=base.rsplit(":", 1)[1], SMD_STATE_DIR=str(tmp / "state"), SMD_FLUSH_SECONDS="0.3",
               SMD_CHECKPOINT_SECONDS="0.5", SMD_SWEEP_SECONDS="0.5")
    again = spawn(["make", "--no-print-directory", "run"], env, tmp / "serve2.log", cwd=REPO)
    try:
        wait_http(f"{base}/healthz", again, tmp / "serve2.log", timeout=120)
        for exp_id in (running, waiting):
            done = wait_status(base, exp_id, {"succeeded", "failed", "cancelled"}, timeout=180)
            assert done["status"] == "succeeded", (tmp / "serve2.log").read_text()[-3000:]
        attempts = httpx.get(f"{base}/v1/experiments/{running}/attempts").json()
        assert attempts[0]["outcome"] == "released" and attempts[1]["outcome"] == "succeeded"
        assert attempts[1]["resumed_from_step"] and attempts[1]["resumed_from_step"] > 0
        doc = httpx.get(f"{base}/v1/experiments/{running}/results").json()
        assert doc["series"]["step"] == [*range(0, 20_000, 200), 20_000]
    finally:
        stop(again, timeout=TEARDOWN_SECONDS)
