"""Fixtures shared by the integration tests."""
from __future__ import annotations

import pytest

from tests.servers import redis_server


@pytest.fixture(scope="module")
def redis_url():
    """A private redis-server (no persistence) for the tests of one module."""
    with redis_server() as url:
        yield url
