"""HTTP edges the routes should not each handle, as ASGI middleware: HEAD answered as GET, a body that is not
JSON refused with a 415 where a route reads one, a body over the size limit with a 413, and text with a NUL
character refused with a 422 naming where."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """HEAD answered wherever GET is (RFC 9110: the GET's status and headers, no body), e.g. for a load
    balancer's health check: FastAPI's routes match GET only. The GET runs and its body is dropped; once the
    headers are sent the response is complete, so a stream (SSE) sees its client gone and ends."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        done = False

        async def headers_only(message: Message) -> None:
            nonlocal done
            if done:
                return
            if message["type"] == "http.response.start":
                await send(message)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                done = True

        await self.app({**scope, "method": "GET"}, receive, headers_only)


def _is_json(media: str) -> bool:
    """What FastAPI reads a body as JSON for: application/json or application/<anything>+json."""
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


class JsonBodies:
    """A request body sent as anything but JSON to a route that reads one is a 415 saying so: curl's -d sends a
    form, and a body without a Content-Type is not JSON to FastAPI either; the route would read either as one long
    string and answer with a misleading 422. (A route that reads no body ignores it, as before.)"""

    def __init__(self, app: ASGIApp, routes: Callable[[], list[Any]]):
        self.app, self.routes = app, routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            headers = {k.lower(): v for k, v in scope["headers"]}
            media = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
            has_body = headers.get(b"content-length", b"0") != b"0" or b"transfer-encoding" in headers
            if has_body and not _is_json(media) and any(
                    isinstance(route, APIRoute) and route.body_field is not None
                    and route.matches(scope)[0] == Match.FULL for route in self.routes()):
                response = JSONResponse(status_code=415, content={"detail": (
                    f"Content-Type: expected application/json, got {media or 'none'} (with curl: --json '{{...}}', or "
                    f"-H 'Content-Type: application/json' -d '{{...}}')")})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """A request body larger than ``max_bytes`` is a 413 saying the limit, before anything parses it: a JSON body
    of a hundred megabytes would otherwise hold an API process for seconds and come back in its 422. Declared
    sizes (Content-Length) are refused unread; a chunked body as it passes the limit."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send, f"{int(declared)} bytes")
            return
        messages: list[Message] = []
        size = 0
        while True:   # the body, replayed to the app below
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, f"more than {self.max_bytes} bytes")
                return
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        await self.app(scope, _replay(messages, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, got: str) -> None:
        await JSONResponse(status_code=413, headers={"Connection": "close"}, content={"detail": (
            f"request body: expected at most {self.max_bytes} bytes (SMD_MAX_BODY_BYTES), got {got}")})(
            scope, receive, send)


class NoNul:
    """Text with a NUL character (U+0000) is a 422 naming where it is, in the path, the query or a JSON body:
    PostgreSQL cannot store it (a 500 otherwise) and SQLite's LIKE stops reading a pattern at it (a name filter
    that matched everything)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = ["path"] if "\x00" in scope["path"] else None
        if where is None and b"%00" in scope["query_string"]:
            where = next((["query", key] for key, value in parse_qsl(scope["query_string"].decode("latin-1"),
                                                                     keep_blank_values=True)
                          if "\x00" in key or "\x00" in value), None)
        messages: list[Message] = []
        if where is None and scope["method"] in ("POST", "PUT", "PATCH"):
            while True:   # the body, replayed to the app below
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request" or not message.get("more_body"):
                    break
            body = b"".join(message.get("body", b"") for message in messages)
            # rare: then find it in the parsed body (a zero byte: UTF-16 or UTF-32 JSON, which json.loads reads)
            if _JSON_NUL.search(body) or b"\x00" in body:
                try:
                    where = _nul_path(json.loads(body), ["body"])
                except ValueError:
                    pass   # not JSON: the route answers that
        if where is not None:
            await JSONResponse(status_code=422, content={"detail": [{
                "loc": where, "type": "string_nul",
                "msg": f"{'.'.join(map(str, where[1:])) or where[0]}: expected text without NUL characters "
                       f"(U+0000), got one"}]})(scope, receive, send)
            return
        await self.app(scope, _replay(messages, receive) if messages else receive, send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that first gives back the ``messages`` already read (a body a middleware looked at)."""

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    return replay


_JSON_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")   # an escaped NUL, not an escaped backslash before "u0000"


def _nul_path(value: Any, path: list[Any]) -> list[Any] | None:
    """Where in a parsed JSON value a string (or an object's key) holds a NUL, or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and "\x00" in key:
            return [*path, key]
        found = _nul_path(item, [*path, key])
        if found is not None:
            return found
    return None
