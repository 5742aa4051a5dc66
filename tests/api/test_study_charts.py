"""A study's charts as data (/v1/studies/{id}/charts…), in process on SQLite with the real engine and
runner: the options follow the study's progress, and the overlay, scatter and heatmap carry the same
measured values and theory as the table and the PNGs."""
from __future__ import annotations

import math

import pytest

from tests.api.test_studies import run_all, sqlite_env, study_spec, submit  # noqa: F401 — the fixture
from worker.runner import execute_next


def test_options_before_and_after_the_children_run(sqlite_env):  # noqa: F811
    client, settings = sqlite_env
    study = submit(client, study_spec())
    base = f"/v1/studies/{study['id']}/charts"
    before = client.get(base).json()
    # nothing started: no series, no summaries; the axes are known and both vary
    assert before["series_metrics"] == [] and before["summary_metrics"] == []
    assert before["varying"] == ["params.lr", "params.weight_decay"]
    assert client.get(f"{base}/overlay", params={"metric": "risk"}).status_code == 422
    execute_next(settings, ["cpu"])   # one child done: series and summaries of its kind
    after = client.get(base).json()
    assert "risk" in after["series_metrics"] and "au_rms" in after["series_metrics"]
    assert "risk" in after["summary_metrics"] and "risk_stationary" not in after["summary_metrics"]
    assert after["theory"]["risk"] == "risk_stationary"
    assert {"params.lr", "params.weight_decay", "intrinsic_lr"} <= set(after["axes"])
    assert after["overlay_x"] == ["step", "lr_time", "tau", "intrinsic_time"]


def test_overlay_scatter_and_heatmap_carry_the_table_and_theory(sqlite_env):  # noqa: F811
    client, settings = sqlite_env
    study = submit(client, study_spec())
    run_all(settings)
    sid = study["id"]
    base = f"/v1/studies/{sid}/charts"
    table = client.get(f"/v1/studies/{sid}/table", params={"group": "point"}).json()["rows"]

    overlay = client.get(f"{base}/overlay", params={"metric": "risk", "x": "intrinsic_time"}).json()
    assert overlay["theory"] == "risk_stationary" and len(overlay["lines"]) == 8
    line = overlay["lines"][0]
    assert {line["seed"] for line in overlay["lines"]} == {1, 2}
    assert len(line["x"]) == len(line["y"]) == len(line["theory"]) == 11   # 10 records and the end
    assert line["x"][1] == pytest.approx(20 * line["values"]["params.lr"] * line["values"]["params.weight_decay"])

    scatter = client.get(f"{base}/scatter", params={"metric": "risk", "x": "params.lr",
                                                    "by": "params.weight_decay"}).json()
    assert scatter["theory"] == "risk_stationary" and len(scatter["points"]) == 4
    for point in scatter["points"]:
        row = next(r for r in table if r["point"] == point["point"])
        assert point["mean"] == pytest.approx(row["risk"]) and point["se"] == pytest.approx(row["risk_se"])
        assert point["theory"] == pytest.approx(row["risk_stationary"]) and point["n"] == 2
    # one theory curve per weight decay, each through its points' theory values (the curve's ends are the
    # two learning rates: the grid spans min..max)
    assert sorted(c["by"] for c in scatter["curves"]) == [0.01, 0.02]
    for curve in scatter["curves"]:
        ends = [p for p in scatter["points"] if p["values"]["params.weight_decay"] == curve["by"]]
        low, high = sorted(ends, key=lambda p: p["x"])
        assert curve["x"][0] == pytest.approx(low["x"]) and curve["x"][-1] == pytest.approx(high["x"])
        assert curve["y"][0] == pytest.approx(low["theory"], rel=1e-9)
        assert curve["y"][-1] == pytest.approx(high["theory"], rel=1e-9)

    heat = client.get(f"{base}/heatmap", params={"metric": "risk", "x": "params.lr",
                                                 "y": "params.weight_decay"}).json()
    assert heat["xs"] == [0.05, 0.1] and heat["ys"] == [0.01, 0.02] and heat["iso"] is True
    assert heat["averaged_over"] == {}   # each cell one setting (its seeds' mean)
    for j, wd in enumerate(heat["ys"]):
        for i, lr in enumerate(heat["xs"]):
            row = next(r for r in table if r["params.lr"] == lr and r["params.weight_decay"] == wd)
            assert heat["z"][j][i] == pytest.approx(row["risk"])
            assert heat["se"][j][i] == pytest.approx(row["risk_se"])
            assert heat["theory_z"][j][i] == pytest.approx(row["risk_stationary"])
            assert math.isfinite(heat["z"][j][i])


def test_chart_arguments_that_do_not_apply_are_422_naming_the_field(sqlite_env):  # noqa: F811
    client, settings = sqlite_env
    study = submit(client, study_spec(seeds=[1]))
    run_all(settings)
    base = f"/v1/studies/{study['id']}/charts"

    def refused(path, **params):
        r = client.get(f"{base}/{path}", params=params)
        assert r.status_code == 422, r.text
        (error,) = r.json()["detail"]
        return error["loc"], error["msg"]

    loc, msg = refused("overlay", metric="risk_stationary")
    assert loc == ["query", "metric"] and "available: risk" in msg
    loc, _ = refused("overlay", metric="risk", x="banana")
    assert loc == ["query", "x"]
    for by in ("params.lr", "intrinsic_lr"):   # x itself (curves that repeat), a derived value (no child's own)
        r = client.get(f"{base}/scatter", params={"metric": "risk", "x": "params.lr", "by": by})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "by"], r.text
        assert r.json()["detail"][0]["msg"] == ("expected an axis of the study other than x (params.weight_decay), "
                                                f"got {by!r}")
    loc, _ = refused("scatter", metric="risk", x="params.lr", by="params.momentum")
    assert loc == ["query", "by"]
    loc, msg = refused("heatmap", metric="risk", x="params.lr", y="params.lr")
    assert loc == ["query", "y"] and "another axis" in msg
    assert client.get("/v1/studies/nope/charts").status_code == 404


def test_a_plan_counts_runs_and_work_and_stores_nothing(sqlite_env):  # noqa: F811
    from tests.api.test_studies import counts

    client, settings = sqlite_env
    r = client.post("/v1/study-plans", json=study_spec())
    assert r.status_code == 200, r.text
    plan = r.json()
    # 2 × 2 grid × seeds [1, 2]; each child 16 trials × 200 steps × dim 10
    assert (plan["runs"], plan["points"], plan["seeds"]) == (8, 4, 2)
    assert plan["work"] == 8 * 16 * 200 * 10 and plan["max_work"] == settings.max_work
    assert counts(settings.db_url) == (0, 0)
    bad = client.post("/v1/study-plans", json=study_spec(grid={"params.lrr": [0.1]}))
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "axis", "params.lrr"]


def test_scatter_curves_hold_every_other_axis_fixed(sqlite_env):  # noqa: F811
    """Three axes: a theory curve along the learning rate serves one (weight decay, momentum), whether or not
    the page colours by one of them, and passes through the theory of exactly the points it serves; two
    combinations share a curve where their ηλ/(1−α) agree. Along ηλ the rates move with x, and only the
    momentum and the weight decay name a curve, and the curves of a theory of ηλ/(1−α) agree across λ."""
    client, settings = sqlite_env
    study = submit(client, study_spec(seeds=[1], grid={"params.lr": [0.05, 0.1], "params.weight_decay": [0.01, 0.02],
                                                       "params.momentum": [0.0, 0.5]}))
    run_all(settings)
    base = f"/v1/studies/{study['id']}/charts/scatter"
    fixed = ("params.weight_decay", "params.momentum")

    def served(chart, curve):
        return sorted((p for p in chart["points"] if p["point"] in curve["points"]), key=lambda p: p["x"])

    for by in (None, "params.weight_decay"):
        scatter = client.get(base, params={"metric": "risk", "x": "params.lr", **({"by": by} if by else {})}).json()
        curves = scatter["curves"]
        assert sorted(p for c in curves for p in c["points"]) == list(range(8))   # each point on one curve
        combos = sorted(sorted({tuple(p["values"][a] for a in fixed) for p in served(scatter, c)}) for c in curves)
        # λ = 0.02, α = 0 and λ = 0.01, α = 0.5: the same ηλ/(1−α) at every η, one curve
        assert combos == [[(0.01, 0.0)], [(0.01, 0.5), (0.02, 0.0)], [(0.02, 0.5)]]
        labels = sorted(c["label"] for c in curves)
        assert labels == ["weight_decay=0.01, momentum=0", "weight_decay=0.01, momentum=0.5 / weight_decay=0.02, "
                          "momentum=0", "weight_decay=0.02, momentum=0.5"]
        for curve in curves:
            own = served(scatter, curve)
            assert curve["values"] == ({} if len(own) == 4 else dict(zip(fixed, next(
                tuple(p["values"][a] for a in fixed) for p in own), strict=True)))
            assert curve["by"] == (curve["values"].get("params.weight_decay") if by else None)
            for p in (own[0], own[-1]):   # the curve's ends are the two learning rates
                k = 0 if p["x"] == own[0]["x"] else -1
                assert curve["y"][k] == pytest.approx(p["theory"], rel=1e-9)
        shared = next(c for c in curves if len(c["points"]) == 4)
        assert shared["values"] == {} and shared["by"] is None

    # a heatmap over two of the three axes says each cell averages the third's settings
    heat = f"/v1/studies/{study['id']}/charts/heatmap"
    assert client.get(heat, params={"metric": "risk", "x": "params.lr", "y": "params.weight_decay"}).json()[
        "averaged_over"] == {"params.momentum": [0.0, 0.5]}
    assert client.get(heat, params={"metric": "risk", "x": "intrinsic_lr", "y": "params.momentum"}).json()[
        "averaged_over"] == {"params.lr": [0.05, 0.1], "params.weight_decay": [0.01, 0.02]}   # ηλ 0.001 twice
    png = client.get(f"/v1/studies/{study['id']}/plots/heatmap.png",
                     params={"metric": "risk", "x": "params.lr", "y": "params.weight_decay"})
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")

    along = client.get(base, params={"metric": "risk", "x": "intrinsic_lr", "by": "params.weight_decay"}).json()
    assert sorted(c["values"]["params.momentum"] for c in along["curves"]) == [0.0, 0.5]
    for curve in along["curves"]:   # one per momentum, through the theory of every point of it
        assert curve["values"].keys() == {"params.momentum"} and curve["by"] is None   # λ differs along it
        assert curve["label"] == f"momentum={curve['values']['params.momentum']:.4g}"
        own = served(along, curve)
        assert len(own) == 4 and {p["values"]["params.momentum"] for p in own} == {curve["values"]["params.momentum"]}
        for p in own:
            k = min(range(len(curve["x"])), key=lambda i: abs(curve["x"][i] - p["x"]))
            if curve["x"][k] == pytest.approx(p["x"], rel=1e-9):   # the ends and any sample on a point
                assert curve["y"][k] == pytest.approx(p["theory"], rel=1e-9)
        assert curve["y"][0] == pytest.approx(own[0]["theory"], rel=1e-9)
        assert curve["y"][-1] == pytest.approx(own[-1]["theory"], rel=1e-9)
