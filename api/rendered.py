"""Response bodies kept by their entity tag, so that a document many clients poll is built once.

An entity tag (api/etag.py) names exactly what a body holds: the resource's revision and every
option that shapes the document. 200 dashboards watching one running job ask, between two of its
writes, for the same status document and for its new points after one of a few steps: each such
body is validated and serialized once per API process and tag, and sent as the same bytes to
everyone after. Nothing kept can be stale: a request reads the current revision first (the tag is
computed from it), and a body is looked up by that tag. Each process keeps its own; they cannot
disagree, since the same tag gives the same bytes.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import cache
from typing import Any

from fastapi import Response
from pydantic import BaseModel, TypeAdapter

MAX_BYTES = 32 * 2**20       # kept per API process (SMD_API_WORKERS of them), all bodies together
MAX_BODY = MAX_BYTES // 16   # a larger body (a whole long series) is built each time, never kept
MAX_BODIES = 4096


class Bodies:
    """Serialized bodies by tag, least recently used dropped first, at most ``max_bytes`` in all;
    thread-safe."""

    def __init__(self, max_bytes: int = MAX_BYTES, max_body: int = MAX_BODY, max_bodies: int = MAX_BODIES):
        if not 0 < max_body <= max_bytes or max_bodies < 1:
            raise ValueError(f"Bodies: expected 0 < max_body ≤ max_bytes and max_bodies ≥ 1, got {max_body}, "
                             f"{max_bytes}, {max_bodies}")
        self.max_bytes, self.max_body, self.max_bodies = max_bytes, max_body, max_bodies
        self._bodies: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, tag: str) -> bytes | None:
        with self._lock:
            body = self._bodies.get(tag)
            if body is not None:
                self._bodies.move_to_end(tag)
            return body

    def put(self, tag: str, body: bytes) -> None:
        if len(body) > self.max_body:
            return
        with self._lock:
            old = self._bodies.pop(tag, None)
            self._bytes += len(body) - (len(old) if old is not None else 0)
            self._bodies[tag] = body
            while self._bytes > self.max_bytes or len(self._bodies) > self.max_bodies:
                _, dropped = self._bodies.popitem(last=False)
                self._bytes -= len(dropped)

    @property
    def size(self) -> tuple[int, int]:
        """(bodies, bytes) kept."""
        with self._lock:
            return len(self._bodies), self._bytes


_bodies = Bodies()


@cache
def _adapter(model: type[BaseModel]) -> TypeAdapter:
    return TypeAdapter(model)


def serialize(model: type[BaseModel], content: Any) -> bytes:
    """``content`` as FastAPI sends it for a route whose response_model is ``model``: validated from
    attributes, dumped to JSON by alias."""
    adapter = _adapter(model)
    return adapter.dump_json(adapter.validate_python(content, from_attributes=True), by_alias=True)


def body(model: type[BaseModel], tag: str, build: Callable[[], Any]) -> bytes:
    """The body tagged ``tag``: kept, or ``build()`` serialized as ``model`` (and kept). ``build``'s
    errors (a 422 for a bad field) propagate; nothing is kept for them."""
    kept = _bodies.get(tag)
    if kept is None:
        kept = serialize(model, build())
        _bodies.put(tag, kept)
    return kept


def json_response(tag: str, content: bytes) -> Response:
    return Response(content=content, media_type="application/json", headers={"ETag": tag})
