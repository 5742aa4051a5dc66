"""Out-of-regime warnings (smdengine.spec_warnings): the conditions of every kind and model, the theory
names they omit from ``predict`` and from a real run, and in-regime specs keeping every theory line
(their documents were also compared, exactly, with those the engine made before the warnings existed,
when the warnings were written: that comparison is tied to one machine's floating point, so it is not
a test)."""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

import smdengine
from smdengine import expand_study, predict, run
from smdengine import spec_warnings as all_warnings
from smdengine._science import CONTINUOUS_TIME_MAX, MAX_RECORDED_POINTS, phase_regime, tail_warnings

ROOT = Path(__file__).resolve().parents[2]
IN_REGIME = {
    "nrq_momentum": {"kind": "nrq", "seed": 4, "params": {"lr": 0.1, "momentum": 0.9, "record_every": 10,
                                                          "steps": 200, "trials": 50, "weight_decay": 0.01}},
    "nrq_schedule": {"kind": "nrq", "seed": 3, "params": {"lr": 0.1, "lr_schedule": [{"lr_factor": 0.1, "step": 100}],
                                                          "record_every": 10, "steps": 200, "trials": 50,
                                                          "weight_decay": 0.01}},
    "sde_norm_map": {"kind": "sde", "seed": 7, "params": {"model": "norm_map", "momentum": 0.5, "record_every": 50,
                                                          "steps": 500, "trials": 3, "unit_grad_sq": {"noise": "uniform"}}},
    "sde_normalized_linear": {"kind": "sde", "seed": 6, "params": {"model": "normalized_linear", "lr": 0.01,
                                                                   "weight_decay": 0.05, "record_every": 20,
                                                                   "record_trials": 5, "steps": 200, "trials": 10}},
    "sde_nrq": {"kind": "sde", "seed": 5, "params": {"model": "nrq", "dt": 0.5, "f_bins": 10, "lr": 0.1,
                                                     "weight_decay": 0.01, "record_every": 10, "steps": 100,
                                                     "trials": 50}},
    "sde_toy2d": {"kind": "sde", "seed": 8, "params": {"model": "toy2d", "record_every": 5, "steps": 50, "trials": 10}},
    "train": {"kind": "train", "seed": 9, "params": {"batch_size": 32, "depth": 1, "eval_every": 10, "record_every": 2,
                                                     "schedule": [{"lr_factor": 0.5, "step": 10}], "steps": 20,
                                                     "width": 16}},
}
NRQ_LINES = ["au_equilibrium", "norm_sq_theory", "risk_stationary", "kappa"]


def nrq(**params):
    return {"kind": "nrq", "seed": 0, "params": {"trials": 20, "steps": 200, "record_every": 10, **params}}


def sde(model, **params):
    return {"kind": "sde", "seed": 0, "params": {"model": model, **params}}


def train(**params):
    return {"kind": "train", "seed": 0, "params": {"width": 16, "depth": 1, "steps": 10, "record_every": 1,
                                                    "eval_every": 5, "batch_size": 32, **params}}


def spec_warnings(spec) -> list[dict]:
    """The spec's warnings but ``unsettled_tail`` (a short run's tail, tested on its own at the end), which the
    regime's and the sparse tail's tests here leave aside: their short specs are about other conditions."""
    return [w for w in all_warnings(spec) if w["code"] != "unsettled_tail"]


def codes(spec) -> list[str]:
    return [w["code"] for w in spec_warnings(spec)]


def omitted(spec) -> set[str]:
    return {name for w in spec_warnings(spec) for name in w["omits"]}


def check_omitted(spec, names) -> smdengine.RunResult:
    """``names`` are the spec's omitted theory names, absent from predict, from a real run's theory and
    from its summary; every other theory name is there. Returns the run's result."""
    assert omitted(spec) == set(names)
    kept = set(predict(spec))
    assert not kept & set(names)
    result = run(spec)
    assert set(result.theory) == kept
    assert not set(result.summary) & set(names)
    return result


# ----------------------------------------------------------------------------- the conditions


@pytest.mark.parametrize(("x", "momentum", "code"), [
    (1e-2, 0.0, None), (CONTINUOUS_TIME_MAX, 0.0, None), (0.11, 0.0, "continuous_time"), (0.99, 0.0, "continuous_time"),
    (1.0, 0.0, "decay_not_positive"), (1.99, 0.0, "decay_not_positive"), (2.0, 0.0, "no_equilibrium"),
    (5.0, 0.0, "no_equilibrium"),
    (1e-2, 0.9, None), (0.011, 0.9, "continuous_time"), (1.89, 0.9, "continuous_time"),
    (1.9, 0.9, "decay_not_positive"), (3.79, 0.9, "decay_not_positive"), (3.8, 0.9, "no_equilibrium"),
])
def test_phase_regime_thresholds(x, momentum, code):
    """λη/(1+α) ≥ 2: no equilibrium; ≥ 1: decay factor not positive; λη/(1−α) > 0.1: continuous time."""
    assert phase_regime(x, 1.0, momentum) == code
    assert phase_regime(x * 10, 0.1, momentum) == code
    assert phase_regime(2 * x, 1.0, momentum, h=0.5) == code   # an Euler–Maruyama step: x = ηλ·dt
    assert phase_regime(x, 0.0, momentum) is None               # no weight decay


def test_the_heavy_ball_recursion_loses_its_equilibrium_where_no_equilibrium_starts():
    """w' = βw − αw₋ (β = 1 + α − λη): the roots of z² − βz + α stay inside the unit circle exactly while
    λη < 2(1 + α), and are real and positive (no reversal) only while β > 0 … for SGD 1 − λη > 0."""
    import numpy as np

    for alpha in (0.0, 0.5, 0.9):
        for x in np.linspace(0.01, 6.0, 300):
            beta = 1 + alpha - x
            radius = max(abs(np.roots([1.0, -beta, alpha])))
            assert (radius < 1 - 1e-9) == (phase_regime(x, 1.0, alpha) != "no_equilibrium") or abs(
                x - 2 * (1 + alpha)) < 0.03


def test_spec_warnings_imports_no_torch_nor_scipy():
    """The API calls it at every submission: neither import (seconds) at its first nrq spec, the tail's
    prediction included."""
    code = ("import sys, smdengine; w = smdengine.spec_warnings({'kind': 'nrq', 'params': {'lr': 10, "
            "'weight_decay': 0.5}}); u = smdengine.spec_warnings({'kind': 'nrq', 'params': {'steps': 300}}); "
            "print(w[0]['code'], u[-1]['code'], 'torch' in sys.modules, 'scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["no_equilibrium", "unsettled_tail", "False", "False"], out.stderr


def test_spec_warnings_rejects_a_bad_spec():
    with pytest.raises(ValidationError):
        spec_warnings({"kind": "nrq", "params": {"lr": -1}})


# ----------------------------------------------------------------------------- in regime: unchanged


@pytest.mark.parametrize("name", sorted(IN_REGIME))
def test_in_regime_specs_keep_every_theory_line(name):
    spec = IN_REGIME[name]
    assert spec_warnings(spec) == [] and all(w["omits"] == [] for w in all_warnings(spec))
    declared = set(smdengine.output_names(spec))
    predicted = predict(spec)
    document = run(spec).to_document()
    assert set(predicted) <= declared and set(document["theory"]) == set(predicted), name
    for value in document["theory"].values():   # present and computed, not NaN placeholders
        assert value is not None and (not isinstance(value, float) or math.isfinite(value))


# Seed 001 Table 1's S5 starts with lr × 32: at the catalog's λ₀ its first phase runs at ηλ = 0.128, past the
# continuous-time regime (that is the schedule's point: a far-off start that still meets the others' equilibrium).
DELIBERATE = {("train-schedules-same-equilibrium", "S5"): ["schedule phase 0 "]}


def test_no_preset_point_is_out_of_regime():
    """The presets' ordinary regimes (ηλ up to ~1e-2) warn about nothing, at either size, but where a point
    leaves the regime on purpose, and then only about the phases it means to."""
    for preset_id in smdengine.PRESETS:
        for size in ("quick", "paper"):
            for child in expand_study(smdengine.preset_study(preset_id, size)):
                expected = DELIBERATE.get((preset_id, child.values.get("name")), [])
                got = spec_warnings(child.spec)
                assert [w["code"] for w in got] == ["continuous_time"] * len(expected), (preset_id, size, child.values)
                assert all(w["message"].startswith(e) for w, e in zip(got, expected, strict=True)), got


# ----------------------------------------------------------------------------- nrq


def test_nrq_issue_example_no_equilibrium():
    """η = 10, λ = 0.5 (ηλ = 5): no line, no equilibrium time in the summary."""
    spec = nrq(lr=10, weight_decay=0.5)
    (warning,) = spec_warnings(spec)
    assert warning["code"] == "no_equilibrium"
    assert "η = 10, λ = 0.5: ηλ = 5" in warning["message"]
    assert warning["omits"] == NRQ_LINES
    result = check_omitted(spec, NRQ_LINES)
    assert result.theory == {}
    assert not [k for k in result.summary if k.startswith("equilibrium_steps")]


def test_nrq_decay_not_positive():
    spec = nrq(lr=3, weight_decay=0.5)   # ηλ = 1.5
    assert codes(spec) == ["decay_not_positive"]
    check_omitted(spec, NRQ_LINES)


def test_nrq_continuous_time_keeps_the_angular_update():
    spec = nrq(lr=2, weight_decay=0.1)   # ηλ = 0.2
    assert codes(spec) == ["continuous_time"]
    result = check_omitted(spec, ["norm_sq_theory", "risk_stationary", "kappa"])
    assert result.theory["au_equilibrium"][0] == pytest.approx(math.sqrt(0.4))
    assert "equilibrium_steps_phase0" in result.summary   # measured against the AU, which still holds


def test_nrq_at_the_threshold_and_below_is_in_regime():
    assert codes(nrq(lr=1, weight_decay=0.1)) == []       # ηλ = 0.1 exactly
    assert codes(nrq(lr=0.1, weight_decay=0.1)) == []     # ηλ = 1e-2, the presets' largest


def test_nrq_momentum():
    """With α the conditions are λη/(1+α) ≥ 2, ≥ 1 and λη/(1−α) > 0.1; the continuous-time lines (the SGD
    closed forms at η/(1−α)) are omitted beyond the last, every line beyond the first two."""
    closed = ["norm_sq_theory", "risk_stationary", "kappa"]
    assert codes(nrq(lr=0.1, weight_decay=0.1, momentum=0.9)) == []              # λη/(1−α) = 0.1
    result = check_omitted(nrq(lr=0.1, weight_decay=0.1, momentum=0.9), [])
    assert {"au_equilibrium", *closed} <= set(result.theory)
    spec = nrq(lr=0.5, weight_decay=0.1, momentum=0.9)                             # 0.5
    assert codes(spec) == ["continuous_time"]
    result = check_omitted(spec, closed)
    assert "au_equilibrium" in result.theory
    assert not [k for k in result.summary if k.startswith("equilibrium_steps_predicted")]
    spec = nrq(lr=19, weight_decay=0.1, momentum=0.9)                              # λη/(1+α) = 1
    assert codes(spec) == ["decay_not_positive"]
    check_omitted(spec, ["au_equilibrium", *closed])
    spec = nrq(lr=38, weight_decay=0.1, momentum=0.9)                              # 2
    assert codes(spec) == ["no_equilibrium"]
    assert "root of the heavy-ball recursion" in spec_warnings(spec)[0]["message"]


def test_nrq_schedule_phase_by_phase():
    """Only the out-of-regime phase is named; the line goes, the in-regime phases keep their summary."""
    schedule = [{"step": 100, "lr_factor": 100}, {"step": 150, "lr_factor": 0.01}]   # phase 1: ηλ = 1
    spec = nrq(lr=0.1, weight_decay=0.1, lr_schedule=schedule)
    (warning,) = spec_warnings(spec)
    assert warning["code"] == "decay_not_positive"
    assert warning["message"].startswith("lr_schedule phase 1 (steps 100–149): η = 10, λ = 0.1: ηλ = 1.")
    result = check_omitted(spec, NRQ_LINES)
    assert "equilibrium_steps_phase0" in result.summary
    assert "equilibrium_steps_phase1" not in result.summary
    assert "equilibrium_steps_predicted_phase2" not in result.summary   # after a phase without equilibrium
    # two phases with two conditions: two warnings, most severe first
    schedule = [{"step": 100, "lr_factor": 20}, {"step": 150, "lr_factor": 2.5}]     # ηλ = 0.2, then 0.5·… = 0.5
    spec = nrq(lr=0.1, weight_decay=0.1, lr_schedule=schedule + [{"step": 180, "lr_factor": 10}],   # then 5
               record_every=5)   # two records in the tail [190, 200): no sparse_tail
    assert codes(spec) == ["no_equilibrium", "continuous_time"]
    assert "phase 1" in spec_warnings(spec)[1]["message"] and "phase 2" in spec_warnings(spec)[1]["message"]
    # weight decay switched off: no equilibrium to leave, no warning
    assert codes(nrq(lr=0.1, weight_decay=0.1, lr_schedule=[{"step": 100, "lr_factor": 1,
                                                              "weight_decay_factor": 0}])) == []


# ----------------------------------------------------------------------------- sde models


def test_sde_nrq_conditions_use_the_euler_maruyama_step():
    """The SDE's closed forms hold for any ηλ; it is the step's decay factor 1 − ηλ·dt that matters."""
    base = {"trials": 20, "steps": 50, "record_every": 10, "f_bins": 10}
    assert codes(sde("nrq", lr=10, weight_decay=0.5, dt=0.01, **base)) == []          # ηλ·dt = 0.05
    spec = sde("nrq", lr=10, weight_decay=0.5, dt=1.0, **base)                           # 5
    assert codes(spec) == ["no_equilibrium"]
    assert "ηλ·dt" not in spec_warnings(spec)[0]["message"]
    result = check_omitted(spec, ["au_equilibrium", "norm_sq_theory", "gamma_theory", "au_theory",
                                  "risk_stationary", "kappa"])
    assert result.distributions["f_histogram"]["density_theory"] is None
    spec = sde("nrq", lr=4, weight_decay=0.1, dt=0.5, **base)                            # ηλ·dt = 0.2
    assert codes(spec) == ["continuous_time"]
    assert "ηλ·dt = 0.2" in spec_warnings(spec)[0]["message"]
    result = check_omitted(spec, ["norm_sq_theory", "gamma_theory", "au_theory", "risk_stationary", "kappa"])
    assert "au_equilibrium" in result.theory
    assert result.distributions["f_histogram"]["density_theory"] is None


def test_normalized_linear():
    base = {"trials": 4, "record_trials": 2, "steps": 40, "record_every": 10}
    assert codes(sde("normalized_linear", lr=1e-2, weight_decay=0.05, **base)) == []
    assert codes(sde("normalized_linear", lr=1, weight_decay=0, **base)) == []           # λ = 0 (Thm 3.2)
    spec = sde("normalized_linear", lr=4, weight_decay=0.05, **base)                     # ηλ = 0.2
    assert codes(spec) == ["continuous_time"]
    result = check_omitted(spec, ["tau", "norm_scale"])
    assert list(result.theory) == ["lr_time"]
    assert codes(sde("normalized_linear", lr=4, weight_decay=0.05, integrator="sde", dt=0.25, **base)) == []
    spec = sde("normalized_linear", lr=10, weight_decay=0.2, **base)                     # ηλ = 2
    assert codes(spec) == ["no_equilibrium"]
    check_omitted(spec, ["tau", "norm_scale"])


def test_norm_map_is_never_out_of_regime():
    """Its validator's 2λη < 1 is where both maps' fixed points are stable; its theory is the map's own."""
    for lr, wd, alpha in ((0.1, 0.001, 0.0), (0.99, 0.5, 0.0), (0.99, 0.5, 0.9), (9.9, 0.05, 0.5)):
        assert codes(sde("norm_map", lr=lr, weight_decay=wd, momentum=alpha)) == []
    with pytest.raises(ValidationError, match="2λη < 1"):
        spec_warnings(sde("norm_map", lr=1.0, weight_decay=0.5))


def test_norm_map_sgdm_fixed_point_is_stable_wherever_the_validator_admits():
    import numpy as np

    for alpha in np.linspace(0.0, 0.99, 34):
        for x in np.linspace(1e-4, 0.4999, 60):
            beta = 1 + alpha - x
            jac = np.array([[beta**2 - x * (1 - alpha) * (2 - x / (1 + alpha)), -2 * alpha * beta, alpha**2],
                            [beta, -alpha, 0.0], [1.0, 0.0, 0.0]])
            assert max(abs(np.linalg.eigvals(jac))) < 1.0, (alpha, x)


def test_toy2d():
    base = {"trials": 4, "steps": 20, "record_every": 5}
    assert codes(sde("toy2d", **base)) == []                                            # η = 0.1, λ = 0.5
    spec = sde("toy2d", lr=10, weight_decay=0.5, **base)                                # ηλ = 5
    (warning,) = spec_warnings(spec)
    assert warning["code"] == "decay_not_positive" and warning["omits"] == ["stable_until"]
    result = check_omitted(spec, ["stable_until"])
    assert {"loss_flow", "norm_sq_flow"} <= set(result.theory)                          # the flow: a reference
    assert codes(sde("toy2d", lr=10, weight_decay=0.5, integrator="flow", dt=0.01, **base)) == []


# ----------------------------------------------------------------------------- train


def test_train_conditions():
    assert codes(train()) == []                                                          # η = 0.1, λ = 5e-4
    spec = train(lr=10, weight_decay=0.5)                                                # ηλ = 5
    assert codes(spec) == ["no_equilibrium"]
    result = check_omitted(spec, ["au_equilibrium"])
    assert result.theory == {}
    for entry in result.summary["layers"].values():
        assert "au_equilibrium" not in entry and "equilibrium_step" not in entry
    assert not [k for k in result.summary if k.startswith("equilibrium_steps")]
    assert codes(train(lr=2, weight_decay=0.5)) == ["decay_not_positive"]              # 1
    spec = train(lr=1, weight_decay=0.2)                                                 # 0.2
    assert codes(spec) == ["continuous_time"]
    assert spec_warnings(spec)[0]["omits"] == []
    spec = train(lr=1, weight_decay=0.05, momentum=0.9)                                 # λη/(1−α) = 0.5
    assert codes(spec) == ["continuous_time"]


def test_train_schedule_phase_by_phase():
    spec = train(lr=0.5, weight_decay=0.1, schedule=[{"step": 5, "lr_factor": 20}])    # phase 1: ηλ = 1
    (warning,) = spec_warnings(spec)
    assert warning["code"] == "decay_not_positive"
    assert warning["message"].startswith("schedule phase 1 (steps 5–9): η = 10, λ = 0.1")
    result = check_omitted(spec, ["au_equilibrium"])
    assert "equilibrium_steps_phase1" not in result.summary


# ----------------------------------------------------------------------------- the summary's tail


def _regular_records(steps: int, record_every: int, windows: bool) -> list[int]:
    """The regular records by enumeration (docs/measurements.md): n = 0, r, … < steps, or whole windows only."""
    return [n for n in range(0, steps, record_every) if not windows or n + record_every <= steps]


def test_tail_warnings_count_the_records_of_the_tail_and_name_a_record_every_that_fills_it():
    """Against enumeration, over every record_every of short runs with and without a schedule (final phases
    long and short, tail starts whole and half steps): warned exactly when fewer than two regular records lie at
    steps ≥ the tail start; every record_every up to the bound the message names puts at least two there (the
    count is not monotone in record_every: a bound, not the largest that works), and where it names none, none
    does."""
    checked, warned = 0, 0
    for windows in (False, True):
        for steps in (1, 2, 3, 7, 10, 41, 100):
            for final in sorted({0, steps // 3, max(0, steps - 3)}):
                start = final + (steps - final) / 2.0
                fills = {q: len([n for n in _regular_records(steps, q, windows) if n >= start]) >= 2
                         for q in range(1, steps + 1)}
                for r in range(1, steps + 1):
                    got = tail_warnings(steps, r, start, windows)
                    assert bool(got) == (not fills[r]), (windows, steps, final, r)
                    checked, warned = checked + 1, warned + bool(got)
                    if not got:
                        continue
                    assert got[0]["code"] == "sparse_tail" and got[0]["omits"] == []
                    named = re.search(r"any record_every ≤ (\d+) puts", got[0]["message"])
                    if named is None:    # only when no record_every can
                        assert "too short" in got[0]["message"] and not any(fills.values()), (windows, steps, final)
                        continue
                    bound = int(named.group(1))
                    assert bound >= 1 and all(fills[q] for q in range(1, bound + 1)), (windows, steps, final, bound)
    assert checked == 966 and 300 < warned < 900, (checked, warned)   # both answers met often


def test_a_tail_start_is_written_in_full():
    (warning,) = tail_warnings(3_000_001, 3_000_001, 1_500_000.5)
    assert "steps ≥ 1500000.5" in warning["message"] and "any record_every ≤ 750000 puts" in warning["message"]


def test_a_sparse_tail_is_warned_and_the_summary_is_that_record():
    """nrq with record_every = steps: the only regular record is step 0, so the summary is the initial state
    (what the warning says); with one record in the tail, that record's values; a spec with two warns nothing."""
    base = {"kind": "nrq", "seed": 1, "params": {"trials": 20, "steps": 100, "weight_decay": 0.01}}
    for record_every, expected in ((100, 0), (60, 60)):
        spec = {**base, "params": {**base["params"], "record_every": record_every}}
        (warning,) = spec_warnings(spec)
        assert warning["code"] == "sparse_tail" and f"step {expected}" in warning["message"]
        result = run(spec)
        (i,) = [i for i, n in enumerate(result.series["step"]) if n == expected]
        assert result.summary["risk"] == result.series["risk"][i]
    assert spec_warnings({**base, "params": {**base["params"], "record_every": 25}}) == []


def test_the_tail_summaries_that_are_not_means_fall_back_to_the_last_record_too():
    """norm_map's rel_error_max_tail and sde nrq's f_histogram with no record in the tail: the last record's
    (rel_error_max_tail was 0.0, a perfect score from no record at all; the histogram had no sample)."""
    mapped = run(sde("norm_map", steps=10, record_every=10, trials=3))
    error = abs(mapped.series["norm_sq"][0] / mapped.theory["norm_sq_equilibrium"][0] - 1)
    assert mapped.summary["rel_error_max_tail"] == error and error > 0.5
    histogram = run(sde("nrq", steps=10, record_every=10, trials=50)).distributions["f_histogram"]
    assert histogram["samples"] == 50    # the 50 trials at step 0


def test_tail_warnings_of_every_kind():
    """Each kind and model declares its tail: train counts whole windows only, the sde models steps/2."""
    train = {"kind": "train", "params": {"steps": 100, "record_every": 34, "eval_every": 34}}
    assert "the record at step 34, before the tail" in spec_warnings(train)[0]["message"]  # window 68 is not whole
    for model in ("toy2d", "norm_map", "normalized_linear", "nrq"):
        spec = {"kind": "sde", "params": {"model": model, "steps": 10, "record_every": 6}}
        assert [w["code"] for w in spec_warnings(spec)] == ["sparse_tail"], model


# ----------------------------------------------------------------------------- unsettled_tail

def _unsettled(spec: dict) -> list[dict]:
    return [w for w in all_warnings(spec) if w["code"] == "unsettled_tail"]


def test_unsettled_tail_names_the_ratio_and_the_steps_that_settle_it_and_omits_nothing():
    """The nrq default (p 10, σ 1, η 0.1, λ 0.01, τ = 1/(4λη) = 250 steps) at 200 steps: its tail [100, 200) is
    predicted at 0.86 of the equilibrium AU; the warning names the steps from which the prediction is within
    ±10%, and a spec of that many steps is not warned (one of 2% fewer is)."""
    [short] = _unsettled(nrq(steps=200))
    assert short["omits"] == [] and "predicted to average an angular update 0.864× its equilibrium" in short["message"]
    assert "τ = (1−α)/(4λη) = 250 steps" in short["message"], short
    need = int(re.search(r"with steps ≥ (\d+) it is predicted within ±10%", short["message"])[1])
    assert _unsettled(nrq(steps=need)) == [] and _unsettled(nrq(steps=int(need * 0.98))) != []
    # started below the equilibrium norm, the AU is above it
    [above] = _unsettled(nrq(steps=300, init_std=0.5))
    assert "1.24× its equilibrium" in above["message"], above
    # after a decay without the rescale the final phase relaxes for τ = 2500: the steps named lengthen it
    [decay] = _unsettled(nrq(steps=3000, lr_schedule=[{"step": 2000, "lr_factor": 0.1}]))
    assert "(its final phase, from step 2000, lengthened)" in decay["message"] and "and the earlier phases" in \
        decay["message"], decay
    # the ratio is not monotone in the length (a χ²₂ spread of starts on both sides of the equilibrium): 10 steps
    # are above the band, 300 below it, and the steps named are those from which no longer run leaves it
    ten, three_hundred = _unsettled(nrq(dim=2, init_std=2.0, steps=10)), _unsettled(nrq(dim=2, init_std=2.0, steps=300))
    said = [float(re.search(r"update ([0-9.]+)× its equilibrium", w[0]["message"])[1]) for w in (ten, three_hundred)]
    assert said[0] > 1.1 and said[1] < 0.9, (ten, three_hundred)   # measured 1.54 and 0.752 (4 seeds × 8192 trials)
    need = int(re.search(r"with steps ≥ (\d+)", ten[0]["message"])[1])
    assert need == int(re.search(r"with steps ≥ (\d+)", three_hundred[0]["message"])[1]) > 300
    assert all(_unsettled(nrq(dim=2, init_std=2.0, steps=n)) == [] for n in (need, need * 2, need * 8))
    # a start far below the equilibrium norm first jumps far above it (M₁ ≈ η²L/M₀), then relaxes for long
    [tiny] = _unsettled(nrq(steps=2000, init_std=1e-3))
    assert re.search(r"update 0\.0\d+×", tiny["message"]), tiny
    # p from 344 to 400: the law of |X₀|² is still a quadrature, whose weights once overflowed into NaN (no
    # warning). |X₀|² ≈ 350 against M* ≈ 42: measured 0.1615 (512 trials, record_every 1)
    [wide] = _unsettled(nrq(steps=200, dim=350))
    assert re.search(r"update 0\.16\d×", wide["message"]), wide
    # steps that record_every 1 could not record (at most 10⁶ records): the advice names a record_every that can
    [slow] = _unsettled(nrq(steps=100, record_every=1, lr=1e-5))
    need, every = map(int, re.search(rf"steps ≥ (\d+) .*record_every ≥ (\d+): at most {MAX_RECORDED_POINTS:,} records",
                                  slow["message"]).groups())
    smdengine.parse_spec(nrq(steps=need, record_every=every))   # valid
    with pytest.raises(ValidationError, match="record_every"):
        smdengine.parse_spec(nrq(steps=need, record_every=every - 1))
    # τ = 2.5e8 steps: no run the spec allows settles, and the longest it names is the spec's limit on steps
    [never] = _unsettled(nrq(steps=100, record_every=1, lr=1e-7))
    longest = int(re.search(r"at most ([\d,]+) steps\) is predicted within", never["message"])[1].replace(",", ""))
    smdengine.parse_spec(nrq(steps=longest, record_every=longest))   # valid
    with pytest.raises(ValidationError, match="steps"):
        smdengine.parse_spec(nrq(steps=longest + 1, record_every=longest))
    # norms at the ends of the floating-point range: no ratio to give, no warning rather than "nan×" or "0×"
    assert _unsettled(nrq(steps=200, noise_std=1e-200, init_std=1e-300)) == []
    assert _unsettled(nrq(steps=2000, init_std=1e-100)) == []   # M₁ ≈ 1e197: M₁² overflows
    # settled: the default's 10 000 steps; no closed form to trust: out of regime, or no weight decay
    assert _unsettled({"kind": "nrq", "params": {}}) == []
    assert _unsettled(nrq(steps=100, lr=1.0, weight_decay=0.2)) == []
    assert _unsettled(nrq(steps=100, weight_decay=0.0)) == []
    assert _unsettled(train(steps=10)) == []
    # the sde kind's nrq model: at dt = 1 its step is the SGD update, so the same prediction (and τ without α);
    # smaller steps are predicted for themselves (test_the_sde_tail_ratio_is_predicted_for_its_step_dt)
    [sgd], [sde_step] = _unsettled(nrq(steps=200)), _unsettled(sde("nrq", steps=200, record_every=10))
    assert sde_step["message"] == sgd["message"].replace("τ = (1−α)/(4λη)", "τ = 1/(4λη)") != sgd["message"]
    assert all(_unsettled(sde(model, steps=10, record_every=5)) == [] for model in ("toy2d", "norm_map", "normalized_linear"))


UNSETTLED_CASES = {   # params, the measured tail ratio's side of the ±10% band: below, in or above
    "p10_short": ({"steps": 200}, "below"),
    "p10_settled": ({"steps": 1000}, "in"),
    "p2_short": ({"dim": 2, "steps": 300}, "in"),   # a χ²₂ start: E|X₀|² alone mispredicts small p
    "init_small": ({"steps": 300, "init_std": 0.5}, "above"),
    "rescale_after_short_phase": ({"steps": 1200, "lr_schedule": [   # the phase before the rescale never settled
        {"step": 200, "lr_factor": 0.5}, {"step": 1000, "lr_factor": 0.1, "rescale": True}]}, "below"),
    "momentum": ({"steps": 300, "momentum": 0.5, "lr": 0.05}, "below"),
    # far below the equilibrium norm: the first update's jump, spread as σ²χ²_{p−1}, and with momentum at η/(1−α).
    # 512 trials (2000 steps each), measured over the 4 seeds: 0.0269 (sd 0.0008) and 0.777 (sd 0.0033), against
    # 0.0289 and 0.783 predicted: gaps of 0.002 and 0.007 within 4 SE + 0.01 ≈ 0.012 and 0.017 (at 2048 trials
    # 0.0290 and 0.782: the rare trials that jumped least weigh more there)
    "init_tiny": ({"steps": 2000, "init_std": 1e-3, "trials": 512}, "below"),
    "momentum_init_small": ({"steps": 2000, "init_std": 0.01, "lr": 0.01, "momentum": 0.9, "trials": 512}, "below"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(UNSETTLED_CASES))
def test_the_predicted_tail_ratio_is_the_measured_one(name):
    """What the warning predicts, measured: the summary's au_rms over au_equilibrium, 4 seeds of 2048 trials.
    Tolerance: 4 standard errors of the seeds' mean (seed-to-seed sd ≤ 0.011 in these cases) plus 0.01 for the
    model (continuous time: its rate is off by ≈ ηλ/2 = 0.05% relatively here; each trial's norm is taken on its
    mean path, without its own fluctuation). The warning is given exactly when the prediction leaves the band, and
    the measurement lies on the side of the band the case names."""
    import statistics

    from smdengine.nrq.predict import tail_au_ratio

    params, side = UNSETTLED_CASES[name]
    spec = {"kind": "nrq", "device": "cpu", "params": {"trials": 2048, "record_every": 2, **params}}
    values = []
    for seed in range(4):
        document = run(smdengine.parse_spec({**spec, "seed": seed})).to_document()
        values.append(document["summary"]["au_rms"] / document["theory"]["au_equilibrium"][-1])
    measured, se = statistics.mean(values), statistics.stdev(values) / 2
    parsed = smdengine.parse_spec(spec).params
    predicted = tail_au_ratio(parsed, parsed.momentum)
    assert abs(predicted - measured) <= 4 * se + 0.01, (predicted, measured, se)
    warned = _unsettled(spec)   # given exactly when the prediction leaves the band, and saying that prediction
    assert bool(warned) == (abs(predicted - 1) > 0.1) and all(f"update {predicted:.3g}×" in w["message"] for w in warned)
    assert {"below": measured < 0.9, "in": 0.9 <= measured <= 1.1, "above": measured > 1.1}[side], (measured, se)


@pytest.mark.slow
def test_the_sde_tail_ratio_is_predicted_for_its_step_dt():
    """The sde kind's nrq model at dt = 0.5 from far below the equilibrium norm (init_std 1e-3, 2000 steps): its
    first Euler–Maruyama step jumps by η²·dt·G/M₀, half of SGD's, so its tail sits about twice as near
    equilibrium as the nrq kind's (predicted 0.0569 against 0.0289). Measured over 4 seeds of 256 trials: 0.0527
    (SE 0.0008; at dt = 0.25 and 512 trials 0.104 against 0.109). Tolerance as
    test_the_predicted_tail_ratio_is_the_measured_one: 4 standard errors of the seeds' mean plus 0.01 for the
    model; the SGD step's prediction lies outside it (a dt the prediction ignored fails here), and the warning
    says the dt's prediction."""
    import statistics

    from smdengine.nrq.predict import tail_au_ratio

    spec = sde("nrq", dt=0.5, steps=2000, init_std=1e-3, trials=256, record_every=2)
    values = []
    for seed in range(4):
        document = run(smdengine.parse_spec({**spec, "seed": seed, "device": "cpu"})).to_document()
        values.append(document["summary"]["au_rms"] / document["theory"]["au_equilibrium"][-1])
    measured, se = statistics.mean(values), statistics.stdev(values) / 2
    params = smdengine.parse_spec(spec).params
    predicted, sgd_step = tail_au_ratio(params, 0.0, 0.5), tail_au_ratio(params, 0.0, 1.0)
    assert abs(predicted - measured) <= 4 * se + 0.01 < abs(sgd_step - measured), (predicted, sgd_step, measured, se)
    [warned] = _unsettled(spec)
    assert f"update {predicted:.3g}×" in warned["message"], warned


@pytest.mark.parametrize("dof", [1, 2, 3, 9, 99, 399, 401])
def test_the_first_gradients_law_has_the_chi_square_moments(dof):
    """The log-spaced rule for G = σ²χ²_{p−1} (nrq.predict): E G = dof·σ², E G² = dof(dof+2)σ⁴. At one and two
    degrees of freedom its span in log G is ~35 e-folds wide, its peak ~1 (spacing ~0.7): 1e-3 up to three
    (measured ≤ 6e-4), 1e-9 beyond (measured ≤ 1e-11)."""
    from smdengine.nrq.predict import _chi_square_log_rule

    g, w = _chi_square_log_rule(dof, 2.0)
    assert w.sum() == pytest.approx(1.0, abs=1e-14) and (w >= 0).all()
    tol = 1e-3 if dof <= 3 else 1e-9 if dof <= 400 else 0.0   # above 400: the mean alone (its second moment is off)
    assert g @ w == pytest.approx(2.0 * dof, rel=tol)
    if dof <= 400:
        assert g**2 @ w == pytest.approx(4.0 * dof * (dof + 2), rel=tol)
