"""A light HTTP/1.1 client for load benchmarks: one keep-alive connection, GET only.

A load bench that shares the machine with the server it measures should spend as little CPU as it can:
on 2 cores, httpx's 1.9–2.5 ms of client CPU per request took 0.5 of a core at 200 requests/s, CPU the
server then lacked. This sends a request line and headers written by hand and parses the answer with
httptools (the C parser uvicorn uses): Content-Length and chunked bodies, keep-alive, a server that
closes an idle connection (a request that finds its kept connection closed or reset before any answer is
sent again once on a new one, as httpx does). Not supported: an answer whose body ends where the server
closes the connection (neither Content-Length nor chunked; uvicorn never sends one), HTTPS.
"""
from __future__ import annotations

import asyncio
import time
from urllib.parse import urlencode, urlsplit

import httptools


class Response:
    def __init__(self, status_code: int, headers: dict[str, str], content: bytes):
        self.status_code, self.headers, self.content = status_code, headers, content


class _Parsed:
    """httptools callbacks: the answer's headers (lower-case names) and body."""

    def __init__(self):
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


class Connection:
    """GET requests over one kept-alive connection to ``base`` (http://host:port), opened when needed and
    dropped after ``keepalive`` idle seconds (before the server's own idle timeout can close it under a
    request)."""

    def __init__(self, base: str, headers: dict[str, str] | None = None, timeout: float = 10.0,
                 keepalive: float = 4.0):
        url = urlsplit(base)
        if url.scheme != "http":
            raise ValueError(f"base: expected an http:// URL, got {base!r}")
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 80
        self.prefix = url.path.rstrip("/")
        self.headers = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.timeout, self.keepalive = timeout, keepalive
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._idle_since = 0.0

    async def get(self, path: str, params: dict | None = None, headers: dict[str, str] | None = None) -> Response:
        target = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        request = (f"GET {target} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{self.headers}"
                   + "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()) + "\r\n").encode("latin-1")
        return await asyncio.wait_for(self._exchange(request), self.timeout)

    async def _exchange(self, request: bytes) -> Response:
        reused = self._writer is not None and time.monotonic() - self._idle_since < self.keepalive
        if not reused:
            await self.aclose()
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        try:
            return await self._send(request)
        except _ClosedBeforeAnswer:
            await self.aclose()
            if not reused:
                raise ConnectionResetError("the server closed the connection without answering") from None
        except BaseException:
            await self.aclose()
            raise
        # the kept connection was closed by the server before it answered: once more, on a new one
        try:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            return await self._send(request)
        except _ClosedBeforeAnswer:
            await self.aclose()
            raise ConnectionResetError("the server closed the connection without answering") from None
        except BaseException:
            await self.aclose()
            raise

    async def _send(self, request: bytes) -> Response:
        assert self._reader is not None and self._writer is not None
        self._writer.write(request)
        parsed = _Parsed()
        parser = httptools.HttpResponseParser(parsed)
        received = False
        while not parsed.complete:
            try:
                data = await self._reader.read(65536)
            except ConnectionResetError:
                if received:
                    raise
                raise _ClosedBeforeAnswer from None
            if not data:
                if not received:
                    raise _ClosedBeforeAnswer
                raise ConnectionResetError("the server closed the connection in the middle of an answer")
            received = True
            parser.feed_data(data)
        if parsed.headers.get("connection", "").lower() == "close" or parser.get_http_version() != "1.1":
            await self.aclose()   # (httptools' should_keep_alive() says False once a message is complete)
        self._idle_since = time.monotonic()
        return Response(parser.get_status_code(), parsed.headers, b"".join(parsed.body))

    async def aclose(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass


class _ClosedBeforeAnswer(Exception):
    pass
