"""`smd users …` / `smd keys …` as an operator runs them (subprocesses), and the refusal to serve
with auth off on a non-loopback address."""
from __future__ import annotations

import os
import subprocess
import sys

from fastapi.testclient import TestClient

from api.main import create_app
from store.settings import Settings


def smd(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "smdcli.main", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_users_and_keys_lifecycle(tmp_path, database_url):
    env = {**os.environ, "SMD_DATABASE_URL": database_url, "SMD_STATE_DIR": str(tmp_path / "state")}
    assert smd(env, "users", "create", "alice").returncode == 0
    assert smd(env, "users", "create", "root", "--admin").returncode == 0
    dup = smd(env, "users", "create", "alice")
    assert dup.returncode == 2 and "already exists" in dup.stderr
    bad = smd(env, "users", "create", "no spaces")
    assert bad.returncode == 2 and "user name: expected" in bad.stderr
    created = smd(env, "keys", "create", "alice", "--label", "laptop")
    key = created.stdout.strip()
    assert created.returncode == 0 and key.startswith("smd_") and "shown once" in created.stderr
    key_id = key.split("_")[1]
    assert smd(env, "keys", "create", "nobody").returncode == 2
    quota = smd(env, "users", "quota", "alice", "--max-active-jobs", "1")
    assert quota.returncode == 0 and "max_active_jobs 1" in quota.stdout
    assert smd(env, "users", "quota", "alice", "--max-work", "0").returncode == 2   # argparse: positive or default
    listing = smd(env, "keys", "list")
    assert key_id in listing.stdout and "laptop" in listing.stdout and "active" in listing.stdout
    assert key.split("_", 2)[2] not in listing.stdout       # the secret is never shown again
    users_out = smd(env, "users", "list").stdout
    assert "alice" in users_out and "admin" in users_out

    settings = Settings(state_dir=tmp_path / "state", database_url=database_url, auth="on")
    spec = {"kind": "nrq", "params": {"dim": 4, "trials": 2, "steps": 20, "record_every": 10}}
    with TestClient(create_app(settings)) as client:
        headers = {"Authorization": f"Bearer {key}"}
        assert client.post("/v1/experiments", json=spec, headers=headers).status_code == 202
        r = client.post("/v1/experiments", json=spec, headers=headers)
        assert r.status_code == 429 and "at most 1 " in r.json()["detail"]   # the quota override applies
        assert smd(env, "users", "quota", "alice", "--max-active-jobs", "default").returncode == 0
        assert client.post("/v1/experiments", json=spec, headers=headers).status_code == 202
        revoked = smd(env, "keys", "revoke", key_id)
        assert revoked.returncode == 0 and "revoked" in revoked.stdout
        assert client.get("/v1/experiments", headers=headers).status_code == 401
    assert "revoked" in smd(env, "keys", "list", "alice").stdout
    assert smd(env, "keys", "revoke", "ffffffffffff").returncode == 2


def test_server_refuses_auth_off_on_a_public_address(tmp_path):
    env = {**os.environ, "SMD_AUTH": "off", "SMD_HOST": "0.0.0.0", "SMD_STATE_DIR": str(tmp_path / "s"),
           "SMD_PORT": "1"}
    for command in ("api", "serve"):
        result = smd(env, command)
        assert result.returncode == 2 and "SMD_AUTH=off is allowed only on a loopback address" in result.stderr
