"""PostgreSQL out of space, for real: the service's database lives in a tablespace on a small tmpfs (its WAL on
the main disk, as a table disk apart), which a file fills to the last few KB while a job runs. PostgreSQL
then refuses to extend a table (SQLSTATE 53100, DiskFull). The job is not failed and its attempt does not
count; /healthz and /readyz answer 503 naming the full disk, with Retry-After; once the file is removed the
probes answer 200 again and the job resumes, ending as a run that never saw the full disk. (SQLite's own
full disk: tests/worker/test_disk_full.py.)

Needs root (mount, and a PostgreSQL run as another user); skipped, saying why, without.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from store.settings import Settings
from tests.conftest import small_spec
from tests.servers import PG_USER, PostgresCluster, _connect
from tests.worker.test_disk_full import ride_out_a_full_disk
from tests.worker.test_runner import make

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_retry_journal")]

DISK_MB = 24   # a fresh database (a copy of template1) takes ~8 MB of it


@pytest.fixture
def small_disk():
    """A tmpfs of DISK_MB, mounted on a new folder; unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    folder = Path(tempfile.mkdtemp(prefix="smd-disk-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m,mode=0755", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        folder.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
        folder.rmdir()


@contextmanager
def filled(disk: Path, leave_kb: int) -> Iterator[None]:
    """A file that takes all of the disk's free space but ``leave_kb``, removed at the exit."""
    free = os.statvfs(disk)
    size = free.f_bavail * free.f_frsize - leave_kb * 1024
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.truncate(0)
        os.posix_fallocate(f.fileno(), 0, size)
    try:
        yield
    finally:
        filler.unlink()


def test_postgres_out_of_space_is_an_outage_not_a_failure(small_disk):
    pg = PostgresCluster()
    try:
        pg.start()
        tablespace = small_disk / "pg"
        tablespace.mkdir()
        os.chown(tablespace, pg.user.pw_uid, pg.user.pw_gid)
        with _connect(pg.port) as conn:   # autocommit: CREATE DATABASE runs outside a transaction
            conn.execute(f"CREATE TABLESPACE small LOCATION '{tablespace}'")
            conn.execute("CREATE DATABASE smd_full TABLESPACE small")
        url = f"postgresql+psycopg://{PG_USER}@127.0.0.1:{pg.port}/smd_full"
        settings = Settings(state_dir=small_disk.parent / f"{small_disk.name}-state", database_url=url, auth="off",
                            lease_seconds=1.0, worker_db_wait_seconds=1.0, db_retry_seconds=1.0, flush_seconds=0.05)
        spec = small_spec(steps=3000, record_every=1, trials=256)   # a few hundred KB of series: new pages
        exp = make(settings, spec)
        ride_out_a_full_disk(settings, exp, spec, filled(small_disk, leave_kb=64), "PostgreSQL")
    finally:
        pg.close()
