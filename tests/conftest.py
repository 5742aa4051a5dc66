"""Shared fixtures: settings on a temporary SQLite file or a private PostgreSQL, an API client,
and real server processes (tests/servers.py)."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # two pytest processes share two cores: one torch thread each (and in the servers they start),
    # instead of two threads each contending for both cores
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# the servers the tests start serve the API from one process (SMD_API_WORKERS defaults to the cores: each more
# process costs a few CPU-seconds of start-up per server); tests/integration/test_api_workers.py runs two
os.environ.setdefault("SMD_API_WORKERS", "1")

from store.settings import Settings  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser) -> None:
    parser.addoption("--device", choices=("cpu", "cuda"), default="cpu",
                     help="the device every engine run of tests/engine uses (whatever its spec says); "
                          "tests marked cpu_stream are skipped on another device")


# Modules of real processes whose lease, sweep and outage timings are asserted on. Under pytest-xdist
# (`make test`: `-n 2 --dist loadfile`) they form one unit, run one after another in one process, so that no
# two of them starve each other's workers of CPU; every other module is a unit of its own (its module-scoped
# fixtures, a server or an expensive statistical run, made once).
SERIAL_MODULES = frozenset({"tests/integration/test_recovery.py", "tests/integration/test_db_outage.py",
                            "tests/integration/test_study_workers.py", "tests/integration/test_fairness.py",
                            "tests/integration/test_embedded.py", "tests/integration/test_clock_skew.py",
                            "tests/integration/test_fusion_spread.py", "tests/integration/test_hosts.py"})


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with SERIAL_MODULES as one unit (pytest-xdist's ``loadgroup`` does not group
    here: its markers leave the node ids as they are, and it drops schemathesis' subtests)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return "serial" if module in SERIAL_MODULES else module

    return ModuleScheduling(config, log)


def _start_rank(item) -> int:
    """Units are handed out in collection order: the longest (the serial unit, then the other modules that
    start servers) go first, so that none of them is left to run alone at the end."""
    if item.nodeid.split("::")[0] in SERIAL_MODULES:
        return 0
    return 1 if item.get_closest_marker("integration") else 2


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked cpu_stream are skipped when ``--device`` is not cpu: their oracle replays the CPU
    generator's draws, or what they expect is one outcome of a borderline statistic for the CPU stream's
    realisation (a CUDA generator draws other numbers from the same seed). The order: :func:`_start_rank`
    (a stable sort: each module's own order is kept)."""
    device = config.getoption("--device")
    items.sort(key=_start_rank)
    for item in items:
        if device != "cpu" and item.get_closest_marker("cpu_stream"):
            item.add_marker(pytest.mark.skip(reason=f"it depends on the CPU generator's draws, not {device}'s"))


# The databases each database test runs on: both by default; `make test-quick` sets SMD_TEST_DATABASES=sqlite
# (no server started), and a test that needs PostgreSQL itself is then skipped.
DATABASES = [name.strip() for name in os.environ.get("SMD_TEST_DATABASES", "sqlite,postgres").split(",") if name.strip()]


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """One private PostgreSQL server for the whole session (make test installs the binaries)."""
    from tests.servers import postgres_server

    if "postgres" not in DATABASES:
        pytest.skip(f"SMD_TEST_DATABASES={','.join(DATABASES)}: no PostgreSQL in this run")

    with postgres_server() as url:
        yield url


_db_counter = iter(range(10**6))


def _database_name() -> str:
    """A PostgreSQL database name no other test of this session uses (a counter and the process id)."""
    return f"t{next(_db_counter)}_{os.getpid()}"


@pytest.fixture(params=DATABASES)
def empty_database_url(request, tmp_path) -> str:
    """An empty database (no tables), on SQLite and on a real PostgreSQL: for the tests of the migrations."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'smd.sqlite3'}"
    from tests.servers import fresh_database

    admin = request.getfixturevalue("postgres_admin_url")
    return fresh_database(admin, _database_name())


class MigratedTemplates:
    """Per database kind and pytest process, one database migrated to head, made when first asked for: a
    test's database is a copy of it (a migration costs ~0.12 s a database, a copy ~0.01 s on SQLite and
    ~0.03 s on PostgreSQL, and ~500 tests ask for one; the migrations are tested on empty databases)."""

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory
        self.urls: dict[str, str] = {}

    def url(self, kind: str, request) -> str:
        from store.migrate import upgrade_head

        if kind not in self.urls:
            if kind == "sqlite":
                url = f"sqlite:///{self.tmp_path_factory.mktemp('template') / 'smd.sqlite3'}"
            else:
                from tests.servers import fresh_database

                url = fresh_database(request.getfixturevalue("postgres_admin_url"), f"template_{os.getpid()}")
            upgrade_head(url)   # its engine is disposed: no connection stays open to the template
            self.urls[kind] = url
        return self.urls[kind]


@pytest.fixture(scope="session")
def migrated_templates(tmp_path_factory) -> MigratedTemplates:
    return MigratedTemplates(tmp_path_factory)


@pytest.fixture(params=DATABASES)
def database_url(request, tmp_path) -> str:
    """Each database test runs on SQLite and on a real PostgreSQL: a fresh database per test, migrated to
    head (a copy of :class:`MigratedTemplates`' own)."""
    template = request.getfixturevalue("migrated_templates").url(request.param, request)
    if request.param == "sqlite":
        import sqlite3

        path = tmp_path / "smd.sqlite3"
        with contextlib.closing(sqlite3.connect(template.removeprefix("sqlite:///"))) as source, \
                contextlib.closing(sqlite3.connect(path)) as copy:
            source.backup(copy)   # the pages as SQLite sees them (WAL included), not the file as it lies
        return f"sqlite:///{path}"
    from sqlalchemy.engine import make_url

    from tests.servers import fresh_database

    return fresh_database(request.getfixturevalue("postgres_admin_url"), _database_name(),
                          template=make_url(template).database)


# A fault scenario of real processes runs end to end once, on PostgreSQL (the production database); the
# same logic on SQLite is covered without processes, at the store and runner level (tests/store,
# tests/worker, which run on both databases), and SQLite's own multi-process path by the embedded
# service's scenarios (tests/integration/test_embedded.py). DEVELOPERS.md, "The suite's time budget".
POSTGRES_ONLY = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


@pytest.fixture
def settings(tmp_path, database_url) -> Settings:
    """Embedded-style settings: the given database, a filesystem broker in tmp_path."""
    return Settings(state_dir=tmp_path / "state", database_url=database_url, flush_seconds=0.2, auth="off")


@pytest.fixture
def sqlite_settings(tmp_path) -> Settings:
    return Settings(state_dir=tmp_path / "state", database_url=f"sqlite:///{tmp_path / 'smd.sqlite3'}",
                    flush_seconds=0.2, auth="off")


@pytest.fixture
def client(settings):
    from fastapi.testclient import TestClient

    from api.main import create_app

    with TestClient(create_app(settings)) as c:
        yield c


def make_users(url: str, **alice_quota):
    """alice and bob (users) and root (admin), each with a key: a namespace {name: key}.
    ``alice_quota`` overrides alice's quotas (store.users.set_quota)."""
    from types import SimpleNamespace

    from store import users
    from store.migrate import upgrade_head
    from tests.dbutil import session_scope

    upgrade_head(url)
    keys = {}
    with session_scope(url) as session:
        for name, role in (("alice", "user"), ("bob", "user"), ("root", "admin")):
            user = users.create_user(session, name, role)
            if alice_quota and name == "alice":
                users.set_quota(session, user, **alice_quota)
            keys[name] = users.create_key(session, user)[1]
    return SimpleNamespace(**keys)


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def lab(tmp_path, database_url):
    """(client, keys, settings) of an in-process server with auth on and the users of make_users."""
    from fastapi.testclient import TestClient

    from api.main import create_app

    settings = Settings(state_dir=tmp_path / "state", database_url=database_url, flush_seconds=0.2, auth="on")
    keys = make_users(database_url)
    with TestClient(create_app(settings)) as client:
        yield client, keys, settings


def small_spec(**params) -> dict:
    """A quick nrq spec (well under a second on a CPU)."""
    base = {"dim": 10, "eig_low": 1.0, "eig_high": 2.0, "noise_std": 1.0, "lr": 0.1, "weight_decay": 0.01,
            "trials": 64, "steps": 400, "record_every": 20}
    base.update(params)
    return {"kind": "nrq", "seed": 3, "device": "cpu", "params": base}


@pytest.fixture
def fresh_retry_journal() -> Iterator[None]:
    """The store's outage journal (store.retry.journal) empty before and after the test: an outage logged
    by one test must not hide the next one's log line."""
    from store import retry
    retry.journal.reset()
    yield
    retry.journal.reset()
