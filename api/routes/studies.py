"""The studies resource (README: Studies): submit, list, read, follow, cancel, delete; the comparison table
(JSON, CSV, Parquet) and plots. A study's children are ordinary experiments (/v1/experiments/{id}).

A compare study (``kind`` compare, store.studies) groups existing experiments: the same reads serve
it, its members standing for children, each placed at its position in the request with the point
``{"experiment": id, "name": ...}`` (:func:`_placed`)."""
from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, HTTPException, Query, Request, Response
from fastapi.encoders import jsonable_encoder
from pydantic import ValidationError

from api import cursors, etag
from api.cursors import CursorQuery
from api.deps import CurrentUserDep, DbDep, ManagedStudyDep, SettingsDep, StudyDep
from api.responses import (
    FORBIDDEN,
    NOT_MODIFIED,
    STUDY_NOT_FOUND,
    UNAUTHORIZED,
    Responses,
    data_unavailable_message,
    over_quota,
    query_error,
    quota_response,
)
from api.results import result_document
from api.routes.events import EventStream, _known_revision, _stream
from api.routes.plots import PlotFormat
from api.schemas import (
    COMPARE_EXAMPLE,
    SERVICE_FIELDS,
    CompareStudySubmission,
    ErrorOut,
    StudyOut,
    StudyPage,
    StudyPlan,
    StudyRequest,
    StudySubmission,
    StudyTable,
    ValidationErrorOut,
)
from smdengine import (
    DERIVED_AXES,
    OVERLAY_X,
    WORK_UNITS,
    ChildRecord,
    StudyError,
    curve_axes,
    curve_grid,
    error_location,
    error_message,
    evaluate_checks,
    expand_study,
    group_by_point,
    json_safe,
    output_names,
    plot_key,
    series_names,
    spec_warnings,
    study_table,
    table_columns,
    theory_curves,
    theory_of,
    time_axis,
)
from smdrender import labels, presets
from smdrender import tables as exports
from smdrender.downsample import downsample_indices
from store import series, studies
from store.clock import utc_iso
from store.models import PRIORITIES, Experiment, User
from store.settings import Settings
from store.studies import COMPARE, NewChild, StudyView, member_seed, member_values
from worker.queue import queue_for, ring

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/studies", tags=["studies"])
# its own path: under /v1/studies, "plan" would also be read as a study id by GET and DELETE
plan_router = APIRouter(prefix="/v1/study-plans", tags=["studies"])

ENDED = ("succeeded", "failed", "cancelled", "partial")
RING_AT_ONCE = 32   # doorbells sent per queue at submission; the sweeper rings for the rest
MAX_LINE_POINTS = 2000


def _links(status: str, *operations: str) -> dict:
    return {"responses": {status: {"links": {
        operation[0].upper() + operation[1:]: {"operationId": operation,
                                               "parameters": {"study_id": "$response.body#/id"}}
        for operation in operations}}}}


def _body_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Engine errors as a request's 422 detail: locations in the body, JSON-safe."""
    return json_safe(jsonable_encoder([{**e, "loc": ["body", *e.get("loc", [])]} for e in errors]))


STUDY_EXAMPLES = {
    "grid": {"summary": "A grid of runs (expanded and run)", "value": {
        "name": "lr x wd", "base": {"kind": "nrq", "seed": 0, "params": {
            "dim": 10, "eig_low": 1, "eig_high": 2, "noise_std": 1, "trials": 64, "steps": 400, "record_every": 20}},
        "grid": {"params.lr": [0.05, 0.1], "params.weight_decay": [0.01, 0.02]}, "seeds": [0, 1]}},
    "compare": {"summary": "Existing experiments compared (nothing runs)", "value": COMPARE_EXAMPLE},
}


@router.post("", status_code=202, response_model=StudyOut, operation_id="submitStudy",
             responses={400: {"model": ErrorOut, "description": "The body could not be read (not UTF-8 JSON)."},
                        **UNAUTHORIZED,
                        403: {"model": ErrorOut, "description": "priority high is for admins only."},
                        422: {"description": "Invalid study: each error names where (an axis with the nearest "
                                             "valid paths; a point with its index and axis values, the field "
                                             "and the reason), or too many children (SMD_MAX_STUDY_POINTS). "
                                             "A compare study: fewer than 2 or more than 200 ids "
                                             "(experiment_count, saying how many were given), an id listed "
                                             "twice (duplicate_experiment, at the repeat's index), an id of "
                                             "no experiment you may see (unknown_experiment, at "
                                             "[\"body\", \"experiments\", i]), or a private member of a "
                                             "lab-visible study (private_experiment).",
                              "model": ValidationErrorOut},
                        **quota_response("Over a quota, applied to the study as a whole "
                                         "(the detail says which); Retry-After says when "
                                         "to try again. Nothing is stored.")},
             openapi_extra=_links("202", "getStudy", "cancelStudy"))
def submit_study(submission: Annotated[StudyRequest, Body(openapi_examples=STUDY_EXAMPLES)], db: DbDep,
                 settings: SettingsDep, user: CurrentUserDep, response: Response):
    """Expand a study into its children, validate every one, check your quotas for the whole study,
    store the study and all its children in one transaction, and queue them.

    Or, with a body of ``experiments`` (2 to 200 distinct ids of experiments you may see) instead of
    ``base``, a **compare study**: the experiments grouped as they are, nothing rerun and no quota
    charged, so that the study's status, table, overlay and events compare them (see
    CompareStudySubmission)."""
    if isinstance(submission, CompareStudySubmission):
        study = submit_compare(submission, db, user)
    else:
        study = submit(submission, db, settings, user)
    response.headers["Location"] = f"/v1/studies/{study.id}"
    return study


def submit_compare(submission: CompareStudySubmission, db: str, user: User) -> StudyView:
    """A compare study of existing experiments: 422 for every id of no experiment the user may see
    (their own and lab-visible ones; any for an admin), without saying whether it exists, and for
    every private member of a lab-visible study; else stored, nothing queued."""
    try:
        return studies.create_compare(db, owner_id=user.id, everyone=user.is_admin, name=submission.name,
                                      visibility=submission.visibility,
                                      spec=submission.model_dump(mode="json", exclude={"visibility"},
                                                                 exclude_unset=True),
                                      experiment_ids=list(submission.experiments))
    except studies.MembersRefused as exc:
        ids = submission.experiments
        errors = [{"loc": ["body", "experiments", i], "type": "unknown_experiment", "input": ids[i],
                   "msg": f"no experiment {ids[i]} that you may see"} for i in exc.unknown]
        errors += [{"loc": ["body", "experiments", i], "type": "private_experiment", "input": ids[i],
                    "msg": f"experiment {ids[i]} is private: a lab-visible study may group only lab-visible "
                           f"experiments (make the study private, or list only lab-visible ones)"}
                   for i in exc.private]
        raise HTTPException(status_code=422, detail=sorted(errors, key=lambda e: e["loc"][2])) from None


def _check_priority(submission: StudySubmission, user: User) -> None:
    if submission.priority == "high" and not user.is_admin:
        raise HTTPException(status_code=403, detail="priority: 'high' is for admins only; use 'low' or 'normal'")


def _expand(submission: StudySubmission, settings: Settings) -> list[Any]:
    """The study's children, each validated; 422 naming the axis, or the point, field and reason."""
    engine = submission.model_dump(mode="json", exclude=SERVICE_FIELDS)
    # the base as given (smdengine.expand_study): what its validators filled in is not the user's
    engine["base"] = submission.base.model_dump(mode="json", exclude_unset=True)   # type: ignore[attr-defined]
    try:
        children = expand_study(engine, max_children=settings.max_study_points)
    except StudyError as exc:
        raise HTTPException(status_code=422, detail=_body_errors(exc.errors)) from None
    except ValidationError as exc:  # the model above already validated it: a study the engine reads otherwise
        raise HTTPException(status_code=422, detail=_body_errors(
            [{"loc": list(error_location(e)), "msg": error_message(e), "type": e["type"]} for e in exc.errors()])) from None
    missing = {c.point: (c, problem) for c in children
               if (problem := c.spec.missing_data(settings.data_dir)) is not None}
    if missing:   # each point once, as the engine names a point's invalid field
        raise HTTPException(status_code=422, detail=_body_errors([
            {"loc": ["point", point, *problem["field"].split(".")], "type": "data_unavailable",
             "msg": data_unavailable_message(problem), "point": {"index": point, "values": child.values}}
            for point, (child, problem) in sorted(missing.items())]))
    return children


@plan_router.post("", response_model=StudyPlan, operation_id="planStudy",
             responses={400: {"model": ErrorOut, "description": "The body could not be read (not UTF-8 JSON)."},
                        **UNAUTHORIZED,
                        403: {"model": ErrorOut, "description": "priority high is for admins only."},
                        422: {"description": "Invalid study, as POST /v1/studies answers it: each error names "
                                             "the axis, or the point, field and reason.",
                              "model": ValidationErrorOut}})
def plan_study(submission: StudySubmission, settings: SettingsDep, user: CurrentUserDep) -> StudyPlan:
    """What a study would run, without storing or queueing anything: its children counted (points ×
    seeds), their work together beside your work limit, and the warnings its points raise. The same
    validation as POST /v1/studies (a form shows the 422 next to the axis it names), and its 403."""
    _check_priority(submission, user)
    expanded = _expand(submission, settings)
    warnings: dict[str, dict[str, Any]] = {}
    for child in expanded:
        for w in spec_warnings(child.spec):
            warnings.setdefault(w["code"], w)
    return StudyPlan(runs=len(expanded), points=len({c.point for c in expanded}),
                     seeds=len({c.seed for c in expanded}), work=sum(c.spec.work for c in expanded),
                     max_work=user.max_work or settings.max_work, warnings=list(warnings.values()))


def stored_spec(submission: StudySubmission) -> dict[str, Any]:
    """What a study's row keeps of its submission: the study as the user wrote it, without the service's fields."""
    return submission.model_dump(mode="json", exclude=SERVICE_FIELDS, exclude_unset=True)


def submit(submission: StudySubmission, db: str, settings: Settings, user: User, *, preset: str | None = None,
           preset_size: str | None = None) -> StudyView:
    """POST /v1/studies, shared with POST /v1/presets/{id}/run: 403 for priority high unless admin;
    expand and validate (422 naming the axis, or the point, field and reason); quotas for the
    whole study (429, nothing stored); the study and all its children in one transaction (with
    its ``preset`` and ``preset_size``); then the doorbells."""
    _check_priority(submission, user)
    expanded = _expand(submission, settings)
    label = (submission.name or submission.base.name or "study")[:190]
    children = [NewChild(index=c.index, point=c.point, seed=c.seed, values=c.values, kind=c.spec.kind,
                         name=f"{label} #{c.index}", spec=c.spec.model_dump(mode="json"),
                         total_steps=c.spec.params.steps, queue=queue_for(c.spec.device), work=c.spec.work,
                         warnings=spec_warnings(c.spec))
                 for c in expanded]
    max_work = user.max_work or settings.max_work
    max_active = user.max_active_jobs or settings.max_active_jobs
    try:  # committed when this returns: the rows exist before any worker can see a message
        study = studies.create(db, owner_id=user.id, name=submission.name, visibility=submission.visibility,
                               priority=PRIORITIES[submission.priority],
                               spec=stored_spec(submission),
                               axes=submission.axes(), points=len({c.point for c in expanded}), children=children,
                               max_active_jobs=max_active, max_work=max_work,
                               default_retry_seconds=settings.quota_retry_seconds, preset=preset,
                               preset_size=preset_size)
    except studies.WorkQuotaExceeded as exc:
        raise over_quota(
            f"quota: work is limited to {exc.limit:,} for {user.name} ({WORK_UNITS}), "
            f"and this study's {len(children)} children need {exc.work:,} together: make it smaller, "
            f"or ask an admin to raise the limit (smd users quota)", quota="work",
            retry_after=None) from None   # no wait makes the study smaller
    except studies.StudyQuotaExceeded as exc:
        if exc.adding > exc.limit:   # no wait makes room for it: no Retry-After, and clients do not wait
            raise over_quota(
                f"quota: at most {exc.limit} queued + running jobs for {user.name}, and this study adds "
                f"{exc.adding} children, more than the limit itself: submit a smaller study (at most {exc.limit} "
                f"children), or ask an admin to raise the limit (smd users quota)", quota="active_jobs",
                retry_after=None) from None
        raise over_quota(
            f"quota: at most {exc.limit} queued + running jobs for {user.name}; you have {exc.active} and this "
            f"study adds {exc.adding}: wait for some to end, cancel some, or submit a smaller study",
            quota="active_jobs", retry_after=exc.retry_after) from None
    queues: dict[str, int] = {}
    for child in children:
        queues[child.queue] = queues.get(child.queue, 0) + 1
    for queue, n in queues.items():
        try:
            ring(settings, queue, min(n, RING_AT_ONCE))
        except Exception as exc:  # the children are safe in the database: the sweeper rings once the broker is back
            log.warning("could not reach the broker for study %s (%s); the sweeper will queue it", study.id, exc)
    return study


@router.get("", response_model=StudyPage, operation_id="listStudies", responses=UNAUTHORIZED)
def list_studies(request: Request, response: Response, db: DbDep, user: CurrentUserDep,
                 limit: Annotated[int, Query(ge=1, le=500, description="Items per page (next_cursor pages on).")] = 50,
                 cursor: CursorQuery = None):
    """List the studies you may see (yours and lab-visible ones; all for admins), newest first
    (without their children)."""
    items, total = studies.page(db, viewer_id=user.id, everyone=user.is_admin,
                                after=cursors.decode(cursor) if cursor else None, limit=limit + 1)
    next_cursor = cursors.encode(items[limit - 1].created_at, items[limit - 1].id) if len(items) > limit else None
    if next_cursor:
        response.headers["Link"] = f'<{request.url.include_query_params(cursor=next_cursor)}>; rel="next"'
    for study in items:   # as children: null in lists (GET the study for them)
        study.checks = None
    return StudyPage(items=[StudyOut.model_validate(s) for s in items[:limit]], total=total, limit=limit,
                     next_cursor=next_cursor)


@router.get("/{study_id}", response_model=StudyOut, operation_id="getStudy",
            responses={**STUDY_NOT_FOUND, **NOT_MODIFIED}, openapi_extra=_links("200", "cancelStudy"))
def get_study(study: StudyDep, db: DbDep, request: Request, response: Response):
    """Status, counts by child status, progress, estimated finish and every child (id, axis values,
    seed, status) of one study (ETag: send If-None-Match to poll); a preset study's checks (pending
    until every child has ended, then evaluated once and stored)."""
    computed = None
    if _checks_due(study):   # stored first, so that the ETag below covers them
        computed = study_checks(db, study)
        study = _reread(db, study.id)
    current = etag.tag(study, "study")
    if etag.matches(request, current):
        return etag.not_modified(current)
    full = studies.get_with_children(db, study.id)
    if full is None:  # deleted meanwhile
        raise HTTPException(status_code=404, detail=f"study {study.id} not found")
    if full.preset is not None and full.checks is None:
        full.checks = computed if computed is not None else study_checks(db, full)
    response.headers["ETag"] = etag.tag(full, "study")
    return full


def _reread(db: str, study_id: str) -> StudyView:
    study = studies.get(db, study_id)
    if study is None:  # deleted meanwhile
        raise HTTPException(status_code=404, detail=f"study {study_id} not found")
    return study


def _checks_due(study: StudyView) -> bool:
    return study.preset is not None and study.checks is None and study.status in ENDED


def study_checks(db: str, study: StudyView) -> list[dict[str, Any]] | None:
    """A preset study's checks (None for other studies): the stored ones; ``pending`` for each
    while a child is queued or running; else evaluated now by the engine (`evaluate_checks` on the
    children's records and result documents) and stored with `store.studies.save_checks`.

    Where they are computed: lazily, on the first read after the last child ended (GET of the
    study, its table or its figure), not by the worker that ends the last child. Any of several
    paths ends the last child (a worker finishing it, a cancel, the sweeper failing or cancelling
    an abandoned job), and a worker may die between ending it and evaluating; a read after the end
    covers them all, needs no new job or hook in the job system, and costs one evaluation per
    study: `save_checks` is a compare-and-set (checks null and no active child), so readers racing
    on the first read store one result and every later read serves the stored one. An engine error
    is not stored (verdict ``error``, the reason in the note): a later read tries again."""
    if study.preset is None:
        return None
    if study.checks is not None:
        return study.checks
    preset = presets.preset_or_none(study.preset)
    if preset is None:   # a preset this engine no longer has
        return []
    if study.status not in ENDED:
        return presets.pending_checks(preset)
    children = studies.children(db, study.id)
    if any(c.status not in ENDED for c in children):
        return presets.pending_checks(preset)
    documents = [result_document(db, c) for c in children]
    try:
        checks = json_safe(evaluate_checks(study.preset, _records(study, children), documents))
    except Exception as exc:   # the engine's evaluation failed: say so, store nothing
        log.exception("study %s: the checks of preset %s could not be evaluated", study.id, study.preset)
        return presets.failed_checks(preset, exc)
    stored = studies.save_checks(db, study.id, checks)
    return stored if stored is not None else checks


@router.post("/{study_id}/cancel", status_code=202, response_model=StudyOut, operation_id="cancelStudy",
             openapi_extra=_links("202", "getStudy", "deleteStudy"),
             responses={**STUDY_NOT_FOUND, **FORBIDDEN,
                        409: {"model": ErrorOut, "description": "The study already ended, or it is a compare "
                                                                "study (it runs nothing: cancel its "
                                                                "experiments themselves)."}})
def cancel_study(study: ManagedStudyDep, db: DbDep):
    """Cancel every unfinished child: queued ones at once, running ones within seconds (keeping their
    partial results). A compare study runs nothing, so it cannot be cancelled (409)."""
    if study.kind == COMPARE:
        raise HTTPException(status_code=409, detail=(
            f"study {study.id} compares existing experiments and runs nothing: cancel the experiments "
            f"themselves (POST /v1/experiments/{{id}}/cancel)"))
    if study.status in ENDED:
        raise HTTPException(status_code=409, detail=f"study {study.id} already {study.status}")
    current = studies.request_cancel(db, study.id)
    if current is None:
        raise HTTPException(status_code=404, detail=f"study {study.id} not found")
    return current


@router.delete("/{study_id}", status_code=204, operation_id="deleteStudy",
               responses={**STUDY_NOT_FOUND, **FORBIDDEN,
                          409: {"model": ErrorOut, "description": "A child is still queued or running: cancel "
                                                                  "the study first."}})
def delete_study(study: ManagedStudyDep, db: DbDep):
    """Delete an ended study and its children with their results (owner or admin). A compare study is
    deleted at any time, and only the study: its experiments stay as they are."""
    if study.kind == COMPARE:
        studies.remove(db, study.id)
        return Response(status_code=204)
    if study.status not in ENDED or not studies.remove(db, study.id):
        raise HTTPException(status_code=409, detail=f"study {study.id} is {study.status}: cancel it first")
    return Response(status_code=204)


# ----------------------------------------------------------------------------- events

STUDY_EVENT_FORMAT = (
    "A stream of Server-Sent Events, each a snapshot of the study:\n\n"
    "    id: <revision>\n"
    "    event: status | progress\n"
    "    data: {\"id\": ..., \"status\": ..., \"progress\": ..., \"counts\": {...}, \"children_count\": ..., "
    "\"eta\": ..., \"eta_seconds\": ..., \"cancel_requested\": ..., \"finished_at\": ..., \"revision\": ...}\n\n"
    "As for an experiment's events: `retry:` first, then the current state (unless Last-Event-ID shows the "
    "client has it), then an event whenever the revision changes (`status` when the status changed). The "
    "stream ends after the event reporting succeeded, failed, cancelled or partial, after `event: deleted`, "
    "or when `timeout` runs out.")


def _snapshot(study: StudyView) -> dict[str, Any]:
    return {"id": study.id, "status": study.status, "progress": study.progress, "counts": study.counts,
            "children_count": study.children_count, "eta": utc_iso(study.eta), "eta_seconds": study.eta_seconds,
            "cancel_requested": study.cancel_requested, "finished_at": utc_iso(study.finished_at),
            "revision": study.revision}


def _reader(url: str, study_id: str) -> Callable[[], dict[str, Any] | None]:
    """The stream's poll: the study without its ETA (which reads every child's row), and with it only when its
    revision changed, that is when an event will be sent."""
    last_revision: int | None = None

    def read() -> dict[str, Any] | None:
        nonlocal last_revision
        study = studies.get(url, study_id, eta=False)
        if study is not None and study.revision != last_revision:
            study = studies.get(url, study_id)
            last_revision = None if study is None else study.revision
        return None if study is None else _snapshot(study)
    return read


@router.get("/{study_id}/events", operation_id="streamStudyEvents", response_class=Response,
            responses={200: {"description": STUDY_EVENT_FORMAT,
                             "content": {"text/event-stream": {"schema": {
                                 "type": "object", "required": ["data"],
                                 "properties": {"event": {"type": "string", "enum": ["status", "progress", "deleted"]},
                                                "id": {"type": "string"}, "data": {"type": "string"},
                                                "retry": {"type": "integer"}}}}}},
                       **STUDY_NOT_FOUND})
async def stream_study_events(study: StudyDep, request: Request, settings: SettingsDep,
                              timeout: Annotated[float | None, Query(
                                  gt=0, le=3600, description="Close the stream after this many seconds "
                                                             "(default: when the study ends).")] = None,
                              last_event_id: Annotated[str | None, Header(
                                  alias="Last-Event-ID", description="The id of the last event received: the "
                                                                     "current state is sent only if it is "
                                                                     "newer.")] = None):
    """Stream the study's status and progress as Server-Sent Events until it ends."""
    body = _stream(request, _reader(settings.db_url, study.id), _snapshot(study), _known_revision(last_event_id),
                   settings.events_poll_seconds, settings.events_keepalive_seconds, timeout, ended=ENDED)
    return EventStream(body, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


# ----------------------------------------------------------------------------- table


class Group(StrEnum):
    point = "point"


GROUP = Query(description="point: one row per point, each numeric value the mean over its succeeded "
                          "children (seeds) beside <name>_se, its standard error.")


def _placed(study: StudyView, child: Experiment) -> tuple[int, int, dict[str, Any], int]:
    """A child's (index, point, values, seed) in this study: from its row; a compare study's member
    at its position in the request, its point ``{"experiment": id, "name": its name or id}``."""
    if study.kind == COMPARE:
        position = (study.members or []).index(child.id)
        return position, position, member_values(child.id, child.name), member_seed(child.spec)
    return (child.study_index or 0, child.study_point or 0, child.study_values or {},
            child.study_seed if child.study_seed is not None else int(child.spec.get("seed", 0)))


def _records(study: StudyView, children: list[Experiment]) -> list[ChildRecord]:
    records = []
    for c in children:
        index, point, values, seed = _placed(study, c)
        records.append(ChildRecord(index=index, point=point, values=values, seed=seed, status=c.status, spec=c.spec,
                                   summary=c.summary, theory=c.theory, experiment_id=c.id, warnings=c.warnings))
    return records


def _rows(db: str, study: StudyView, group: Group | None) -> list[dict[str, Any]]:
    rows = study_table(_records(study, studies.children(db, study.id)))
    if group == Group.point:
        rows = group_by_point(rows, study.axes)
    return json_safe(rows)


_TABLE_DOC = ("One row per child: index, point, seed, experiment_id, status, warnings (its spec's warnings' "
              "messages joined by ' | ', empty when none), the axis values (named by their "
              "paths), the derived values (intrinsic_lr, lr_over_wd, ...), every summary value and every scalar "
              "theory value; with group=point one row per point, means over seeds and <name>_se.")


def _table_responses(media_type: str | None) -> Responses:
    """The table's responses; an export's 200 in its media type, its errors JSON (api.main._document_errors)."""
    out: Responses = {**STUDY_NOT_FOUND, **NOT_MODIFIED}
    if media_type is not None:
        out = {200: {"description": _TABLE_DOC, "content": {media_type: {"schema": {"type": "string",
                                                                                    "format": "binary"}}}},
               **out}
    return out


@router.get("/{study_id}/table", response_model=StudyTable, operation_id="getStudyTable",
            responses=_table_responses(None))
def get_study_table(study: StudyDep, db: DbDep, request: Request, response: Response,
                    group: Annotated[Group | None, GROUP] = None):
    """The study's comparison table as JSON, {columns, rows}: one row per child (index, point, seed,
    experiment_id, status, axis values by path, derived values, every summary value and every scalar
    theory value), or per point with group=point (means over seeds and <name>_se)."""
    current = etag.tag(study, "table", group)
    if etag.matches(request, current):
        return etag.not_modified(current)
    rows = _rows(db, study, group)
    response.headers["ETag"] = current
    columns = table_columns(rows)
    return StudyTable(columns=columns, rows=rows, derived=[c for c in DERIVED_AXES if c in columns],
                      checks=study_checks(db, study))


class CsvResponse(Response):
    media_type = "text/csv"


class ParquetResponse(Response):
    media_type = exports.PARQUET_MEDIA_TYPE


def _table_export(study: StudyView, db: str, request: Request, group: Group | None, fmt: str,
                  render: Callable[[list[str], list[dict[str, Any]]], bytes],
                  response_class: type[Response]) -> Response:
    current = etag.tag(study, fmt, group)
    if etag.matches(request, current):
        return etag.not_modified(current)
    rows = _rows(db, study, group)
    suffix = "-points" if group else ""
    return response_class(content=render(table_columns(rows), rows), headers={
        "ETag": current, "Content-Disposition": f'attachment; filename="study-{study.id}{suffix}.{fmt}"'})


@router.get("/{study_id}/table.csv", response_class=CsvResponse, operation_id="exportStudyTableCsv",
            responses=_table_responses("text/csv"))
def export_study_table_csv(study: StudyDep, db: DbDep, request: Request,
                           group: Annotated[Group | None, GROUP] = None):
    """The study's table as CSV (floats written to read back exactly; null is an empty cell)."""
    return _table_export(study, db, request, group, "csv", exports.rows_to_csv, CsvResponse)


@router.get("/{study_id}/table.parquet", response_class=ParquetResponse, operation_id="exportStudyTableParquet",
            responses=_table_responses(exports.PARQUET_MEDIA_TYPE))
def export_study_table_parquet(study: StudyDep, db: DbDep, request: Request,
                               group: Annotated[Group | None, GROUP] = None):
    """The study's table as a Parquet file."""
    return _table_export(study, db, request, group, "parquet", exports.rows_to_parquet, ParquetResponse)


# ----------------------------------------------------------------------------- plots




MEDIA_TYPES = {"png": "image/png", "svg": "image/svg+xml"}
PLOT_RESPONSES: Responses = {
    200: {"content": {"image/png": {}, "image/svg+xml": {}}, "description": "The plot."},
    **STUDY_NOT_FOUND,
    422: {"description": "A metric or axis that does not apply to this study (a validation error whose msg lists "
                         "those that do), or a bad parameter.",
          "model": ValidationErrorOut}}
METRIC = Query(max_length=200, description="A metric the study's children record (the detail of a 422 lists them).")


def _not_applicable(what: str, value: str, choices: list[str], why: str = "",
                    none: str = "no child has succeeded yet") -> HTTPException:
    """A 422 shaped like a validation error (as /results answers an unknown field): loc, msg, type; ``none``
    says why there are no choices."""
    listed = ", ".join(choices) if choices else f"none ({none})"
    return HTTPException(status_code=422, detail=[{
        "loc": ["query", what], "type": "value_error",
        "msg": f"{what} {value!r} does not apply to this study{why}; available: {listed}"}])


STARTED = ("running", "succeeded", "failed", "cancelled")   # a child with (some) series
NONE_STARTED = "no child has started yet"


def _series_metrics(children: list[Experiment]) -> list[str]:
    """The measured series names the started children's kinds record (neither theory nor distributions:
    a histogram is not a line over time), first seen first: what an overlay draws."""
    names: dict[str, None] = {}
    for child in children:
        if child.status in STARTED:
            names.update(dict.fromkeys(series_names(child.spec)))
    return list(names)


def _metrics(children: list[Experiment]) -> list[str]:
    """The declared metric names the succeeded children summarize (theory names excluded): over every
    kind and model among them (a compare study may mix them), first seen first."""
    done = [c for c in children if c.status == "succeeded"]
    if not done:
        return []
    theory = {name for c in done for name in (c.theory or {})}
    summary = {name for c in done for name in (c.summary or {})}
    first: dict[str, Experiment] = {}
    for c in done:
        first.setdefault(plot_key(c.kind, c.spec), c)
    declared: dict[str, None] = {}
    for child in first.values():
        declared.update(dict.fromkeys(output_names(child.spec)))
    return [n for n in declared if n != "step" and n in summary and n not in theory]


def _axes(study: StudyView, rows: list[dict[str, Any]]) -> list[str]:
    """The axes and derived values present in the grouped rows."""
    names = [*study.axes, *DERIVED_AXES]
    return [n for n in names if any(_number(row.get(n)) for row in rows)]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _renderers():
    from smdrender import study_plots  # matplotlib loads with the first plot, not with the app

    return study_plots


def _labels(study: StudyView, children: list[Experiment]) -> dict[str, str]:
    """Each child's legend label: its axis values and seed; a compare study's member, its name (with
    the start of its id where two members share a name)."""
    if study.kind != COMPARE:
        return {c.id: labels.point_label(c.study_values or {}, study.axes, c.study_seed) for c in children}
    names = {c.id: c.name or c.id for c in children}
    repeated = {name for name, n in Counter(names.values()).items() if n > 1}
    return {i: f"{name} ({i[:8]})" if name in repeated else name for i, name in names.items()}


def _image(content: bytes, fmt: PlotFormat) -> Response:
    return Response(content=content, media_type=MEDIA_TYPES[fmt.value])


@router.get("/{study_id}/plots/overlay.{fmt}", response_class=Response, operation_id="getStudyOverlay",
            responses=PLOT_RESPONSES)
def get_overlay(study: StudyDep, db: DbDep, fmt: PlotFormat, metric: Annotated[str, METRIC],
                x: Annotated[str, Query(description=f"The time axis: {', '.join(OVERLAY_X)}.")] = "step"):
    """A metric of every started child on one plot (a running, failed or cancelled one labelled so, with the
    points it has), against step, lr_time (Σ η), tau (seed 002's τ(t)) or intrinsic_time (t·ηλ); theory
    dashed."""
    children = studies.children(db, study.id)
    metrics = _series_metrics(children)
    if metric not in metrics:
        raise _not_applicable("metric", metric, metrics, none=NONE_STARTED)
    if x not in OVERLAY_X:
        raise _not_applicable("x", x, list(OVERLAY_X))
    labels = _labels(study, children)
    lines = []
    for child in children:
        if child.status not in STARTED:
            continue
        line = overlay_line(study, child, series.read_series(db, child.id), metric, x)
        if line is not None:   # None: no points yet, or a compare study's member of another kind or model
            label = labels[child.id] + ("" if child.status == "succeeded" else f" ({child.status})")
            lines.append({"label": label, "x": line.x, "y": line.y, "theory": line.theory})
    return _image(_renderers().overlay(lines, metric, x, fmt.value), fmt)


@dataclass(frozen=True)
class Line:
    """One child's line of an overlay: x on the time axis, the metric and its theory (NaN where none), at
    most MAX_LINE_POINTS of its records; ``theory_name`` None when the metric has no theory."""

    x: list[float]
    y: list[float]
    theory: list[float] | None
    theory_name: str | None


def overlay_line(study: StudyView, child: Experiment, stored: dict[str, list], metric: str, x: str) -> Line | None:
    """The child's line of ``metric`` from its stored series (None when it records none); a 422 naming x
    when the child's spec has no such time axis. Shared by the overlay PNG and its JSON."""
    steps = stored.get("step", [])
    if metric not in stored or not steps:
        return None
    theory_name = theory_of(child.kind, child.spec, metric)
    keep = downsample_indices(len(steps), MAX_LINE_POINTS) if len(steps) > MAX_LINE_POINTS else range(len(steps))
    full_theory = child.theory or {}
    try:
        xs = time_axis(child.spec, steps, x, full_theory)
    except ValueError as exc:
        raise _not_applicable("x", x, list(OVERLAY_X), f" (child {_placed(study, child)[0]}: {exc})") from None
    ys = stored.get(metric, [])
    given = full_theory.get(theory_name) if theory_name else None
    theory = given if isinstance(given, list) else [given] * len(steps) if _number(given) else None
    return Line(x=[float(xs[i]) for i in keep], y=[_float(ys[i]) if i < len(ys) else math.nan for i in keep],
                theory=None if theory is None else [_float(theory[i]) if i < len(theory) else math.nan for i in keep],
                theory_name=theory_name)


def _float(value: Any) -> float:
    return float(value) if _number(value) else math.nan


def _point_rows(db: str, study: StudyView) -> tuple[list[Experiment], list[dict[str, Any]]]:
    children = studies.children(db, study.id)
    return children, group_by_point(study_table(_records(study, children)), study.axes)


def _checked(study: StudyView, children: list[Experiment], rows: list[dict[str, Any]], metric: str,
             **axes: str) -> str | None:
    """422 unless the metric and axes apply; the metric's theory name when the rows hold it."""
    metrics = _metrics(children)
    if metric not in metrics:
        raise _not_applicable("metric", metric, metrics)
    available = _axes(study, rows)
    for name, value in axes.items():
        if value not in available:
            raise _not_applicable(name, value, available)
    done = next(c for c in children if c.status == "succeeded")
    theory = theory_of(done.kind, done.spec, metric)
    return theory if theory is not None and any(_number(row.get(theory)) for row in rows) else None


@router.get("/{study_id}/plots/heatmap.{fmt}", response_class=Response, operation_id="getStudyHeatmap",
            responses=PLOT_RESPONSES)
def get_heatmap(study: StudyDep, db: DbDep, fmt: PlotFormat, metric: Annotated[str, METRIC],
                x: Annotated[str, Query(max_length=200, description="An axis or derived value.")],
                y: Annotated[str, Query(max_length=200, description="Another axis or derived value.")]):
    """The tail metric over two axes (means over seeds), the theory beside it on the same colour
    scale, iso-ηλ diagonals drawn."""
    children, rows = _point_rows(db, study)
    theory = _checked(study, children, rows, metric, x=x, y=y)
    if x == y:   # one axis twice: each cell would average over the other axes, a misleading diagonal
        raise query_error("y", f"expected another axis than x, got {y!r} for both")
    return _image(_renderers().heatmap(json_safe(rows), x, y, metric, theory, fmt.value, study_axes=study.axes), fmt)


@router.get("/{study_id}/plots/scatter.{fmt}", response_class=Response, operation_id="getStudyScatter",
            responses=PLOT_RESPONSES)
def get_scatter(study: StudyDep, db: DbDep, fmt: PlotFormat, metric: Annotated[str, METRIC],
                x: Annotated[str, Query(max_length=200, description="An axis or derived value.")]):
    """The tail metric against an axis or derived value, error bars over seeds, the theory curve
    overlaid."""
    children, rows = _point_rows(db, study)
    theory = _checked(study, children, rows, metric, x=x)
    curves = [(c.label, c.xs, c.ys) for c in scatter_curves(study, children, rows, metric, x)]
    return _image(_renderers().scatter(json_safe(rows), x, metric, theory, curves, fmt.value), fmt)


@dataclass(frozen=True)
class ScatterCurve:
    """A theory curve of a scatter along x: ``ys`` at ``xs``, from the spec of a succeeded child; the ``points``
    whose theory lies on it (every point whose values of the axes it holds fixed are among those it serves),
    the ``values`` those points share, and its legend ``label`` (None: one curve serves every point)."""

    xs: list[float]
    ys: list[float | None]
    points: list[int]
    values: dict[str, Any]
    label: str | None


def scatter_curves(study: StudyView, children: list[Experiment], rows: list[dict[str, Any]], metric: str,
                   x: str) -> list[ScatterCurve]:
    """The theory of ``metric`` along x over the span of the rows' x values: one candidate per combination of
    the values of the axes a curve holds fixed (:func:`smdengine.curve_axes`; a compare study: per member),
    from its first succeeded child, each distinct curve once (:func:`smdengine.theory_curves`, which says when
    it draws none). The scatter's PNG and its JSON."""
    xs = [float(row[x]) for row in rows if _number(row.get(x))]
    done = [c for c in children if c.status == "succeeded"]
    if not xs or not done or theory_of(done[0].kind, done[0].spec, metric) is None:
        return []
    compare = study.kind == COMPARE
    fixed = ["experiment"] if compare else curve_axes(study.axes, x)
    members = {c.id: _placed(study, c) for c in children}
    names = _labels(study, children) if compare else {}

    def combination(child: Experiment) -> dict[str, Any]:
        values = members[child.id][2]
        return {a: values.get(a) for a in fixed}

    every: dict[str, dict[str, Any]] = {}
    points: dict[str, set[int]] = {}
    member_names: dict[str, str] = {}
    for child in children:
        key = repr(combination(child))
        every.setdefault(key, combination(child))
        points.setdefault(key, set()).add(members[child.id][1])
        member_names.setdefault(key, names.get(child.id, ""))
    representatives: dict[str, Mapping[str, Any]] = {}
    for child in done:
        representatives.setdefault(repr(combination(child)), child.spec)
    grid = curve_grid(min(xs), max(xs))
    curves = []
    for keys, curve_xs, ys in theory_curves(list(representatives.items()), x, metric, grid):
        served = [every[k] for k in keys]
        if compare:   # a member is named by its name, not its id
            label = None if len(keys) == len(every) else " / ".join(member_names[k] for k in keys)
        else:
            label = labels.curve_label(served, fixed, list(every.values()))
        curves.append(ScatterCurve(xs=curve_xs, ys=ys, points=sorted(set().union(*(points[k] for k in keys))),
                                   values={} if compare else labels.shared_values(served, fixed), label=label))
    return curves


@router.get("/{study_id}/plots/figure.{fmt}", response_class=Response, operation_id="getStudyFigure",
            responses={200: {"content": {"image/png": {}, "image/svg+xml": {}},
                             "description": "The preset's figure: its panels, the verdicts of its checks under "
                                            "them."},
                       **UNAUTHORIZED,
                       404: {"model": ErrorOut, "description": "No study with that id that you may see, or a "
                                                               "study not made from a preset."}})
def get_figure(study: StudyDep, db: DbDep, fmt: PlotFormat,
               checks: Annotated[bool, Query(description="Print the checks' verdicts under the panels (false: the "
                                                         "panels alone, for a page that tables the checks).")] = True):
    """A preset study's figure, laid out like the seed's: each panel a metric of its runs against
    step, ηt, τ or t·ηλ with the theory dashed, and under the panels one line per check (claim,
    predicted, measured ± tolerance, verdict; pending while a child is active)."""
    preset = presets.preset_or_none(study.preset) if study.preset else None
    if preset is None:
        raise HTTPException(status_code=404, detail=(
            f"study {study.id} was not made from a preset, so it has no figure: draw its overlay, heatmap or "
            f"scatter (/v1/studies/{study.id}/plots/...)" if study.preset is None else
            f"study {study.id} was made from preset {study.preset!r}, which this service no longer has"))
    verdicts = study_checks(db, study)
    wanted = None if any(p.points is None for p in preset.panels) else {i for p in preset.panels for i in p.points}
    children = [presets.figure_child(c.study_index or 0, c.study_point or 0,
                                     c.study_seed if c.study_seed is not None else int(c.spec.get("seed", 0)),
                                     c.study_values or {}, result_document(db, c))
                for c in studies.children(db, study.id)
                if c.status == "succeeded" and (wanted is None or c.study_point in wanted)]
    return _image(presets.render_figure(preset, children, verdicts if checks else None, fmt.value, study.preset_size), fmt)
