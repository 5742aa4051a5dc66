"""Compare studies in-process on SQLite: existing experiments grouped without rerunning them (POST
/v1/studies with `experiments`), read through the study endpoints (status, table, overlay, events), with
their 422s, the 409 on cancel, a delete that keeps the members, and a member deleted later."""
from __future__ import annotations

import csv
import io
from datetime import datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.main import create_app
from store.models import Experiment, Study, StudyMember
from tests.api.test_sde_experiments import sde_spec
from tests.api.test_studies import counts, make_settings, study_spec, submit
from tests.conftest import auth, make_users, small_spec
from tests.dbutil import session_scope
from worker.runner import execute


@pytest.fixture
def sqlite_env(tmp_path):
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        yield client, settings


def experiment(client, settings, spec: dict, headers=None, run: bool = True) -> dict:
    """A submitted experiment, run to its end in this process (unless ``run`` is false)."""
    r = client.post("/v1/experiments", json=spec, headers=headers or {})
    assert r.status_code == 202, r.text
    if run:
        assert execute(settings, r.json()["id"]) == "succeeded"
    return client.get(f"/v1/experiments/{r.json()['id']}", headers=headers or {}).json()


def tiny(lr: float, **extra) -> dict:
    return {**small_spec(trials=8, steps=100, record_every=20, lr=lr), **extra}


def grouped(client, ids: list[str], headers=None, **extra) -> dict:
    study = submit(client, {"experiments": ids, **extra}, headers)
    assert study["kind"] == "compare"
    return study


def test_a_compare_study_groups_existing_experiments(sqlite_env):
    client, settings = sqlite_env
    slow = experiment(client, settings, tiny(0.05, name="slow"))
    fast = experiment(client, settings, tiny(0.2))                       # no name: labelled by its id
    # a child of an ordinary study: a member of the compare study, and still its own study's child
    grid = submit(client, study_spec(seeds=[1], grid={"params.lr": [0.1]}, base=small_spec(trials=8, steps=100)))
    child_id = client.get(f"/v1/studies/{grid['id']}").json()["children"][0]["id"]
    assert execute(settings, child_id) == "succeeded"
    ids = [slow["id"], fast["id"], child_id]
    before, messages = counts(settings.db_url), len(list(settings.broker_folder.glob("*.msg")))

    study = grouped(client, ids, name="three lrs")
    assert counts(settings.db_url) == (before[0] + 1, before[1])          # no experiment created
    assert len(list(settings.broker_folder.glob("*.msg"))) == messages    # nothing queued
    assert study["status"] == "succeeded" and study["children_count"] == 3 and study["points"] == 3
    assert study["axes"] == ["experiment"] and study["counts"]["succeeded"] == 3 and study["progress"] == 1.0
    assert study["spec"] == {"experiments": ids, "name": "three lrs"} and study["missing"] == []
    # as times, not strings: a time on a whole second is written without its fraction ("…:58Z" > "…:58.08Z")
    ended = [datetime.fromisoformat(client.get(f"/v1/experiments/{i}").json()["finished_at"]) for i in ids]
    assert datetime.fromisoformat(study["finished_at"]) == max(ended)
    assert client.get(f"/v1/experiments/{child_id}").json()["study_id"] == grid["id"]   # not reassigned

    got = client.get(f"/v1/studies/{study['id']}")
    body = got.json()
    assert [c["id"] for c in body["children"]] == ids and [c["index"] for c in body["children"]] == [0, 1, 2]
    assert [c["values"] for c in body["children"]] == [{"experiment": slow["id"], "name": "slow"},
                                                       {"experiment": fast["id"], "name": fast["id"]},
                                                       {"experiment": child_id, "name": "grid #0"}]
    assert body["children"][0]["seed"] == 3 and body["children"][2]["seed"] == 1
    assert client.get(f"/v1/studies/{study['id']}", headers={"If-None-Match": got.headers["etag"]}).status_code == 304
    assert client.get(f"/v1/studies/{grid['id']}").json()["children_count"] == 1   # its own study is unchanged

    table = client.get(f"/v1/studies/{study['id']}/table").json()
    assert [r["experiment_id"] for r in table["rows"]] == ids and table["checks"] is None
    assert [r["experiment"] for r in table["rows"]] == ids and [r["name"] for r in table["rows"]][0] == "slow"
    for row in table["rows"]:
        summary = client.get(f"/v1/experiments/{row['experiment_id']}/results").json()["summary"]
        assert {k: row[k] for k in summary} == summary and row["status"] == "succeeded"
    assert table["rows"][1]["intrinsic_lr"] == pytest.approx(0.2 * 0.01)
    points = client.get(f"/v1/studies/{study['id']}/table", params={"group": "point"}).json()["rows"]
    assert [r["experiment"] for r in points] == ids and all(r["n"] == 1 for r in points)
    text = client.get(f"/v1/studies/{study['id']}/table.csv")
    assert text.status_code == 200 and [r["experiment_id"] for r in csv.DictReader(io.StringIO(text.text))] == ids
    parquet = client.get(f"/v1/studies/{study['id']}/table.parquet")
    assert parquet.status_code == 200 and parquet.content[:4] == b"PAR1"

    png = client.get(f"/v1/studies/{study['id']}/plots/overlay.png", params={"metric": "risk", "x": "intrinsic_time"})
    assert png.status_code == 200 and png.headers["content-type"] == "image/png" and png.content[:4] == b"\x89PNG"
    svg = client.get(f"/v1/studies/{study['id']}/plots/overlay.svg", params={"metric": "loss"})
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    scatter = client.get(f"/v1/studies/{study['id']}/plots/scatter.png", params={"metric": "risk", "x": "intrinsic_lr"})
    assert scatter.status_code == 200
    figure = client.get(f"/v1/studies/{study['id']}/plots/figure.png")
    assert figure.status_code == 404 and "not made from a preset" in figure.json()["detail"]
    events = client.get(f"/v1/studies/{study['id']}/events")
    assert events.status_code == 200 and '"status":"succeeded"' in events.text
    listed = {s["id"]: s for s in client.get("/v1/studies").json()["items"]}
    assert listed[study["id"]]["kind"] == "compare" and listed[grid["id"]]["kind"] == "expand"
    assert listed[study["id"]]["children_count"] == 3 and listed[study["id"]]["status"] == "succeeded"

    # cancel: a 409 (it runs nothing); delete: the study only
    refused = client.post(f"/v1/studies/{study['id']}/cancel")
    assert refused.status_code == 409 and "cancel the experiments themselves" in refused.json()["detail"]
    assert client.delete(f"/v1/studies/{study['id']}").status_code == 204
    assert client.get(f"/v1/studies/{study['id']}").status_code == 404
    assert counts(settings.db_url) == before
    for i in ids:
        assert client.get(f"/v1/experiments/{i}").json()["status"] == "succeeded"
    assert client.get(f"/v1/studies/{grid['id']}/table").json()["rows"][0]["experiment_id"] == child_id
    with session_scope(settings.db_url) as s:
        assert s.scalar(select(func.count()).select_from(StudyMember)) == 0


def test_a_deleted_member_leaves_the_study_readable(sqlite_env):
    client, settings = sqlite_env
    ids = [experiment(client, settings, tiny(lr))["id"] for lr in (0.05, 0.1, 0.2)]
    study = grouped(client, ids)
    before = client.get(f"/v1/studies/{study['id']}")
    table_before = client.get(f"/v1/studies/{study['id']}/table")

    assert client.delete(f"/v1/experiments/{ids[1]}").status_code == 204
    got = client.get(f"/v1/studies/{study['id']}", headers={"If-None-Match": before.headers["etag"]})
    assert got.status_code == 200 and got.headers["etag"] != before.headers["etag"]
    body = got.json()
    assert body["missing"] == [ids[1]] and body["children_count"] == 2 and body["status"] == "succeeded"
    assert [(c["id"], c["index"]) for c in body["children"]] == [(ids[0], 0), (ids[2], 2)]
    table = client.get(f"/v1/studies/{study['id']}/table", headers={"If-None-Match": table_before.headers["etag"]})
    assert table.status_code == 200 and [r["experiment_id"] for r in table.json()["rows"]] == [ids[0], ids[2]]
    assert client.get(f"/v1/studies/{study['id']}/plots/overlay.png", params={"metric": "risk"}).status_code == 200
    assert client.get(f"/v1/studies/{study['id']}/table.csv").status_code == 200
    events = client.get(f"/v1/studies/{study['id']}/events")
    assert events.status_code == 200 and '"children_count":2' in events.text
    with session_scope(settings.db_url) as s:   # the study's revision still grew (its event ids never go back)
        assert s.scalar(select(Study.revision).where(Study.id == study["id"])) > 0


def test_status_follows_the_members_and_mixed_kinds_overlay(sqlite_env):
    client, settings = sqlite_env
    done = experiment(client, settings, tiny(0.1, name="nrq"))
    sde = experiment(client, settings, {**sde_spec("nrq"), "name": "sde"})
    queued = experiment(client, settings, tiny(0.2), run=False)
    study = grouped(client, [done["id"], sde["id"], queued["id"]])
    assert study["status"] == "running" and study["counts"]["queued"] == 1 and study["finished_at"] is None
    # members of two kinds: each one unit (2 of 3 ended), as their steps do not add up (they give another figure)
    members = [done, sde, queued]
    in_steps = sum(m["progress"] * m["total_steps"] for m in members) / sum(m["total_steps"] for m in members)
    assert study["progress"] == pytest.approx(2 / 3) and in_steps != pytest.approx(2 / 3)
    # a study whose member is still queued may be deleted: nothing of the member goes
    other = grouped(client, [done["id"], queued["id"]])
    assert client.delete(f"/v1/studies/{other['id']}").status_code == 204
    assert client.get(f"/v1/experiments/{queued['id']}").json()["status"] == "queued"
    assert client.post(f"/v1/studies/{study['id']}/cancel").status_code == 409     # still runs nothing
    assert client.get(f"/v1/experiments/{queued['id']}").json()["cancel_requested"] is False

    assert execute(settings, queued["id"]) == "succeeded"
    ended = client.get(f"/v1/studies/{study['id']}").json()
    assert ended["status"] == "succeeded" and ended["finished_at"]
    table = client.get(f"/v1/studies/{study['id']}/table").json()
    assert len(table["rows"]) == 3 and [r["experiment_id"] for r in table["rows"]][1] == sde["id"]
    sde_only = set(table["rows"][1]) - set(table["rows"][0])
    assert sde_only and sde_only <= set(table["columns"])      # the columns are the union of the members'
    assert client.get(f"/v1/studies/{study['id']}/table.parquet").status_code == 200
    r = client.get(f"/v1/studies/{study['id']}/plots/overlay.png", params={"metric": "risk"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    # what an overlay can draw: series over time, never a histogram (the sde member's f_histogram) or a theory
    options = client.get(f"/v1/studies/{study['id']}/charts").json()
    assert "f_histogram" not in options["series_metrics"] and "norm_sq_theory" not in options["series_metrics"]
    assert {"risk", "gamma", "loss"} <= set(options["series_metrics"])
    r = client.get(f"/v1/studies/{study['id']}/charts/overlay", params={"metric": "f_histogram"})
    assert r.status_code == 422 and "f_histogram" in r.text
    # gamma is the sde member's alone: the nrq members are said to be left out, not dropped silently
    gamma = client.get(f"/v1/studies/{study['id']}/charts/overlay", params={"metric": "gamma"}).json()
    assert [line["experiment_id"] for line in gamma["lines"]] == [sde["id"]]
    assert [a["experiment_id"] for a in gamma["not_recorded"]] == [done["id"], queued["id"]]
    risk = client.get(f"/v1/studies/{study['id']}/charts/overlay", params={"metric": "risk"}).json()
    assert len(risk["lines"]) == 3 and risk["not_recorded"] == []


def test_overlay_labels_are_the_members_names(sqlite_env, monkeypatch):
    from smdrender import study_plots

    client, settings = sqlite_env
    drawn = {}
    real = study_plots.overlay
    monkeypatch.setattr(study_plots, "overlay", lambda lines, *args: drawn.setdefault("lines", lines) and real(
        lines, *args))
    a = experiment(client, settings, tiny(0.05, name="same"))
    b = experiment(client, settings, tiny(0.1, name="same"))
    c = experiment(client, settings, tiny(0.2, name="other"))
    study = grouped(client, [c["id"], a["id"], b["id"]])
    assert client.get(f"/v1/studies/{study['id']}/plots/overlay.png", params={"metric": "risk"}).status_code == 200
    assert [line["label"] for line in drawn["lines"]] == ["other", f"same ({a['id'][:8]})", f"same ({b['id'][:8]})"]


@pytest.mark.parametrize("body, loc, type_, words", [
    ({"experiments": ["a"]}, ["body", "experiments"], "experiment_count", ["2 to 200", "got 1"]),
    ({"experiments": [f"e{i}" for i in range(201)]}, ["body", "experiments"], "experiment_count", ["got 201"]),
    ({"experiments": []}, ["body", "experiments"], "experiment_count", ["got 0"]),
    ({"experiments": "KNOWN0"}, ["body", "experiments"], "list_type", []),
    ({"experiments": ["KNOWN0", "KNOWN1", "KNOWN0"]}, ["body", "experiments", 2], "duplicate_experiment",
     ["listed twice (at 0 and 2)"]),
    ({"experiments": ["KNOWN0", "nope"]}, ["body", "experiments", 1], "unknown_experiment",
     ["no experiment nope that you may see"]),
    ({"experiments": ["KNOWN0", "KNOWN1"], "priority": "high"}, ["body", "priority"], "extra_forbidden", []),
    ({"experiments": ["KNOWN0", ""]}, ["body", "experiments", 1], "string_too_short", []),
])
def test_bad_compare_studies_are_422_and_store_nothing(sqlite_env, body, loc, type_, words):
    client, settings = sqlite_env
    known = [experiment(client, settings, tiny(0.1), run=False)["id"] for _ in range(2)]
    if isinstance(body["experiments"], list):
        body = {**body, "experiments": [known[int(i[-1])] if i.startswith("KNOWN") else i
                                        for i in body["experiments"]]}
    r = client.post("/v1/studies", json=body)
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    error = next((e for e in errors if e["loc"] == loc), None)
    assert error is not None and error["type"] == type_, errors
    assert all(w in error["msg"] for w in words), error
    assert counts(settings.db_url) == (0, 2)


def test_grid_study_errors_are_unchanged(sqlite_env):
    """Bodies without `experiments` (or with `base`) are validated as before compare studies existed."""
    client, _ = sqlite_env
    missing = client.post("/v1/studies", json={}).json()["detail"]
    assert [(e["loc"], e["type"]) for e in missing] == [(["body", "base"], "missing")]
    both = client.post("/v1/studies", json={**study_spec(), "experiments": ["a", "b"]}).json()["detail"]
    assert [(e["loc"], e["type"]) for e in both] == [(["body", "experiments"], "extra_forbidden")]
    bad_kind = client.post("/v1/studies", json=study_spec(base={"kind": "heat"})).json()["detail"]
    assert any(e["loc"][:2] == ["body", "base"] and "kind" in e["msg"] for e in bad_kind), bad_kind
    listed = client.post("/v1/studies", json=[1, 2]).json()["detail"]
    assert [(e["loc"], e["type"]) for e in listed] == [(["body"], "model_attributes_type")]


def test_who_may_group_what(tmp_path):
    settings = make_settings(tmp_path, auth="on")
    keys = make_users(settings.db_url)
    with TestClient(create_app(settings)) as client:
        alice, bob, root = auth(keys.alice), auth(keys.bob), auth(keys.root)
        mine = experiment(client, settings, tiny(0.1), alice)
        shared = experiment(client, settings, tiny(0.2, visibility="lab"), bob)
        hidden = experiment(client, settings, tiny(0.05), bob)

        study = grouped(client, [mine["id"], shared["id"]], alice)
        assert study["owner"] == "alice" and study["visibility"] == "private"
        # another user's private experiment reads as one that does not exist
        for unseen in (hidden["id"], "0" * 32):
            r = client.post("/v1/studies", json={"experiments": [mine["id"], unseen]}, headers=alice)
            assert r.status_code == 422 and r.json()["detail"] == [{
                "loc": ["body", "experiments", 1], "type": "unknown_experiment", "input": unseen,
                "msg": f"no experiment {unseen} that you may see"}]
        # a lab-visible study may not show a private experiment to the lab
        r = client.post("/v1/studies", json={"experiments": [mine["id"], shared["id"]], "visibility": "lab"},
                        headers=alice)
        assert r.status_code == 422 and [(e["loc"], e["type"]) for e in r.json()["detail"]] == [
            (["body", "experiments", 0], "private_experiment")]
        admin = grouped(client, [mine["id"], hidden["id"]], root)               # admins see every experiment
        assert client.get(f"/v1/studies/{admin['id']}", headers=alice).status_code == 404
        assert client.get(f"/v1/studies/{study['id']}", headers=bob).status_code == 404
        lab = grouped(client, [shared["id"], experiment(client, settings, tiny(0.3, visibility="lab"), alice)["id"]],
                      alice, visibility="lab")
        assert client.get(f"/v1/studies/{lab['id']}/table", headers=bob).status_code == 200
        assert client.post(f"/v1/studies/{lab['id']}/cancel", headers=bob).status_code == 403
        assert client.delete(f"/v1/studies/{lab['id']}", headers=bob).status_code == 403
        # bob may still delete his own experiment: alice's studies lose it
        assert client.delete(f"/v1/experiments/{shared['id']}", headers=bob).status_code == 204
        assert client.get(f"/v1/studies/{lab['id']}", headers=alice).json()["missing"] == [shared["id"]]
        assert client.get(f"/v1/studies/{study['id']}/table", headers=alice).json()["rows"][0]["experiment_id"] == \
            mine["id"]
        with session_scope(settings.db_url) as s:   # 4 experiments, one deleted: no study deleted any
            assert s.scalar(select(func.count()).select_from(Experiment)) == 3


def test_openapi_documents_compare_studies(sqlite_env):
    client, _ = sqlite_env
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/v1/studies"]["post"]["requestBody"]["content"]["application/json"]
    assert {"$ref": "#/components/schemas/CompareStudySubmission"} in body["schema"]["anyOf"]
    assert {"$ref": "#/components/schemas/StudySubmission"} in body["schema"]["anyOf"]
    assert set(body["examples"]) == {"grid", "compare"}
    compare = schema["components"]["schemas"]["CompareStudySubmission"]
    items = compare["properties"]["experiments"]
    assert (items["minItems"], items["maxItems"], items["uniqueItems"]) == (2, 200, True)
    assert compare["required"] == ["experiments"] and compare["additionalProperties"] is False
    assert compare["examples"] and "nothing rerun" in compare["description"]
    out = schema["components"]["schemas"]["StudyOut"]["properties"]
    assert out["kind"]["enum"] == ["expand", "compare"] and "missing" in out
    post = schema["paths"]["/v1/studies"]["post"]
    assert "compare study" in post["description"] and "unknown_experiment" in post["responses"]["422"]["description"]
    assert "compare study" in schema["paths"]["/v1/studies/{study_id}/cancel"]["post"]["responses"]["409"][
        "description"]
