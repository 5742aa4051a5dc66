"""A study's points on a grid of two columns, without matplotlib: the levels of a column and the mean of
another in each cell. The heatmap PNG (:mod:`smdrender.study_plots`) and the heatmap's JSON
(``api/routes/study_charts.py``) both place points with these, so the two show the same cells."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from smdrender.labels import compact_json


def levels(rows: list[dict], key: str) -> list[Any]:
    """The distinct values of a column, numbers ascending (else first seen first)."""
    values = list(dict.fromkeys(hashable(r.get(key)) for r in rows if r.get(key) is not None))
    if numeric(values):
        return sorted(values)
    return values


def hashable(value: Any) -> Any:
    """A level as a key: a scalar as it is; a list or object (a schedule) as compact JSON, which is also how a
    tick, the heatmap's JSON and the study's table write it (``[{"step":600,"lr_factor":0.1}]``)."""
    return value if isinstance(value, (int, float, str, bool)) else compact_json(value)


def numeric(values: Sequence[Any]) -> bool:
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                for v in values)


def cell_means(rows: list[dict], x: str, y: str, column: str, xs: list, ys: list) -> list[list[float | None]]:
    """cells[j][i] = mean of ``column`` over the rows at (xs[i], ys[j]); None where none has a finite number."""
    sums = [[0.0] * len(xs) for _ in ys]
    counts = [[0] * len(xs) for _ in ys]
    xi = {v: i for i, v in enumerate(xs)}
    yi = {v: j for j, v in enumerate(ys)}
    for row in rows:
        value = row.get(column)
        kx, ky = hashable(row.get(x)), hashable(row.get(y))
        if kx in xi and ky in yi and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value):
            sums[yi[ky]][xi[kx]] += value
            counts[yi[ky]][xi[kx]] += 1
    return [[s / n if n else None for s, n in zip(srow, nrow, strict=True)] for srow, nrow in zip(sums, counts, strict=True)]


def mixed_axes(rows: list[dict], x: str, y: str, axes: Sequence[str]) -> dict[str, list]:
    """The ``axes`` (not x, y) whose values differ within some (x, y) cell, with their values: a cell is then
    the mean over them (a third axis's settings averaged into one number), which the chart has to say."""
    mixed: dict[str, list] = {}
    for axis in axes:
        if axis in (x, y):
            continue
        cells: dict[tuple, set] = {}
        for row in rows:
            cells.setdefault((hashable(row.get(x)), hashable(row.get(y))), set()).add(hashable(row.get(axis)))
        if any(len(values) > 1 for values in cells.values()):
            mixed[axis] = levels(rows, axis)
    return mixed
