"""Starting the API, a worker, or both (the embedded default)."""
from __future__ import annotations

import hashlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store.settings import Settings

log = logging.getLogger("smd.serve")


# How long a stopping API waits for open requests before it closes them: an event stream (a dashboard open on a
# job) ends only with its job, and held Ctrl-C off for good (a job handed back at the stop stays unfinished).
GRACEFUL_SHUTDOWN_SECONDS = 3


def run_api(settings: Settings, *, migrate: bool = True, supervisor: _WorkerSupervisor | None = None) -> int:
    """Serve the API (applying the migrations at start-up unless ``migrate`` is False). With the embedded
    worker's ``supervisor``: it is told how to see that the server is stopping (a signal to the whole process
    group stops its worker too: not to be restarted), and stopped after the server, before uvicorn re-raises
    the signal that stopped it (after which nothing else in this process would run)."""
    import asyncio

    import uvicorn

    from api.main import UnsafeAuth, check_auth, create_app

    try:
        check_auth(settings)
    except UnsafeAuth as exc:
        log.error("refusing to start the API: %s", exc)
        return 2

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            await super().shutdown(sockets)
            if supervisor is not None:
                await asyncio.to_thread(supervisor.stop)

    if settings.api_workers == 1:
        config = uvicorn.Config(create_app(settings, migrate=migrate), host=settings.host, port=settings.port,
                                log_level=settings.log_level.lower(), timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS)
        server = Server(config)
        if supervisor is not None:
            supervisor.api_stopping = lambda: bool(server.should_exit)
        try:
            server.run()
        except KeyboardInterrupt:   # uvicorn re-raises the Ctrl-C it has handled: a clean stop, as with several
            pass
        return 0
    # several processes on one socket (uvicorn's supervisor); each builds the app from the same SMD_*
    # environment (api.main.process_app). The schema is migrated once, here, before they start.
    if migrate:
        from store.migrate import upgrade_head

        upgrade_head(settings.db_url)
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config("api.main:process_app", factory=True, host=settings.host, port=settings.port,
                            workers=settings.api_workers, log_level=settings.log_level.lower(),
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS)
    processes = Multiprocess(config, sockets=[config.bind_socket()])
    if supervisor is not None:
        supervisor.api_stopping = processes.should_exit.is_set
    try:
        processes.run()
    finally:
        if supervisor is not None:
            supervisor.stop()
    return 0


def run_worker(settings: Settings) -> int:
    from store.migrate import upgrade_head
    from worker.celery_app import UnsafeLimits, check_limits, get_celery

    try:
        check_limits(settings)
    except UnsafeLimits as exc:
        log.error("refusing to start the worker: %s", exc)
        return 2
    upgrade_head(settings.db_url)
    # CUDA is never touched here: each pool process picks its GPU after the fork (worker.tasks).
    get_celery(settings).worker_main(["worker", f"--loglevel={settings.log_level}", f"--concurrency={settings.worker_concurrency}",
                            "-Q", settings.worker_queues, "--pool=prefork", "--without-gossip", "--without-mingle"])
    return 0


EMBEDDED_WORKER = "embedded"


def embedded_worker_name(state_dir: Path) -> str:
    """``embedded@<host>:<tag of the state folder>``: the same across restarts of one service, whose start
    expires the leases of its previous worker by this name; another service on this host sharing the
    database (its own state folder) has another name (with the host alone, its start re-queued the running
    jobs of the first)."""
    tag = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]
    return f"{EMBEDDED_WORKER}@{socket.gethostname()}:{tag}"


def serve(settings: Settings) -> int:
    """API (with its sweeper) in this process and one worker child that is restarted if it dies.
    The child is named ``embedded@<host>:<state tag>`` (:func:`embedded_worker_name`): when it dies its leases are expired at once, so its job
    resumes from its checkpoint without waiting for the lease to run out."""
    # before anything touches the jobs: a second `smd serve` of the same state expired the first one's leases
    # (its worker has the same name) and then failed on the port, and three of them failed its running job
    refused = _hold_state(settings.state_dir) or _port_taken(settings.host, settings.port)
    if refused:
        log.error("refusing to start: %s", refused)
        return 2
    from api.main import UnsafeAuth, check_auth
    from store.migrate import upgrade_head

    try:
        check_auth(settings)
    except UnsafeAuth as exc:
        log.error("refusing to start: %s", exc)
        return 2
    upgrade_head(settings.db_url)  # once, for the API here and before the worker child starts
    supervisor = _WorkerSupervisor(settings)
    supervisor.start()
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    log.info("dashboard: http://%s:%d/ (API docs: /docs)", host, settings.port)
    try:
        return run_api(settings, migrate=False, supervisor=supervisor)
    finally:
        supervisor.stop()


_held_state: list[Any] = []   # the open lock file of this process's state folder, held until it exits


def _hold_state(state_dir: Path) -> str | None:
    """Lock ``state_dir`` for this process (an advisory lock the system drops when the process ends, however it
    ends); why not, when another process holds it."""
    try:
        import fcntl
    except ImportError:   # not a POSIX system: no lock
        return None
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = (state_dir / "serve.lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        return (f"another `smd serve` ({holder}) uses the state folder {state_dir.resolve()}: stop it, or give this "
                f"one its own SMD_STATE_DIR")
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}")
    lock.flush()
    _held_state.append(lock)
    return None


def _port_taken(host: str, port: int) -> str | None:
    """Why the API could not listen on (host, port), found before the worker starts; None when it can."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            return f"the API cannot listen on {host}:{port} ({exc.strerror}): set SMD_PORT to a free port"
    return None


class _WorkerSupervisor:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.proc: subprocess.Popen | None = None
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # no respawn may race with stop()
        # set by run_api: whether the API is stopping (a signal to the process group, e.g. Ctrl-C or a
        # supervisor's SIGTERM, stops the worker at the same moment: it is not restarted then)
        self.api_stopping: Callable[[], bool] = lambda: False
        self.thread = threading.Thread(target=self._watch, name="worker-supervisor", daemon=True)

    def start(self) -> None:
        self._spawn()
        self.thread.start()

    @property
    def name(self) -> str:
        return self.settings.worker_name or embedded_worker_name(self.settings.state_dir)

    def _spawn(self) -> None:
        from worker.sweeper import sweep

        try:  # the previous embedded worker (of this or an earlier `smd serve`) is gone
            done = sweep(self.settings, lost_worker=self.name)
            if done["requeued"]:
                log.info("re-queued %d job(s) of the previous worker", done["requeued"])
        except Exception:
            log.exception("could not sweep before starting the worker")
        env = {**os.environ, "SMD_WORKER_NAME": self.name}
        self.proc = subprocess.Popen([sys.executable, "-m", "smdcli.main", "worker"], env=env,
                                     preexec_fn=_worker_child)
        log.info("worker started (pid %d)", self.proc.pid)

    def _watch(self) -> None:
        while not self.stopping.wait(1.0):
            with self.lock:
                if not self.stopping.is_set() and self.proc is not None and self.proc.poll() is not None:
                    if self.api_stopping():
                        log.info("worker exited with %s as the service stops", self.proc.returncode)
                        return
                    log.warning("worker exited with %s; restarting it", self.proc.returncode)
                    self._spawn()

    def stop(self) -> None:
        with self.lock:
            self.stopping.set()
        if self.proc is None or self.proc.poll() is not None:
            return
        # SIGTERM: Celery's warm shutdown; the pool hands the running job back to the queue after a
        # last checkpoint (worker.tasks). A job cut short otherwise keeps its lease until the next
        # start of `smd serve` expires it.
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=WARM_SHUTDOWN_SECONDS)
        except subprocess.TimeoutExpired:
            # Celery's cold shutdown lets running jobs go on for the soft shutdown time (SMD_SOFT_SHUTDOWN_SECONDS)
            # and then ends them: waiting less cut that time short with a SIGKILL
            cold = self.settings.soft_shutdown_seconds + COLD_SHUTDOWN_SECONDS
            log.warning("worker still running %.0f s after SIGTERM; cold shutdown (running jobs end within %.0f s)",
                        WARM_SHUTDOWN_SECONDS, cold)
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=cold)
            except subprocess.TimeoutExpired:
                log.warning("worker still running %.0f s after SIGQUIT; killed", cold)
                self.proc.kill()


# What `smd serve` waits for its worker's warm shutdown before a cold one (SIGQUIT), and then, beyond the cold
# one's soft shutdown time (Settings.soft_shutdown_seconds), before SIGKILL.
# The warm shutdown of the embedded default (filesystem broker, billiard's blocking pool) takes 6–7 s on an
# idle 2-core machine: up to 2 s for Celery's consumer loop to see the signal, then ~1 s for each of the pool
# process's exit, the timer and the pool's threads; a running job's hand-back adds its last checkpoint (at
# most worker.tasks.HAND_BACK_SECONDS). Cut short, the job is not handed back: it waits for the next start.
WARM_SHUTDOWN_SECONDS = 20.0
COLD_SHUTDOWN_SECONDS = 5.0


# The embedded worker shares the machine with the API: at a lower CPU priority a job still gets the
# CPU the API leaves idle, but no longer delays the answers to open dashboards when the machine is
# busy (bench/dashboard_load.py, 2 cores under other load: p99 at 200 dashboards ~300 → ~140 ms).
WORKER_NICENESS = 10


def _worker_child() -> None:
    """In the worker child, before exec: a lower CPU priority than the API's, and death with its parent."""
    os.nice(WORKER_NICENESS)
    _die_with_parent()


def _die_with_parent() -> None:
    """In the worker child, before exec: ask Linux to SIGTERM it if `smd serve` dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
