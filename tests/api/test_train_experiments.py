"""The ``train`` kind through the API (SQLite and PostgreSQL, real engine run by the worker's runner):
validation, the result document with per-layer series, plots, and a clear refusal or failure without data."""
from __future__ import annotations

import numpy as np
import pytest

from tests.api.test_experiments import submit
from worker.runner import execute


def train_spec(**params) -> dict:
    base = {"dataset": {"name": "digits"}, "label_noise": 0.2, "depth": 2, "width": 16, "batch_size": 32,
            "lr": 0.5, "weight_decay": 2e-3, "steps": 60, "record_every": 10, "eval_every": 20}
    base.update(params)
    return {"kind": "train", "seed": 3, "device": "cpu", "params": base}


@pytest.mark.parametrize("params, field, reason", [
    ({"dataset": {"name": "imagenet"}}, "name", "name: expected one of"),
    ({"norm": "instance"}, "norm", "Input should be"),
    ({"steps": 10, "epochs": 2}, "params", "either steps or epochs"),
    ({"batch_size": 5000}, "params", "batch_size: expected at most"),
    ({"lr": 0.0}, "lr", "greater than 0"),
])
def test_invalid_train_spec_is_422_naming_field(client, params, field, reason):
    r = client.post("/v1/experiments", json=train_spec(**params))
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert any(field in map(str, e["loc"]) and reason in e["msg"] for e in errors), errors
    assert client.get("/v1/experiments").json()["total"] == 0


def test_train_runs_and_serves_layers_summary_and_plots(client, settings):
    exp = submit(client, train_spec())
    assert exp["kind"] == "train" and exp["total_steps"] == 60
    assert execute(settings, exp["id"]) == "succeeded"
    doc = client.get(f"/v1/experiments/{exp['id']}/results").json()
    assert doc["series"]["step"] == [0, 10, 20, 30, 40, 50, 60]   # six windows, then the final state
    assert set(doc["layers"]) == {"layers.0.weight", "layers.1.weight"}
    for series in doc["layers"].values():
        assert len(series["au_rms"]) == 7 and all(v > 0 for v in series["au_rms"][:-1]) and series["au_rms"][-1] is None
        assert series["norm"][-1] > 0
    assert doc["series"]["test_acc"][1] is None and doc["series"]["test_acc"][2] is not None
    assert doc["series"]["test_acc"][-1] == pytest.approx(doc["summary"]["test_acc_final"])
    assert len(doc["theory"]["au_equilibrium"]) == 7
    layer = doc["summary"]["layers"]["layers.0.weight"]
    assert layer["au_equilibrium"] == pytest.approx((2 * 0.5 * 2e-3) ** 0.5)
    assert "equilibrium_step" in layer and 0 < doc["summary"]["test_acc_final"] <= 1
    for name in ("au", "norm", "loss", "accuracy"):
        r = client.get(f"/v1/experiments/{exp['id']}/plots/{name}.png")
        assert r.status_code == 200 and r.content[:4] == b"\x89PNG", name


CIFAR10 = {"name": "cifar10", "train_samples": 40, "test_samples": 10}


def test_cifar10_without_its_data_is_refused_at_submission(client):
    """A server without CIFAR-10 says so at submission (experiment, study, plan), where the run would fail
    seconds after it started; nothing is stored. The study names each point that needs it, and only those."""
    r = client.post("/v1/experiments", json=train_spec(dataset=CIFAR10, model="cnn", depth=2, width=4))
    assert r.status_code == 422, r.text
    [error] = r.json()["detail"]
    assert error["loc"] == ["body", "params", "dataset", "name"] and error["type"] == "data_unavailable"
    assert error["msg"].startswith("params.dataset.name: not available on this server: ")
    assert "SMD_DATA_DIR" in error["msg"] and "cifar-10-batches-py" in error["msg"]
    study = {"base": train_spec(model="cnn", depth=2, width=4),
             "grid": {"params.dataset": [{"name": "digits"}, CIFAR10]}}
    for path in ("/v1/studies", "/v1/study-plans"):
        r = client.post(path, json=study)
        assert r.status_code == 422, (path, r.text)
        [error] = r.json()["detail"]
        assert error["loc"] == ["body", "point", 1, "params", "dataset", "name"], error
        assert error["point"] == {"index": 1, "values": {"params.dataset": CIFAR10}}
        assert "SMD_DATA_DIR" in error["msg"]
    assert client.get("/v1/experiments").json()["total"] == 0
    assert client.get("/v1/studies").json()["total"] == 0
    # a rerun that asks for it: refused at the override that did
    digits = submit(client, train_spec(model="cnn", depth=2, width=4))["id"]
    r = client.post(f"/v1/experiments/{digits}/rerun", json={"overrides": {"params.dataset": CIFAR10}})
    [error] = r.json()["detail"]
    assert r.status_code == 422 and error["loc"] == ["body", "overrides", "params.dataset"], error


@pytest.fixture
def cifar_client(tmp_path, settings):
    """(client, settings, the CIFAR-10 folder): a server whose SMD_DATA_DIR holds a small CIFAR-10 (the
    engine tests' format: two training batches of 20 random images, a test batch of 10)."""
    from fastapi.testclient import TestClient

    from api.main import create_app
    from tests.engine.test_train_data import write_batch

    folder = tmp_path / "data" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, rows in (("data_batch_1", 20), ("data_batch_2", 20), ("test_batch", 10)):
        write_batch(folder / name, rng.integers(0, 256, size=(rows, 3072), dtype=np.uint8),
                    rng.integers(0, 10, size=rows).tolist())
    settings = settings.model_copy(update={"data_dir": tmp_path / "data"})
    with TestClient(create_app(settings)) as client:
        yield client, settings, folder


def test_cifar10_runs_where_the_server_has_it_and_a_vanished_file_fails_with_its_path(cifar_client):
    client, settings, folder = cifar_client
    spec = train_spec(dataset=CIFAR10, model="cnn", depth=2, width=4, steps=20, record_every=10, eval_every=10)
    exp = submit(client, spec)
    assert execute(settings, exp["id"]) == "succeeded"
    assert client.get(f"/v1/experiments/{exp['id']}/results").json()["summary"]["train_samples"] == 40
    exp = submit(client, spec)
    (folder / "data_batch_2").unlink()    # after the check at submission: the run still says what is missing
    assert execute(settings, exp["id"]) == "failed"
    error = client.get(f"/v1/experiments/{exp['id']}").json()["error"]
    assert f"{folder / 'data_batch_2'} not found" in error, error
    # the data gone from the server: a rerun of a run that read it is refused, said of the experiment's spec
    for name in ("data_batch_1", "test_batch"):
        (folder / name).unlink()
    r = client.post(f"/v1/experiments/{exp['id']}/rerun", json={})
    [refused] = r.json()["detail"]
    assert r.status_code == 422 and refused["loc"] == ["body"], refused
    assert refused["msg"].startswith("the experiment's params.dataset.name: not available on this server: "), refused
