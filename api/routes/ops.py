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
from sqlalchemy.exc import SQLAlchemyError

from api.deps import DbDep, SettingsDep
from api.responses import RETRY_AFTER, RETRY_AFTER_HEADER
from api.schemas import ReadyOut
from smdengine import KINDS
from store.db import ping, write_trouble
from store.metrics import Durations, job_metrics
from store.models import QUEUES
from store.settings import Settings
from worker import queue as broker_queue

router = APIRouter(tags=["operations"])

# Upper bounds of the job-duration histogram, in seconds: 1 s … 1 day (+Inf is added).
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 43200, 86400)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _error(exc: BaseException) -> str:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"error: {exc.__class__.__name__}" + (f": {detail}" if detail else "")


@router.get("/readyz", response_model=ReadyOut,
            responses={503: {"model": ReadyOut, "description": "The database or the broker is unreachable; retry "
                                                               "after the Retry-After seconds.",
                             "headers": RETRY_AFTER_HEADER}})
def readyz(db: DbDep, settings: SettingsDep):
    """Whether this API replica can serve: its database and its broker both answer (503 with Retry-After
    when one does not)."""
    try:
        ping(db)
        trouble = write_trouble(db, settings.lease_seconds)
        database = "ok" if trouble is None else f"error: {trouble}"
    except Exception as exc:  # report, don't crash: a probe must answer
        database = _error(exc)
    try:
        broker_queue.broker_ping(settings)
        broker = "ok"
    except Exception as exc:
        broker = _error(exc)
    ready = database == "ok" and broker == "ok"
    body = ReadyOut(status="ready" if ready else "unavailable", database=database, broker=broker)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503, headers=None if ready else RETRY_AFTER)


def collect(db: str, settings: Settings) -> list[Metric]:
    """The metric families, read from the database (and the broker's queue lengths)."""
    stats = job_metrics(db, DURATION_BUCKETS)
    jobs = GaugeMetricFamily("smd_jobs", "Jobs in the database by status.", labels=["status"])
    for status, n in stats.by_status.items():
        jobs.add_metric([status], n)

    depth = GaugeMetricFamily("smd_queue_depth", "Queued jobs per queue, from the database.", labels=["queue"])
    for name, n in stats.queued.items():
        depth.add_metric([name], n)

    # Histogram of finished jobs' run time, aggregated in SQL (store.metrics).
    duration = HistogramMetricFamily("smd_job_duration_seconds",
                                     "Run time (finished_at - started_at) of finished jobs.", labels=["kind"])
    zero = Durations(0, 0.0, (0,) * len(DURATION_BUCKETS))
    by_kind = dict.fromkeys(KINDS, zero) | stats.durations  # zeros from the start
    for kind, runs in sorted(by_kind.items()):
        buckets = [(floatToGoString(b), c) for b, c in zip(DURATION_BUCKETS, runs.cumulative, strict=True)]
        duration.add_metric([kind], buckets + [("+Inf", runs.count)], runs.total_seconds)

    attempts = CounterMetricFamily("smd_job_attempts", "Starts of jobs by workers, summed over all jobs.")
    attempts.add_metric([], stats.attempts)

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
                       503: {"content": {"text/plain": {}}, "headers": RETRY_AFTER_HEADER,
                             "description": "The database is unreachable; retry after the Retry-After seconds."}})
def metrics(db: DbDep, settings: SettingsDep) -> Response:
    """Job, queue and broker metrics in the Prometheus text format, read from the database."""
    try:
        families = collect(db, settings)
    except SQLAlchemyError as exc:
        return Response(_error(exc) + "\n", status_code=503, media_type="text/plain", headers=RETRY_AFTER)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE)
