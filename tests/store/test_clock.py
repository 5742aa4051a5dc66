"""Leases and job times on the database's clock (store/clock.py), on SQLite and PostgreSQL, with this
process's wall clock set 10 minutes back: nothing of a lease may come from it. The same with real
processes under libfaketime: tests/integration/test_clock_skew.py."""
from __future__ import annotations

import datetime as dt
import time
from datetime import timedelta

import pytest
from sqlalchemy import select, update

import store.clock
import store.models
from store import jobs, queue_stats
from store.clock import db_now
from store.migrate import upgrade_head
from store.models import Experiment, as_utc, utcnow
from tests.dbutil import session_scope

SKEW = timedelta(minutes=-10)


class _Behind(dt.datetime):
    """datetime whose now() is SKEW off: a host whose clock is wrong."""

    @classmethod
    def now(cls, tz=None):
        return dt.datetime.now(tz) + SKEW

    @classmethod
    def utcnow(cls):
        return dt.datetime.utcnow() + SKEW


@pytest.fixture
def host_clock_behind(monkeypatch):
    """This process's wall clock 10 minutes back for the store (every store time is read through one
    module's ``datetime``; monotonic clocks stay true, as on a real host)."""
    for module in (store.clock, store.models):
        if hasattr(module, "datetime"):
            monkeypatch.setattr(module, "datetime", _Behind)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + SKEW.total_seconds())
    assert (dt.datetime.now(dt.UTC) - utcnow()).total_seconds() > 590


def _job(url: str) -> str:
    upgrade_head(url)
    with session_scope(url) as s:
        return jobs.create(s, kind="nrq", name=None, spec={}, total_steps=10).id


def _left(url: str, experiment_id: str) -> float:
    """Seconds left of the job's lease, by the database's clock."""
    with session_scope(url) as s:
        expires, now = s.execute(select(Experiment.lease_expires_at, db_now())
                                 .where(Experiment.id == experiment_id)).one()
    return (as_utc(expires) - as_utc(now)).total_seconds()


def test_db_now_is_one_time_per_statement_plus_its_offset(database_url):
    upgrade_head(database_url)
    with session_scope(database_url) as s:
        now, later, earlier = (as_utc(t) for t in s.execute(select(db_now(), db_now(30), db_now(-1.5))).one())
        again = store.clock.now(s)
    assert later - now == timedelta(seconds=30) and now - earlier == timedelta(seconds=1.5)
    assert timedelta(0) <= again - now < timedelta(seconds=5)
    assert abs((now - dt.datetime.now(dt.UTC)).total_seconds()) < 5    # this host's clock (the test's: true)


def test_a_stored_time_and_db_now_compare_in_order(database_url):
    """SQLite compares stored times as text: db_now renders the very text SQLAlchemy stores."""
    exp = _job(database_url)
    with session_scope(database_url) as s:
        jobs.claim_next(s, ["cpu"], "w", 60, exp)
    for offset, expired in ((-0.5, True), (0.5, False)):
        with session_scope(database_url) as s:
            s.execute(update(Experiment).where(Experiment.id == exp)
                      .values(lease_expires_at=dt.datetime.now(dt.UTC) + timedelta(seconds=offset)))
            assert s.scalar(select(Experiment.lease_expires_at < db_now()).where(Experiment.id == exp)) is expired


@pytest.mark.usefixtures("host_clock_behind")
def test_a_host_clock_10_minutes_behind_takes_no_part_in_a_lease(database_url):
    exp = _job(database_url)
    claim = jobs.claim_next(database_url, ["cpu"], "w", 3, exp)
    assert claim is not None and 2 < _left(database_url, exp) <= 3
    assert jobs.expire_leases(database_url, 1) == []                         # not lost: the worker is alive
    jobs.renew(database_url, claim, 30)
    assert 29 < _left(database_url, exp) <= 30
    assert jobs.record_progress(database_url, claim, 5, 10) is False
    with session_scope(database_url) as s:
        started, updated, now = (as_utc(t) for t in s.execute(
            select(Experiment.started_at, Experiment.updated_at, db_now()).where(Experiment.id == exp)).one())
        [attempt] = jobs.attempts(s, exp)
    assert timedelta(0) <= now - started < timedelta(seconds=5) and timedelta(0) <= now - updated < timedelta(seconds=5)
    assert as_utc(attempt.started_at) == started
    assert jobs.retry_after(database_url, "nobody", 60) == 60
    snapshot = queue_stats.snapshot(database_url, None, everyone=True, live_seconds=60.0)
    assert snapshot.queues["cpu"].workers == 1                                # its lease is live
    jobs.finish_claimed(database_url, claim, "succeeded", summary={})
    with session_scope(database_url) as s:
        finished = as_utc(s.scalar(select(Experiment.finished_at).where(Experiment.id == exp)))
        [attempt] = jobs.attempts(s, exp)
    assert timedelta(0) <= finished - started < timedelta(seconds=5)
    assert timedelta(0) <= as_utc(attempt.ended_at) - finished < timedelta(seconds=5)   # its next statement
    assert attempt.outcome == "succeeded"


@pytest.mark.usefixtures("host_clock_behind")
def test_a_lapsed_lease_is_expired_by_the_database_clock(database_url):
    exp = _job(database_url)
    jobs.claim_next(database_url, ["cpu"], "w", 60, exp)
    with session_scope(database_url) as s:
        s.execute(update(Experiment).where(Experiment.id == exp).values(lease_expires_at=db_now(-2)))
    ago: list[float] = []
    assert jobs.expire_leases(database_url, 3, outage=lambda seconds: ago.append(seconds) or False) == [exp]
    assert len(ago) == 1 and 2 <= ago[0] < 7                                  # lapsed 2 s ago, by its clock
    [attempt] = jobs.attempts(database_url, exp)
    assert attempt.outcome == "lost" and as_utc(attempt.ended_at) > as_utc(attempt.started_at)
