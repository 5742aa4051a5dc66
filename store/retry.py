"""One policy for a database that goes away: every unit of work (one transaction) runs through
:func:`run`, which re-runs it whole, with exponential backoff and jitter, while it fails with a
*transient* error (:func:`is_transient`: the connection failed, was refused or was cut; the server
is starting or shutting down), for up to ``SMD_DB_RETRY_SECONDS`` (or the :func:`patience` of the
caller: 0 = one try), then re-raises the last error. Anything else (an integrity or programming
error, :class:`store.jobs.LeaseLost`, a bug) is raised at once. An outage is logged once per
process when it starts and once when the database answers again, not on every try.

Why re-running a unit is safe. A transient error raised *before* COMMIT was sent means the
transaction rolled back: a re-run starts from the same state. The ambiguous case is a connection
lost *after* COMMIT was sent: the transaction may have committed. The store's writes are made so
that a second run of a committed unit changes nothing wrong:

- worker writes are compare-and-set on the lease (``lease_owner`` and ``status = 'running'``):
  progress (an absolute step), points (``write_points`` replaces everything from its start index),
  lease renewals (an absolute expiry) and checkpoints (replace the job's one row) are idempotent;
- the sweeper's expiries and ``release`` are conditional on the row still being as read, so a
  second run finds nothing to do;
- an outcome write (``finish_claimed``) that committed makes its re-run fail with ``LeaseLost``
  (the row is no longer running): the runner then reads the row back and accepts its own outcome
  (worker/runner.py ``_finish``);
- a cancel request sets flags: idempotent.

Where a re-run is *not* exactly-once: a claim (``claim_next``) whose COMMIT was lost may have
claimed a job that no worker then runs; its lease lapses and the sweeper re-queues it (the attempt
ends ``lost``). A submission (``create``) whose COMMIT was lost can be stored twice, as any POST that
a client retries; the API does not retry inside a request for long (``SMD_DB_REQUEST_RETRY_SECONDS``)
and answers 503 instead, so the client decides.

The module also keeps, per process, a journal of the outages it saw (when the database last
answered before the first failure, and when it answered again): the sweeper uses it to leave
leases alone while workers could not renew them (worker/sweeper.py). Its times are this process's
``time.monotonic()``: a lease's lapse (a time of the database's clock) is placed on it by how long
ago it was, by the database's clock (:meth:`Journal.covered_ago`), so no two clocks are compared.
"""
from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import exc as sa_exc

log = logging.getLogger(__name__)
T = TypeVar("T")

FIRST_DELAY = 0.05   # seconds before the second try; doubled after each failure
MAX_DELAY = 2.0      # cap of the backoff: a database that is back is noticed within about this

# SQLSTATEs that mean "the server is (re)starting, stopping, refusing connections or out of disk", not
# "your statement is wrong": admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections,
# disk_full. A full disk is an outage like the others: the same write succeeds once space is freed.
DISK_FULL_SQLSTATE = "53100"
_TRANSIENT_SQLSTATES = {"57P01", "57P02", "57P03", "53300", DISK_FULL_SQLSTATE}
SQLITE_FULL = "database or disk is full"   # SQLITE_FULL's message: the disk, or max_page_count, is full

_patience: ContextVar[float | None] = ContextVar("smd_db_patience", default=None)
_inside: ContextVar[bool] = ContextVar("smd_db_retry_inside", default=False)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` means the database could not be reached (and the same unit of work may
    succeed once it can), as opposed to a statement that failed on a working connection."""
    if isinstance(exc, sa_exc.DisconnectionError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        if isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError)):
            return _driver_transient(exc.orig)
        return False
    return _driver_transient(exc)


def _driver_transient(orig: BaseException | None) -> bool:
    """A DBAPI error that is connection-level. psycopg (3) and psycopg2 report a failed, refused or
    cut connection as an OperationalError without SQLSTATE, or with class 08 (connection
    exception) or one of _TRANSIENT_SQLSTATES; SQLite has no connection to lose, but its disk can fill."""
    if orig is None:
        return False
    module = type(orig).__module__ or ""
    if module.startswith("sqlite3"):
        return SQLITE_FULL in str(orig)
    if not module.startswith(("psycopg", "psycopg2")):
        return False
    names = {cls.__name__ for cls in type(orig).__mro__}
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if "OperationalError" in names:
        return state is None or state.startswith("08") or state in _TRANSIENT_SQLSTATES
    if "InterfaceError" in names:  # psycopg2: "connection already closed"
        return "closed" in str(orig)
    return False


@contextlib.contextmanager
def patience(seconds: float) -> Iterator[None]:
    """How long :func:`run` keeps retrying for the code inside (this thread or task): 0 means one
    try. The worker uses 0 for writes it can buffer and redo later (progress, points, lease
    renewals), the API the short ``SMD_DB_REQUEST_RETRY_SECONDS`` for requests."""
    token = _patience.set(max(0.0, float(seconds)))
    try:
        yield
    finally:
        _patience.reset(token)


def _budget() -> float:
    seconds = _patience.get()
    if seconds is not None:
        return seconds
    from store.settings import get_settings

    return get_settings().db_retry_seconds


def run(fn: Callable[[], T], *, seconds: float | None = None) -> T:
    """``fn()``, re-run whole while it raises a transient error, until ``seconds`` (default: the
    caller's :func:`patience`, else ``SMD_DB_RETRY_SECONDS``) have passed; then the last error is
    raised. ``fn`` must be one whole unit of work: it opens its own transaction each time. A
    ``run`` inside another runs ``fn`` once: the outer one retries the whole unit."""
    if _inside.get():
        return fn()
    budget = _budget() if seconds is None else max(0.0, seconds)
    deadline = time.monotonic() + budget
    delay = FIRST_DELAY
    token = _inside.set(True)
    try:
        while True:
            try:
                result = fn()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                journal.failed(exc)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(left, delay / 2 + random.uniform(0, delay / 2)))
                delay = min(delay * 2, MAX_DELAY)
                continue
            journal.answered()
            return result
    finally:
        _inside.reset(token)


@dataclass
class Outage:
    """An outage this process saw: the database answered at ``last_ok`` (or the process started
    then), failed from ``first_failure`` on, and answered again at ``back`` (None: still down).
    The database was unreachable at some time in (last_ok, back), at least [first_failure,
    last_failure]. Times are this process's ``time.monotonic()``."""

    last_ok: float
    first_failure: float
    last_failure: float
    back: float | None = None
    failures: int = 1

    def covers(self, when: float) -> bool:
        """Whether ``when`` falls in the time the database may have been unreachable."""
        return self.last_ok <= when and (self.back is None or when <= self.back)


class Journal:
    """The outages this process saw (the latest ``keep``), and since when the database answers."""

    def __init__(self, keep: int = 32):
        self._lock = threading.Lock()
        self.outages: deque[Outage] = deque(maxlen=keep)
        self._clear()

    def _clear(self) -> None:
        self._disk_full_at: float | None = None
        self._last_ok = time.monotonic()
        self._up_since = self._last_ok
        self.outages.clear()

    @property
    def current(self) -> Outage | None:
        return self.outages[-1] if self.outages and self.outages[-1].back is None else None

    def failed(self, exc: BaseException) -> None:
        now = time.monotonic()
        with self._lock:
            outage = self.current
            full = is_disk_full(exc)
            if full:
                self._disk_full_at = now
            if outage is None:
                self.outages.append(Outage(last_ok=self._last_ok, first_failure=now, last_failure=now))
                first = True
            else:
                outage.last_failure, outage.failures, first = now, outage.failures + 1, False
        if first:
            log.warning("database %s (%s)", "disk full" if full else "unreachable", _short(exc))

    def answered(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._last_ok = now
            outage = self.current
            if outage is None:
                return
            outage.back = now
            self._up_since = now
        log.warning("database reachable again after %.1f s (%d failed tries)",
                    now - outage.first_failure, outage.failures)

    def disk_full_ago(self) -> float | None:
        """Seconds since a write of this process last failed for a full disk (None: never)."""
        with self._lock:
            return None if self._disk_full_at is None else time.monotonic() - self._disk_full_at

    def up_for(self) -> float:
        """Seconds the database has answered since the end of the last outage (or since this
        process started); 0 during an outage."""
        with self._lock:
            if self.current is not None:
                return 0.0
            return time.monotonic() - self._up_since

    def covers(self, when: float) -> bool:
        """Whether the database may have been unreachable at ``when`` (``time.monotonic()`` of this
        process), in an outage this process saw."""
        with self._lock:
            return any(outage.covers(when) for outage in self.outages)

    def covered_ago(self, seconds: float) -> bool:
        """Whether the database may have been unreachable ``seconds`` ago (negative: that far ahead),
        in an outage this process saw: :func:`store.jobs.expire_leases`'s ``outage``, given how long
        ago a lease lapsed by the database's clock."""
        return self.covers(time.monotonic() - seconds)

    def reset(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._clear()


journal = Journal()


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (a SQLAlchemy or DBAPI error) says the database's disk is full."""
    orig = getattr(exc, "orig", None) or exc
    if orig is None:
        return False
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return state == DISK_FULL_SQLSTATE or SQLITE_FULL in str(orig)


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
