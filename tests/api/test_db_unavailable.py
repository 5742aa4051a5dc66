"""A transient database error is a 503 with Retry-After (the request was fine, the database away),
documented in the schema; any other database error stays a 500."""
from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.exc import IntegrityError

from api.main import create_app
from store import retry
from tests.servers import free_port


def test_unreachable_database_is_a_503_with_retry_after(sqlite_settings):
    with TestClient(create_app(sqlite_settings.model_copy(update={"sweeper": False}))) as client:
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
