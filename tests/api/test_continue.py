"""Continuing a finished run through the service (issue 20): an experiment submitted with keep_checkpoint
keeps its final checkpoint; POST /v1/experiments/{id}/continue {"steps": N} queues it again, a worker
resumes it, and it ends with exactly the results of one run of the total length."""
from __future__ import annotations

from datetime import datetime

from fastapi.testclient import TestClient

import smdengine
from api.main import create_app
from tests.api.test_studies import make_settings
from tests.conftest import small_spec
from worker.runner import execute_next


def test_a_continued_experiment_ends_as_one_run_of_the_total_length(env):
    client, settings = env
    spec = small_spec(trials=16, steps=300, record_every=20, lr_schedule=[{"step": 200, "lr_factor": 0.5}])
    r = client.post("/v1/experiments", json={**spec, "keep_checkpoint": True})
    assert r.status_code == 202 and r.json()["keep_checkpoint"] is True, r.text
    experiment_id = r.json()["id"]
    assert r.json()["queued_at"] == r.json()["created_at"]
    assert execute_next(settings, ["cpu"]) == "succeeded"
    first = client.get(f"/v1/experiments/{experiment_id}/results").json()
    ran = client.get(f"/v1/experiments/{experiment_id}").json()

    r = client.post(f"/v1/experiments/{experiment_id}/continue", json={"steps": 400})
    assert r.status_code == 202, r.text
    queued = r.json()
    assert queued["status"] == "queued" and queued["total_steps"] == 700 and queued["spec"]["params"]["steps"] == 700
    when = {key: datetime.fromisoformat(body[key]) for body, key in ((queued, "queued_at"), (ran, "finished_at"),
                                                                       (ran, "started_at"))}
    assert when["queued_at"] >= when["finished_at"] >= when["started_at"]   # queued again, at the continue
    assert client.get(f"/v1/experiments/{experiment_id}/results").json()["series"] == first["series"]   # kept
    assert first["series"]["step"][-2:] == [280, 300]   # its final row, which the continuation replaces
    assert execute_next(settings, ["cpu"]) == "succeeded"

    total = {**spec, "params": {**spec["params"], "steps": 700}}
    one_run = smdengine.run(total).to_document()
    doc = client.get(f"/v1/experiments/{experiment_id}/results").json()
    assert doc["series"] == one_run["series"] and len(doc["series"]["step"]) == 36   # 0 … 680, 700
    assert doc["summary"] == one_run["summary"] and doc["theory"] == one_run["theory"]
    attempts = client.get(f"/v1/experiments/{experiment_id}/attempts").json()
    assert [(a["outcome"], a["resumed_from_step"]) for a in attempts] == [("succeeded", None), ("succeeded", 300)]
    # and again: the kept checkpoint is now the one at 700
    assert client.post(f"/v1/experiments/{experiment_id}/continue", json={"steps": 100}).status_code == 202
    assert execute_next(settings, ["cpu"]) == "succeeded"
    total["params"]["steps"] = 800
    assert client.get(f"/v1/experiments/{experiment_id}/results").json()["series"] == \
        smdengine.run(total).to_document()["series"]


def test_a_continued_experiment_is_warned_as_the_longer_run(env):
    """Warnings depend on the length (a tail that has not settled): at 200 steps the nrq default is warned
    unsettled_tail; continued to 600 it is not, and what is stored and answered are the longer spec's."""
    client, settings = env
    spec = {"kind": "nrq", "seed": 0, "params": {"steps": 200, "trials": 16, "record_every": 10}}
    r = client.post("/v1/experiments", json={**spec, "keep_checkpoint": True})
    assert r.status_code == 202 and "unsettled_tail" in [w["code"] for w in r.json()["warnings"]], r.text
    experiment_id = r.json()["id"]
    assert execute_next(settings, ["cpu"]) == "succeeded"
    continued = client.post(f"/v1/experiments/{experiment_id}/continue", json={"steps": 400}).json()
    longer = smdengine.spec_warnings({**spec, "params": {**spec["params"], "steps": 600}})
    assert "unsettled_tail" not in [w["code"] for w in longer]
    assert continued["warnings"] == longer
    assert client.get(f"/v1/experiments/{experiment_id}").json()["warnings"] == longer


def test_what_cannot_be_continued(tmp_path):
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        plain = client.post("/v1/experiments", json=small_spec(trials=8, steps=100)).json()["id"]
        r = client.post(f"/v1/experiments/{plain}/continue", json={"steps": 10})
        assert r.status_code == 409 and "only a succeeded experiment" in r.json()["detail"]   # still queued
        assert execute_next(settings, ["cpu"]) == "succeeded"
        r = client.post(f"/v1/experiments/{plain}/continue", json={"steps": 10})
        assert r.status_code == 409 and "keep_checkpoint" in r.json()["detail"]
        sde = {"kind": "sde", "seed": 1, "keep_checkpoint": True,
               "params": {"model": "nrq", "trials": 8, "steps": 100, "record_every": 10, "f_bins": 10}}
        sde_id = client.post("/v1/experiments", json=sde).json()["id"]
        r = client.post(f"/v1/experiments/{sde_id}/continue", json={"steps": 10})
        assert r.status_code == 409 and "cannot be continued" in r.json()["detail"]
        for body, field in (({"steps": 0}, "steps"), ({}, "steps"), ({"steps": 99_999_950}, "steps")):
            r = client.post(f"/v1/experiments/{plain}/continue", json=body)
            assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == field, (body, r.text)
        # within its own limit, but not the total: the message says the total is what is refused
        r = client.post(f"/v1/experiments/{plain}/continue", json={"steps": 99_999_950})
        assert "params.steps = 100 + 99999950 = 100000050" in r.json()["detail"][0]["msg"], r.text
        assert "refused at params.steps" in r.json()["detail"][0]["msg"], r.text
