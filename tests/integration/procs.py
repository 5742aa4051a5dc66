"""Starting and stopping the service's real processes for integration tests."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from store import jobs
from tests.dbutil import session_scope
from tests.servers import free_port


def children(pid: int) -> list[int]:
    """The process's direct children (Linux /proc)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except OSError:   # the thread or the process ended meanwhile
            pass
    return out


def cmdline(pid: int) -> str:
    """The process's command line, "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def spawn(args: list[str], env: dict, log: Path, cwd: Path | None = None) -> subprocess.Popen:
    """Start a process in its own session (so the whole tree can be signalled), output to log."""
    return subprocess.Popen(args, env=env, cwd=cwd, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


# What a fixture's teardown waits for a graceful exit before SIGKILL: the processes' data is thrown away, so
# nothing needs their graceful shutdown (the scenarios that test one signal and wait themselves). A worker
# takes 6–10 s to exit on SIGTERM (Celery's warm shutdown, with the hand-back of a running job), which every
# teardown would otherwise wait out.
TEARDOWN_SECONDS = 2.0


def stop(*procs: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM the process groups (all at once), then SIGKILL whatever is left of them after ``timeout``."""
    alive = []
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            alive.append(proc)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for proc in alive:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in alive:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)


def group_members(pgid: int, needle: str) -> list[int]:
    """Pids in process group pgid whose command line contains needle."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if needle in cmd and os.getpgid(int(entry.name)) == pgid:
                pids.append(int(entry.name))
        except (OSError, ProcessLookupError):
            continue
    return pids


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90,
              client: httpx.Client | None = None) -> None:
    """Until ``url`` answers 200 (through ``client``, e.g. one that ignores proxy variables), while ``proc`` lives."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if (client.get(url, timeout=2) if client is not None else httpx.get(url, timeout=2)).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} did not answer in {timeout}s:\n{log.read_text()[-4000:]}")


def wait_status(base: str, experiment_id: str, statuses: set[str], timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = httpx.get(f"{base}/v1/experiments/{experiment_id}", timeout=5).json()
        if body["status"] in statuses:
            return body
        time.sleep(0.3)
    raise AssertionError(f"experiment {experiment_id} still {body['status']} after {timeout}s: {body}")


class RestartableRedis:
    """A private redis-server (append-only persistence by default) that can be stopped and started again
    on the same port and data directory (a broker restart, as in production)."""

    def __init__(self, tmp: Path, *, bind: tuple[str, ...] = ("127.0.0.1",), persist: bool = True):
        """``bind``: the addresses it listens on (the first is the test's); without ``persist`` a restart
        comes back empty (a broker that lost its data)."""
        import shutil

        self.bind, self.persist = bind, persist
        self.binary = shutil.which("redis-server")
        assert self.binary, "redis-server is not on PATH: run scripts/ensure-redis.sh"
        self.dir = tmp / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> None:
        import socket

        keep = ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else ["--appendonly", "no"]
        self.proc = spawn([self.binary, "--port", str(self.port), "--bind", *self.bind, "--protected-mode", "no",
                           "--dir", str(self.dir), *keep, "--save", ""],
                          {"PATH": os.environ.get("PATH", "")}, self.dir / "redis.log")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"redis did not start: {(self.dir / 'redis.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None


def smd_cli(env: dict, *args: str) -> str:
    """`smd ARGS` with this environment (e.g. `users create`, `keys create` against the stack's
    database); its stdout. Fails the test on a non-zero exit."""
    done = subprocess.run([sys.executable, "-m", "smdcli.main", *args], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def smd(env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`smd ARGS` with this environment, whatever its exit status (the test reads it)."""
    return subprocess.run([sys.executable, "-m", "smdcli.main", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@contextmanager
def serve_for_alice_and_bob(tmp: Path, *, bob: bool = True, **settings: str) -> Iterator[tuple[dict, dict, str, Path]]:
    """A real `smd serve` (embedded SQLite and filesystem broker, auth on, ``SMD_*`` ``settings`` on top)
    with users alice and bob (bob's work quota 10⁶) and their keys, as `smd users` and `smd keys` make them. Yields
    (env for remote commands as alice, the same as bob, base URL, the folder with serve.log). ``bob=False``:
    alice alone (bob's env is then empty)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMD_")}
    env.update(SMD_PORT=str(port), SMD_STATE_DIR=str(tmp / "state"), SMD_AUTH="on", SMD_FLUSH_SECONDS="0.3",
               SMD_SWEEP_SECONDS="0.5", **settings)
    keys = _users_and_keys(tmp / "state", ("alice", "bob") if bob else ("alice",), quota_of={"bob": 1_000_000})
    proc = spawn([sys.executable, "-m", "smdcli.main", "serve"], env, tmp / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz", proc, tmp / "serve.log")
        yield ({**env, "SMD_URL": base, "SMD_KEY": keys["alice"]},
               {**env, "SMD_URL": base, "SMD_KEY": keys["bob"]} if bob else {}, base, tmp)
    finally:
        stop(proc, timeout=TEARDOWN_SECONDS)


def _users_and_keys(state_dir: Path, names: tuple[str, ...], quota_of: dict[str, int]) -> dict[str, str]:
    """What `smd users create`, `smd keys create` and `smd users quota --max-work` would make in the embedded
    database of ``state_dir``, made in this process: the store's functions the CLI calls, without a Python
    start and the project's imports per command (~1 s each; tests/smdcli/test_admin.py runs the commands)."""
    from store import users
    from store.db import get_engine
    from store.migrate import upgrade_head
    from store.settings import Settings

    url = Settings(state_dir=state_dir).db_url   # the embedded database `smd serve` opens there
    upgrade_head(url)
    keys = {}
    for name in names:
        users.create_user(url, name)
        _, keys[name] = users.create_key(url, name)
        if name in quota_of:
            users.set_quota(url, name, max_work=quota_of[name])
    get_engine(url).dispose()   # the service owns the file from here
    return keys


class Processes:
    """The service processes of one test: `smd api` and named `smd worker`s with ``env``, each logging
    to ``<tmp>/<name>.log``; ``close`` stops them all."""

    def __init__(self, tmp: Path, env: dict):
        self.tmp, self.env = tmp, env
        self.api: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}

    def start_api(self, base: str | None = None) -> None:
        """Start the API; with ``base``, wait until it answers."""
        self.api = spawn([sys.executable, "-m", "smdcli.main", "api"], self.env, self.tmp / "api.log")
        if base is not None:
            wait_http(f"{base}/healthz", self.api, self.tmp / "api.log")

    def start_worker(self, name: str) -> None:
        self.workers[name] = spawn([sys.executable, "-m", "smdcli.main", "worker"],
                                   {**self.env, "SMD_WORKER_NAME": name}, self.tmp / f"{name}.log")

    def kill_worker(self, name: str) -> None:
        """SIGKILL the worker's whole process tree (main process and pool), as a crashed host."""
        proc = self.workers.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def logs(self, tail: int = 2500) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-tail:]}" for p in sorted(self.tmp.glob("*.log")))

    def close(self) -> None:
        """At the end of a test (its data is thrown away): no graceful shutdown awaited beyond TEARDOWN_SECONDS."""
        stop(*[proc for proc in [self.api, *self.workers.values()] if proc is not None], timeout=TEARDOWN_SECONDS)


def submit(stack, spec: dict) -> str:
    r = httpx.post(f"{stack.base}/v1/experiments", json=spec, timeout=10)
    assert r.status_code == 202, r.text
    return r.json()["id"]


def attempts(stack, exp_id: str) -> list[tuple]:
    """(number, worker name, outcome, resumed_from_step) of each attempt, as stored."""
    with session_scope(stack.database_url) as s:
        return [(a.number, a.worker.split("/")[0], a.outcome, a.resumed_from_step) for a in jobs.attempts(s, exp_id)]


def wait_checkpoint(stack, exp_id: str, timeout: float = 60) -> int:
    """The job runs, has stored points and a checkpoint (so it is mid-job, past its start)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with session_scope(stack.database_url) as s:
            stored = jobs.load_checkpoint(s, exp_id)
            if stored is not None and stored.step > 0:
                return stored.step
        time.sleep(0.1)
    raise AssertionError(f"no checkpoint of {exp_id} in {timeout}s\n{stack.logs()}")


def results(stack, exp_id: str) -> dict:
    doc = httpx.get(f"{stack.base}/v1/experiments/{exp_id}/results", timeout=30).json()
    return {k: doc[k] for k in ("series", "theory", "summary")}


def unreadable_cifar10(root: Path) -> str:
    """A data directory whose CIFAR-10 files are present but not pickles: a server with it as SMD_DATA_DIR
    accepts a cifar10 spec (its check at submission finds the files) and the run fails at its start, before
    its first record, naming the file."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in ("data_batch_1", "test_batch"):
        (folder / name).write_bytes(b"not a pickle")
    return str(root)
