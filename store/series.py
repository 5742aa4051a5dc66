"""Compact, idempotent storage of series points (chunks of compressed JSON)."""
from __future__ import annotations

import json
import zlib
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from store.db import transaction
from store.models import SeriesChunk


@transaction
def write_points(session: Session, experiment_id: str, start_index: int, points: dict[str, list[Any]]) -> None:
    """Store points from ``start_index`` on, replacing anything stored at or after it (so a retried
    or resumed write never duplicates a point)."""
    n = len(points.get("step", []))
    session.execute(delete(SeriesChunk).where(SeriesChunk.experiment_id == experiment_id,
                                              SeriesChunk.start_index >= start_index))
    if n:
        data = zlib.compress(json.dumps(points, allow_nan=True).encode(), 6)
        session.add(SeriesChunk(experiment_id=experiment_id, start_index=start_index, n_points=n, data=data))


@transaction
def read_series(session: Session, experiment_id: str) -> dict[str, list[Any]]:
    """All stored points in order, as ``{"step": [...], "<metric>": [...]}`` (empty dict if none)."""
    rows = session.scalars(select(SeriesChunk).where(SeriesChunk.experiment_id == experiment_id)
                           .order_by(SeriesChunk.start_index)).all()
    series: dict[str, list[Any]] = {}
    length = 0
    for row in rows:
        chunk = json.loads(zlib.decompress(row.data))
        skip = length - row.start_index  # > 0 only if an older chunk overlaps this one
        if skip < 0:
            break  # a gap: keep the contiguous prefix
        for key, values in chunk.items():
            series.setdefault(key, []).extend(values[skip:])
        length = max(length, row.start_index + row.n_points)
    return series


@transaction
def stored_points(session: Session, experiment_id: str) -> int:
    """How many points are stored (the end of the last chunk), without reading any chunk's data."""
    return int(session.scalar(select(func.coalesce(func.max(SeriesChunk.start_index + SeriesChunk.n_points), 0))
                              .where(SeriesChunk.experiment_id == experiment_id)) or 0)


@transaction
def truncate_points(session: Session, experiment_id: str, n: int) -> None:
    """Keep only the first ``n`` stored points (a job resuming from a checkpoint that holds ``n``)."""
    session.execute(delete(SeriesChunk).where(SeriesChunk.experiment_id == experiment_id,
                                              SeriesChunk.start_index >= n))
    straddling = session.scalars(select(SeriesChunk).where(
        SeriesChunk.experiment_id == experiment_id, SeriesChunk.start_index < n,
        SeriesChunk.start_index + SeriesChunk.n_points > n)).all()
    for row in straddling:
        keep = n - row.start_index
        chunk = json.loads(zlib.decompress(row.data))
        row.data = zlib.compress(json.dumps({k: v[:keep] for k, v in chunk.items()}, allow_nan=True).encode(), 6)
        row.n_points = keep
