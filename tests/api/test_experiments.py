"""The experiments API in-process, on SQLite and PostgreSQL, with a real filesystem broker and the
real engine (jobs are executed by calling the worker's runner, no mocks)."""
from __future__ import annotations

import json
import re
import threading
import time
from datetime import datetime

import pytest

from tests.conftest import small_spec
from worker.runner import execute


def submit(client, spec):
    r = client.post("/v1/experiments", json=spec)
    assert r.status_code == 202, r.text
    return r.json()


def test_submit_commits_and_enqueues(client, settings):
    r = client.post("/v1/experiments", json=small_spec())
    assert r.status_code == 202
    body = r.json()
    assert r.headers["location"] == f"/v1/experiments/{body['id']}"
    assert body["status"] == "queued" and body["progress"] == 0 and body["total_steps"] == 400
    assert body["spec"]["params"]["trials"] == 64
    messages = [p for p in settings.broker_folder.glob("*.msg")]
    assert len(messages) == 1 and "smd.run_next" in messages[0].read_text()  # a doorbell on the cpu queue
    assert client.get(f"/v1/experiments/{body['id']}").json()["status"] == "queued"


@pytest.mark.parametrize("params, field, reason", [
    ({"lr": -0.1}, "lr", "greater than 0"),
    ({"weight_decay": -1}, "weight_decay", "greater than or equal to 0"),
    ({"dim": 1}, "dim", "greater than or equal to 2"),
    # checks across fields are located at the field their message names, for a form to show them there
    ({"eig_low": 2.0, "eig_high": 1.0}, "eig_low", "eig_low < eig_high"),
    ({"eig_low": None, "eig_high": None, "eigenvalues": [1.0, 1.0, 2.0], "dim": 3}, "eigenvalues", "a_1 < a_2"),
    ({"steps": 10, "record_every": 20}, "record_every", "expected ≤ steps (10), got 20"),
    ({"momentum": 1.0}, "momentum", "less than 1"),
    ({"trials": 0}, "trials", "greater than or equal to 1"),
    ({"bogus": 1}, "bogus", "Extra inputs"),
])
def test_invalid_spec_is_422_naming_field(client, params, field, reason):
    r = client.post("/v1/experiments", json=small_spec(**params))
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert [e["loc"] for e in errors] == [["body", "nrq", "params", field]] and reason in errors[0]["msg"], errors
    assert errors[0]["field"] == f"params.{field}"
    assert client.get("/v1/experiments").json()["total"] == 0


def test_a_check_across_fields_gives_that_fields_input_and_no_empty_ctx(client):
    """record_every > steps is a check over params, placed at record_every: its input is 20 (it was the whole params
    object), and ctx's exception, which JSON wrote as {}, is left out."""
    r = client.post("/v1/experiments", json=small_spec(steps=10, record_every=20))
    [error] = r.json()["detail"]
    assert error["field"] == "params.record_every" and error["input"] == 20 and "ctx" not in error, error


def test_a_422_names_the_field_as_the_body_wrote_it(client):
    """loc is pydantic's, union tags and all (an sde model's lr at ["body", "sde", "params", "normalized_linear",
    "lr"], which the client printed as params.normalized_linear.lr); field is the path in the request."""
    cases = [({"kind": "sde", "params": {"model": "normalized_linear", "lr": -1}}, "params.lr"),
             ({"kind": "nrq", "params": {"lr_schedule": [{"step": 5, "lr_factor": -1}]}}, "params.lr_schedule.0.lr_factor"),
             ({"kind": "nrq", "params": {"lr_schedule": [{"lr_factor": 0.5}]}}, "params.lr_schedule.0.step"),   # missing
             ({"kind": "sde", "params": {"model": "nope"}}, "params.model")]
    for body, field in cases:
        r = client.post("/v1/experiments", json=body)
        assert r.status_code == 422, r.text
        assert [e["field"] for e in r.json()["detail"]] == [field], r.text


@pytest.mark.parametrize("path, body, loc, got", [
    ("/v1/experiments", [1, 2], ["body"], "a list"),
    ("/v1/experiments", "nrq", ["body"], "a string"),
    ("/v1/experiments", {"kind": "sde", "params": [1]}, ["body", "sde", "params"], "a list"),
    ("/v1/studies", {"base": 3, "grid": {"params.lr": [0.1]}}, ["body", "base"], "a number"),
])
def test_a_spec_that_is_no_object_is_said_to_be_none(client, path, body, loc, got):
    """Not a wrong kind or model (there is no field to name): "expected a JSON object, got a list"."""
    r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    [error] = r.json()["detail"]
    assert error["loc"] == loc and error["msg"] == f"expected a JSON object, got {got}", error


def test_work_quota_is_429_and_creates_nothing(tmp_path, database_url):
    from fastapi.testclient import TestClient

    from api.main import create_app
    from store.settings import Settings

    settings = Settings(state_dir=tmp_path / "s", database_url=database_url, max_work=1000, auth="off")
    with TestClient(create_app(settings)) as c:
        r = c.post("/v1/experiments", json=small_spec(trials=10, steps=100, dim=2))  # work 2000
        # no Retry-After: no wait makes the job smaller
        assert r.status_code == 429 and "Retry-After" not in r.headers and r.headers["SMD-Quota"] == "work"
        assert "work per job is limited to 1,000 " in r.json()["detail"] and "needs 2,000" in r.json()["detail"]
        assert c.get("/v1/experiments").json()["total"] == 0
        assert c.post("/v1/experiments", json=small_spec(trials=5, steps=100, dim=2)).status_code == 202


def test_non_finite_numbers_and_runaway_schedules_are_422(client):
    for body, field in (('{"kind": "nrq", "params": {"lr": NaN}}', "lr"),
                        ('{"kind": "nrq", "params": {"init_std": Infinity}}', "init_std"),
                        ('{"kind": "nrq", "params": {"lr": -Infinity}}', "lr")):
        r = client.post("/v1/experiments", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        (error,) = r.json()["detail"]
        assert error["loc"] == ["body", "nrq", "params", field] and "finite number" in error["msg"], error
    runaway = small_spec(steps=1000, lr_schedule=[{"step": 10 * (i + 1), "lr_factor": 1e6} for i in range(5)])
    r = client.post("/v1/experiments", json=runaway)
    assert r.status_code == 422 and "rates in force" in r.text
    assert client.get("/v1/experiments").json()["total"] == 0


def test_results_of_a_queued_job(client):
    exp = submit(client, small_spec())
    doc = client.get(f"/v1/experiments/{exp['id']}/results", params={"fields": "risk,au_equilibrium"}).json()
    assert doc["status"] == "queued" and doc["series"] == {} and doc["theory"] == {} and doc["summary"] == {}
    assert client.get(f"/v1/experiments/{'x' * 100}").status_code == 404


def test_wrong_kind_is_422(client):
    spec = small_spec()
    spec["kind"] = "quantum"
    r = client.post("/v1/experiments", json=spec)
    assert r.status_code == 422 and any("kind" in map(str, e["loc"]) for e in r.json()["detail"])


def test_unknown_id_is_404_json(client):
    for method, path in [("get", "/v1/experiments/nope"), ("get", "/v1/experiments/nope/results"),
                         ("post", "/v1/experiments/nope/cancel"), ("get", "/v1/experiments/nope/plots/risk.png")]:
        r = getattr(client, method)(path)
        assert r.status_code == 404 and "nope" in r.json()["detail"], (path, r.text)


def test_list_newest_first_filters_and_pages(client, settings):
    ids = [submit(client, small_spec(trials=i + 1))["id"] for i in range(5)]
    page = client.get("/v1/experiments", params={"limit": 2}).json()
    assert page["total"] == 5 and [e["id"] for e in page["items"]] == ids[::-1][:2]
    page2 = client.get("/v1/experiments", params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert [e["id"] for e in page2["items"]] == ids[::-1][2:4]
    execute(settings, ids[0])
    done = client.get("/v1/experiments", params={"status": "succeeded"}).json()
    assert [e["id"] for e in done["items"]] == [ids[0]]
    assert client.get("/v1/experiments", params={"kind": "nrq"}).json()["total"] == 5
    assert client.get("/v1/experiments", params={"kind": "sde"}).json()["total"] == 0
    assert client.get("/v1/experiments", params={"status": "bogus"}).status_code == 422
    bad_kind = client.get("/v1/experiments", params={"kind": "bogus"})   # not an empty list
    assert bad_kind.status_code == 422 and bad_kind.json()["detail"][0]["loc"] == ["query", "kind"], bad_kind.text
    client.post("/v1/experiments", json={**small_spec(), "name": "Wide_lr 100%"})
    assert [e["name"] for e in client.get("/v1/experiments", params={"name": "wide_LR"}).json()["items"]] == [
        "Wide_lr 100%"]   # a substring, ignoring case
    assert client.get("/v1/experiments", params={"name": "e_l"}).json()["total"] == 1    # _ is literal
    assert client.get("/v1/experiments", params={"name": "0%"}).json()["total"] == 1     # % is literal
    assert client.get("/v1/experiments", params={"name": "w%r"}).json()["total"] == 0


def test_run_results_and_plots(client, settings):
    exp = submit(client, small_spec(lr_schedule=[{"step": 200, "lr_factor": 0.1, "rescale": True}]))
    assert execute(settings, exp["id"]) == "succeeded"
    got = client.get(f"/v1/experiments/{exp['id']}").json()
    assert got["status"] == "succeeded" and got["progress"] == 1.0 and got["attempts"] == 1
    assert got["started_at"] and got["finished_at"] and got["error"] is None

    doc = client.get(f"/v1/experiments/{exp['id']}/results").json()
    assert doc["status"] == "succeeded" and doc["kind"] == "nrq" and doc["spec"] == exp["spec"]
    steps = doc["series"]["step"]
    assert steps == [*range(0, 400, 20), 400]   # the regular records, then the state after the last update
    for key in ("risk", "loss", "au_mean", "au_rms", "norm_sq", "eff_lr"):
        assert len(doc["series"][key]) == len(steps)
    for key in ("au_equilibrium", "norm_sq_theory", "risk_stationary", "kappa"):
        assert len(doc["theory"][key]) == len(steps)
    # the schedule shows in the theory series: AU equilibrium drops by √10 at step 200
    au_eq = dict(zip(steps, doc["theory"]["au_equilibrium"], strict=False))
    assert au_eq[180] / au_eq[200] == pytest.approx(10**0.5)
    assert doc["summary"]["risk_stationary"] == pytest.approx(doc["theory"]["risk_stationary"][-1])
    assert 0 < doc["summary"]["risk"] < 1

    sel = client.get(f"/v1/experiments/{exp['id']}/results", params={"fields": "risk,au_equilibrium", "max_points": 7}).json()
    assert set(sel["series"]) == {"step", "risk"} and set(sel["theory"]) == {"au_equilibrium"}
    assert len(sel["series"]["step"]) == 7 and sel["series"]["step"][0] == 0 and sel["series"]["step"][-1] == 400
    assert sel["series"]["risk"][-1] == doc["series"]["risk"][-1]
    # a zoomed chart's window: since_step < step ≤ until_step, theory cut the same way, then downsampled
    window = client.get(f"/v1/experiments/{exp['id']}/results", params={"since_step": 100, "until_step": 300}).json()
    assert window["series"]["step"] == list(range(120, 301, 20))
    cut = slice(steps.index(120), steps.index(300) + 1)
    assert window["series"]["risk"] == doc["series"]["risk"][cut]
    assert window["theory"]["au_equilibrium"] == doc["theory"]["au_equilibrium"][cut]
    thin = client.get(f"/v1/experiments/{exp['id']}/results", params={"until_step": 300, "max_points": 4}).json()
    assert thin["series"]["step"] == [0, 100, 200, 300]
    assert client.get(f"/v1/experiments/{exp['id']}/results", params={"since_step": 300, "until_step": 100}
                      ).json()["series"]["step"] == []
    bad = client.get(f"/v1/experiments/{exp['id']}/results", params={"fields": "risk,nonsense"})
    assert bad.status_code == 422 and "nonsense" in bad.text

    png = client.get(f"/v1/experiments/{exp['id']}/plots/risk.png")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png" and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    svg = client.get(f"/v1/experiments/{exp['id']}/plots/au.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml") and b"<svg" in svg.content
    assert b"stroke-dasharray" in svg.content  # the theory line is dashed
    assert client.get(f"/v1/experiments/{exp['id']}/plots/norm.png").status_code == 200
    declared = client.get(f"/v1/experiments/{exp['id']}/plots").json()   # what each plot draws, for clients
    assert [p["name"] for p in declared] == ["au", "norm", "risk"]
    risk = next(p for p in declared if p["name"] == "risk")
    assert risk["series"] == ["risk"] and risk["theory"] == ["risk_stationary"] and risk["style"] == "line"
    assert all(name in doc["series"] for p in declared for name in p["series"])
    assert all(name in doc["theory"] for p in declared for name in p["theory"])
    missing = client.get(f"/v1/experiments/{exp['id']}/plots/angles.png")
    assert missing.status_code == 404 and "au, norm, risk" in missing.json()["detail"]
    assert client.get(f"/v1/experiments/{exp['id']}/plots/risk.gif").status_code == 422


def test_duplicate_message_does_not_run_twice(client, settings):
    exp = submit(client, small_spec())
    assert execute(settings, exp["id"]) == "succeeded"
    assert execute(settings, exp["id"]) == "skipped"
    assert client.get(f"/v1/experiments/{exp['id']}").json()["attempts"] == 1


def test_cancel_queued_never_starts(client, settings):
    exp = submit(client, small_spec())
    r = client.post(f"/v1/experiments/{exp['id']}/cancel")
    assert r.status_code == 202 and r.json()["status"] == "cancelled"
    assert execute(settings, exp["id"]) == "skipped"
    assert client.get(f"/v1/experiments/{exp['id']}").json()["started_at"] is None
    assert client.post(f"/v1/experiments/{exp['id']}/cancel").status_code == 409


def test_cancel_running_keeps_partial_results(client, settings):
    exp = submit(client, small_spec(trials=256, steps=2_000_000, record_every=100))
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.setdefault("status", execute(settings, exp["id"])))
    worker.start()
    deadline = time.monotonic() + 60
    while client.get(f"/v1/experiments/{exp['id']}").json()["step"] == 0:
        assert time.monotonic() < deadline, "the job never reported progress"
        time.sleep(0.1)
    partial = client.get(f"/v1/experiments/{exp['id']}/results").json()
    assert partial["status"] == "running" and partial["series"]["step"]
    assert len(partial["theory"]["au_equilibrium"]) == len(partial["series"]["step"])  # aligned while partial
    asked = time.monotonic()
    assert client.post(f"/v1/experiments/{exp['id']}/cancel").json()["cancel_requested"] is True
    worker.join(timeout=30)
    assert not worker.is_alive() and outcome["status"] == "cancelled"
    assert time.monotonic() - asked < 5  # stops within a few seconds
    final = client.get(f"/v1/experiments/{exp['id']}").json()
    assert final["status"] == "cancelled" and 0 < final["progress"] < 1
    kept = client.get(f"/v1/experiments/{exp['id']}/results").json()["series"]["step"]
    assert len(kept) >= len(partial["series"]["step"])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_failed_job_records_why(client, settings):
    spec = small_spec()
    spec["device"] = "cuda"
    exp = submit(client, spec)
    assert execute(settings, exp["id"]) == "failed"
    got = client.get(f"/v1/experiments/{exp['id']}").json()
    assert got["status"] == "failed" and "CUDA" in got["error"] and got["finished_at"]


def test_healthz(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["database"] == "ok"


def test_a_body_that_is_not_json_is_415_saying_so(client):
    """curl's -d sends a form; without the 415 the routes read the body as one string (a misleading 422)."""
    body = json.dumps(small_spec()).encode()
    for headers, got in (({"content-type": "application/x-www-form-urlencoded"}, "application/x-www-form-urlencoded"),
                         ({}, "none"), ({"content-type": "text/plain; charset=utf-8"}, "text/plain")):
        r = client.post("/v1/experiments", content=body, headers=headers)
        assert r.status_code == 415, r.text
        assert r.json()["detail"].startswith(f"Content-Type: expected application/json, got {got} ("), r.text
    assert client.get("/v1/experiments").json()["total"] == 0
    for media in ("application/json", "application/json; charset=utf-8", "application/merge-patch+json"):
        assert client.post("/v1/experiments", content=body, headers={"content-type": media}).status_code == 202
    assert client.post("/v1/experiments", content=body, headers={"content-type": "text/x+json"}).status_code == 415
    assert "415" in client.get("/openapi.json").json()["paths"]["/v1/experiments"]["post"]["responses"]
    # a route that reads no body ignores one, as before (curl -X POST .../cancel -d '{}')
    queued = client.get("/v1/experiments").json()["items"][0]["id"]
    r = client.post(f"/v1/experiments/{queued}/cancel", content=b"{}",
                    headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 202, r.text


def test_text_with_a_nul_character_is_422_naming_where(client):
    """PostgreSQL cannot store U+0000 (a 500 before) and SQLite's LIKE stopped reading a name filter at it."""
    spec = small_spec(trials=4, steps=40, record_every=10)
    for method, path, kwargs, loc in (
            ("POST", "/v1/experiments", {"json": {**spec, "name": "a\u0000b"}}, ["body", "name"]),
            ("POST", "/v1/experiments", {"json": {**spec, "note": "x", "tags": ["ok"], "params": {
                **spec["params"], "dtype": "\u0000"}}}, ["body", "params", "dtype"]),
            ("POST", "/v1/studies", {"json": {"base": spec, "grid": {"params.lr": [0.1]}, "name": "s\u0000"}},
             ["body", "name"]),
            ("GET", "/v1/experiments", {"params": {"name": "\u0000zz"}}, ["query", "name"]),
            ("GET", "/v1/experiments/%00", {}, ["path"])):
        r = client.request(method, path, **kwargs)
        assert r.status_code == 422, (path, r.text)
        (error,) = r.json()["detail"]
        assert error["loc"] == loc and "expected text without NUL characters" in error["msg"], error
    # an escaped backslash before "u0000" is no NUL; the body still reaches the route whole
    r = client.post("/v1/experiments", json={**spec, "name": "C:\\u0000dir"})
    assert r.status_code == 202 and r.json()["name"] == "C:\\u0000dir", r.text
    assert client.get("/v1/experiments").json()["total"] == 1


def test_a_body_over_the_limit_is_413_unread(client):
    """A 100 MB JSON body held an API process for seconds and came back whole in its 422: it is now refused by its
    declared size, or as a chunked one passes the limit; a body within it reaches the route."""
    limit = client.app.state.settings.max_body_bytes
    spec = small_spec(trials=4, steps=40, record_every=10)
    r = client.post("/v1/experiments", json={**spec, "note": "x" * limit})
    assert r.status_code == 413, r.text
    assert r.json()["detail"] == (f"request body: expected at most {limit} bytes (SMD_MAX_BODY_BYTES), "
                                  f"got {r.request.headers['content-length']} bytes")

    def chunks():   # no Content-Length: sent chunked
        yield json.dumps(spec)[:-1].encode() + b', "note": "'
        for _ in range(limit // 2**16 + 1):
            yield b"y" * 2**16
        yield b'"}'

    r = client.post("/v1/experiments", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["detail"].endswith(f"got more than {limit} bytes"), r.text
    assert client.get("/v1/experiments").json()["total"] == 0
    r = client.post("/v1/experiments", json={**spec, "note": "x" * (limit // 2)})   # over the note's own bound
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "note", r.text[:300]
    assert "413" in client.get("/openapi.json").json()["paths"]["/v1/experiments"]["post"]["responses"]


def test_a_422_repeats_a_bounded_printable_part_of_what_it_refuses(client):
    """A lone surrogate (valid JSON, not encodable as UTF-8) gave a 500 when the 422 echoed it; a long value came
    back whole."""
    from api.main import ECHO_CHARS

    spec = small_spec(trials=4, steps=40, record_every=10)
    for path, body, loc in (("/v1/experiments", '{"kind": "nrq", "name": "\\ud800"}', ["body", "nrq", "name"]),
                            ("/v1/studies", '{"experiments": ["\\ud800", "b"]}', ["body", "experiments", 0])):
        r = client.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == loc and r.json()["detail"][0]["input"] == "\\ud800", r.text
    r = client.post("/v1/experiments", json={**spec, "name": "n" * 5000})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "nrq", "name"], r.text[:300]
    echoed = r.json()["detail"][0]["input"]
    assert echoed == '"' + "n" * (ECHO_CHARS - 1) + "… (5002 characters of JSON in all)", echoed
    assert len(r.content) < 2 * ECHO_CHARS + 300


def test_a_rerun_takes_the_current_name(client):
    """PATCH renames an experiment; its spec keeps the name it was submitted with, and a rerun took that one
    back. A rerun now takes the current name (or the one it is given)."""
    made = submit(client, {**small_spec(trials=4, steps=40, record_every=10), "name": "first"})["id"]
    for name in ("renamed", None):
        assert client.patch(f"/v1/experiments/{made}", json={"name": name}).status_code == 200
        again = client.post(f"/v1/experiments/{made}/rerun", json={}).json()
        assert again["name"] == name and again["spec"]["name"] == name, again
    given = client.post(f"/v1/experiments/{made}/rerun", json={"name": "given"}).json()
    assert given["name"] == "given"


def test_names_and_notes_with_control_characters_are_422(client):
    """An ESC in a lab-visible name recoloured every terminal that listed it, a newline broke `smd ls`'s rows, a
    right-to-left override made a name read as another; a note keeps its newlines and tabs, an emoji its joiner."""
    spec = small_spec(trials=4, steps=40, record_every=10)
    r = client.post("/v1/experiments", json={**spec, "note": "line 1\n\tline 2"})
    assert r.status_code == 202, r.text
    made = r.json()["id"]
    for method, path, body, field, char in (
            ("POST", "/v1/experiments", {**spec, "name": "x\u001b[31mRED"}, "name", "U+001B at index 1"),
            ("POST", "/v1/experiments", {**spec, "note": "bell\u0007"}, "note", "U+0007 at index 4"),
            ("PATCH", f"/v1/experiments/{made}", {"name": "a\nb"}, "name", "U+000A at index 1"),
            ("POST", f"/v1/experiments/{made}/rerun", {"name": "r\u007f"}, "name", "U+007F at index 1"),
            ("POST", "/v1/studies", {"base": spec, "grid": {"params.lr": [0.1]}, "name": "\u009bs"}, "name",
             "U+009B at index 0"),
            # a right-to-left override shows "run-gpj.exe" as "run-exe.jpg" (the bidirectional controls are
            # format characters, not control ones: they passed)
            ("PATCH", f"/v1/experiments/{made}", {"name": "run-\u202egpj.exe"}, "name",
             "U+202E (a bidirectional control) at index 4"),
            ("POST", "/v1/experiments", {**spec, "note": "a\u2066b"}, "note", "U+2066 (a bidirectional control) at index 1")):
        r = client.request(method, path, json=body)
        assert r.status_code == 422, (path, r.text)
        (error,) = r.json()["detail"]
        assert error["loc"][-1] == field, error
        assert error["msg"] == f"{field}: expected text without control characters, got {char}", error
    assert client.get("/v1/experiments").json()["total"] == 1
    assert client.patch(f"/v1/experiments/{made}", json={"name": "team \U0001f9d1\u200d\U0001f52c"}).status_code == 200


def test_the_nul_check_passes_a_body_sent_in_chunks_on_whole():
    """The check reads the whole body first (a client may send it in several messages): the route then gets
    every message, in order, and a NUL in any of them (JSON in UTF-16 too) is found."""
    import asyncio

    from api.edges import NoNul

    async def send_through(chunks: list[bytes]) -> tuple[list[bytes], list[dict]]:
        got, sent = [], []

        async def route(scope, receive, send):   # reads the body as a route does, then answers
            while True:
                message = await receive()
                got.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        messages = iter([{"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
                         for i, chunk in enumerate(chunks)])

        async def receive():
            return next(messages)

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/v1/experiments", "query_string": b"", "headers": []}
        await NoNul(route)(scope, receive, send)
        return got, sent

    chunks = [b'{"name": "a', b'bc", "tags": ["x"', b"]}"]
    got, sent = asyncio.run(send_through(chunks))
    assert got == chunks and sent[0]["status"] == 200
    for body in ([b'{"name": "a', b'\\u0000"}'], [json.dumps({"name": "a\x00"}).encode("utf-16")]):
        got, sent = asyncio.run(send_through(body))
        assert got == [] and sent[0]["status"] == 422, body
        assert b'"loc":["body","name"]' in sent[1]["body"]


def test_head_answers_wherever_get_does(client, settings):
    """A load balancer's HEAD /healthz, or a client's HEAD on a resource: the GET's status and headers, no body."""
    experiment_id = submit(client, small_spec(trials=4, steps=40, record_every=10))
    for path in ("/healthz", "/readyz", "/v1/experiments", f"/v1/experiments/{experiment_id}", "/v1/nope"):
        head, get = client.head(path), client.get(path)
        assert head.status_code == get.status_code and head.content == b"", path
        assert head.headers.get("etag") == get.headers.get("etag"), path
        assert head.headers["content-length"] == get.headers["content-length"], path
    assert client.delete("/healthz").headers["allow"] == "GET, HEAD"


def test_openapi_documents_every_endpoint(client):
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    expected = {
        ("/v1/experiments", "post"), ("/v1/experiments", "get"), ("/v1/experiments/{experiment_id}", "get"),
        ("/v1/experiments/{experiment_id}/results", "get"), ("/v1/experiments/{experiment_id}/cancel", "post"),
        ("/v1/experiments/{experiment_id}/plots/{name}.{fmt}", "get"), ("/healthz", "get"),
    }
    for path, method in expected:
        op = paths[path][method]
        assert op.get("summary") and op.get("description"), (path, method)
        ok = next(c for c in op["responses"] if c.startswith("2"))
        assert op["responses"][ok].get("content"), (path, method)
    for name in ("ExperimentOut", "ExperimentPage", "ResultDocument", "NRQSubmission", "NRQParams", "ErrorOut", "HealthOut"):
        assert name in schema["components"]["schemas"], name
    assert "404" in paths["/v1/experiments/{experiment_id}"]["get"]["responses"]


def test_attempts_endpoint(client, settings):
    exp = submit(client, small_spec())
    assert client.get(f"/v1/experiments/{exp['id']}/attempts").json() == []
    assert execute(settings, exp["id"], worker="w9") == "succeeded"
    body = client.get(f"/v1/experiments/{exp['id']}").json()
    assert body["attempts"] == 1 and body["queue"] == "cpu" and body["worker"] == "w9"
    [attempt] = client.get(f"/v1/experiments/{exp['id']}/attempts").json()
    assert attempt["number"] == 1 and attempt["worker"].startswith("w9/") and attempt["outcome"] == "succeeded"
    ended, started = (datetime.fromisoformat(attempt[key]) for key in ("ended_at", "started_at"))   # not as strings:
    assert ended >= started and attempt["resumed_from_step"] is None      # a whole second is written "…:58Z"
    assert client.get("/v1/experiments/nope/attempts").status_code == 404


def test_the_dashboard_is_served_compressed_and_revalidated(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/ui/app.js">' in page.text and "https://" not in page.text   # no CDN
    bundle = client.get("/ui/plotly.min.js", headers={"Accept-Encoding": "gzip"})
    assert bundle.status_code == 200 and bundle.headers["content-encoding"] == "gzip"
    assert bundle.headers["content-type"].startswith("text/javascript") and len(bundle.content) > 1_000_000
    assert int(bundle.headers["content-length"]) < len(bundle.content) / 2   # compressed on the wire
    again = client.get("/ui/plotly.min.js", headers={"If-None-Match": bundle.headers["etag"]})
    assert again.status_code == 304 and again.headers["etag"] == bundle.headers["etag"]
    module = client.get("/ui/app.js")
    assert module.headers["content-type"].startswith("text/javascript") and "import" in module.text
    assert client.get("/ui/nope.js").status_code == 404
    assert client.get("/ui/../main.py").status_code == 404
    assert client.get("/ui/%2e%2e/main.py").status_code == 404


def test_the_api_docs_load_nothing_from_elsewhere(client):
    """FastAPI's /docs and /redoc load their scripts, styles and fonts from CDNs: blank pages on a lab host without
    the internet. Served from here, each asset they name answers."""
    for page in ("/docs", "/redoc"):
        html = client.get(page)
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html"), page
        assert "https://" not in html.text and "http://" not in html.text, page
        for src in re.findall(r'(?:src|href)="(/[^"]+)"', html.text):
            assert client.get(src).status_code == 200, (page, src)
        assert "/openapi.json" in html.text
    assert len(client.get("/ui/swagger-ui-bundle.js").content) > 500_000
