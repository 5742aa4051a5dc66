"""Liveness and readiness."""
from __future__ import annotations

from importlib.metadata import version

from fastapi import APIRouter, Response

from api.deps import DbDep, SettingsDep
from api.responses import RETRY_AFTER, RETRY_AFTER_HEADER
from api.schemas import HealthOut
from store.db import ping, write_trouble

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut,
            responses={503: {"model": HealthOut, "description": "The database is unreachable or its disk is "
                                                                "full; retry after the Retry-After seconds.", "headers": RETRY_AFTER_HEADER}})
def healthz(db: DbDep, settings: SettingsDep, response: Response):
    """Whether the API can reach its database and the database can take writes (503 with Retry-After when
    not: unreachable, or its disk full)."""
    try:
        ping(db)
        trouble = write_trouble(db, settings.lease_seconds)
        database = "ok" if trouble is None else f"error: {trouble}"
    except Exception as exc:  # report, don't crash: a health check must answer
        database = f"error: {exc.__class__.__name__}"
    if database != "ok":
        response.status_code = 503
        response.headers.update(RETRY_AFTER)
    return HealthOut(status="ok" if database == "ok" else "degraded", database=database,
                     broker=settings.broker.split("://")[0], version=version("smdlab"))
