"""The ``train`` kind through the API (SQLite and PostgreSQL, real engine run by the worker's runner):
validation, the result document with per-layer series, plots, and a clear failure without data."""
from __future__ import annotations

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


def test_cifar10_without_a_data_dir_fails_with_the_reason(client, settings):
    exp = submit(client, train_spec(dataset={"name": "cifar10", "train_samples": 100, "test_samples": 10},
                                    model="cnn", depth=2, width=4))
    assert execute(settings, exp["id"]) == "failed"
    row = client.get(f"/v1/experiments/{exp['id']}").json()
    assert "SMD_DATA_DIR" in row["error"] and "cifar-10-batches-py" in row["error"]
