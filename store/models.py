"""SQLAlchemy 2.0 models. Series are stored as compressed chunks, not a row per point."""
from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def new_id() -> str:
    return uuid.uuid4().hex


class Base(DeclarativeBase):
    pass


TERMINAL = ("succeeded", "failed", "cancelled")


class Experiment(Base):
    __tablename__ = "experiments"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    name: Mapped[Optional[str]] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), index=True, default="queued")
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    step: Mapped[int] = mapped_column(Integer, default=0)
    total_steps: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[Optional[str]] = mapped_column(Text)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[Optional[str]] = mapped_column(String(200))
    queue: Mapped[str] = mapped_column(String(16), default="cpu", index=True)
    lease_owner: Mapped[Optional[str]] = mapped_column(String(240))   # "<worker>/<token>" of the running attempt
    lease_expires_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True), index=True)
    theory: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    summary: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    distributions: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)  # histograms (not on step)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    started_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


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
    lease expired) or released (its worker gave it back)."""

    __tablename__ = "attempts"

    experiment_id: Mapped[str] = mapped_column(String(32), ForeignKey("experiments.id", ondelete="CASCADE"),
                                               primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker: Mapped[str] = mapped_column(String(240))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    ended_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    outcome: Mapped[Optional[str]] = mapped_column(String(16))
    resumed_from_step: Mapped[Optional[int]] = mapped_column(Integer)


class Checkpoint(Base):
    """The latest engine checkpoint of a running job (smdengine.Checkpoint.to_bytes)."""

    __tablename__ = "checkpoints"

    experiment_id: Mapped[str] = mapped_column(String(32), ForeignKey("experiments.id", ondelete="CASCADE"),
                                               primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    n_points: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
