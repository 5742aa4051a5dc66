"""/healthz, /readyz and /metrics answer a 503 with Retry-After, as every other route does (api/main.py), and
document it; their 200s carry none."""
from __future__ import annotations

from fastapi.testclient import TestClient

from api.main import create_app
from api.responses import DB_RETRY_AFTER_SECONDS
from store import retry
from tests.servers import free_port

PROBES = ("/healthz", "/readyz", "/metrics")


def test_probes_answer_503_with_retry_after_when_the_database_is_away(sqlite_settings):
    settings = sqlite_settings.model_copy(update={"sweeper": False, "db_request_retry_seconds": 0.2})
    with TestClient(create_app(settings)) as client:
        for path in PROBES:
            r = client.get(path)
            assert r.status_code == 200 and "Retry-After" not in r.headers, (path, r.text)
        # after start-up (which migrates), point the app at a PostgreSQL nobody listens on
        client.app.state.settings = settings.model_copy(update={
            "database_url": f"postgresql+psycopg://smd@127.0.0.1:{free_port()}/smd"})
        for path in PROBES:
            r = client.get(path)
            assert r.status_code == 503, (path, r.text)
            assert r.headers["Retry-After"] == str(DB_RETRY_AFTER_SECONDS), path
        documented = client.get("/openapi.json").json()["paths"]
    for path in PROBES:
        assert "Retry-After" in documented[path]["get"]["responses"]["503"]["headers"], path
    retry.journal.reset()
