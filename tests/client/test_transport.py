"""smdlab's HTTP layer against a scripted server (httpx.MockTransport): a connection refused before anything
has answered is raised at once (a service not started, or SMD_URL not its address), while a running
service's transient failures are retried, said once before the first retry."""
from __future__ import annotations

import httpx
import pytest

from smdlab import SMDError
from smdlab._http import Transport

URL = "http://service.test"


def scripted(*outcomes: int | Exception) -> tuple[Transport, list[tuple[str, float]], list[str]]:
    """A Transport whose requests meet ``outcomes`` in turn (a status, or an exception raised), its retry
    notices, and the requests the server saw."""
    notices: list[tuple[str, float]] = []
    seen: list[str] = []
    left = list(outcomes)

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        outcome = left.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return httpx.Response(outcome, json={"detail": "the database is unreachable for now"} if outcome >= 500 else {})

    transport = Transport(URL, None, 5.0, backoff=0.001, on_retry=lambda reason, seconds: notices.append((reason, seconds)))
    transport.http = httpx.Client(base_url=URL, transport=httpx.MockTransport(answer))
    return transport, notices, seen


def refused() -> httpx.ConnectError:
    return httpx.ConnectError("[Errno 111] Connection refused")


def test_a_refused_first_connection_is_raised_at_once():
    transport, notices, seen = scripted(refused(), 200)
    with pytest.raises(SMDError, match=r"cannot reach http://service.test: ConnectError: \[Errno 111\] Connection "
                                       r"refused \(is the service running, and SMD_URL its address\?\)"):
        transport.request("GET", "/v1/experiments")
    assert seen == ["GET /v1/experiments"] and notices == []   # asked once, nothing waited


def test_a_running_service_that_goes_away_is_retried_and_said_once():
    transport, notices, seen = scripted(200, refused(), refused(), 200)
    transport.request("GET", "/v1/experiments")
    assert transport.request("GET", "/v1/experiments/e1").status_code == 200
    assert seen == ["GET /v1/experiments", *["GET /v1/experiments/e1"] * 3]
    assert notices == [("cannot reach http://service.test: ConnectError: [Errno 111] Connection refused",
                        pytest.approx(0.001 * 15))]   # backoff 1 + 2 + 4 + 8 times 0.001 s


def test_a_5xx_is_retried_and_said_once_a_post_never():
    transport, notices, seen = scripted(503, 503, 200, 503)
    assert transport.request("GET", "/v1/studies/s1").status_code == 200
    assert [reason for reason, _ in notices] == ["HTTP 503: the database is unreachable for now"]
    with pytest.raises(SMDError, match="HTTP 503"):
        transport.request("POST", "/v1/studies")
    assert seen[-1] == "POST /v1/studies" and len(seen) == 4 and len(notices) == 1
