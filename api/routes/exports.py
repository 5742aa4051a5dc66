"""Exports: the result series as a table (CSV, Parquet), one row per recorded step (smdrender/tables.py)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from api import etag
from api.deps import DbDep, ExperimentDep
from api.responses import NOT_FOUND, NOT_MODIFIED, Responses
from api.results import result_document
from api.routes.experiments import SINCE_STEP
from smdrender import tables as exports
from store import series
from store.models import Experiment

router = APIRouter(prefix="/v1/experiments", tags=["experiments"])

FIELDS = Query(description="Comma-separated series/theory names to export (step is always included); "
                           "same names as /results.", max_length=2000)
_COLUMNS = ("Columns: step, the global series, per-layer series as <layer>/<metric>, and theory series "
            "aligned on step (theory:<name> where the name is taken); null is ")


def _responses(media_type: str, what: str) -> Responses:
    """200 in the export's media type; errors stay JSON (401, 404, 503 as ErrorOut; 422, an unknown field or a
    bad parameter, as ValidationErrorOut), which api.main._document_errors documents as application/json."""
    return {200: {"description": what, "content": {media_type: {"schema": {"type": "string", "format": "binary"}}}},
            **NOT_FOUND, **NOT_MODIFIED}


class CsvResponse(Response):
    media_type = "text/csv"           # Starlette adds "; charset=utf-8"


class ParquetResponse(Response):
    media_type = exports.PARQUET_MEDIA_TYPE


def _export(experiment: Experiment, db: str, request: Request, fmt: str, fields: str | None,
            since_step: int | None, render: Callable[[dict], bytes], response_class: type[Response]) -> Response:
    current = etag.tag(experiment, fmt, series.stored_points(db, experiment.id), fields, since_step)
    if etag.matches(request, current):
        return etag.not_modified(current)
    selected = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
    doc = result_document(db, experiment, selected, since_step=since_step)
    return response_class(content=render(doc), headers={
        "ETag": current, "Content-Disposition": f'attachment; filename="{experiment.id}.{fmt}"'})


@router.get("/{experiment_id}/results.csv", response_class=CsvResponse, operation_id="exportResultsCsv",
            responses=_responses("text/csv", _COLUMNS + "an empty cell; per-trial series as name[0], name[1], …; "
                                                        "floats written to read back exactly."))
def export_results_csv(experiment: ExperimentDep, db: DbDep, request: Request,
                       fields: Annotated[str | None, FIELDS] = None,
                       since_step: Annotated[int | None, SINCE_STEP] = None):
    """The result series as CSV, one row per recorded step (ETag: send If-None-Match to poll)."""
    return _export(experiment, db, request, "csv", fields, since_step, exports.to_csv, CsvResponse)


@router.get("/{experiment_id}/results.parquet", response_class=ParquetResponse, operation_id="exportResultsParquet",
            responses=_responses(exports.PARQUET_MEDIA_TYPE,
                                 _COLUMNS + "a Parquet null; per-trial series as list<double> columns."))
def export_results_parquet(experiment: ExperimentDep, db: DbDep, request: Request,
                           fields: Annotated[str | None, FIELDS] = None,
                           since_step: Annotated[int | None, SINCE_STEP] = None):
    """The result series as a Parquet file, one row per recorded step (ETag: send If-None-Match to poll)."""
    return _export(experiment, db, request, "parquet", fields, since_step, exports.to_parquet,
                   ParquetResponse)
