"""The HTTP layer of :class:`smdlab.Client` (httpx): the Bearer key, timeouts, 429 with Retry-After
(waited out and retried, or raised as :class:`QuotaExceeded`), 5xx answers and connection errors
retried with exponential backoff for idempotent methods only (GET, HEAD, DELETE: a POST is never sent
twice behind the caller's back), and errors raised with the server's detail.

The retries are for a running service's transient failures (a restart, a proxy's blip, a 503 while its
database is away). A connection refused before anything has answered at the address is not one: the service
is not started, or SMD_URL is not its address; it is raised at once (it was retried for 7.5 s in silence).
A request that is retried says so first (``on_retry``), with how long the retries may last. A wait for a job
(``Experiment.wait``, ``smd follow``) polls through :meth:`Transport.outlast`, which rides out an outage of any
length up to the wait's own deadline: a service restarted under a follower (an upgrade, a crash) is waited for."""
from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Any

import httpx

from smdlab.errors import Conflict, NotFound, QuotaExceeded, SMDError, SMDValidationError, message_of

IDEMPOTENT = {"GET", "HEAD", "DELETE"}
MAX_OUTAGE_PAUSE = 5.0   # seconds between tries while a wait rides out an outage: back within 5 s of its return
KEY_CHARACTERS = re.compile(r"[\x21-\x7e]+")


class Transport:
    def __init__(self, url: str, key: str | None, timeout: float, retries: int = 4, backoff: float = 0.5,
                 retry_429: bool = True, max_quota_wait: float = 600.0,
                 on_quota_wait: Callable[[float, str | None, Any], None] | None = None,
                 on_retry: Callable[[str, float], None] | None = None):
        if key and not KEY_CHARACTERS.fullmatch(key):   # never echoed: it is a secret
            raise SMDError(f"SMD_KEY: expected an API key (visible ASCII characters: no spaces, newlines or "
                           f"accents), got {len(key)} characters that are not one")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.on_quota_wait, self.on_retry = on_quota_wait, on_retry
        self.answered = False   # whether anything has answered at this address yet
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)
        self.url = url.rstrip("/")
        self.retries, self.backoff = retries, backoff
        self.retry_429, self.max_quota_wait = retry_429, max_quota_wait

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
                headers: dict[str, str] | None = None, ok: tuple[int, ...] = (),
                retries: int | None = None) -> httpx.Response:
        """The response (2xx, 304, or a status in ``ok``); raises an :class:`SMDError` otherwise. ``retries``:
        instead of the transport's own number (0: the caller retries)."""
        retries = self.retries if retries is None else retries
        attempt, waited = 0, 0.0
        while True:
            try:
                response = self.http.request(method, path, json=json, params=_params(params), headers=headers)
            except httpx.TransportError as exc:
                reason = f"cannot reach {self.url}: {type(exc).__name__}: {exc}"
                if isinstance(exc, httpx.ConnectError) and not self.answered:
                    raise SMDError(f"{reason} (is the service running, and SMD_URL its address?)") from exc
                if self._retried(method, attempt, retries, reason):
                    attempt += 1
                    continue
                raise SMDError(reason) from exc
            self.answered = True
            status = response.status_code
            if status < 300 or status == 304 or status in ok:
                return response
            if status < 400:   # the service redirects nowhere: another server answers at this address
                raise SMDError(f"unexpected redirect ({status} to {response.headers.get('location')!r}) from "
                               f"{self.url}{path}: is SMD_URL the service's address?", status)
            detail = _detail(response)
            if status == 429:
                retry_after = _seconds(response.headers.get("Retry-After"))
                wait = retry_after if retry_after is not None else 5.0
                quota = response.headers.get("SMD-Quota")
                # a request over the work quota is too big, and a quota's 429 without Retry-After (a study larger
                # than the active-jobs limit) has no room coming: waiting never makes room for either
                hopeless = quota == "work" or (quota is not None and retry_after is None)
                if self.retry_429 and not hopeless and waited + wait <= self.max_quota_wait:
                    if self.on_quota_wait is not None:
                        self.on_quota_wait(wait, quota, detail)
                    time.sleep(wait)
                    waited += wait
                    continue
                raise QuotaExceeded(message_of(status, detail), status, detail, retry_after, quota)
            if status >= 500 and self._retried(method, attempt, retries, message_of(status, detail)):
                attempt += 1
                continue
            error = {422: SMDValidationError, 404: NotFound, 409: Conflict}.get(status, SMDError)
            raise error(self._no_route(path) if _unknown_route(status, detail) else message_of(status, detail),
                        status, detail)

    def outlast(self, method: str, path: str, *, deadline: float | None, **kwargs: Any) -> httpx.Response:
        """:meth:`request` (idempotent ``method`` only), riding out an outage of a service that has answered
        before (unreachable, or 5xx) until ``deadline`` (``time.monotonic()``; None: until it answers again),
        trying again at growing pauses of at most MAX_OUTAGE_PAUSE s. Each outage is said once, before the
        first pause: ``on_retry(reason, seconds)``, the seconds left until the deadline (inf without one). An
        outage that outlasts the deadline raises TimeoutError (the wait's own, as when the job is still running
        then), with the service's last error as its cause; any other error is raised as it came."""
        assert method in IDEMPOTENT, method
        pause, said = self.backoff, False
        while True:
            try:
                return self.request(method, path, retries=0, **kwargs)
            except SMDError as exc:
                outage = self.answered and (exc.status is None or exc.status >= 500)
                if not outage:
                    raise
                if deadline is not None and time.monotonic() + pause > deadline:
                    raise TimeoutError(f"{method} {path}: the service did not answer again before the wait's "
                                       f"deadline: {exc}") from exc
                if not said and self.on_retry is not None:
                    self.on_retry(str(exc), math.inf if deadline is None else deadline - time.monotonic())
                said = True
                time.sleep(pause)
                pause = min(2 * pause, MAX_OUTAGE_PAUSE)

    def _retried(self, method: str, attempt: int, retries: int, reason: str) -> bool:
        """Whether the request is to be sent again (idempotent, ``retries`` left), after the backoff's wait;
        before its first retry ``on_retry(reason, seconds)`` is told how long its retries may wait in all."""
        if method not in IDEMPOTENT or attempt >= retries:
            return False
        if attempt == 0 and self.on_retry is not None:
            self.on_retry(reason, self.backoff * (2 ** retries - 1))
        time.sleep(self.backoff * 2 ** attempt)
        return True

    def _no_route(self, path: str) -> str:
        return (f"HTTP 404: {self.url}{path} is no route of the service: is SMD_URL the service's address "
                f"(where /healthz answers, e.g. http://127.0.0.1:8000)?")

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        return response.json() if response.content else None


def _params(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """Query parameters without the Nones; lists repeat the key (``tag=a&tag=b``)."""
    if params is None:
        return None
    return {k: v for k, v in params.items() if v is not None}


def _unknown_route(status: int, detail: Any) -> bool:
    """A 404 of a path the server has no route for (the framework's bare "Not Found": every 404 of the
    service's own routes names what it did not find): SMD_URL is not the service's address."""
    return status == 404 and detail == "Not Found"


def _detail(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        return response.text or response.reason_phrase
    return body.get("detail", body) if isinstance(body, dict) else body


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
