"""A session for tests, to set up rows and check what was stored (the service itself never holds
one: store functions open their own transactions through store.db.run; given this session, they
join its transaction)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session, sessionmaker

from store.db import get_engine


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    with sessionmaker(bind=get_engine(url), expire_on_commit=False)() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
