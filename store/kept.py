"""Values read from a job's row kept in memory with the revision they were read at.

What a client sees of a job changes only with its revision (store.jobs bumps it on every such change), so a
value read at revision r is still the value while the database holds r: a caller that has read the current
revision (one indexed column) takes the kept value instead of reading it again. Each API process keeps its
own; none can disagree with the database, since the revision is read from it each time. The values are
shared between requests: never modified.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class ByRevision(Generic[V]):
    """At most ``size`` values, one per job, least recently used dropped first; thread-safe."""

    def __init__(self, size: int):
        self.size = size
        self._values: OrderedDict[str, tuple[int, V]] = OrderedDict()
        self._lock = threading.Lock()

    def revision(self, key: str) -> int | None:
        """The revision of the value kept for ``key`` (None: none kept)."""
        with self._lock:
            kept = self._values.get(key)
        return kept[0] if kept is not None else None

    def get(self, key: str, revision: int) -> V | None:
        """The value kept for ``key`` if it was read at ``revision`` (else None)."""
        with self._lock:
            kept = self._values.get(key)
            if kept is None or kept[0] != revision:
                return None
            self._values.move_to_end(key)
            return kept[1]

    def put(self, key: str, revision: int, value: V) -> None:
        """Keep ``value`` read at ``revision`` (committed), unless a later revision's is kept already."""
        with self._lock:
            kept = self._values.get(key)
            if kept is None or kept[0] <= revision:
                self._values[key] = (revision, value)
                self._values.move_to_end(key)
                if len(self._values) > self.size:
                    self._values.popitem(last=False)

    def drop(self, key: str) -> None:
        with self._lock:
            self._values.pop(key, None)
