"""A full disk is an outage, not a failure (SQLite's real SQLITE_FULL, "database or disk is full", made by
capping the database at the pages it has: PRAGMA max_page_count): the job is not failed and its attempt
does not count, /healthz and /readyz say 503 naming it with Retry-After, and once space is back the job
resumes and ends as a run that never saw it. Also: a failed job's error never carries SQL, and the
filesystem broker skips an unreadable message file."""
from __future__ import annotations

import os
import time
from contextlib import AbstractContextManager
from queue import Empty

import pytest
from fastapi.testclient import TestClient
from kombu import Connection
from sqlalchemy import event, text
from sqlalchemy import exc as sa_exc

import smdengine
import store.db
from api.main import create_app
from store import jobs, retry
from store.models import Experiment, Status
from store.series import read_series
from store.settings import Settings
from tests.conftest import small_spec
from tests.dbutil import session_scope
from tests.worker.test_runner import make
from worker import runner

pytestmark = pytest.mark.usefixtures("fresh_retry_journal")


class FullDisk:
    """Every connection of this process to ``url`` capped at the pages the database has now: any write
    that needs one more page fails with SQLite's own "database or disk is full"."""

    def __init__(self, url: str):
        self.engine = store.db.get_engine(url)
        with self.engine.connect() as c:
            self.pages = c.execute(text("PRAGMA page_count")).scalar()

    def _cap(self, dbapi_connection, _record) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count = {self.pages}")

    def __enter__(self) -> FullDisk:
        event.listen(self.engine, "connect", self._cap)
        self.engine.dispose()
        return self

    def __exit__(self, *_) -> None:
        event.remove(self.engine, "connect", self._cap)
        self.engine.dispose()


def test_a_full_disk_is_ridden_out_and_named_by_the_probes(sqlite_settings):
    settings = sqlite_settings.model_copy(update={"lease_seconds": 1.0, "worker_db_wait_seconds": 1.0,
                                                  "db_retry_seconds": 1.0, "flush_seconds": 0.05})
    spec = small_spec(steps=3000, record_every=1, trials=256)   # a few hundred KB of series: new pages
    exp = make(settings, spec)
    ride_out_a_full_disk(settings, exp, spec, FullDisk(settings.db_url), "SQLite")


def ride_out_a_full_disk(settings: Settings, exp: str, spec: dict, full: AbstractContextManager, database: str) -> None:
    """The outage sequence on any database: while ``full`` holds (its exit frees the space), the job's
    attempt is given up (``interrupted``, uncounted, the job queued without an error) and both probes
    answer 503 naming the full disk with Retry-After; a lease after the space is back they answer 200,
    and the job resumes to the end of a run that never saw the full disk."""
    with TestClient(create_app(settings)) as api, full:
        status = runner.execute(settings, exp)
        assert status == "interrupted"                            # given up, not failed
        with session_scope(settings.db_url) as s:   # given back at once (that small write fits), uncounted
            row = s.get(Experiment, exp)
            assert row.status == Status.queued and row.error is None, (row.status, row.error)
            assert [a.outcome for a in jobs.attempts(s, exp)] == ["interrupted"]
        for path in ("/healthz", "/readyz"):
            r = api.get(path)
            assert r.status_code == 503 and "Retry-After" in r.headers, (path, r.text)
            assert "disk full" in r.json()["database"], r.text
        print(f"{database} disk full: attempt 1 {status}, job queued; {path} {r.status_code} "
              f"Retry-After {r.headers['Retry-After']}: {r.json()['database']!r}")
    time.sleep(settings.lease_seconds)   # the probes trust writes again a lease after the last refused one
    with TestClient(create_app(settings)) as api:
        assert api.get("/healthz").status_code == 200 and api.get("/readyz").status_code == 200
    assert runner.execute(settings, exp) == "succeeded"
    with session_scope(settings.db_url) as s:
        row = s.get(Experiment, exp)
        assert [a.outcome for a in jobs.attempts(s, exp)] == ["interrupted", "succeeded"]
        alone = smdengine.json_safe(smdengine.run(spec).to_document())
        assert row.summary == alone["summary"]
        assert smdengine.json_safe(read_series(s, exp))["au_rms"] == alone["series"]["au_rms"]
    print(f"{database}: space back, attempts ['interrupted', 'succeeded'], series and summary equal to a run alone")


def test_a_database_error_that_fails_a_job_carries_no_sql(sqlite_settings):
    exp = make(sqlite_settings, small_spec())
    try:
        with session_scope(sqlite_settings.db_url) as s:   # a real constraint violation, with parameters
            s.execute(text("INSERT INTO experiments (id) VALUES (:secret)"), {"secret": exp})
    except sa_exc.IntegrityError as exc:
        error = runner.error_text(exc)
        assert "INSERT" not in str(error) and exp not in error and "secret" not in error
        assert error.startswith("database error: IntegrityError: ") and len(error) < 200
        assert "INSERT" in str(exc)                                # what the old error text carried
    else:
        pytest.fail("no IntegrityError")
    assert not retry.is_transient(sa_exc.IntegrityError("x", {}, Exception("UNIQUE constraint failed")))


def test_the_filesystem_broker_skips_unreadable_messages(tmp_path):
    """The channel's own read (what Celery's consumer calls for each message file), without exchange routing:
    kombu keeps virtual exchanges and bindings per process, which other tests of this process set up."""
    import worker.celery_app  # noqa: F401  (installs worker.fsbroker as the filesystem transport)

    folder, done = tmp_path / "broker", tmp_path / "processed"
    folder.mkdir()
    done.mkdir()
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder), "store_processed": True,
               "processed_folder": str(done), "control_folder": str(tmp_path / "control")}
    with Connection("filesystem://", transport_options=options) as conn:
        channel = conn.default_channel
        assert type(channel).__module__ == "worker.fsbroker"
        (folder / "0_empty.cpu.msg").write_bytes(b"")                  # a full disk's 0-byte file
        (folder / "00_torn.cpu.msg").write_bytes(b'{"body": "eyJ')     # and a torn one (both sorted first)
        channel._put("cpu", {"body": "ring", "n": 1})                   # a doorbell, as kombu writes it
        assert channel._get("cpu") == {"body": "ring", "n": 1}
        with pytest.raises(Empty):
            channel._get("cpu")
        assert os.listdir(folder) == []                                # the bad files consumed, not retried
        assert {"0_empty.cpu.msg", "00_torn.cpu.msg"} <= set(os.listdir(done))
