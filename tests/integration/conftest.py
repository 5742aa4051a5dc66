"""Fixtures shared by the integration tests."""
from __future__ import annotations

import pytest

from tests.servers import redis_server


@pytest.fixture(scope="module")
def redis_url():
    """A private redis-server (no persistence) for the tests of one module."""
    with redis_server() as url:
        yield url


@pytest.fixture
def alice_stack(tmp_path, redis_url, database_url):
    """The production-style stack of tests/integration/test_study_workers.py (API, auth on) with one user,
    alice; workers are started by the test."""
    from tests.integration.test_study_workers import Stack

    s = Stack(tmp_path, redis_url, database_url, users=("alice",))
    try:
        yield s
    finally:
        s.close()
