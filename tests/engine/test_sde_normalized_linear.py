"""The normalized linear model (seed 002 §6.1): its geometry, gradient, integrators and time change."""
from __future__ import annotations

import json
import math

import numpy as np
import pydantic
import pytest
import torch

import smdengine
from smdengine._compare import time_axis
from smdengine.sde.normalized_linear import Problem, inverse_time_change, norm_scale, time_change


def spec(seed: int = 0, **params) -> dict:
    base = dict(model="normalized_linear", trials=16, steps=400, record_every=20, record_trials=8)
    base.update(params)
    return {"kind": "sde", "seed": seed, "device": "cpu", "params": base}


@pytest.fixture(scope="module")
def problem() -> Problem:
    return Problem(10, data_seed=3, device=torch.device("cpu"), dtype=torch.float64)


def circle(problem: Problem, theta: torch.Tensor) -> torch.Tensor:
    u1, u2 = problem.basis[:, 0], problem.basis[:, 1]
    return problem.centre + problem.radius * (theta.cos()[:, None] * u1 + theta.sin()[:, None] * u2)


def test_the_circle_is_unit_norm_zero_loss_and_its_angle_is_recovered(problem):
    theta = torch.linspace(-3.0, 3.0, 13, dtype=torch.float64)
    points = circle(problem, theta)
    assert torch.allclose(torch.linalg.vector_norm(points, dim=1), torch.ones(13, dtype=torch.float64), atol=1e-12)
    assert problem.loss(points).max() < 1e-25
    assert problem.loss(2.5 * points).max() < 1e-25                       # scale-invariant
    assert torch.allclose(problem.angle(7.0 * points), theta, atol=1e-12)
    assert problem.angle(problem.x_star[None, :]).item() == pytest.approx(0.0, abs=1e-12)
    assert 0 < problem.radius < 1
    off = torch.randn(5, 10, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert problem.loss(off).min() > 1e-4                                  # generic points do not fit


def test_step_is_the_gradient_of_the_loss_plus_weight_decay(problem):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(6, 10, generator=gen, dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    problem.loss(xr).sum().backward()
    stepped = x.clone()
    problem.step(stepped, torch.zeros_like(x), drift=0.01, weight_decay=0.5, noise=0.0)
    assert torch.allclose(stepped, x - 0.01 * (xr.grad + 0.5 * x), atol=1e-14)
    # the noise term is P ε/|x|: orthogonal to x, of size σ|Pε|/|x|
    eps = torch.randn(6, 10, generator=gen, dtype=torch.float64)
    moved = x.clone()
    problem.step(moved, eps, drift=0.0, weight_decay=0.0, noise=1.0)
    kick = x - moved
    assert torch.linalg.vecdot(kick, x).abs().max() < 1e-12
    unit = x / torch.linalg.vector_norm(x, dim=1, keepdim=True)
    proj = eps - unit * torch.linalg.vecdot(eps, unit)[:, None]
    assert torch.allclose(kick, proj / torch.linalg.vector_norm(x, dim=1, keepdim=True), atol=1e-14)


def test_sde_with_dt_one_is_sgd():
    a = smdengine.run(spec(seed=4, integrator="sgd"))
    b = smdengine.run(spec(seed=4, integrator="sde", dt=1.0))
    assert a.series == b.series


def test_records_and_reproducibility():
    res = smdengine.run(spec(seed=5, integrator="sde", dt=0.25))
    assert res.series["step"] == [*range(0, 400, 20), 400]
    assert all(len(row) == 8 for row in res.series["theta"])
    assert res.series["theta"][0] == [0.0] * 8 or max(map(abs, res.series["theta"][0])) < 1e-12
    assert res.series["circular_variance"][0] == pytest.approx(0.0, abs=1e-12)
    assert all(0.0 <= v <= 1.0 for v in res.series["circular_variance"])
    assert res.summary["circular_variance_final"] == res.series["circular_variance"][-1]
    again = smdengine.run(spec(seed=5, integrator="sde", dt=0.25))
    assert again.series == res.series
    assert smdengine.run(spec(seed=6, integrator="sde", dt=0.25)).series["theta"] != res.series["theta"]


def test_data_seed_fixes_the_problem_across_learning_rates():
    a = smdengine.run(spec(lr=1e-2, steps=20, record_every=20))
    b = smdengine.run(spec(lr=1e-3, steps=20, record_every=20))
    assert a.series["loss"][0] == b.series["loss"][0] == pytest.approx(0.0, abs=1e-25)
    c = smdengine.run(spec(lr=1e-2, steps=20, record_every=20, init_norm=2.0, data_seed=7))
    assert c.series["norm"][0] == pytest.approx(2.0)


def test_float32_runs():
    res = smdengine.run(spec(dtype="float32"))
    assert all(math.isfinite(v) for v in res.series["circular_variance"])


@pytest.mark.parametrize("lr, wd, r0", [(1e-2, 0.05, 1.0), (1e-3, 0.05, 1.0), (1e-2, 0.05, 0.3), (0.5, 0.01, 1.0)])
def test_time_change_is_the_integral_of_eta_squared_over_r_to_the_fourth(lr, wd, r0):
    from scipy import integrate

    t = np.linspace(0.0, 3.0 / (lr * wd), 11)
    integral = [integrate.quad(lambda s: lr**2 / norm_scale(s, lr, wd, r0) ** 4, 0.0, b,
                               epsabs=0.0, epsrel=1e-12, limit=200)[0] for b in t]
    assert np.allclose(time_change(t, lr, wd, r0), integral, rtol=1e-9, atol=1e-15)
    assert np.allclose(inverse_time_change(time_change(t[1:], lr, wd, r0), lr, wd, r0), t[1:], rtol=1e-9)
    assert norm_scale(np.array([0.0]), lr, wd, r0)[0] == pytest.approx(r0)


def test_time_change_matches_the_seed_formula_and_does_not_overflow():
    lr, wd, t = 1e-3, 0.05, np.array([0.0, 1e3, 1e5])
    seed_formula = 0.5 * np.log(1 + (np.exp(4 * lr * wd * t) - 1) * lr / (2 * wd))
    assert np.allclose(time_change(t, lr, wd), seed_formula, rtol=1e-12)
    far = time_change(np.array([1e9]), lr, wd)[0]            # e^{4ηλt} = e^{200000}
    assert far == pytest.approx(0.5 * (math.log(lr / (2 * wd)) + 4 * lr * wd * 1e9), rel=1e-12)


@pytest.mark.parametrize("r0", [1.0, 0.3])
def test_without_weight_decay_the_theory_is_the_lambda_to_zero_limit(r0):
    """Seed 002 Thm 3.2 (λ = 0): R(t)⁴ = R₀⁴ + 2η²t, τ(t) = ½ ln(1 + 2η²t/R₀⁴) = ∫η²/R⁴, its inverse;
    each the limit of the λ > 0 form (at λ = 1e-9 the O(4ηλt) = 4e-6 term and the cancellation in
    η/(2λ), ~1e-16·η/(2λR₀⁴) ≤ 4e-5 relative, are far below 1e-4; τ's λ > 0 form at t = 0 is
    ½(ln k + log1p((1 − k)/k)) with k = η/(2λR₀⁴) up to 6e8: a rounding of ~1e-16·k ≤ 1e-7)."""
    from scipy import integrate

    lr, t = 1e-2, np.linspace(0.0, 1e5, 11)
    assert np.allclose(norm_scale(t, lr, 0.0, r0), (r0**4 + 2 * lr**2 * t) ** 0.25, rtol=1e-14)
    assert np.allclose(norm_scale(t, lr, 0.0, r0), norm_scale(t, lr, 1e-9, r0), rtol=1e-4)
    assert np.allclose(time_change(t, lr, 0.0, r0), time_change(t, lr, 1e-9, r0), rtol=1e-4, atol=1e-7)
    integral = [integrate.quad(lambda s: lr**2 / norm_scale(s, lr, 0.0, r0) ** 4, 0.0, b,
                               epsabs=0.0, epsrel=1e-12, limit=200)[0] for b in t]
    assert np.allclose(time_change(t, lr, 0.0, r0), integral, rtol=1e-9, atol=1e-15)
    assert np.allclose(inverse_time_change(time_change(t[1:], lr, 0.0, r0), lr, 0.0, r0), t[1:], rtol=1e-9)


def test_runs_without_weight_decay_and_every_theory_line_is_finite():
    """λ = 0 is accepted; no theory line needs λ > 0 (each has its λ → 0 limit), so all three are there
    and finite. The norm follows |x|⁴ = R₀⁴ + 2η²·tr Σ·t with the model's tr Σ(x̄) = (D−1)σ̂² = 0.81
    (``norm_scale`` assumes tr Σ = 1, docs/theory.md / T19). Measured (seed 0, 400 trials, η = 0.05): mean |x|
    within 0.4% of that law at every record (the η⁴ term of the discrete update and the residual loss
    gradient off Γ₁; the trial spread of |x| is ≈ 0.1% SE), while ``norm_scale`` is 5% above it."""
    lr, sigma, dim = 0.05, 0.3, 10
    res = smdengine.run(spec(seed=0, lr=lr, weight_decay=0.0, trials=400, steps=4000, record_every=200))
    json.dumps(res.to_document(), allow_nan=False)
    assert set(res.theory) == {"tau", "norm_scale", "lr_time"}
    assert all(math.isfinite(v) for values in res.theory.values() for v in values)
    t = np.array(res.series["step"], dtype=float)
    law = (1.0 + 2 * lr**2 * (dim - 1) * sigma**2 * t) ** 0.25
    assert np.abs(np.array(res.series["norm"]) / law - 1).max() < 0.01
    assert np.allclose(res.theory["tau"], 0.5 * np.log1p(2 * lr**2 * t), rtol=1e-12)
    assert time_axis(spec(lr=lr, weight_decay=0.0), res.series["step"], "tau") == pytest.approx(res.theory["tau"])


def test_weight_decay_bounds():
    with pytest.raises(pydantic.ValidationError, match="weight_decay"):
        smdengine.parse_spec(spec(weight_decay=-1e-3))


# ----------------------------------------------------------------------------- acceptance 2 (slow)
#
# Seed 002 Thm 5.5: runs with different η line up against τ(t), not against ηt. That is a limit
# (ηλ → 0); at finite η the direction also fluctuates off Γ₁, which shrinks its projection on the
# plane of Γ₁ and speeds the angular diffusion. Measured on this problem (data_seed 0, 4000 trials,
# SE ≈ 0.007 per value): CV at τ = 1..5 is .165 .327 .472 .566 .654 for η = 1e-2, .162 .310 .435
# .538 .624 for η = 3e-3 and .149 .297 .418 .516 .584 for η = 1e-3 — a systematic +10…+13% for
# η = 1e-2 over 1e-3 that shrinks as η does, against +40…+450% at equal ηt. One decade lower the
# limit holds: η = 1e-3 against 1e-4 (4000 trials, seed 7) differ by −2.2 +3.1 +3.0 +3.7 −0.2% at
# τ = 1..5, and by +398 +146 +65 +37 +25% at ηt = 30..70 (not run here: 865 000 steps per trial, ~11 min
# on 2 cores). θ moves only by noise (the drift rescales x's in-plane part), at the rate
# η²σ̂²/(|x|⁴r²), r the in-plane radius; the off-Γ₁ fluctuation lowers r. The checks below are
# statistical: with 1000 trials per η, the SE of each relative gap is estimated by a bootstrap over
# trials; equal-τ gaps must be consistent with the 10% (≤ 10% + 4 SE), equal-ηt gaps must
# reject it (≥ 10% + 4 SE).

NL_LAM = 0.05


def _cv(theta: np.ndarray) -> np.ndarray:
    """Circular variance along the last axis."""
    return 1.0 - np.hypot(np.cos(theta).mean(axis=-1), np.sin(theta).mean(axis=-1))


@pytest.fixture(scope="module")
def two_rates():
    out = {}
    for lr in (1e-2, 1e-3):
        steps = int(inverse_time_change(5.2, lr, NL_LAM)) + 1
        res = smdengine.run(spec(seed=0, lr=lr, weight_decay=NL_LAM, trials=1000, record_trials=1000,
                                 steps=steps, record_every=max(1, steps // 1000)))
        theta = np.array(res.series["theta"])                       # (records, trials)
        out[lr] = (np.array(res.theory["tau"]), np.array(res.theory["lr_time"]), theta)
    return out


def _gap(two_rates, axis: int, at: float, boot: int = 300) -> tuple[float, float]:
    """Relative gap CV(η=1e-2)/CV(η=1e-3) − 1 at the record nearest to ``at`` on the time axis
    (0: τ, 1: ηt), and its bootstrap SE (trials resampled independently in each run)."""
    rng = np.random.default_rng(0)
    rows = []
    for lr in (1e-2, 1e-3):
        times, theta = two_rates[lr][axis], two_rates[lr][2]
        rows.append(theta[int(np.argmin(np.abs(times - at)))])
    gap = _cv(rows[0]) / _cv(rows[1]) - 1.0
    idx = rng.integers(0, rows[0].size, size=(boot, rows[0].size))
    jdx = rng.integers(0, rows[1].size, size=(boot, rows[1].size))
    samples = _cv(rows[0][idx]) / _cv(rows[1][jdx]) - 1.0
    return gap, float(samples.std())


@pytest.mark.slow
@pytest.mark.parametrize("tau", [2.0, 3.0, 4.0, 5.0])
def test_acceptance_equal_tau_agrees(two_rates, tau):
    gap, se = _gap(two_rates, 0, tau)
    assert abs(gap) <= 0.10 + 4 * se, (tau, gap, se)


@pytest.mark.slow
# ηt = 50: the gap fades as both runs approach their common equilibrium, to ~0.45 ± 0.1 against the bound
# 0.10 + 4·se ≈ 0.38, so whether it clears the bound depends on the draws: 0.56 (se 0.077) on the CPU stream,
# 0.34 (se 0.069) on the CUDA one (H200, 2026-11-26)
@pytest.mark.parametrize("lr_time", [20.0, 30.0, 40.0, pytest.param(50.0, marks=pytest.mark.cpu_stream)])
def test_acceptance_equal_lr_time_does_not(two_rates, lr_time):
    gap, se = _gap(two_rates, 1, lr_time)
    assert gap >= 0.10 + 4 * se, (lr_time, gap, se)
