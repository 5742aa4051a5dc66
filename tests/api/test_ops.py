"""/readyz and /metrics, on SQLite and PostgreSQL, with the real filesystem broker and a Redis
broker that is down (a free port nobody listens on)."""
from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.main import create_app
from store.migrate import upgrade_head
from store.models import Experiment, utcnow
from store.settings import Settings
from tests.dbutil import session_scope
from worker.queue import ring

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def ops_settings(settings) -> Settings:
    # no sweeper: it would re-ring the queued rows these tests insert without messages
    return settings.model_copy(update={"sweeper": False})


@pytest.fixture
def ops_client(ops_settings):
    with TestClient(create_app(ops_settings)) as c:
        yield c


def down_broker(settings: Settings) -> Settings:
    return settings.model_copy(update={"broker_url": f"redis://127.0.0.1:{free_port()}/0"})


def parse(text: str) -> dict:
    """{family name: {(sample name, sorted labels): value}}"""
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(family.name, {})[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(metrics: dict, family: str, sample: str | None = None, **labels) -> float:
    return metrics[family][(sample or family, tuple(sorted(labels.items())))]


def add(settings: Settings, *, kind="nrq", status="queued", queue="cpu", attempts=0, seconds=None, **extra) -> None:
    """One experiment row, written through the ORM; ``seconds`` sets started_at/finished_at that far apart."""
    with session_scope(settings.db_url) as session:
        row = Experiment(kind=kind, name=None, spec={"kind": kind}, status=status, queue=queue, attempts=attempts,
                         total_steps=10, **extra)
        if seconds is not None:
            row.started_at = utcnow() - timedelta(seconds=seconds)
            row.finished_at = row.started_at + timedelta(seconds=seconds)
        session.add(row)


# --- /readyz ------------------------------------------------------------------------------------

def test_readyz_ready(ops_client):
    r = ops_client.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ready", "database": "ok", "broker": "ok"}


def test_readyz_broker_down_answers_fast(ops_settings):
    settings = down_broker(ops_settings)
    with TestClient(create_app(settings)) as client:
        start = time.monotonic()
        r = client.get("/readyz")
        elapsed = time.monotonic() - start
    assert elapsed < 10, elapsed
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unavailable" and body["database"] == "ok"
    assert body["broker"].startswith("error: ") and "Error" in body["broker"], body


@pytest.fixture
def hung_broker_url():
    """A Redis URL whose server accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    server.close()
    for conn in held:
        conn.close()


def test_readyz_and_metrics_with_a_hung_broker(sqlite_settings, hung_broker_url):
    settings = sqlite_settings.model_copy(update={"sweeper": False, "broker_url": hung_broker_url})
    with TestClient(create_app(settings)) as client:
        start = time.monotonic()
        ready = client.get("/readyz")
        metrics = client.get("/metrics")
        elapsed = time.monotonic() - start
    assert elapsed < 15, elapsed
    assert ready.status_code == 503 and ready.json()["broker"].startswith("error: "), ready.text
    assert value(parse(metrics.text), "smd_broker_up") == 0   # both answered: worker.queue has socket timeouts


@pytest.mark.integration   # a real redis-server
def test_ready_and_counted_on_a_real_redis(sqlite_settings):
    from tests.servers import redis_server

    with redis_server() as url:
        settings = sqlite_settings.model_copy(update={"sweeper": False, "broker_url": url})
        with TestClient(create_app(settings)) as client:
            assert client.get("/readyz").json() == {"status": "ready", "database": "ok", "broker": "ok"}
            ring(settings, "gpu", 3)
            m = parse(client.get("/metrics").text)
    assert value(m, "smd_broker_up") == 1
    assert value(m, "smd_broker_messages", queue="gpu") == 3
    assert value(m, "smd_broker_messages", queue="cpu") == 0


def test_readyz_database_down(sqlite_settings, tmp_path):
    with TestClient(create_app(sqlite_settings.model_copy(update={"sweeper": False}))) as client:
        # after start-up (which migrates), point the app at a PostgreSQL nobody listens on
        client.app.state.settings = sqlite_settings.model_copy(update={
            "sweeper": False, "database_url": f"postgresql+psycopg://smd:smd@127.0.0.1:{free_port()}/smd"})
        r = client.get("/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unavailable" and body["broker"] == "ok"
    assert body["database"].startswith("error: OperationalError"), body


def test_openapi_documents_ops_routes(ops_client):
    paths = ops_client.get("/openapi.json").json()["paths"]
    ready = paths["/readyz"]["get"]
    assert "503" in ready["responses"] and ready["description"]
    assert paths["/metrics"]["get"]["description"]


# --- /metrics -----------------------------------------------------------------------------------

def test_metrics_empty_database(ops_client):
    r = ops_client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    m = parse(r.text)
    for status in STATUSES:
        assert value(m, "smd_jobs", status=status) == 0
    for queue in ("cpu", "gpu"):
        assert value(m, "smd_queue_depth", queue=queue) == 0
        assert value(m, "smd_broker_messages", queue=queue) == 0
    assert value(m, "smd_broker_up") == 1
    assert value(m, "smd_job_attempts", "smd_job_attempts_total") == 0
    h = "smd_job_duration_seconds"
    for kind in ("nrq", "sde", "train"):                      # every kind, zeros included
        assert value(m, h, h + "_count", kind=kind) == 0
        assert value(m, h, h + "_bucket", kind=kind, le="+Inf") == 0
        assert value(m, h, h + "_bucket", kind=kind, le="86400.0") == 0


def test_metrics_from_database(ops_client, ops_settings):
    add(ops_settings, status="queued", queue="cpu")
    add(ops_settings, status="queued", queue="gpu")
    add(ops_settings, status="queued", queue="gpu", attempts=1)       # requeued after a lost worker
    add(ops_settings, status="running", queue="gpu", attempts=2, started_at=utcnow())
    add(ops_settings, status="succeeded", attempts=1, seconds=0.5)
    add(ops_settings, status="succeeded", attempts=1, seconds=100)
    add(ops_settings, status="failed", attempts=3, seconds=7200)
    add(ops_settings, kind="train", status="succeeded", queue="gpu", attempts=1, seconds=40)
    add(ops_settings, status="cancelled")                                # cancelled before it started
    ring(ops_settings, "gpu", 2)

    m = parse(ops_client.get("/metrics").text)
    assert {s: value(m, "smd_jobs", status=s) for s in STATUSES} == {
        "queued": 3, "running": 1, "succeeded": 3, "failed": 1, "cancelled": 1}
    assert value(m, "smd_queue_depth", queue="cpu") == 1
    assert value(m, "smd_queue_depth", queue="gpu") == 2
    assert value(m, "smd_broker_messages", queue="gpu") == 2
    assert value(m, "smd_broker_messages", queue="cpu") == 0
    assert value(m, "smd_broker_up") == 1
    assert value(m, "smd_job_attempts", "smd_job_attempts_total") == 1 + 2 + 1 + 1 + 3 + 1

    h = "smd_job_duration_seconds"
    bucket = lambda kind, le: value(m, h, h + "_bucket", kind=kind, le=le)  # noqa: E731
    assert value(m, h, h + "_count", kind="nrq") == 3     # the never-started cancelled job has no duration
    assert value(m, h, h + "_sum", kind="nrq") == pytest.approx(7300.5, abs=0.01)
    assert bucket("nrq", "1.0") == 1
    assert bucket("nrq", "60.0") == 1
    assert bucket("nrq", "120.0") == 2
    assert bucket("nrq", "3600.0") == 2
    assert bucket("nrq", "7200.0") == 3
    assert bucket("nrq", "86400.0") == 3 and bucket("nrq", "+Inf") == 3
    assert value(m, h, h + "_count", kind="train") == 1
    assert bucket("train", "30.0") == 0 and bucket("train", "60.0") == 1
    assert value(m, h, h + "_sum", kind="train") == pytest.approx(40, abs=0.01)


def test_metrics_broker_down(ops_settings):
    upgrade_head(ops_settings.db_url)
    add(ops_settings, status="queued", queue="gpu")
    settings = down_broker(ops_settings)
    with TestClient(create_app(settings)) as client:
        start = time.monotonic()
        r = client.get("/metrics")
        elapsed = time.monotonic() - start
    assert r.status_code == 200 and elapsed < 10, (r.status_code, elapsed)
    m = parse(r.text)
    assert value(m, "smd_broker_up") == 0
    assert "smd_broker_messages" not in m
    assert value(m, "smd_queue_depth", queue="gpu") == 1          # the database still answers
    assert value(m, "smd_jobs", status="queued") == 1
