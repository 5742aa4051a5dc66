"""Running jobs: claim one under a lease, run the engine (resuming from its checkpoint), and write
progress, partial series, checkpoints and the outcome — each write a store function conditioned on
the lease (raising LeaseLost), each its own transaction: no session is held here."""
from __future__ import annotations

import logging
import threading
import time
import traceback
from typing import Any

import smdengine
from smdengine import json_safe
from store import jobs
from store.models import QUEUES, Status
from store.settings import Settings

log = logging.getLogger(__name__)

# Set when this worker process is asked to stop: the running job is given back to the queue at its
# next progress event (it resumes elsewhere from its last checkpoint) instead of being cut off.
shutting_down = threading.Event()
running = threading.Event()   # a job is being run in this process


class _Released(Exception):
    pass


def execute_next(settings: Settings, queues: list[str], worker: str = "local",
                 experiment_id: str | None = None) -> str:
    """Claim the oldest queued job of ``queues`` (or that job) and run it; returns its final
    status, "idle" when there was nothing to claim, "lost" when the lease was lost meanwhile."""
    claim = jobs.claim_next(settings.db_url, queues, worker, settings.lease_seconds, experiment_id)
    if claim is None:
        return "idle"
    return run_claimed(settings, claim)


def execute(settings: Settings, experiment_id: str, worker: str = "local") -> str:
    """Run one given job if it is queued ("skipped" if not)."""
    status = execute_next(settings, list(QUEUES), worker, experiment_id)
    return "skipped" if status == "idle" else status


def run_claimed(settings: Settings, claim: jobs.Claim) -> str:
    url, experiment_id = settings.db_url, claim.experiment_id
    log.info("experiment %s: attempt %d by %s", experiment_id, claim.attempt, claim.owner)
    lease = _LeaseKeeper(url, claim, settings.lease_seconds)
    lease.start()
    writer = _SeriesWriter(url, claim, settings.flush_seconds, lease)
    running.set()
    try:
        return _run(settings, claim, writer)
    except jobs.LeaseLost:
        log.warning("experiment %s: lease lost (another worker owns it now); stopped", experiment_id)
        return "lost"
    except _Released:
        jobs.release(url, claim)
        log.warning("experiment %s: given back to the queue (worker shutting down)", experiment_id)
        return "released"
    finally:
        running.clear()
        lease.stop()


def _run(settings: Settings, claim: jobs.Claim, writer: _SeriesWriter) -> str:
    url = settings.db_url
    stored = jobs.load_run(url, claim)
    try:
        spec = smdengine.parse_spec(stored.spec)
        resume = _usable_checkpoint(stored.checkpoint, claim)
        writer.start(resume, theory=json_safe(smdengine.predict(spec)))
        hooks = smdengine.CheckpointHooks(save=writer.save_checkpoint, interval=settings.checkpoint_seconds,
                                          resume=resume)
        writer.hooks = hooks
        result = smdengine.run(spec, on_progress=writer.on_progress, should_stop=writer.should_stop,
                               progress_interval=min(0.5, settings.flush_seconds), checkpoint=hooks,
                               data_dir=str(settings.data_dir) if settings.data_dir else None)
        writer.flush()
    except (jobs.LeaseLost, _Released):
        raise
    except smdengine.Cancelled:
        _flush_quietly(writer)
        return _finish(url, claim, Status.cancelled)
    except smdengine.IncompatibleCheckpoint as exc:  # e.g. the job moved from a GPU to a CPU worker
        log.warning("experiment %s: %s; starting from scratch", claim.experiment_id, exc)
        jobs.forget_checkpoint(url, claim)
        return _run(settings, claim, writer)
    except Exception as exc:  # the job failed: record why, never retry a deterministic error
        log.exception("experiment %s failed", claim.experiment_id)
        _flush_quietly(writer)
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return _finish(url, claim, Status.failed, error=detail)
    doc = result.to_document()
    return _finish(url, claim, Status.succeeded, summary=doc["summary"], theory=doc["theory"],
                   distributions=doc["distributions"])


def _usable_checkpoint(saved: tuple[bytes, int] | None, claim: jobs.Claim) -> smdengine.Checkpoint | None:
    if saved is None:
        return None
    try:
        checkpoint = smdengine.Checkpoint.from_bytes(saved[0])
    except smdengine.IncompatibleCheckpoint as exc:
        log.warning("experiment %s: %s; starting from scratch", claim.experiment_id, exc)
        return None
    log.info("experiment %s: resuming from step %d", claim.experiment_id, checkpoint.step)
    return checkpoint


def _flush_quietly(writer: _SeriesWriter) -> None:
    try:
        writer.flush()
    except jobs.LeaseLost:
        raise
    except Exception:  # the job's end must still be recorded
        log.exception("could not write the last points of experiment %s", writer.claim.experiment_id)


def _finish(url: str, claim: jobs.Claim, status: str, **values: Any) -> str:
    jobs.finish_claimed(url, claim, status, **values)
    log.info("experiment %s %s", claim.experiment_id, status)
    return status


class _LeaseKeeper:
    """Renews the lease every third of its length from a thread, so that a long engine step or a
    slow write never lets it lapse while the job is alive."""

    def __init__(self, url: str, claim: jobs.Claim, lease_seconds: float):
        self.url, self.claim, self.lease_seconds = url, claim, lease_seconds
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{claim.experiment_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.lease_seconds / 3):
            try:
                jobs.renew(self.url, self.claim, self.lease_seconds)
            except jobs.LeaseLost:
                self.lost = True
                return
            except Exception:  # a database hiccup: try again next time, the lease has slack
                log.exception("could not renew the lease of %s", self.claim.experiment_id)


class _SeriesWriter:
    """Buffers engine progress and writes it to SQL at most every ``flush_seconds``, reading the
    cancel flag at each write; saves checkpoints after writing every point they hold."""

    def __init__(self, url: str, claim: jobs.Claim, flush_seconds: float, lease: _LeaseKeeper):
        self.url, self.claim, self.flush_seconds, self.lease = url, claim, flush_seconds, lease
        self.index = 0                    # points stored so far
        self.buffer: dict[str, list] = {}
        self.step = 0
        self.total = 0
        self.cancel = False
        self.last_flush = time.monotonic()
        self.hooks: smdengine.CheckpointHooks | None = None
        self.release_requested = False

    def start(self, resume: smdengine.Checkpoint | None, theory: dict[str, Any]) -> None:
        """The stored series becomes the checkpoint's points (none without one), and the theory is
        stored; this attempt writes the rest."""
        self.index = resume.n_points if resume is not None else 0
        self.step = resume.step if resume is not None else 0
        jobs.begin_attempt(self.url, self.claim, theory=theory,
                           resume_points=resume.series if resume is not None else None,
                           resume_step=resume.step if resume is not None else None)

    def on_progress(self, progress: smdengine.Progress) -> None:
        for key, values in progress.points.items():
            self.buffer.setdefault(key, []).extend(values)
        self.step, self.total = progress.step, progress.total_steps
        if time.monotonic() - self.last_flush >= self.flush_seconds:
            self.flush()

    def should_stop(self) -> bool:
        if self.lease.lost:
            raise jobs.LeaseLost(self.claim.experiment_id)
        if shutting_down.is_set():
            if self.release_requested:  # the recorder took the last checkpoint after the previous poll
                raise _Released()
            self.release_requested = True
            if self.hooks is not None:
                self.hooks.interval = 0.0
        return self.cancel

    def save_checkpoint(self, checkpoint: smdengine.Checkpoint) -> None:
        self.flush()  # the stored series must reach the checkpoint's n_points
        data = checkpoint.to_bytes()
        jobs.save_checkpoint(self.url, self.claim, checkpoint.step, checkpoint.n_points, data)

    def flush(self) -> None:
        n = len(self.buffer.get("step", []))
        # progress first: it fails with LeaseLost before any point is written by a lost worker
        self.cancel = jobs.record_progress(self.url, self.claim, self.step, self.total,
                                           points=self.buffer if n else None, start_index=self.index)
        self.index += n
        self.buffer = {}
        self.last_flush = time.monotonic()
