"""Job-state transitions on the experiments table — the record of truth for every job."""
from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from store.models import TERMINAL, Experiment, utcnow


def create(session: Session, *, kind: str, name: Optional[str], spec: dict[str, Any], total_steps: int) -> Experiment:
    experiment = Experiment(kind=kind, name=name, spec=spec, status="queued", progress=0.0, step=0,
                            total_steps=total_steps, cancel_requested=False, attempts=0)
    session.add(experiment)
    session.flush()
    return experiment


def claim(session: Session, experiment_id: str, worker: str) -> bool:
    """queued → running, atomically. False when the job is not queued (already taken, cancelled or
    finished): a duplicate message is then dropped instead of running the job twice."""
    result = session.execute(
        update(Experiment)
        .where(Experiment.id == experiment_id, Experiment.status == "queued")
        .values(status="running", started_at=utcnow(), attempts=Experiment.attempts + 1, worker=worker,
                error=None, updated_at=utcnow())
    )
    return result.rowcount == 1


def finish(session: Session, experiment_id: str, status: str, *, error: Optional[str] = None,
           summary: Optional[dict] = None, theory: Optional[dict] = None,
           distributions: Optional[dict] = None) -> None:
    """Record the end of a job; a succeeded run also stores its final theory (conditioned on the
    run, e.g. its realized initial norms), summary and distributions."""
    assert status in TERMINAL
    values: dict[str, Any] = {"status": status, "finished_at": utcnow(), "updated_at": utcnow(), "error": error}
    for key, value in (("summary", summary), ("theory", theory), ("distributions", distributions)):
        if value is not None:
            values[key] = value
    if status == "succeeded":
        values["progress"] = 1.0
    session.execute(update(Experiment).where(Experiment.id == experiment_id).values(**values))


def request_cancel(session: Session, experiment_id: str) -> None:
    """A queued job is cancelled at once and never starts; a running one is flagged and its worker
    stops at its next progress check, keeping the partial results. Conditional updates, so a
    worker's concurrent claim or finish is never overwritten."""
    session.execute(update(Experiment).where(Experiment.id == experiment_id, Experiment.status == "queued")
                    .values(status="cancelled", finished_at=utcnow(), updated_at=utcnow()))
    session.execute(update(Experiment).where(Experiment.id == experiment_id, Experiment.status.not_in(TERMINAL))
                    .values(cancel_requested=True, updated_at=utcnow()))


def requeue_orphans(session: Session) -> list[str]:
    """Jobs left ``running`` by a worker that is known to be gone go back to ``queued``; returns
    the ids of every queued job, to be enqueued again (the claim drops duplicates)."""
    session.execute(update(Experiment).where(Experiment.status == "running")
                    .values(status="queued", updated_at=utcnow()))
    session.execute(update(Experiment).where(Experiment.status == "queued", Experiment.cancel_requested.is_(True))
                    .values(status="cancelled", finished_at=utcnow(), updated_at=utcnow()))
    return list(session.scalars(select(Experiment.id).where(Experiment.status == "queued")
                                .order_by(Experiment.created_at)))
