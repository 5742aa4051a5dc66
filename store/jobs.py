"""Job-state transitions on the experiments table — the record of truth for every job.

A running job is held by a lease: ``lease_owner`` ("<worker>/<token>", one token per attempt) and
``lease_expires_at``, renewed by its worker. Every write a worker makes for a job is conditioned on
still holding the lease, so a worker that lost it (its lease expired and another worker took the
job) can no longer change anything. The sweeper (:func:`expire_leases`) puts jobs whose lease
expired back in the queue, or fails them once they have used up their attempts; its writes are
conditioned on the lease being the one it read and still expired, so a renewal that commits first wins.

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

Clocks. Every time that one host writes and another compares (a lease's expiry, a job's start, end
and ``updated_at``, an attempt's start and end, a checkpoint's time) is the database server's clock,
read inside the statement (:class:`store.clock.db_now`): the claim writes ``db_now + lease``, a renewal
the same, the sweeper tests ``lease_expires_at < db_now``. No host's clock takes part, so hosts need not
agree on the time (no NTP); each host times its own intervals (renewals, retries) with a monotonic clock.

In short: every state change is a compare-and-set conditioned on the lease (owner, status, and for an
expiry the lapse itself), and whether a lease has lapsed is decided by the database's clock alone.

Every public function is a unit of work (:func:`store.db.transaction`): called with the database
URL it runs in a transaction of its own; returned rows are detached.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Executable,
    Row,
    and_,
    bindparam,
    case,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session, defer

from store import search
from store.clock import db_now, stamp
from store.clock import now as db_time
from store.db import Db, read, transaction
from store.kept import ByRevision
from store.models import (
    ACTIVE,
    EPOCH,
    PRIORITIES,
    TERMINAL,
    Attempt,
    Checkpoint,
    Experiment,
    ExperimentTag,
    SeriesChunk,
    Status,
    Study,
    StudyMember,
    User,
    as_utc,
)
from store.search import Position, Predicate
from store.series import truncate_points, write_points


class LeaseLost(Exception):
    """The job's lease is no longer this worker's: stop working on it and write nothing more."""


@dataclass(frozen=True)
class Claim:
    """A job a worker has claimed: write to it only through ``owner``."""

    experiment_id: str
    attempt: int
    owner: str


class QuotaExceeded(Exception):
    """A submission over the owner's active-jobs quota: ``active`` jobs of at most ``limit``;
    ``retry_after`` seconds is when one of them should end."""

    def __init__(self, active: int, limit: int, retry_after: int):
        super().__init__(f"{active} active jobs, limit {limit}")
        self.active, self.limit, self.retry_after = active, limit, retry_after


def _rowcount(session: Session, statement: Executable) -> int:
    """Rows an UPDATE or DELETE matched."""
    result = session.execute(statement)
    assert isinstance(result, CursorResult)
    return result.rowcount


@transaction
def create(session: Session, *, kind: str, name: str | None, spec: dict[str, Any], total_steps: int,
           queue: str = "cpu", owner_id: str | None = None, visibility: str = "private",
           priority: int = PRIORITIES["normal"], warnings: list[dict[str, Any]] | None = None,
           keep_checkpoint: bool = False, tags: Sequence[str] = (), note: str | None = None) -> Experiment:
    """A new queued experiment; ``warnings``: its spec's warnings (smdengine.spec_warnings)."""
    # created_at orders the fair queue (_waiting), which a worker host compares across jobs that API hosts
    # made: the database's clock (store.clock.stamp), like every time another host compares
    now = stamp(session)
    experiment = Experiment(kind=kind, name=name, spec=spec, status=Status.queued, progress=0.0, step=0,
                            created_at=now, updated_at=now, queued_at=now,
                            total_steps=total_steps, cancel_requested=False, attempts=0, queue=queue,
                            owner_id=owner_id, visibility=visibility, priority=priority, revision=0,
                            warnings=warnings, keep_checkpoint=keep_checkpoint, note=note,
                            tag_rows=[ExperimentTag(tag=t) for t in sorted(set(tags))])
    session.add(experiment)
    session.flush()
    return experiment


# Every change a client can see bumps the row's revision (ETags, events); lease renewals do not.
_BUMP = {"revision": Experiment.revision + 1}


def claimable(queues: Sequence[str]) -> ColumnElement[bool]:
    return and_(Experiment.status == Status.queued, Experiment.queue.in_(queues), Experiment.cancel_requested.is_(False))


@dataclass
class _Owner:
    """Fair-share state of one owner's queued jobs: fewest running first, then least recently
    served (never served first), then whoever has waited longest."""

    running: int
    last_started: datetime | None
    first_created: datetime

    def key(self) -> tuple[int, datetime, datetime]:
        return self.running, self.last_started or EPOCH, self.first_created


def _waiting(session: Session, queues: Sequence[str]) -> dict[str | None, datetime]:
    """{owner: created_at of the owner's oldest claimable job in ``queues``}."""
    rows = session.execute(select(Experiment.owner_id, func.min(Experiment.created_at))
                           .where(claimable(queues)).group_by(Experiment.owner_id)).all()
    return {owner: first for owner, first in rows}


def _owners(session: Session, queues: Sequence[str], waiting: dict[str | None, datetime]) -> dict[str | None, _Owner]:
    """The fair-share state of the owners of ``waiting`` (as :func:`_waiting` gives it)."""
    if not waiting:
        return {}
    running = dict(session.execute(select(Experiment.owner_id, func.count())
                                   .where(Experiment.status == Status.running, Experiment.queue.in_(queues))
                                   .group_by(Experiment.owner_id)).all())
    served = dict(session.execute(select(Experiment.owner_id, func.max(Experiment.started_at))
                                  .group_by(Experiment.owner_id)).all())
    return {owner: _Owner(int(running.get(owner, 0)), as_utc(served.get(owner)), as_utc(first))
            for owner, first in waiting.items()}


def by_owner(owner_id: str | None) -> ColumnElement[bool]:
    return Experiment.owner_id.is_(None) if owner_id is None else Experiment.owner_id == owner_id


# within one owner: a study's children share one created_at, so they run in expansion order
_OWN_ORDER = (Experiment.priority.desc(), Experiment.created_at, Experiment.study_index, Experiment.id)


@transaction
def claim_next(session: Session, queues: Sequence[str], worker: str, lease_seconds: float,
               experiment_id: str | None = None) -> Claim | None:
    """Take the next queued job of ``queues`` (or that one job): queued → running with a fresh
    lease and attempt number, atomically. None when there is nothing to take. Concurrent claimers
    never take the same job: the update is conditional on the row still being queued.

    Fair share: the owner is chosen by :class:`_Owner` (round-robin by user, so one user's 100
    queued jobs do not hold back another's single job); among that owner's jobs, highest priority
    first, then oldest."""
    groups: list[Sequence[str]]
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
    now = db_now()   # the database's clock, as every lease time (module header, "Clocks")
    claimed = _rowcount(session,
        update(Experiment)
        .where(Experiment.id == candidate, Experiment.status == Status.queued, Experiment.cancel_requested.is_(False))
        .values(status=Status.running, started_at=now, start_step=Experiment.step,   # no pace until it reports
                pace_started_at=None, progressed_at=None, pace_start_step=Experiment.step,
                attempts=Experiment.attempts + 1, worker=worker,
                lease_owner=owner, lease_expires_at=db_now(lease_seconds), error=None, updated_at=now, **_BUMP)
    )
    if claimed != 1:
        return None
    attempt, started = session.execute(select(Experiment.attempts, Experiment.started_at)
                                       .where(Experiment.id == candidate)).one()
    session.add(Attempt(experiment_id=candidate, number=attempt, worker=owner, started_at=started))
    session.flush()
    return Claim(candidate, attempt, owner)


@dataclass(frozen=True)
class Fusable:
    """What a claimer of a study's child needs to size its batch (:func:`fusion_candidates`)."""

    candidates: list[tuple[str, dict[str, Any]]]   # (id, spec) of siblings that could share its batch
    open: int = 0                                   # the study's children queued or running, this one included
    queue: str = ""
    study_id: str | None = None


@transaction
def fusion_candidates(session: Session, claim: Claim, limit: int) -> Fusable:
    """The (id, spec) of at most ``limit`` claimable children of the claimed job's study that stand where it
    stands: never started if it starts fresh, or with a checkpoint at the same step as its own (the members
    of a fused batch checkpoint together, so a lost batch resumes as one), in the study's order, when the
    claimed job is such a child and its study lets its children run fused (the study option ``fuse``,
    default true); none otherwise. The worker picks the ones that can share its batch and claims each
    (:func:`claim_next` with its id)."""
    row = session.execute(select(Experiment.study_id, Experiment.queue).where(_held(claim))).one_or_none()
    if row is None or row.study_id is None or limit < 1:
        return Fusable([], queue=row.queue if row else "")
    if not (session.scalars(select(Study.spec).where(Study.id == row.study_id)).one_or_none() or {}).get("fuse", True):
        return Fusable([], queue=row.queue, study_id=row.study_id)
    step = session.scalar(select(Checkpoint.step).where(Checkpoint.experiment_id == claim.experiment_id))
    same_start = Checkpoint.step.is_(None) if step is None else Checkpoint.step == step
    rows = session.execute(select(Experiment.id, Experiment.spec)
                           .outerjoin(Checkpoint, Checkpoint.experiment_id == Experiment.id)
                           .where(Experiment.study_id == row.study_id, claimable([row.queue]), same_start)
                           .order_by(Experiment.study_index).limit(limit)).all()
    open_ = session.scalar(select(func.count()).select_from(Experiment)
                           .where(Experiment.study_id == row.study_id, Experiment.status.in_(ACTIVE)))
    return Fusable([(r.id, r.spec) for r in rows], int(open_ or 0), row.queue, row.study_id)


@transaction
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
    # each replayed start is served after every start so far: later than the latest stored one
    clock = max([o.last_started for o in owners.values() if o.last_started] + [EPOCH])
    while pending:
        owner = min(pending, key=lambda o: owners[o].key())
        order.append(pending[owner].pop(0))
        if not pending[owner]:
            del pending[owner]
        clock += timedelta(microseconds=1)
        owners[owner] = _Owner(owners[owner].running + 1, clock, owners[owner].first_created)
    return order


def _held(claim: Claim) -> ColumnElement[bool]:
    return and_(Experiment.id == claim.experiment_id, Experiment.status == Status.running,
                Experiment.lease_owner == claim.owner)


def _hold(session: Session, claim: Claim) -> None:
    """Lock the job's row while its lease is held by ``claim``; raises :class:`LeaseLost`."""
    if session.execute(select(Experiment.id).where(_held(claim)).with_for_update()).first() is None:
        raise LeaseLost(claim.experiment_id)


@transaction
def renew(session: Session, claim: Claim, lease_seconds: float) -> None:
    """Extend the lease to ``lease_seconds`` after the database's now; raises :class:`LeaseLost` when it
    is no longer held. Not a change a client sees: neither the revision nor ``updated_at`` (the time of the
    last change a client sees) moves, so a document kept by revision (store.kept, api.rendered) stays the
    row's."""
    if _rowcount(session, update(Experiment).where(_held(claim))
                 .values(lease_expires_at=db_now(lease_seconds), updated_at=Experiment.updated_at)) != 1:
        raise LeaseLost(claim.experiment_id)


@transaction
def record_progress(session: Session, claim: Claim, step: int, total: int, *,
                    points: dict[str, list[Any]] | None = None, start_index: int = 0) -> bool:
    """Write progress under the lease, and ``points`` (if any) from ``start_index`` on; returns the
    cancel flag. Raises :class:`LeaseLost` (before any point is written)."""
    values: dict[str, Any] = {"step": step, "updated_at": db_now(), "progressed_at": db_now(), **_BUMP,
                              # the attempt's first report, its set-up done, is where its pace starts
                              "pace_started_at": func.coalesce(Experiment.pace_started_at, db_now()),
                              "pace_start_step": case((Experiment.pace_started_at.is_(None), step),
                                                      else_=Experiment.pace_start_step)}
    if total:
        values["progress"] = step / total
    if _rowcount(session, update(Experiment).where(_held(claim)).values(**values)) != 1:
        raise LeaseLost(claim.experiment_id)
    if points and points.get("step"):
        write_points(session, claim.experiment_id, start_index, points)
    return bool(session.scalar(select(Experiment.cancel_requested).where(Experiment.id == claim.experiment_id)))


@transaction
def begin_attempt(session: Session, claim: Claim, *, theory: dict[str, Any],
                  resume_points: dict[str, list[Any]] | None = None, resume_step: int | None = None,
                  provenance: dict[str, Any] | None = None) -> None:
    """Under the lease (raises :class:`LeaseLost`): the stored series becomes the checkpoint's
    points (``resume_points``; none without a checkpoint), the attempt notes the step it resumed
    from and what runs it (``provenance``), and the job's theory (before the run) is stored."""
    _hold(session, claim)
    if provenance is not None:
        session.execute(update(Attempt).where(Attempt.experiment_id == claim.experiment_id,
                                              Attempt.number == claim.attempt).values(provenance=provenance))
    if resume_points is not None:
        write_points(session, claim.experiment_id, 0, resume_points)
        _note_start(session, claim, resume_step)
    else:
        truncate_points(session, claim.experiment_id, 0)
        _note_start(session, claim, None)
    record_theory(session, claim, theory)


@transaction
def record_theory(session: Session, claim: Claim, theory: dict[str, Any]) -> None:
    """Store the job's theory under the lease; raises :class:`LeaseLost`. A change a client sees:
    it bumps the revision (ETags, the cache of :func:`outputs`)."""
    if _rowcount(session, update(Experiment).where(_held(claim)).values(theory=theory, **_BUMP)) != 1:
        raise LeaseLost(claim.experiment_id)


@transaction
def forget_checkpoint(session: Session, claim: Claim) -> None:
    """Under the lease (raises :class:`LeaseLost`): drop a checkpoint that cannot be resumed; the
    attempt starts from scratch."""
    _hold(session, claim)
    _drop_checkpoint(session, claim.experiment_id)
    _note_start(session, claim, None)


@dataclass(frozen=True)
class RunInput:
    """What a worker needs to run a claimed job: its spec and stored checkpoint (bytes, step)."""

    spec: dict[str, Any]
    checkpoint: tuple[bytes, int] | None
    keep_checkpoint: bool = False


@transaction
def load_run(session: Session, claim: Claim) -> RunInput:
    """The claimed job's spec and checkpoint; raises :class:`LeaseLost`."""
    row = session.execute(select(Experiment.spec, Experiment.keep_checkpoint).where(_held(claim))).first()
    if row is None:
        raise LeaseLost(claim.experiment_id)
    stored = session.get(Checkpoint, claim.experiment_id)
    return RunInput(row.spec, (stored.data, stored.step) if stored is not None else None, bool(row.keep_checkpoint))


@transaction
def finish_claimed(session: Session, claim: Claim, status: str, *, error: str | None = None,
                   summary: dict[str, Any] | None = None, theory: dict[str, Any] | None = None,
                   distributions: dict[str, Any] | None = None) -> None:
    """End a claimed job if the lease is still held (the attempt too, and its checkpoint is dropped);
    raises :class:`LeaseLost`."""
    if not _finish(session, _held(claim), status, error=error, summary=summary, theory=theory,
                   distributions=distributions):
        raise LeaseLost(claim.experiment_id)
    _end_attempt(session, claim.experiment_id, claim.attempt, status)
    kept = status == Status.succeeded and session.scalars(
        select(Experiment.keep_checkpoint).where(Experiment.id == claim.experiment_id)).one()
    if not kept:   # a kept one is the final state, to continue from (continue_run)
        session.execute(delete(Checkpoint).where(Checkpoint.experiment_id == claim.experiment_id))
    settle_study(session, claim.experiment_id)


def _finish(session: Session, where: ColumnElement[bool], status: str, **results: Any) -> bool:
    """A succeeded run also stores its final theory (conditioned on the run, e.g. its realized
    initial norms), summary and distributions. The lease is cleared."""
    assert status in TERMINAL
    now = db_now()
    values: dict[str, Any] = {"status": status, "finished_at": now, "updated_at": now, "error": results.pop("error"),
                              "lease_owner": None, "lease_expires_at": None, **_BUMP}
    values.update({key: value for key, value in results.items() if value is not None})
    if status == Status.succeeded:
        values["progress"] = 1.0
    return _rowcount(session, update(Experiment).where(where).values(**values)) == 1


@transaction
def release(session: Session, claim: Claim) -> None:
    """Give a claimed job back to the queue (its worker is shutting down); no-op if not held."""
    _give_back(session, claim, "released")


@transaction
def interrupt(session: Session, claim: Claim) -> bool:
    """Give a claimed job back to the queue because its worker gave its attempt up for a database outage
    (a full disk, whose small writes often still go through): the attempt ends ``interrupted`` and does
    not count toward SMD_MAX_ATTEMPTS, and the job resumes from its checkpoint in a new attempt. No-op if
    not held; returns whether it was."""
    return _give_back(session, claim, "interrupted")


def _give_back(session: Session, claim: Claim, outcome: str) -> bool:
    """The held job back to ``queued``, its attempt ended with ``outcome``; or, when a cancel was requested
    before its worker saw it, ``cancelled`` (attempt too), with the points it has, as a cancel seen by the
    worker ends it: a queued job with a cancel requested is never claimed, and stayed queued for good.
    Whether the job was held."""
    held = _held(claim)
    if _finish(session, and_(held, Experiment.cancel_requested.is_(True)), Status.cancelled, error=None):
        _end_attempt(session, claim.experiment_id, claim.attempt, Status.cancelled)
        session.execute(delete(Checkpoint).where(Checkpoint.experiment_id == claim.experiment_id))
        settle_study(session, claim.experiment_id)
        return True
    if _rowcount(session, update(Experiment).where(held).values(
            status=Status.queued, lease_owner=None, lease_expires_at=None, pace_started_at=None, progressed_at=None,
            queued_at=db_now(), updated_at=db_now(), **_BUMP)) != 1:
        return False
    _end_attempt(session, claim.experiment_id, claim.attempt, outcome)
    return True


def _end_attempt(session: Session, experiment_id: str, number: int, outcome: str) -> None:
    session.execute(update(Attempt).where(Attempt.experiment_id == experiment_id, Attempt.number == number,
                                          Attempt.ended_at.is_(None))
                    .values(ended_at=db_now(), outcome=outcome))


@transaction
def request_cancel(session: Session, experiment_id: str) -> Experiment | None:
    """A queued job is cancelled at once and never starts; a running one is flagged and its worker
    stops at its next progress write, keeping the partial results. Conditional updates, so a
    worker's concurrent claim or finish is never overwritten. Returns the job as it is now (None
    if it does not exist)."""
    if _rowcount(session, update(Experiment).where(Experiment.id == experiment_id, Experiment.status == Status.queued)
                 .values(status=Status.cancelled, cancel_requested=True, finished_at=db_now(), updated_at=db_now(),
                         **_BUMP)):
        _drop_checkpoint(session, experiment_id)   # a requeued or continued job's: nothing resumes an ended job
    session.execute(update(Experiment).where(Experiment.id == experiment_id, Experiment.status.not_in(TERMINAL))
                    .values(cancel_requested=True, updated_at=db_now(), **_BUMP))
    settle_study(session, experiment_id)
    return session.get(Experiment, experiment_id, populate_existing=True)


def settle_study(session: Session, experiment_id: str | None = None, *, study_id: str | None = None) -> None:
    """After a job ended: if it was the last unfinished child of a study, the study's
    ``finished_at`` (set once). The study's row is locked before its children are counted, so of
    two children ending at once the later one sees the other ended (locks: child, then study)."""
    if study_id is None:
        study_id = session.scalar(select(Experiment.study_id).where(Experiment.id == experiment_id))
        if study_id is None:
            return
    if session.execute(select(Study.id).where(Study.id == study_id).with_for_update()).first() is None:
        return
    unfinished = session.scalar(select(func.count()).select_from(Experiment).where(
        Experiment.study_id == study_id, Experiment.status.not_in(TERMINAL)))
    if not unfinished:
        session.execute(update(Study).where(Study.id == study_id, Study.finished_at.is_(None))
                        .values(finished_at=db_now(), revision=Study.revision + 1))


def release_members(session: Session, experiment_ids: Sequence[str]) -> None:
    """Before ended experiments are deleted: every compare study listing one of them (store.studies)
    has its own revision raised by that member's revision plus one. A study's revision is its own
    plus its present members', so it still grows when a member goes: its ETags change and its event
    ids never go back. The member rows stay (the study lists them as missing)."""
    if not experiment_ids:
        return
    lost = session.execute(select(StudyMember.study_id, func.sum(Experiment.revision + 1))
                           .join(Experiment, Experiment.id == StudyMember.experiment_id)
                           .where(StudyMember.experiment_id.in_(experiment_ids), Experiment.status.in_(TERMINAL))
                           .group_by(StudyMember.study_id).order_by(StudyMember.study_id)).all()
    for study_id, revisions in lost:
        session.execute(update(Study).where(Study.id == study_id).values(revision=Study.revision + int(revisions)))


@transaction
def expire_leases(session: Session, max_attempts: int, *, owner_prefix: str | None = None,
                  outage: Callable[[float], bool] | None = None) -> list[str]:
    """The sweeper's pass: every running job whose lease has expired by the database's clock (or,
    with ``owner_prefix``, whose lease is held by that worker, known to be gone) lost its worker. It
    goes back to ``queued``, or ends ``failed`` when ``max_attempts`` of its attempts have been lost,
    or ``cancelled`` when a cancel was requested. ``outage(seconds_ago)`` tells whether the database
    may have been unreachable when the lease lapsed, that many seconds ago (both times the database's;
    negative: not yet): then the attempt ends ``interrupted`` and does not count (see the module's
    header). Each change is conditioned on the lease being as read and still lapsed, so a renewal
    that commits meanwhile keeps the job. Returns the ids put back in the queue."""
    lost = Experiment.lease_expires_at < db_now()
    if owner_prefix is not None:
        lost = or_(lost, Experiment.lease_owner.startswith(f"{owner_prefix}/", autoescape=True))
    rows = session.execute(select(Experiment.id, Experiment.attempts, Experiment.worker, Experiment.lease_owner,
                                  Experiment.cancel_requested, Experiment.lease_expires_at, db_now())
                           .where(Experiment.status == Status.running, lost)).all()
    counted = lost_attempts(session, [row[0] for row in rows])
    requeued = []
    for experiment_id, attempts, worker, owner, cancel, expires, now in rows:
        held = and_(Experiment.id == experiment_id, Experiment.status == Status.running,
                    Experiment.lease_owner == owner, lost)
        lapsed = as_utc(expires)
        interrupted = (outage is not None and lapsed is not None
                       and outage((as_utc(now) - lapsed).total_seconds()))
        n_lost = counted.get(experiment_id, 0) + (0 if interrupted else 1)
        if cancel:
            done = _finish(session, held, Status.cancelled, error=None)
        elif n_lost >= max_attempts:
            each = "each of its" if n_lost == attempts else f"{n_lost} of its"
            done = _finish(session, held, Status.failed, error=(
                f"the worker running it was lost during {each} {attempts} attempts (last: {worker}); "
                f"SMD_MAX_ATTEMPTS is {max_attempts}"))
        else:
            done = _rowcount(session, update(Experiment).where(held).values(
                status=Status.queued, lease_owner=None, lease_expires_at=None, pace_started_at=None, progressed_at=None,
                queued_at=db_now(), updated_at=db_now(), **_BUMP)) == 1
            if done:
                requeued.append(experiment_id)
        if done:
            _end_attempt(session, experiment_id, attempts, "interrupted" if interrupted else "lost")
            if experiment_id not in requeued:   # ended: nothing resumes from its checkpoint (as finish_claimed)
                _drop_checkpoint(session, experiment_id)
                settle_study(session, experiment_id)
    return requeued


@transaction
def lost_attempts(session: Session, experiment_ids: list[str]) -> dict[str, int]:
    """{experiment id: attempts that ended ``lost``}: those that count toward SMD_MAX_ATTEMPTS."""
    if not experiment_ids:
        return {}
    return {experiment_id: int(n) for experiment_id, n in session.execute(
        select(Attempt.experiment_id, func.count()).where(Attempt.experiment_id.in_(experiment_ids),
                                                          Attempt.outcome == "lost")
        .group_by(Attempt.experiment_id)).all()}


@transaction
def queued_counts(session: Session) -> dict[str, int]:
    """Queued (claimable) jobs per queue."""
    rows = session.execute(select(Experiment.queue, func.count()).where(
        Experiment.status == Status.queued, Experiment.cancel_requested.is_(False)).group_by(Experiment.queue)).all()
    return {queue: int(n) for queue, n in rows}


@transaction
def save_checkpoint(session: Session, claim: Claim, step: int, n_points: int, data: bytes) -> None:
    """Replace the job's checkpoint (under the lease; raises :class:`LeaseLost`)."""
    _hold(session, claim)
    session.execute(delete(Checkpoint).where(Checkpoint.experiment_id == claim.experiment_id))
    session.add(Checkpoint(experiment_id=claim.experiment_id, attempt=claim.attempt, step=step, n_points=n_points,
                           data=data, created_at=db_now()))


@transaction
def save_checkpoints(session: Session, saves: Sequence[tuple[Claim, int, int, bytes]]) -> None:
    """Replace the checkpoints of a fused batch's members, each ``(claim, step, n_points, data)``, in one
    transaction: all or none, so that a batch stopped while checkpointing leaves its members at one step
    and they are claimed again as one batch (:func:`fusion_candidates`). Raises :class:`LeaseLost`
    naming the first member whose lease is gone, and writes none."""
    for claim, step, n_points, data in saves:
        save_checkpoint(session, claim, step, n_points, data)


@transaction
def load_checkpoint(session: Session, experiment_id: str) -> Checkpoint | None:
    return session.get(Checkpoint, experiment_id)


def _drop_checkpoint(session: Session, experiment_id: str) -> None:
    session.execute(delete(Checkpoint).where(Checkpoint.experiment_id == experiment_id))


def _note_start(session: Session, claim: Claim, resumed_from: int | None) -> None:
    """The attempt starts at a checkpoint's step (``resumed_from``) or from scratch (None): noted on the attempt,
    and the job's step, progress and start_step say so (what it showed was the last attempt's last flush, and
    an ETA from it ran ahead); its pace starts at its first progress report (:func:`record_progress`)."""
    session.execute(update(Attempt).where(Attempt.experiment_id == claim.experiment_id,
                                          Attempt.number == claim.attempt).values(resumed_from_step=resumed_from))
    step = resumed_from or 0
    total = session.scalar(select(Experiment.total_steps).where(Experiment.id == claim.experiment_id))
    session.execute(update(Experiment).where(_held(claim)).values(
        start_step=step, step=step, pace_started_at=None, progressed_at=None, pace_start_step=step,
        **({"progress": step / total} if total else {}), **_BUMP))


@transaction
def attempts(session: Session, experiment_id: str) -> list[Attempt]:
    return list(session.scalars(select(Attempt).where(Attempt.experiment_id == experiment_id)
                                .order_by(Attempt.number)))


# The attempts last read per job (store.kept): a results document carries them (its provenance), and each
# attempt's start, resume and end bump the job's revision.
_attempts: ByRevision[list[Attempt]] = ByRevision(256)


def attempts_at(db: str, experiment_id: str, revision: int) -> list[Attempt]:
    """The job's attempts, given the revision of the caller's row: from memory when they were read at it
    (the list must not be modified). Read with the revision, in one transaction, else."""
    kept = _attempts.get(experiment_id, revision)
    if kept is not None:
        return kept
    read_at, rows = _attempts_with_revision(db, experiment_id)
    if read_at is not None:
        _attempts.put(experiment_id, read_at, rows)
    return rows


@transaction
def _attempts_with_revision(session: Session, experiment_id: str) -> tuple[int | None, list[Attempt]]:
    revision = session.execute(_REVISION, {"experiment_id": experiment_id}).scalar_one_or_none()
    return revision, attempts(session, experiment_id)


@transaction
def remove(session: Session, experiment_id: str) -> None:
    """Remove an ended job and everything stored for it (children first: SQLite may run without
    foreign-key cascades on an old connection); the compare studies it is a member of lose it
    (:func:`release_members`)."""
    release_members(session, [experiment_id])
    for table in (SeriesChunk, Attempt, Checkpoint, ExperimentTag):
        session.execute(delete(table).where(table.experiment_id == experiment_id))
    session.execute(delete(Experiment).where(Experiment.id == experiment_id, Experiment.status.in_(TERMINAL)))


@transaction
def active_count(session: Session, owner_id: str | None) -> int:
    """Queued and running jobs of one owner (the active-jobs quota)."""
    return int(session.scalar(select(func.count()).select_from(Experiment).where(
        by_owner(owner_id), Experiment.status.in_(ACTIVE))) or 0)


# The row without its outputs: a long run's theory holds a value per recorded point (200 000 points
# make ~10 MB of JSON to parse), and every status poll, ETag check and list page loads the row.
# Reading them by mistake raises instead of loading; :func:`outputs` reads them.
_WITHOUT_OUTPUTS = (defer(Experiment.theory, raiseload=True), defer(Experiment.distributions, raiseload=True))


# The rows last read per job (store.kept): every open dashboard of a running job loads its row for each of
# its polls, and loading it (its owner and tags, the ORM's work for the loader options) was the largest cost
# of a poll. The rows are detached and shared, never modified (the API only reads them).
_rows: ByRevision[Experiment] = ByRevision(256)
_REVISION = select(Experiment.revision).where(Experiment.id == bindparam("experiment_id"))


def get(db: Db, experiment_id: str) -> Experiment | None:
    """The job (detached, with its owner; without its theory and distributions: :func:`outputs`), or None.
    With a database URL, the row read last is returned from memory while the database holds its revision
    (with a session: always the session's row)."""
    if not isinstance(db, str):
        return _load(db, experiment_id)
    kept_revision = _rows.revision(experiment_id)
    if kept_revision is not None:
        revision = read(db, lambda c: c.execute(_REVISION, {"experiment_id": experiment_id}).scalar_one_or_none())
        kept = _rows.get(experiment_id, kept_revision) if revision == kept_revision else None
        if kept is not None:
            return kept
    row = _load(db, experiment_id)
    if row is None:
        _rows.drop(experiment_id)
        return None
    _rows.put(experiment_id, row.revision, row)
    return row


@transaction
def _load(session: Session, experiment_id: str) -> Experiment | None:
    return session.get(Experiment, experiment_id, options=_WITHOUT_OUTPUTS)


# The theory and distributions last read per job (store.kept): every open dashboard of a running job asks for
# its results every 2 s, and parsing its theory (a value per recorded point) was the largest cost of those
# requests. The dicts are shared, never modified (the result document copies what it sends).
_outputs: ByRevision[tuple[dict[str, Any], dict[str, Any]]] = ByRevision(16)


def outputs(db: Db, experiment_id: str, revision: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job's theory and distributions (empty when it has none, or no longer exists). Given the
    ``revision`` of the caller's row, they are read from memory when that revision's were read last
    (with a database URL; the dicts returned must not be modified)."""
    if revision is not None and isinstance(db, str):
        kept = _outputs.get(experiment_id, revision)
        if kept is not None:
            return kept
    row = _read_outputs(db, experiment_id)
    if row is None:
        return {}, {}
    read = (row.theory or {}, row.distributions or {})
    if isinstance(db, str):  # committed state only (a session's may still roll back)
        _outputs.put(experiment_id, row.revision, read)
    return read


@transaction
def _read_outputs(session: Session, experiment_id: str) -> Row[Any] | None:
    # one statement: the revision is that of the theory and distributions read with it
    return session.execute(select(Experiment.revision, Experiment.theory, Experiment.distributions)
                           .where(Experiment.id == experiment_id)).one_or_none()


@transaction
def read_fields(session: Session, experiment_id: str, names: Sequence[str]) -> dict[str, Any] | None:
    """Only the named columns of the job (a light poll), or None when it does not exist."""
    row = session.execute(select(*(getattr(Experiment, name) for name in names))
                          .where(Experiment.id == experiment_id)).one_or_none()
    return None if row is None else dict(row._mapping)


@dataclass(frozen=True)
class Page:
    """A page of a list: its items, how many match over all pages, and where the next page starts
    (the position of the last item; None on the last page)."""

    items: list[Experiment]
    total: int
    next: Position | None


@transaction
def page(session: Session, *, viewer_id: str, everyone: bool, status: str | None = None, kind: str | None = None,
         owner_name: str | None = None, name_contains: str | None = None, tags: Sequence[str] = (),
         predicates: Sequence[Predicate] = (), order_by: tuple[str, bool] | None = None,
         after: Position | None = None, limit: int = 50) -> Page:
    """Up to ``limit`` jobs the viewer may see (their own and lab-visible ones; all with
    ``everyone``), newest first, after the keyset position ``after`` of the previous page. ``name_contains``
    matches a substring of the name, ignoring case (``%`` and ``_`` are literal); ``tags``: every one of
    them; ``predicates`` on the spec and the summary (:class:`store.search.Predicate`). ``order_by``
    (summary name, descending) sorts by a summary value instead, missing values last, then newest first;
    its positions carry the value, so a page boundary holds while rows come and go."""
    dialect = session.get_bind().dialect.name
    query = select(Experiment).options(*_WITHOUT_OUTPUTS)
    if not everyone:
        query = query.where(or_(Experiment.owner_id == viewer_id, Experiment.visibility == "lab"))
    if status:
        query = query.where(Experiment.status == status)
    if kind:
        query = query.where(Experiment.kind == kind)
    if owner_name:
        query = query.where(Experiment.owner.has(User.name == owner_name))
    if name_contains:
        query = query.where(func.lower(Experiment.name).contains(name_contains.lower(), autoescape=True))
    for tag in dict.fromkeys(tags):
        query = query.where(Experiment.id.in_(select(ExperimentTag.experiment_id).where(ExperimentTag.tag == tag)))
    for predicate in predicates:
        query = query.where(search.condition(dialect, predicate))
    total = int(session.scalar(select(func.count()).select_from(query.subquery())) or 0)
    newest = (Experiment.created_at.desc(), Experiment.id.desc())
    if order_by is None:
        if after is not None:
            query = query.where(search.after_newest(after))
        items = list(session.scalars(query.order_by(*newest).limit(limit + 1)).unique().all())
        last = Position(items[limit - 1].created_at, items[limit - 1].id) if len(items) > limit else None
        return Page(items[:limit], total, last)
    name, descending = order_by
    value = search.sort_value(dialect, name)
    if after is not None:
        query = query.where(search.after_sorted(value, descending, after))
    # The sort value is read back from the database (not from the row's summary in Python), so the
    # next page compares against the very number the database sorted by.
    sort = value.label("sort_value")   # ordered by its label: the value is computed once per row
    rows = session.execute(query.add_columns(sort).order_by(
        (sort.desc() if descending else sort.asc()).nulls_last(), *newest).limit(limit + 1)).unique().all()
    last = (Position(rows[limit - 1][0].created_at, rows[limit - 1][0].id, rows[limit - 1][1])
            if len(rows) > limit else None)
    return Page([row[0] for row in rows[:limit]], total, last)


_UNSET: Any = object()


@transaction
def annotate(session: Session, experiment_id: str, *, name: str | None = _UNSET, tags: Sequence[str] | None = None,
             note: str | None = _UNSET) -> Experiment:
    """Set what was given of the name, tags (replacing them) and note; a change clients see (revision), unless
    nothing changed: then pollers' ETags stay valid."""
    experiment = session.get(Experiment, experiment_id, options=list(_WITHOUT_OUTPUTS))
    if experiment is None:
        raise LookupError(experiment_id)
    changed = False
    if name is not _UNSET and name != experiment.name:
        experiment.name, changed = name, True
    if note is not _UNSET and note != experiment.note:
        experiment.note, changed = note, True
    if tags is not None and sorted(set(tags)) != sorted(row.tag for row in experiment.tag_rows):
        experiment.tag_rows, changed = [ExperimentTag(tag=t) for t in sorted(set(tags))], True
    if not changed:
        return experiment
    experiment.revision = experiment.revision + 1
    experiment.updated_at = db_time(session)
    session.flush()
    return experiment


@transaction
def submit(session: Session, *, owner_id: str, max_active_jobs: int, default_retry_seconds: int, kind: str,
           name: str | None, spec: dict[str, Any], total_steps: int, queue: str, visibility: str,
           priority: int, warnings: list[dict[str, Any]] | None = None, keep_checkpoint: bool = False,
           tags: Sequence[str] = (), note: str | None = None) -> Experiment:
    """Store a new queued job of ``owner_id`` unless the owner already has ``max_active_jobs``
    queued + running ones (:class:`QuotaExceeded`). The owner's row is locked first, so quota
    check and insert are one step: two concurrent submissions cannot both take the last free slot
    (PostgreSQL: a row lock; SQLite takes its write lock here, before reading, so the transaction
    never has to upgrade). ``warnings``: the spec's warnings, stored with it."""
    session.execute(update(User).where(User.id == owner_id).values(role=User.role))
    active = active_count(session, owner_id)
    if active >= max_active_jobs:
        raise QuotaExceeded(active, max_active_jobs, retry_after(session, owner_id, default_retry_seconds))
    experiment = create(session, kind=kind, name=name, spec=spec, total_steps=total_steps, queue=queue,
                        owner_id=owner_id, visibility=visibility, priority=priority, warnings=warnings,
                        keep_checkpoint=keep_checkpoint, tags=tags, note=note)
    experiment.owner = session.get(User, owner_id)
    return experiment


class NotContinuable(Exception):
    """The job cannot be continued (the message says why)."""


@transaction
def continue_run(session: Session, experiment_id: str, *, owner_id: str, spec: dict[str, Any], total_steps: int,
                 max_active_jobs: int, default_retry_seconds: int,
                 warnings: list[dict[str, Any]] | None) -> Experiment:
    """Queue a succeeded job again with ``spec`` (its spec with more steps): a worker resumes it from its
    kept final checkpoint and ends it with the results of one run of the total length, whose spec's
    ``warnings`` replace the shorter run's (smdengine.spec_warnings: a tail or a settling time depends on
    the length). Quota as
    :func:`submit` (:class:`QuotaExceeded`); :class:`NotContinuable` unless it succeeded with a kept
    checkpoint. One compare-and-set on the status: two concurrent continues cannot both queue it."""
    session.execute(update(User).where(User.id == owner_id).values(role=User.role))   # the quota lock
    active = active_count(session, owner_id)
    if active >= max_active_jobs:
        raise QuotaExceeded(active, max_active_jobs, retry_after(session, owner_id, default_retry_seconds))
    status, step = session.execute(select(Experiment.status, Experiment.step)
                                   .where(Experiment.id == experiment_id)).one()
    if status != Status.succeeded:
        raise NotContinuable(f"only a succeeded experiment can be continued, this one is {status}")
    if session.get(Checkpoint, experiment_id) is None:
        raise NotContinuable("it has no kept checkpoint: submit it with keep_checkpoint true (or rerun it so) "
                             "to continue it later")
    queued = _rowcount(session, update(Experiment)
                       .where(Experiment.id == experiment_id, Experiment.status == Status.succeeded)
                       .values(status=Status.queued, spec=spec, total_steps=total_steps, progress=step / total_steps,
                               pace_started_at=None, progressed_at=None, queued_at=db_now(), warnings=warnings,
                               summary=None, distributions=None, finished_at=None, cancel_requested=False,
                               lease_owner=None, lease_expires_at=None, error=None, updated_at=db_now(), **_BUMP))
    if queued != 1:
        raise NotContinuable("only a succeeded experiment can be continued")
    experiment = session.get(Experiment, experiment_id)
    assert experiment is not None
    return experiment


# Below this progress a pace estimate may still be far off (a 1 s job seen at 2 % after 0.5 s: 24 s), so it may
# not exceed the default; the pace now starts at the attempt's first report, after its set-up.
SETTLED_PROGRESS = 0.1


def remaining_seconds(pace_started: datetime | None, step: int, pace_start_step: int, total: int,
                      now: datetime) -> tuple[float, bool] | None:
    """Seconds a running job still needs at its current attempt's pace ((step − pace_start_step) steps since
    ``pace_started``, the attempt's first progress report: its set-up is not counted as steps' time), and
    whether that pace has settled (past SETTLED_PROGRESS of the steps left at that report: a short
    continuation settles too); None before the attempt has reported twice. Times on the database's clock."""
    if pace_started is None or not total or step <= pace_start_step or total <= pace_start_step:
        return None
    elapsed = (as_utc(now) - as_utc(pace_started)).total_seconds()
    settled = (step - pace_start_step) / (total - pace_start_step) >= SETTLED_PROGRESS
    return elapsed * (total - step) / (step - pace_start_step), settled


def estimated_finish(status: str, cancel_requested: bool, pace_started: datetime | None, step: int,
                     pace_start_step: int, total: int, progressed_at: datetime | None) -> datetime | None:
    """A running job's estimated finish, on the database's clock: its last progress write (``progressed_at``,
    when its ``step`` was written) plus the seconds it then had left at its attempt's pace
    (:func:`remaining_seconds`). None when it is not running, is stopping (a cancel was asked) or has no pace
    yet. A function of the row alone, so a body kept by revision stays right."""
    if status != Status.running or cancel_requested or progressed_at is None:
        return None
    left = remaining_seconds(pace_started, step, pace_start_step, total, progressed_at)
    return None if left is None else as_utc(progressed_at) + timedelta(seconds=left[0])


@transaction
def retry_after(session: Session, owner_id: str, default: int) -> int:
    """Seconds until the owner's first running job should end (:func:`remaining_seconds`), within [1, 3600];
    ``default`` when none has progressed yet, and a job whose pace has not settled counts at most ``default``."""
    best: float | None = None
    for pace_started, step, pace_step, total, now in session.execute(
            select(Experiment.pace_started_at, Experiment.step, Experiment.pace_start_step, Experiment.total_steps,
                   db_now())
            .where(Experiment.owner_id == owner_id, Experiment.status == Status.running)).all():
        pace = remaining_seconds(pace_started, step, pace_step, total, now)
        if pace is None:
            continue
        remaining = pace[0] if pace[1] else min(pace[0], default)
        best = remaining if best is None else min(best, remaining)
    return default if best is None else int(min(max(best, 1), 3600))
