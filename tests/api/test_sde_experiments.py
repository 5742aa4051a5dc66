"""The ``sde`` kind through the API (SQLite and PostgreSQL, real engine, jobs run by the worker's
runner): validation, results per model, distributions, and the plots that apply to each model."""
from __future__ import annotations

import pytest

from tests.api.test_experiments import submit
from worker.runner import execute

SMALL = {
    "nrq": {"dim": 10, "trials": 32, "steps": 200, "record_every": 10, "dt": 0.5, "f_bins": 10},
    "normalized_linear": {"trials": 12, "steps": 300, "record_every": 30, "record_trials": 5},
    "norm_map": {"steps": 2000, "record_every": 100, "momentum": 0.9},
    "toy2d": {"trials": 8, "steps": 50, "record_every": 5},
}
PLOTS = {
    "nrq": ["au", "f_histogram", "norm", "risk"],
    "normalized_linear": ["angles", "norm"],
    "norm_map": ["norm"],
    "toy2d": ["loss", "norm", "spread"],
}


def sde_spec(model: str, **params) -> dict:
    return {"kind": "sde", "seed": 1, "device": "cpu", "params": {"model": model, **SMALL[model], **params}}


@pytest.mark.parametrize("params, field, reason", [
    ({"model": "nrq", "dt": 0.3}, "params", "dt: expected 1/k"),
    ({"model": "nrq", "momentum": 0.9}, "momentum", "Extra inputs"),
    ({"model": "heat"}, "model", "model: expected one of"),
    ({}, "model", "model: expected one of"),
    ({"model": "normalized_linear", "integrator": "sgd", "dt": 0.5}, "params", "dt: expected 1 with integrator sgd"),
    ({"model": "normalized_linear", "dim": 2}, "dim", "greater than or equal to 3"),
    ({"model": "norm_map", "unit_grad_sq": {"mean": 1.0, "sine_amplitude": 2.0}}, "unit_grad_sq", "L_t > 0"),
    ({"model": "toy2d", "center": [0.0, 0.0]}, "params", "center"),
])
def test_invalid_sde_spec_is_422_naming_field(client, params, field, reason):
    r = client.post("/v1/experiments", json={"kind": "sde", "params": params})
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert any(field in map(str, e["loc"]) and reason in e["msg"] for e in errors), errors
    assert client.get("/v1/experiments").json()["total"] == 0


def test_missing_kind_names_kind(client):
    r = client.post("/v1/experiments", json={"params": {}})
    assert r.status_code == 422
    assert any(e["loc"][-1] == "kind" and "kind: expected one of 'nrq', 'sde'" in e["msg"] for e in r.json()["detail"])


def test_work_limit_counts_substeps(tmp_path, database_url):
    from fastapi.testclient import TestClient

    from api.main import create_app
    from store.settings import Settings

    settings = Settings(state_dir=tmp_path / "s", database_url=database_url, max_work=40_000, auth="off")
    with TestClient(create_app(settings)) as c:
        ok = {"kind": "sde", "params": {"model": "nrq", "dim": 10, "trials": 10, "steps": 400, "record_every": 10}}
        assert c.post("/v1/experiments", json=ok).status_code == 202           # 10·400·10 = 40 000
        ok["params"]["dt"] = 0.5
        r = c.post("/v1/experiments", json=ok)                                  # twice the substeps
        assert r.status_code == 429 and "needs 80,000:" in r.text


@pytest.mark.parametrize("model", sorted(SMALL))
def test_each_model_runs_and_serves_results_and_plots(client, settings, model):
    import smdengine

    exp = submit(client, sde_spec(model))
    assert exp["kind"] == "sde" and exp["total_steps"] == SMALL[model]["steps"]
    assert execute(settings, exp["id"]) == "succeeded"
    doc = client.get(f"/v1/experiments/{exp['id']}/results").json()
    assert doc["status"] == "succeeded"
    n = len(doc["series"]["step"])
    assert n == SMALL[model]["steps"] // SMALL[model]["record_every"] + 1   # and the final row
    names = set(smdengine.output_names(exp["spec"]))
    assert set(doc["series"]) | set(doc["theory"]) | set(doc["distributions"]) <= names
    for key, values in doc["theory"].items():
        if isinstance(values, list):
            assert len(values) == n, key

    for name in PLOTS[model]:
        for fmt, magic in (("png", b"\x89PNG"), ("svg", b"<svg")):
            r = client.get(f"/v1/experiments/{exp['id']}/plots/{name}.{fmt}")
            assert r.status_code == 200 and magic in r.content[:200], (name, fmt)
    missing = client.get(f"/v1/experiments/{exp['id']}/plots/nonsense.png")
    assert missing.status_code == 404 and ", ".join(PLOTS[model]) in missing.json()["detail"]
    if model == "nrq":   # two black theory lines on the au plot: each says what it is, in the list and the image
        listed = {p["name"]: p for p in client.get(f"/v1/experiments/{exp['id']}/plots").json()}
        labels = listed["au"]["theory_labels"]
        assert sorted(labels) == ["au_equilibrium", "au_theory"] and listed["risk"]["theory_labels"] == {}
        svg = client.get(f"/v1/experiments/{exp['id']}/plots/au.svg").text   # matplotlib keeps each text as a comment
        # the quantity named once: "au (theory along the run: …)", not "au_theory (theory along the run: …)"
        assert all(f"{name.removesuffix('_theory')} (theory {words})" in svg for name, words in labels.items()), labels
        assert "au_theory (theory" not in svg
        # the histogram's x axis is its variable, named (not the distribution's key), in the list and the image
        xlabel = listed["f_histogram"]["xlabel"]
        assert xlabel.startswith("f = ") and listed["risk"]["xlabel"] is None
        assert xlabel in client.get(f"/v1/experiments/{exp['id']}/plots/f_histogram.svg").text


def test_nrq_model_distribution_and_field_selection(client, settings):
    exp = submit(client, sde_spec("nrq"))
    queued = client.get(f"/v1/experiments/{exp['id']}/results").json()
    assert queued["distributions"] == {}
    assert execute(settings, exp["id"]) == "succeeded"
    doc = client.get(f"/v1/experiments/{exp['id']}/results").json()
    hist = doc["distributions"]["f_histogram"]
    assert len(hist["bin_edges"]) == 11 and len(hist["density"]) == len(hist["density_theory"]) == 10
    assert hist["samples"] == 32 * 10  # 32 trials × the 10 records in the tail (steps ≥ 100)
    # the final theory is conditioned on the run's realized initial norms
    assert doc["theory"]["norm_sq_theory"][0] == pytest.approx(doc["series"]["norm_sq"][0], rel=1e-9)
    sel = client.get(f"/v1/experiments/{exp['id']}/results", params={"fields": "f_histogram,risk"}).json()
    assert set(sel["distributions"]) == {"f_histogram"} and set(sel["series"]) == {"step", "risk"}
    other = client.get(f"/v1/experiments/{exp['id']}/results", params={"fields": "risk"}).json()
    assert other["distributions"] == {}


def test_normalized_linear_serves_per_trial_angles(client, settings):
    exp = submit(client, sde_spec("normalized_linear"))
    assert execute(settings, exp["id"]) == "succeeded"
    doc = client.get(f"/v1/experiments/{exp['id']}/results", params={"max_points": 4}).json()
    theta = doc["series"]["theta"]
    assert len(theta) == 4 and all(len(row) == 5 for row in theta)
    assert theta[0] == [pytest.approx(0.0, abs=1e-9)] * 5   # every trial starts at x̄*, θ = 0
    assert all(-3.15 < v < 3.15 for row in theta for v in row)


def test_openapi_has_the_sde_models(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("SDESubmission", "NRQSDEParams", "NormalizedLinearParams", "NormMapParams", "Toy2DParams",
                 "UnitGradSq", "Histogram"):
        assert name in schemas, name
