"""Dependency aliases: settings, the database handle, the current user, the experiment or study named in the path.

No route holds a session: ``DbDep`` is the database URL, which routes pass to store functions; each
store function runs its own short transaction (store.db.run), so no request keeps a pooled
connection while it waits for a thread. The current user and the experiment are detached rows
(plain objects: reading them never touches the database).
"""
from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from store import jobs, studies, users
from store.models import Experiment, User
from store.settings import Settings
from store.studies import StudyView


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(_settings)]


async def _db(settings: SettingsDep) -> str:
    return settings.db_url


DbDep = Annotated[str, Depends(_db)]

_bearer = HTTPBearer(auto_error=False, description="An API key from `smd keys create`: `Authorization: Bearer smd_...`.")
_QUERY_KEY_NAMES = {"key", "api_key", "apikey", "api-key", "token", "access_token", "auth", "authorization"}


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"})


CredentialsDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _user(request: Request, db: str, settings: Settings, credentials: HTTPAuthorizationCredentials | None) -> User:
    """The key's owner (``auth=off``: the admin user ``local``). A key in the query string is
    refused even when it is valid: URLs end up in logs and browser histories. Reads the database:
    call it in a worker thread; once per request (request.state.user)."""
    known: User | None = getattr(request.state, "user", None)
    if known is not None:
        return known
    if any(name.lower() in _QUERY_KEY_NAMES or value.startswith(users.KEY_PREFIX)
           for name, value in request.query_params.multi_items()):
        raise unauthorized("API keys are accepted only in the Authorization header "
                           "(Authorization: Bearer <key>), never in the query string")
    if settings.auth == "off":
        user: User | None = users.local_user(db)
    elif credentials is None:
        raise unauthorized("missing API key: send Authorization: Bearer <key>")
    else:
        user = users.authenticate(db, credentials.credentials)
    if user is None:
        raise unauthorized("invalid or revoked API key")
    request.state.user = user
    return user


async def _current_user(request: Request, db: DbDep, settings: SettingsDep, credentials: CredentialsDep) -> User:
    """The request's user (:func:`_user`), read in a worker thread unless a dependency read it already."""
    known: User | None = getattr(request.state, "user", None)
    if known is not None:
        return known
    return await anyio.to_thread.run_sync(_user, request, db, settings, credentials)


CurrentUserDep = Annotated[User, Depends(_current_user)]


def can_read(user: User, experiment: Experiment | StudyView) -> bool:
    return user.is_admin or experiment.owner_id == user.id or experiment.visibility == "lab"


def can_manage(user: User, experiment: Experiment | StudyView) -> bool:
    return user.is_admin or experiment.owner_id == user.id


async def _experiment(request: Request, db: DbDep, settings: SettingsDep, credentials: CredentialsDep,
                      experiment_id: Annotated[str, Path(description="The experiment's id, as its submission answered it.")]) -> Experiment:
    """An experiment the user may read; another user's private one is a 404, as if it did not exist.
    The user and the experiment are read in one worker thread (a dashboard polls this every 2 s: each
    hop to a thread was a tenth of a poll's cost)."""

    def read() -> tuple[User, Experiment | None]:
        return _user(request, db, settings, credentials), jobs.get(db, experiment_id)

    user, experiment = await anyio.to_thread.run_sync(read)
    if experiment is None or not can_read(user, experiment):
        raise HTTPException(status_code=404, detail=f"experiment {experiment_id} not found")
    return experiment


ExperimentDep = Annotated[Experiment, Depends(_experiment)]


def _managed_experiment(experiment: ExperimentDep, user: CurrentUserDep) -> Experiment:
    """An experiment the user may cancel or delete: theirs, or any for an admin."""
    if not can_manage(user, experiment):
        raise HTTPException(status_code=403, detail=f"experiment {experiment.id} belongs to "
                                                    f"{experiment.owner_name}: only its owner or an admin may change it")
    return experiment


ManagedExperimentDep = Annotated[Experiment, Depends(_managed_experiment)]


def _study(db: DbDep, user: CurrentUserDep, study_id: Annotated[str, Path(description="The study's id, as its submission answered it.")]) -> StudyView:
    """A study the user may read (without its children); another user's private one is a 404."""
    study = studies.get(db, study_id)
    if study is None or not can_read(user, study):
        raise HTTPException(status_code=404, detail=f"study {study_id} not found")
    return study


StudyDep = Annotated[StudyView, Depends(_study)]


def _managed_study(study: StudyDep, user: CurrentUserDep) -> StudyView:
    """A study the user may cancel or delete: theirs, or any for an admin."""
    if not can_manage(user, study):
        raise HTTPException(status_code=403, detail=f"study {study.id} belongs to {study.owner_name}: "
                                                    f"only its owner or an admin may change it")
    return study


ManagedStudyDep = Annotated[StudyView, Depends(_managed_study)]
