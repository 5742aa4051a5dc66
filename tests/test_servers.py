"""The private test servers of tests/servers.py: each starts, works, and is gone afterwards."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests import servers
from tests.servers import (
    ServerNotAvailable,
    find_postgres_bindir,
    free_port,
    fresh_database,
    postgres_server,
    redis_server,
)

REPO = Path(__file__).resolve().parents[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not servers._pid_running(pid):
            return True
        time.sleep(0.05)
    return False


def test_free_port_is_bindable():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_redis_server_set_get_and_cleanup():
    import redis

    t0 = time.monotonic()
    with redis_server() as url:
        started = time.monotonic() - t0
        assert url.startswith("redis://127.0.0.1:") and url.endswith("/0")
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        client = redis.Redis.from_url(url)
        try:
            assert client.set("k", "v") and client.get("k") == b"v"
            assert client.config_get("save")["save"] == ""  # no persistence
            assert client.config_get("appendonly")["appendonly"] == "no"
            assert client.config_get("bind")["bind"] == "127.0.0.1"
            tmpdir = client.config_get("dir")["dir"]
        finally:
            client.close()
    print(f"redis_server started in {started:.2f} s")
    assert started < 5
    assert not _port_open(port)
    assert not os.path.exists(tmpdir)


def test_postgres_server_select_and_fresh_databases():
    if find_postgres_bindir() is None:
        pytest.skip("no PostgreSQL binaries (scripts/ensure-postgres.sh installs them)")
    from sqlalchemy import create_engine, text

    t0 = time.monotonic()
    with postgres_server() as url:
        started = time.monotonic() - t0
        assert url.startswith("postgresql+psycopg://smd@127.0.0.1:") and url.endswith("/smd_test")
        port = int(url.split(":")[2].split("/")[0])
        eng = create_engine(url)
        with eng.connect() as c:
            assert c.execute(text("SELECT 1")).scalar() == 1
            assert c.execute(text("SELECT current_database()")).scalar() == "smd_test"
            assert c.execute(text("SHOW server_encoding")).scalar() == "UTF8"
            assert c.execute(text("SHOW fsync")).scalar() == "off"
            data_dir = c.execute(text("SHOW data_directory")).scalar()
            pid = c.execute(text("SELECT pg_backend_pid()")).scalar()
        eng.dispose()

        t1 = time.monotonic()
        a = fresh_database(url, "fresh_a")
        created = time.monotonic() - t1
        b = fresh_database(url, "fresh_b")
        assert a.endswith("/fresh_a") and b.endswith("/fresh_b")
        ea, eb = create_engine(a), create_engine(b)
        try:
            with ea.begin() as c:
                c.execute(text("CREATE TABLE t (x int)"))
                c.execute(text("INSERT INTO t VALUES (1)"))
            with eb.connect() as c:  # independent: b does not see a's table
                assert c.execute(text("SELECT to_regclass('public.t')")).scalar() is None
                assert c.execute(text("SELECT current_database()")).scalar() == "fresh_b"
            # same name again: dropped (even while a connection is open) and recreated empty
            held = ea.connect()
            a2 = fresh_database(url, "fresh_a")
            assert a2 == a
            held.close()
            ea.dispose()
            with create_engine(a2).connect() as c:
                assert c.execute(text("SELECT to_regclass('public.t')")).scalar() is None
        finally:
            ea.dispose()
            eb.dispose()
    print(f"postgres_server started in {started:.2f} s; fresh_database took {created:.3f} s")
    assert started < 15
    assert not _port_open(port)
    assert _wait_gone(pid)
    assert not os.path.exists(data_dir)


def test_fresh_database_rejects_bad_names():
    with pytest.raises(ValueError):
        fresh_database("postgresql+psycopg://smd@127.0.0.1:1/x", "")
    with pytest.raises(ValueError):
        fresh_database("postgresql+psycopg://smd@127.0.0.1:1/x", "x" * 64)


def test_missing_binaries_raise_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServerNotAvailable, match="redis-server"):
        with redis_server():
            pass
    monkeypatch.setenv("PG_BINDIR", str(tmp_path))
    with pytest.raises(ServerNotAvailable, match="initdb"):
        with postgres_server():
            pass


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_servers_die_with_a_killed_test_process(monkeypatch):
    """A test process killed with SIGKILL (no finally, no atexit) leaves no server behind."""
    have_pg = find_postgres_bindir() is not None
    script = textwrap.dedent(f"""
        import contextlib, sys, time
        sys.path.insert(0, {str(REPO)!r})
        from tests import servers
        with contextlib.ExitStack() as stack:
            stack.enter_context(servers.redis_server())
            if {have_pg!r}:
                stack.enter_context(servers.postgres_server())
            print("READY", *servers._live_dirs, flush=True)
            time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server_pids: list[int] = []
    tmpdirs: list[str] = []
    try:
        ready, *tmpdirs = child.stdout.readline().split()
        assert ready == "READY"
        server_pids = _children(child.pid)
        assert len(server_pids) == (2 if have_pg else 1), server_pids
    finally:
        child.kill()
        child.wait()
    try:
        for pid in server_pids:
            assert _wait_gone(pid), f"server process {pid} outlived its killed parent"
        # their temp dirs are left behind; the next start in any process removes them
        assert tmpdirs and all(os.path.isdir(d) for d in tmpdirs)
        monkeypatch.setattr(servers, "_reaped", False)
        servers._reap_stale_dirs()
        assert not any(os.path.exists(d) for d in tmpdirs)
    finally:
        for d in tmpdirs:
            shutil.rmtree(d, ignore_errors=True)
