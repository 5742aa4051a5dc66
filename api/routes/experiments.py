"""The experiments resource: submit, list, read, results, cancel."""
from __future__ import annotations

import logging
from typing import Annotated, Optional

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi.exceptions import RequestValidationError
from sqlalchemy import func, select

from api.deps import ExperimentDep, SessionDep, SettingsDep
from api.results import result_document
from api.schemas import AttemptOut, ErrorOut, ExperimentOut, ExperimentPage, ResultDocument, Status
from smdengine import ExperimentSpec
from store import jobs
from store.models import Experiment
from worker.queue import queue_for, ring

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/experiments", tags=["experiments"])
NOT_FOUND = {404: {"model": ErrorOut, "description": "No experiment with that id."}}


@router.post("", status_code=202, response_model=ExperimentOut,
             responses={422: {"description": "Invalid spec: each error names the field and the reason."}})
def submit_experiment(spec: ExperimentSpec, session: SessionDep, settings: SettingsDep, response: Response):
    """Validate a spec, store it, and queue it for a worker (cuda jobs on the gpu queue)."""
    if spec.work > settings.max_work:
        raise RequestValidationError([{
            "loc": ("body", "params"), "type": "value_error", "input": spec.params.model_dump(),
            "msg": f"work (elementary updates, trials·steps·dim; × 1/dt and × samples where they apply): "
                   f"expected at most {settings.max_work}, got {spec.work}"}])
    experiment = jobs.create(session, kind=spec.kind, name=spec.name, spec=spec.model_dump(mode="json"),
                             total_steps=spec.params.steps, queue=queue_for(spec.device))
    session.commit()  # the row exists before any worker can see the message
    try:
        ring(settings, experiment.queue)
    except Exception as exc:  # the job is safe in the database: the sweeper rings once the broker is back
        log.warning("could not reach the broker for %s (%s); the sweeper will queue it", experiment.id, exc)
    response.headers["Location"] = f"/v1/experiments/{experiment.id}"
    return experiment


@router.get("", response_model=ExperimentPage)
def list_experiments(session: SessionDep,
                     status: Annotated[Optional[Status], Query(description="Only jobs in this state.")] = None,
                     kind: Annotated[Optional[str], Query(max_length=32, description="Only this kind.")] = None,
                     limit: Annotated[int, Query(ge=1, le=500)] = 50,
                     offset: Annotated[int, Query(ge=0)] = 0):
    """List experiments, newest first."""
    query = select(Experiment)
    if status:
        query = query.where(Experiment.status == status)
    if kind:
        query = query.where(Experiment.kind == kind)
    total = session.scalar(select(func.count()).select_from(query.subquery()))
    items = session.scalars(query.order_by(Experiment.created_at.desc(), Experiment.id.desc())
                            .limit(limit).offset(offset)).all()
    session.commit()  # release the connection (api.deps._session)
    return ExperimentPage(items=items, total=total, limit=limit, offset=offset)


@router.get("/{experiment_id}", response_model=ExperimentOut, responses=NOT_FOUND)
def get_experiment(experiment: ExperimentDep):
    """Status, progress, timestamps and error of one experiment."""
    return experiment


@router.get("/{experiment_id}/attempts", response_model=list[AttemptOut], responses=NOT_FOUND)
def list_attempts(experiment: ExperimentDep, session: SessionDep):
    """Every start of the experiment by a worker, and how each ended."""
    attempts = jobs.attempts(session, experiment.id)
    session.commit()  # release the connection (api.deps._session)
    return attempts


@router.get("/{experiment_id}/results", response_model=ResultDocument, responses=NOT_FOUND)
def get_results(experiment: ExperimentDep, session: SessionDep,
                fields: Annotated[Optional[str], Query(
                    description="Comma-separated series/theory names to return (step is always included).",
                    max_length=2000)] = None,
                max_points: Annotated[Optional[int], Query(
                    ge=2, le=1_000_000, description="Downsample to at most this many points, keeping first and last.")] = None):
    """The result document: series, theory and summary (partial while running)."""
    selected = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
    doc = result_document(session, experiment, selected, max_points)
    session.commit()  # release the connection (api.deps._session)
    return doc


@router.post("/{experiment_id}/cancel", status_code=202, response_model=ExperimentOut,
             responses={**NOT_FOUND, 409: {"model": ErrorOut, "description": "The experiment already ended."}})
def cancel_experiment(experiment: ExperimentDep, session: SessionDep):
    """Cancel a queued or running experiment (a running one stops within seconds, keeping its partial results)."""
    if experiment.status in ("succeeded", "failed", "cancelled"):
        raise HTTPException(status_code=409, detail=f"experiment {experiment.id} already {experiment.status}")
    jobs.request_cancel(session, experiment.id)
    session.commit()
    session.refresh(experiment)
    session.commit()  # release the connection (api.deps._session)
    return experiment
