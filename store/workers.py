"""Which worker processes are alive, which are idle and which run a study's children: what a claimer
divides a study by (worker.runner), so that two idle workers split a study instead of one taking it all.

Each worker process keeps a row (worker.presence): written when it starts, renewed every few seconds,
marked ``busy`` from a claim to the end of the job or batch, deleted when it stops. Every time here is
the database's clock (store.clock), so a host whose clock is off is counted like any other. A row not
renewed for ``live_seconds`` belongs to a process that died: it is not counted, and :func:`forget_stale`
removes it later. The count is advice, never a lock: a claimer that sees a stale picture only fuses a
batch of another size; every job is still claimed by a compare-and-set (store.jobs)."""
from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from store.clock import db_now
from store.db import transaction
from store.models import WorkerProcess


@transaction
def beat(session: Session, worker_id: str, queues: str, busy: bool | None = None, study_id: str | None = None) -> None:
    """Say that ``worker_id`` is alive (and, unless ``busy`` is None, whether it is busy, and with which
    study's children): its row renewed, or created."""
    values: dict = {"seen_at": db_now(), "queues": queues}
    if busy is not None:
        values.update(busy=busy, study_id=study_id if busy else None)
    done = session.execute(update(WorkerProcess).where(WorkerProcess.id == worker_id).values(**values))
    if done.rowcount == 0:   # type: ignore[attr-defined]
        session.add(WorkerProcess(id=worker_id, queues=queues, busy=bool(busy), study_id=study_id if busy else None,
                                  started_at=db_now(), seen_at=db_now()))


@transaction
def leave(session: Session, worker_id: str) -> None:
    session.execute(delete(WorkerProcess).where(WorkerProcess.id == worker_id))


@transaction
def forget_worker(session: Session, name: str) -> int:
    """Remove the rows of every process of the worker ``name`` (ids ``<name>/<pid>``), known to be gone: counted
    live until their rows went stale, they halved the fused batches of the children they had held."""
    done = session.execute(delete(WorkerProcess).where(WorkerProcess.id.startswith(f"{name}/", autoescape=True)))
    return int(done.rowcount or 0)   # type: ignore[attr-defined]


@transaction
def forget_stale(session: Session, older_than_seconds: float) -> int:
    """Remove the rows of processes not seen for ``older_than_seconds`` (they died without leaving)."""
    done = session.execute(delete(WorkerProcess).where(WorkerProcess.seen_at < db_now(-older_than_seconds)))
    return int(done.rowcount or 0)   # type: ignore[attr-defined]


@transaction
def live(session: Session, queue: str, live_seconds: float) -> list[tuple[str, bool, str | None]]:
    """(id, busy, study id) of the processes serving ``queue`` seen within ``live_seconds``."""
    rows = session.execute(select(WorkerProcess.id, WorkerProcess.queues, WorkerProcess.busy, WorkerProcess.study_id)
                           .where(WorkerProcess.seen_at >= db_now(-live_seconds))).all()
    return [(r.id, bool(r.busy), r.study_id) for r in rows if queue in r.queues.split(",")]


@transaction
def sharing(session: Session, queue: str, me: str | None, live_seconds: float, study_id: str | None) -> int:
    """How many processes share a study's children: this one (the claimer, ``me``), every other live
    process serving ``queue`` that is idle, and every one already running children of ``study_id`` (it
    took its share; counting it keeps a second claimer from taking the rest of the first one's share, and
    two claimers that start together from taking 15 and 1). 1 when no other is known (a process not
    registered, as ``smd study run --local``, counts alone)."""
    return 1 + sum(1 for worker_id, busy, study in live(session, queue, live_seconds)
                   if worker_id != me and (not busy or (study_id is not None and study == study_id)))
