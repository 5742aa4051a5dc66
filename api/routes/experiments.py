"""The experiments resource: submit, list, read, results, cancel, delete."""
from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response, params
from fastapi.dependencies.utils import get_flat_params
from fastapi.routing import APIRoute
from pydantic import ValidationError

import smdengine
from api import cursors, etag, rendered, search
from api.cursors import SortedCursorQuery
from api.deps import CurrentUserDep, DbDep, ExperimentDep, ManagedExperimentDep, SettingsDep
from api.provenance import provenance_of
from api.responses import (
    FORBIDDEN,
    NOT_FOUND,
    NOT_MODIFIED,
    UNAUTHORIZED,
    data_unavailable_message,
    invalid,
    over_quota,
    quota_response,
)
from api.results import result_document
from api.schemas import (
    SERVICE_FIELDS,
    AttemptOut,
    ContinueIn,
    ErrorOut,
    ExperimentOut,
    ExperimentPage,
    ExperimentPatch,
    RerunIn,
    ResultDocument,
    Submission,
)
from smdrender.tables import runs_csv
from store import jobs, series, workers
from store.clock import utc_iso
from store.models import PRIORITIES, TERMINAL, Experiment, Status, User
from store.search import Position
from store.settings import Settings
from worker import presence
from worker.queue import queue_for, ring

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/experiments", tags=["experiments"])
csv_router = APIRouter(tags=["experiments"])   # /v1/experiments.csv: beside the prefix, not under it
SINCE_STEP = Query(ge=-1, le=2**62, description="Only points recorded after this step (incremental polling); "
                                                "theory series are cut the same way.")


def _links(status: str, *operations: str) -> dict:
    """OpenAPI links from a response holding an experiment to operations on it (by its id)."""
    return {"responses": {status: {"links": {
        operation[0].upper() + operation[1:]: {"operationId": operation,
                                               "parameters": {"experiment_id": "$response.body#/id"}}
        for operation in operations}}}}


@router.post("", status_code=202, response_model=ExperimentOut, operation_id="submitExperiment",
             responses={400: {"model": ErrorOut, "description": "The body could not be read (not UTF-8 JSON)."},
                        **UNAUTHORIZED,
                        403: {"model": ErrorOut, "description": "priority high is for admins only."},
                        **invalid("Invalid spec: each error names the field and the reason."),
                        **quota_response("Over a quota (the detail says which); "
                                         "Retry-After says when to try again.")},
             openapi_extra=_links("202", "getExperiment", "getResults", "listAttempts", "cancelExperiment"))
def submit_experiment(submission: Submission, db: DbDep, settings: SettingsDep, user: CurrentUserDep,
                      response: Response):
    """Validate a spec, check your quotas, store it, and queue it (cuda jobs on the gpu queue). A spec whose
    rates leave the regime the theory describes is accepted with ``warnings`` naming the condition; the
    theory lines that do not apply are left out of its results. So is one whose summary's tail would hold fewer
    than two records (``sparse_tail``), and (nrq, sde nrq) one whose tail is predicted off its equilibrium AU
    (``unsettled_tail``)."""
    return _queue(db, settings, user, response, submission, submission.model_dump(mode="json", exclude=SERVICE_FIELDS),
                  visibility=submission.visibility, priority=submission.priority,
                  keep_checkpoint=submission.keep_checkpoint, tags=submission.tags, note=submission.note)


def _queue(db: str, settings: Settings, user: User, response: Response, parsed: Any, spec: dict[str, Any], *,
           visibility: str, priority: str, keep_checkpoint: bool, tags: list[str], note: str | None) -> ExperimentOut:
    """Check the quotas, store the validated spec as a new queued experiment of ``user`` (committed), ring
    its queue, set Location: submit and rerun."""
    if priority == "high" and not user.is_admin:
        raise HTTPException(status_code=403, detail="priority: 'high' is for admins only; use 'low' or 'normal'")
    if (problem := parsed.missing_data(settings.data_dir)) is not None:
        raise HTTPException(status_code=422, detail=[{"loc": ["body", *problem["field"].split(".")],
                                                      "type": "data_unavailable",
                                                      "msg": data_unavailable_message(problem)}])
    max_work = user.max_work or settings.max_work
    if parsed.work > max_work:
        raise over_quota(f"quota: work per job is limited to {max_work:,} for {user.name} "
                         f"({smdengine.WORK_UNITS}), this job needs "
                         f"{parsed.work:,}: make it smaller, or ask an admin to raise the limit (smd users quota)",
                         quota="work", retry_after=None)   # no wait makes the job smaller
    max_active = user.max_active_jobs or settings.max_active_jobs
    try:  # committed when this returns: the row exists before any worker can see the message
        experiment = jobs.submit(db, owner_id=user.id, max_active_jobs=max_active,
                                 default_retry_seconds=settings.quota_retry_seconds, kind=parsed.kind,
                                 name=parsed.name, spec=spec,
                                 total_steps=parsed.params.steps, queue=queue_for(parsed.device),
                                 visibility=visibility, priority=PRIORITIES[priority],
                                 warnings=smdengine.spec_warnings(spec), keep_checkpoint=keep_checkpoint,
                                 tags=tags, note=note)
    except jobs.QuotaExceeded as exc:
        raise over_quota(f"quota: at most {exc.limit} queued + running jobs for {user.name}, "
                         f"you have {exc.active}: wait for one to end, or cancel one", quota="active_jobs",
                         retry_after=exc.retry_after) from None
    try:
        ring(settings, experiment.queue)
    except Exception as exc:  # the job is safe in the database: the sweeper rings once the broker is back
        log.warning("could not reach the broker for %s (%s); the sweeper will queue it", experiment.id, exc)
    response.headers["Location"] = f"/v1/experiments/{experiment.id}"
    return with_queue_processes(db, settings, experiment)


def with_queue_processes(db: str, settings: Settings, experiment: Experiment) -> ExperimentOut:
    """The answer to a submission, with how many worker processes serve its queue now: a cuda job on a service
    without a GPU worker was accepted without a word and stayed queued."""
    out = ExperimentOut.model_validate(experiment)
    out.queue_processes = len(workers.live(db, experiment.queue, presence.live_seconds(settings)))
    return out


@router.post("/{experiment_id}/rerun", status_code=202, response_model=ExperimentOut, operation_id="rerunExperiment",
             responses={400: {"model": ErrorOut, "description": "The body could not be read (not UTF-8 JSON)."},
                        **UNAUTHORIZED, **NOT_FOUND,
                        403: {"model": ErrorOut, "description": "priority high is for admins only."},
                        **invalid("An override names no field of the spec (the nearest valid paths are listed), "
                                  "or makes it invalid: each error names the field."),
                        **quota_response("Over a quota (the detail says which).")},
             openapi_extra=_links("202", "getExperiment", "getResults", "cancelExperiment"))
def rerun_experiment(experiment: ExperimentDep, body: RerunIn, db: DbDep, settings: SettingsDep,
                     user: CurrentUserDep, response: Response):
    """A new experiment of yours from this one's spec (yours, or a lab-visible one), with ``overrides``
    set by dotted path (``{"params.lr": 0.2, "seed": 4}``, list indices allowed), validated and
    quota-checked like a submission."""
    try:
        overridden = smdengine.override_spec(experiment.spec, body.overrides)
    except smdengine.StudyError as exc:
        raise HTTPException(status_code=422, detail=[{**e, "loc": ["body", *e["loc"]]} for e in exc.errors]) from None
    spec = overridden.model_dump(mode="json")
    spec["name"] = body.name if body.name is not None else experiment.name   # the current name: PATCH renames
    parsed = smdengine.parse_spec(spec)
    if (problem := parsed.missing_data(settings.data_dir)) is not None:   # at the override that chose the data, if
        # one did, else at the body: a rerun's body holds no params (the experiment's data went away)
        field = problem["field"]   # the override that set it, or one above it (params.dataset, params)
        path = next((p for p in body.overrides if p == field or field.startswith(f"{p}.")), None)
        raise HTTPException(status_code=422, detail=[{
            "loc": ["body", "overrides", path] if path else ["body"], "type": "data_unavailable",
            "msg": data_unavailable_message(problem if path else {**problem, "field": f"the experiment's {problem['field']}"})}])
    return _queue(db, settings, user, response, parsed, spec, visibility=body.visibility, priority=body.priority,
                  keep_checkpoint=body.keep_checkpoint, tags=body.tags, note=body.note)


FILTERS_DESCRIPTION = (
    "Besides the named parameters: `param.<dotted spec path>[.<op>]=value` (e.g. `param.params.lr=0.1`, "
    "`param.params.steps.ge=1000`, `param.kind=nrq`) and `summary.<name>[.<op>]=value` (e.g. "
    "`summary.au_rms.lt=0.02`), op one of eq (default), ne, lt, le, gt, ge; paths and names are checked against "
    "the kind's (422 naming the parameter). A number matches numbers (eq/ne also text spelled the same), true/false "
    "booleans, other text text; a stored value of another type does not match (ne: it does). A path to a list or "
    "an object is a 422: filter on its entries (`param.params.lr_schedule.0.step`). Any other parameter is a 422 "
    "too (`params.lr=0.1` would otherwise list everything, as if filtered), and so is a term without `=` "
    "(`?param.params.lr`, its value left off).")


KindName = Literal[smdengine.KINDS]   # type: ignore[valid-type]  # the registry's kinds: an enum in the schema
LIST_422 = ("An unknown status or kind, a filter that names no field or summary value of the kind, a parameter "
            "the list does not take, or a query term without '='.")


class ListQuery:
    """The list filters shared by GET /v1/experiments and its CSV."""

    def __init__(self, request: Request,
                 status: Annotated[Status | None, Query(description="Only jobs in this state.")] = None,
                 kind: Annotated[KindName | None, Query(description="Only this kind.")] = None,
                 owner: Annotated[str | None, Query(max_length=64, description="Only this user's.")] = None,
                 name: Annotated[str | None, Query(max_length=200, description=(
                     "Only those whose name contains this text (ignoring case)."))] = None,
                 tag: Annotated[list[str] | None, Query(max_length=20, description=(
                     "Only those with this tag; repeat for all of several."))] = None,
                 order_by: Annotated[str | None, Query(max_length=200, description=(
                     "summary.<name> (ascending) or -summary.<name> (descending), missing values last; "
                     "otherwise newest first."))] = None):
        self.status, self.kind, self.owner, self.name, self.tags = status, kind, owner, name, tag or []
        search.refuse_bare_terms(request.url.query)
        route = request.scope.get("route")
        if isinstance(route, APIRoute):
            search.refuse_unknown(request.query_params.keys(),
                                  {param.alias for param in get_flat_params(route.dependant)
                                   if isinstance(param.field_info, params.Query)})
        self.predicates = search.predicates(request.query_params.multi_items(), kind)
        self.order = search.order(order_by, kind)

    def page(self, db: str, user: User, *, after: Position | None = None, limit: int) -> jobs.Page:
        return jobs.page(db, viewer_id=user.id, everyone=user.is_admin, status=self.status, kind=self.kind,
                         owner_name=self.owner, name_contains=self.name, tags=self.tags, predicates=self.predicates,
                         order_by=self.order, after=after, limit=limit)


ListQueryDep = Annotated[ListQuery, Depends()]


@router.get("", response_model=ExperimentPage, operation_id="listExperiments",
            responses={**UNAUTHORIZED, **invalid(LIST_422)},
            description="List the experiments you may see (yours and lab-visible ones; all for admins), newest "
                        "first (or by a summary value). " + FILTERS_DESCRIPTION)
def list_experiments(request: Request, response: Response, db: DbDep, user: CurrentUserDep, query: ListQueryDep,
                     include: Annotated[Literal["summary"] | None, Query(
                         description="summary: each item carries its summary.")] = None,
                     limit: Annotated[int, Query(ge=1, le=500, description="Items per page (next_cursor pages on).")] = 50,
                     cursor: SortedCursorQuery = None):
    sorted_list = query.order is not None
    found = query.page(db, user, after=cursors.decode_position(cursor, sorted_list) if cursor else None, limit=limit)
    items, total = found.items, found.total
    next_cursor = cursors.encode_position(found.next, sorted_list) if found.next else None
    if next_cursor:
        response.headers["Link"] = f'<{request.url.include_query_params(cursor=next_cursor)}>; rel="next"'
    out = [ExperimentOut.model_validate(e) for e in items]
    if include != "summary":
        for item in out:
            item.summary = None
    return ExperimentPage(items=out, total=total, limit=limit, next_cursor=next_cursor)


CSV_LIMIT = 10_000


@csv_router.get("/v1/experiments.csv", response_class=Response, operation_id="exportExperimentsCsv",
            responses={200: {"content": {"text/csv": {}}, "description": "One row per experiment."}, **UNAUTHORIZED,
                       **invalid(LIST_422)},
            description="The runs table of the experiments the same filters select (at most 10 000, in the same "
                        "order): id, name, tags, kind, status, created_at, every spec field flattened (params.lr, "
                        "…) and every summary value (summary.au_rms, …). " + FILTERS_DESCRIPTION)
def export_experiments_csv(db: DbDep, user: CurrentUserDep, query: ListQueryDep):
    items = query.page(db, user, limit=CSV_LIMIT).items
    return Response(runs_csv(items, utc_iso), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": 'attachment; filename="experiments.csv"'})


@router.patch("/{experiment_id}", response_model=ExperimentOut, operation_id="patchExperiment",
              responses={400: {"model": ErrorOut, "description": "The body could not be read (not UTF-8 JSON)."},
                         **UNAUTHORIZED, **NOT_FOUND, **FORBIDDEN,
                         **invalid("A field is invalid (named with the reason).")})
def patch_experiment(experiment: ManagedExperimentDep, body: ExperimentPatch, db: DbDep):
    """Change the name, the tags (the list replaces the old one) or the note; owner or admin. Only the
    fields given change; null clears a field (``"tags": null`` as ``[]``). A body that changes nothing leaves
    the ETag as it was."""
    given = body.model_dump(exclude_unset=True)
    return jobs.annotate(db, experiment.id, **{k: given[k] for k in ("name", "note") if k in given},
                         tags=(given["tags"] or []) if "tags" in given else None)


@router.get("/{experiment_id}", response_model=ExperimentOut, operation_id="getExperiment",
            responses={**NOT_FOUND, **NOT_MODIFIED}, openapi_extra=_links("200", "cancelExperiment"))
async def get_experiment(experiment: ExperimentDep, request: Request):
    """Status, progress, timestamps and error of one experiment (ETag: send If-None-Match to poll)."""
    current = etag.tag(experiment, "status")
    if etag.matches(request, current):
        return etag.not_modified(current)
    return rendered.json_response(current, rendered.body(ExperimentOut, current, lambda: experiment))


@router.delete("/{experiment_id}", status_code=204, operation_id="deleteExperiment",
               responses={**NOT_FOUND, **FORBIDDEN,
                          409: {"model": ErrorOut, "description": "Still queued or running (cancel it first), or a "
                                                                "child of a study (delete the study)."}})
def delete_experiment(experiment: ManagedExperimentDep, db: DbDep):
    """Delete an ended experiment and its results (owner or admin)."""
    if experiment.status not in TERMINAL:
        raise HTTPException(status_code=409, detail=f"experiment {experiment.id} is {experiment.status}: "
                                                    f"cancel it first")
    if experiment.study_id is not None:   # a study's table and status are over all of its children
        raise HTTPException(status_code=409, detail=f"experiment {experiment.id} is a child of study "
                                                    f"{experiment.study_id}: delete the study instead")
    jobs.remove(db, experiment.id)
    return Response(status_code=204)


@router.get("/{experiment_id}/attempts", response_model=list[AttemptOut], operation_id="listAttempts",
            responses=NOT_FOUND)
def list_attempts(experiment: ExperimentDep, db: DbDep):
    """Every start of the experiment by a worker, and how each ended."""
    return jobs.attempts(db, experiment.id)


@router.get("/{experiment_id}/results", response_model=ResultDocument, operation_id="getResults",
            responses={**NOT_FOUND, **NOT_MODIFIED})
async def get_results(experiment: ExperimentDep, db: DbDep, request: Request,
                      fields: Annotated[str | None, Query(
                          description="Comma-separated series/theory names to return (step is always included).",
                          max_length=2000)] = None,
                      max_points: Annotated[int | None, Query(
                          ge=2, le=1_000_000, description="Downsample to at most this many points, keeping first and last.")] = None,
                      downsample: Annotated[Literal["even", "minmax"], Query(
                          description="With max_points: even (evenly spread points) or minmax (each bucket's minimum and "
                                      "maximum of every series, aligned on one set of steps: a transient is never "
                                      "stepped over).")] = "even",
                      since_step: Annotated[int | None, SINCE_STEP] = None,
                      until_step: Annotated[int | None, Query(
                          ge=0, le=2**62, description="Only points recorded at or before this step (with since_step: "
                                                      "a window, e.g. a zoomed chart's range, downsampled on its own).")] = None):
    """The result document: series, theory and summary (partial while running). ETag: send
    If-None-Match to poll; since_step for only the new points."""
    selected = [f.strip() for f in fields.split(",") if f.strip()] if fields else None

    def build() -> dict[str, Any]:
        doc = result_document(db, experiment, selected, max_points, since_step, until_step, downsample)
        doc["provenance"] = provenance_of(jobs.attempts_at(db, experiment.id, experiment.revision))
        return doc

    def respond() -> Response:   # in a worker thread: reads the database
        current = etag.tag(experiment, "results", series.stored_points(db, experiment.id), fields, max_points,
                           downsample, since_step, until_step)
        if etag.matches(request, current):
            return etag.not_modified(current)
        return rendered.json_response(current, rendered.body(ResultDocument, current, build))

    return await anyio.to_thread.run_sync(respond)


@router.post("/{experiment_id}/cancel", status_code=202, response_model=ExperimentOut,
             operation_id="cancelExperiment", openapi_extra=_links("202", "getExperiment", "deleteExperiment"),
             responses={**NOT_FOUND, **FORBIDDEN,
                        409: {"model": ErrorOut, "description": "The experiment already ended."}})
def cancel_experiment(experiment: ManagedExperimentDep, db: DbDep):
    """Cancel a queued or running experiment (a running one stops within seconds, keeping its partial results)."""
    if experiment.status in TERMINAL:
        raise HTTPException(status_code=409, detail=f"experiment {experiment.id} already {experiment.status}")
    current = jobs.request_cancel(db, experiment.id)
    if current is None:  # deleted meanwhile
        raise HTTPException(status_code=404, detail=f"experiment {experiment.id} not found")
    return current


@router.post("/{experiment_id}/continue", status_code=202, response_model=ExperimentOut,
             operation_id="continueExperiment", openapi_extra=_links("202", "getExperiment", "getResults"),
             responses={400: {"model": ErrorOut, "description": "The body could not be read (not UTF-8 JSON)."},
                        **UNAUTHORIZED, **NOT_FOUND, **FORBIDDEN,
                        409: {"model": ErrorOut, "description": "Not continuable: it did not succeed, has no kept "
                                                                "checkpoint, or its kind's runs depend on their length."},
                        **invalid("steps missing or out of range, or the longer spec is invalid."),
                        **quota_response("Over a quota (the detail says which).")})
def continue_experiment(experiment: ManagedExperimentDep, body: ContinueIn, db: DbDep, settings: SettingsDep,
                        user: CurrentUserDep):
    """Extend a succeeded experiment submitted with ``keep_checkpoint: true`` by ``steps`` updates: it is
    queued again with ``params.steps`` raised, resumes from its final checkpoint, and ends with the
    results of one run of the total length (series, theory, summary). Its series so far stay readable."""
    if not smdengine.continuable(experiment.spec):
        raise HTTPException(status_code=409, detail=f"kind: {experiment.kind} runs depend on their length "
                                                    "(schedules or statistics set by it) and cannot be continued")
    steps = experiment.spec["params"]["steps"]
    longer = {**experiment.spec, "params": {**experiment.spec["params"], "steps": steps + body.steps}}
    try:
        parsed = smdengine.parse_spec(longer)
    except ValidationError as exc:   # the sum, not the steps asked for, is what the spec's limits refuse (loc[0]: the kind's tag)
        raise HTTPException(status_code=422, detail=[{
            "loc": ["body", "steps"], "type": e["type"],
            "msg": f"steps: the continued run would have params.steps = {steps} + {body.steps} = {steps + body.steps}, "
                   f"and its spec is refused at {'.'.join(map(str, e['loc'][1:] or e['loc']))}: "
                   f"{smdengine.error_message(e)}"}
            for e in exc.errors()]) from None
    owner = experiment.owner
    max_work = (owner.max_work if owner is not None else None) or settings.max_work
    if parsed.work > max_work:
        raise over_quota(f"quota: work per job is limited to {max_work:,}, the continued run needs {parsed.work:,}",
                         quota="work", retry_after=None)   # no wait makes the job smaller
    max_active = (owner.max_active_jobs if owner is not None else None) or settings.max_active_jobs
    try:
        continued = jobs.continue_run(db, experiment.id, owner_id=experiment.owner_id or user.id, spec=longer,
                                      total_steps=parsed.params.steps, max_active_jobs=max_active,
                                      default_retry_seconds=settings.quota_retry_seconds,
                                      warnings=smdengine.spec_warnings(longer))
    except jobs.NotContinuable as exc:
        raise HTTPException(status_code=409, detail=f"continue: {exc}") from None
    except jobs.QuotaExceeded as exc:
        raise over_quota(f"quota: at most {exc.limit} queued + running jobs, you have {exc.active}: wait for one "
                         "to end, or cancel one", quota="active_jobs", retry_after=exc.retry_after) from None
    try:
        ring(settings, continued.queue)
    except Exception as exc:  # safe in the database: the sweeper rings once the broker is back
        log.warning("could not reach the broker for %s (%s); the sweeper will queue it", continued.id, exc)
    return with_queue_processes(db, settings, continued)
