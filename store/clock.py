"""The database's clock: the one clock that every host of the service shares.

A lease is an expiry time written by a worker's host and compared by the sweeper of an API host; a
job's start, end and last change (``updated_at``) times are written by one host and compared by others
(durations, queue estimates, ETAs, Retry-After). Taken from each host's own clock, a host whose clock is
off by more than a lease made live workers look lost. So every such time is the database server's, read
inside the statement that writes or compares it: :class:`db_now` is ``now`` (plus ``seconds``) as an
SQL expression, and :func:`now` reads it when Python needs the value (to subtract a stored time from it).
No host's clock (``datetime.now``, ``time.time``) enters lease or expiry logic; hosts time their own
intervals (how often to renew, retry deadlines) with ``time.monotonic``, which never crosses a host.

PostgreSQL: ``statement_timestamp()``, the time the current statement began, not ``now()`` (the start
of the transaction): a unit of work that waited for a row lock, or ran several statements, writes the
time of its write, so a renewal that waited is not shortened by the wait, and a sweep compares with the
time it reads. One value per statement: every row an UPDATE writes gets the same time.

SQLite: ``strftime('%Y-%m-%d %H:%M:%f', 'now')`` with ``000`` appended, the text SQLAlchemy stores a
``DateTime`` as (UTC, microseconds), so stored times compare as text in the right order. SQLite is a
library, not a server: its clock is that of the process running the statement, and all processes
sharing one SQLite file run on one host, with one clock. Its resolution is a millisecond.

Other databases are not supported for these expressions (a :class:`~sqlalchemy.exc.CompileError`).
"""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, overload

from sqlalchemy import Float, bindparam, cast, select
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import DateTime


def utcnow() -> datetime:
    """This host's clock, as an aware UTC datetime: only for times no other host compares (when a key was
    last used, when a compare study was made); never for leases (:class:`db_now`) nor for a job's
    creation (:func:`stamp`)."""
    return datetime.now(UTC)


@overload
def as_utc(value: datetime) -> datetime: ...
@overload
def as_utc(value: None) -> None: ...
def as_utc(value: datetime | None) -> datetime | None:
    """A stored time as an aware UTC datetime (SQLite returns naive ones; every stored time is UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@overload
def utc_iso(value: datetime) -> str: ...
@overload
def utc_iso(value: None) -> None: ...
def utc_iso(value: datetime | None) -> str | None:
    """A stored time as the service writes it: RFC 3339 in UTC with a Z and always six fractional digits
    ("…:58.000000Z", where isoformat drops a zero fraction: "…:58Z" sorts after "…:58.080000Z"), so that
    times compare as strings."""
    utc = as_utc(value)
    return None if utc is None else utc.isoformat(timespec="microseconds").replace("+00:00", "Z")


class db_now(FunctionElement[datetime]):  # noqa: N801  (an SQL function, spelled like one)
    """The database server's current time (UTC), plus ``seconds`` if given, as an SQL expression:
    ``values(lease_expires_at=db_now(lease_seconds))``, ``where(Experiment.lease_expires_at < db_now())``.
    ``seconds`` is a bound parameter (so statements are cached with it as a parameter, not a constant)."""

    type = DateTime(timezone=True)
    name = "db_now"
    inherit_cache = True

    def __init__(self, seconds: float | None = None):
        super().__init__(*(() if seconds is None else (bindparam(None, float(seconds), type_=Float()),)))


def _offset(element: db_now) -> Any | None:
    clauses = list(element.clauses)
    return clauses[0] if clauses else None


@compiles(db_now, "postgresql")
def _postgresql(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    offset = _offset(element)
    if offset is None:
        return "statement_timestamp()"
    seconds = compiler.process(cast(offset, Float), **kw)
    return f"(statement_timestamp() + make_interval(secs => {seconds}))"


@compiles(db_now, "sqlite")
def _sqlite(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    offset = _offset(element)
    if offset is None:
        return "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"
    seconds = compiler.process(offset, **kw)
    return f"(strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', {seconds})) || '000')"


@compiles(db_now)
def _other(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    raise CompileError(f"store.clock.db_now: no database clock for {compiler.dialect.name} (PostgreSQL or SQLite)")


def stamp(session: Session) -> datetime:
    """A time that other hosts will compare, for a row being made (a job's ``created_at`` orders the fair
    queue that every worker host reads): the database server's (:func:`now`) on PostgreSQL; on SQLite this
    host's, to the microsecond, since the processes sharing its file share this host's clock, and SQLite's
    own has milliseconds (jobs made within one would tie and run in an arbitrary order)."""
    if session.get_bind().dialect.name == "sqlite":
        return utcnow()
    return now(session)


def now(session: Session) -> datetime:
    """The database server's current time, as an aware UTC datetime."""
    value = as_utc(session.scalar(select(db_now())))
    assert value is not None
    return value
