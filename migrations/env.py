"""Alembic environment: the URL comes from the caller's config or from the one Settings object."""
from alembic import context
from sqlalchemy import text

from store.db import create_engine_for
from store.models import Base
from store.settings import get_settings

config = context.config
url = config.get_main_option("sqlalchemy.url") or get_settings().db_url


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine_for(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            if connection.dialect.name == "postgresql":
                # API and workers migrate on start, possibly at once: serialize them.
                connection.execute(text("SELECT pg_advisory_xact_lock(7311)"))
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
