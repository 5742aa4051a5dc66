"""Apply Alembic migrations programmatically (works from an installed package, no alembic.ini needed)."""
from __future__ import annotations

import fcntl
import logging
from pathlib import Path

# Alembic logs a line per built-in plugin when it is imported ("setup plugin alembic.autogenerate.schemas", 7 of
# them): before every `smd users create`'s one line of output, and 14 at `smd serve`'s start. Quiet before import.
logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)

from alembic import command  # noqa: E402
from alembic.config import Config  # noqa: E402

import migrations  # noqa: E402


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
