"""Studies (README: Studies): a study row and its children, ordinary experiments tagged with the study.

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

A ``compare`` study (``kind``; the others are ``expand``) groups existing experiments without
rerunning them (:func:`create_compare`): its members are rows of ``study_members`` (study, position,
experiment id), and each member keeps its own ``study_id``, so an experiment may be the child of one
study and a member of any number of compare studies. The same reads serve both kinds: for a compare
study, "children" are its members that still exist, in request order, each placed at its position
with the point :func:`member_values` ({"experiment": id, "name": its name or id}) on the one axis
``experiment``; its status, counts, progress, ETA and ``finished_at`` (the last member's end) are
derived from them as for an expanded study. A deleted member is left out of every read and listed
in ``missing``; :func:`store.jobs.release_members` raises the revision of every compare study that
loses one, so that its revision never goes back. Nothing is ever run, cancelled or deleted for a
compare study: :func:`remove` deletes its row and member list only.

Every public function is a unit of work (:func:`store.db.transaction`); results are detached.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from store import clock
from store.clock import db_now, stamp
from store.db import transaction
from store.jobs import QuotaExceeded, active_count, release_members, remaining_seconds, retry_after, settle_study
from store.models import (
    ACTIVE,
    PRIORITIES,
    TERMINAL,
    Attempt,
    Checkpoint,
    Experiment,
    SeriesChunk,
    Status,
    Study,
    StudyMember,
    User,
    as_utc,
    utcnow,
)
from store.study_eta import ChildTimes, eta_seconds

COMPARE = "compare"
COMPARE_AXES = ["experiment"]   # the axis of a compare study: its members' points are member_values


class StudyQuotaExceeded(QuotaExceeded):
    """A study whose ``adding`` children would take the owner over the active-jobs quota."""

    def __init__(self, active: int, limit: int, retry_after: int, adding: int):
        super().__init__(active, limit, retry_after)
        self.adding = adding


class MembersRefused(Exception):
    """Experiments a compare study may not group, as positions in its request: ``unknown``, no
    experiment with that id that the owner may see (existence is not revealed); ``private``, one
    that is not lab-visible, in a lab-visible study (its other viewers could not read it)."""

    def __init__(self, unknown: list[int], private: list[int]):
        super().__init__(f"unknown {unknown}, private {private}")
        self.unknown, self.private = unknown, private


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
    warnings: list[dict[str, Any]] | None = None   # its spec's warnings (smdengine.spec_warnings)


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
    kind: str = "expand"
    # compare studies: every member's id in request order (filled by get; None in lists), and those
    # deleted since the study was made
    members: list[str] | None = None
    missing: list[str] = field(default_factory=list)


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
    progress: float = 0.0           # the children's progress summed
    steps_done: float = 0.0         # their steps done (progress × total_steps) summed, and their steps
    steps: int = 0
    kinds: set[str] = field(default_factory=set)
    started: datetime | None = None
    finished: datetime | None = None
    revision: int = 0
    missing: list[str] = field(default_factory=list)
    eta: tuple[datetime, float] | None = None   # a running study's estimated finish and seconds to it (study_eta)


def member_values(experiment_id: str, name: str | None) -> dict[str, Any]:
    """A compare study member's point: its id (the axis ``experiment``) and the label the table
    and the overlay show (its name, or its id when it has none)."""
    return {"experiment": experiment_id, "name": name or experiment_id}


def member_seed(spec: dict[str, Any] | None) -> int:
    """A compare study member's seed: its spec's."""
    seed = (spec or {}).get("seed", 0)
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0


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


def _children_rows(session: Session, found: list[Study], columns: tuple[Any, ...], *,
                   by_status: bool = False) -> list[Any]:
    """(study id, *columns) of each study's children (expand) or present members (compare); with
    ``by_status``, aggregated per study and status."""
    rows: list[Any] = []
    expand = [study.id for study in found if study.kind != COMPARE]
    compare = [study.id for study in found if study.kind == COMPARE]
    if expand:
        query = select(Experiment.study_id, *columns).where(Experiment.study_id.in_(expand))
        rows += session.execute(query.group_by(Experiment.study_id, Experiment.status) if by_status else query).all()
    if compare:
        query = (select(StudyMember.study_id, *columns).join(Experiment, Experiment.id == StudyMember.experiment_id)
                 .where(StudyMember.study_id.in_(compare)))
        rows += session.execute(query.group_by(StudyMember.study_id, Experiment.status) if by_status else query).all()
    return rows


def _aggregates(session: Session, found: list[Study], eta: bool = True) -> dict[str, _Aggregate]:
    """What each study's children (expand) or present members (compare) say, by status: counts,
    progress, first start, last end and revisions summed; and each compare study's missing members; with
    ``eta``, each running study's estimated finish (one more query, over its children's rows)."""
    out = {study.id: _Aggregate() for study in found}
    columns = (Experiment.status, func.count(), func.sum(Experiment.progress), func.min(Experiment.started_at),
               func.max(Experiment.finished_at), func.sum(Experiment.revision),
               func.sum(Experiment.progress * Experiment.total_steps), func.sum(Experiment.total_steps),
               func.min(Experiment.kind), func.max(Experiment.kind))
    rows = _children_rows(session, found, columns, by_status=True)
    compare = [study.id for study in found if study.kind == COMPARE]
    if compare:
        for study_id, experiment_id in session.execute(
                select(StudyMember.study_id, StudyMember.experiment_id)
                .outerjoin(Experiment, Experiment.id == StudyMember.experiment_id)
                .where(StudyMember.study_id.in_(compare), Experiment.id.is_(None))
                .order_by(StudyMember.study_id, StudyMember.position)).all():
            out[str(study_id)].missing.append(str(experiment_id))
    for study_id, status, n, progress, started, finished, revision, steps_done, steps, kind, other_kind in rows:
        agg = out[str(study_id)]
        agg.counts[str(status)] = int(n)
        agg.progress += float(progress or 0.0)
        agg.steps_done += float(steps_done or 0.0)
        agg.steps += int(steps or 0)
        agg.kinds.update((str(kind), str(other_kind)))
        started, finished = as_utc(started), as_utc(finished)
        if started is not None and (agg.started is None or started < agg.started):
            agg.started = started
        if finished is not None and (agg.finished is None or finished > agg.finished):
            agg.finished = finished
        agg.revision += int(revision or 0)
    running = {study_id for study_id, agg in out.items() if derive_status(agg.counts) == "running"}
    if running and eta:
        _estimate_finish(session, [study for study in found if study.id in running], out)
    return out


def _estimate_finish(session: Session, found: list[Study], out: dict[str, _Aggregate]) -> None:
    """Each study's ETA (store.study_eta) from its children's times, on the database's clock."""
    now = clock.now(session)
    columns = (Experiment.status, Experiment.kind, Experiment.step, Experiment.total_steps, Experiment.start_step,
               Experiment.queued_at, Experiment.started_at, Experiment.finished_at,
               Experiment.pace_started_at, Experiment.pace_start_step, Experiment.cancel_requested,
               select(Checkpoint.step).where(Checkpoint.experiment_id == Experiment.id).scalar_subquery())
    rows = _children_rows(session, found, columns)
    children: dict[str, list[ChildTimes]] = {study.id: [] for study in found}
    for (study_id, status, kind, step, total, start_step, queued, started, finished, pace_at, pace_step, stopping,
         saved) in rows:
        if status == Status.queued:   # requeued at step 30, it restarts from its checkpoint, or from 0 without one
            step = saved or 0         # (or from 0 when a worker of another device type drops that checkpoint)
        # a child's own pace from its second report on, settled or not (as its own page shows it)
        pace = remaining_seconds(pace_at, step, pace_step, total, now) if status == Status.running else None
        children[str(study_id)].append(ChildTimes(
            status=str(status), kind=str(kind), step=step, total_steps=total, start_step=start_step or 0,
            queued_at=queued, started_at=started, finished_at=finished, own_remaining=pace[0] if pace is not None else None,
            stopping=bool(stopping)))
    for study_id, times in children.items():
        seconds = eta_seconds(times, now)
        if seconds is not None:
            out[study_id].eta = (now + timedelta(seconds=seconds), seconds)


def _view(study: Study, agg: _Aggregate) -> StudyView:
    counts = {status.value: agg.counts.get(status.value, 0) for status in Status}
    n = sum(counts.values())
    compare = study.kind == COMPARE
    # the work done of the whole, counted as the ETA counts it (store.study_eta): in steps, so a sweep over steps
    # is not half done when its short children are; each child one unit when they are of several kinds (a
    # compare study's: train and nrq steps do not add up)
    if len(agg.kinds) == 1 and agg.steps > 0:
        progress = min(1.0, agg.steps_done / agg.steps)
    else:
        progress = agg.progress / n if n else 0.0
    status = derive_status(counts)
    eta, eta_seconds = agg.eta if agg.eta is not None else (None, None)
    finished = agg.finished if compare else as_utc(study.finished_at)
    return StudyView(id=study.id, name=study.name, owner_id=study.owner_id, owner_name=study.owner_name,
                     visibility=study.visibility, priority_name=study.priority_name, spec=study.spec,
                     axes=list(study.axes), children_count=n if compare else study.children,
                     points=n if compare else study.points, cancel_requested=study.cancel_requested,
                     created_at=as_utc(study.created_at),
                     finished_at=finished if status not in ("queued", "running") else None,
                     status=status, counts=counts, progress=progress, started_at=agg.started, eta=eta,
                     eta_seconds=eta_seconds, revision=study.revision + agg.revision, preset=study.preset,
                     preset_size=study.preset_size, checks=study.checks, kind=study.kind or "expand",
                     missing=list(agg.missing))


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
    now = stamp(session)   # the children's created_at orders the fair queue (store.clock.stamp)
    study = Study(owner_id=owner_id, name=name, visibility=visibility, priority=priority, spec=spec, axes=axes,
                  children=len(children), points=points, cancel_requested=False, created_at=now, revision=0,
                  preset=preset, preset_size=preset_size, checks=None)
    session.add(study)
    session.flush()
    session.add_all([
        Experiment(kind=child.kind, name=child.name, spec=child.spec, status=Status.queued, progress=0.0, step=0,
                   total_steps=child.total_steps, cancel_requested=False, attempts=0, queue=child.queue,
                   owner_id=owner_id, visibility=visibility, priority=priority, revision=0, created_at=now,
                   updated_at=now, queued_at=now, study_id=study.id, study_index=child.index, study_point=child.point,
                   study_seed=child.seed, study_values=child.values, warnings=child.warnings)
        for child in children])
    session.flush()
    study.owner = session.get(User, owner_id)
    return _view(study, _aggregates(session, [study])[study.id])


@transaction
def create_compare(session: Session, *, owner_id: str, everyone: bool, name: str | None, visibility: str,
                   spec: dict[str, Any], experiment_ids: list[str]) -> StudyView:
    """Store a compare study of existing experiments (distinct ids, in the order given), or raise
    :class:`MembersRefused` naming every id its owner may not see (their own and lab-visible ones;
    all with ``everyone``) and, for a lab-visible study, every member that is not lab-visible.
    Nothing is queued and no quota applies: nothing runs."""
    rows = session.execute(select(Experiment.id, Experiment.owner_id, Experiment.visibility)
                           .where(Experiment.id.in_(experiment_ids))).all()
    seen = {str(i): str(vis) for i, owner, vis in rows if everyone or owner == owner_id or vis == "lab"}
    unknown = [i for i, experiment_id in enumerate(experiment_ids) if experiment_id not in seen]
    private = [i for i, experiment_id in enumerate(experiment_ids)
               if visibility == "lab" and seen.get(experiment_id, "lab") != "lab"]
    if unknown or private:
        raise MembersRefused(unknown, private)
    study = Study(kind=COMPARE, owner_id=owner_id, name=name, visibility=visibility, priority=PRIORITIES["normal"],
                  spec=spec, axes=list(COMPARE_AXES), children=len(experiment_ids), points=len(experiment_ids),
                  cancel_requested=False, created_at=utcnow(), revision=0, preset=None, preset_size=None,
                  checks=None)
    session.add(study)
    session.flush()
    session.add_all([StudyMember(study_id=study.id, position=i, experiment_id=experiment_id)
                     for i, experiment_id in enumerate(experiment_ids)])
    session.flush()
    study.owner = session.get(User, owner_id)
    view = _view(study, _aggregates(session, [study])[study.id])
    view.members = list(experiment_ids)
    return view


@transaction
def get(session: Session, study_id: str, *, eta: bool = True) -> StudyView | None:
    """The study (without its children; a compare study with its member ids), or None; without ``eta``, its
    estimated finish is left out (None), and its children's rows are not read for it."""
    study = session.get(Study, study_id)
    if study is None:
        return None
    view = _view(study, _aggregates(session, [study], eta=eta)[study_id])
    if view.kind == COMPARE:
        view.members = list(session.scalars(select(StudyMember.experiment_id).where(StudyMember.study_id == study_id)
                                            .order_by(StudyMember.position)))
    return view


@transaction
def get_with_children(session: Session, study_id: str) -> StudyView | None:
    """The study and its children's ids, places and states (in expansion order; a compare study's
    present members in request order, each at its position), or None."""
    view = get(session, study_id)
    if view is not None and view.kind == COMPARE:
        members = session.execute(select(StudyMember.position, Experiment.id, Experiment.name, Experiment.spec,
                                         Experiment.status, Experiment.progress, Experiment.warnings)
                                  .join(Experiment, Experiment.id == StudyMember.experiment_id)
                                  .where(StudyMember.study_id == study_id).order_by(StudyMember.position)).all()
        view.children = [ChildView(id=r[1], index=r[0], point=r[0], seed=member_seed(r[3]),
                                   values=member_values(r[1], r[2]), status=r[4], progress=r[5], warnings=r[6])
                         for r in members]
    elif view is not None:
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
    expansion order; a compare study's present members in request order (their ``study_*``
    columns are their own study's, if any: place them by ``StudyView.members``)."""
    if session.scalar(select(Study.kind).where(Study.id == study_id)) == COMPARE:
        return list(session.scalars(select(Experiment).join(StudyMember, StudyMember.experiment_id == Experiment.id)
                                    .where(StudyMember.study_id == study_id).order_by(StudyMember.position))
                    .unique())
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
    aggregates = _aggregates(session, studies)
    return [_view(s, aggregates[s.id]) for s in studies], total


@transaction
def request_cancel(session: Session, study_id: str) -> StudyView | None:
    """Cancel every unfinished child as :func:`store.jobs.request_cancel` does one (queued ones at
    once, running ones flagged: their workers stop at the next progress write) and flag the study.
    Conditional updates, so a worker's concurrent claim or finish is never overwritten. Returns
    the study as it is now (None if it does not exist)."""
    now = db_now()
    bump = {"revision": Experiment.revision + 1}
    # children before the study row: the lock order of jobs.settle_study
    session.execute(update(Experiment).where(Experiment.study_id == study_id, Experiment.status == Status.queued)
                    .values(status=Status.cancelled, cancel_requested=True, finished_at=now, updated_at=now, **bump))
    # a requeued child's checkpoint: nothing resumes an ended job
    session.execute(delete(Checkpoint).where(Checkpoint.experiment_id.in_(
        select(Experiment.id).where(Experiment.study_id == study_id, Experiment.status == Status.cancelled))))
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
    checkpoints first: SQLite may run without foreign-key cascades on an old connection); children
    that are members of compare studies leave them (:func:`store.jobs.release_members`). False,
    and nothing removed, while a child is queued or running. A compare study has no children: its
    row and member list are removed, whatever its members' states, and the members stay."""
    # lock the children: a concurrent claim waits, then finds nothing to claim
    ids = list(session.scalars(select(Experiment.id).where(Experiment.study_id == study_id).with_for_update()))
    if session.scalar(select(func.count()).select_from(Experiment).where(
            Experiment.study_id == study_id, Experiment.status.not_in(TERMINAL))):
        return False
    release_members(session, ids)
    for table in (SeriesChunk, Attempt, Checkpoint):
        session.execute(delete(table).where(table.experiment_id.in_(ids)))
    session.execute(delete(Experiment).where(Experiment.study_id == study_id))
    session.execute(delete(StudyMember).where(StudyMember.study_id == study_id))
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
