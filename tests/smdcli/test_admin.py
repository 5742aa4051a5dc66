"""`smd users …` / `smd keys …` as an operator runs them, and the refusal to serve with auth off on a
non-loopback address. The console script runs as a subprocess once per scenario; the other commands
run `smdcli.main.main` in this process (the same code, its exit status and output, without a Python
start-up each)."""
from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from smdcli.main import main
from store.settings import Settings, get_settings


def smd(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smdcli.main", *args], env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def smd_here(monkeypatch, capsys):
    """``smd_here(env, *args)``: `smd ARGS` in this process with the ``SMD_*`` variables of ``env``; a
    namespace of returncode, stdout and stderr, as `smd` gives."""
    def run(env: dict, *args: str) -> SimpleNamespace:
        for name, value in env.items():
            if name.startswith("SMD_"):
                monkeypatch.setenv(name, value)
        get_settings.cache_clear()   # the settings of this environment, not of an earlier call
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:     # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            get_settings.cache_clear()
        out = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)
    return run


def test_users_and_keys_lifecycle(tmp_path, database_url, smd_here):
    env = {**os.environ, "SMD_DATABASE_URL": database_url, "SMD_STATE_DIR": str(tmp_path / "state")}
    assert smd(env, "users", "create", "alice").returncode == 0       # the console script, as an operator
    assert smd_here(env, "users", "create", "root", "--admin").returncode == 0
    dup = smd_here(env, "users", "create", "alice")
    assert dup.returncode == 2 and "already exists" in dup.stderr
    bad = smd_here(env, "users", "create", "no spaces")
    assert bad.returncode == 2 and "user name: expected" in bad.stderr
    created = smd_here(env, "keys", "create", "alice", "--label", "laptop")
    key = created.stdout.strip()
    assert created.returncode == 0 and key.startswith("smd_") and "shown once" in created.stderr
    key_id = key.split("_")[1]
    assert smd_here(env, "keys", "create", "nobody").returncode == 2
    quota = smd_here(env, "users", "quota", "alice", "--max-active-jobs", "1")
    assert quota.returncode == 0 and "max_active_jobs 1" in quota.stdout
    assert smd_here(env, "users", "quota", "alice", "--max-work", "0").returncode == 2   # argparse: positive or default
    listing = smd_here(env, "keys", "list")
    assert key_id in listing.stdout and "laptop" in listing.stdout and "active" in listing.stdout
    assert key.split("_", 2)[2] not in listing.stdout       # the secret is never shown again
    users_out = smd_here(env, "users", "list").stdout
    assert "alice" in users_out and "admin" in users_out
    header, *rows = users_out.splitlines()   # columns aligned: each value ends where its header does
    for row in rows:
        for title in ("max_active_jobs", "max_work"):
            end = header.index(title) + len(title)
            assert row[:end].endswith(("(default)", *map(str, range(10)))) and row[end:end + 1] in ("", " "), users_out

    settings = Settings(state_dir=tmp_path / "state", database_url=database_url, auth="on")
    spec = {"kind": "nrq", "params": {"dim": 4, "trials": 2, "steps": 20, "record_every": 10}}
    with TestClient(create_app(settings)) as client:
        headers = {"Authorization": f"Bearer {key}"}
        assert client.post("/v1/experiments", json=spec, headers=headers).status_code == 202
        r = client.post("/v1/experiments", json=spec, headers=headers)
        assert r.status_code == 429 and "at most 1 " in r.json()["detail"]   # the quota override applies
        assert smd_here(env, "users", "quota", "alice", "--max-active-jobs", "default").returncode == 0
        assert client.post("/v1/experiments", json=spec, headers=headers).status_code == 202
        revoked = smd_here(env, "keys", "revoke", key_id)
        assert revoked.returncode == 0 and "revoked" in revoked.stdout
        assert client.get("/v1/experiments", headers=headers).status_code == 401
    assert "revoked" in smd_here(env, "keys", "list", "alice").stdout
    assert smd_here(env, "keys", "revoke", "ffffffffffff").returncode == 2


def test_server_refuses_auth_off_on_a_public_address(tmp_path):
    env = {**os.environ, "SMD_AUTH": "off", "SMD_HOST": "0.0.0.0", "SMD_STATE_DIR": str(tmp_path / "s"),
           "SMD_PORT": "1"}
    for command in ("api", "serve"):
        result = smd(env, command)
        assert result.returncode == 2 and "SMD_AUTH=off is allowed only on a loopback address" in result.stderr
