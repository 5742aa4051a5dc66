"""The studies API in-process (the main flows on SQLite and PostgreSQL, the rest on SQLite), with a real
filesystem broker and the real engine: children are run by the worker's runner, in the order the
fair-share claim gives them."""
from __future__ import annotations

import csv
import io

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.main import create_app
from store.models import Experiment, SeriesChunk, Study
from store.settings import Settings
from tests.conftest import auth, make_users, small_spec
from tests.dbutil import session_scope
from worker.runner import execute, execute_next


def study_spec(**extra) -> dict:
    """A 2 × 2 lr × weight_decay grid of small nrq runs, seeds 1 and 2: 8 children, 4 points."""
    base = small_spec(trials=16, steps=200, record_every=20)
    spec = {"name": "grid", "base": base,
            "grid": {"params.lr": [0.05, 0.1], "params.weight_decay": [0.01, 0.02]}, "seeds": [1, 2]}
    spec.update(extra)
    return spec


def make_settings(tmp_path, **overrides) -> Settings:
    values = {"state_dir": tmp_path / "state", "database_url": f"sqlite:///{tmp_path / 'smd.sqlite3'}",
              "flush_seconds": 0.2, "auth": "off", "sweeper": False, **overrides}
    return Settings(**values)




@pytest.fixture
def sqlite_env(tmp_path):
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        yield client, settings


def counts(url: str) -> tuple[int, int]:
    """(studies, experiments) stored."""
    with session_scope(url) as s:
        return (s.scalar(select(func.count()).select_from(Study)),
                s.scalar(select(func.count()).select_from(Experiment)))


def submit(client, spec, headers=None) -> dict:
    r = client.post("/v1/studies", json=spec, headers=headers or {})
    assert r.status_code == 202, r.text
    assert r.headers["location"] == f"/v1/studies/{r.json()['id']}"
    return r.json()


def run_all(settings) -> list[str]:
    """Run queued jobs until none is left; the ids in the order they were claimed."""
    order = []
    while True:
        with session_scope(settings.db_url) as s:
            before = {e.id for e in s.scalars(select(Experiment).where(Experiment.status == "queued"))}
        if execute_next(settings, ["cpu"]) == "idle":
            return order
        with session_scope(settings.db_url) as s:
            after = {e.id for e in s.scalars(select(Experiment).where(Experiment.status == "queued"))}
        order.extend(before - after)


def test_a_study_is_stored_run_in_order_and_tabled(env):
    client, settings = env
    study = submit(client, study_spec(fuse=False))   # one child per claim (fused studies: test_fused_study.py)
    assert study["status"] == "queued" and study["children_count"] == 8 and study["points"] == 4
    assert study["spec"]["fuse"] is False
    assert study["axes"] == ["params.lr", "params.weight_decay"] and study["counts"]["queued"] == 8
    assert study["spec"]["grid"] == study_spec()["grid"] and "visibility" not in study["spec"]
    assert study["owner"] == "local" and study["visibility"] == "private" and study["priority"] == "normal"
    assert len(list(settings.broker_folder.glob("*.msg"))) == 8  # a doorbell per child (up to 32)

    got = client.get(f"/v1/studies/{study['id']}").json()
    children = got["children"]
    assert [c["index"] for c in children] == list(range(8))
    expected = [(lr, wd, seed) for lr in (0.05, 0.1) for wd in (0.01, 0.02) for seed in (1, 2)]
    assert [(c["values"]["params.lr"], c["values"]["params.weight_decay"], c["seed"]) for c in children] == expected
    assert [c["point"] for c in children] == [0, 0, 1, 1, 2, 2, 3, 3]
    for child, (lr, wd, seed) in zip(children, expected, strict=True):
        exp = client.get(f"/v1/experiments/{child['id']}").json()
        assert exp["study_id"] == study["id"] and exp["name"] == f"grid #{child['index']}"
        assert exp["spec"]["params"]["lr"] == lr and exp["spec"]["params"]["weight_decay"] == wd
        assert exp["spec"]["seed"] == seed and exp["spec"]["params"]["trials"] == 16

    first = execute_next(settings, ["cpu"])
    assert first == "succeeded"
    running = client.get(f"/v1/studies/{study['id']}").json()
    assert running["status"] == "running" and running["counts"]["succeeded"] == 1
    assert running["progress"] == pytest.approx(1 / 8) and running["eta_seconds"] is not None
    assert running["children"][0]["status"] == "succeeded"   # the first in expansion order ran first

    order = run_all(settings)
    assert order == [c["id"] for c in children[1:]]            # children run in point order
    done = client.get(f"/v1/studies/{study['id']}")
    body = done.json()
    assert body["status"] == "succeeded" and body["counts"]["succeeded"] == 8 and body["progress"] == 1.0
    assert body["finished_at"] and body["eta"] is None
    assert client.get(f"/v1/studies/{study['id']}", headers={"If-None-Match": done.headers["etag"]}).status_code == 304

    table = client.get(f"/v1/studies/{study['id']}/table").json()
    assert len(table["rows"]) == 8
    for name in ("index", "point", "seed", "experiment_id", "status", "params.lr", "params.weight_decay",
                 "intrinsic_lr", "lr_over_wd", "risk", "risk_stationary"):
        assert name in table["columns"], name
    row = table["rows"][3]
    assert row["params.lr"] == 0.05 and row["params.weight_decay"] == 0.02 and row["seed"] == 2
    assert row["intrinsic_lr"] == pytest.approx(0.05 * 0.02) and 0 < row["risk"] < 1

    grouped = client.get(f"/v1/studies/{study['id']}/table", params={"group": "point"}).json()
    assert len(grouped["rows"]) == 4 and all(r["n"] == 2 for r in grouped["rows"])
    pair = [r["risk"] for r in table["rows"][:2]]
    assert grouped["rows"][0]["risk"] == pytest.approx(sum(pair) / 2) and grouped["rows"][0]["risk_se"] > 0

    text = client.get(f"/v1/studies/{study['id']}/table.csv")
    assert text.status_code == 200 and text.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(text.text)))
    assert len(rows) == 8 and float(rows[0]["risk"]) == table["rows"][0]["risk"]
    parquet = client.get(f"/v1/studies/{study['id']}/table.parquet", params={"group": "point"})
    assert parquet.status_code == 200 and parquet.content[:4] == b"PAR1"
    import pyarrow.parquet as pq
    assert pq.read_table(io.BytesIO(parquet.content)).num_rows == 4

    events = client.get(f"/v1/studies/{study['id']}/events")
    assert events.status_code == 200 and '"status":"succeeded"' in events.text and "event: status" in events.text

    listed = client.get("/v1/studies").json()
    assert listed["total"] == 1 and listed["items"][0]["id"] == study["id"] and listed["items"][0]["children"] is None
    assert client.post(f"/v1/studies/{study['id']}/cancel").status_code == 409


def test_a_sweep_over_steps_counts_its_progress_in_steps(env):
    client, settings = env
    study = submit(client, {"name": "steps", "base": small_spec(trials=16, steps=100, record_every=20),
                            "grid": {"params.steps": [100, 300]}, "seeds": [0], "fuse": False})
    assert execute_next(settings, ["cpu"]) == "succeeded"   # the 100-step child, first in expansion order
    body = client.get(f"/v1/studies/{study['id']}").json()
    assert body["counts"] == {**body["counts"], "succeeded": 1, "queued": 1}
    assert body["progress"] == pytest.approx(100 / 400)   # its 100 steps of 400, not one child of two
    listed = {s["id"]: s for s in client.get("/v1/studies").json()["items"]}
    assert listed[study["id"]]["progress"] == pytest.approx(100 / 400)


def test_pages_of_studies(sqlite_env):
    client, _ = sqlite_env
    ids = [submit(client, study_spec(seeds=[i]))["id"] for i in range(3)]
    page = client.get("/v1/studies", params={"limit": 2}).json()
    assert page["total"] == 3 and [s["id"] for s in page["items"]] == ids[::-1][:2]
    rest = client.get("/v1/studies", params={"limit": 2, "cursor": page["next_cursor"]}).json()
    assert [s["id"] for s in rest["items"]] == ids[:1] and rest["next_cursor"] is None


@pytest.mark.parametrize("change, where, words", [
    ({"grid": {"params.lrr": [0.1]}}, ["body", "axis", "params.lrr"], ["params.lr"]),
    ({"grid": {"params.lr": [0.1, -0.1]}}, ["body", "point", 1, "params", "lr"], ["greater than 0"]),
    ({"grid": {}, "zip": {"params.lr": [0.1, 0.2], "params.weight_decay": [0.01]}}, ["body", "zip"],
     ["equal lengths"]),
    # a bad span is one error, about the span (not also "should be a valid list")
    ({"grid": {"params.lr": {"linspace": [0.1, 0.2], "num": 0}}}, ["body", "grid", "params.lr", "span", "num"],
     ["greater than or equal to 1"]),
    ({"grid": {"params.lr": {"logspace": [-1, 0.2], "num": 3}}}, ["body", "grid", "params.lr", "span"],
     ["logspace: expected positive ends"]),
    ({"grid": {"params.lr": 0.1}}, ["body", "grid", "params.lr"], ["expected a list of values or", "linspace"]),
    ({"seeds": [1, 2, 1]}, ["body", "seeds"], ["seeds: expected distinct seeds, got 1 more than once"]),
    ({"seeds": [-1]}, ["body", "seeds"], ["seeds: expected integers in [0, 2^63"]),
    ({"grid": {"params.lr": [0.1], "seed": [4, 4]}, "seeds": None}, ["body", "grid"],
     ["grid axis seed: expected distinct seeds, got 4 more than once"]),
    ({"grid": {}, "points": []}, ["body", "points"], ["points: expected at least one point"]),
    ({"points": [{"params.lr": 0.1}]}, ["body", "points"], ["points: expected either points or grid/zip"]),
])
def test_bad_studies_are_422_and_store_nothing(sqlite_env, change, where, words):
    client, settings = sqlite_env
    r = client.post("/v1/studies", json=study_spec(**change))
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    text = str(errors)
    assert all(w in text for w in words), errors
    if where is not None:
        assert [e["loc"] for e in errors] == [where], errors
    if where and where[1] == "point":
        error = next(e for e in errors if e["loc"] == where)
        assert error["point"] == {"index": 1, "values": {"params.lr": -0.1}}
    assert counts(settings.db_url) == (0, 0)
    assert not list(settings.broker_folder.glob("*.msg"))


@pytest.mark.parametrize("axes, field", [
    ({"grid": {"params.lr": []}}, "grid.params.lr"),
    ({"grid": {"params.lr": {"linspace": [0.1, 0.2]}}}, "grid.params.lr.num"),
    ({"grid": {}, "zip": {"params.lr": {"linspace": [1, 2], "num": 0}}}, "zip.params.lr.num"),
])
def test_an_axis_error_field_is_the_path_the_request_wrote(sqlite_env, axes, field):
    """``field`` leaves out the form pydantic names an axis by (its loc's "list" or "span"): no key of the body."""
    client, _ = sqlite_env
    r = client.post("/v1/studies", json=study_spec(**axes))
    assert r.status_code == 422, r.text
    assert [e.get("field") for e in r.json()["detail"]] == [field], r.text


def test_a_points_check_across_fields_is_located_at_the_field_it_names(sqlite_env):
    """record_every > steps at one point: reported at that point's record_every (a form shows it on its axis),
    as a submission's is at its field; and a rerun's override at the override."""
    client, settings = sqlite_env
    r = client.post("/v1/studies", json=study_spec(grid={"params.record_every": [20, 1000]}))
    assert r.status_code == 422, r.text
    [error] = r.json()["detail"]
    assert error["loc"] == ["body", "point", 1, "params", "record_every"] and "≤ steps (200)" in error["msg"], error
    done = client.post("/v1/experiments", json=small_spec(trials=4, steps=40, record_every=10)).json()["id"]
    r = client.post(f"/v1/experiments/{done}/rerun", json={"overrides": {"params.record_every": 100}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "overrides", "params.record_every"], r.text
    # an entry past the end of the experiment's list, in a rerun's words (no base, no axis)
    r = client.post(f"/v1/experiments/{done}/rerun", json={"overrides": {"params.lr_schedule.0.lr_factor": 0.5}})
    [error] = r.json()["detail"]
    assert error["loc"] == ["body", "overrides", "params.lr_schedule.0.lr_factor"], error
    assert error["msg"] == ("params.lr_schedule.0.lr_factor: the experiment's params.lr_schedule has no entry 0 (it is "
                            "empty): override the whole list instead"), error
    r = client.post(f"/v1/experiments/{done}/rerun", json={"overrides": {"params.lrr": 0.5}})
    [error] = r.json()["detail"]
    assert error["msg"].startswith("params.lrr: not a field of the experiment's spec (nrq)"), error


@pytest.mark.parametrize("axes", [{"grid": {"params.lr": [0.05, 0.1], "seed": [5, 6]}},
                                  {"grid": {}, "points": [{"params.lr": 0.05}, {"params.lr": 0.1, "seed": 6}]}])
def test_a_seed_axis_with_seeds_is_422_at_seeds(sqlite_env, axes):
    """Seeds given both as an axis on ``seed`` and as ``seeds`` (which used to win silently, the table's
    ``seed`` column showing the axis's): refused by POST /v1/studies and /v1/study-plans alike."""
    client, settings = sqlite_env
    for route in ("/v1/studies", "/v1/study-plans"):
        r = client.post(route, json=study_spec(**axes))   # seeds [1, 2]
        assert r.status_code == 422, r.text
        [error] = r.json()["detail"]
        assert error["loc"] == ["body", "seeds"] and error["type"] == "seeds_and_seed_axis", error
        assert "give the seeds either as an axis on `seed` or as `seeds`, not both" in error["msg"]
    assert counts(settings.db_url) == (0, 0)
    plan = client.post("/v1/study-plans", json=study_spec(**axes, seeds=None))
    assert plan.status_code == 200, plan.text
    assert plan.json()["runs"] == plan.json()["points"]   # the axis alone: one child per point


def test_too_many_points_is_422(tmp_path):
    settings = make_settings(tmp_path, max_study_points=7)
    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/studies", json=study_spec())
        assert r.status_code == 422 and r.json()["detail"][0]["type"] == "too_many_points"
        assert "at most 7" in r.json()["detail"][0]["msg"]
        assert counts(settings.db_url) == (0, 0)
        assert client.post("/v1/studies", json=study_spec(seeds=[1])).status_code == 202


@pytest.mark.parametrize("quota, words", [
    ({"max_active_jobs": 10}, ["at most 10 queued + running jobs", "you have 3", "adds 8"]),
    ({"max_work": 100_000}, ["work is limited to 100,000 ", "need 256,000 "]),
])
def test_quotas_apply_to_the_whole_study(tmp_path, quota, words):
    settings = make_settings(tmp_path, **quota)
    with TestClient(create_app(settings)) as client:
        for _ in range(3):
            assert client.post("/v1/experiments", json=small_spec(trials=1, steps=20, dim=2)).status_code == 202
        r = client.post("/v1/studies", json=study_spec())   # 8 children of 16·200·10 = 32 000
        assert r.status_code == 429, r.text
        assert r.headers["SMD-Quota"] == ("work" if "max_work" in quota else "active_jobs")
        if "max_work" in quota:   # no wait makes the study smaller
            assert "Retry-After" not in r.headers
        else:
            assert int(r.headers["Retry-After"]) >= 1
        assert all(w in r.json()["detail"] for w in words), r.json()
        assert counts(settings.db_url) == (0, 3)
        assert client.post("/v1/studies", json=study_spec(seeds=[1], grid={"params.lr": [0.1]})).status_code == 202


def test_a_study_larger_than_the_active_jobs_limit_is_a_429_without_retry_after(tmp_path):
    """No wait makes room for it: no Retry-After (the client raises at once, tests/client), and a message
    saying how large a study may be."""
    settings = make_settings(tmp_path, max_active_jobs=5)
    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/studies", json=study_spec())   # 8 children, none active
        assert r.status_code == 429 and "Retry-After" not in r.headers, r.text
        assert r.headers["SMD-Quota"] == "active_jobs"
        assert "adds 8 children, more than the limit itself" in r.json()["detail"]
        assert "at most 5 children" in r.json()["detail"]
        assert counts(settings.db_url) == (0, 0)


def test_cancel_stops_every_child(env):
    client, settings = env
    from store import jobs

    study = submit(client, study_spec())
    claim = jobs.claim_next(settings.db_url, ["cpu"], "w", 60)      # the first child is running
    r = client.post(f"/v1/studies/{study['id']}/cancel")
    assert r.status_code == 202
    body = r.json()
    assert body["cancel_requested"] and body["status"] == "running"
    assert body["counts"]["cancelled"] == 7 and body["counts"]["running"] == 1
    assert execute_next(settings, ["cpu"]) == "idle"                # nothing new starts
    assert client.delete(f"/v1/studies/{study['id']}").status_code == 409   # a child still runs
    running = client.get(f"/v1/experiments/{claim.experiment_id}").json()
    assert running["status"] == "running" and running["cancel_requested"]
    jobs.finish_claimed(settings.db_url, claim, "cancelled")          # its runner stops at the next flush
    ended = client.get(f"/v1/studies/{study['id']}").json()
    assert ended["status"] == "cancelled" and ended["finished_at"]
    assert client.post(f"/v1/studies/{study['id']}/cancel").status_code == 409


def test_statuses_partial_and_delete_cascades(env):
    client, settings = env
    study = submit(client, study_spec(seeds=[1]))
    children = client.get(f"/v1/studies/{study['id']}").json()["children"]
    assert execute(settings, children[0]["id"]) == "succeeded"
    assert client.delete(f"/v1/studies/{study['id']}").status_code == 409   # still active
    assert client.post(f"/v1/studies/{study['id']}/cancel").status_code == 202
    got = client.get(f"/v1/studies/{study['id']}").json()
    assert got["status"] == "partial" and got["counts"] == {"queued": 0, "running": 0, "succeeded": 1,
                                                            "failed": 0, "cancelled": 3}
    with session_scope(settings.db_url) as s:
        assert s.scalar(select(func.count()).select_from(SeriesChunk)) > 0
    refused = client.delete(f"/v1/experiments/{children[0]['id']}")   # an ended child goes with its study only
    assert refused.status_code == 409 and "delete the study" in refused.json()["detail"]
    other = client.post("/v1/experiments", json=small_spec()).json()   # not part of the study: stays
    assert client.delete(f"/v1/studies/{study['id']}").status_code == 204
    assert counts(settings.db_url) == (0, 1)
    with session_scope(settings.db_url) as s:
        assert s.scalar(select(func.count()).select_from(SeriesChunk)) == 0
    assert client.get(f"/v1/studies/{study['id']}").status_code == 404
    assert client.get(f"/v1/experiments/{children[0]['id']}").status_code == 404
    assert client.get(f"/v1/experiments/{other['id']}").status_code == 200


def test_owner_and_admin_rules(tmp_path):
    settings = make_settings(tmp_path, auth="on")
    keys = make_users(settings.db_url)
    with TestClient(create_app(settings)) as client:
        alice, bob, root = auth(keys.alice), auth(keys.bob), auth(keys.root)
        private = submit(client, study_spec(seeds=[1]), alice)
        shared = submit(client, study_spec(seeds=[1], visibility="lab"), alice)
        for method, path in [("get", ""), ("get", "/table"), ("post", "/cancel"), ("delete", ""),
                             ("get", "/events"), ("get", "/plots/overlay.png?metric=risk")]:
            r = getattr(client, method)(f"/v1/studies/{private['id']}{path}", headers=bob)
            assert r.status_code == 404 and private["id"] in r.json()["detail"], (method, path, r.text)
        assert client.get(f"/v1/studies/{shared['id']}", headers=bob).status_code == 200
        assert client.get(f"/v1/studies/{shared['id']}/table", headers=bob).status_code == 200
        assert client.post(f"/v1/studies/{shared['id']}/cancel", headers=bob).status_code == 403
        assert client.delete(f"/v1/studies/{shared['id']}", headers=bob).status_code == 403
        assert [s["id"] for s in client.get("/v1/studies", headers=bob).json()["items"]] == [shared["id"]]
        assert client.get("/v1/studies", headers=root).json()["total"] == 2
        assert client.post(f"/v1/studies/{private['id']}/cancel", headers=root).status_code == 202
        for path in ("/v1/studies", "/v1/study-plans"):   # a plan answers as the submission would
            assert client.post(path, json=study_spec(priority="high"), headers=bob).status_code == 403
        assert client.get("/v1/studies").status_code == 401
        high = submit(client, study_spec(seeds=[1], priority="high"), root)
        assert high["priority"] == "high"


def test_the_overlay_png_draws_every_started_child(sqlite_env, monkeypatch):
    """As the overlay's JSON does: a child that failed (or runs, or was cancelled) keeps the points it made, and
    the PNG draws them, labelled with its status, where it used to draw the succeeded children only."""
    from smdrender import study_plots

    client, settings = sqlite_env
    study = submit(client, study_spec(seeds=[1], grid={"params.lr": [0.05, 0.1]}))
    run_all(settings)
    second = client.get(f"/v1/studies/{study['id']}").json()["children"][1]["id"]
    with session_scope(settings.db_url) as s:   # as if it had failed after its points were stored
        s.get(Experiment, second).status = "failed"
    drawn = {}
    real = study_plots.overlay
    monkeypatch.setattr(study_plots, "overlay", lambda lines, *args: drawn.setdefault("lines", lines) and real(lines, *args))
    r = client.get(f"/v1/studies/{study['id']}/plots/overlay.png", params={"metric": "risk"})
    assert r.status_code == 200 and r.content[:4] == b"\x89PNG"
    assert [line["label"] for line in drawn["lines"]] == ["lr=0.05, seed=1", "lr=0.1, seed=1 (failed)"]
    assert len(drawn["lines"][1]["y"]) == 11   # its 10 records and the end


def test_plot_arguments_that_do_not_apply_are_422(sqlite_env):
    client, settings = sqlite_env
    study = submit(client, study_spec(seeds=[1], grid={"params.lr": [0.05, 0.1]}))
    base = f"/v1/studies/{study['id']}/plots"
    before = client.get(f"{base}/overlay.png", params={"metric": "risk"})
    assert before.status_code == 422 and "no child has started yet" in before.json()["detail"][0]["msg"]
    run_all(settings)

    def refused(path, **params) -> tuple[list, str]:
        r = client.get(f"{base}/{path}", params=params)
        assert r.status_code == 422, r.text
        (error,) = r.json()["detail"]
        return error["loc"], error["msg"]

    loc, msg = refused("overlay.png", metric="bogus")
    assert loc == ["query", "metric"] and "'bogus'" in msg and "available: risk, loss" in msg
    loc, msg = refused("overlay.svg", metric="risk", x="banana")
    assert loc == ["query", "x"] and "step, lr_time, tau, intrinsic_time" in msg
    loc, msg = refused("heatmap.png", metric="risk", x="params.lr", y="params.momentum")
    assert loc == ["query", "y"] and "available: params.lr, intrinsic_lr, lr_over_wd" in msg
    loc, msg = refused("heatmap.png", metric="risk", x="params.lr", y="params.lr")   # one axis twice
    assert loc == ["query", "y"] and "another axis than x" in msg
    loc, msg = refused("scatter.png", metric="risk_stationary", x="intrinsic_lr")   # a theory, not a metric
    assert loc == ["query", "metric"] and "risk_stationary" in msg
    assert client.get(f"{base}/scatter.gif", params={"metric": "risk", "x": "params.lr"}).status_code == 422


def test_plots_render(sqlite_env, monkeypatch):
    client, settings = sqlite_env
    study = submit(client, study_spec())
    run_all(settings)
    base = f"/v1/studies/{study['id']}/plots"
    for x in ("step", "lr_time", "tau", "intrinsic_time"):
        r = client.get(f"{base}/overlay.png", params={"metric": "risk", "x": x})
        assert r.status_code == 200 and r.content[:8] == b"\x89PNG\r\n\x1a\n", (x, r.text[:300])
    r = client.get(f"{base}/heatmap.svg", params={"metric": "risk", "x": "params.lr", "y": "params.weight_decay"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml") and b"<svg" in r.content
    r = client.get(f"{base}/scatter.png", params={"metric": "risk", "x": "intrinsic_lr"})
    assert r.status_code == 200 and r.content[:4] == b"\x89PNG"


def test_plot_data_handed_to_the_renderers(sqlite_env, monkeypatch):
    """What the routes gather for the renderers: each call is recorded, then drawn by the real renderer."""
    from smdrender import study_plots

    client, settings = sqlite_env
    calls = {}

    def spy(name, arity):
        real = getattr(study_plots, name)

        def recorded(*args, **kwargs):
            calls[name] = args[:arity]
            return real(*args, **kwargs)
        monkeypatch.setattr(study_plots, name, recorded)

    spy("overlay", 4)
    spy("heatmap", 5)
    spy("scatter", 5)
    study = submit(client, study_spec())
    run_all(settings)
    base = f"/v1/studies/{study['id']}/plots"
    assert client.get(f"{base}/overlay.png", params={"metric": "risk", "x": "intrinsic_time"}).content[:4] == b"\x89PNG"
    lines, metric, x, fmt = calls["overlay"]
    assert len(lines) == 8 and metric == "risk" and x == "intrinsic_time" and fmt == "png"
    assert lines[0]["label"] == "lr=0.05, weight_decay=0.01, seed=1"
    assert len(lines[0]["x"]) == len(lines[0]["y"]) == len(lines[0]["theory"]) == 11   # 10 records and the end
    assert lines[0]["x"][1] == pytest.approx(20 * 0.05 * 0.01)
    assert client.get(f"{base}/heatmap.svg", params={"metric": "risk", "x": "params.lr",
                                                      "y": "params.weight_decay"}).content.lstrip().startswith(b"<?xml")
    rows, x, y, metric, theory = calls["heatmap"]
    assert len(rows) == 4 and theory == "risk_stationary" and (x, y) == ("params.lr", "params.weight_decay")
    assert client.get(f"{base}/scatter.png", params={"metric": "risk", "x": "intrinsic_lr"}).content[:4] == b"\x89PNG"
    rows, x, metric, theory, curves = calls["scatter"]
    assert len(rows) == 4 and "risk_se" in rows[0] and theory == "risk_stationary"
    (label, xs, ys), = curves   # r* depends on ηλ alone: the four points' curves are one
    assert label is None
    assert len(xs) == len(ys) == 60 and xs[0] == pytest.approx(0.0005) and xs[-1] == pytest.approx(0.002)
    assert all(y is None or y > 0 for y in ys)
    # along lr the theory differs with the weight decay: one curve per weight decay, labelled, each through its
    # points' theory at its ends (one curve, the first child's, missed the other weight decay's points)
    client.get(f"{base}/scatter.png", params={"metric": "risk", "x": "params.lr"})
    rows, _, _, _, curves = calls["scatter"]
    assert sorted(label for label, _, _ in curves) == ["weight_decay=0.01", "weight_decay=0.02"]
    for label, xs, ys in curves:
        ends = sorted((r["params.lr"], r["risk_stationary"]) for r in rows if f"weight_decay={r['params.weight_decay']}" == label)
        assert (xs[0], xs[-1]) == pytest.approx((ends[0][0], ends[-1][0]))
        assert (ys[0], ys[-1]) == pytest.approx((ends[0][1], ends[-1][1]), rel=1e-9)


def test_a_spectrum_swept_over_a_base_that_gave_none_is_planned(sqlite_env):
    """The base's two-level default (filled in by its validator, or given as null) is not the user's: an axis
    setting params.eigenvalues over it was refused for "both" (POST /v1/studies alike: the same expansion)."""
    client, _ = sqlite_env
    for given in ({}, {"eig_low": None, "eig_high": None}):
        r = client.post("/v1/study-plans", json={"base": {"kind": "nrq", "params": {"dim": 3, **given}},
                                                 "points": [{"params.eigenvalues": [1.0, 1.5, 2.0]},
                                                            {"params.eigenvalues": [1.0, 2.0, 4.0]}]})
        assert r.status_code == 200 and r.json()["runs"] == 2, r.text
