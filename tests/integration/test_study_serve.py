"""`smd study` against a real `smd serve` (embedded SQLite and filesystem broker, auth on, a key made
with `smd keys create`), and `smd study run` on the same study without the service:

- the acceptance grid (4×4 lr × weight_decay, each point started at its equilibrium norm) from one
  submission: every child succeeds, the tail risk lies within Monte-Carlo tolerance of
  `risk_stationary` at every point and along every iso-ηλ diagonal, the plots render, and the
  local run of its first points writes the same rows, number for number;
- the remote commands' error paths: an unknown axis (422, exit 2), over a quota (429, exit 3),
  and a cancelled study (`status --follow` exits 2).
"""
from __future__ import annotations

import json
import os
import re
import time

import httpx
import pytest

from tests.engine.test_study import STUDY_ACCEPTANCE, risk_tolerance
from tests.integration.procs import serve_for_alice_and_bob, smd

pytestmark = pytest.mark.integration
LOCAL_POINTS = 4   # of the 16: enough to compare local and served rows (2 processes), a quarter of the work


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """(env for remote commands as alice, env for bob (a small work quota), base URL, state folder)."""
    with serve_for_alice_and_bob(tmp_path_factory.mktemp("serve"), SMD_MAX_STUDY_POINTS="100") as service:
        yield service


def test_the_acceptance_grid_through_the_service_and_locally(service, tmp_path):
    alice, _, base, state = service
    study_file = tmp_path / "study.json"
    study_file.write_text(json.dumps({**STUDY_ACCEPTANCE, "visibility": "lab"}))
    submitted = smd(alice, "study", "submit", str(study_file), "--follow", "--quiet")
    assert submitted.returncode == 0, (submitted.stderr, (state / "serve.log").read_text()[-3000:])
    study_id = submitted.stdout.strip()
    assert "succeeded" in submitted.stderr
    status = smd(alice, "study", "status", study_id)
    assert status.returncode == 0 and "succeeded" in status.stdout and "succeeded 16" in status.stdout
    table = smd(alice, "study", "table", study_id, "--json", "-o", str(tmp_path / "served.json"))
    assert table.returncode == 0, table.stderr
    served = json.loads((tmp_path / "served.json").read_text())["rows"]
    assert len(served) == 16 and {row["status"] for row in served} == {"succeeded"}
    # for a terminal (the default): a header and a line per point, aligned, numbers to 4 digits, no ids
    text = smd(alice, "study", "table", study_id, "--group", "point")
    header, *lines = text.stdout.splitlines()
    assert text.returncode == 0 and header.startswith("point ") and len(lines) == 16, text.stdout
    assert "experiment_id" not in header and f"{served[0]['risk']:.4g}" in text.stdout
    at = header.index("params.lr ")   # every value starts under its column's name
    assert all(line[at] != " " and line[at - 2:at] == "  " for line in lines), text.stdout
    for row in served:   # acceptance 1: every point at the stationary risk, within 3 standard errors
        assert abs(row["risk"] - row["risk_stationary"]) <= risk_tolerance(row), row
    diagonals: dict[int, list[dict]] = {}
    for row in served:
        diagonals.setdefault(round(row["intrinsic_lr"] / 1.25e-4), []).append(row)
    assert sorted(len(d) for d in diagonals.values()) == [1, 1, 2, 2, 3, 3, 4]
    for members in diagonals.values():
        for row in members:
            assert abs(row["risk"] - members[0]["risk"]) <= risk_tolerance(row) + risk_tolerance(members[0])

    # the local run of the study's first points (each child is seeded by its own spec: the same children)
    local_file = tmp_path / "local.json"
    local_file.write_text(json.dumps({**STUDY_ACCEPTANCE, "points": STUDY_ACCEPTANCE["points"][:LOCAL_POINTS]}))
    local = smd(alice, "study", "run", str(local_file), "-o", str(tmp_path / "local"), "-j", "2", "--quiet")
    assert local.returncode == 0, local.stderr
    written = json.loads((tmp_path / "local" / "table.json").read_text())["rows"]
    assert len(written) == LOCAL_POINTS
    assert [{k: v for k, v in row.items() if k != "experiment_id"} for row in served[:LOCAL_POINTS]] == \
           [{k: v for k, v in row.items() if k != "experiment_id"} for row in written]   # the same numbers

    plots = f"{base}/v1/studies/{study_id}/plots"
    headers = {"Authorization": f"Bearer {alice['SMD_KEY']}"}
    for name, params in (("heatmap", {"metric": "risk", "x": "params.lr", "y": "params.weight_decay"}),
                         ("scatter", {"metric": "risk", "x": "intrinsic_lr"}),
                         ("overlay", {"metric": "risk", "x": "intrinsic_time"})):
        r = httpx.get(f"{plots}/{name}.png", params=params, headers=headers, timeout=60)
        assert r.status_code == 200 and r.content[:8] == b"\x89PNG\r\n\x1a\n", (name, r.text[:300])
        if os.environ.get("SMD_KEEP_PLOTS"):   # to look at them: SMD_KEEP_PLOTS=/some/dir pytest ...
            with open(os.path.join(os.environ["SMD_KEEP_PLOTS"], f"{name}.png"), "wb") as out:
                out.write(r.content)
    r = httpx.get(f"{plots}/scatter.png", params={"metric": "nope", "x": "intrinsic_lr"}, headers=headers)
    assert r.status_code == 422 and "risk" in r.text   # names the metrics that do apply


def test_remote_errors_quota_and_cancel(service, tmp_path):
    alice, bob, base, _ = service
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"base": {"kind": "nrq"}, "grid": {"params.learning_rate": [0.1]}}))
    refused = smd(alice, "study", "submit", str(bad))
    assert refused.returncode == 2 and "params.learning_rate" in refused.stderr and "params.lr" in refused.stderr
    many = tmp_path / "many.json"
    many.write_text(json.dumps({"base": {"kind": "nrq"}, "grid": {"params.lr": {"linspace": [0.1, 0.2], "num": 101}}}))
    too_many = smd(alice, "study", "submit", str(many))
    assert too_many.returncode == 2 and "at most 100" in too_many.stderr
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"base": {"kind": "nrq", "params": {"dim": 10, "trials": 100, "steps": 1000}},
                               "seeds": [0, 1]}))
    over = smd(bob, "study", "submit", str(big))
    assert over.returncode == 3 and "work" in over.stderr, over.stderr   # 2·10⁶ > bob's 10⁶
    long = tmp_path / "long.json"
    long.write_text(json.dumps({"base": {"kind": "nrq", "params": {"dim": 10, "trials": 500, "steps": 200_000,
                                                                   "record_every": 1000}},
                                "grid": {"params.lr": [0.1, 0.2, 0.3]}, "fuse": False}))   # one child at a time
    submitted = smd(alice, "study", "submit", str(long))
    assert submitted.returncode == 0, submitted.stderr
    study_id = submitted.stdout.strip()
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {alice['SMD_KEY']}"}, timeout=30)
    first = client.get(f"/v1/studies/{study_id}").json()["children"][0]["id"]
    deadline = time.monotonic() + 60
    while not client.get(f"/v1/experiments/{first}/results", params={"max_points": 2}).json()["series"].get("step"):
        assert time.monotonic() < deadline, "the first child stored no points"
        time.sleep(0.2)   # running, with points stored
    cancelled_at = time.monotonic()
    assert smd(alice, "study", "cancel", study_id).returncode == 0
    followed = smd(alice, "study", "status", study_id, "--follow", "--quiet", timeout=120)
    assert followed.returncode == 2 and "cancelled" in followed.stderr, followed.stderr
    assert time.monotonic() - cancelled_at < 20   # the running child stopped within seconds (flushes every 0.3 s)
    children = [client.get(f"/v1/experiments/{c['id']}").json() for c in
                client.get(f"/v1/studies/{study_id}").json()["children"]]
    assert [c["status"] for c in children] == ["cancelled"] * 3
    assert [c["attempts"] for c in children] == [1, 0, 0]   # no child started after the cancel
    partial = client.get(f"/v1/experiments/{first}/results").json()
    assert 0 < len(partial["series"]["step"]) < 200   # the running child kept its partial results
    assert smd(bob, "study", "status", study_id).returncode == 1   # alice's private study: a 404 for bob


def test_smd_status_says_a_running_experiments_eta(service):
    """Through the service: once a running job has reported twice, its eta is set and `smd status` says it, as
    this host's time and the interval to it; a cancel asked ends the estimate."""
    alice, _, base, _ = service
    headers = {"Authorization": f"Bearer {alice['SMD_KEY']}"}
    spec = {"kind": "nrq", "name": "long", "params": {"steps": 400_000, "trials": 200, "record_every": 1000}}
    experiment_id = httpx.post(f"{base}/v1/experiments", json=spec, headers=headers, timeout=30).json()["id"]
    deadline = time.monotonic() + 60
    while (row := httpx.get(f"{base}/v1/experiments/{experiment_id}", headers=headers, timeout=30).json())["eta"] is None:
        assert time.monotonic() < deadline and row["status"] in ("queued", "running"), row
        time.sleep(0.3)
    assert row["eta"] > row["progressed_at"]
    status = smd(alice, "status", experiment_id)
    eta_line = status.stdout.splitlines()[1]
    assert status.returncode == 0 and re.fullmatch(r"eta \d\d:\d\d:\d\d \(in \d+:\d\d:\d\d\)", eta_line), status.stdout
    cancelled = httpx.post(f"{base}/v1/experiments/{experiment_id}/cancel", headers=headers, timeout=30).json()
    assert cancelled["eta"] is None and len(smd(alice, "status", experiment_id).stdout.splitlines()) == 1
