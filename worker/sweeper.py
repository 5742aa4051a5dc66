"""The sweeper: recovery that does not depend on the broker. Runs periodically in every API process
(so in the embedded default too); every action is a conditional update, so replicas may overlap.

Each pass: (1) jobs whose lease expired lost their worker: back to the queue, or failed after
SMD_MAX_ATTEMPTS starts (store.jobs.expire_leases); (2) every queue with fewer messages waiting than
claimable jobs gets the missing doorbells (a message lost with a killed worker or a restarted
broker is re-sent; a spare one is harmless).
"""
from __future__ import annotations

import logging
import threading

from store import jobs
from store.settings import Settings
from worker.queue import queue_depths, ring

log = logging.getLogger(__name__)
MAX_RINGS_PER_PASS = 200


def sweep(settings: Settings, *, lost_worker: str | None = None) -> dict[str, int]:
    """One pass; ``lost_worker``: a worker name known to be gone (its leases are expired at once).
    Returns what it did: {"requeued": n, "rung": n}."""
    requeued = jobs.expire_leases(settings.db_url, settings.max_attempts, owner_prefix=lost_worker)
    if requeued:
        log.warning("requeued %d job(s) whose worker was lost: %s", len(requeued), ", ".join(requeued))
    waiting = jobs.queued_counts(settings.db_url)
    rung = 0
    if waiting:
        depths = queue_depths(settings)
        for queue, n in waiting.items():
            missing = min(n - depths.get(queue, 0), MAX_RINGS_PER_PASS)
            if missing > 0:
                ring(settings, queue, missing)
                rung += missing
    return {"requeued": len(requeued), "rung": rung}


class Sweeper:
    """:func:`sweep` every ``settings.sweep_seconds`` in a daemon thread."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="smd-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.sweep_seconds):
            try:
                sweep(self.settings)
            except Exception as exc:  # database or broker down: report and try again next pass
                log.warning("sweep failed: %s: %s", type(exc).__name__, exc)
