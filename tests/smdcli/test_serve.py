"""`smd serve`'s embedded worker process."""
from __future__ import annotations

import os
import subprocess
import sys

from smdcli.serve import WORKER_NICENESS, _worker_child, embedded_worker_name


def test_embedded_worker_runs_at_a_lower_cpu_priority():
    """The worker child is started nicer than the API, so that a running job does not delay the
    API's answers on a busy machine (bench/dashboard_load.py)."""
    out = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], preexec_fn=_worker_child,
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == min(19, os.nice(0) + WORKER_NICENESS)



def test_a_worker_that_exits_as_the_service_stops_is_not_restarted(tmp_path):
    """A signal to the whole process group (Ctrl-C, a supervisor's SIGTERM) stops the worker and the API at
    once; the API may take longer (open event streams): the worker is restarted only while the API serves."""
    import time

    from smdcli.serve import _WorkerSupervisor
    from store.settings import Settings

    def supervised(api_stopping: bool) -> tuple[_WorkerSupervisor, list]:
        supervisor = _WorkerSupervisor(Settings(state_dir=tmp_path / "state"))
        spawned: list = []

        def spawn() -> None:   # a "worker" that exits at once
            supervisor.proc = subprocess.Popen([sys.executable, "-c", "pass"])
            spawned.append(supervisor.proc)

        supervisor._spawn = spawn
        supervisor.api_stopping = lambda: api_stopping
        supervisor.start()
        return supervisor, spawned

    stopping, spawned = supervised(api_stopping=True)
    stopping.thread.join(timeout=10)   # its watch saw the worker gone as the API stops: it ends
    assert not stopping.thread.is_alive() and len(spawned) == 1
    serving, spawned = supervised(api_stopping=False)
    deadline = time.monotonic() + 10
    while len(spawned) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    serving.stop()
    assert len(spawned) >= 2   # while the API serves, a worker that exits is restarted


def test_two_services_on_one_host_name_their_workers_apart(tmp_path):
    """A service's start expires the leases of its embedded worker's name: two services sharing a database
    from two state folders had one name, and the second's start re-queued the first's running jobs."""
    from smdcli.serve import _WorkerSupervisor
    from store.settings import Settings

    first, second = tmp_path / "a", tmp_path / "b"
    assert _WorkerSupervisor(Settings(state_dir=first)).name != _WorkerSupervisor(Settings(state_dir=second)).name
    assert embedded_worker_name(first) != embedded_worker_name(second)
    assert embedded_worker_name(first) == embedded_worker_name(tmp_path / "x" / ".." / "a")   # the same folder
    assert embedded_worker_name(first).startswith("embedded@")


def test_a_cold_shutdown_gets_its_soft_shutdown_time_before_a_kill(tmp_path, monkeypatch):
    """After a warm shutdown that did not end, SIGQUIT starts Celery's cold one, which lets running jobs go on
    for SMD_SOFT_SHUTDOWN_SECONDS: `smd serve` killed the worker 5 s later, whatever that time was."""
    import smdcli.serve as serve
    from store.settings import Settings

    monkeypatch.setattr(serve, "WARM_SHUTDOWN_SECONDS", 0.3)
    monkeypatch.setattr(serve, "COLD_SHUTDOWN_SECONDS", 0.3)
    supervisor = serve._WorkerSupervisor(Settings(state_dir=tmp_path / "state", soft_shutdown_seconds=2.0))
    # a worker that ignores SIGTERM and takes 1 s of its soft shutdown time on SIGQUIT, then exits cleanly
    supervisor.proc = subprocess.Popen([sys.executable, "-c", (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGQUIT, lambda *_: (time.sleep(1.0), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n")], stdout=subprocess.PIPE, text=True)
    assert supervisor.proc.stdout.readline() == "ready\n"
    supervisor.stop()
    assert supervisor.proc.returncode == 0   # not -9: it had its time
