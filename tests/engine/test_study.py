"""Studies in the engine: expansion, errors, derived axes, the table, overlay time axes, theory curves,
and the science a study exists for (stationary risk over an lr × weight_decay grid, Corollary 3)."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy import integrate

import smdengine
from smdengine import ChildRecord, StudyError, expand_study, group_by_point, study_table, time_axis
from smdengine.nrq import theory
from smdengine.sde.normalized_linear import time_change

BASE = {"kind": "nrq", "seed": 0, "params": {"dim": 10, "trials": 50, "steps": 400, "record_every": 50}}


def test_expansion_order_is_grid_row_major_then_zip_then_seeds():
    children = expand_study({"base": BASE, "grid": {"params.lr": [0.1, 0.2], "params.weight_decay": [0.01, 0.02, 0.04]},
                             "zip": {"params.init_std": [1.0, 2.0], "params.momentum": [0.0, 0.5]}, "seeds": [7, 8]})
    assert len(children) == 2 * 3 * 2 * 2
    assert [c.index for c in children] == list(range(24))
    assert [c.point for c in children] == [i // 2 for i in range(24)]
    assert [c.seed for c in children[:4]] == [7, 8, 7, 8]
    assert [c.spec.seed for c in children[:4]] == [7, 8, 7, 8]
    first_axis = [c.values["params.lr"] for c in children[::2]]
    assert first_axis == [0.1] * 6 + [0.2] * 6   # the first axis written varies slowest
    assert [c.values["params.weight_decay"] for c in children[:8:2]] == [0.01, 0.01, 0.02, 0.02]
    assert [(c.values["params.init_std"], c.values["params.momentum"]) for c in children[:4:2]] == [(1.0, 0.0), (2.0, 0.5)]
    for c in children:   # every value landed in the child's validated spec
        assert c.spec.params.lr == c.values["params.lr"]
        assert c.spec.params.momentum == c.values["params.momentum"]
        assert c.spec.params.trials == 50


def test_spans_points_and_list_paths():
    children = expand_study({"base": BASE, "grid": {"params.weight_decay": {"logspace": [0.0025, 0.04], "num": 5},
                                                    "params.lr": {"linspace": [0.1, 0.3], "num": 3}}})
    wds = sorted({c.values["params.weight_decay"] for c in children})
    assert wds == [0.0025, 0.005, 0.01, 0.02, 0.04]   # a geometric progression, rounded to 12 digits
    assert sorted({c.values["params.lr"] for c in children}) == [0.1, 0.2, 0.3]
    base = {**BASE, "params": {**BASE["params"], "lr_schedule": [{"step": 200, "lr_factor": 0.5}]}}
    children = expand_study({"base": base, "points": [{"params.lr_schedule.0.lr_factor": 0.1},
                                                      {"params.lr_schedule.0.rescale": True, "params.lr": 0.2}]})
    assert children[0].spec.params.lr_schedule[0].lr_factor == 0.1
    assert children[1].spec.params.lr_schedule[0].rescale and children[1].spec.params.lr == 0.2
    assert len(expand_study({"base": BASE, "seeds": [1, 2, 3]})) == 3   # seeds alone repeat the base


def _errors(study, **kwargs):
    with pytest.raises(StudyError) as info:
        expand_study(study, **kwargs)
    return info.value.errors


def test_errors_name_the_axis_the_point_the_field_and_the_reason():
    [unknown] = _errors({"base": BASE, "grid": {"params.lrr": [0.1]}})
    assert unknown["loc"] == ["axis", "params.lrr"] and "params.lr" in unknown["msg"]
    assert unknown["msg"].endswith("nearest valid paths: params.lr")   # not params and params.dim besides
    # an entry the base's list lacks is said so (it was "not a field of the base spec")
    [entry] = _errors({"base": BASE, "grid": {"params.lr_schedule.0.lr_factor": [0.1]}})
    assert "the base spec's params.lr_schedule has no entry 0 (it is empty)" in entry["msg"], entry
    [bad] = _errors({"base": BASE, "grid": {"params.lr": [0.1, 5000.0]}})
    assert bad["loc"] == ["point", 1, "params", "lr"]
    assert bad["point"] == {"index": 1, "values": {"params.lr": 5000.0}}
    assert "less than or equal to 1000" in bad["msg"]
    [index] = _errors({"base": BASE, "points": [{"params.lr_schedule.0.lr_factor": 0.1}]})
    assert index["loc"] == ["axis", "params.lr_schedule.0.lr_factor"]   # the base has no schedule entry
    [many] = _errors({"base": BASE, "grid": {"params.lr": [0.1, 0.2, 0.3]}, "seeds": [0, 1]}, max_children=5)
    assert many["type"] == "too_many_points" and "got 6" in many["msg"]
    with pytest.raises(ValueError, match="equal lengths"):
        expand_study({"base": BASE, "zip": {"params.lr": [0.1, 0.2], "params.weight_decay": [0.01]}})
    with pytest.raises(ValueError, match="seeds: expected distinct seeds, got 1 more than once"):
        expand_study({"base": BASE, "grid": {"params.lr": [0.1, 0.2]}, "seeds": [1, 2, 1]})
    with pytest.raises(ValueError, match="either points or grid"):
        expand_study({"base": BASE, "grid": {"params.lr": [0.1]}, "points": [{"params.lr": 0.2}]})
    [base] = _errors({"base": {"kind": "nrq", "params": {"dim": 1}}})
    assert base["loc"] == ["base", "params", "dim"]
    # as the base wrote it, without the unions' tags (it read base.sde.params.normalized_linear.lr)
    [model] = _errors({"base": {"kind": "sde", "params": {"model": "normalized_linear", "lr": -1}}})
    assert model["loc"] == ["base", "params", "lr"]


def test_distinct_curves_keep_each_different_curve_once():
    """Each distinct curve once, with every candidate it stands for."""
    xs = [1.0, 2.0, 3.0]
    a, b = [1.0, None, 3.0], [2.0, None, 6.0]
    assert smdengine.distinct_curves([("wd=1", xs, a), ("wd=2", xs, [v * (1 + 1e-13) if v else v for v in a])]) \
        == [(["wd=1", "wd=2"], xs, a)]
    assert smdengine.distinct_curves([("wd=1", xs, a), ("wd=2", xs, b), ("wd=3", xs, b)]) \
        == [(["wd=1"], xs, a), (["wd=2", "wd=3"], xs, b)]
    assert smdengine.distinct_curves([("wd=1", xs, a), ("wd=2", xs, [1.0, 2.0, 3.0])]) \
        == [(["wd=1"], xs, a), (["wd=2"], xs, [1.0, 2.0, 3.0])]   # a gap is no value


def test_theory_curves_merge_before_they_cap():
    """Along ηλ the NRQ's risk reads ηλ alone: thirteen values of λ (one more than MAX_CURVES) are one curve
    serving all thirteen (they were no curve: the candidates were capped before they merged), equal to a curve
    computed alone; thirteen different curves are none, and candidates beyond MAX_CANDIDATES are not probed."""
    grid = smdengine.curve_grid(1e-4, 1e-2)

    def moved(path_value):
        path, value = path_value
        return {**BASE, "params": {**BASE["params"], path: value}}

    n = smdengine.MAX_CURVES + 1
    by_wd = [(f"wd={k}", moved(("weight_decay", 0.001 * (k + 1)))) for k in range(n)]
    [(keys, xs, ys)] = smdengine.theory_curves(by_wd, "intrinsic_lr", "risk", grid)
    assert keys == [key for key, _ in by_wd] and xs == grid
    assert ys == smdengine.theory_curve(by_wd[0][1], "intrinsic_lr", "risk", grid)   # the first's curve, exactly
    assert ys == pytest.approx(smdengine.theory_curve(by_wd[-1][1], "intrinsic_lr", "risk", grid), rel=1e-12)
    by_noise = [(f"noise={k}", moved(("noise_std", 1.0 + k))) for k in range(n)]
    coarse = grid[::6]   # enough to tell the curves apart, a tenth of the cost
    assert smdengine.theory_curves(by_noise, "intrinsic_lr", "risk", coarse) == []
    assert len(smdengine.theory_curves(by_noise[:-1], "intrinsic_lr", "risk", coarse)) == n - 1
    assert smdengine.theory_curves(by_wd[:1] * (smdengine._compare.MAX_CANDIDATES + 1), "intrinsic_lr", "risk",
                                   grid) == []
    assert smdengine.theory_curves(by_wd, "intrinsic_lr", "step", grid) == []   # no theory of that metric


def test_theory_curves_tell_apart_curves_whose_gaps_begin_between_probes():
    """The sde NRQ's risk has no theory past ηλ·dt = 0.1: along ηλ, dt = 1 and dt = 0.5 give the same values up
    to their own bounds, which fall between the same two probes (indices 47 and 53 of 60). They were one curve,
    drawn from dt = 1's values, and dt = 0.5's points between ηλ = 0.1 and 0.2 lost their theory."""
    base = {"kind": "sde", "params": {"model": "nrq", "dim": 10, "trials": 8, "steps": 100, "record_every": 10}}
    specs = [(f"dt={dt}", {**base, "params": {**base["params"], "dt": dt}}) for dt in (1.0, 0.5, 1.0)]
    grid = smdengine.curve_grid(1e-3, 0.365)
    alone = [smdengine.theory_curve(spec, "intrinsic_lr", "risk", grid) for _, spec in specs[:2]]
    assert [ys.index(None) for ys in alone] == [47, 53]   # the case: both bounds between the probes at 45 and 54
    curves = smdengine.theory_curves(specs, "intrinsic_lr", "risk", grid)
    assert [(keys, ys) for keys, _, ys in curves] == [(["dt=1.0", "dt=1.0"], alone[0]), (["dt=0.5"], alone[1])]


def test_a_theory_curve_along_a_whole_number_field_has_a_value_at_every_x():
    """Along params.steps the grid's values between a study's steps (3457.6…) are whole numbers, each once: the
    field refused them, and the curve had values at its two ends only, so it drew nothing. Its values are the
    spec's own theory at each whole number; a float field keeps its grid (lr written 1 is still a float)."""
    grid = smdengine.curve_grid(3000, 30000)
    [(_, xs, ys)] = smdengine.theory_curves([("all", BASE)], "params.steps", "risk", grid)
    assert xs == list(dict.fromkeys(round(x) for x in grid)) and all(isinstance(x, int) for x in xs)
    assert None not in ys and len(xs) == smdengine.CURVE_POINTS
    assert ys == [smdengine.theory_curve(BASE, "params.steps", "risk", [x])[0] for x in xs]
    written_as_int = {**BASE, "params": {**BASE["params"], "lr": 1}}
    [(_, xs, _)] = smdengine.theory_curves([("all", written_as_int)], "params.lr", "risk", [1, 1.5, 2])
    assert xs == [1, 1.5, 2]


def test_an_axis_may_replace_what_the_base_left_to_its_defaults():
    """A spectrum swept over an nrq base that gave none: the parsed base held the two-level default (eig_low,
    eig_high filled in by its validator), and every child was refused for giving both."""
    children = expand_study({"base": {"kind": "nrq", "params": {"dim": 3}},
                             "points": [{"params.eigenvalues": [1.0, 1.5, 2.0]}, {"params.eigenvalues": [1.0, 2.0, 4.0]}]})
    assert [c.spec.params.eigenvalues for c in children] == [[1.0, 1.5, 2.0], [1.0, 2.0, 4.0]]
    assert all(c.spec.params.eig_low is None for c in children)
    plain = expand_study({"base": {"kind": "nrq", "params": {"dim": 3}}, "grid": {"params.lr": [0.1, 0.2]}})
    assert [(c.spec.params.eig_low, c.spec.params.eig_high) for c in plain] == [(1.0, 2.0)] * 2   # defaults as before
    # the other half of the default stays for an axis over one level (a base as given lacked it: "both or neither")
    high = expand_study({"base": {"kind": "nrq", "params": {"dim": 3}}, "grid": {"params.eig_high": [3.0]}})
    assert (high[0].spec.params.eig_low, high[0].spec.params.eig_high) == (1.0, 3.0)
    with pytest.raises(StudyError, match="got both"):   # another spectrum the base gave conflicts, as before
        expand_study({"base": {"kind": "nrq", "params": {"dim": 3, "eig_low": 1.0, "eig_high": 3.0}},
                      "points": [{"params.eigenvalues": [1.0, 1.5, 2.0]}]})
    # the default spectrum spelled out, as in a stored spec ("sweep from here" on an experiment), is replaced
    stored = smdengine.parse_spec({"kind": "nrq", "params": {"dim": 3}}).model_dump(mode="json")
    assert (stored["params"]["eig_low"], stored["params"]["eig_high"]) == (1.0, 2.0)
    swept = expand_study({"base": stored, "points": [{"params.eigenvalues": [1.0, 1.5, 2.0]}]})
    assert swept[0].spec.params.eigenvalues == [1.0, 1.5, 2.0] and swept[0].spec.params.eig_low is None
    # a path into a default sub-object keeps the rest of it (its union tag: the dataset's name)
    split = expand_study({"base": {"kind": "train", "params": {"steps": 10, "record_every": 5}},
                          "grid": {"params.dataset.test_fraction": [0.2]}})
    assert split[0].spec.params.dataset.test_fraction == 0.2


def test_curve_axes_hold_fixed_what_does_not_move_along_x():
    axes = ["params.lr", "params.weight_decay", "params.dim"]
    assert smdengine.curve_axes(axes, "params.lr") == ["params.weight_decay", "params.dim"]
    # along ηλ the curve scales η: λ names a curve (curves that agree are merged: distinct_curves)
    assert smdengine.curve_axes(axes, "intrinsic_lr") == ["params.weight_decay", "params.dim"]


def test_derived_values_use_the_final_phase():
    spec = smdengine.parse_spec({**BASE, "params": {**BASE["params"], "lr": 0.2, "weight_decay": 0.01, "momentum": 0.5,
                                                    "lr_schedule": [{"step": 100, "lr_factor": 0.1,
                                                                     "weight_decay_factor": 2.0}]}})
    derived = smdengine.derived_values(spec)
    assert derived["intrinsic_lr"] == pytest.approx(0.02 * 0.02, rel=1e-15)
    assert derived["lr_over_wd"] == pytest.approx(0.02 / 0.02, rel=1e-15)
    assert derived["effective_intrinsic_lr"] == pytest.approx(0.02 * 0.02 / 0.5, rel=1e-15)


def _record(index, point, seed, risk, status="succeeded"):
    return ChildRecord(index, point, {"params.lr": 0.1 * (point + 1)}, seed, status,
                       {**BASE, "seed": seed, "params": {**BASE["params"], "lr": 0.1 * (point + 1)}},
                       {"risk": risk, "risk_stationary": 0.05}, {"kappa": 3.0, "au_equilibrium": [0.1, 0.1]}, f"e{index}")


def test_table_and_grouping_by_point():
    records = [_record(0, 0, 0, 0.10), _record(1, 0, 1, 0.14), _record(2, 0, 2, 0.09),
               _record(3, 1, 0, 0.20), _record(4, 1, 1, 99.0, status="failed")]
    rows = study_table(records)
    assert [r["experiment_id"] for r in rows] == ["e0", "e1", "e2", "e3", "e4"]
    assert rows[0]["kappa"] == 3.0 and "au_equilibrium" not in rows[0]   # scalar theory only
    assert rows[0]["intrinsic_lr"] == pytest.approx(0.1 * 0.01)
    grouped = group_by_point(rows, ["params.lr"])
    assert [g["n"] for g in grouped] == [3, 1] and grouped[1]["children"] == 2
    values = [0.10, 0.14, 0.09]
    assert grouped[0]["risk"] == pytest.approx(statistics.fmean(values), rel=1e-15)
    assert grouped[0]["risk_se"] == pytest.approx(statistics.stdev(values) / math.sqrt(3), rel=1e-12)
    assert grouped[1]["risk"] == 0.20 and grouped[1]["risk_se"] is None   # the failed child is left out


def test_time_axes():
    steps = [0, 50, 100, 150, 200, 350]
    spec = {**BASE, "params": {**BASE["params"], "lr": 0.2, "weight_decay": 0.01,
                               "lr_schedule": [{"step": 120, "lr_factor": 0.5, "weight_decay_factor": 2.0}]}}
    lr_time = time_axis(spec, steps, "lr_time")
    per_update = [0.2 if n < 120 else 0.1 for n in range(400)]
    assert lr_time == pytest.approx([sum(per_update[:s]) for s in steps], rel=1e-12)
    intrinsic = time_axis(spec, steps, "intrinsic_time")
    assert intrinsic == pytest.approx([sum(0.2 * 0.01 if n < 120 else 0.1 * 0.02 for n in range(s)) for s in steps],
                                      rel=1e-12)
    constant = {**BASE, "params": {**BASE["params"], "lr": 0.2, "weight_decay": 0.01}}
    assert time_axis(constant, steps, "tau") == pytest.approx(
        time_change(np.asarray(steps, dtype=float), 0.2, 0.01).tolist(), rel=1e-14)
    with pytest.raises(ValueError, match="constant rates"):
        time_axis(spec, steps, "tau")
    with pytest.raises(ValueError, match="x: expected one of"):
        time_axis(spec, steps, "ηt")


def test_theory_curve_follows_the_stationary_risk():
    spec = {**BASE, "params": {**BASE["params"], "lr": 0.1, "weight_decay": 0.01}}
    xs = [1e-4, 1e-3, 4e-3]
    curve = smdengine.theory_curve(spec, "intrinsic_lr", "risk", xs)
    # reached by scaling lr at λ = 0.01: κ from the formula, r* by the engine's quadrature
    expected = [theory.risk_stationary(theory.kappa(1.0, 2.0, 10, 1.0, x / 0.01, 0.01), 10) for x in xs]
    assert curve == pytest.approx(expected, rel=1e-12)
    by_path = smdengine.theory_curve(spec, "params.weight_decay", "au_rms", [0.01, 0.04])
    assert by_path == pytest.approx([math.sqrt(2 * 0.1 * 0.01), math.sqrt(2 * 0.1 * 0.04)], rel=1e-12)
    assert smdengine.theory_curve(spec, "intrinsic_lr", "loss", xs) is None   # no theory of the loss


P = 10


def _equilibrium_points():
    """A 4×4 lr × weight_decay grid, each point started at its equilibrium norm: E|X₀|² = p·s² = M*."""
    return [{"params.lr": lr, "params.weight_decay": wd,
             "params.init_std": math.sqrt(theory.norm_sq_equilibrium(P, 1.0, lr, wd) / P)}
            for lr in (0.05, 0.1, 0.2, 0.4) for wd in (0.0025, 0.005, 0.01, 0.02)]


def risk_sd(kappa_value: float) -> float:
    """Standard deviation of 1 − f under the stationary law ρ*(f) ∝ e^{2κf} f^{−1/2} (1−f)^{(p−3)/2}."""
    def density(f):
        return math.exp(2 * kappa_value * (f - 1)) * f ** -0.5 * (1 - f) ** ((P - 3) / 2)
    moments = [integrate.quad(lambda f, k=k: (1 - f) ** k * density(f), 0, 1, limit=200)[0] for k in range(3)]
    return math.sqrt(moments[2] / moments[0] - (moments[1] / moments[0]) ** 2)


STUDY_ACCEPTANCE = {"name": "risk over lr × weight_decay", "base": {"kind": "nrq", "seed": 0, "params": {
    "dim": P, "eig_low": 1.0, "eig_high": 2.0, "noise_std": 1.0, "trials": 500, "steps": 8000}},
    "points": _equilibrium_points()}


def risk_tolerance(row) -> float:
    """3 standard errors of the tail risk. The tail risk is a time average of the trial mean of 1 − f;
    the variance of an average of (correlated) terms is at most the largest term's, so sd(1 − f)/√trials
    under ρ* bounds its standard error."""
    return 3.0 * risk_sd(row["kappa"]) / math.sqrt(500)


@pytest.mark.slow
def test_stationary_risk_over_an_lr_weight_decay_grid():
    # imported here: torch is not needed at import (test_study_serve imports this module)
    from tests.presetruns import run_children

    # the 16 children differ only in rates and scales: one fused batch (as the service and `smd study run` run
    # them), bit for bit their runs alone (tests/engine/test_fused.py), the per-update overhead paid once
    records, _ = run_children(expand_study(STUDY_ACCEPTANCE), fuse=True)
    rows = study_table(records)
    assert len(rows) == 16
    for row in rows:
        assert abs(row["risk"] - row["risk_stationary"]) <= risk_tolerance(row), row
    diagonals: dict[float, list[dict]] = {}
    for row in rows:
        diagonals.setdefault(round(row["intrinsic_lr"], 15), []).append(row)
    assert sum(len(d) > 1 for d in diagonals.values()) == 5   # ηλ = 1.25e-4·2^(i+j): i+j = 1…5 have ≥ 2 points
    for members in diagonals.values():
        for a in members:   # points of one diagonal agree with each other
            assert abs(a["risk"] - members[0]["risk"]) <= risk_tolerance(a) + risk_tolerance(members[0])


def test_corollary_3_triple_gives_identical_risk():
    k = [1.0, 3.0, 10.0]
    study = {"base": {"kind": "nrq", "seed": 3, "params": {"dim": 10, "trials": 200, "steps": 2000, "record_every": 20,
                                                           "lr": 0.02, "weight_decay": 0.005, "init_std": 0.5}},
             "zip": {"params.init_std": [0.5 * x for x in k], "params.lr": [0.02 * x * x for x in k],
                     "params.weight_decay": [0.005 / (x * x) for x in k]}}
    risks = [np.asarray(smdengine.run(c.spec).to_document()["series"]["risk"]) for c in expand_study(study)]
    assert max(float(np.max(np.abs(r - risks[0]))) for r in risks) <= 1e-8
