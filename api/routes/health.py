"""Liveness and readiness."""
from __future__ import annotations

from importlib.metadata import version

from fastapi import APIRouter, Response
from sqlalchemy import text

from api.deps import SessionDep, SettingsDep, release
from api.schemas import HealthOut

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut, responses={503: {"model": HealthOut}})
def healthz(session: SessionDep, settings: SettingsDep, response: Response):
    """Whether the API can reach its database."""
    try:
        session.execute(text("SELECT 1"))
        database = "ok"
    except Exception as exc:  # report, don't crash: a health check must answer
        database = f"error: {exc.__class__.__name__}"
        response.status_code = 503
    release(session)
    return HealthOut(status="ok" if database == "ok" else "degraded", database=database,
                     broker=settings.broker.split("://")[0], version=version("smdlab"))
