"""Apply Alembic migrations programmatically (works from an installed package, no alembic.ini needed)."""
from __future__ import annotations

import fcntl
from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade_head(database_url: str) -> None:
    """``alembic upgrade head`` on the given database. Processes starting together take turns:
    PostgreSQL through an advisory lock (migrations/env.py), SQLite through a lock file."""
    if not database_url.startswith("sqlite:///"):
        command.upgrade(alembic_config(database_url), "head")
        return
    db_file = Path(database_url.removeprefix("sqlite:///"))
    db_file.parent.mkdir(parents=True, exist_ok=True)
    with open(db_file.with_name(db_file.name + ".migrate-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        command.upgrade(alembic_config(database_url), "head")
