"""Result documents as tables (CSV, Parquet): one row per recorded step. Pure functions of the
document that :func:`api.results.result_document` builds; no database, no HTTP.

Columns, in this order: ``step``; every global series (document order); every per-layer series
as ``"<layer>/<metric>"``; every theory series that is a list (aligned on step), named
``"theory:<name>"`` when the name is already a column. Scalar theory, summary and distributions
are not part of the table (they are in the JSON document).

Missing values: the document has already turned every non-finite float (NaN, ±inf) into null
(``json_safe``), so a table never holds NaN: null is an empty CSV cell and a Parquet null,
whether a whole point or one trial inside a per-trial point is missing.

Per-trial points (a list per step, one value per recorded trial): CSV gets one column per trial,
``name[0]``, ``name[1]``, … (as many as the longest point); Parquet gets one ``list<double>``
column. A series is per-trial when any of its points is a list; a series with no point in the
table (``since_step`` past the end) cannot tell, and is a plain column (CSV: ``name``; Parquet:
``double``)."""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from smdengine import LAYER_SEPARATOR
from smdrender.labels import compact_json

CSV_MEDIA_TYPE = "text/csv; charset=utf-8"
PARQUET_MEDIA_TYPE = "application/vnd.apache.parquet"
THEORY_PREFIX = "theory:"


def table_columns(doc: dict[str, Any]) -> dict[str, list]:
    """``{column: values}``, every column as long as ``step`` (theory padded with null if shorter)."""
    series = doc.get("series") or {}
    steps = list(series.get("step", []))
    n = len(steps)
    columns: dict[str, list] = {"step": steps}
    for name, values in series.items():
        if name != "step":
            columns[name] = _fit(values, n)
    for layer, metrics in (doc.get("layers") or {}).items():
        for metric, values in metrics.items():
            columns[f"{layer}{LAYER_SEPARATOR}{metric}"] = _fit(values, n)
    for name, values in (doc.get("theory") or {}).items():
        if isinstance(values, list):
            column = name if name not in columns else f"{THEORY_PREFIX}{name}"
            while column in columns:  # only if a series is itself named "theory:<name>"
                column = f"{THEORY_PREFIX}{column}"
            columns[column] = _fit(values, n)
    return columns


def to_csv(doc: dict[str, Any]) -> bytes:
    """UTF-8 CSV (RFC 4180 quoting, CRLF lines) with a header row. Floats are written with
    ``repr`` (the shortest text that reads back to the same float), integers as integers, null as
    an empty cell; per-trial series spread over ``name[i]`` columns."""
    columns = table_columns(doc)
    header: list[str] = []
    cells: list[list[str]] = []      # column by column
    for name, values in columns.items():
        width = _trial_width(values)
        if width is None:
            header.append(name)
            cells.append([_cell(v) for v in values])
        else:
            header.extend(f"{name}[{i}]" for i in range(width))
            cells.extend(_trial_cells(values, width))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(zip(*cells, strict=False))
    return out.getvalue().encode("utf-8")


def to_parquet(doc: dict[str, Any]) -> bytes:
    """A Parquet file (one row group, zstd): ``step`` int64; a series of integers int64; other
    numbers double; per-trial series ``list<double>``; null where the document has null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = table_columns(doc)
    arrays = [pa.array(values, type=pa.int64()) if name == "step" else _arrow_array(pa, values)
              for name, values in columns.items()]
    table = pa.Table.from_arrays(arrays, names=list(columns))
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def rows_to_csv(columns: list[str], rows: list[dict[str, Any]]) -> bytes:
    """A table of rows (a study's) as UTF-8 CSV, cells as :func:`to_csv` writes them; a list or
    object value (an axis that sets a schedule entry) as its JSON text."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns)
    writer.writerows([_cell(_scalar(row.get(name))) for name in columns] for row in rows)
    return out.getvalue().encode("utf-8")


def rows_to_parquet(columns: list[str], rows: list[dict[str, Any]]) -> bytes:
    """A table of rows as a Parquet file: each column typed as :func:`to_parquet` types a series
    (int64, double, bool or string; lists and objects as JSON text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = [_arrow_array(pa, [_scalar(row.get(name)) for row in rows]) for name in columns]
    table = pa.Table.from_arrays(arrays, names=list(columns))
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def _scalar(value: Any) -> Any:
    return compact_json(value) if isinstance(value, list | dict) else value


def _fit(values: Any, n: int) -> list:
    values = list(values) if isinstance(values, list) else []
    return values[:n] + [None] * (n - len(values))


def _trial_width(values: list) -> int | None:
    """The number of trial columns of a per-trial series; None for a plain series."""
    widths = [len(v) for v in values if isinstance(v, list)]
    return max(widths) if widths else None


def _trial_cells(values: list, width: int) -> list[list[str]]:
    rows = [v if isinstance(v, list) else ([] if v is None else [v]) for v in values]
    return [[_cell(row[i]) if i < len(row) else "" for row in rows] for i in range(width)]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str) and value[:1] in FORMULA_STARTS and not _is_number(value):
        return "'" + value   # a user's text a spreadsheet would run as a formula (OWASP: CSV injection)
    return str(value)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _arrow_array(pa, values: list):
    present = [v for v in values if v is not None]
    if any(isinstance(v, list) for v in present):
        points = [v if isinstance(v, list) or v is None else [v] for v in values]
        return pa.array(points, type=pa.list_(pa.float64()))
    if present and all(_is_int(v) for v in present):
        return pa.array(values, type=pa.int64())
    if present and all(isinstance(v, bool) for v in present):
        return pa.array(values, type=pa.bool_())
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.array(values, type=pa.float64())
    return pa.array([None if v is None else str(v) for v in values], type=pa.string())


RUN_COLUMNS = ("id", "name", "tags", "kind", "status", "created_at")


def runs_csv(experiments: list[Any], time_text: Callable[[datetime], str]) -> bytes:
    """The runs table of ``GET /v1/experiments.csv``: one row per experiment, :data:`RUN_COLUMNS`, then
    every spec field flattened by dotted path (``params.lr``; lists as JSON) and every top-level summary
    number as ``summary.<name>``, columns in order of first appearance. ``time_text`` writes ``created_at``
    as the service's JSON bodies do (store.clock.utc_iso)."""
    rows: list[dict[str, Any]] = []
    for e in experiments:
        row: dict[str, Any] = {"id": e.id, "name": e.name or "", "tags": " ".join(e.tags), "kind": e.kind,
                               "status": e.status, "created_at": time_text(e.created_at)}
        # the spec's own name is the one it was submitted with: the column is the current one (PATCH renames)
        row.update((path, value) for path, value in _flat(e.spec, "").items() if path not in row)
        row.update({f"summary.{k}": v for k, v in (e.summary or {}).items() if not isinstance(v, (dict, list))})
        rows.append(row)
    columns = list(dict.fromkeys([*RUN_COLUMNS, *(k for row in rows for k in row)]))
    return rows_to_csv(columns, rows)


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: json.dumps(value) if isinstance(value, list) else value}
