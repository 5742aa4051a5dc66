"""Job counts and run times for the Prometheus metrics, aggregated in SQL (no row per job leaves
the database). Read-only; a unit of work (:func:`store.db.transaction`)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, case, func, literal, select
from sqlalchemy.orm import Session

from store.db import transaction
from store.models import QUEUES, TERMINAL, Experiment, Status


@dataclass(frozen=True)
class Durations:
    """Finished jobs of one kind: how many, their total run time (s), and the cumulative count at
    each bucket bound."""

    count: int
    total_seconds: float
    cumulative: tuple[int, ...]


@dataclass(frozen=True)
class JobMetrics:
    by_status: dict[str, int]        # every Status, zeros included
    queued: dict[str, int]           # every queue, zeros included
    durations: dict[str, Durations]  # by kind, only kinds with finished jobs
    attempts: int                    # starts of jobs by workers, summed over all jobs


def _duration_seconds(session: Session) -> ColumnElement[Any]:
    """finished_at − started_at in seconds, as a SQL expression of the session's dialect."""
    if session.get_bind().dialect.name == "sqlite":
        # julianday is a double of days: ~10 µs of noise, so round to the millisecond (7200 s stays ≤ 7200)
        return func.round((func.julianday(Experiment.finished_at) - func.julianday(Experiment.started_at))
                          * 86400.0, 3)
    return func.extract("epoch", Experiment.finished_at - Experiment.started_at)  # PostgreSQL


@transaction
def job_metrics(session: Session, buckets: Sequence[float]) -> JobMetrics:
    """Jobs by status, queued jobs by queue, and a histogram of finished jobs' run times with the
    upper bounds ``buckets`` (seconds), by kind."""
    by_status = dict.fromkeys(map(str, Status), 0)
    for status, n in session.execute(select(Experiment.status, func.count()).group_by(Experiment.status)):
        by_status[status] = int(n)
    queued = dict.fromkeys(QUEUES, 0)
    for name, n in session.execute(select(Experiment.queue, func.count())
                                   .where(Experiment.status == Status.queued).group_by(Experiment.queue)):
        queued[name] = int(n)
    raw = _duration_seconds(session)
    runs = (select(Experiment.kind.label("kind"), case((raw < 0, 0.0), else_=raw).label("d"))
            .where(Experiment.status.in_(TERMINAL), Experiment.started_at.is_not(None),
                   Experiment.finished_at.is_not(None))
            .subquery())
    columns = [func.sum(case((runs.c.d <= bound, 1), else_=0)) for bound in buckets]
    rows = session.execute(select(runs.c.kind, func.count(), func.coalesce(func.sum(runs.c.d), literal(0.0)),
                                  *columns).group_by(runs.c.kind).order_by(runs.c.kind)).all()
    durations = {kind: Durations(int(count), float(total or 0.0), tuple(int(c or 0) for c in cumulative))
                 for kind, count, total, *cumulative in rows}
    attempts = int(session.scalar(select(func.coalesce(func.sum(Experiment.attempts), 0))) or 0)
    return JobMetrics(by_status, queued, durations, attempts)
