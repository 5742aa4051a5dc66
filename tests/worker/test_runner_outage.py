"""The runner when the database goes away around a job's last writes (faults injected into its
transactions, SQLite): the outcome waits for the database, an outcome whose COMMIT went through
unseen is recognised, and past the wait the attempt is given up without counting."""
from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import exc as sa_exc

import store.db
from store import jobs, retry
from store.models import Experiment, as_utc, utcnow
from tests.conftest import small_spec
from tests.dbutil import session_scope
from tests.worker.test_runner import make
from worker import runner

pytestmark = pytest.mark.usefixtures("fresh_retry_journal")


def down() -> sa_exc.OperationalError:
    return sa_exc.OperationalError("COMMIT", {}, psycopg.OperationalError("server closed the connection unexpectedly"))


def inject(monkeypatch, fault):
    """Run the store's transactions (its door, store.db.run) through ``fault(work) -> "before" |
    "after" | None``: fail before the transaction, or after its COMMIT (the answer lost), or not at
    all. ``monkeypatch.undo()`` ends the fault injection."""
    door = store.db.run

    def faulty(url, work):
        def unit():
            mode = fault(work)
            if mode == "before":
                raise down()
            result = door(url, work)   # inside this retry.run: one try, committed
            if mode == "after":
                raise down()
            return result
        return retry.run(unit)

    monkeypatch.setattr(store.db, "run", faulty)


def is_finish(work) -> bool:
    return work.__qualname__ == "finish_claimed"   # the unit of jobs.finish_claimed (store.db.transaction)


def test_outcome_waits_for_the_database(sqlite_settings, monkeypatch):
    exp = make(sqlite_settings, small_spec())
    until: list[float] = []

    def fault(fn):
        if is_finish(fn):
            until or until.append(time.monotonic() + 1.0)     # down for 1 s from the first outcome write
            return "before" if time.monotonic() < until[0] else None
        return None

    inject(monkeypatch, fault)
    assert runner.execute(sqlite_settings, exp) == "succeeded"
    assert time.monotonic() >= until[0]
    with session_scope(sqlite_settings.db_url) as s:
        assert s.get(Experiment, exp).status == "succeeded"
        assert [a.outcome for a in jobs.attempts(s, exp)] == ["succeeded"]


def test_outcome_committed_unseen_is_recognised(sqlite_settings, monkeypatch):
    exp = make(sqlite_settings, small_spec())
    seen: list[int] = []

    def fault(fn):
        if is_finish(fn):
            seen.append(1)
            return "after" if len(seen) == 1 else None       # the first COMMIT's answer is lost
        return None

    inject(monkeypatch, fault)
    assert runner.execute(sqlite_settings, exp) == "succeeded"
    assert len(seen) == 2                                     # re-run: LeaseLost, then read back
    with session_scope(sqlite_settings.db_url) as s:
        assert s.get(Experiment, exp).status == "succeeded"


def test_attempt_given_up_in_a_long_outage_does_not_count(sqlite_settings, monkeypatch):
    settings = sqlite_settings.model_copy(update={"worker_db_wait_seconds": 0.0, "lease_seconds": 1.0})
    exp = make(settings, small_spec())
    outage = []

    def fault(fn):
        if is_finish(fn):
            outage.append(1)                                  # the database goes away as the job ends
        return "before" if outage else None

    inject(monkeypatch, fault)
    t0 = time.monotonic()
    assert runner.execute(settings, exp) == "interrupted"    # not "failed": nothing could be written
    assert time.monotonic() - t0 >= 1.0                       # waited max(wait, lease) = 1 s
    monkeypatch.undo()                                        # the database is back (for this test too)
    with session_scope(settings.db_url) as s:
        row = s.get(Experiment, exp)
        assert row.status == "running" and row.error is None
        lapse = as_utc(row.lease_expires_at)
    time.sleep(max(0.0, (lapse - utcnow()).total_seconds()) + 0.1)
    # the database is back; the sweeper of this process saw the outage: the attempt does not count
    assert jobs.expire_leases(settings.db_url, 1, outage=retry.journal.covered_ago) == [exp]
    with session_scope(settings.db_url) as s:
        assert s.get(Experiment, exp).status == "queued"
        assert [a.outcome for a in jobs.attempts(s, exp)] == ["interrupted"]


def test_sweeper_holds_back_after_an_outage_then_interrupts(sqlite_settings):
    """Right after an outage the sweeper expires nothing for a lease period (live workers renew
    meanwhile); a lease that lapsed within the outage then ends its attempt `interrupted`."""
    from sqlalchemy import update

    from worker.sweeper import Sweeper

    settings = sqlite_settings.model_copy(update={"lease_seconds": 1.5, "sweep_seconds": 0.05, "max_attempts": 1})
    exp = make(settings, small_spec())
    with session_scope(settings.db_url) as s:
        jobs.claim_next(s, ["cpu"], "w1", 60, exp)
    retry.journal.failed(down())                              # the database goes away ...
    with session_scope(settings.db_url) as s:                 # ... while the lease lapses
        s.execute(update(Experiment).where(Experiment.id == exp).values(lease_expires_at=utcnow()))
    time.sleep(0.05)
    retry.journal.answered()                                  # and it is back
    sweeper = Sweeper(settings).start()
    try:
        time.sleep(1.0)
        with session_scope(settings.db_url) as s:
            assert s.get(Experiment, exp).status == "running"   # held back: a worker could renew now
        deadline = time.monotonic() + 10
        while True:
            with session_scope(settings.db_url) as s:
                if s.get(Experiment, exp).status != "running":
                    break
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        sweeper.stop()
    with session_scope(settings.db_url) as s:
        assert s.get(Experiment, exp).status == "queued"       # SMD_MAX_ATTEMPTS=1, yet not failed
        assert [a.outcome for a in jobs.attempts(s, exp)] == ["interrupted"]
