"""Compact, idempotent storage of series points (chunks of compressed JSON)."""
from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from typing import Any, Literal, overload

from sqlalchemy import Connection, bindparam, delete, func, select
from sqlalchemy.orm import Session

from store.db import reading, transaction
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


@reading
def read_series(session: Session | Connection, experiment_id: str) -> dict[str, list[Any]]:
    """All stored points in order, as ``{"step": [...], "<metric>": [...]}`` (empty dict if none)."""
    return _join(_decode(chunk)[1] for chunk in _prefix(session, experiment_id))


@reading
def read_series_after(session: Session | Connection, experiment_id: str, step: int) -> tuple[int, dict[str, list[Any]]]:
    """``(index, points)``: ``points`` is what :func:`read_series` returns from point ``index`` on,
    the stored chunks that hold every point recorded after ``step`` (so it may begin a little before).
    Chunks are read from the last one back, each fetched alone, until one starts at or before
    ``step``: polling a long run for its new points (``since_step``) reads and decompresses the new
    points, not the whole series (the chunks before are never fetched)."""
    chunks = []
    for start, skip in reversed(_prefix(session, experiment_id, with_data=False)):
        data = session.scalars(select(SeriesChunk.data).where(SeriesChunk.experiment_id == experiment_id,
                                                              SeriesChunk.start_index == start)).one()
        index, points = _decode((start, skip, data))
        steps = points.get("step")
        if not steps:
            continue  # holds nothing an earlier chunk does not
        chunks.append((index, points))
        if steps[0] <= step:
            break
    chunks.reverse()
    return (chunks[0][0] if chunks else 0), _join(points for _, points in chunks)


@overload
def _prefix(session: Session | Connection, experiment_id: str) -> list[tuple[int, int, bytes]]: ...


@overload
def _prefix(session: Session | Connection, experiment_id: str, with_data: Literal[False]) -> list[tuple[int, int]]: ...


def _prefix(session: Session | Connection, experiment_id: str, with_data: bool = True) -> list[Any]:
    """(start_index, points an earlier chunk already holds, data) of the chunks that make the
    stored series: the contiguous run of points from index 0 (an older chunk's points win where
    two overlap; a gap ends the series); without ``with_data``, (start_index, skip) only."""
    columns = [SeriesChunk.start_index, SeriesChunk.n_points] + ([SeriesChunk.data] if with_data else [])
    rows = session.execute(select(*columns).where(SeriesChunk.experiment_id == experiment_id)
                           .order_by(SeriesChunk.start_index)).all()
    chunks: list[Any] = []
    length = 0
    for row in rows:
        start, n = row.start_index, row.n_points
        skip = length - start  # > 0 only if an older chunk overlaps this one
        if skip < 0:
            break  # a gap: keep the contiguous prefix
        chunks.append((start, skip, row.data) if with_data else (start, skip))
        length = max(length, start + n)
    return chunks


def _decode(chunk: tuple[int, int, bytes]) -> tuple[int, dict[str, list[Any]]]:
    """(index of the chunk's first point no earlier chunk holds, its points from there on)."""
    start, skip, data = chunk
    return start + skip, {key: values[skip:] for key, values in json.loads(zlib.decompress(data)).items()}


def _join(chunks: Iterable[dict[str, list[Any]]]) -> dict[str, list[Any]]:
    series: dict[str, list[Any]] = {}
    for points in chunks:
        for key, values in points.items():
            series.setdefault(key, []).extend(values)
    return series


# built once: every results poll asks (building the statement was about half of the read's cost)
_STORED_POINTS = (select(func.coalesce(func.max(SeriesChunk.start_index + SeriesChunk.n_points), 0))
                  .where(SeriesChunk.experiment_id == bindparam("experiment_id")))


@reading
def stored_points(session: Session | Connection, experiment_id: str) -> int:
    """How many points are stored (the end of the last chunk), without reading any chunk's data."""
    return int(session.scalar(_STORED_POINTS, {"experiment_id": experiment_id}) or 0)


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
