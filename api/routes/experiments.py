"""The experiments resource: submit, list, read, results, cancel, delete."""
from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from sqlalchemy import and_, func, or_, select, update

from api import etag
from api.deps import CurrentUserDep, ExperimentDep, ManagedExperimentDep, SessionDep, SettingsDep
from api.results import result_document
from api.schemas import (
    SERVICE_FIELDS,
    AttemptOut,
    ErrorOut,
    ExperimentOut,
    ExperimentPage,
    ResultDocument,
    Status,
    Submission,
)
from store import jobs, series
from store.models import PRIORITIES, Experiment, User, as_utc, utcnow
from store.settings import Settings
from worker.queue import queue_for, ring

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/experiments", tags=["experiments"])
UNAUTHORIZED = {401: {"model": ErrorOut, "description": "Missing, invalid or revoked API key "
                                                        "(WWW-Authenticate: Bearer)."}}
NOT_FOUND = {**UNAUTHORIZED, 404: {"model": ErrorOut, "description": "No experiment with that id that you may see."}}
FORBIDDEN = {403: {"model": ErrorOut, "description": "You may read it but not change it (owner or admin only)."}}
SINCE_STEP = Query(ge=-1, le=2**62, description="Only points recorded after this step (incremental polling); "
                                                "theory series are cut the same way.")


def _links(status: str, *operations: str) -> dict:
    """OpenAPI links from a response holding an experiment to operations on it (by its id)."""
    return {"responses": {status: {"links": {
        operation[0].upper() + operation[1:]: {"operationId": operation,
                                               "parameters": {"experiment_id": "$response.body#/id"}}
        for operation in operations}}}}


def _too_many(detail: str, retry_after: int) -> HTTPException:
    return HTTPException(status_code=429, detail=detail, headers={"Retry-After": str(retry_after)})


def _check_quotas(session, user: User, settings: Settings, work: int) -> None:
    """429 naming the limit. Called after the user's row is locked, so two concurrent submissions
    cannot both take the last free slot."""
    max_work = user.max_work or settings.max_work
    if work > max_work:
        raise _too_many(f"quota: work per job is limited to {max_work} for {user.name} "
                        f"(trials·steps·dim; × 1/dt and × samples where they apply), this job needs {work}: "
                        f"make it smaller, or ask an admin to raise the limit (smd users quota)",
                        settings.quota_retry_seconds)
    max_active = user.max_active_jobs or settings.max_active_jobs
    active = jobs.active_count(session, user.id)
    if active >= max_active:
        raise _too_many(f"quota: at most {max_active} queued + running jobs for {user.name}, "
                        f"you have {active}: wait for one to end, or cancel one",
                        _retry_after(session, user, settings))


def _retry_after(session, user: User, settings: Settings) -> int:
    """Seconds until the user's first running job should end (from its pace so far), within
    [1, 3600]; the server's default when none has progressed yet."""
    now = utcnow()
    best = None
    for started, progress in session.execute(select(Experiment.started_at, Experiment.progress).where(
            Experiment.owner_id == user.id, Experiment.status == "running")).all():
        if started is None or not progress:
            continue
        remaining = (now - as_utc(started)).total_seconds() * (1 - progress) / progress
        best = remaining if best is None else min(best, remaining)
    return settings.quota_retry_seconds if best is None else int(min(max(best, 1), 3600))


@router.post("", status_code=202, response_model=ExperimentOut, operation_id="submitExperiment",
             responses={400: {"model": ErrorOut, "description": "The body could not be read (not UTF-8 JSON)."},
                        **UNAUTHORIZED,
                        403: {"model": ErrorOut, "description": "priority high is for admins only."},
                        422: {"description": "Invalid spec: each error names the field and the reason."},
                        429: {"model": ErrorOut, "description": "Over a quota (the detail says which); "
                                                                "Retry-After says when to try again."}},
             openapi_extra=_links("202", "getExperiment", "getResults", "listAttempts", "cancelExperiment"))
def submit_experiment(submission: Submission, session: SessionDep, settings: SettingsDep, user: CurrentUserDep,
                      response: Response):
    """Validate a spec, check your quotas, store it, and queue it (cuda jobs on the gpu queue)."""
    if submission.priority == "high" and not user.is_admin:
        raise HTTPException(status_code=403, detail="priority: 'high' is for admins only; use 'low' or 'normal'")
    # lock the user's row first: quota check and insert are one step (PostgreSQL row lock; SQLite
    # takes its write lock here, before reading, so the transaction never has to upgrade)
    session.execute(update(User).where(User.id == user.id).values(role=User.role))
    _check_quotas(session, user, settings, submission.work)
    spec = submission.model_dump(mode="json", exclude=SERVICE_FIELDS)
    experiment = jobs.create(session, kind=submission.kind, name=submission.name, spec=spec,
                             total_steps=submission.params.steps, queue=queue_for(submission.device),
                             owner_id=user.id, visibility=submission.visibility,
                             priority=PRIORITIES[submission.priority])
    session.commit()  # the row exists before any worker can see the message
    experiment.owner = user  # for the response, without a lazy load after the commit
    try:
        ring(settings, experiment.queue)
    except Exception as exc:  # the job is safe in the database: the sweeper rings once the broker is back
        log.warning("could not reach the broker for %s (%s); the sweeper will queue it", experiment.id, exc)
    response.headers["Location"] = f"/v1/experiments/{experiment.id}"
    return experiment


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_MICROS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
# A keyset position: "<created_at in microseconds since the epoch>.<id>" of the last item of a page. Every
# string of this form is a position in the (created_at, id) order, so every one the pattern admits is valid.
CURSOR_PATTERN = r"^[0-9]{1,18}\.[0-9a-f]{1,32}$"


def _encode_cursor(experiment: Experiment) -> str:
    return f"{(as_utc(experiment.created_at) - _EPOCH) // timedelta(microseconds=1)}.{experiment.id}"


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    micros, _, experiment_id = cursor.partition(".")
    return _EPOCH + timedelta(microseconds=min(int(micros), _MAX_MICROS)), experiment_id


@router.get("", response_model=ExperimentPage, operation_id="listExperiments", responses=UNAUTHORIZED)
def list_experiments(request: Request, response: Response, session: SessionDep, user: CurrentUserDep,
                     status: Annotated[Status | None, Query(description="Only jobs in this state.")] = None,
                     kind: Annotated[str | None, Query(max_length=32, description="Only this kind.")] = None,
                     owner: Annotated[str | None, Query(max_length=64, description="Only this user's.")] = None,
                     limit: Annotated[int, Query(ge=1, le=500)] = 50,
                     cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN, description=(
                         "Where the previous page ended: its next_cursor."))] = None):
    """List the experiments you may see (yours and lab-visible ones; all for admins), newest first."""
    query = select(Experiment)
    if not user.is_admin:
        query = query.where(or_(Experiment.owner_id == user.id, Experiment.visibility == "lab"))
    if status:
        query = query.where(Experiment.status == status)
    if kind:
        query = query.where(Experiment.kind == kind)
    if owner:
        query = query.where(Experiment.owner.has(User.name == owner))
    total = session.scalar(select(func.count()).select_from(query.subquery()))
    if cursor:
        created, last_id = _decode_cursor(cursor)
        query = query.where(or_(Experiment.created_at < created,
                                and_(Experiment.created_at == created, Experiment.id < last_id)))
    items = session.scalars(query.order_by(Experiment.created_at.desc(), Experiment.id.desc())
                            .limit(limit + 1)).unique().all()
    session.commit()  # release the connection (api.deps._session)
    next_cursor = _encode_cursor(items[limit - 1]) if len(items) > limit else None
    if next_cursor:
        response.headers["Link"] = f'<{request.url.include_query_params(cursor=next_cursor)}>; rel="next"'
    return ExperimentPage(items=items[:limit], total=total, limit=limit, next_cursor=next_cursor)


@router.get("/{experiment_id}", response_model=ExperimentOut, operation_id="getExperiment",
            responses={**NOT_FOUND, **etag.NOT_MODIFIED}, openapi_extra=_links("200", "cancelExperiment"))
def get_experiment(experiment: ExperimentDep, request: Request, response: Response):
    """Status, progress, timestamps and error of one experiment (ETag: send If-None-Match to poll)."""
    current = etag.tag(experiment, "status")
    if etag.matches(request, current):
        return etag.not_modified(current)
    response.headers["ETag"] = current
    return experiment


@router.delete("/{experiment_id}", status_code=204, operation_id="deleteExperiment",
               responses={**NOT_FOUND, **FORBIDDEN,
                          409: {"model": ErrorOut, "description": "Still queued or running: cancel it first."}})
def delete_experiment(experiment: ManagedExperimentDep, session: SessionDep):
    """Delete an ended experiment and its results (owner or admin)."""
    if experiment.status not in ("succeeded", "failed", "cancelled"):
        raise HTTPException(status_code=409, detail=f"experiment {experiment.id} is {experiment.status}: "
                                                    f"cancel it first")
    jobs.remove(session, experiment.id)
    session.commit()
    return Response(status_code=204)


@router.get("/{experiment_id}/attempts", response_model=list[AttemptOut], operation_id="listAttempts",
            responses=NOT_FOUND)
def list_attempts(experiment: ExperimentDep, session: SessionDep):
    """Every start of the experiment by a worker, and how each ended."""
    attempts = jobs.attempts(session, experiment.id)
    session.commit()  # release the connection (api.deps._session)
    return attempts


@router.get("/{experiment_id}/results", response_model=ResultDocument, operation_id="getResults",
            responses={**NOT_FOUND, **etag.NOT_MODIFIED})
def get_results(experiment: ExperimentDep, session: SessionDep, request: Request, response: Response,
                fields: Annotated[str | None, Query(
                    description="Comma-separated series/theory names to return (step is always included).",
                    max_length=2000)] = None,
                max_points: Annotated[int | None, Query(
                    ge=2, le=1_000_000, description="Downsample to at most this many points, keeping first and last.")] = None,
                since_step: Annotated[int | None, SINCE_STEP] = None):
    """The result document: series, theory and summary (partial while running). ETag: send
    If-None-Match to poll; since_step for only the new points."""
    current = etag.tag(experiment, "results", series.stored_points(session, experiment.id), fields, max_points,
                       since_step)
    if etag.matches(request, current):
        session.commit()
        return etag.not_modified(current)
    selected = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
    doc = result_document(session, experiment, selected, max_points, since_step)
    session.commit()  # release the connection (api.deps._session)
    response.headers["ETag"] = current
    return doc


@router.post("/{experiment_id}/cancel", status_code=202, response_model=ExperimentOut,
             operation_id="cancelExperiment", openapi_extra=_links("202", "getExperiment", "deleteExperiment"),
             responses={**NOT_FOUND, **FORBIDDEN,
                        409: {"model": ErrorOut, "description": "The experiment already ended."}})
def cancel_experiment(experiment: ManagedExperimentDep, session: SessionDep):
    """Cancel a queued or running experiment (a running one stops within seconds, keeping its partial results)."""
    if experiment.status in ("succeeded", "failed", "cancelled"):
        raise HTTPException(status_code=409, detail=f"experiment {experiment.id} already {experiment.status}")
    jobs.request_cancel(session, experiment.id)
    session.commit()
    session.refresh(experiment)
    session.commit()  # release the connection (api.deps._session)
    return experiment
