"""`smd export mlflow` against a real `mlflow server` (a free port, a temporary SQLite backend store and
artifact folder, started here and removed after) and a real `smd serve`: the runs are read back through
MLflow's own client — params, every series point with its step (per layer and theory too), tags,
provenance and the plots as artifacts."""
from __future__ import annotations

import json
import sys
import time

import httpx
import pytest

from tests.api.test_train_experiments import train_spec
from tests.conftest import small_spec
from tests.integration.procs import serve_for_alice_and_bob, smd, spawn, stop, wait_http
from tests.servers import free_port

mlflow = pytest.importorskip("mlflow")
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = tmp / "mlflow.log"
    proc = spawn([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                  "--workers", "1", "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
                  "--artifacts-destination", str(tmp / "artifacts")], {"PATH": "/usr/bin:/bin", "HOME": str(tmp),
                  # no job runner: it starts seven huey consumers, each importing MLflow, and the export uses
                  # none of MLflow's server-side jobs
                  "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, log)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, log, timeout=120)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc, timeout=2)   # its data is thrown away: no need to wait for a graceful shutdown


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with serve_for_alice_and_bob(tmp_path_factory.mktemp("serve")) as service:
        yield service


def submitted(env: dict, spec: dict) -> str:
    r = httpx.post(f"{env['SMD_URL']}/v1/experiments", json=spec, headers={"Authorization": f"Bearer {env['SMD_KEY']}"})
    assert r.status_code == 202, r.text
    return r.json()["id"]


def finished(env: dict, experiment_id: str) -> dict:
    headers = {"Authorization": f"Bearer {env['SMD_KEY']}"}
    deadline = time.monotonic() + 120
    while True:
        body = httpx.get(f"{env['SMD_URL']}/v1/experiments/{experiment_id}", headers=headers).json()
        if body["status"] in ("succeeded", "failed", "cancelled"):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


def test_experiments_become_mlflow_runs(service, mlflow_server, tmp_path):
    alice, _, base, state = service
    nrq = submitted(alice, small_spec(trials=8, steps=200, record_every=20,
                                      lr_schedule=[{"step": 100, "lr_factor": 0.1}]))
    train = submitted(alice, train_spec())
    for experiment_id in (nrq, train):
        assert finished(alice, experiment_id)["status"] == "succeeded", (state / "serve.log").read_text()[-3000:]
    args = ("export", "mlflow", nrq, train, "--tracking-uri", mlflow_server, "--experiment", "smd-test")
    done = smd(alice, *args, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line.split("\t") for line in done.stdout.splitlines()]
    assert len(lines) == 2, (done.stdout, done.stderr)
    assert [(line[0], line[2]) for line in lines] == [(nrq, "exported"), (train, "exported")]
    again = smd(alice, *args, timeout=300)   # idempotent: the same runs, nothing written twice
    assert again.returncode == 0 and [line.split("\t")[1] for line in again.stdout.splitlines()] == \
        [line[1] for line in lines]

    headers = {"Authorization": f"Bearer {alice['SMD_KEY']}"}
    client = mlflow.MlflowClient(tracking_uri=mlflow_server)
    for (experiment_id, run_id, _), kind in zip(lines, ("nrq", "train"), strict=True):
        doc = httpx.get(f"{base}/v1/experiments/{experiment_id}/results", headers=headers).json()
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED" and run.info.experiment_id == \
            client.get_experiment_by_name("smd-test").experiment_id
        tags = run.data.tags
        assert tags["smd.id"] == experiment_id and tags["smd.kind"] == kind and tags["smd.status"] == "succeeded"
        assert tags["smd.owner"] == "alice"
        params = run.data.params
        assert params["seed"] == json.dumps(doc["spec"]["seed"]) and params["kind"] == kind
        assert float(params["params.lr"]) == doc["spec"]["params"]["lr"]
        steps = doc["series"]["step"]
        for name, values in doc["series"].items():   # every series point, with its step
            if name == "step":
                continue
            history = client.get_metric_history(run_id, name)
            want = [(s, v) for s, v in zip(steps, values, strict=True) if v is not None]
            assert [(m.step, m.value) for m in history] == want, name
        artifacts = {a.path for a in client.list_artifacts(run_id, "plots")}
        assert artifacts == {f"plots/{p['name']}.png" for p in
                             httpx.get(f"{base}/v1/experiments/{experiment_id}/plots", headers=headers).json()}
        assert {a.path for a in client.list_artifacts(run_id)} >= {"plots", "results.json"}
        if kind == "nrq":
            assert params["params.lr_schedule.0.step"] == "100"
            au = client.get_metric_history(run_id, "theory/au_equilibrium")
            assert [(m.step, m.value) for m in au] == list(zip(steps, doc["theory"]["au_equilibrium"], strict=True))
            assert run.data.metrics["summary/risk"] == doc["summary"]["risk"]
        else:
            layer, metrics = next(iter(doc["layers"].items()))
            history = client.get_metric_history(run_id, f"{layer}/au_rms")
            # null points (the final row's: no update after it) are not logged
            assert [(m.step, m.value) for m in history] == [(s, v) for s, v in zip(steps, metrics["au_rms"], strict=True)
                                                            if v is not None]
        if doc.get("provenance"):   # recorded by workers since provenance exists
            assert tags["smd.provenance.engine_version"] == doc["provenance"]["attempts"][-1]["engine_version"]

    refused = smd(alice, "export", "mlflow", "--tracking-uri", mlflow_server)
    assert refused.returncode == 2 and "expected experiment ids or --study" in refused.stderr
    missing = smd(alice, "export", "mlflow", "0" * 32, "--tracking-uri", mlflow_server)
    assert missing.returncode == 1 and "404" in missing.stderr
