"""What the queues look like now: per-queue counts, workers and recent durations, and where each
queued job stands in the fair-share order (:func:`store.jobs.queue_order`), with an estimated
start. Read-only; every public function is a unit of work (:func:`store.db.transaction`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store import jobs
from store.db import transaction
from store.models import ACTIVE, QUEUES, Experiment, Status, as_utc, utcnow

DURATION_HISTORY = 50   # succeeded jobs per queue the mean duration is taken over


@dataclass(frozen=True)
class QueueState:
    name: str
    queued: int                              # claimable jobs, every user's
    running: int
    workers: int                             # distinct worker names holding a live lease on this queue
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


@transaction
def queue_state(session: Session, queue: str, now: datetime | None = None) -> QueueState:
    now = now or utcnow()
    queued = session.scalar(select(func.count()).select_from(Experiment).where(jobs.claimable([queue])))
    running = session.scalar(select(func.count()).select_from(Experiment)
                             .where(Experiment.queue == queue, Experiment.status == Status.running))
    workers = session.scalar(select(func.count(Experiment.worker.distinct()))
                             .where(Experiment.queue == queue, Experiment.status == Status.running,
                                    Experiment.lease_owner.is_not(None), Experiment.lease_expires_at > now))
    return QueueState(queue, int(queued or 0), int(running or 0), int(workers or 0), mean_duration(session, queue))


def estimate_start(position: int, workers: int, mean_seconds: float | None, now: datetime) -> datetime | None:
    """now + ceil(position / max(1, workers)) × the mean duration: as if each worker ran one job at
    a time, every job took the mean, and nothing were submitted ahead of it. None without history."""
    if mean_seconds is None:
        return None
    return now + timedelta(seconds=math.ceil(position / max(1, workers)) * mean_seconds)


@transaction
def snapshot(session: Session, owner_id: str | None = None, *, everyone: bool = False) -> Snapshot:
    """The state of every queue, and the queued and running jobs of ``owner_id`` (of every user
    with ``everyone``), running ones first, then queued ones in the order they would start."""
    now = utcnow()
    states = {queue: queue_state(session, queue, now) for queue in QUEUES}
    positions = {experiment_id: index + 1 for queue in QUEUES
                 for index, experiment_id in enumerate(jobs.queue_order(session, queue))}
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
        # parallel slots: busy processes (running jobs) or live workers, whichever is larger, since one
        # worker with concurrency N holds N leases under one name
        estimate = (estimate_start(position, max(state.workers, state.running), state.mean_duration_seconds, now)
                    if position is not None and state is not None else None)
        out.append(JobState(experiment, position, estimate))
    out.sort(key=lambda j: (j.experiment.queue, j.position is not None, j.position or 0,
                            as_utc(j.experiment.started_at or j.experiment.created_at), j.experiment.id))
    return Snapshot(states, out)
