"""This worker process's row in store.workers: registered when the pool process starts, renewed by a
daemon thread, marked busy around each job, removed when the process exits. Best effort throughout: the
row only sizes fused batches, so a database error here is logged and never stops a job."""
from __future__ import annotations

import atexit
import logging
import os
import threading

from store import retry, workers
from store.settings import Settings

log = logging.getLogger(__name__)


def beat_seconds(settings: Settings) -> float:
    """How often the row is renewed: a third of a lease (at most 5 s), so that a live process is never
    older than its lease (:func:`live_seconds`)."""
    return max(0.2, min(5.0, settings.lease_seconds / 3))


def live_seconds(settings: Settings) -> float:
    """A row renewed within this window is a live process."""
    return settings.lease_seconds


class Presence:
    """The row of one process; ``mark_busy`` writes at once, the thread renews it."""

    def __init__(self, settings: Settings, name: str):
        self.settings = settings
        self.id = f"{name}/{os.getpid()}"
        self.queues = settings.worker_queues
        self.busy = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="smd-presence", daemon=True)

    def start(self) -> Presence:
        self._write(busy=False)
        self._thread.start()
        atexit.register(self.stop)
        return self

    def mark_busy(self, busy: bool, study_id: str | None = None) -> None:
        self.busy = busy
        self._write(busy=busy, study_id=study_id)

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            with retry.patience(0):
                workers.leave(self.settings.db_url, self.id)
        except Exception as exc:   # the row goes stale and stops counting after live_seconds
            log.debug("could not remove worker row %s: %s", self.id, exc)

    def _loop(self) -> None:
        while not self._stop.wait(beat_seconds(self.settings)):
            self._write()
            try:
                with retry.patience(0):
                    workers.forget_stale(self.settings.db_url, 100 * live_seconds(self.settings))
            except Exception as exc:
                log.debug("could not forget stale worker rows: %s", exc)

    def _write(self, busy: bool | None = None, study_id: str | None = None) -> None:
        try:
            with retry.patience(0):
                workers.beat(self.settings.db_url, self.id, self.queues, busy, study_id)
        except Exception as exc:
            log.debug("worker row %s not renewed: %s", self.id, exc)


_current: Presence | None = None


def register(settings: Settings, name: str) -> Presence:
    """Start this process's presence (once per process)."""
    global _current
    if _current is None or _current.id != f"{name}/{os.getpid()}":
        _current = Presence(settings, name).start()
    return _current


def current() -> Presence | None:
    return _current
