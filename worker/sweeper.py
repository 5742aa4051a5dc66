"""The sweeper: recovery that does not depend on the broker. Runs periodically in every API process
(so in the embedded default too); every action is a conditional update, so replicas may overlap.

Each pass: (1) jobs whose lease expired lost their worker: back to the queue, or failed after
SMD_MAX_ATTEMPTS lost attempts (store.jobs.expire_leases); (2) every queue with fewer messages
waiting than claimable jobs gets the missing doorbells (a message lost with a killed worker or a
restarted broker is re-sent; a spare one is harmless). Whether a lease expired is the database's clock's
say (store.clock): the hosts' clocks need not agree.

Database outages: while the database cannot be reached no worker can renew its lease, so an expired
lease is no sign of a lost worker. The sweeper therefore skips step (1) until the database has
answered this process for SMD_LEASE_SECONDS after the last outage it saw (or after the process
started): every live worker retries its renewal about once a second and renews in that time, and
goes on with its attempt. A lease that still lapsed within an outage this process saw ends its
attempt ``interrupted`` (store.retry.journal), which does not count toward SMD_MAX_ATTEMPTS.
"""
from __future__ import annotations

import logging
import threading

from store import jobs, retry, workers
from store.settings import Settings
from worker.queue import queue_depths, ring

log = logging.getLogger(__name__)
MAX_RINGS_PER_PASS = 200


def sweep(settings: Settings, *, lost_worker: str | None = None, expire: bool = True) -> dict[str, int]:
    """One pass; ``lost_worker``: a worker name known to be gone (its leases are expired at once);
    ``expire=False`` skips step (1) (the database was unreachable a moment ago).
    Returns what it did: {"requeued": n, "rung": n}."""
    requeued: list[str] = []
    if lost_worker is not None:   # its processes' rows too: they no longer share a study's children
        workers.forget_worker(settings.db_url, lost_worker)
    if expire:
        requeued = jobs.expire_leases(settings.db_url, settings.max_attempts, owner_prefix=lost_worker,
                                      outage=retry.journal.covered_ago)
    if requeued:
        log.warning("requeued %d job(s) whose lease expired: %s", len(requeued), ", ".join(requeued))
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
        holding = False
        while not self._stop.wait(self.settings.sweep_seconds):
            settled = retry.journal.up_for() >= self.settings.lease_seconds
            if not settled and not holding and retry.journal.outages:
                log.warning("the database was unreachable: no lease is expired until it has answered for "
                            "%g s (SMD_LEASE_SECONDS), so that workers can renew theirs", self.settings.lease_seconds)
            holding = not settled
            try:
                with retry.patience(min(self.settings.db_retry_seconds, self.settings.sweep_seconds)):
                    sweep(self.settings, expire=settled)
            except Exception as exc:  # database or broker down: report and try again next pass
                if retry.is_transient(exc):
                    log.debug("sweep failed: %s: %s", type(exc).__name__, exc)  # store.retry logged the outage
                else:
                    log.warning("sweep failed: %s: %s", type(exc).__name__, exc)
