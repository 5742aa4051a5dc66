"""Studies (design §5): a study row and its children, ordinary experiments tagged with the study.

All children are created with the study in one transaction, with one ``created_at``, so that within
their owner's share they are claimed in expansion order (``store.jobs._OWN_ORDER``); no child is
ever created later, so a cancel needs no flag to stop new ones. A study's status, counts, progress
and estimated finish are derived from its children at each read (:class:`StudyView`); only
``finished_at`` is written, by the store function that ends the last child (``jobs.settle_study``).

A child's place in the study is on its row: ``study_index`` (expansion order), ``study_point`` (the
index of its axis values), ``study_values`` ({path: value}) and ``study_seed``.

A study made from a preset names it (``preset``, ``preset_size``); its ``checks`` are null until
:func:`save_checks` stores them, once, after every child has ended (compare-and-set: the first
writer wins and every later caller gets what it stored).

Every public function is a unit of work (:func:`store.db.transaction`); results are detached.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from store.db import transaction
from store.jobs import QuotaExceeded, active_count, retry_after, settle_study
from store.models import (
    ACTIVE,
    TERMINAL,
    Attempt,
    Checkpoint,
    Experiment,
    SeriesChunk,
    Status,
    Study,
    User,
    as_utc,
    utcnow,
)


class StudyQuotaExceeded(QuotaExceeded):
    """A study whose ``adding`` children would take the owner over the active-jobs quota."""

    def __init__(self, active: int, limit: int, retry_after: int, adding: int):
        super().__init__(active, limit, retry_after)
        self.adding = adding


class WorkQuotaExceeded(Exception):
    """A study whose children's work, summed, is over the owner's work quota."""

    def __init__(self, work: int, limit: int):
        super().__init__(f"work {work}, limit {limit}")
        self.work, self.limit = work, limit


@dataclass(frozen=True)
class NewChild:
    """One child to store: its engine spec (JSON, service fields stripped) and place in the study."""

    index: int
    point: int
    seed: int
    values: dict[str, Any]
    kind: str
    name: str | None
    spec: dict[str, Any]
    total_steps: int
    queue: str
    work: int
    warnings: list[dict[str, Any]] | None = None   # its spec's out-of-regime warnings (smdengine.spec_warnings)


@dataclass
class StudyView:
    """A study as clients see it: the row's fields and what its children say (derived)."""

    id: str
    name: str | None
    owner_id: str | None
    owner_name: str | None
    visibility: str
    priority_name: str
    spec: dict[str, Any]
    axes: list[str]
    children_count: int
    points: int
    cancel_requested: bool
    created_at: datetime
    finished_at: datetime | None
    status: str
    counts: dict[str, int]
    progress: float
    started_at: datetime | None
    eta: datetime | None
    eta_seconds: float | None
    revision: int
    children: list[ChildView] | None = field(default=None)
    preset: str | None = None
    preset_size: str | None = None
    checks: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class ChildView:
    """A child as the study lists it."""

    id: str
    index: int
    point: int
    seed: int
    values: dict[str, Any]
    status: str
    progress: float
    warnings: list[dict[str, Any]] | None = None


@dataclass
class _Aggregate:
    counts: dict[str, int] = field(default_factory=dict)
    progress: float = 0.0
    started: datetime | None = None
    revision: int = 0


def derive_status(counts: dict[str, int]) -> str:
    """queued (every child queued), running (not all queued, not all ended), succeeded (all),
    failed (all ended, none succeeded, some failed), cancelled (all ended, none succeeded or
    failed), partial (all ended, some succeeded and some not)."""
    total = sum(counts.values())
    active = sum(counts.get(s, 0) for s in ACTIVE)
    if total and counts.get(Status.queued, 0) == total:
        return "queued"
    if active:
        return "running"
    succeeded = counts.get(Status.succeeded, 0)
    if total and succeeded == total:
        return "succeeded"
    if succeeded:
        return "partial"
    return "failed" if counts.get(Status.failed, 0) else "cancelled"


def _aggregates(session: Session, study_ids: list[str]) -> dict[str, _Aggregate]:
    out = {study_id: _Aggregate() for study_id in study_ids}
    if not study_ids:
        return out
    rows = session.execute(select(Experiment.study_id, Experiment.status, func.count(), func.sum(Experiment.progress),
                                  func.min(Experiment.started_at), func.sum(Experiment.revision))
                           .where(Experiment.study_id.in_(study_ids))
                           .group_by(Experiment.study_id, Experiment.status)).all()
    for study_id, status, n, progress, started, revision in rows:
        agg = out[str(study_id)]
        agg.counts[str(status)] = int(n)
        agg.progress += float(progress or 0.0)
        started = as_utc(started)
        if started is not None and (agg.started is None or started < agg.started):
            agg.started = started
        agg.revision += int(revision or 0)
    return out


def _view(study: Study, agg: _Aggregate) -> StudyView:
    counts = {status.value: agg.counts.get(status.value, 0) for status in Status}
    n = sum(counts.values())
    progress = agg.progress / n if n else 0.0
    status = derive_status(counts)
    eta = eta_seconds = None
    if status == "running" and agg.started is not None and progress > 0:
        elapsed = (utcnow() - agg.started).total_seconds()
        eta_seconds = max(0.0, elapsed / progress - elapsed)
        eta = utcnow() + timedelta(seconds=eta_seconds)
    return StudyView(id=study.id, name=study.name, owner_id=study.owner_id, owner_name=study.owner_name,
                     visibility=study.visibility, priority_name=study.priority_name, spec=study.spec,
                     axes=list(study.axes), children_count=study.children, points=study.points,
                     cancel_requested=study.cancel_requested, created_at=as_utc(study.created_at),
                     finished_at=as_utc(study.finished_at) if status not in ("queued", "running") else None,
                     status=status, counts=counts, progress=progress, started_at=agg.started, eta=eta,
                     eta_seconds=eta_seconds, revision=study.revision + agg.revision, preset=study.preset,
                     preset_size=study.preset_size, checks=study.checks)


@transaction
def create(session: Session, *, owner_id: str, name: str | None, visibility: str, priority: int,
           spec: dict[str, Any], axes: list[str], points: int, children: list[NewChild], max_active_jobs: int,
           max_work: int, default_retry_seconds: int, preset: str | None = None,
           preset_size: str | None = None) -> StudyView:
    """Store a study and all its children (queued, one ``created_at``), or nothing: over the
    owner's work quota (the children's work summed) :class:`WorkQuotaExceeded`; over the
    active-jobs quota (active jobs + children) :class:`StudyQuotaExceeded`. The owner's row is
    locked first, as for a single submission (store.jobs.submit). ``preset``/``preset_size``: the
    preset it was made from (its checks start null)."""
    work = sum(child.work for child in children)
    if work > max_work:
        raise WorkQuotaExceeded(work, max_work)
    session.execute(update(User).where(User.id == owner_id).values(role=User.role))
    active = active_count(session, owner_id)
    if active + len(children) > max_active_jobs:
        raise StudyQuotaExceeded(active, max_active_jobs, retry_after(session, owner_id, default_retry_seconds),
                                 len(children))
    now = utcnow()
    study = Study(owner_id=owner_id, name=name, visibility=visibility, priority=priority, spec=spec, axes=axes,
                  children=len(children), points=points, cancel_requested=False, created_at=now, revision=0,
                  preset=preset, preset_size=preset_size, checks=None)
    session.add(study)
    session.flush()
    session.add_all([
        Experiment(kind=child.kind, name=child.name, spec=child.spec, status=Status.queued, progress=0.0, step=0,
                   total_steps=child.total_steps, cancel_requested=False, attempts=0, queue=child.queue,
                   owner_id=owner_id, visibility=visibility, priority=priority, revision=0, created_at=now,
                   updated_at=now, study_id=study.id, study_index=child.index, study_point=child.point,
                   study_seed=child.seed, study_values=child.values, warnings=child.warnings)
        for child in children])
    session.flush()
    study.owner = session.get(User, owner_id)
    return _view(study, _aggregates(session, [study.id])[study.id])


@transaction
def get(session: Session, study_id: str) -> StudyView | None:
    """The study (without its children), or None."""
    study = session.get(Study, study_id)
    return None if study is None else _view(study, _aggregates(session, [study_id])[study_id])


@transaction
def get_with_children(session: Session, study_id: str) -> StudyView | None:
    """The study and its children's ids, places and states (in expansion order), or None."""
    view = get(session, study_id)
    if view is not None:
        rows = session.execute(select(Experiment.id, Experiment.study_index, Experiment.study_point,
                                      Experiment.study_seed, Experiment.study_values, Experiment.status,
                                      Experiment.progress, Experiment.warnings)
                               .where(Experiment.study_id == study_id).order_by(Experiment.study_index)).all()
        view.children = [ChildView(id=r[0], index=r[1], point=r[2], seed=r[3], values=r[4] or {}, status=r[5],
                                   progress=r[6], warnings=r[7]) for r in rows]
    return view


@transaction
def children(session: Session, study_id: str) -> list[Experiment]:
    """The study's children (detached, every column: spec, status, summary, theory, ...), in
    expansion order."""
    return list(session.scalars(select(Experiment).where(Experiment.study_id == study_id)
                                .order_by(Experiment.study_index)).unique())


@transaction
def queues(session: Session, study_id: str) -> dict[str, int]:
    """{queue: claimable children} of the study."""
    rows = session.execute(select(Experiment.queue, func.count()).where(
        Experiment.study_id == study_id, Experiment.status == Status.queued,
        Experiment.cancel_requested.is_(False)).group_by(Experiment.queue)).all()
    return {queue: int(n) for queue, n in rows}


@transaction
def page(session: Session, *, viewer_id: str, everyone: bool, after: tuple[datetime, str] | None = None,
         limit: int = 50) -> tuple[list[StudyView], int]:
    """Up to ``limit`` studies the viewer may see (their own and lab-visible ones; all with
    ``everyone``), newest first, after the keyset position ``after`` (created_at, id); and how many
    there are over all pages."""
    query = select(Study)
    if not everyone:
        query = query.where(or_(Study.owner_id == viewer_id, Study.visibility == "lab"))
    total = int(session.scalar(select(func.count()).select_from(query.subquery())) or 0)
    if after is not None:
        created, last_id = after
        query = query.where(or_(Study.created_at < created, and_(Study.created_at == created, Study.id < last_id)))
    studies = list(session.scalars(query.order_by(Study.created_at.desc(), Study.id.desc()).limit(limit)).unique())
    aggregates = _aggregates(session, [s.id for s in studies])
    return [_view(s, aggregates[s.id]) for s in studies], total


@transaction
def request_cancel(session: Session, study_id: str) -> StudyView | None:
    """Cancel every unfinished child as :func:`store.jobs.request_cancel` does one (queued ones at
    once, running ones flagged: their workers stop at the next progress write) and flag the study.
    Conditional updates, so a worker's concurrent claim or finish is never overwritten. Returns
    the study as it is now (None if it does not exist)."""
    now = utcnow()
    bump = {"revision": Experiment.revision + 1}
    # children before the study row: the lock order of jobs.settle_study
    session.execute(update(Experiment).where(Experiment.study_id == study_id, Experiment.status == Status.queued)
                    .values(status=Status.cancelled, cancel_requested=True, finished_at=now, updated_at=now, **bump))
    session.execute(update(Experiment).where(Experiment.study_id == study_id, Experiment.status.not_in(TERMINAL),
                                             Experiment.cancel_requested.is_(False))
                    .values(cancel_requested=True, updated_at=now, **bump))
    session.execute(update(Study).where(Study.id == study_id, Study.cancel_requested.is_(False))
                    .values(cancel_requested=True, revision=Study.revision + 1))
    settle_study(session, study_id=study_id)
    session.expire_all()
    return get(session, study_id)


@transaction
def remove(session: Session, study_id: str) -> bool:
    """Remove an ended study and everything stored for its children (their series, attempts and
    checkpoints first: SQLite may run without foreign-key cascades on an old connection). False,
    and nothing removed, while a child is queued or running."""
    # lock the children: a concurrent claim waits, then finds nothing to claim
    ids = list(session.scalars(select(Experiment.id).where(Experiment.study_id == study_id).with_for_update()))
    if session.scalar(select(func.count()).select_from(Experiment).where(
            Experiment.study_id == study_id, Experiment.status.not_in(TERMINAL))):
        return False
    for table in (SeriesChunk, Attempt, Checkpoint):
        session.execute(delete(table).where(table.experiment_id.in_(ids)))
    session.execute(delete(Experiment).where(Experiment.study_id == study_id))
    session.execute(delete(Study).where(Study.id == study_id))
    return True


@transaction
def save_checks(session: Session, study_id: str, checks: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Store a preset study's checks, once: only while its ``checks`` are null and every child has
    ended (a conditional update, so two readers computing them at once store one result, and a
    study that is still running, or was deleted meanwhile, stores nothing). Bumps the study's
    revision (its ETag changes with what GET shows). Returns the checks stored now, ours or the
    earlier writer's; None when the study does not exist or still has an active child."""
    unfinished = (select(Experiment.id).where(Experiment.study_id == study_id, Experiment.status.not_in(TERMINAL))
                  .exists())
    session.execute(update(Study).where(Study.id == study_id, Study.checks.is_(None), Study.preset.is_not(None),
                                        ~unfinished)
                    .values(checks=checks, revision=Study.revision + 1)
                    .execution_options(synchronize_session=False))
    return session.scalar(select(Study.checks).where(Study.id == study_id))
