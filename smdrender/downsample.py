"""Which points of a series to keep when a reader asks for fewer: evenly spread indices, or each
bucket's extremes so that a transient survives. Shared by the API's result documents and the plots."""
from __future__ import annotations

from typing import Any


def downsample_indices(n: int, max_points: int) -> list[int]:
    """At most ``max_points`` (≥ 2) evenly spread indices of range(n), first and last included."""
    if n <= max_points:
        return list(range(n))
    return sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})


def minmax_indices(columns: list[list[Any]], n: int, max_points: int) -> list[int]:
    """At most ``max_points`` (≥ 2) indices of range(n), one set for every column (so the series stay
    aligned on step): the first and the last, and in each of b equal buckets the index of each
    column's minimum and maximum. A spike (the transient after a schedule change) is kept wherever it
    falls; even spacing may step over it. b starts at (max_points − 2) // 2, as if every column shared
    its extremes (related series mostly do), and is halved until the union fits; it fits at the
    latest at (max_points − 2) // (2 × columns). Columns of lists (per-trial points) and nulls are skipped."""
    if n <= max_points:
        return list(range(n))
    import numpy as np

    arrays = []
    for column in columns:
        values = [v if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan for v in column[:n]]
        array = np.asarray(values, dtype=float)
        if len(array) == n and not np.isnan(array).all():
            arrays.append(array)
    if not arrays:
        return downsample_indices(n, max_points)
    data = np.stack(arrays)                                  # (columns, n)
    floor = max(1, (max_points - 2) // (2 * len(arrays)))
    buckets = max(floor, (max_points - 2) // 2)
    while True:
        keep = _bucket_extremes(data, buckets)
        if len(keep) <= max_points:
            return keep
        if buckets == floor:     # max_points too small for even one bucket per column pair: even spacing
            return downsample_indices(n, max_points)
        buckets = max(floor, buckets // 2)


def _bucket_extremes(data: Any, buckets: int) -> list[int]:
    """0, n − 1 and the index of each row's minimum and maximum in each of ``buckets`` equal buckets of
    the columns of ``data`` (rows × n; NaN ignored), sorted."""
    import numpy as np

    n = data.shape[1]
    lo = np.arange(buckets) * n // buckets
    hi = np.arange(1, buckets + 1) * n // buckets
    width = int((hi - lo).max())
    index = lo[:, None] + np.arange(width)[None, :]          # (buckets, width), past hi masked
    inside = index < hi[:, None]
    keep = {0, n - 1}
    for row in data:                                        # one row at a time: memory O(n)
        values = row[np.minimum(index, n - 1)]
        missing = np.isnan(values) | ~inside
        found = np.nonzero(~missing.all(axis=1))[0]
        for extreme in (np.where(missing, np.inf, values).argmin(axis=1),
                        np.where(missing, -np.inf, values).argmax(axis=1)):
            keep.update(index[found, extreme[found]].tolist())
    return sorted(keep)
