"""Leases on the database's clock: hosts whose clocks are off run every job in one attempt.

A real `smd api` (with its sweeper) and a real `smd worker`, each under libfaketime (tests/integration/clocks.py):
the worker's host 10 minutes behind, the API's 7 minutes ahead, on PostgreSQL and Redis. A lease written with the worker's clock looked expired to the API's sweeper at once:
every attempt ended `lost` and the job `failed` after SMD_MAX_ATTEMPTS. Every lease write and expiry test now
reads the database server's clock inside its statement (store/clock.py), so no host's clock matters.

SQLite is not run here: its clock is that of each process that opens the file (a library, not a server), and
processes sharing a SQLite file share one host, hence one clock; faking one process's clock would model a
setup that cannot exist. Its statements are covered by tests/store/test_clock.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from sqlalchemy import func, select

from store.models import Experiment, Status, as_utc
from tests.conftest import POSTGRES_ONLY, small_spec
from tests.dbutil import session_scope
from tests.integration.clocks import ClockUnavailable, wall_clock_off
from tests.integration.procs import Processes, attempts, spawn, submit, wait_http, wait_status
from tests.servers import free_port

pytestmark = pytest.mark.integration   # and serial: tests/conftest.py SERIAL_MODULES

WORKER_SKEW, API_SKEW = "-10m", "+7m"
LEASE_SECONDS = 3
JOB = small_spec(trials=256, steps=8_000, record_every=400)   # ~2 s on one core: several sweeps
TERMINAL = {"succeeded", "failed", "cancelled"}


def _clock(skew: str, tmp) -> dict[str, str]:
    """The environment of a process whose wall clock is ``skew`` off; the test is skipped, saying why, where
    libfaketime cannot be installed (no apt-get, not root, no passwordless sudo) or preloaded."""
    try:
        return wall_clock_off(skew, tmp / "clock")
    except ClockUnavailable as exc:
        pytest.skip(str(exc))


@POSTGRES_ONLY
def test_hosts_with_clocks_off_run_every_job_in_one_attempt(tmp_path, database_url, redis_url):
    worker_clock, api_clock = _clock(WORKER_SKEW, tmp_path), _clock(API_SKEW, tmp_path)
    # the worker's clock really is off (else this test would prove nothing), and it can sleep
    behind = time.time() - float(subprocess.run(
        [sys.executable, "-c", "import time; time.sleep(0.1); print(time.time())"],
        env={**os.environ, **worker_clock}, capture_output=True, text=True, timeout=30, check=True).stdout)
    assert 590 < behind < 610, behind

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "SMD_BROKER_URL": redis_url, "SMD_DATABASE_URL": database_url,
           "SMD_STATE_DIR": str(tmp_path / "state"), "SMD_PORT": str(port), "SMD_AUTH": "off",
           "SMD_FLUSH_SECONDS": "0.3", "SMD_LEASE_SECONDS": str(LEASE_SECONDS), "SMD_SWEEP_SECONDS": "0.5",
           "SMD_CHECKPOINT_SECONDS": "0.5", "SMD_MAX_ATTEMPTS": "3", "SMD_SOFT_SHUTDOWN_SECONDS": "2"}
    stack = Processes(tmp_path, env)
    try:
        stack.api = spawn([sys.executable, "-m", "smdcli.main", "api"], {**env, **api_clock}, tmp_path / "api.log")
        wait_http(f"{base}/healthz", stack.api, tmp_path / "api.log")
        stack.workers["skewed"] = spawn([sys.executable, "-m", "smdcli.main", "worker"],
                                        {**env, **worker_clock, "SMD_WORKER_NAME": "skewed"}, tmp_path / "skewed.log")
        here = SimpleNamespace(base=base, database_url=database_url)
        ids = [submit(here, JOB) for _ in range(3)]
        # made by the API host 7 minutes ahead, stamped with the database's time (the fair queue compares them)
        with session_scope(database_url) as s:
            made = s.execute(select(func.max(Experiment.created_at), func.statement_timestamp())).one()
        assert abs((as_utc(made[1]) - as_utc(made[0])).total_seconds()) < 60, made

        # while a job runs, its lease ends within a lease of the database's now (not 10 minutes before it)
        deadline = time.monotonic() + 90
        while True:
            with session_scope(database_url) as s:
                row = s.execute(select(Experiment.lease_expires_at, func.statement_timestamp())
                                .where(Experiment.status == Status.running,
                                       Experiment.lease_expires_at.is_not(None))).first()
            if row is not None:
                break
            assert time.monotonic() < deadline, f"no job started\n{stack.logs()}"
            time.sleep(0.05)
        left = (as_utc(row[0]) - as_utc(row[1])).total_seconds()

        for exp_id in ids:
            done = wait_status(base, exp_id, TERMINAL, timeout=90)
            assert (done["status"], done["attempts"]) == ("succeeded", 1), \
                (done, attempts(here, exp_id), f"lease left while running: {left:.1f} s", stack.logs())
            assert attempts(here, exp_id) == [(1, "skewed", "succeeded", None)]
        assert 0 < left <= LEASE_SECONDS + 0.5, left
        print(f"API host 7 min ahead, worker host 10 min behind: {len(ids)} jobs, attempts "
              f"{[attempts(here, i) for i in ids]}; a running job's lease ended {left:.1f} s after the database's "
              f"now (lease {LEASE_SECONDS} s); created_at {(as_utc(made[1]) - as_utc(made[0])).total_seconds():.2f} s "
              f"before the database's now")
    finally:
        stack.close()
