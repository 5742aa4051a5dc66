"""Dependency aliases: settings, database session, the experiment named in the path."""
from __future__ import annotations

from typing import Annotated, Iterator

from fastapi import Depends, HTTPException, Path, Request
from sqlalchemy.orm import Session

from store.db import session_factory
from store.models import Experiment
from store.settings import Settings


def _settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(_settings)]


def _session(settings: SettingsDep) -> Iterator[Session]:
    with session_factory(settings.db_url)() as session:
        yield session


SessionDep = Annotated[Session, Depends(_session)]


def _experiment(session: SessionDep, experiment_id: Annotated[str, Path()]) -> Experiment:
    experiment = session.get(Experiment, experiment_id)
    if experiment is None:
        raise HTTPException(status_code=404, detail=f"experiment {experiment_id} not found")
    return experiment


ExperimentDep = Annotated[Experiment, Depends(_experiment)]
