"""The FastAPI application factory."""
from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Optional

from fastapi import FastAPI

from api.routes import experiments, health, plots
from store.migrate import upgrade_head
from store.settings import Settings, get_settings


def create_app(settings: Optional[Settings] = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        upgrade_head(settings.db_url)  # every schema change is a migration, applied on start
        yield

    app = FastAPI(title="SMD Lab", version="0.1.0", lifespan=lifespan,
                  description="Simulation jobs on Spherical Motion Dynamics: submit a spec, poll its status, "
                              "read results and plots.")
    app.state.settings = settings
    app.include_router(experiments.router)
    app.include_router(plots.router)
    app.include_router(health.router)
    return app
