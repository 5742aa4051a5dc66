"""bench/_http1.py, the dashboard bench's light client, against a real TCP server on loopback that answers
as HTTP/1.1 servers do: Content-Length and chunked bodies, a 304 without a body, keep-alive, and an idle
connection closed by the server (the next request goes out again on a new one)."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from _http1 import Connection  # noqa: E402

ANSWERS = {
    b"/length": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"a\"\r\n\r\nhello",
    b"/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    b"/304": b"HTTP/1.1 304 Not Modified\r\nETag: \"a\"\r\n\r\n",
    b"/close": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
}


async def serve(connections: list[int], requests: list[bytes], drop_after_each: bool):
    """A server that answers each GET from ANSWERS by path; counts its connections and the request heads."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        connections.append(1)
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:   # the client closed the connection
                break
            requests.append(head)
            path = head.split(b" ")[1].split(b"?")[0]
            writer.write(ANSWERS[path])
            await writer.drain()
            if drop_after_each or path == b"/close":
                break
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_bodies_keep_alive_and_query_strings():
    async def main():
        connections, requests = [], []
        server = await serve(connections, requests, drop_after_each=False)
        port = server.sockets[0].getsockname()[1]
        conn = Connection(f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer k"})
        first = await conn.get("/length", params={"since_step": 5, "max_points": 2000})
        assert (first.status_code, first.content, first.headers["etag"]) == (200, b"hello", '"a"')
        chunked = await conn.get("/chunked", headers={"If-None-Match": '"a"'})
        assert chunked.status_code == 200 and chunked.content == b"abcde"
        assert (await conn.get("/304")).status_code == 304
        assert len(connections) == 1            # one kept-alive connection for the three
        assert requests[0].startswith(b"GET /length?since_step=5&max_points=2000 HTTP/1.1\r\n")
        assert b"Authorization: Bearer k\r\n" in requests[0] and b'If-None-Match: "a"\r\n' in requests[1]
        assert (await conn.get("/close")).content == b"ok"      # the server closes after it ...
        assert (await conn.get("/length")).content == b"hello"  # ... so this one opens a new connection
        assert len(connections) == 2
        await conn.aclose()
        server.close()

    asyncio.run(main())


def test_a_kept_connection_the_server_closed_is_replaced_once():
    async def main():
        connections, requests = [], []
        server = await serve(connections, requests, drop_after_each=True)   # closes without saying so
        port = server.sockets[0].getsockname()[1]
        conn = Connection(f"http://127.0.0.1:{port}")
        assert (await conn.get("/length")).content == b"hello"
        await asyncio.sleep(0.05)
        assert (await conn.get("/length")).content == b"hello"   # sent again on a new connection
        assert len(connections) == 2 and len(requests) == 2
        await conn.aclose()
        server.close()

    asyncio.run(main())


def test_only_http_urls():
    with pytest.raises(ValueError, match="base: expected an http:// URL"):
        Connection("https://example.org")
