"""Celery tasks and worker-process hooks: thin wrappers over :mod:`worker.runner`."""
from __future__ import annotations

import os
import signal
import socket

from celery import signals

from store.settings import get_settings
from worker.celery_app import RUN_NEXT_TASK, celery_app
from worker.runner import execute_next, shutting_down


@celery_app.task(name=RUN_NEXT_TASK)
def run_next(queue: str) -> str:
    """A job is waiting on ``queue``: claim the oldest one there and run it (its outcome is written
    to the database); a doorbell that finds nothing to claim does nothing."""
    settings = get_settings()
    return execute_next(settings, [queue], worker=worker_name(settings))


def worker_name(settings) -> str:
    return settings.worker_name or f"{socket.gethostname()}:{os.getppid()}"


def gpu_for_process(index: int, gpus: str, concurrency: int) -> str:
    """The GPU a pool process uses: SMD_WORKER_GPUS (e.g. "0,1") or 0..concurrency−1, round-robin."""
    choices = gpus.split(",") if gpus else [str(i) for i in range(concurrency)]
    return choices[index % len(choices)]


HAND_BACK = signal.SIGUSR2


@signals.worker_process_init.connect
def _init_process(**_) -> None:
    """In each pool process, after the fork: pin a GPU before anything touches CUDA, and make
    HAND_BACK give the running job back (after a last checkpoint) instead of finishing it."""
    settings = get_settings()
    if "gpu" in settings.queues:
        from billiard.process import current_process

        index = getattr(current_process(), "index", 0) or 0
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_for_process(index, settings.worker_gpus, settings.worker_concurrency)
    signal.signal(HAND_BACK, lambda *_: shutting_down.set())


@signals.worker_shutting_down.connect
def _hand_back_jobs(**_) -> None:
    """Warm shutdown (SIGTERM) of the main process: a job may run for hours, so rather than wait for
    it, ask every pool process to checkpoint and give its job back to the queue; the shutdown then
    completes within seconds and another worker resumes the job."""
    from billiard.process import active_children

    for child in active_children():
        try:
            os.kill(child.pid, HAND_BACK)
        except ProcessLookupError:
            pass
