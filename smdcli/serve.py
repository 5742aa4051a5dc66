"""Starting the API, a worker, or both (the embedded default)."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

from store.settings import Settings

log = logging.getLogger("smd.serve")


def run_api(settings: Settings) -> int:
    import uvicorn

    from api.main import create_app
    from store.migrate import upgrade_head

    upgrade_head(settings.db_url)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level.lower())
    return 0


def run_worker(settings: Settings) -> int:
    from store.migrate import upgrade_head
    from worker.celery_app import QUEUE, celery_app

    upgrade_head(settings.db_url)
    celery_app.worker_main(["worker", f"--loglevel={settings.log_level}", f"--concurrency={settings.worker_concurrency}",
                            "-Q", QUEUE, "--without-gossip", "--without-mingle"])
    return 0


def serve(settings: Settings) -> int:
    """API in this process and one worker child that is restarted if it dies. This worker is the
    only one, so at every (re)start the jobs the database shows unfinished are queued again."""
    from store.migrate import upgrade_head

    upgrade_head(settings.db_url)
    supervisor = _WorkerSupervisor(settings)
    supervisor.start()
    try:
        return run_api(settings)
    finally:
        supervisor.stop()


class _WorkerSupervisor:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.proc: subprocess.Popen | None = None
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # no respawn may race with stop()
        self.thread = threading.Thread(target=self._watch, name="worker-supervisor", daemon=True)

    def start(self) -> None:
        self._spawn()
        self.thread.start()

    def _spawn(self) -> None:
        from store import jobs
        from store.db import session_scope
        from worker.queue import enqueue

        with session_scope(self.settings.db_url) as session:
            ids = jobs.requeue_orphans(session)
        for experiment_id in ids:
            enqueue(self.settings, experiment_id)
        if ids:
            log.info("re-queued %d unfinished job(s)", len(ids))
        self.proc = subprocess.Popen([sys.executable, "-m", "smdcli.main", "worker"], env=os.environ.copy(),
                                     preexec_fn=_die_with_parent)
        log.info("worker started (pid %d)", self.proc.pid)

    def _watch(self) -> None:
        while not self.stopping.wait(1.0):
            with self.lock:
                if not self.stopping.is_set() and self.proc is not None and self.proc.poll() is not None:
                    log.warning("worker exited with %s; restarting it", self.proc.returncode)
                    self._spawn()

    def stop(self) -> None:
        with self.lock:
            self.stopping.set()
        if self.proc is None or self.proc.poll() is not None:
            return
        # Warm shutdown would wait for a running job to end; a job cut short here stays
        # `running` in the database and is queued again at the next start.
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _die_with_parent() -> None:
    """In the worker child, before exec: ask Linux to SIGTERM it if `smd serve` dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
