"""The ``toy2d`` model of the ``sde`` kind (seed 001 §4, Fig. 5a): GD + WD on L = x²/(x² + y²)
from a cloud of nearby starts. The closed-form gradient flow against the Euler integrator (first
order in dt), the update against a literal implementation, GD's chaos near zero loss against the
flow's calm, the loss range, and the engine contract."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import smdengine
from smdengine.sde import toy2d

SERIES_KEYS = {"step", "spread", "loss", "norm_sq"}


def spec(seed: int = 0, **params) -> dict:
    base = dict(model="toy2d", lr=0.1, weight_decay=0.5, center=(0.05, 0.5), cloud_radius=1e-6, trials=100,
                integrator="gd", steps=50, record_every=1)
    base.update(params)
    return {"kind": "sde", "seed": seed, "device": "cpu", "params": base}


# ----------------------------------------------------------------------------- the flow, exactly


def flow_errors(center, dt, steps, **params) -> tuple[float, float]:
    """max |loss − loss_flow| and max |norm_sq/norm_sq_flow − 1| of one Euler path from the centre."""
    result = smdengine.run(spec(integrator="flow", dt=dt, center=center, cloud_radius=0.0, trials=1,
                                steps=steps, **params))
    loss, loss_flow = np.array(result.series["loss"]), np.array(result.theory["loss_flow"])
    norm, norm_flow = np.array(result.series["norm_sq"]), np.array(result.theory["norm_sq_flow"])
    return float(np.abs(loss - loss_flow).max()), float(np.abs(norm / norm_flow - 1).max())


@pytest.mark.parametrize("center", [(0.6, 0.8), (-0.6, -0.8), (0.8, -0.6), (0.05, 0.5)])
@pytest.mark.parametrize("weight_decay", [0.5, 0.0])
def test_euler_flow_converges_to_the_closed_form_at_first_order(center, weight_decay):
    """Euler's global error is O(dt): halving dt must halve the distance to the closed form
    (ratio 2 ± 10%), and the distance itself is small. A wrong closed form would leave an error
    that does not shrink with dt. The four centres cover the quadrants (the symmetry reduction)
    and a start near zero loss. Measured at λ = 0.5, centre (0.6, 0.8), 20 steps, dt = 0.01:
    loss 8.8e-5, norm 2.8e-4; ratios 2.000–2.004 for dt 0.02 → 0.0025."""
    e1 = flow_errors(center, 0.01, 20, weight_decay=weight_decay)
    e2 = flow_errors(center, 0.005, 20, weight_decay=weight_decay)
    for coarse, fine in zip(e1, e2, strict=False):
        assert coarse < 2e-3
        assert coarse / fine == pytest.approx(2.0, rel=0.1)


def test_flow_closed_form_by_hand():
    """Spot values: r² = r₀²e^{−2ηλt}; ln tan φ_t = ln tan φ₀ − (e^{2ηλt} − 1)/(λr₀²)."""
    loss, norm_sq = toy2d.flow_from(0.6, 0.8, 0.1, 0.5, [0.0, 10.0])
    assert loss[0] == pytest.approx(0.36, rel=1e-14) and norm_sq[0] == pytest.approx(1.0, rel=1e-14)
    tan_t = 0.75 * math.exp(-(math.exp(1.0) - 1) / 0.5)
    assert loss[1] == pytest.approx(tan_t ** 2 / (1 + tan_t ** 2), rel=1e-12)
    assert norm_sq[1] == pytest.approx(math.exp(-1.0), rel=1e-14)
    # λ = 0: ln tan φ drops linearly, 2ηt/r₀²; the norm stays
    loss0, norm0 = toy2d.flow_from(0.6, -0.8, 0.1, 0.0, [10.0])
    tan0 = 0.75 * math.exp(-2.0)
    assert loss0[0] == pytest.approx(tan0 ** 2 / (1 + tan0 ** 2), rel=1e-12) and norm0[0] == 1.0
    # on an axis the direction is stationary; far in time the loss underflows cleanly to 0
    assert toy2d.flow_from(0.0, 2.0, 0.1, 0.5, [5.0])[0][0] == 0.0
    assert toy2d.flow_from(2.0, 0.0, 0.1, 0.5, [5.0])[0][0] == 1.0
    far = toy2d.flow_from(0.6, 0.8, 0.1, 0.5, [1e4])
    assert far[0][0] == 0.0 and far[1][0] == 0.0


@pytest.mark.cpu_stream
def test_gd_update_matches_a_literal_implementation():
    """w ← w − η(∇L + λw), ∇L = (2xy², −2x²y)/(x² + y²)², written out in numpy for each start."""
    result = smdengine.run(spec(seed=4, trials=5, cloud_radius=0.3, center=(0.3, -0.4), steps=12, lr=0.2,
                                weight_decay=0.3))
    gen = torch.Generator().manual_seed(4)
    w = (torch.tensor([0.3, -0.4], dtype=torch.float64)
         + 0.3 * torch.randn(5, 2, generator=gen, dtype=torch.float64)).numpy()
    expected = []
    for _ in range(12):
        x, y = w[:, 0], w[:, 1]
        expected.append((x ** 2 + y ** 2).mean())
        s = (x ** 2 + y ** 2) ** 2
        grad = np.stack([2 * x * y ** 2 / s, -2 * x ** 2 * y / s], axis=1)
        w = w - 0.2 * (grad + 0.3 * w)
    expected.append((w ** 2).sum(axis=1).mean())   # the final row: the state after update 11
    np.testing.assert_allclose(result.series["norm_sq"], expected, rtol=1e-12)


# ----------------------------------------------------------------------------- chaos (seed 001 Fig. 5a)


@pytest.mark.parametrize("seed", range(5))
def test_gd_is_chaotic_near_zero_loss_and_the_flow_is_not(seed):
    """GD, LR 0.1, WD 0.5, 100 starts within 1e-6 of (0.05, 0.5) (loss 0.0099): the cloud's
    directions spread by > 4 orders of magnitude, to O(0.1), within 50 steps; the Euler flow
    (dt = 0.01) from the same cloud only contracts.

    Why this is robust: near zero loss one update of size h maps φ → φ(1 − 2ηh/((1 − ηλh)r²)),
    which expands once r² < ηh/(1 − ηλh). WD shrinks r² by (1 − ηλh)^{2/h} per unit time, so GD
    (h = 1) crosses that at t* ≈ 8.5 (``stable_until``) and has ~40 steps of expansion; the flow's
    t* is 55 > 50, so over the whole horizon it contracts (a start at |w|² = 1, e.g. (0.1, 1.0),
    delays GD's t* to 22 and the flow's to 69). Measured over seeds 0–19: GD spread_max ≥ 0.153
    (≥ 7.5e4 × the initial spread), the flow's spread_max = its initial spread."""
    gd = smdengine.run(spec(seed=seed))
    flow = smdengine.run(spec(seed=seed, integrator="flow", dt=0.01))
    assert gd.theory["stable_until"] < 10 and flow.theory["stable_until"] > 50
    initial = gd.series["spread"][0]
    assert initial == flow.series["spread"][0]
    # the cloud's angular size: the tangential part of N(0, radius²I) over |centre| (100 samples: ±10%)
    assert initial == pytest.approx(1e-6 / math.hypot(0.05, 0.5), rel=0.3)
    assert gd.summary["spread_max"] > 0.05 and gd.summary["spread_max"] > 1e4 * initial
    assert flow.summary["spread_max"] <= 3 * initial
    assert flow.summary["spread_final"] < initial


def test_coarse_euler_flow_turns_chaotic_after_its_stable_until():
    """The exact flow is stable for all t, a fixed Euler step is not: with dt = 0.1, t* ≈ 32 and
    the spread grows afterwards (measured spread_max 0.21–0.24 over 150 steps). It documents the
    meaning of ``stable_until`` rather than anything of seed 001."""
    result = smdengine.run(spec(integrator="flow", dt=0.1, steps=150, record_every=5))
    assert 25 < result.theory["stable_until"] < 40
    steps, spread = np.array(result.series["step"]), np.array(result.series["spread"])
    assert spread[steps <= 30].max() <= spread[0]
    assert result.summary["spread_max"] > 0.01


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_loss_stays_in_the_unit_interval_through_chaos(dtype):
    result = smdengine.run(spec(steps=2000, record_every=1, dtype=dtype))
    loss = np.array(result.series["loss"])
    assert np.isfinite(loss).all() and loss.min() >= 0.0 and loss.max() <= 1.0
    assert loss.max() > 0.1  # GD keeps leaving zero loss (the oscillation of seed 001 Fig. 5b/c)
    assert all(math.isfinite(v) and v > 0 for v in result.series["norm_sq"])


# ----------------------------------------------------------------------------- engine contract


@pytest.mark.parametrize("integrator", ["gd", "flow"])
def test_same_seed_same_series_different_seed_different_cloud(integrator):
    a = smdengine.run(spec(seed=1, integrator=integrator, steps=30))
    b = smdengine.run(spec(seed=1, integrator=integrator, steps=30))
    c = smdengine.run(spec(seed=2, integrator=integrator, steps=30))
    assert a.series == b.series and a.summary == b.summary
    assert a.series["spread"][0] != c.series["spread"][0]
    assert a.theory == c.theory  # the theory is of the centre


def test_float32_follows_float64_before_the_chaos():
    """Same cloud (drawn in float64); before GD's t* ≈ 8.5 the paths are smooth and the dtypes agree
    to float32 rounding (relative 1e-6 leaves room for ~10 steps of O(1) amplification)."""
    s32 = smdengine.run(spec(dtype="float32", steps=8)).series
    s64 = smdengine.run(spec(steps=8)).series
    np.testing.assert_allclose(s32["norm_sq"], s64["norm_sq"], rtol=1e-6)
    np.testing.assert_allclose(s32["loss"], s64["loss"], rtol=1e-4)


def test_progress_points_concatenate_and_cancel():
    events = []
    s = spec(steps=40, record_every=3)
    result = smdengine.run(s, on_progress=events.append, progress_interval=0.0)
    joined = {k: [v for ev in events for v in ev.points[k]] for k in SERIES_KEYS}
    assert joined == result.series and events[-1].step == 40 and events[-1].fraction == 1.0
    polls = []
    with pytest.raises(smdengine.Cancelled) as info:
        smdengine.run(s, should_stop=lambda: polls.append(1) or len(polls) >= 10, progress_interval=0.0)
    assert info.value.step == 10


def test_names_predict_and_summary():
    s = spec(steps=40, record_every=4)
    result = smdengine.run(s)
    assert set(result.series) == SERIES_KEYS == {"step", *toy2d.OUTPUTS.metrics}
    assert set(result.theory) == set(toy2d.OUTPUTS.theory) and toy2d.OUTPUTS.distributions == ()
    assert set(smdengine.output_names(s)) == SERIES_KEYS | set(toy2d.OUTPUTS.theory)
    assert smdengine.predict(s) == result.theory
    assert result.series["step"] == [*range(0, 40, 4), 40] and len(result.theory["loss_flow"]) == 11
    assert result.series["spread"][-1] == result.summary["spread_final"]
    assert set(result.summary) == {"spread", "loss", "norm_sq", "loss_flow", "norm_sq_flow",
                                   "spread_final", "spread_max"}
    assert result.summary["spread_max"] >= max(result.series["spread"])
    assert toy2d.stable_until(1.01, 0.1, 0.5, 1.0) == pytest.approx(22.04, abs=0.01)
    assert toy2d.stable_until(0.05, 0.1, 0.5, 1.0) == 0.0  # r₀² < η: unstable from the start
    assert toy2d.stable_until(1.0, 0.1, 0.0, 1.0) == math.inf
