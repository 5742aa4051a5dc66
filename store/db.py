"""Engines, and the one door through which every transaction of the service goes.

A database handle is the database URL (as MLflow's SqlAlchemyStore takes a URI): callers outside
``store`` never hold a session. Every public store function is a unit of work decorated with
:func:`transaction`: called with a URL it runs in a short transaction of its own, opened,
committed (or rolled back) and closed by :func:`run` — the only place where that happens (and
:func:`read`, for a few reads without an ORM session) — and
run through :func:`store.retry.run`, which runs the whole unit again while the database cannot be
reached (for SMD_DB_RETRY_SECONDS, or the ``retry.patience`` of the caller: the API's requests and
the worker narrow it), then raises. Called with a session (another unit of work of ``store``, or a
test), it joins that session's transaction (the outer unit is the one retried).

Rows returned by store functions are detached (``expire_on_commit=False``, relationships loaded
eagerly): plain objects that never touch the database again.

One engine per (process, URL): worker children must not share a parent's pool.
"""
from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.orm import Session, sessionmaker

from store import retry

P = ParamSpec("P")
T = TypeVar("T")

Db = str | Session
"""A database handle: its URL (a transaction of its own), or a session to join (inside ``store``)."""

_engines: dict[tuple[int, str], Engine] = {}
_makers: dict[tuple[int, str], sessionmaker[Session]] = {}


def get_engine(url: str) -> Engine:
    key = (os.getpid(), url)
    if key not in _engines:
        _engines[key] = create_engine_for(url)
    return _engines[key]


def create_engine_for(url: str) -> Engine:
    """A new engine for ``url`` (SQLite: WAL and a busy timeout, since API and worker processes share the file)."""
    if url.startswith("sqlite"):
        # as many pooled connections as the API's thread pool runs requests (anyio's default, 40): beyond the
        # pool each request opened and closed a connection of its own, and its PRAGMAs, under dashboard load
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=40,
                               max_overflow=10)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    connect_args = {"connect_timeout": 5} if url.startswith("postgresql") else {}
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args)


def _sessions(url: str) -> sessionmaker[Session]:
    key = (os.getpid(), url)
    if key not in _makers:
        _makers[key] = sessionmaker(bind=get_engine(url), expire_on_commit=False)
    return _makers[key]


def run(url: str, work: Callable[[Session], T]) -> T:
    """The door: ``work(session)`` in one transaction — opened, committed on success or rolled back
    on error, and closed (its connection back in the pool) before this returns. The whole unit goes
    through :func:`store.retry.run`, so it must be safe to run again from the start."""

    def unit() -> T:
        with _sessions(url)() as session:
            try:
                result = work(session)
                session.commit()
            except BaseException:
                session.rollback()
                raise
        return result

    return retry.run(unit)


def read(url: str, work: Callable[[Connection], T]) -> T:
    """The door for the few reads every dashboard poll makes: ``work(connection)`` on a plain connection,
    without an ORM session (a third of a session's cost), in a transaction rolled back at its end (it
    writes nothing), through :func:`store.retry.run` as :func:`run`'s units are."""

    def unit() -> T:
        with get_engine(url).connect() as connection:
            return work(connection)

    return retry.run(unit)


def transaction(fn: Callable[Concatenate[Session, P], T]) -> Callable[Concatenate[Db, P], T]:
    """Make ``fn(session, ...)`` a store function ``fn(db, ...)``: with a URL, a unit of work of its
    own through :func:`run`; with a session, part of that session's transaction."""

    @functools.wraps(fn)
    def unit_of_work(db: Db, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if isinstance(db, Session):
            return fn(db, *args, **kwargs)

        def work(session: Session) -> T:
            return fn(session, *args, **kwargs)

        work.__name__, work.__qualname__ = fn.__name__, fn.__qualname__  # the unit is named after its function
        return run(db, work)

    return unit_of_work


def reading(fn: Callable[Concatenate[Session | Connection, P], T]) -> Callable[Concatenate[Db, P], T]:
    """As :func:`transaction`, for a read whose statements run the same on a plain connection: with a URL
    it goes through :func:`read` (no ORM session); with a session, it joins that session's transaction."""

    @functools.wraps(fn)
    def unit_of_work(db: Db, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if isinstance(db, Session):
            return fn(db, *args, **kwargs)
        return read(db, lambda connection: fn(connection, *args, **kwargs))

    return unit_of_work


MIN_FREE_BYTES = 1 << 20   # below this, an SQLite database's disk is full for every practical write
PROBE_BYTES = 1 << 16      # the write the probes try: more than a page, as a series chunk or a checkpoint is


def write_trouble(url: str, hold_seconds: float = 60.0) -> str | None:
    """Why the database cannot take writes now (None: no sign). A read (:func:`ping`) answers on a full
    disk, and small writes (a lease renewal) often still fit where a series chunk does not, so: SQLite's
    file system has less than MIN_FREE_BYTES free; or a write of PROBE_BYTES, rolled back, fails for want
    of space (PostgreSQL's DiskFull, SQLite's "database or disk is full"); or a write of this process
    failed so within the last ``hold_seconds`` (store.retry's journal: on PostgreSQL the probe can land in
    free pages of its table while the disk is full). Raises when the database cannot be reached."""
    if url.startswith("sqlite"):
        path = make_url(url).database
        if path and path != ":memory:":
            try:
                free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
            except OSError:
                free = MIN_FREE_BYTES
            if free < MIN_FREE_BYTES:
                return f"disk full: {free} bytes free on the file system of the SQLite database"
    try:
        with retry.patience(0):
            _probe_write(url)
    except Exception as exc:
        if retry.is_disk_full(exc):
            retry.journal.failed(exc)
            return "disk full: the database refused a write for want of space"
        raise
    ago = retry.journal.disk_full_ago()
    if ago is not None and ago <= hold_seconds:
        return f"disk full: a write failed for want of space {ago:.0f} s ago"
    return None


def _probe_write(url: str) -> None:
    def work(session: Session) -> None:
        session.execute(text("INSERT INTO write_probe (data) VALUES (:data)"), {"data": bytes(PROBE_BYTES)})
        session.flush()
        session.rollback()   # nothing stays: only whether the space could be had
    with _sessions(url)() as session:
        try:
            work(session)
        finally:
            session.rollback()


@transaction
def ping(session: Session) -> None:
    """Raise when the database cannot be reached (health and readiness probes)."""
    session.execute(text("SELECT 1"))
