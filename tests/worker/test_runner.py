"""The runner on SQLite and PostgreSQL with the real engine: resume, refused checkpoints, lost leases."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

from sqlalchemy import update

import smdengine
from store import jobs
from store.migrate import upgrade_head
from store.models import Experiment, utcnow
from store.series import read_series
from tests.conftest import small_spec
from tests.dbutil import session_scope
from worker.runner import execute, execute_next


def make(settings, spec) -> str:
    upgrade_head(settings.db_url)
    parsed = smdengine.parse_spec(spec)
    with session_scope(settings.db_url) as s:
        return jobs.create(s, kind=parsed.kind, name=None, spec=parsed.model_dump(mode="json"),
                           total_steps=parsed.params.steps).id


def stored_checkpoint(settings, experiment_id, data: bytes, step=100, n_points=5):
    """A checkpoint left by a lost first attempt."""
    with session_scope(settings.db_url) as s:
        c = jobs.claim_next(s, ["cpu"], "w0", 60)
        jobs.save_checkpoint(s, c, step, n_points, data)
        s.execute(update(Experiment).where(Experiment.id == experiment_id)
                  .values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    with session_scope(settings.db_url) as s:
        assert jobs.expire_leases(s, 3) == [experiment_id]


def test_resume_from_stored_checkpoint_matches_uninterrupted(settings):
    spec = small_spec(steps=400, record_every=20)
    checkpoints = []

    class Stop(Exception):
        pass

    def save(c):
        checkpoints.append(c)
        if c.step >= 150:
            raise Stop

    try:
        smdengine.run(spec, progress_interval=0.0, checkpoint=smdengine.CheckpointHooks(save=save, interval=0.0))
    except Stop:
        pass
    ck = checkpoints[-1]
    resumed = make(settings, spec)
    stored_checkpoint(settings, resumed, ck.to_bytes(), ck.step, ck.n_points)
    assert execute(settings, resumed, worker="w1") == "succeeded"
    fresh = make(settings, spec)
    assert execute(settings, fresh) == "succeeded"
    with session_scope(settings.db_url) as s:
        a, b = s.get(Experiment, resumed), s.get(Experiment, fresh)
        assert a.attempts == 2 and a.summary == b.summary
        assert read_series(s, resumed) == read_series(s, fresh)
        assert jobs.attempts(s, resumed)[1].resumed_from_step == ck.step
        assert jobs.load_checkpoint(s, resumed) is None      # dropped at the end


def test_unusable_checkpoints_restart_from_scratch(settings):
    spec = small_spec(steps=200, record_every=20)
    other = smdengine.Checkpoint(step=100, n_points=5, state={}, series={}, fingerprint="another run")
    for data in (b"not a checkpoint", other.to_bytes()):
        exp = make(settings, spec)
        stored_checkpoint(settings, exp, data)
        assert execute(settings, exp) == "succeeded"
        with session_scope(settings.db_url) as s:
            assert read_series(s, exp)["step"] == [*range(0, 200, 20), 200]
            assert jobs.attempts(s, exp)[1].resumed_from_step is None


def test_worker_that_lost_its_lease_stops_and_writes_nothing(settings):
    exp = make(settings, small_spec(trials=256, steps=5_000_000, record_every=1000))
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.setdefault("status", execute_next(settings, ["cpu"], "w1")))
    runner.start()
    deadline = time.monotonic() + 30
    while True:
        with session_scope(settings.db_url) as s:
            if s.get(Experiment, exp).step > 0:
                break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with session_scope(settings.db_url) as s:   # w1 looks dead to the sweeper; w2 takes the job
        s.execute(update(Experiment).where(Experiment.id == exp).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
        assert jobs.expire_leases(s, 3) == [exp]
    with session_scope(settings.db_url) as s:
        thief = jobs.claim_next(s, ["cpu"], "w2", 60)
        s.execute(update(Experiment).where(Experiment.id == exp).values(step=0))
    runner.join(timeout=30)
    assert outcome["status"] == "lost"
    with session_scope(settings.db_url) as s:
        row = s.get(Experiment, exp)
        assert row.status == "running" and row.lease_owner == thief.owner and row.step == 0   # untouched by w1
        jobs.request_cancel(s, exp)
