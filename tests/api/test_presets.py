"""The presets API in-process (SQLite, filesystem broker, the real engine, children run by the worker's
runner as tests/api/test_studies.py runs them): the catalog, bad input (404 listing the ids, 422 for a
size or an override, 429 over quota), and a preset run at a tiny override-reduced size: its checks
pending while children are active, evaluated once on the first read after the end, stored and served
as stored; its figure."""
from __future__ import annotations

import os

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

import smdengine
from api.main import create_app
from api.routes import studies as study_routes
from store.models import Study
from tests.api.test_studies import counts, make_settings, run_all, study_spec, submit
from tests.dbutil import session_scope
from worker.runner import execute_next

PRESET = "nrq-equilibrium-tradeoff"
TINY = {"params.steps": 1500, "params.trials": 32, "params.record_every": 50}   # 3 points × 2 seeds, < 1 s each
PNG = b"\x89PNG\r\n\x1a\n"
VERDICTS = {"reproduced", "not_reproduced", "inconclusive"}


@pytest.fixture
def sqlite_env(tmp_path):
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        yield client, settings


def test_the_catalog_lists_and_shows_every_preset(sqlite_env):
    client, _ = sqlite_env
    listed = client.get("/v1/presets")
    assert listed.status_code == 200, listed.text
    entries = {e["id"]: e for e in listed.json()}
    assert set(entries) == set(smdengine.PRESETS)
    entry = entries[PRESET]
    preset = smdengine.PRESETS[PRESET]
    assert entry["seed"] == preset.seed and entry["figure"] == preset.figure and entry["tier"] == preset.tier
    assert entry["kinds"] == list(preset.kinds) and entry["description"] == preset.description
    assert [c["claim"] for c in entry["checks"]] == [c.claim for c in preset.checks]
    assert [p["metric"] for p in entry["panels"]] == [p.metric for p in preset.panels]
    for size in preset.sizes:
        estimate = smdengine.estimate(PRESET, size)
        # no run has finished on this fresh service: no rate to time a size by
        assert entry["sizes"][size] == {"runs": estimate["runs"], "work": estimate["work"], "gpu": estimate["gpu"],
                                        "estimated_seconds": None, "estimated_from": None}
        assert "spec" not in entry["sizes"][size]
    shown = client.get(f"/v1/presets/{PRESET}").json()
    assert {k: v for k, v in shown.items() if k != "sizes"} == {k: v for k, v in entry.items() if k != "sizes"}
    for size in preset.sizes:
        assert shown["sizes"][size]["spec"] == smdengine.preset_study(PRESET, size)
        assert shown["sizes"][size]["runs"] == entry["sizes"][size]["runs"]
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/presets", "/v1/presets/{preset_id}", "/v1/presets/{preset_id}/run",
            "/v1/studies/{study_id}/plots/figure.{fmt}"} <= set(paths)


def test_a_size_is_timed_by_runs_of_a_comparable_size_only(tmp_path):
    """A run's time is mostly its fixed part when it is small: a 2000-step run's work per second put a preset
    that takes 90 s at 6762 s. Runs under a tenth of the size's work per run do not time it."""
    from datetime import timedelta

    from sqlalchemy import update

    from api.routes.presets import _Rates
    from store import jobs
    from store.migrate import upgrade_head
    from store.models import Experiment, Status, utcnow
    from tests.dbutil import session_scope

    url = f"sqlite:///{tmp_path / 'rates.sqlite3'}"
    upgrade_head(url)

    def finished(steps: int, seconds: float) -> int:
        spec = {"kind": "nrq", "params": {"dim": 10, "trials": 1000, "steps": steps}}
        t0 = utcnow()
        with session_scope(url) as session:
            row = jobs.create(session, kind="nrq", name=None, spec=spec, total_steps=steps)
            session.execute(update(Experiment).where(Experiment.id == row.id).values(
                status=Status.succeeded, worker="w1", started_at=t0, finished_at=t0 + timedelta(seconds=seconds)))
        return 10 * 1000 * steps   # its work

    small = finished(2000, 4.0)   # 2e7 in 4 s, mostly start-up
    assert _Rates(url)("cpu", "nrq", 50 * small) is None   # nothing comparable: no estimate, not a 50× one
    assert _Rates(url)("cpu", "nrq", 5 * small) == pytest.approx(small / 4.0)
    big = finished(100_000, 20.0)   # 1e9 in 20 s
    assert _Rates(url)("cpu", "nrq", 50 * small) == pytest.approx(big / 20.0)


def test_a_preset_is_timed_by_its_own_earlier_studies_first(tmp_path):
    """Its study runs fused: a kind's runs at large (single runs, slower per unit of work) put a preset that ran
    in 25 s at 33 min. Its own studies whose every child succeeded time it; one with a failed child does not, nor
    one run with seeds or overrides of its own (one seed of eight with more steps fused less: 1553 s for 32)."""
    from datetime import timedelta

    from sqlalchemy import update

    from api.routes.presets import _Rates, preset_as_stored
    from store import jobs
    from store.migrate import upgrade_head
    from store.models import Experiment, Status, Study, utcnow
    from tests.dbutil import session_scope

    url = f"sqlite:///{tmp_path / 'own.sqlite3'}"
    upgrade_head(url)
    t0 = utcnow()
    spec = {"kind": "nrq", "params": {"dim": 10, "trials": 1000, "steps": 10_000}}   # work 1e8
    preset, other = "nrq-equilibrium-tradeoff", "nrq-momentum-risk"
    as_is = preset_as_stored(preset, "quick")

    def study(children: list[tuple[str, float, float]], size: str = "quick", stored: dict | None = None) -> None:
        with session_scope(url) as session:   # children: (status, start, end) in s
            row = Study(spec=as_is if stored is None else stored, axes=[], children=len(children),
                        points=len(children), preset=preset, preset_size=size)
            session.add(row)
            session.flush()
            for status, start, end in children:
                child = jobs.create(session, kind="nrq", name=None, spec=spec, total_steps=10_000)
                session.execute(update(Experiment).where(Experiment.id == child.id).values(
                    study_id=row.id, status=status, worker="w1", started_at=t0 + timedelta(seconds=start),
                    finished_at=t0 + timedelta(seconds=end)))

    assert _Rates(url).preset(preset, "quick", "cpu") is None                     # no study of it yet
    study([(Status.succeeded, 0, 10), (Status.failed, 0, 10)])          # not every child succeeded: left out
    assert _Rates(url).preset(preset, "quick", "cpu") is None
    study([(Status.succeeded, 0, 100)], stored={**as_is, "seeds": [0]})   # its own seeds: left out
    assert _Rates(url).preset(preset, "quick", "cpu") is None
    study([(Status.succeeded, 0, 5), (Status.succeeded, 0, 5), (Status.succeeded, 0, 5), (Status.succeeded, 5, 10)])
    # four runs of 1e8 in 10 s of the worker's time (three fused, then one)
    assert _Rates(url).preset(preset, "quick", "cpu") == pytest.approx(4e8 / 10)
    assert _Rates(url).preset(preset, "quick", "gpu") is None and _Rates(url).preset(other, "quick", "cpu") is None
    # another size is not timed by it (a small size's runs are mostly their start)
    assert _Rates(url).preset(preset, "paper", "cpu") is None
    # more newer runs with seeds of their own than a page of the scan: the as-is study is still found
    from store.queue_stats import preset_runs
    for _ in range(21):
        study([(Status.succeeded, 20, 120)], stored={**as_is, "seeds": [0]})
    assert len(preset_runs(url, preset, "quick", "cpu", last=1, spec=as_is)) == 4   # page of 20, then the next
    assert len(preset_runs(url, preset, "quick", "cpu", last=1)) == 1               # any: the newest


def test_a_preset_run_as_it_is_is_stored_as_preset_as_stored_says(sqlite_env):
    """What times a preset is compared with what POST /v1/presets/{id}/run stores: equal for a run as it is (options
    of the service's beside it), different with seeds or overrides of its own."""
    from sqlalchemy import select

    from api.routes.presets import preset_as_stored
    from store.models import Study
    from tests.dbutil import session_scope

    client, settings = sqlite_env
    preset = "nrq-equilibrium-tradeoff"
    ids = [client.post(f"/v1/presets/{preset}/run", json=body).json()["id"]
           for body in ({}, {"visibility": "lab", "overrides": {}}, {"seeds": [0, 1]},
                        {"overrides": {"params.steps": 2000}})]
    with session_scope(settings.db_url) as session:
        stored = [session.scalar(select(Study.spec).where(Study.id == i)) for i in ids]
    as_is = preset_as_stored(preset, "quick")
    assert [spec == as_is for spec in stored] == [True, True, False, False]


def test_a_first_study_is_timed_by_studies_of_its_kind_before_single_runs(tmp_path):
    """Before its own first study, a preset was timed by its kind's runs at large, single runs mostly (a dashboard
    user saw ~33 min for a preset that ran in 25 s): studies' runs of its kind, which the worker fused as it will
    fuse the preset's, come first; single runs only without those; estimated_from says which."""
    from datetime import timedelta

    from sqlalchemy import update

    from api.routes.presets import _rate_of, _Rates
    from store import jobs, queue_stats
    from store.migrate import upgrade_head
    from store.models import Experiment, Status, Study, utcnow
    from tests.dbutil import session_scope

    url = f"sqlite:///{tmp_path / 'tiers.sqlite3'}"
    upgrade_head(url)
    t0 = utcnow()
    spec = {"kind": "nrq", "params": {"dim": 10, "trials": 1000, "steps": 10_000}}   # work 1e8

    def finished(start: float, end: float, study: bool) -> None:
        with session_scope(url) as session:
            study_id = None
            if study:
                row = Study(spec={}, axes=[], children=1, points=1)
                session.add(row)
                session.flush()
                study_id = row.id
            child = jobs.create(session, kind="nrq", name=None, spec=spec, total_steps=10_000)
            session.execute(update(Experiment).where(Experiment.id == child.id).values(
                study_id=study_id, status=Status.succeeded, worker="w1", started_at=t0 + timedelta(seconds=start),
                finished_at=t0 + timedelta(seconds=end)))

    assert _rate_of(_Rates(url), "nrq-equilibrium-tradeoff", "quick", "cpu", "nrq", 10**8) is None
    finished(0, 20, study=False)   # a single run: 1e8 in 20 s
    assert _rate_of(_Rates(url), "nrq-equilibrium-tradeoff", "quick", "cpu", "nrq", 10**8) == ("runs", pytest.approx(1e8 / 20))
    for _ in range(4):             # four study children fused in one batch: 4e8 in 10 s of the worker's time
        finished(30, 40, study=True)
    assert _rate_of(_Rates(url), "nrq-equilibrium-tradeoff", "quick", "cpu", "nrq", 10**8) == ("studies", pytest.approx(4e8 / 10))
    # a batch larger than the history (DURATION_HISTORY runs) counts whole: cut at its 50th run, its busy time
    # was taken for 50 runs' work (0.78 of its rate for 64)
    batch = queue_stats.DURATION_HISTORY + 14
    for _ in range(batch):
        finished(50, 60, study=True)
    assert _rate_of(_Rates(url), "nrq-equilibrium-tradeoff", "quick", "cpu", "nrq", 10**8) == ("studies", pytest.approx(batch * 1e8 / 10))


def test_unknown_preset_is_404_listing_the_ids(sqlite_env):
    client, settings = sqlite_env
    for r in (client.get("/v1/presets/nope"), client.post("/v1/presets/nope/run", json={})):
        assert r.status_code == 404, r.text
        assert all(preset_id in r.json()["detail"] for preset_id in smdengine.PRESETS)
    assert counts(settings.db_url) == (0, 0)


@pytest.mark.parametrize("body, loc, words", [
    ({"size": "huge"}, ["body", "size"], ["quick", "paper", "huge"]),
    ({"overrides": {"params.lrr": 0.1}}, ["body", "overrides", "params.lrr"], ["xtra"]),
    ({"overrides": {"params.trials": -3}}, ["body", "overrides", "params.trials"], ["greater"]),
    ({"overrides": {"params.lr.x": 1}}, ["body", "overrides"], ["params.lr"]),
    ({"overrides": {"params.lr": 0.2}}, ["body", "overrides", "params.lr"], ["does not vary", "axis"]),
    ({"overrides": {"params.dim": 1}}, ["body", "overrides", "params.dim"], ["greater"]),
    ({"seeds": []}, ["body", "seeds"], ["at least 1"]),
    ({"overrides": {"seed": 3}}, ["body", "overrides", "seed"], ["does not vary", "its axis", "seeds"]),   # not ignored
    ({"size": "quick", "bogus": 1}, ["body", "bogus"], ["xtra"]),
])
def test_a_bad_size_or_override_is_422_and_stores_nothing(sqlite_env, body, loc, words):
    client, settings = sqlite_env
    r = client.post(f"/v1/presets/{PRESET}/run", json=body)
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert any(e["loc"][:len(loc)] == loc for e in errors), errors
    assert all(w in str(errors) for w in words), errors
    assert counts(settings.db_url) == (0, 0)


@pytest.mark.parametrize("preset, overrides, path", [
    ("norm-map-sgd", {"params.lr": -1}, "params.lr"),   # sde: the model's tag between the path's parts
    ("norm-map-sgd", {"params.bogus": 3, "params.lr": 0.5}, "params.bogus"),
    ("nrq-momentum-risk", {"params.record_every": 999_999_999}, "params.record_every"),   # a check across fields
    ("nrq-momentum-risk", {"params.lr_schedule": [{"step": 10, "lr_factor": -1}]}, "params.lr_schedule"),  # inside
])
def test_an_override_error_is_located_at_the_override(sqlite_env, preset, overrides, path):
    client, settings = sqlite_env
    r = client.post(f"/v1/presets/{preset}/run", json={"overrides": overrides})
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["detail"]] == [["body", "overrides", path]], r.json()
    assert counts(settings.db_url) == (0, 0)


@pytest.mark.parametrize("preset, seeds, msg", [
    ("toy2d-chaos", [0], "seeds: expected at least 2 seeds for preset toy2d-chaos (its checks' standard errors are "
                         "over seeds), got 1"),
    (PRESET, [3, 1, 3], "seeds: expected distinct seeds, got 3 more than once"),
])
def test_seeds_its_checks_cannot_use_are_422_and_store_nothing(sqlite_env, preset, seeds, msg):
    client, settings = sqlite_env
    shown = client.get(f"/v1/presets/{preset}").json()   # the rule, before a run
    assert (shown["min_seeds"], shown["max_seeds"]) == (smdengine.PRESETS[preset].min_seeds, None)
    r = client.post(f"/v1/presets/{preset}/run", json={"seeds": seeds, "overrides": TINY})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == [{"loc": ["body", "seeds"], "msg": msg, "type": "value_error"}]
    assert counts(settings.db_url) == (0, 0)
    assert not list(settings.broker_folder.glob("*.msg"))


def test_over_quota_is_429_and_stores_nothing(tmp_path):
    settings = make_settings(tmp_path, max_work=1_000_000)   # quick: 24 runs of 250 trials × 20 000 steps × 10
    with TestClient(create_app(settings)) as client:
        r = client.post(f"/v1/presets/{PRESET}/run", json={"size": "quick"})
        assert r.status_code == 429 and "Retry-After" not in r.headers, r.text   # no wait makes it smaller
        assert r.headers["SMD-Quota"] == "work" and "work is limited to 1,000,000 " in r.json()["detail"]
        assert counts(settings.db_url) == (0, 0)
    settings = make_settings(tmp_path / "b", max_active_jobs=5)
    with TestClient(create_app(settings)) as client:
        r = client.post(f"/v1/presets/{PRESET}/run", json={"overrides": TINY, "seeds": [0, 1]})
        assert r.status_code == 429 and "at most 5 queued + running jobs" in r.json()["detail"], r.text
        assert counts(settings.db_url) == (0, 0)


def test_a_preset_run_checks_pending_then_evaluated_once_and_its_figure(sqlite_env, monkeypatch):
    client, settings = sqlite_env
    settings = settings.model_copy(update={"fuse_max": 1})   # one child per claim: the checks wait for the last
    r = client.post(f"/v1/presets/{PRESET}/run", json={"overrides": TINY, "seeds": [0, 1], "visibility": "lab"})
    assert r.status_code == 202, r.text
    study = r.json()
    assert r.headers["location"] == f"/v1/studies/{study['id']}"
    assert study["preset"] == PRESET and study["preset_size"] == "quick" and study["visibility"] == "lab"
    assert study["children_count"] == 6 and study["points"] == 3
    expected = smdengine.preset_study(PRESET, "quick", seeds=[0, 1], overrides=TINY)
    assert study["spec"]["base"] == expected["base"] and study["spec"]["seeds"] == [0, 1]
    claims = [c.claim for c in smdengine.PRESETS[PRESET].checks]
    assert [c["claim"] for c in study["checks"]] == claims and {c["verdict"] for c in study["checks"]} == {"pending"}

    calls = []
    real = study_routes.evaluate_checks

    def spy(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(study_routes, "evaluate_checks", spy)
    assert execute_next(settings, ["cpu"]) == "succeeded"
    running = client.get(f"/v1/studies/{study['id']}").json()
    assert running["status"] == "running" and {c["verdict"] for c in running["checks"]} == {"pending"}
    assert client.get(f"/v1/studies/{study['id']}/plots/figure.png").status_code == 200   # pending verdicts drawn
    assert calls == [] and _stored(settings) is None

    run_all(settings)
    done = client.get(f"/v1/studies/{study['id']}")
    body = done.json()
    assert body["status"] == "succeeded" and calls == [PRESET]
    checks = body["checks"]
    assert [c["id"] for c in checks] == [c.id for c in smdengine.PRESETS[PRESET].checks]
    for check in checks:
        assert check["verdict"] in VERDICTS, check
        assert isinstance(check["predicted"], float) and isinstance(check["measured"], float), check
        assert check["tolerance"] > 0 and check["tolerance_rule"], check
    assert _stored(settings) == checks
    # the same numbers as the engine computes from the same runs, independently of the service
    assert client.get(f"/v1/studies/{study['id']}", headers={"If-None-Match": done.headers["etag"]}).status_code == 304

    # stored: later reads serve it as stored, never evaluate again (even if the engine would now say otherwise)
    monkeypatch.setattr(study_routes, "evaluate_checks", lambda *a, **k: pytest.fail("evaluated twice"))
    assert client.get(f"/v1/studies/{study['id']}").json()["checks"] == checks
    table = client.get(f"/v1/studies/{study['id']}/table").json()
    assert table["checks"] == checks and len(table["rows"]) == 6
    assert client.get("/v1/studies").json()["items"][0]["checks"] is None   # as children: null in lists

    png = client.get(f"/v1/studies/{study['id']}/plots/figure.png")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png" and png.content.startswith(PNG)
    assert len(png.content) > 30_000
    svg = client.get(f"/v1/studies/{study['id']}/plots/figure.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    for check in checks:   # every verdict is printed under the panels
        assert check["verdict"].upper().replace("_", " ") in svg.text
    if os.environ.get("SMD_KEEP_PLOTS"):   # to look at it: SMD_KEEP_PLOTS=/some/dir pytest ...
        with open(os.path.join(os.environ["SMD_KEEP_PLOTS"], "figure.png"), "wb") as out:
            out.write(png.content)
    assert calls == [PRESET]


def test_checks_of_an_engine_error_are_not_stored(sqlite_env, monkeypatch):
    client, settings = sqlite_env
    study = client.post(f"/v1/presets/{PRESET}/run", json={"overrides": {**TINY, "params.steps": 200},
                                                          "seeds": [0]}).json()
    run_all(settings)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(study_routes, "evaluate_checks", broken)
    body = client.get(f"/v1/studies/{study['id']}").json()
    assert {c["verdict"] for c in body["checks"]} == {"error"} and "boom" in body["checks"][0]["note"]
    assert _stored(settings) is None
    monkeypatch.undo()
    again = client.get(f"/v1/studies/{study['id']}").json()["checks"]
    assert {c["verdict"] for c in again} <= VERDICTS and _stored(settings) == again


def test_a_study_not_from_a_preset_has_no_checks_nor_figure(sqlite_env):
    client, _ = sqlite_env
    study = submit(client, study_spec(seeds=[1], grid={"params.lr": [0.1]}))
    assert study["preset"] is None and study["checks"] is None
    r = client.get(f"/v1/studies/{study['id']}/plots/figure.png")
    assert r.status_code == 404 and "not made from a preset" in r.json()["detail"]
    assert client.get(f"/v1/studies/{study['id']}/table").json()["checks"] is None


def _stored(settings) -> list | None:
    with session_scope(settings.db_url) as s:
        return s.scalars(select(Study.checks)).one()
