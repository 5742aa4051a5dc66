"""Persistence on SQLite and PostgreSQL: the migration, chunked series, job transitions."""
from __future__ import annotations

from sqlalchemy import event, inspect

from store import jobs
from store.db import get_engine
from store.migrate import upgrade_head
from store.series import read_series, read_series_after, write_points
from tests.dbutil import session_scope


def make(url: str) -> str:
    upgrade_head(url)
    with session_scope(url) as s:
        return jobs.create(s, kind="nrq", name="x", spec={"kind": "nrq"}, total_steps=10).id


def test_migration_creates_schema_and_is_idempotent(empty_database_url):
    upgrade_head(empty_database_url)
    upgrade_head(empty_database_url)
    insp = inspect(get_engine(empty_database_url))
    assert {"experiments", "series_chunks", "alembic_version"} <= set(insp.get_table_names())
    cols = {c["name"] for c in insp.get_columns("experiments")}
    assert {"status", "progress", "spec", "theory", "summary", "error", "cancel_requested"} <= cols


def test_series_chunks_roundtrip_and_idempotent_rewrite(database_url):
    exp = make(database_url)
    with session_scope(database_url) as s:
        write_points(s, exp, 0, {"step": [0, 10], "risk": [0.9, 0.5]})
        write_points(s, exp, 2, {"step": [20, 30, 40], "risk": [0.3, float("nan"), 0.2]})
    with session_scope(database_url) as s:
        got = read_series(s, exp)
        assert got["step"] == [0, 10, 20, 30, 40] and got["risk"][4] == 0.2 and got["risk"][3] != got["risk"][3]
        # a retried write from index 2 replaces what followed instead of duplicating it
        write_points(s, exp, 2, {"step": [20, 30], "risk": [0.31, 0.25]})
    with session_scope(database_url) as s:
        assert read_series(s, exp) == {"step": [0, 10, 20, 30], "risk": [0.9, 0.5, 0.31, 0.25]}
        write_points(s, exp, 0, {"step": [], "risk": []})
    with session_scope(database_url) as s:
        assert read_series(s, exp) == {}


def test_series_after_a_step_is_the_tail_of_the_series(database_url):
    exp = make(database_url)
    with session_scope(database_url) as s:
        write_points(s, exp, 0, {"step": [0, 10, 20, 30, 40], "risk": [0.0, 0.1, 0.2, 0.3, 0.4]})
        write_points(s, exp, 3, {"step": [31, 41, 51], "risk": [0.31, 0.41, 0.51]})  # overlaps: the first wins
        write_points(s, exp, 6, {"step": [60], "risk": [0.6]})
        write_points(s, exp, 7, {"step": [70, 80], "risk": [0.7, 0.8]})
    with session_scope(database_url) as s:
        whole = read_series(s, exp)
        assert whole["step"] == [0, 10, 20, 30, 40, 51, 60, 70, 80]
        for step in range(-1, 90):
            index, tail = read_series_after(s, exp, step)
            assert tail == {k: v[index:] for k, v in whole.items()}
            assert [x for x in whole["step"] if x > step] == [x for x in tail["step"] if x > step]
        assert read_series_after(s, exp, 75)[0] == 7      # only the last chunk is read
        fetched: list[str] = []
        listen = lambda *args: fetched.append(args[2])   # noqa: E731  (conn, cursor, statement, ...)
        event.listen(s.get_bind(), "before_cursor_execute", listen)
        try:
            read_series_after(s, exp, 65)
        finally:
            event.remove(s.get_bind(), "before_cursor_execute", listen)
        data_reads = [q for q in fetched if "series_chunks.data" in q]
        assert len(data_reads) == 2   # the chunks at 7 and 6: the ones before are never fetched
        assert read_series_after(s, make(database_url), 0) == (0, {})
