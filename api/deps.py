"""Dependency aliases: settings, database session, the experiment named in the path."""
from __future__ import annotations

from typing import Annotated, AsyncIterator

from fastapi import Depends, HTTPException, Path, Request
from sqlalchemy.orm import Session

from store.db import session_factory
from store.models import Experiment
from store.settings import Settings


def _settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(_settings)]


async def _session(settings: SettingsDep) -> AsyncIterator[Session]:
    """A session per request. Sync routes and dependencies each run in their own thread-pool call,
    so each one ends its transaction (``session.commit()``) before it returns: a request must never
    hold a pooled connection while it waits for a thread, or ~50 concurrent requests deadlock the
    pool against the thread pool. Opened and closed here in the event loop (no DB work then)."""
    with session_factory(settings.db_url)() as session:
        yield session


SessionDep = Annotated[Session, Depends(_session)]


def release(session: Session) -> None:
    """End a read-only step's transaction, returning its connection to the pool (probes: never raises)."""
    try:
        session.rollback()
    except Exception:  # the database is down: there is nothing to give back
        pass


def _experiment(session: SessionDep, experiment_id: Annotated[str, Path()]) -> Experiment:
    experiment = session.get(Experiment, experiment_id)
    session.commit()  # release the connection before the route's own thread-pool call
    if experiment is None:
        raise HTTPException(status_code=404, detail=f"experiment {experiment_id} not found")
    return experiment


ExperimentDep = Annotated[Experiment, Depends(_experiment)]
