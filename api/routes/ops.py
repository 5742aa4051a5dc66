"""Operations: readiness (database and broker) and Prometheus metrics computed from the database.

The database is the record of truth, so every API replica serves the same numbers: nothing here is
counted in process memory. A broker that hangs (accepts connections, never answers) does not hold
a probe or a scrape: worker.queue talks to it with socket timeouts.
"""
from __future__ import annotations

from collections.abc import Iterable

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString
from sqlalchemy import case, func, literal, select, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from api.deps import SessionDep, SettingsDep, release
from api.schemas import ReadyOut
from smdengine import KINDS
from store.models import TERMINAL, Experiment
from store.settings import Settings
from worker import queue as broker_queue
from worker.celery_app import QUEUES

router = APIRouter(tags=["operations"])

STATUSES = ("queued", "running", *TERMINAL)
# Upper bounds of the job-duration histogram, in seconds: 1 s … 1 day (+Inf is added).
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 43200, 86400)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _error(exc: BaseException) -> str:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"error: {exc.__class__.__name__}" + (f": {detail}" if detail else "")


@router.get("/readyz", response_model=ReadyOut,
            responses={503: {"model": ReadyOut, "description": "The database or the broker is unreachable."}})
def readyz(session: SessionDep, settings: SettingsDep):
    """Whether this API replica can serve: its database and its broker both answer."""
    try:
        session.execute(text("SELECT 1"))
        database = "ok"
    except Exception as exc:  # report, don't crash: a probe must answer
        database = _error(exc)
    release(session)
    try:
        broker_queue.broker_ping(settings)
        broker = "ok"
    except Exception as exc:
        broker = _error(exc)
    ready = database == "ok" and broker == "ok"
    body = ReadyOut(status="ready" if ready else "unavailable", database=database, broker=broker)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


def _duration_seconds(session: Session):
    """finished_at − started_at in seconds, as a SQL expression of the session's dialect."""
    if session.get_bind().dialect.name == "sqlite":
        # julianday is a double of days: ~10 µs of noise, so round to the millisecond (7200 s stays ≤ 7200)
        return func.round((func.julianday(Experiment.finished_at) - func.julianday(Experiment.started_at))
                          * 86400.0, 3)
    return func.extract("epoch", Experiment.finished_at - Experiment.started_at)  # PostgreSQL


def collect(session: Session, settings: Settings) -> list[Metric]:
    """The metric families, read from the database (and the broker's queue lengths)."""
    by_status = dict.fromkeys(STATUSES, 0)
    for status, n in session.execute(select(Experiment.status, func.count()).group_by(Experiment.status)):
        by_status[status] = int(n)
    jobs = GaugeMetricFamily("smd_jobs", "Jobs in the database by status.", labels=["status"])
    for status, n in by_status.items():
        jobs.add_metric([status], n)

    queued = dict.fromkeys(QUEUES, 0)
    for name, n in session.execute(select(Experiment.queue, func.count())
                                   .where(Experiment.status == "queued").group_by(Experiment.queue)):
        queued[name] = int(n)
    depth = GaugeMetricFamily("smd_queue_depth", "Queued jobs per queue, from the database.", labels=["queue"])
    for name, n in queued.items():
        depth.add_metric([name], n)

    # Histogram of finished jobs' run time, aggregated in SQL (no row per job leaves the database).
    raw = _duration_seconds(session)
    runs = (select(Experiment.kind.label("kind"), case((raw < 0, 0.0), else_=raw).label("d"))
            .where(Experiment.status.in_(TERMINAL), Experiment.started_at.is_not(None),
                   Experiment.finished_at.is_not(None))
            .subquery())
    columns = [func.sum(case((runs.c.d <= bound, 1), else_=0)) for bound in DURATION_BUCKETS]
    rows = session.execute(select(runs.c.kind, func.count(), func.coalesce(func.sum(runs.c.d), literal(0.0)),
                                  *columns).group_by(runs.c.kind).order_by(runs.c.kind)).all()
    duration = HistogramMetricFamily("smd_job_duration_seconds",
                                     "Run time (finished_at - started_at) of finished jobs.", labels=["kind"])
    zero = (0, 0.0, *([0] * len(DURATION_BUCKETS)))
    by_kind = {kind: zero for kind in KINDS} | {kind: tuple(rest) for kind, *rest in rows}  # zeros from the start
    for kind, (count, total, *cumulative) in sorted(by_kind.items()):
        buckets = [(floatToGoString(b), int(c or 0)) for b, c in zip(DURATION_BUCKETS, cumulative, strict=False)]
        duration.add_metric([kind], buckets + [("+Inf", int(count))], float(total or 0.0))

    attempts = CounterMetricFamily("smd_job_attempts", "Starts of jobs by workers, summed over all jobs.")
    attempts.add_metric([], int(session.scalar(select(func.coalesce(func.sum(Experiment.attempts), 0))) or 0))

    families: list[Metric] = [jobs, depth, duration, attempts]
    up = GaugeMetricFamily("smd_broker_up", "1 when the broker answered this scrape, else 0.")
    try:
        messages = broker_queue.queue_depths(settings)
    except Exception:
        up.add_metric([], 0)
    else:
        up.add_metric([], 1)
        family = GaugeMetricFamily("smd_broker_messages", "Messages waiting in each broker queue "
                                   "(doorbells, not jobs: the database is the record of truth).", labels=["queue"])
        for name in QUEUES:
            family.add_metric([name], messages.get(name, 0))
        families.append(family)
    families.append(up)
    return families


class _Snapshot:
    """A one-shot collector over metric families already read."""

    def __init__(self, families: Iterable[Metric]):
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE: {}},
                             "description": "Prometheus text exposition format."},
                       503: {"content": {"text/plain": {}}, "description": "The database is unreachable."}})
def metrics(session: SessionDep, settings: SettingsDep) -> Response:
    """Job, queue and broker metrics in the Prometheus text format, read from the database."""
    try:
        families = collect(session, settings)
    except SQLAlchemyError as exc:
        return Response(_error(exc) + "\n", status_code=503, media_type="text/plain")
    finally:
        release(session)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE)
