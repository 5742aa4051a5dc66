"""The queue: how busy each queue is, and where your jobs stand in the fair-share order."""
from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field

from api.deps import CurrentUserDep, DbDep, SettingsDep
from api.responses import UNAUTHORIZED
from api.schemas import ErrorOut, Priority, UtcTime
from store import queue_stats
from store.models import Status
from worker import presence

router = APIRouter(prefix="/v1/queue", tags=["queue"])


class QueueInfo(BaseModel):
    """One queue (cpu or gpu) now."""

    queued: int = Field(..., description="Jobs waiting to start on this queue, every user's.")
    running: int = Field(..., description="Jobs running on this queue, every user's.")
    workers: int = Field(..., description="Distinct workers holding a lease on a job of this queue now (idle "
                                          "workers are not counted: see processes).")
    processes: int = Field(..., description="Worker processes serving this queue that are up now, idle or busy "
                                            "(their presence renewed within a lease): 0 means no worker would start "
                                            "a job queued here.")
    busy_processes: int = Field(..., description="Of those processes, the ones running a job or a fused batch now "
                                                 "(processes − busy_processes are idle).")
    mean_duration_seconds: float | None = Field(
        ..., description=f"Mean run time (finished_at − started_at) of the last {queue_stats.DURATION_HISTORY} "
                         f"succeeded jobs of this queue; null when none has succeeded yet.")


class QueuedJob(BaseModel):
    """A queued or running job and where it stands."""

    id: str
    name: str | None
    kind: str
    status: Literal[Status.queued, Status.running]
    queue: Literal["cpu", "gpu"]
    priority: Priority = Field(..., description="Orders its owner's own queued jobs.")
    owner: str | None = Field(None, description="Name of the user who submitted it.")
    position: int | None = Field(
        ..., ge=1, description="Its 1-based place in its queue, counting every user's queued jobs, in the order "
                               "workers would start them (round-robin between users, then priority and age within "
                               "a user) if nothing else were submitted: an estimate, since jobs submitted later by "
                               "users with fewer running jobs may go ahead. Null for a running job (and for a "
                               "queued one whose cancellation is pending: it will not start).")
    estimated_start: UtcTime | None = Field(
        ..., description="Running: when its current attempt started. Queued: an estimate only: each worker slot "
                         "frees when its running job should end (at that job's pace once its attempt has done 10 % of "
                         "its steps, else at the queue's mean_duration_seconds), and each job ahead takes the earliest "
                         "free slot for mean_duration_seconds; null when its queue has no succeeded job yet (no "
                         "duration history).")


class QueueOut(BaseModel):
    queues: dict[str, QueueInfo] = Field(..., description="By queue name: cpu and gpu.")
    jobs: list[QueuedJob] = Field(..., description="Your queued and running jobs (every user's with all=true), by "
                                                   "queue: running ones first, then queued ones by position.")


def _job(state: queue_stats.JobState) -> QueuedJob:
    e = state.experiment
    return QueuedJob(id=e.id, name=e.name, kind=e.kind, status=e.status, queue=e.queue, priority=e.priority_name,
                     owner=e.owner_name, position=state.position, estimated_start=state.estimated_start)


@router.get("", response_model=QueueOut, operation_id="getQueue",
            responses={**UNAUTHORIZED,
                       403: {"model": ErrorOut, "description": "all=true is for admins only."}})
def get_queue(db: DbDep, user: CurrentUserDep, settings: SettingsDep,
              everyone: Annotated[bool, Query(alias="all", description="Every user's queued and running jobs "
                                                                        "(admins only).")] = False):
    """Queue lengths, workers and recent run times, and your queued and running jobs with their estimated start."""
    if everyone and not user.is_admin:
        raise HTTPException(status_code=403, detail=f"all=true lists every user's jobs and is for admins only; "
                                                    f"{user.name} is not an admin: leave it out to see your own jobs")
    snap = queue_stats.snapshot(db, user.id, everyone=everyone, live_seconds=presence.live_seconds(settings))
    return QueueOut(queues={name: QueueInfo(queued=q.queued, running=q.running, workers=q.workers, processes=q.processes,
                                            busy_processes=q.busy_processes,
                                            mean_duration_seconds=q.mean_duration_seconds)
                            for name, q in snap.queues.items()},
                    jobs=[_job(j) for j in snap.jobs])
