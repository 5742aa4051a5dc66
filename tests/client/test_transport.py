"""smdlab's HTTP layer against a scripted server (httpx.MockTransport): a connection refused before anything
has answered is raised at once (a service not started, or SMD_URL not its address), while a running
service's transient failures are retried, said once before the first retry; a wait for a job rides out an
outage of any length up to its deadline."""
from __future__ import annotations

import math
import time

import httpx
import pytest

from smdlab import Client, SMDError
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


def test_a_wait_rides_out_an_outage_longer_than_the_retries_and_says_it_once():
    # 9 refusals: more than a request's 4 retries (which would give up after them, 7.5 s at the real backoff)
    transport, notices, seen = scripted(200, *[refused()] * 9, 503, 200)
    transport.request("GET", "/v1/experiments/e1")
    assert transport.outlast("GET", "/v1/experiments/e1", deadline=None).status_code == 200
    assert len(seen) == 12 and notices == [
        ("cannot reach http://service.test: ConnectError: [Errno 111] Connection refused", math.inf)]


def test_a_wait_gives_up_at_its_deadline_and_on_what_no_wait_mends():
    transport, notices, seen = scripted(200, *[refused()] * 1000)
    transport.request("GET", "/v1/experiments/e1")
    started = time.monotonic()
    # the wait's TimeoutError, as when the job is still running at the deadline, the outage as its cause
    with pytest.raises(TimeoutError, match="did not answer again before the wait's deadline.*Connection refused") as got:
        transport.outlast("GET", "/v1/experiments/e1", deadline=started + 0.05)
    assert isinstance(got.value.__cause__, SMDError) and got.value.__cause__.status is None
    assert time.monotonic() - started < 1 and len(notices) == 1 and 0 < notices[0][1] <= 0.05
    transport, notices, seen = scripted(200, 404)   # an answer, not an outage: raised at once
    transport.request("GET", "/v1/experiments/e1")
    with pytest.raises(SMDError, match="HTTP 404"):
        transport.outlast("GET", "/v1/experiments/e1", deadline=None)
    transport, notices, seen = scripted(refused())   # never answered: no service at SMD_URL, raised at once
    with pytest.raises(SMDError, match="is the service running"):
        transport.outlast("GET", "/v1/experiments/e1", deadline=None)
    assert seen == ["GET /v1/experiments/e1"] and notices == []


def test_experiment_wait_follows_a_job_through_a_restart_of_the_service():
    """Experiment.wait's stream breaks with the service, its polls meet refusals (the service down for longer
    than a request's retries), and it returns the job's end once the service answers again."""
    states = iter(["running"] + ["down"] * 8 + ["running", "succeeded"])
    notices: list[tuple[str, float]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            raise refused()
        state = next(states)
        if state == "down":
            raise refused()
        return httpx.Response(200, json={"id": "e1", "kind": "nrq", "status": state})

    client = Client(URL, on_retry=lambda reason, seconds: notices.append((reason, seconds)))
    client.http.http = httpx.Client(base_url=URL, transport=httpx.MockTransport(answer))
    client.http.backoff = 0.001
    experiment = client.experiment("e1")
    assert experiment.wait(poll=0.001, progress=False).data["status"] == "succeeded"
    assert [seconds for _, seconds in notices] == [math.inf]


def test_experiment_wait_with_a_timeout_raises_timeout_error_when_the_outage_outlasts_it():
    """A wait's timeout is a TimeoutError whether the job is still running or the service is still down then
    (a caller's ``except TimeoutError`` covers both)."""
    answered = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events") or answered:
            raise refused()
        answered.append(request)
        return httpx.Response(200, json={"id": "e1", "kind": "nrq", "status": "running"})

    client = Client(URL)
    client.http.http = httpx.Client(base_url=URL, transport=httpx.MockTransport(answer))
    client.http.backoff = 0.001
    experiment = client.experiment("e1")    # answered: running; the service is down from here on
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="Connection refused"):
        experiment.wait(timeout=0.2, poll=0.001, progress=False)
    assert time.monotonic() - started < 2
