"""store/retry.py: which errors are transient, and how a unit of work is re-run."""
from __future__ import annotations

import logging
import time
from datetime import timedelta

import psycopg
import pytest
from sqlalchemy import create_engine, text, update
from sqlalchemy import exc as sa_exc

from store import jobs, retry
from store.migrate import upgrade_head
from store.models import Experiment, utcnow
from tests.dbutil import session_scope
from tests.servers import free_port

pytestmark = pytest.mark.usefixtures("fresh_retry_journal")


def _refused() -> sa_exc.OperationalError:
    engine = create_engine(f"postgresql+psycopg://smd@127.0.0.1:{free_port()}/nothing",
                           connect_args={"connect_timeout": 2})
    try:
        with engine.connect():
            pass
    except sa_exc.OperationalError as exc:
        return exc
    finally:
        engine.dispose()
    raise AssertionError("a closed port accepted a connection")


def _wrapped(orig: Exception, cls=sa_exc.OperationalError) -> sa_exc.DBAPIError:
    return cls("SELECT 1", {}, orig)


def test_connection_failures_are_transient():
    refused = _refused()
    assert retry.is_transient(refused)                              # SQLAlchemy-wrapped "connection refused"
    assert retry.is_transient(refused.orig)                         # the bare psycopg error
    assert retry.is_transient(sa_exc.DisconnectionError("gone"))
    for cls in (psycopg.errors.AdminShutdown, psycopg.errors.CannotConnectNow, psycopg.errors.ConnectionFailure,
                psycopg.errors.TooManyConnections):
        assert retry.is_transient(_wrapped(cls("x"))), cls
    invalidated = _wrapped(psycopg.errors.QueryCanceled("x"))
    invalidated.connection_invalidated = True
    assert retry.is_transient(invalidated)


def test_a_full_disk_is_transient_and_named():
    """PostgreSQL's DiskFull (SQLSTATE 53100, an OperationalError) is an outage: the same write succeeds once
    space is freed (SQLite's real "database or disk is full": tests/worker/test_disk_full.py)."""
    full = _wrapped(psycopg.errors.DiskFull("could not extend file \"base/16384/16385\": No space left on device"))
    assert retry.is_transient(full) and retry.is_disk_full(full)
    assert not retry.is_disk_full(_refused())
    assert retry.journal.disk_full_ago() is None            # a fresh journal (fresh_retry_journal)
    retry.journal.failed(_refused())
    assert retry.journal.disk_full_ago() is None            # an unreachable database is not a full disk
    retry.journal.failed(full)
    ago = retry.journal.disk_full_ago()
    assert ago is not None and 0 <= ago < 1.0


def test_statement_errors_are_not_transient(tmp_path):
    assert not retry.is_transient(_wrapped(psycopg.errors.QueryCanceled("statement timeout")))
    assert not retry.is_transient(_wrapped(psycopg.errors.UndefinedTable("x"), sa_exc.ProgrammingError))
    assert not retry.is_transient(_wrapped(psycopg.errors.UniqueViolation("x"), sa_exc.IntegrityError))
    assert not retry.is_transient(jobs.LeaseLost("e1"))
    assert not retry.is_transient(ValueError("x"))
    engine = create_engine(f"sqlite:///{tmp_path / 'x.sqlite3'}")
    with pytest.raises(sa_exc.OperationalError) as syntax, engine.connect() as conn:
        conn.execute(text("SELEC 1"))                                # SQLite reports this as an OperationalError
    assert not retry.is_transient(syntax.value)


def test_postgres_statement_errors_and_a_killed_connection(postgres_admin_url):
    engine = create_engine(postgres_admin_url, pool_pre_ping=True)
    with pytest.raises(sa_exc.ProgrammingError) as missing, engine.connect() as conn:
        conn.execute(text("SELECT * FROM no_such_table"))
    assert not retry.is_transient(missing.value)
    with pytest.raises(sa_exc.DBAPIError) as killed, engine.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
    assert retry.is_transient(killed.value)                           # admin shutdown of this connection
    engine.dispose()


def test_run_retries_a_transient_error_and_logs_the_outage_once(caplog):
    calls = []

    def unit():
        calls.append(time.monotonic())
        if len(calls) < 5:
            raise _refused()
        return "done"

    with caplog.at_level(logging.WARNING, logger="store.retry"):
        assert retry.run(unit, seconds=30) == "done"
    assert len(calls) == 5
    gaps = [b - a for a, b in zip(calls, calls[1:], strict=False)]
    assert all(g >= retry.FIRST_DELAY * 0.4 for g in gaps) and gaps[-1] > gaps[0]   # backs off
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "unreachable" in messages[0] and "reachable again" in messages[1] and "4 failed tries" in messages[1]
    [outage] = retry.journal.outages
    assert outage.back is not None and outage.failures == 4
    assert retry.journal.covers(outage.first_failure) and not retry.journal.covers(outage.back + 1)


def test_run_raises_other_errors_at_once():
    calls = []

    def unit():
        calls.append(1)
        raise jobs.LeaseLost("e1")

    with pytest.raises(jobs.LeaseLost):
        retry.run(unit, seconds=30)
    assert calls == [1] and not retry.journal.outages


def test_run_gives_up_at_the_deadline_and_patience_sets_it():
    error = _refused()
    calls = []

    def unit():
        calls.append(1)
        raise error

    t0 = time.monotonic()
    with retry.patience(0.5), pytest.raises(sa_exc.OperationalError):
        retry.run(unit)
    assert 0.5 <= time.monotonic() - t0 < 1.5 and len(calls) >= 3
    assert retry.journal.current is not None and retry.journal.up_for() == 0.0   # still down
    calls.clear()
    with retry.patience(0), pytest.raises(sa_exc.OperationalError):
        retry.run(unit)
    assert calls == [1]                                               # one try


def test_a_run_inside_a_run_is_retried_by_the_outer_one_only():
    inner_calls = []

    def inner():
        inner_calls.append(1)
        if len(inner_calls) < 3:
            raise _refused()
        return 7

    assert retry.run(lambda: retry.run(inner, seconds=30) * 2, seconds=30) == 14
    assert len(inner_calls) == 3


def test_default_deadline_comes_from_settings(monkeypatch):
    from store.settings import get_settings

    monkeypatch.setenv("SMD_DB_RETRY_SECONDS", "0.2")
    get_settings.cache_clear()
    try:
        t0 = time.monotonic()
        with pytest.raises(sa_exc.OperationalError):
            retry.run(lambda: (_ for _ in ()).throw(_refused()))
        assert time.monotonic() - t0 < 1.0
    finally:
        get_settings.cache_clear()


def _lapsed_job(url: str, lapsed_at) -> str:
    with session_scope(url) as s:
        exp = jobs.create(s, kind="nrq", name=None, spec={}, total_steps=1)
        jobs.claim_next(s, ["cpu"], "w", 60, exp.id)
        s.execute(update(Experiment).where(Experiment.id == exp.id).values(lease_expires_at=lapsed_at))
        return exp.id


def test_a_lease_lapsed_in_an_outage_is_interrupted_and_does_not_count(database_url):
    upgrade_head(database_url)
    now = utcnow()
    in_outage = lambda ago: 0 <= ago <= 30  # noqa: E731  (seconds since the lease lapsed: an outage then)
    exp = _lapsed_job(database_url, now - timedelta(seconds=5))
    for _ in range(4):   # SMD_MAX_ATTEMPTS=1, yet four interrupted attempts fail nothing
        assert jobs.expire_leases(database_url, 1, outage=in_outage) == [exp]
        with session_scope(database_url) as s:
            jobs.claim_next(s, ["cpu"], "w", 60, exp)
            s.execute(update(Experiment).where(Experiment.id == exp)
                      .values(lease_expires_at=now - timedelta(seconds=5)))
    with session_scope(database_url) as s:   # a lapse outside the outage: lost, and it counts
        s.execute(update(Experiment).where(Experiment.id == exp).values(lease_expires_at=now - timedelta(seconds=60)))
    assert jobs.expire_leases(database_url, 1, outage=in_outage) == []
    with session_scope(database_url) as s:
        row = s.get(Experiment, exp)
        assert row.status == "failed" and row.attempts == 5
        assert "lost during 1 of its 5 attempts" in row.error
        assert [a.outcome for a in jobs.attempts(s, exp)] == ["interrupted"] * 4 + ["lost"]


def test_only_lost_attempts_count_toward_max_attempts(database_url):
    upgrade_head(database_url)
    past = utcnow() - timedelta(seconds=5)
    exp = _lapsed_job(database_url, past)
    assert jobs.expire_leases(database_url, 2) == [exp]     # lost: 1 of 2
    with session_scope(database_url) as s:
        claim = jobs.claim_next(s, ["cpu"], "w", 60, exp)
        jobs.release(s, claim)                                                          # released: not counted
        jobs.claim_next(s, ["cpu"], "w", 60, exp)
        s.execute(update(Experiment).where(Experiment.id == exp).values(lease_expires_at=past))
    assert jobs.expire_leases(database_url, 2) == []         # lost: 2 of 2
    with session_scope(database_url) as s:
        row = s.get(Experiment, exp)
        assert row.status == "failed" and "lost during 2 of its 3 attempts" in row.error
