"""The Python client (smdlab.Client) and the remote CLI against a real `smd serve` (embedded SQLite and
broker, auth on, keys made with `smd keys create`): submit, wait, results, series, plot, rerun, listing
by pages; a 422 carries the field; a 429 waits (or raises with the server's message); `smd follow`'s exit
codes; the examples/ script end to end."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from smdlab import Client, QuotaExceeded, SMDError, SMDValidationError
from tests.conftest import small_spec
from tests.integration.procs import serve_for_alice_and_bob, smd, smd_cli, unreadable_cifar10

pytestmark = pytest.mark.integration
PNG = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    # a short Retry-After while nothing has run long enough to estimate the time to room (the 429 test waits it)
    # its CIFAR-10 files are unreadable: a cifar10 spec is accepted and its run fails
    tmp = tmp_path_factory.mktemp("serve")
    with serve_for_alice_and_bob(tmp, SMD_QUOTA_RETRY_SECONDS="2",
                                 SMD_DATA_DIR=unreadable_cifar10(tmp / "data")) as service:
        yield service


def client_of(env: dict, **kwargs) -> Client:
    return Client(env["SMD_URL"], env["SMD_KEY"], **kwargs)


def test_submit_wait_read_plot_rerun_and_list(service):
    alice, *_ = service
    client = client_of(alice)
    experiment = client.submit(small_spec(trials=16, steps=400, record_every=20), name="client test")
    assert experiment.data["status"] == "queued" and experiment.data["name"] == "client test"
    assert experiment.wait(timeout=60, progress=False).data["status"] == "succeeded"
    doc = experiment.results()
    frame = experiment.series()
    assert list(frame.index) == doc["series"]["step"] and frame.index.name == "step"
    assert list(frame["risk"]) == doc["series"]["risk"]
    assert list(frame["theory/au_equilibrium"]) == doc["theory"]["au_equilibrium"]
    plot = experiment.plot("au")
    assert plot._repr_png_().startswith(PNG) and "au" in experiment.plots()
    rerun = experiment.rerun(params__lr=0.2)
    assert rerun.id != experiment.id and rerun.data["spec"]["params"]["lr"] == 0.2
    assert rerun.data["spec"]["seed"] == experiment.data["spec"]["seed"]
    assert rerun.wait(timeout=60, progress=False).status() == "succeeded"
    listed = [e.id for e in client.experiments(kind="nrq", page_size=1)]   # one per page: the cursor is followed
    assert listed[:2] == [rerun.id, experiment.id]
    assert [e.id for e in client.experiments(kind="nrq", limit=1)] == [rerun.id]   # a cap (it was the page size)
    # HEAD on the event stream of a job that has not ended (uvicorn, not the test client): the GET's headers,
    # and the stream ends at once rather than when the job does
    import httpx

    long = client.submit(small_spec(trials=4, dim=4, steps=10**7, record_every=10**5))   # minutes
    started = time.monotonic()
    head = httpx.head(f"{alice['SMD_URL']}/v1/experiments/{long.id}/events",
                      headers={"Authorization": f"Bearer {alice['SMD_KEY']}"}, timeout=10)
    assert head.status_code == 200 and head.headers["content-type"].startswith("text/event-stream"), head.headers
    assert head.content == b"" and time.monotonic() - started < 5
    assert long.cancel().wait(timeout=60, progress=False).status() == "cancelled"


def test_train_series_have_a_layer_level(service):
    alice, *_ = service
    from tests.api.test_train_experiments import train_spec

    experiment = client_of(alice).submit(train_spec()).wait(timeout=120, progress=False)
    assert experiment.data["status"] == "succeeded", experiment.data
    frame, doc = experiment.series(), experiment.results()
    assert frame.columns.names == ["metric", "layer"]
    layer = next(iter(doc["layers"]))
    # a null of the document (the final row's AU and train loss: no update after it) is NaN in the frame
    def equal(column, values) -> bool:
        column = list(column)
        return len(column) == len(values) and all(
            math.isnan(a) if b is None else a == b for a, b in zip(column, values, strict=True))
    assert equal(frame[("au_rms", layer)], doc["layers"][layer]["au_rms"])
    assert equal(frame[("train_loss", "")], doc["series"]["train_loss"])


def test_presets_through_the_client(service):
    alice, *_ = service
    from tests.api.test_presets import PRESET, TINY

    client = client_of(alice)
    assert PRESET in {p["id"] for p in client.presets()}
    study = client.run_preset(PRESET, overrides=TINY, seeds=[0])
    checks = study.checks()
    assert checks and {c["verdict"] for c in checks} == {"pending"}   # until every child has ended
    reopened = client.study(study.id)   # a study reopened by its id (another session, another day)
    assert reopened.id == study.id and reopened.data["name"] == study.data["name"]
    with pytest.raises(TypeError, match="a study id alone"):
        client.study(study.id, seeds=[1])
    assert study.cancel().data["cancel_requested"] is True
    plain = client.study(small_spec(trials=4, steps=100, record_every=20), grid={"params.lr": [0.1]})
    with pytest.raises(SMDError, match="is not a preset's: it has no checks"):   # (it was an empty list)
        plain.checks()
    plain.cancel()


def test_a_422_names_the_field(service):
    alice, *_ = service
    client = client_of(alice)
    with pytest.raises(SMDValidationError) as caught:
        client.submit(small_spec(lr=-1.0))
    assert caught.value.status == 422
    assert [e["field"] for e in caught.value.errors] == ["params.lr"]
    assert "greater than 0" in caught.value.errors[0]["reason"]
    with pytest.raises(SMDValidationError) as caught:   # its loc reads sde.params.normalized_linear.lr
        client.submit({"kind": "sde", "params": {"model": "normalized_linear", "lr": -1.0}})
    assert [e["field"] for e in caught.value.errors] == ["params.lr"] and "params.lr: " in str(caught.value)
    done = client.submit(small_spec(trials=4, steps=20, record_every=10)).wait(timeout=60, progress=False)
    with pytest.raises(SMDValidationError) as caught:
        done.rerun({"params.learning_rate": 0.2})
    assert caught.value.errors[0]["field"] == "overrides.params.learning_rate"
    assert "params.lr" in caught.value.errors[0]["reason"]   # the nearest valid paths


def test_a_refused_study_point_is_said_with_its_axis_values(service, tmp_path):
    """As `smd study run` says it here: the point's index alone does not say which values were refused."""
    alice, *_ = service
    base = small_spec(trials=4, steps=20, record_every=10)
    with pytest.raises(SMDValidationError) as caught:
        client_of(alice).study(base, grid={"params.lr": [0.1, -0.1], "params.weight_decay": [0.01]})
    assert caught.value.errors[0]["point"] == {"index": 1, "values": {"params.lr": -0.1, "params.weight_decay": 0.01}}
    assert "(at params.lr=-0.1, params.weight_decay=0.01)" in str(caught.value)
    study = tmp_path / "study.json"
    study.write_text(json.dumps({"base": base, "grid": {"params.lr": [0.1, -0.1], "params.weight_decay": [0.01]}}))
    said = "point 1, params.lr: Input should be greater than 0 (at params.lr=-0.1, params.weight_decay=0.01)\n"
    remote = smd(alice, "study", "submit", str(study))
    assert remote.returncode == 2 and remote.stderr == f"smd study: rejected (422):\n  {said}", remote.stderr
    local = smd(alice, "study", "run", str(study), "-o", str(tmp_path / "out"))
    assert local.returncode == 2 and local.stderr.endswith(f"\n  {said}"), local.stderr


@pytest.mark.parametrize("suffix", ["/", "/v1", "/v1/"])
def test_an_address_pasted_with_v1_or_a_slash_is_the_service(service, suffix):
    alice, *_ = service
    client = Client(alice["SMD_URL"] + suffix, alice["SMD_KEY"])
    assert client.url == alice["SMD_URL"] and list(client.experiments(limit=1)) is not None
    listed = smd({**alice, "SMD_URL": alice["SMD_URL"] + suffix}, "ls", "--limit", "1")
    assert listed.returncode == 0 and listed.stdout.startswith("ID"), listed.stderr


def test_an_address_that_is_not_the_service_is_said_so(service):
    """Not a bare "HTTP 404: Not Found", which reads as "no such experiment"."""
    alice, *_ = service
    elsewhere = smd({**alice, "SMD_URL": alice["SMD_URL"] + "/api"}, "ls")
    assert elsewhere.returncode == 1 and f"{alice['SMD_URL']}/api/v1/experiments is no route of the service: " \
        "is SMD_URL the service's address" in elsewhere.stderr, elsewhere.stderr


def test_a_429_waits_for_room_or_raises_with_the_message(service):
    alice, *_ = service
    smd_cli(alice, "users", "create", "carol")
    smd_cli(alice, "users", "quota", "carol", "--max-active-jobs", "1")
    key = smd_cli(alice, "keys", "create", "carol").strip()
    carol = {**alice, "SMD_KEY": key}
    slow = small_spec(trials=4, dim=4, steps=30_000, record_every=1000)   # about a second
    first = client_of(carol).submit(slow)
    with pytest.raises(QuotaExceeded) as caught:
        client_of(carol, retry_429=False).submit(slow)
    assert "at most 1 queued + running jobs" in str(caught.value.detail) and caught.value.retry_after >= 1
    assert caught.value.quota == "active_jobs"
    started = time.monotonic()   # a job over the work quota can never fit: raised at once, not waited on
    with pytest.raises(QuotaExceeded) as caught:
        client_of(carol, max_quota_wait=120).submit(small_spec(trials=10**6, steps=10**6))
    assert caught.value.quota == "work" and "work per job" in str(caught.value.detail)
    # waiting it out would take max_quota_wait (120 s, in Retry-After steps of 2 s) before raising
    assert time.monotonic() - started < 60, "the client waited on a work quota"
    started = time.monotonic()   # nor a study with more children than the active-jobs limit (no Retry-After)
    with pytest.raises(QuotaExceeded) as caught:
        client_of(carol, max_quota_wait=120).study(slow, grid={"params.lr": [0.1, 0.2]})
    assert caught.value.quota == "active_jobs" and caught.value.retry_after is None
    assert "more than the limit itself" in str(caught.value.detail)
    assert time.monotonic() - started < 60, "the client waited on a study that can never fit"
    started, waits = time.monotonic(), []
    second = client_of(carol, max_quota_wait=120, on_quota_wait=lambda *wait: waits.append(wait)).submit(slow)
    assert first.status() in ("succeeded", "running") and time.monotonic() - started > 0.5   # waited, then in
    assert waits and all(seconds >= 1 and quota == "active_jobs" for seconds, quota, _ in waits), waits
    assert second.wait(timeout=120, progress=False).data["status"] == "succeeded"
    assert first.wait(timeout=60, progress=False).data["status"] == "succeeded"


def test_cli_commands_and_follow_exit_codes(service, tmp_path):
    alice, *_ = service
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(small_spec(trials=8, steps=200, record_every=20)))
    done = smd(alice, "submit", str(spec), "--follow", "--quiet", "--name", "cli run")
    assert done.returncode == 0 and "succeeded" in done.stderr, done.stderr
    experiment_id = done.stdout.strip()
    status = smd(alice, "status", experiment_id)
    assert status.returncode == 0 and "succeeded" in status.stdout and "step 200/200" in status.stdout
    listed = smd(alice, "ls", "--kind", "nrq", "--limit", "3")
    assert listed.returncode == 0 and listed.stdout.startswith("ID") and experiment_id in listed.stdout
    results = smd(alice, "results", experiment_id, "--csv", "-o", str(tmp_path / "r.csv"))
    assert results.returncode == 0 and (tmp_path / "r.csv").read_text().startswith("step,")
    assert results.stderr == f"smd results: wrote {tmp_path / 'r.csv'}\n"   # said, as smd run -o says it
    rerun = smd(alice, "rerun", experiment_id, "--set", "params.lr=0.3", "--name", "cli rerun", "--follow", "--quiet")
    assert rerun.returncode == 0, rerun.stderr
    rerun_data = client_of(alice).experiment(rerun.stdout.strip()).data
    assert rerun_data["spec"]["params"]["lr"] == 0.3 and rerun_data["name"] == "cli rerun"   # --name is its name
    # a rerun that keeps its checkpoint (the continue 409 says "or rerun it so"), then continued from the CLI
    kept = smd(alice, "rerun", experiment_id, "--keep-checkpoint", "--follow", "--quiet")
    assert kept.returncode == 0 and client_of(alice).experiment(kept.stdout.strip()).data["keep_checkpoint"] is True
    extended = smd(alice, "continue", kept.stdout.strip(), "--steps", "100", "--follow", "--quiet")
    assert extended.returncode == 0 and "300 steps in all" in extended.stderr, extended.stderr
    assert "step 300/300" in smd(alice, "status", kept.stdout.strip()).stdout
    warned = tmp_path / "warned.json"   # ηλ ≥ 2: its warning said as smd run says it
    warned.write_text(json.dumps(small_spec(trials=4, steps=20, record_every=10, lr=100, weight_decay=0.9)))
    warning = smd(alice, "submit", str(warned))
    assert warning.returncode == 0 and "smd submit: warning: no_equilibrium: " in warning.stderr, warning.stderr
    bad = smd(alice, "rerun", experiment_id, "--set", "params.lr=-2")
    assert bad.returncode == 2 and "params.lr" in bad.stderr
    unusable = smd(alice, "rerun", experiment_id, "--set", "noequals")
    assert unusable.returncode == 2 and "expected PATH=VALUE" in unusable.stderr
    (tmp_path / "broken.json").write_text('{"kind": "nrq",')            # refused before any request, no traceback
    for path, words in ((tmp_path / "broken.json", "Expecting"), (tmp_path / "missing.json", "No such file")):
        unread = smd(alice, "submit", str(path))
        assert unread.returncode == 2 and "cannot read the spec" in unread.stderr and words in unread.stderr
        assert "Traceback" not in unread.stderr

    failing = tmp_path / "failing.json"   # valid, but the server's CIFAR-10 files are unreadable: fails when run
    failing.write_text(json.dumps({"kind": "train", "params": {"dataset": {"name": "cifar10"}, "steps": 10,
                                                               "record_every": 5}}))
    failed = smd(alice, "submit", str(failing), "--follow", "--quiet")
    assert failed.returncode == 1 and "failed" in failed.stderr and "cifar10" in failed.stderr

    gpu = tmp_path / "gpu.json"   # no worker serves the gpu queue here: said at once, not left to wait unsaid
    gpu.write_text(json.dumps({**small_spec(trials=4, dim=4, steps=100, record_every=10), "device": "cuda"}))
    waiting = smd(alice, "submit", str(gpu), "--tag", "waits", "--tag", "gpu", "--note", "no gpu here")
    assert waiting.returncode == 0 and "warning: no worker serves the gpu queue now" in waiting.stderr, waiting.stderr
    tagged = client_of(alice).experiment(waiting.stdout.strip()).data
    assert sorted(tagged["tags"]) == ["gpu", "waits"] and tagged["note"] == "no gpu here", tagged
    assert smd(alice, "cancel", waiting.stdout.strip()).returncode == 0
    refused = smd(alice, "ls", "--status", "done")   # said as the command's option, not the query's "query.status"
    assert refused.returncode == 2 and "  --status: " in refused.stderr and "query." not in refused.stderr, refused.stderr

    long = tmp_path / "long.json"
    long.write_text(json.dumps(small_spec(trials=4, dim=4, steps=2_000_000, record_every=1000)))
    submitted = smd(alice, "submit", str(long))
    long_id = submitted.stdout.strip()
    follower = subprocess.Popen([sys.executable, "-m", "smdcli.main", "follow", long_id, "--quiet"], env=alice,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert smd(alice, "cancel", long_id).returncode == 0
    assert follower.wait(timeout=60) == 2 and "cancelled" in follower.stderr.read()
    again = smd(alice, "cancel", long_id)   # a script that cancels twice: done, not an error (it was a 409, exit 1)
    assert again.returncode == 0 and "cancelled (already)" in again.stdout, again.stderr
    assert smd(alice, "status", "0" * 32).returncode == 1
    stranger = smd({**alice, "SMD_KEY": "smd_000000000000_not-a-key-of-this-server"}, "ls")
    assert stranger.returncode == 1 and "401" in stranger.stderr and "set SMD_KEY" in stranger.stderr


def test_the_example_notebook_runs(service, tmp_path):
    alice, *_ = service
    out = tmp_path / "example.png"
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "client_study.py"), str(out)], env=alice,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.read_bytes().startswith(PNG) and out.stat().st_size > 10_000
    assert "au_equilibrium" in done.stdout and "succeeded" in done.stdout
    os.makedirs(ROOT / "test-artifacts", exist_ok=True)
    (ROOT / "test-artifacts" / "client_study.png").write_bytes(out.read_bytes())   # to look at


def test_a_followed_bar_paces_from_the_progress_it_first_saw():
    """wait(progress=True) on a job already half done (or resumed from a checkpoint while followed): tqdm's
    remaining time is (1 − n) · elapsed / (n − initial), so initial is the first progress seen, not 0 (which
    took half a job's progress for a second's work)."""
    from smdlab.client import _bar, _show

    bar = _bar(True, "job")
    try:
        _show(bar, {"progress": 0.5, "status": "running"})
        _show(bar, {"progress": 0.6, "status": "running"})
        assert bar.format_dict["initial"] == 0.5 and bar.n == 0.6
        _show(bar, {"progress": 0.4, "status": "running"})   # resumed from an earlier checkpoint
        assert bar.format_dict["initial"] == 0.4
    finally:
        bar.close()
