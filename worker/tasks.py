"""Celery tasks and worker-process hooks: thin wrappers over :mod:`worker.runner`."""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time

from celery import shared_task, signals

import smdengine
from store.settings import Settings, get_settings
from worker import presence
from worker.celery_app import RUN_NEXT_TASK
from worker.runner import execute_next, running, shutting_down

log = logging.getLogger(__name__)


@shared_task(name=RUN_NEXT_TASK)  # registered in the process's app (worker.celery_app)
def run_next(queue: str) -> str:
    """A job is waiting on ``queue``: claim the oldest one there and run it (its outcome is written
    to the database); a doorbell that finds nothing to claim does nothing."""
    if shutting_down.is_set():   # this process is handing its work back: the job stays queued for the next worker
        return "shutting down"
    settings = get_settings()
    _catch_sigterm()
    if not _threads_set.is_set():
        torch_threads(settings)
    status = execute_next(settings, [queue], worker=worker_name(settings))
    if _terminated.is_set():   # SIGTERM arrived during the job, now given back
        # a signal to the process group reaches this process and the main one at once: the main one's HAND_BACK
        # may come a moment after a quick hand-back
        if not _warm_shutdown.wait(HAND_BACK_WAIT_SECONDS):
            os._exit(0)   # exit as asked
        # the main process's warm shutdown asked too (a signal to the whole process group): report the
        # task's end, or the main process would wait Celery's worker_lost_wait (10 s) for it; the pool's
        # close then ends this process
        _exit_timer.cancel()
    return status


def worker_name(settings) -> str:
    return settings.worker_name or f"{socket.gethostname()}:{os.getppid()}"


def gpu_for_process(index: int, gpus: str, concurrency: int) -> str:
    """The GPU a pool process uses: SMD_WORKER_GPUS (e.g. "0,1") or 0..concurrency−1, round-robin."""
    choices = gpus.split(",") if gpus else [str(i) for i in range(concurrency)]
    return choices[index % len(choices)]


# Not SIGUSR1/2: with a broker that has no event loop (the embedded default's filesystem broker) Celery runs
# billiard's blocking pool, whose processes re-install billiard's exit handler on the usual signals, SIGUSR2
# included, after worker_process_init. A hand-back then raised SystemExit inside the running job (its attempt
# stayed open until the next start expired it as lost) and the next signal ended the process (exit code 70).
# A real-time signal is left alone by billiard, and no terminal or supervisor sends one.
HAND_BACK: int = signal.SIGRTMIN + 1 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
HAND_BACK_SECONDS = 10.0
HAND_BACK_WAIT_SECONDS = 1.0   # how long a process SIGTERMed during a job waits for HAND_BACK once its job is back


@signals.worker_init.connect
def _ignore_hand_back(**_) -> None:
    """In the main process, before the pool forks: HAND_BACK ignored, which each pool process inherits until
    worker_process_init installs its handler (a real-time signal's default action ends the process)."""
    signal.signal(HAND_BACK, signal.SIG_IGN)


@signals.worker_init.connect
def _load_simulators(**_) -> None:
    """In the main process, before the pool forks: import the simulators (torch), which each pool
    process then inherits instead of importing them at its first job (a few seconds on a small machine;
    again in a pool process restarted after a crash). SMD_WORKER_PRELOAD=off leaves it to each of them."""
    if not get_settings().worker_preload:
        return
    start = time.monotonic()
    smdengine.load_simulators()
    log.info("simulators loaded in %.1f s", time.monotonic() - start)


def torch_threads(settings: Settings) -> int:
    """Set this pool process's torch CPU threads (SMD_WORKER_TORCH_THREADS; 0: OMP_NUM_THREADS where it is set,
    else the cores this process may use over the pool's processes, at least 1): with torch's default every process of a pool of N takes every core,
    and N × cores threads contend for the cores. Returns the number set. Called at the fork where the main
    process imported torch (SMD_WORKER_PRELOAD), else at the process's first job, which imports it then anyway."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    given = os.environ.get("OMP_NUM_THREADS", "")   # set by whoever started the worker: theirs to say (the tests' 1)
    threads = (settings.worker_torch_threads or (int(given) if given.isdigit() and int(given) > 0 else 0)
               or max(1, cores // settings.worker_concurrency))
    torch.set_num_threads(threads)
    _threads_set.set()
    return threads


_threads_set = threading.Event()   # torch_threads ran in this process


@signals.worker_process_init.connect
def _init_process(**_) -> None:
    """In each pool process, after the fork: pin a GPU before anything touches CUDA, and make
    HAND_BACK give the running job back (after a last checkpoint) instead of finishing it."""
    settings = get_settings()
    if "gpu" in settings.queues:
        from billiard.process import current_process

        index = getattr(current_process(), "index", 0) or 0
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_for_process(index, settings.worker_gpus, settings.worker_concurrency)
    if "torch" in sys.modules:   # preloaded before the fork; else at the first job (run_next)
        torch_threads(settings)
    signal.signal(HAND_BACK, _on_hand_back)
    presence.register(settings, worker_name(settings))   # the idle capacity fused batches are sized by


@signals.worker_process_shutdown.connect
def _leave(**_) -> None:
    me = presence.current()
    if me is not None:
        me.stop()


def _on_hand_back(signum, frame) -> None:
    _warm_shutdown.set()
    shutting_down.set()


_pool_sigterm = None
_terminated = threading.Event()   # SIGTERM came to this process while it ran a job
_warm_shutdown = threading.Event()   # HAND_BACK came: the main process is shutting down warm
_exit_timer = threading.Timer(HAND_BACK_SECONDS, os._exit, args=(1,))   # started by SIGTERM during a job
_exit_timer.daemon = True


def _catch_sigterm() -> None:
    """Install :func:`_on_sigterm` in this pool process (from the task: billiard installs its own
    SIGTERM handler after worker_process_init); billiard's stays in charge while idle."""
    global _pool_sigterm
    current = signal.getsignal(signal.SIGTERM)
    if current is not _on_sigterm:
        _pool_sigterm = current
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame) -> None:
    """SIGTERM straight to a pool process (the pool's own terminate, or a signal to the whole process
    group as a terminal or a supervisor sends): idle, do what billiard does; running a job, hand it
    back first (a last checkpoint takes about a second) and exit at the latest after
    HAND_BACK_SECONDS."""
    if not running.is_set():
        if callable(_pool_sigterm):
            _pool_sigterm(signum, frame)
        os._exit(0)
    if _terminated.is_set():
        return   # a second SIGTERM: the hand-back and its deadline are under way
    _terminated.set()
    shutting_down.set()
    _exit_timer.start()


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
