"""A transient database error is a 503 with Retry-After (the request was fine, the database away),
documented in the schema; any other database error stays a 500."""
from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.exc import IntegrityError

from api.main import create_app
from store import retry
from tests.conftest import small_spec
from tests.servers import free_port


def test_unreachable_database_is_a_503_with_retry_after(sqlite_settings):
    # each request retries for its patience (db_request_retry_seconds, 2 s by default) before its 503
    patient = sqlite_settings.model_copy(update={"sweeper": False, "db_request_retry_seconds": 0.3})
    with TestClient(create_app(patient)) as client:
        # after start-up (which migrates), point the app at a PostgreSQL nobody listens on
        client.app.state.settings = sqlite_settings.model_copy(update={
            "sweeper": False, "database_url": f"postgresql+psycopg://smd@127.0.0.1:{free_port()}/smd"})
        for method, path in (("GET", "/v1/experiments"), ("GET", "/v1/experiments/abc"),
                             ("POST", "/v1/experiments"), ("GET", "/v1/queue")):
            r = client.request(method, path, json={"kind": "nrq", "params": {}} if method == "POST" else None)
            assert r.status_code == 503, (path, r.text)
            assert int(r.headers["Retry-After"]) > 0
            assert "database is unreachable" in r.json()["detail"]
        assert client.get("/readyz").status_code == 503           # consistent with the probe
    assert retry.journal.outages                                  # the sweeper of this process knows
    retry.journal.reset()


def test_other_database_errors_stay_500(sqlite_settings, monkeypatch):
    from store import users

    def broken(*_a, **_k):
        raise IntegrityError("INSERT", {}, Exception("duplicate"))

    monkeypatch.setattr(users, "local_user", broken)
    app = create_app(sqlite_settings.model_copy(update={"sweeper": False}))
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/v1/experiments").status_code == 500


def test_openapi_documents_the_503(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path, operation in (("/v1/experiments", "post"), ("/v1/experiments/{experiment_id}", "get")):
        assert "503" in paths[path][operation]["responses"], path


def test_requests_get_the_short_deadline_and_never_retry_on_the_event_loop(sqlite_settings, monkeypatch):
    """Every store call of a request (dependencies, route, the event stream's polls) goes through
    store.retry.run with SMD_DB_REQUEST_RETRY_SECONDS as its deadline, in a worker thread: never on
    the event loop's thread, where its sleeps would stall every other request."""
    import asyncio
    import time

    calls: list[tuple[bool, float]] = []
    real_run = retry.run

    def watched(fn, **kwargs):
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        calls.append((on_loop, retry._budget()))
        return real_run(fn, **kwargs)

    monkeypatch.setattr(retry, "run", watched)
    settings = sqlite_settings.model_copy(update={"sweeper": False, "db_request_retry_seconds": 1.25,
                                                  "events_poll_seconds": 0.05})
    with TestClient(create_app(settings)) as client:
        assert calls and not any(on_loop for on_loop, _ in calls)     # start-up (the local user): in a thread
        calls.clear()
        r = client.post("/v1/experiments", json=small_spec())
        assert r.status_code == 202, r.text
        exp_id = r.json()["id"]
        assert client.get(f"/v1/experiments/{exp_id}").status_code == 200
        with client.stream("GET", f"/v1/experiments/{exp_id}/events", params={"timeout": 0.5}) as stream:
            assert stream.status_code == 200
            stream.read()
        assert len(calls) > 6                                          # the stream polled, too
        assert all(not on_loop and budget == 1.25 for on_loop, budget in calls), calls
        # a database that is away: the request waits SMD_DB_REQUEST_RETRY_SECONDS, not SMD_DB_RETRY_SECONDS
        client.app.state.settings = settings.model_copy(update={
            "database_url": f"postgresql+psycopg://smd@127.0.0.1:{free_port()}/smd"})
        t0 = time.monotonic()
        assert client.get(f"/v1/experiments/{exp_id}").status_code == 503
        assert 1.25 <= time.monotonic() - t0 < 5
    retry.journal.reset()
