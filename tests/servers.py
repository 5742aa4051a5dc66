"""Private Redis and PostgreSQL server processes for the tests.

Each server listens on a free loopback port, keeps its data in a temporary directory and is
stopped (and the directory removed) when its context manager exits. Nothing on the default ports
is used, and no system service is started or needed: only the binaries (`make test` installs them
with scripts/ensure-redis.sh and scripts/ensure-postgres.sh).

    with redis_server() as url:        # "redis://127.0.0.1:PORT/0"
        ...
    with postgres_server() as url:     # "postgresql+psycopg://smd@127.0.0.1:PORT/smd_test"
        db = fresh_database(url, "t1") # a new, empty database on the same server
        ...
    with restartable_postgres() as pg: # the same, stopped and restarted on its port: pg.stop(); pg.start()
        ...

Leaks are guarded against three ways: the context managers stop their server in `finally`; an
`atexit` hook stops whatever is still running when the interpreter exits; and where
`setpriv --pdeathsig` exists (util-linux) a server started from the main thread gets a signal when
the test process dies, even by SIGKILL. Servers run in their own session, so a Ctrl-C in the
terminal interrupts pytest (which then tears the servers down) but does not hit them directly.

Errors: `ServerNotAvailable` (a RuntimeError) when a binary is missing, `ServerStartError` (also a
RuntimeError) when a server does not come up; both messages carry the server's log.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

__all__ = [
    "ServerNotAvailable",
    "ServerStartError",
    "free_port",
    "redis_server",
    "find_postgres_bindir",
    "postgres_server",
    "PostgresCluster",
    "restartable_postgres",
    "fresh_database",
]

PG_USER = "smd"
PG_DATABASE = "smd_test"
PG_LIBROOT = Path("/usr/lib/postgresql")

# PostgreSQL settings for a throw-away test cluster (durability off: the data is deleted anyway).
PG_DEFAULT_SETTINGS: dict[str, str] = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


class ServerNotAvailable(RuntimeError):
    """The server binary is not installed (run `make test`, or scripts/ensure-*.sh)."""


class ServerStartError(RuntimeError):
    """The server process did not start or did not answer in time."""


# --------------------------------------------------------------------------------------------
# ports and processes
# --------------------------------------------------------------------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_live: dict[int, tuple[subprocess.Popen, int]] = {}  # pid -> (process, polite stop signal)
_live_dirs: set[str] = set()
_live_lock = threading.Lock()
_creator_pid = os.getpid()


def _spawn(cmd: Sequence[str], *, log: Path, death_signal: str, cwd: Path,
           as_user: pwd.struct_passwd | None = None) -> subprocess.Popen:
    """Start cmd with stdout/stderr to `log`, in a new session, optionally as another user."""
    argv = list(cmd)
    setpriv = shutil.which("setpriv")
    if setpriv and threading.current_thread() is threading.main_thread():
        # The signal is sent when the *thread* that forked dies; only the main thread is
        # guaranteed to live as long as the test session.
        argv = [setpriv, "--pdeathsig", death_signal, "--", *argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    kwargs: dict = {}
    if as_user is not None:
        kwargs = {"user": as_user.pw_uid, "group": as_user.pw_gid, "extra_groups": []}
        env.update(HOME=str(cwd), USER=as_user.pw_name, LOGNAME=as_user.pw_name)
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                cwd=cwd, env=env, start_new_session=True, **kwargs)


def _track(proc: subprocess.Popen, stop_signal: int) -> None:
    with _live_lock:
        _live[proc.pid] = (proc, stop_signal)


def _stop(proc: subprocess.Popen, stop_signal: int, timeout: float = 10.0) -> None:
    """Polite signal, then SIGKILL; always reaps the process."""
    with _live_lock:
        _live.pop(proc.pid, None)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(stop_signal)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(5)


def _remove_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with _live_lock:
        _live_dirs.discard(path)


@atexit.register
def _stop_everything() -> None:
    """Last resort for servers whose context manager never exited (e.g. an abandoned fixture)."""
    if os.getpid() != _creator_pid:  # a forked child exiting must not stop its parent's servers
        return
    with _live_lock:
        procs = list(_live.values())
        dirs = list(_live_dirs)
    for proc, sig in procs:
        with contextlib.suppress(Exception):
            _stop(proc, sig, timeout=5)
    for d in dirs:
        _remove_dir(d)


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return text[-limit:] if text.strip() else "(empty log)"


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):  # a zombie is not running
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


_reaped = False


def _reap_stale_dirs() -> None:
    """Remove temp dirs left by test processes that were killed (no `finally`, no atexit): those
    whose owner process and server process are both gone."""
    global _reaped
    if _reaped:
        return
    _reaped = True
    for parent in {tempfile.gettempdir(), "/tmp"}:
        for d in [*Path(parent).glob("smd-pg-*"), *Path(parent).glob("smd-redis-*")]:
            with contextlib.suppress(OSError, ValueError):
                pids = [int(p) for p in (d / ".pids").read_text().split()]
                if pids and not any(_pid_running(p) for p in pids):
                    shutil.rmtree(d, ignore_errors=True)


def _mkdtemp(prefix: str, parent: str | None = None) -> str:
    _reap_stale_dirs()
    d = tempfile.mkdtemp(prefix=prefix, dir=parent)
    with _live_lock:
        _live_dirs.add(d)
    _note_pid(d, os.getpid())
    return d


def _note_pid(tmpdir: str | Path, pid: int) -> None:
    """Record a process that uses tmpdir (for _reap_stale_dirs)."""
    with open(Path(tmpdir) / ".pids", "a") as f:
        f.write(f"{pid}\n")


# --------------------------------------------------------------------------------------------
# Redis
# --------------------------------------------------------------------------------------------

def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server(*, timeout: float = 10.0, extra_args: Sequence[str] = ()) -> Iterator[str]:
    """A private redis-server (no persistence) on a free port; yields "redis://127.0.0.1:PORT/0"."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerNotAvailable(
            "redis-server is not on PATH: run scripts/ensure-redis.sh (make test does) or install Redis")
    tmp = _mkdtemp("smd-redis-")
    log = Path(tmp) / "redis.log"
    proc = None
    try:
        for attempt in range(3):  # a new port if another process grabbed ours meanwhile
            port = free_port()
            proc = _spawn([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no", "--dir", tmp, *extra_args],
                          log=log, death_signal="TERM", cwd=Path(tmp))
            _track(proc, signal.SIGTERM)
            _note_pid(tmp, proc.pid)
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                if _redis_ping(port):
                    break
                time.sleep(0.02)
            else:
                reason = (f"exited with code {proc.returncode}" if proc.poll() is not None
                          else f"did not answer PING within {timeout:g} s")
                _stop(proc, signal.SIGTERM)
                if "in use" in _tail(log) and attempt < 2:
                    continue
                raise ServerStartError(f"redis-server on port {port} {reason}; log:\n{_tail(log)}")
            break
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        if proc is not None:
            _stop(proc, signal.SIGTERM)
        _remove_dir(tmp)


# --------------------------------------------------------------------------------------------
# PostgreSQL
# --------------------------------------------------------------------------------------------

def _version_key(path: Path) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in path.parent.name.split("."))


def find_postgres_bindir() -> Path | None:
    """The directory with initdb and postgres: $PG_BINDIR, else PATH, else the highest
    /usr/lib/postgresql/*/bin (Debian keeps them off PATH). None if there is none."""
    def ok(d: Path) -> bool:
        return all(os.access(d / exe, os.X_OK) for exe in ("initdb", "postgres"))

    if os.environ.get("PG_BINDIR"):
        d = Path(os.environ["PG_BINDIR"])
        return d if ok(d) else None
    on_path = shutil.which("initdb")
    if on_path:
        d = Path(on_path).resolve().parent  # /usr/local/bin/initdb -> /usr/lib/postgresql/N/bin
        if ok(d):
            return d
    for d in sorted(PG_LIBROOT.glob("*/bin"), key=_version_key, reverse=True):
        if ok(d):
            return d
    return None


def _unprivileged_user() -> pwd.struct_passwd | None:
    """None when not root; else the user to run initdb/postgres as (they refuse to run as root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise ServerNotAvailable("running as root, and there is neither a 'postgres' nor a 'nobody' user "
                             "to run PostgreSQL as (initdb and postgres refuse to run as root)")


def _pg_tempdir(user: pwd.struct_passwd | None) -> str:
    """A temp dir that `user` owns and can reach (TMPDIR may be under an unreachable home)."""
    base = None
    if user is not None:
        parent = Path(tempfile.gettempdir()).resolve()
        reachable = all(os.stat(p).st_mode & 0o001 for p in [parent, *parent.parents])
        base = None if reachable else "/tmp"
    d = _mkdtemp("smd-pg-", base)
    if user is not None:
        os.chown(d, user.pw_uid, user.pw_gid)
    return d


def _connect(url_or_port, dbname: str = "postgres", timeout: float = 2.0):
    """A psycopg autocommit connection to `dbname` given a port (our server) or an SQLAlchemy URL."""
    import psycopg

    if isinstance(url_or_port, int):
        params = {"host": "127.0.0.1", "port": url_or_port, "user": PG_USER}
    else:
        from sqlalchemy.engine import make_url

        u = make_url(url_or_port)
        params = {"host": u.host or "127.0.0.1", "port": u.port or 5432, "user": u.username}
        if u.password:
            params["password"] = u.password
    return psycopg.connect(dbname=dbname, autocommit=True, connect_timeout=max(1, int(timeout)), **params)


def _run_initdb(bindir: Path, data: Path, user, cwd: Path, log: Path, timeout: float) -> None:
    proc = _spawn([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", PG_USER,
                   "--encoding", "UTF8", "--locale", "C", "--no-sync"],
                  log=log, death_signal="KILL", cwd=cwd, as_user=user)
    _track(proc, signal.SIGTERM)
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _stop(proc, signal.SIGTERM)
        raise ServerStartError(f"initdb did not finish within {timeout:g} s; log:\n{_tail(log)}") from None
    finally:
        with _live_lock:
            _live.pop(proc.pid, None)
    if rc != 0:
        raise ServerStartError(f"initdb failed (exit code {rc}); log:\n{_tail(log)}")


class PostgresCluster:
    """A private PostgreSQL cluster that can be stopped and started again on the same port and
    data directory, with its data kept (a database outage or restart, as in production):

        with restartable_postgres() as pg:
            url = pg.url              # "postgresql+psycopg://smd@127.0.0.1:PORT/smd_test"
            pg.stop()                 # fast shutdown: clients are disconnected, the port closes
            pg.start()                # same port, same data

    ``postgres_server()`` is one of these, started once and stopped at the end."""

    def __init__(self, *, timeout: float = 30.0, settings: Mapping[str, str] | None = None):
        bindir = find_postgres_bindir()
        if bindir is None:
            raise ServerNotAvailable(
                "PostgreSQL server binaries (initdb, postgres) not found on PATH or in "
                f"{PG_LIBROOT}/*/bin: run scripts/ensure-postgres.sh (make test does) or set PG_BINDIR")
        self.bindir, self.timeout = bindir, timeout
        self.user = _unprivileged_user()
        self.tmp = Path(_pg_tempdir(self.user))
        self.data, self.log = self.tmp / "data", self.tmp / "postgres.log"
        self.conf = {**PG_DEFAULT_SETTINGS, **(settings or {})}
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._created = False
        try:
            _run_initdb(bindir, self.data, self.user, self.tmp, self.tmp / "initdb.log", timeout)
        except BaseException:
            _remove_dir(str(self.tmp))
            raise

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{PG_USER}@127.0.0.1:{self.port}/{PG_DATABASE}"

    def start(self) -> str:
        """Start the server (on a free port the first time, on the same port later); returns the URL
        once it accepts connections (the database `smd_test` is created on the first start)."""
        for attempt in range(3):  # a new port if another process grabbed ours meanwhile
            first = self.port is None
            port = free_port() if first else self.port
            cmd = [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(port), "-k", str(self.tmp)]
            for k, v in self.conf.items():
                cmd += ["-c", f"{k}={v}"]
            proc = _spawn(cmd, log=self.log, death_signal="QUIT", cwd=self.tmp, as_user=self.user)
            # SIGQUIT = "immediate" shutdown: no shutdown checkpoint (seconds after many CREATE
            # DATABASEs), which is fine as the data is thrown away.
            _track(proc, signal.SIGQUIT)
            _note_pid(self.tmp, proc.pid)
            deadline = time.monotonic() + self.timeout
            err: Exception | None = None
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    with _connect(port, timeout=2) as conn:
                        if not self._created:
                            conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')
                    break
                except Exception as e:  # starting up / not listening yet
                    err = e
                    time.sleep(0.05)
            else:
                reason = (f"exited with code {proc.returncode}" if proc.poll() is not None
                          else f"did not accept connections within {self.timeout:g} s (last error: {err})")
                _stop(proc, signal.SIGQUIT)
                if first and "in use" in _tail(self.log, 1000) and attempt < 2:
                    continue
                raise ServerStartError(f"postgres on port {port} {reason}; log:\n{_tail(self.log)}")
            self.port, self.proc, self._created = port, proc, True
            return self.url
        raise AssertionError("unreachable")

    def stop(self, *, immediate: bool = False) -> None:
        """Stop the server, keeping its data: a fast shutdown (SIGINT: open connections are cut,
        the port closes), or with ``immediate`` a crash-like one (SIGQUIT, recovery at the next
        start)."""
        if self.proc is not None:
            _stop(self.proc, signal.SIGQUIT if immediate else signal.SIGINT)
            self.proc = None

    def close(self) -> None:
        """Stop the server and remove its data."""
        self.stop(immediate=True)
        _remove_dir(str(self.tmp))


@contextlib.contextmanager
def restartable_postgres(*, timeout: float = 30.0, settings: Mapping[str, str] | None = None
                         ) -> Iterator[PostgresCluster]:
    """A started :class:`PostgresCluster`, closed (stopped, data removed) at the end."""
    cluster = PostgresCluster(timeout=timeout, settings=settings)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@contextlib.contextmanager
def postgres_server(*, timeout: float = 30.0, settings: Mapping[str, str] | None = None) -> Iterator[str]:
    """A private PostgreSQL cluster on a free port with an empty database `smd_test` owned by
    superuser `smd` (trust auth, no password); yields
    "postgresql+psycopg://smd@127.0.0.1:PORT/smd_test". `settings` adds/overrides `-c` options."""
    with restartable_postgres(timeout=timeout, settings=settings) as cluster:
        yield cluster.url


def fresh_database(admin_url: str, name: str, *, template: str | None = None) -> str:
    """(Re)create an empty database `name` on the server of `admin_url` (any database URL of that
    server, e.g. the one postgres_server() yields) and return the URL of the new database; with
    `template`, a copy of that database of the server (which nobody may be connected to).

    An existing database of that name is dropped first, its connections terminated."""
    from psycopg import sql
    from sqlalchemy.engine import make_url

    if not name or len(name.encode()) > 63:
        raise ValueError(f"bad database name {name!r} (1-63 bytes)")
    with _connect(admin_url, timeout=5) as conn:
        ident = sql.Identifier(name)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        if template is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
        else:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(ident, sql.Identifier(template)))
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)
