"""SQLAlchemy 2.0 models. Series are stored as compressed chunks, not a row per point."""
from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text, false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from store.clock import as_utc as as_utc  # the time helpers live in store.clock; imported from here too
from store.clock import db_now, utcnow

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def new_id() -> str:
    return uuid.uuid4().hex


class Base(DeclarativeBase):
    pass


class Status(StrEnum):
    """A job's state (stored and sent as these strings)."""

    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL = (Status.succeeded, Status.failed, Status.cancelled)
ACTIVE = (Status.queued, Status.running)
QUEUES = ("cpu", "gpu")   # the broker queues, by device: cuda jobs on gpu, the others on cpu
PRIORITIES = {"low": 0, "normal": 1, "high": 2}
PRIORITY_NAMES = {value: name for name, value in PRIORITIES.items()}
ROLES = ("user", "admin")


class User(Base):
    """A researcher. Quota columns override the server's defaults when set."""

    __tablename__ = "users"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16), default="user")
    max_active_jobs: Mapped[int | None] = mapped_column(Integer)
    max_work: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


class ApiKey(Base):
    """An API key ``smd_<id>_<secret>``: only the SHA-256 of the secret is stored."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(32), ForeignKey("users.id", ondelete="CASCADE"), index=True)
    label: Mapped[str | None] = mapped_column(String(200))
    secret_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    user: Mapped[User] = relationship(lazy="joined")


class _Submitted:
    """What an experiment and a study share as things a user submitted: the owner's name and the
    priority's name (the class defines ``owner`` and ``priority``)."""

    owner: Mapped[User | None]
    priority: Mapped[int]

    @property
    def owner_name(self) -> str | None:
        return self.owner.name if self.owner is not None else None

    @property
    def priority_name(self) -> str:
        return PRIORITY_NAMES.get(self.priority, "normal")


class Experiment(_Submitted, Base):
    __tablename__ = "experiments"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    name: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), index=True, default=Status.queued)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    step: Mapped[int] = mapped_column(Integer, default=0)
    total_steps: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200))
    queue: Mapped[str] = mapped_column(String(16), default="cpu", index=True)
    lease_owner: Mapped[str | None] = mapped_column(String(240))   # "<worker>/<token>" of the running attempt
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    theory: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    distributions: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # histograms (not on step)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    # when its current attempt was queued: created, requeued (a lost or handed-back attempt) or continued
    queued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))   # of its current (last) attempt
    # the step that attempt started from (a checkpoint's, else 0)
    start_step: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # when and at which step that attempt first reported progress (its set-up done; null before): its pace is
    # (step − pace_start_step) / (now − pace_started_at)
    pace_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    pace_start_step: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # when that attempt last wrote its step (a progress report; null before its first): unlike updated_at, an
    # edit or a cancel request does not move it (store.jobs.estimated_finish)
    progressed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # every UPDATE that does not set it writes the database's now (store.clock: a time other hosts compare)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=db_now())
    owner_id: Mapped[str | None] = mapped_column(String(32), ForeignKey("users.id"), index=True)
    visibility: Mapped[str] = mapped_column(String(8), default="private")   # private | lab
    priority: Mapped[int] = mapped_column(Integer, default=PRIORITIES["normal"])
    # bumped by every change a client can see (status, progress, points, cancel flag): ETags and events
    revision: Mapped[int] = mapped_column(Integer, default=0)
    # a study's child (README: Studies): its study, index in expansion order, point (index of its axis
    # values), those values ({path: value}) and seed; all null for a single experiment
    study_id: Mapped[str | None] = mapped_column(String(32), ForeignKey("studies.id", ondelete="CASCADE"),
                                                 index=True)
    study_index: Mapped[int | None] = mapped_column(Integer)
    study_point: Mapped[int | None] = mapped_column(Integer)
    study_seed: Mapped[int | None] = mapped_column(BigInteger)
    study_values: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # warnings of its spec (smdengine.spec_warnings: [{code, message, omits}]), written at
    # submission; null for rows stored before migration 0007
    warnings: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    # keep the final checkpoint when it succeeds, so that it can be continued (POST .../continue)
    keep_checkpoint: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    note: Mapped[str | None] = mapped_column(Text)   # free text of its owner (PATCH)
    owner: Mapped[User | None] = relationship(lazy="joined")
    tag_rows: Mapped[list[ExperimentTag]] = relationship(lazy="selectin", cascade="all, delete-orphan",
                                                         order_by="ExperimentTag.tag")

    @property
    def tags(self) -> list[str]:
        return [row.tag for row in self.tag_rows]


class ExperimentTag(Base):
    """One tag of an experiment (short labels its owner sets; the list filter ``tag=`` uses the index)."""

    __tablename__ = "experiment_tags"

    experiment_id: Mapped[str] = mapped_column(String(32), ForeignKey("experiments.id", ondelete="CASCADE"),
                                               primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


STUDY_KINDS = ("expand", "compare")


class Study(_Submitted, Base):
    """A study (README: Studies). ``expand``: one request expanded into child experiments (rows of
    ``experiments`` with ``study_id``), all created with it; ``finished_at`` is set when its last
    child ends. ``compare``: existing experiments grouped without rerunning them, its members listed
    in ``study_members`` (an experiment keeps its own ``study_id``). Either way its status, counts
    and progress are derived from its children or members (store.studies)."""

    __tablename__ = "studies"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    owner_id: Mapped[str | None] = mapped_column(String(32), ForeignKey("users.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16), default="expand", server_default="expand")   # STUDY_KINDS
    name: Mapped[str | None] = mapped_column(String(200))
    visibility: Mapped[str] = mapped_column(String(8), default="private")
    priority: Mapped[int] = mapped_column(Integer, default=PRIORITIES["normal"])
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)          # the request as submitted, minus service fields
    axes: Mapped[list[str]] = mapped_column(JSON)               # axis paths in expansion order
    children: Mapped[int] = mapped_column(Integer)
    points: Mapped[int] = mapped_column(Integer)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # bumped by changes of the study row itself; its ETag adds the children's revisions
    revision: Mapped[int] = mapped_column(Integer, default=0)
    # a study made from a preset (smdengine.PRESETS): its id and size, and the checks the engine
    # computed from the children once all had ended (null until then: store.studies.save_checks)
    preset: Mapped[str | None] = mapped_column(String(64))
    preset_size: Mapped[str | None] = mapped_column(String(32))
    checks: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    owner: Mapped[User | None] = relationship(lazy="joined")


class StudyMember(Base):
    """A member of a ``compare`` study: the experiment at ``position`` of its request. No foreign
    key to ``experiments``: deleting a member leaves its row, so the study can say which member is
    gone (store.studies: absent from the table, listed in ``missing``)."""

    __tablename__ = "study_members"

    study_id: Mapped[str] = mapped_column(String(32), ForeignKey("studies.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[str] = mapped_column(String(32), index=True)


class SeriesChunk(Base):
    """Points [start_index, start_index + n_points) of an experiment's series, zlib-compressed JSON
    ``{"step": [...], "<metric>": [...]}``. Rewriting from an index replaces what followed it."""

    __tablename__ = "series_chunks"

    experiment_id: Mapped[str] = mapped_column(String(32), ForeignKey("experiments.id", ondelete="CASCADE"),
                                               primary_key=True)
    start_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    n_points: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class Attempt(Base):
    """One start of a job by a worker, and how it ended: succeeded, failed, cancelled, lost (its
    lease expired), interrupted (its lease expired while the database was unreachable; does not
    count toward SMD_MAX_ATTEMPTS) or released (its worker gave it back)."""

    __tablename__ = "attempts"

    experiment_id: Mapped[str] = mapped_column(String(32), ForeignKey("experiments.id", ondelete="CASCADE"),
                                               primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker: Mapped[str] = mapped_column(String(240))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=db_now())   # store.clock
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    outcome: Mapped[str | None] = mapped_column(String(16))
    resumed_from_step: Mapped[int | None] = mapped_column(Integer)
    # what ran it (smdengine.provenance + git_commit); null for attempts stored before migration 0009
    provenance: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Checkpoint(Base):
    """The latest engine checkpoint of a running job (smdengine.Checkpoint.to_bytes)."""

    __tablename__ = "checkpoints"

    experiment_id: Mapped[str] = mapped_column(String(32), ForeignKey("experiments.id", ondelete="CASCADE"),
                                               primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    n_points: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=db_now())   # store.clock


class WorkerProcess(Base):
    """A worker process that can claim jobs (store.workers): a row while it lives, renewed on the database's
    clock; ``busy`` while it runs a job or a fused batch (of ``study_id``'s children, if a study's)."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(240), primary_key=True)   # "<worker name>/<pid>"
    queues: Mapped[str] = mapped_column(String(200))                  # comma-separated
    busy: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    study_id: Mapped[str | None] = mapped_column(String(32))          # the study of the job it runs, if any
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=db_now())
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=db_now(), index=True)


class WriteProbe(Base):
    """Always empty: the probes insert a row here and roll it back (store.db.write_trouble)."""

    __tablename__ = "write_probe"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes | None] = mapped_column(LargeBinary)
