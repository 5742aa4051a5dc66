"""One Settings object, read from ``SMD_*`` environment variables by the API, worker and Alembic."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Optional

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SMD_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address the API binds to.")
    port: int = Field(8000, ge=1, le=65535, description="Port the API listens on.")
    state_dir: Path = Field(Path(".smd"), description="Where the embedded default keeps its database and broker.")
    database_url: Optional[str] = Field(None, description="SQLAlchemy URL; default: SQLite file in state_dir.")
    broker_url: Optional[str] = Field(None, description="Celery broker URL; default: filesystem broker in state_dir.")
    max_work: int = Field(20_000_000_000, ge=1, description="Largest accepted job, in trials·steps·dim.")
    data_dir: Optional[Path] = Field(None, description="Datasets that are not bundled (train kind): "
                                                       "cifar10 is read from data_dir/cifar-10-batches-py.")
    flush_seconds: float = Field(2.0, gt=0, description="How often a worker writes progress and partial series.")
    worker_concurrency: int = Field(1, ge=1, description="Worker processes started by `smd worker`.")
    log_level: str = Field("INFO")

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.state_dir / 'smd.sqlite3').resolve()}"

    @property
    def broker(self) -> str:
        return self.broker_url or "filesystem://"

    @property
    def broker_folder(self) -> Path:
        """Message folder of the filesystem broker (used only when the broker is ``filesystem://``)."""
        return (self.state_dir / "broker").resolve()


@lru_cache
def get_settings() -> Settings:
    return Settings()
