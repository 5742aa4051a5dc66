"""Fixtures shared by the in-process API tests."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from tests.api.test_studies import make_settings


@pytest.fixture
def env(tmp_path, database_url):
    """(client, settings): the app in-process with auth off and a filesystem broker, on SQLite and on
    PostgreSQL; run its jobs with worker.runner.execute_next(settings, ["cpu"])."""
    settings = make_settings(tmp_path, database_url=database_url)
    with TestClient(create_app(settings)) as client:
        yield client, settings
