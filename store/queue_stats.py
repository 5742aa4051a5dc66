"""What the queues look like now: per-queue counts, workers and recent durations, and where each
queued job stands in the fair-share order (:func:`store.jobs.queue_order`), with an estimated
start. Read-only; every public function is a unit of work (:func:`store.db.transaction`)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store import clock, jobs
from store import workers as worker_rows
from store.clock import db_now
from store.db import transaction
from store.models import ACTIVE, QUEUES, Experiment, Status, Study, as_utc

DURATION_HISTORY = 50   # succeeded jobs per queue the mean duration is taken over


@dataclass(frozen=True)
class QueueState:
    name: str
    queued: int                              # claimable jobs, every user's
    running: int
    workers: int                             # distinct worker names holding a live lease on this queue
    processes: int                           # worker processes serving this queue seen within live_seconds, idle or not
    busy_processes: int                      # of those, the ones running a job or a fused batch
    mean_duration_seconds: float | None   # over the last DURATION_HISTORY succeeded jobs; None if none


@dataclass(frozen=True)
class JobState:
    experiment: Experiment
    position: int | None                  # 1-based place in queue_order; None when running
    estimated_start: datetime | None


@dataclass(frozen=True)
class Snapshot:
    queues: dict[str, QueueState]
    jobs: list[JobState]


@transaction
def mean_duration(session: Session, queue: str, last: int = DURATION_HISTORY) -> float | None:
    """Mean run time (finished_at − started_at, seconds) of the queue's ``last`` most recently
    finished succeeded jobs; None when there are none."""
    rows = session.execute(select(Experiment.started_at, Experiment.finished_at)
                           .where(Experiment.queue == queue, Experiment.status == Status.succeeded,
                                  Experiment.started_at.is_not(None), Experiment.finished_at.is_not(None))
                           .order_by(Experiment.finished_at.desc(), Experiment.id.desc()).limit(last)).all()
    if not rows:
        return None
    seconds = [max(0.0, (as_utc(done) - as_utc(started)).total_seconds()) for started, done in rows
               if started is not None and done is not None]
    return sum(seconds) / len(seconds)


# A run shorter than this is mostly its start and its writes, not its work: left out of a rate (tiny jobs made
# a 36 s preset look like 6543 s)
MIN_TIMED_SECONDS = 1.0
SCANNED_PER_TIMED = 10   # rows read per run wanted: the newest runs may be short ones, or of other models


Run = tuple[dict, str | None, datetime, datetime]   # spec, worker, started_at, finished_at


@transaction
def timed_runs(session: Session, queue: str, kind: str, model: str | None = None,
               scan: int = DURATION_HISTORY * SCANNED_PER_TIMED, *, in_studies: bool = False) -> list[Run]:
    """The queue's succeeded jobs of ``kind`` (and of ``model``, for a kind with models: work units are a
    model's own) among its newest ``scan`` of the kind that ran at least MIN_TIMED_SECONDS, newest first;
    ``in_studies``: only the children of studies a worker fuses where it can, as it will a preset's (not those
    submitted with ``"fuse": false``)."""
    query = (select(Experiment.spec, Experiment.worker, Experiment.started_at, Experiment.finished_at,
                    Experiment.study_id)
             .where(Experiment.queue == queue, Experiment.kind == kind, Experiment.status == Status.succeeded,
                    Experiment.started_at.is_not(None), Experiment.finished_at.is_not(None)))
    if in_studies:   # a study submitted with "fuse": false ran child by child, slower per unit of work: left out
        # in the query, before the scan's limit (JSON false is SQLite's 0, PostgreSQL's false; an absent key NULL)
        query = query.join(Study, Study.id == Experiment.study_id).where(Study.spec["fuse"].as_boolean().is_not(False))
    rows = session.execute(query.order_by(Experiment.finished_at.desc(), Experiment.id.desc()).limit(scan)).all()
    return [(dict(spec or {}), worker, as_utc(started), as_utc(done)) for spec, worker, started, done, _ in rows
            if (as_utc(done) - as_utc(started)).total_seconds() >= MIN_TIMED_SECONDS
            and (model is None or ((spec or {}).get("params") or {}).get("model") == model)]


PRESET_HISTORY = 5   # a preset's newest studies whose runs time it


@transaction
def preset_runs(session: Session, preset: str, size: str, queue: str, last: int = PRESET_HISTORY, *,
                spec: dict[str, Any] | None = None) -> list[Run]:
    """The runs of the newest ``last`` studies of ``preset`` at ``size`` on ``queue`` whose every child
    succeeded: what its own earlier studies took, fused as the worker fused them. A kind's runs at large
    mix in single runs, slower per unit of work than a fused sweep (a preset run in 25 s was put at 33 min).
    ``spec``: only the studies stored with this spec, the preset's as it is run without seeds or overrides (a
    run of one seed of eight, with more steps, fused less and put the preset at 1553 s for 32)."""
    newest = (select(Study.id, Study.spec).where(Study.preset == preset, Study.preset_size == size)
              .order_by(Study.created_at.desc(), Study.id.desc()))
    ids: list[str] = []
    page, offset = 20 * last, 0
    while len(ids) < 4 * last:   # page on until enough match: runs with overrides must not push them out of sight
        found = session.execute(newest.limit(page).offset(offset)).all()
        ids += [study_id for study_id, stored in found if spec is None or stored == spec]
        if len(found) < page:
            break
        offset += page
    ids = ids[:4 * last]
    by_study: dict[str, list] = {}
    for row in session.execute(select(Experiment.study_id, Experiment.spec, Experiment.worker, Experiment.started_at,
                                      Experiment.finished_at, Experiment.status, Experiment.queue)
                               .where(Experiment.study_id.in_(ids))).all() if ids else []:
        by_study.setdefault(row[0], []).append(row[1:])
    out: list[Run] = []
    taken = 0
    for study_id in ids:
        rows = by_study.get(study_id, [])
        if not rows or any(status != Status.succeeded or q != queue or started is None or done is None
                           for _, _, started, done, status, q in rows):
            continue
        out += [(dict(spec or {}), worker, as_utc(started), as_utc(done)) for spec, worker, started, done, _, _ in rows]
        taken += 1
        if taken == last:
            break
    return out


def busy_time(runs: list[Run]) -> float:
    """The time the runs' workers were busy with them: per worker the union of their [start, end] intervals (a
    fused batch, or a worker's parallel processes, overlap: that time counts once). Work per second of it is
    what a worker gets done."""
    spans: dict[str | None, list[tuple[datetime, datetime]]] = {}
    for _, worker, started, done in runs:
        spans.setdefault(worker, []).append((started, done))
    return busy_seconds(spans)


def busy_seconds(spans: dict[str | None, list[tuple[datetime, datetime]]]) -> float:
    """Σ over workers of the length of the union of their (start, end) intervals."""
    busy = 0.0
    for intervals in spans.values():
        end: datetime | None = None
        for start, stop in sorted(intervals):
            if end is None or start > end:
                busy += max(0.0, (stop - start).total_seconds())
                end = stop
            elif stop > end:
                busy += (stop - end).total_seconds()
                end = stop
    return busy


@transaction
def queue_state(session: Session, queue: str, live_seconds: float) -> QueueState:
    """The queue's counts now; ``processes`` counts the worker processes whose row (store.workers) was renewed
    within ``live_seconds`` (worker.presence.live_seconds): those up, idle or busy; ``busy_processes`` those of
    them running a job or a fused batch (the same unit: a worker's pool counts each process)."""
    queued = session.scalar(select(func.count()).select_from(Experiment).where(jobs.claimable([queue])))
    running = session.scalar(select(func.count()).select_from(Experiment)
                             .where(Experiment.queue == queue, Experiment.status == Status.running))
    workers = session.scalar(select(func.count(Experiment.worker.distinct()))
                             .where(Experiment.queue == queue, Experiment.status == Status.running,
                                    Experiment.lease_owner.is_not(None), Experiment.lease_expires_at > db_now()))
    live = worker_rows.live(session, queue, live_seconds)
    return QueueState(queue, int(queued or 0), int(running or 0), int(workers or 0), len(live),
                      sum(1 for _, busy, _ in live if busy), mean_duration(session, queue))


def estimate_starts(count: int, running_ends: list[datetime], slots: int, mean_seconds: float | None,
                    now: datetime) -> list[datetime | None]:
    """The estimated starts of the first ``count`` queued jobs, in order: each of ``slots`` parallel
    slots frees when its running job should end (``running_ends``: :func:`running_end`; now, if it is past
    it; an idle slot, now), and each queued job takes the earliest free slot for the mean duration. Anchored
    on the running jobs' ends, not on the clock: the estimate of a job stays put as time passes while its
    predecessors run their expected time. None without history."""
    if mean_seconds is None:
        return [None] * count
    mean = timedelta(seconds=mean_seconds)
    free = sorted(max(now, end) for end in running_ends)[:max(slots, 1)]
    free += [now] * (max(slots, 1) - len(free))
    out: list[datetime | None] = []
    for _ in range(count):
        free.sort()
        start = free[0]
        out.append(start)
        free[0] = start + mean
    return out


def running_end(started: datetime, pace_started: datetime | None, step: int, pace_start_step: int, total: int,
                mean_seconds: float | None, now: datetime) -> datetime:
    """When a running job should end: at its current attempt's pace once that has settled
    (:func:`store.jobs.remaining_seconds`, from its first progress report; a job ten times the mean's length
    frees its slot at its end, not at the mean's), else when it reaches the mean duration from its start."""
    pace = jobs.remaining_seconds(pace_started, step, pace_start_step, total, now)
    if pace is not None and pace[1]:
        return now + timedelta(seconds=pace[0])
    return as_utc(started) + timedelta(seconds=mean_seconds or 0.0)


@transaction
def snapshot(session: Session, owner_id: str | None = None, *, everyone: bool = False,
             now: datetime | None = None, live_seconds: float) -> Snapshot:
    """The state of every queue, and the queued and running jobs of ``owner_id`` (of every user
    with ``everyone``), running ones first, then queued ones in the order they would start (their
    estimated starts: :func:`estimate_starts`, from ``now``, by default the database's: the running jobs'
    starts are its times). ``live_seconds``: how recently a worker process's row must have been renewed to
    count as up (worker.presence.live_seconds)."""
    now = now or clock.now(session)
    states = {queue: queue_state(session, queue, live_seconds) for queue in QUEUES}
    orders = {queue: jobs.queue_order(session, queue) for queue in QUEUES}
    positions = {experiment_id: index + 1 for queue in QUEUES for index, experiment_id in enumerate(orders[queue])}
    starts: dict[str, list[datetime | None]] = {}
    for queue, queue_now in states.items():
        mean = queue_now.mean_duration_seconds
        ends = [running_end(started, pace_started, step, pace_step, total, mean, now)
                for started, pace_started, step, pace_step, total in
                session.execute(select(Experiment.started_at, Experiment.pace_started_at, Experiment.step,
                                       Experiment.pace_start_step, Experiment.total_steps)
                                .where(Experiment.queue == queue, Experiment.status == Status.running,
                                       Experiment.started_at.is_not(None))).all() if started is not None]
        # parallel slots: busy processes (running jobs) or live workers, whichever is larger, since one
        # worker with concurrency N holds N leases under one name
        starts[queue] = estimate_starts(len(orders[queue]), ends, max(queue_now.workers, queue_now.running), mean,
                                        now)
    query = select(Experiment).where(Experiment.status.in_(ACTIVE))
    if not everyone:
        query = query.where(jobs.by_owner(owner_id))
    rows = session.scalars(query).unique().all()
    out = []
    for experiment in rows:
        state = states.get(experiment.queue)
        if experiment.status == Status.running:
            out.append(JobState(experiment, None, as_utc(experiment.started_at)))
            continue
        # None: cancel requested (it will never start), or submitted after the order was read
        position = positions.get(experiment.id)
        estimate = starts[experiment.queue][position - 1] if position is not None and state is not None else None
        out.append(JobState(experiment, position, estimate))
    out.sort(key=lambda j: (j.experiment.queue, j.position is not None, j.position or 0,
                            as_utc(j.experiment.started_at or j.experiment.created_at), j.experiment.id))
    return Snapshot(states, out)
