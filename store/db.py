"""Engines and sessions. One engine per (process, URL): worker children must not share a parent's pool."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")
_engines: dict[tuple[int, str], Engine] = {}


def get_engine(url: str) -> Engine:
    key = (os.getpid(), url)
    if key not in _engines:
        _engines[key] = _create(url)
    return _engines[key]


def _create(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # API and worker processes share the file
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    connect_args = {"connect_timeout": 5} if url.startswith("postgresql") else {}
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args)


def session_factory(url: str) -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(url), expire_on_commit=False)


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    session = session_factory(url)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def transaction(url: str, fn: Callable[[Session], T]) -> T:
    """``fn(session)`` as one unit of work under the retry policy (store/retry.py): on a transient
    error the transaction is rolled back and the whole of ``fn`` runs again in a new one.
    (Stand-in, on the outage branch, for the store's single door.)"""
    from store import retry

    def unit() -> T:
        with session_scope(url) as session:
            return fn(session)

    return retry.run(unit)
