"""Job-state transitions on the experiments table — the record of truth for every job.

A running job is held by a lease: ``lease_owner`` ("<worker>/<token>", one token per attempt) and
``lease_expires_at``, renewed by its worker. Every write a worker makes for a job is conditioned on
still holding the lease, so a worker that lost it (its lease expired and another worker took the
job) can no longer change anything. The sweeper (:func:`expire_leases`) puts jobs whose lease
expired back in the queue, or fails them once they have used up their attempts.

Attempts and outages. An attempt ends ``succeeded``/``failed``/``cancelled`` (its worker wrote the
outcome), ``released`` (its worker shut down and gave the job back), ``lost`` (its lease expired:
the worker vanished) or ``interrupted`` (its lease expired while the database could not be
reached). A worker cannot renew a lease while the database is down, so a lapse then says nothing
about the worker or the job: the sweeper does not expire leases at all until the database has
answered it for a whole lease period after an outage it saw (a live worker renews in that time
and goes on, the attempt intact), and a lease that lapsed within an outage the sweeper saw
(``store.retry.journal``; ``expire_leases(outage=...)``) ends its attempt ``interrupted``. Only
``lost`` attempts count toward ``SMD_MAX_ATTEMPTS``: the job fails when that many of its
attempts were lost with a worker that vanished while the database answered. Infrastructure
(database outages, shutdowns) never uses up a job's attempts; ``attempts`` still counts starts.

Times are the Python clock of the writing process (UTC): hosts must keep their clocks in sync.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from store.models import ACTIVE, PRIORITIES, TERMINAL, Attempt, Checkpoint, Experiment, SeriesChunk, as_utc, utcnow


class LeaseLost(Exception):
    """The job's lease is no longer this worker's: stop working on it and write nothing more."""


@dataclass(frozen=True)
class Claim:
    """A job a worker has claimed: write to it only through ``owner``."""

    experiment_id: str
    attempt: int
    owner: str


def create(session: Session, *, kind: str, name: str | None, spec: dict[str, Any], total_steps: int,
           queue: str = "cpu", owner_id: str | None = None, visibility: str = "private",
           priority: int = PRIORITIES["normal"]) -> Experiment:
    experiment = Experiment(kind=kind, name=name, spec=spec, status="queued", progress=0.0, step=0,
                            total_steps=total_steps, cancel_requested=False, attempts=0, queue=queue,
                            owner_id=owner_id, visibility=visibility, priority=priority, revision=0)
    session.add(experiment)
    session.flush()
    return experiment


# Every change a client can see bumps the row's revision (ETags, events); lease renewals do not.
_BUMP = {"revision": Experiment.revision + 1}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def claimable(queues: list[str]):
    return and_(Experiment.status == "queued", Experiment.queue.in_(queues), Experiment.cancel_requested.is_(False))


@dataclass
class _Owner:
    """Fair-share state of one owner's queued jobs: fewest running first, then least recently
    served (never served first), then whoever has waited longest."""

    running: int
    last_started: datetime | None
    first_created: datetime

    def key(self) -> tuple:
        return self.running, self.last_started or _EPOCH, self.first_created


def _waiting(session: Session, queues: list[str]) -> dict[str | None, datetime]:
    """{owner: created_at of the owner's oldest claimable job in ``queues``}."""
    return dict(session.execute(select(Experiment.owner_id, func.min(Experiment.created_at))
                                .where(claimable(queues)).group_by(Experiment.owner_id)).all())


def _owners(session: Session, queues: list[str], waiting: dict[str | None, datetime]) -> dict[str | None, _Owner]:
    """The fair-share state of the owners of ``waiting`` (as :func:`_waiting` gives it)."""
    if not waiting:
        return {}
    running = dict(session.execute(select(Experiment.owner_id, func.count())
                                   .where(Experiment.status == "running", Experiment.queue.in_(queues))
                                   .group_by(Experiment.owner_id)).all())
    served = dict(session.execute(select(Experiment.owner_id, func.max(Experiment.started_at))
                                  .group_by(Experiment.owner_id)).all())
    return {owner: _Owner(int(running.get(owner, 0)), as_utc(served.get(owner)), as_utc(first))
            for owner, first in waiting.items()}


def by_owner(owner_id: str | None):
    return Experiment.owner_id.is_(None) if owner_id is None else Experiment.owner_id == owner_id


_OWN_ORDER = (Experiment.priority.desc(), Experiment.created_at, Experiment.id)  # within one owner


def claim_next(session: Session, queues: list[str], worker: str, lease_seconds: float,
               experiment_id: str | None = None) -> Claim | None:
    """Take the next queued job of ``queues`` (or that one job): queued → running with a fresh
    lease and attempt number, atomically. None when there is nothing to take. Concurrent claimers
    never take the same job: the update is conditional on the row still being queued.

    Fair share: the owner is chosen by :class:`_Owner` (round-robin by user, so one user's 100
    queued jobs do not hold back another's single job); among that owner's jobs, highest priority
    first, then oldest."""
    if experiment_id is not None:
        groups = [[experiment_id]]
    else:
        owners = _owners(session, queues, _waiting(session, queues))
        groups = [session.scalars(select(Experiment.id).where(claimable(queues), by_owner(owner))
                                  .order_by(*_OWN_ORDER).limit(5)).all()
                  for owner in sorted(owners, key=lambda o: owners[o].key())]
    for candidates in groups:
        for candidate in candidates:
            claim = _try_claim(session, candidate, worker, lease_seconds)
            if claim is not None:
                return claim
    return None


def _try_claim(session: Session, candidate: str, worker: str, lease_seconds: float) -> Claim | None:
    owner = f"{worker}/{uuid.uuid4().hex[:12]}"
    now = utcnow()
    result = session.execute(
        update(Experiment)
        .where(Experiment.id == candidate, Experiment.status == "queued", Experiment.cancel_requested.is_(False))
        .values(status="running", started_at=now, attempts=Experiment.attempts + 1, worker=worker,
                lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease_seconds),
                error=None, updated_at=now, **_BUMP)
    )
    if result.rowcount != 1:
        return None
    attempt = session.scalar(select(Experiment.attempts).where(Experiment.id == candidate))
    session.add(Attempt(experiment_id=candidate, number=attempt, worker=owner, started_at=now))
    session.flush()
    return Claim(candidate, attempt, owner)


def queue_order(session: Session, queue: str) -> list[str]:
    """Ids of the claimable jobs of ``queue`` in the order workers would start them if nothing else
    were submitted: :func:`claim_next`'s rule replayed, each start counting as one more running
    job of its owner (an estimate: it does not know when running jobs end)."""
    rows = session.execute(select(Experiment.id, Experiment.owner_id, Experiment.created_at)
                           .where(claimable([queue])).order_by(*_OWN_ORDER)).all()
    pending: dict[str | None, list[str]] = {}
    first: dict[str | None, datetime] = {}
    for experiment_id, owner, created in rows:
        pending.setdefault(owner, []).append(experiment_id)
        first[owner] = min(first.get(owner, created), created)
    # the owners are those of the rows just read: a second read of the claimable jobs could miss one
    # that a worker claimed in between (a KeyError, once a 500 of GET /v1/queue)
    owners = _owners(session, [queue], first)
    order: list[str] = []
    clock = max([o.last_started for o in owners.values() if o.last_started] + [utcnow()])
    while pending:
        owner = min(pending, key=lambda o: owners[o].key())
        order.append(pending[owner].pop(0))
        if not pending[owner]:
            del pending[owner]
        clock += timedelta(microseconds=1)
        owners[owner] = _Owner(owners[owner].running + 1, clock, owners[owner].first_created)
    return order


def _held(claim: Claim):
    return and_(Experiment.id == claim.experiment_id, Experiment.status == "running",
                Experiment.lease_owner == claim.owner)


def renew(session: Session, claim: Claim, lease_seconds: float) -> None:
    """Extend the lease; raises :class:`LeaseLost` when it is no longer held."""
    result = session.execute(update(Experiment).where(_held(claim))
                             .values(lease_expires_at=utcnow() + timedelta(seconds=lease_seconds)))
    if result.rowcount != 1:
        raise LeaseLost(claim.experiment_id)


def record_progress(session: Session, claim: Claim, step: int, total: int) -> bool:
    """Write progress under the lease; returns the cancel flag. Raises :class:`LeaseLost`."""
    values: dict[str, Any] = {"step": step, "updated_at": utcnow(), **_BUMP}
    if total:
        values["progress"] = step / total
    if session.execute(update(Experiment).where(_held(claim)).values(**values)).rowcount != 1:
        raise LeaseLost(claim.experiment_id)
    return bool(session.scalar(select(Experiment.cancel_requested).where(Experiment.id == claim.experiment_id)))


def finish_claimed(session: Session, claim: Claim, status: str, *, error: str | None = None,
                   summary: dict | None = None, theory: dict | None = None,
                   distributions: dict | None = None) -> None:
    """End a claimed job if the lease is still held (the attempt too, and its checkpoint is dropped);
    raises :class:`LeaseLost`."""
    if not _finish(session, _held(claim), status, error=error, summary=summary, theory=theory,
                   distributions=distributions):
        raise LeaseLost(claim.experiment_id)
    _end_attempt(session, claim.experiment_id, claim.attempt, status)
    session.execute(delete(Checkpoint).where(Checkpoint.experiment_id == claim.experiment_id))


def _finish(session: Session, where, status: str, **results: Any) -> bool:
    """A succeeded run also stores its final theory (conditioned on the run, e.g. its realized
    initial norms), summary and distributions. The lease is cleared."""
    assert status in TERMINAL
    now = utcnow()
    values: dict[str, Any] = {"status": status, "finished_at": now, "updated_at": now, "error": results.pop("error"),
                              "lease_owner": None, "lease_expires_at": None, **_BUMP}
    values.update({key: value for key, value in results.items() if value is not None})
    if status == "succeeded":
        values["progress"] = 1.0
    return session.execute(update(Experiment).where(where).values(**values)).rowcount == 1


def release(session: Session, claim: Claim) -> None:
    """Give a claimed job back to the queue (its worker is shutting down); no-op if not held."""
    now = utcnow()
    result = session.execute(update(Experiment).where(_held(claim))
                             .values(status="queued", lease_owner=None, lease_expires_at=None, updated_at=now,
                                     **_BUMP))
    if result.rowcount == 1:
        _end_attempt(session, claim.experiment_id, claim.attempt, "released")


def _end_attempt(session: Session, experiment_id: str, number: int, outcome: str) -> None:
    session.execute(update(Attempt).where(Attempt.experiment_id == experiment_id, Attempt.number == number,
                                          Attempt.ended_at.is_(None))
                    .values(ended_at=utcnow(), outcome=outcome))


def request_cancel(session: Session, experiment_id: str) -> None:
    """A queued job is cancelled at once and never starts; a running one is flagged and its worker
    stops at its next progress write, keeping the partial results. Conditional updates, so a
    worker's concurrent claim or finish is never overwritten."""
    session.execute(update(Experiment).where(Experiment.id == experiment_id, Experiment.status == "queued")
                    .values(status="cancelled", cancel_requested=True, finished_at=utcnow(), updated_at=utcnow(),
                            **_BUMP))
    session.execute(update(Experiment).where(Experiment.id == experiment_id, Experiment.status.not_in(TERMINAL))
                    .values(cancel_requested=True, updated_at=utcnow(), **_BUMP))


def expire_leases(session: Session, max_attempts: int, *, owner_prefix: str | None = None,
                  outage: Callable[[datetime], bool] | None = None) -> list[str]:
    """The sweeper's pass: every running job whose lease has expired (or, with ``owner_prefix``,
    whose lease is held by that worker, known to be gone) lost its worker. It goes back to
    ``queued``, or ends ``failed`` when ``max_attempts`` of its attempts have been lost, or
    ``cancelled`` when a cancel was requested. ``outage(lease_expires_at)`` tells whether the
    database may have been unreachable when the lease lapsed: then the attempt ends
    ``interrupted`` and does not count (see the module's header). Returns the ids put back in the
    queue."""
    now = utcnow()
    lost = Experiment.lease_expires_at < now
    if owner_prefix is not None:
        lost = or_(lost, Experiment.lease_owner.startswith(f"{owner_prefix}/", autoescape=True))
    rows = session.execute(select(Experiment.id, Experiment.attempts, Experiment.worker, Experiment.lease_owner,
                                  Experiment.cancel_requested, Experiment.lease_expires_at)
                           .where(Experiment.status == "running", lost)).all()
    counted = lost_attempts(session, [row[0] for row in rows])
    requeued = []
    for experiment_id, attempts, worker, owner, cancel, expires in rows:
        held = and_(Experiment.id == experiment_id, Experiment.status == "running", Experiment.lease_owner == owner)
        lapsed = as_utc(expires)
        interrupted = outage is not None and lapsed is not None and outage(lapsed)
        n_lost = counted.get(experiment_id, 0) + (0 if interrupted else 1)
        if cancel:
            done = _finish(session, held, "cancelled", error=None)
        elif n_lost >= max_attempts:
            each = "each of its" if n_lost == attempts else f"{n_lost} of its"
            done = _finish(session, held, "failed", error=(
                f"the worker running it was lost during {each} {attempts} attempts (last: {worker}); "
                f"SMD_MAX_ATTEMPTS is {max_attempts}"))
        else:
            done = session.execute(update(Experiment).where(held).values(
                status="queued", lease_owner=None, lease_expires_at=None, updated_at=now, **_BUMP)).rowcount == 1
            if done:
                requeued.append(experiment_id)
        if done:
            _end_attempt(session, experiment_id, attempts, "interrupted" if interrupted else "lost")
    return requeued


def lost_attempts(session: Session, experiment_ids: list[str]) -> dict[str, int]:
    """{experiment id: attempts that ended ``lost``}: those that count toward SMD_MAX_ATTEMPTS."""
    if not experiment_ids:
        return {}
    return {experiment_id: int(n) for experiment_id, n in session.execute(
        select(Attempt.experiment_id, func.count()).where(Attempt.experiment_id.in_(experiment_ids),
                                                          Attempt.outcome == "lost")
        .group_by(Attempt.experiment_id)).all()}


def queued_counts(session: Session) -> dict[str, int]:
    """Queued (claimable) jobs per queue."""
    rows = session.execute(select(Experiment.queue, func.count()).where(
        Experiment.status == "queued", Experiment.cancel_requested.is_(False)).group_by(Experiment.queue)).all()
    return {queue: int(n) for queue, n in rows}


def save_checkpoint(session: Session, claim: Claim, step: int, n_points: int, data: bytes) -> None:
    """Replace the job's checkpoint (under the lease; raises :class:`LeaseLost`)."""
    if session.execute(select(Experiment.id).where(_held(claim)).with_for_update()).first() is None:
        raise LeaseLost(claim.experiment_id)
    session.execute(delete(Checkpoint).where(Checkpoint.experiment_id == claim.experiment_id))
    session.add(Checkpoint(experiment_id=claim.experiment_id, attempt=claim.attempt, step=step, n_points=n_points,
                           data=data, created_at=utcnow()))


def load_checkpoint(session: Session, experiment_id: str) -> Checkpoint | None:
    return session.get(Checkpoint, experiment_id)


def drop_checkpoint(session: Session, experiment_id: str) -> None:
    session.execute(delete(Checkpoint).where(Checkpoint.experiment_id == experiment_id))


def note_resume(session: Session, claim: Claim, step: int | None) -> None:
    session.execute(update(Attempt).where(Attempt.experiment_id == claim.experiment_id,
                                          Attempt.number == claim.attempt).values(resumed_from_step=step))


def attempts(session: Session, experiment_id: str) -> list[Attempt]:
    return list(session.scalars(select(Attempt).where(Attempt.experiment_id == experiment_id)
                                .order_by(Attempt.number)))


def remove(session: Session, experiment_id: str) -> None:
    """Remove an ended job and everything stored for it (children first: SQLite may run without
    foreign-key cascades on an old connection)."""
    for table in (SeriesChunk, Attempt, Checkpoint):
        session.execute(delete(table).where(table.experiment_id == experiment_id))
    session.execute(delete(Experiment).where(Experiment.id == experiment_id, Experiment.status.in_(TERMINAL)))


def active_count(session: Session, owner_id: str | None) -> int:
    """Queued and running jobs of one owner (the active-jobs quota)."""
    return int(session.scalar(select(func.count()).select_from(Experiment).where(
        by_owner(owner_id), Experiment.status.in_(ACTIVE))) or 0)
