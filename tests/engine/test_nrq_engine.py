"""The ``nrq`` engine as a library: reproducibility, dtypes, progress and cancellation, the result
document, series/theory/summary layout, the angle measurement, and the update itself against an
independent (slow, textbook) implementation driven by the same random numbers."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import smdengine
from smdengine.nrq import theory
from smdengine.nrq.stepper import angle as _angle
from tests.engine.checkpointing import same

SERIES_KEYS = {"step", "risk", "loss", "au_mean", "au_rms", "norm_sq", "eff_lr"}
UPDATE_KEYS = {"au_mean", "au_rms"}   # of the update after a record: NaN in the final row (no next update)
SGD_THEORY_KEYS = {"au_equilibrium", "norm_sq_theory", "risk_stationary", "kappa"}


def spec(seed: int = 0, **params) -> dict:
    base = dict(trials=50, steps=400, record_every=10)
    base.update(params)
    return {"kind": "nrq", "seed": seed, "device": "cpu", "params": base}


# ----------------------------------------------------------------------------- reproducibility


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_same_seed_same_series(dtype):
    a = smdengine.run(spec(seed=11, dtype=dtype, momentum=0.5))
    b = smdengine.run(spec(seed=11, dtype=dtype, momentum=0.5))
    assert same(a.series, b.series)
    assert a.summary == b.summary


def test_a_run_whose_numbers_break_says_from_which_step():
    """A diverging rate (or an init_std near the smallest double) ended `succeeded` with every measured value
    null and nothing to say why: the summary names the first record step with a NaN or infinite metric."""
    broken = smdengine.run(spec(trials=10, steps=200, lr=1000.0, weight_decay=0.9, dtype="float32"))
    regular = {k: v[:-1] for k, v in broken.series.items()}
    first = next(n for i, n in enumerate(regular["step"])
                 if not all(math.isfinite(regular[k][i]) for k in SERIES_KEYS - {"step"}))
    assert first > 0 and broken.summary["nonfinite_from_step"] == first
    assert smdengine.run(spec(trials=10, steps=200, init_std=1e-320)).summary["nonfinite_from_step"] == 0
    assert "nonfinite_from_step" not in smdengine.run(spec(trials=10, steps=200)).summary
    assert "nonfinite_from_step" in smdengine.summary_names("nrq")   # declared: a search can find broken runs


def test_nonfinite_from_reads_points_that_went_through_json_and_huge_finite_values():
    from smdengine._science import nonfinite_from

    series = {"step": [0, 10, 20], "a": [1.0, 1e308, 1e308], "b": [1.0, 2.0, None]}
    assert nonfinite_from(series, ["a"]) == {}   # the sum overflows; every value is finite
    assert nonfinite_from(series, ["a", "b"]) == {"nonfinite_from_step": 20}


def test_different_seed_different_series():
    a = smdengine.run(spec(seed=1)).series
    b = smdengine.run(spec(seed=2)).series
    assert a["step"] == b["step"]
    for key in SERIES_KEYS - {"step"}:
        assert a[key] != b[key], key


def test_float32_runs_and_is_close_to_float64_at_the_start():
    s32 = smdengine.run(spec(seed=3, dtype="float32")).series
    s64 = smdengine.run(spec(seed=3, dtype="float64")).series
    assert s32["step"] == s64["step"]
    for key in SERIES_KEYS - {"step"}:
        regular = s32[key][:-1] if key in UPDATE_KEYS else s32[key]
        assert all(isinstance(v, float) and math.isfinite(v) for v in regular), key
    assert all(0.0 <= r <= 1.0 for r in s32["risk"])
    # the initial point uses the same seed; its statistics are at least of the same size in both
    # dtypes (the draws themselves may differ between dtypes)
    assert s32["norm_sq"][0] == pytest.approx(s64["norm_sq"][0], rel=0.3)
    assert s32["au_rms"][-2] == pytest.approx(s64["au_rms"][-2], rel=0.3)


# ----------------------------------------------------------------------------- progress and cancel


def test_progress_points_concatenate_to_the_series():
    events = []
    result = smdengine.run(spec(seed=5, steps=300, record_every=7), on_progress=events.append,
                           progress_interval=0.0)
    assert len(events) > 10
    joined = {k: [] for k in SERIES_KEYS}
    for ev in events:
        assert set(ev.points) == SERIES_KEYS
        assert len({len(v) for v in ev.points.values()}) == 1
        for k in SERIES_KEYS:
            joined[k].extend(ev.points[k])
        assert ev.total_steps == 300
    assert joined == result.series
    assert [ev.step for ev in events] == sorted(ev.step for ev in events)
    assert events[-1].step == 300 and events[-1].fraction == 1.0


def test_progress_with_default_interval_ends_with_everything():
    events = []
    result = smdengine.run(spec(seed=5), on_progress=events.append)
    assert events and events[-1].step == 400
    assert sum(len(ev.points["step"]) for ev in events) == len(result.series["step"]) == 41   # 0 … 390, 400


def test_should_stop_raises_cancelled_after_delivering_everything():
    full = smdengine.run(spec(seed=9, steps=400, record_every=10)).series
    events, polls = [], []

    def should_stop() -> bool:   # polled after every step of the driver: an update, or a span of ≤ 10 on CUDA
        polls.append(1)
        return len(polls) >= 12

    with pytest.raises(smdengine.Cancelled) as info:
        smdengine.run(spec(seed=9, steps=400, record_every=10), on_progress=events.append,
                      should_stop=should_stop, progress_interval=0.0)
    stopped_at = info.value.step
    assert 0 < stopped_at < 400 and "cancelled" in str(info.value)
    assert events[-1].step == stopped_at
    delivered = {k: [v for ev in events for v in ev.points[k]] for k in SERIES_KEYS}
    n = len(delivered["step"])
    assert delivered["step"] == [s for s in range(0, 400, 10) if s < stopped_at]
    for k in SERIES_KEYS:
        assert delivered[k] == full[k][:n], k


def test_should_stop_false_runs_to_the_end():
    result = smdengine.run(spec(seed=9), should_stop=lambda: False, progress_interval=0.0)
    assert result.series["step"] == [*range(0, 400, 10), 400]


# ----------------------------------------------------------------------------- the result document


@pytest.mark.parametrize("params", [
    dict(),
    dict(momentum=0.9),
    dict(dtype="float32"),
    dict(lr_schedule=[{"step": 200, "lr_factor": 0.1, "rescale": True}]),
    dict(dim=4, eigenvalues=[0.5, 1.0, 2.0, 4.0]),
])
def test_document_is_strict_json(params):
    doc = smdengine.run(spec(**params)).to_document()
    text = json.dumps(doc, allow_nan=False)
    assert set(json.loads(text)) == {"series", "theory", "summary", "distributions"}


def test_weight_decay_switched_off_by_the_schedule():
    """weight_decay_factor 0 at step 200: from there |X|⁴ grows by 2η²(p−1)σ² per update (norm_sq_theory,
    the λ = 0 closed form, continuous across the switch), the AU equilibrium line is 0, κ and r* are
    null where λ = 0, and that phase has no time-to-equilibrium keys. Measured (seed 0, 2000 trials):
    norm_sq / norm_sq_theory over the λ = 0 phase at most 0.36% off (|PAX̄|² ≈ 0.07 next to (p−1)σ² = 9 in
    the unit gradient, and the trial spread of |X|², ≈ 0.2% SE)."""
    sched = [{"step": 200, "lr_factor": 1.0, "weight_decay_factor": 0.0}]
    result = smdengine.run(spec(seed=0, trials=2000, steps=1000, lr_schedule=sched))
    doc = result.to_document()
    json.dumps(doc, allow_nan=False)
    steps, th = result.series["step"], result.theory
    off = [i for i, n in enumerate(steps) if n >= 200]
    assert all(th["au_equilibrium"][i] == 0.0 for i in off)
    assert all(doc["theory"]["risk_stationary"][i] is None and doc["theory"]["kappa"][i] is None for i in off)
    assert doc["theory"]["risk_stationary"][0] == pytest.approx(theory.risk_stationary(
        theory.kappa(1.0, 2.0, 10, 1.0, 0.1, 0.01), 10))
    grown = [th["norm_sq_theory"][i] for i in off]
    assert all(a < b for a, b in zip(grown, grown[1:], strict=False))
    for i in off:
        assert result.series["norm_sq"][i] == pytest.approx(th["norm_sq_theory"][i], rel=0.005)
    assert "equilibrium_steps_phase1" not in result.summary
    assert "equilibrium_steps_predicted_phase1" not in result.summary


def test_no_weight_decay_runs_and_has_no_equilibrium():
    doc = smdengine.run(spec(weight_decay=0.0)).to_document()
    json.dumps(doc, allow_nan=False)
    assert all(k is None for k in doc["theory"]["kappa"])
    assert all(r is None for r in doc["theory"]["risk_stationary"])


def test_series_keys_aligned_on_record_steps():
    result = smdengine.run(spec(steps=395, record_every=10))
    assert set(result.series) == SERIES_KEYS
    assert result.series["step"] == [*range(0, 395, 10), 395]   # the regular records, then the final state
    for key, values in list(result.series.items()) + list(result.theory.items()):
        assert len(values) == 41, key
    for key in SERIES_KEYS:
        assert all(type(v) in (int, float) for v in result.series[key]), key
    final = {k: v[-1] for k, v in result.series.items()}
    assert all(math.isnan(final[k]) for k in UPDATE_KEYS)
    assert all(math.isfinite(final[k]) for k in SERIES_KEYS - UPDATE_KEYS)


def test_the_final_row_is_the_state_after_the_last_update():
    """A run of 395 updates ends with the state the 40th record of a longer run measures before its update:
    the same risk, loss, |X|² and η/|X|² (one code path for the state: the same numbers to rounding)."""
    short = smdengine.run(spec(seed=6, steps=395, record_every=5)).series
    longer = smdengine.run(spec(seed=6, steps=400, record_every=5)).series
    assert short["step"][-1] == 395 and longer["step"][-2] == 395
    for key in SERIES_KEYS - UPDATE_KEYS - {"step"}:
        assert short[key][-1] == pytest.approx(longer[key][-2], rel=1e-12, abs=0.0), key
        assert short[key][:-1] == longer[key][:-2], key


def test_theory_keys_sgd_two_level(engine_device):
    result = smdengine.run(spec())
    assert set(result.theory) == SGD_THEORY_KEYS
    th = result.theory
    k = theory.kappa(1.0, 2.0, 10, 1.0, 0.1, 0.01)
    assert th["kappa"] == [k] * 41
    assert th["risk_stationary"] == [theory.risk_stationary(k, 10)] * 41
    assert th["au_equilibrium"] == [math.sqrt(2 * 0.1 * 0.01)] * 41
    # the run conditions the norm prediction on its realized initial norms ...
    m0 = initial_norms_sq(spec(), engine_device)
    assert th["norm_sq_theory"][0] == pytest.approx(result.series["norm_sq"][0], rel=1e-12)
    assert th["norm_sq_theory"] == [pytest.approx(norm_sq_oracle(m0, n, 10, 1.0, 0.1, 0.01), rel=1e-12)
                                    for n in range(0, 401, 10)]
    # ... the prediction before a run averages over their law, s²χ²_p (mean p·s² = 10)
    before = smdengine.predict(spec())
    assert before["norm_sq_theory"][0] == pytest.approx(10.0, rel=1e-12)
    assert {k: v for k, v in before.items() if k != "norm_sq_theory"} == {
        k: v for k, v in th.items() if k != "norm_sq_theory"}


def initial_norms_sq(data: dict, device: str):
    """|X₀|² per trial, drawn again the way the engine draws X₀ on ``device`` (the first draw of its
    generator seeded with the run's seed, in the run's dtype) and summed as it sums them (float64, host)."""
    p = data["params"]
    gen = torch.Generator(device=device).manual_seed(data["seed"])
    x = p.get("init_std", 1.0) * torch.randn(p["trials"], p.get("dim", 10), generator=gen, device=device,
                                             dtype=getattr(torch, p.get("dtype", "float64")))
    return x.to("cpu", torch.float64).square().sum(dim=1).numpy()


def norm_sq_oracle(m0: np.ndarray, n: int, dim: int, noise_std: float, lr: float, weight_decay: float,
                   dt: float = 1.0) -> float:
    """E M_n over the trials of initial norms ``m0`` on the default spectrum (a_l, a_h) = (1, 2): their mean at
    n = 0; after it the closed form (theory.norm_sq_relaxation) for n − dt steps from the first update,
    M_dt = (1−ηλ·dt)²M_0 + η²·dt·G/M_0 with G a σ²χ²_{p−1} law scaled to its mean (p−1)σ² + dt·E|PAX̄_0|². On two
    levels |PAX̄|² = (a_h − a_l)²f(1−f), f = X̄₁² ~ Beta(½, (p−1)/2), so E|PAX̄_0|² = (p−1)/(p(p+2)) (the engine
    computes it from the whole spectrum's moments). G's law is integrated against SciPy's density by adaptive
    quadrature (the engine uses a log-spaced trapezoid rule), or taken at its mean where the mean relative jump
    E[η²·dt·E G/M_0²] is under 1e-2 (the engine's rule: there G's spread moves E M_n by O(1e-4))."""
    from scipy import integrate, stats

    if n == 0:
        return float(m0.mean())
    drift_sq = dt * (dim - 1) / (dim * (dim + 2.0))
    noise_sq, keep, jump = (dim - 1) * noise_std**2, (1.0 - lr * weight_decay * dt) ** 2, lr**2 * dt
    if np.mean(jump * (noise_sq + drift_sq) / m0**2) < 1e-2:
        return float(theory.norm_sq_relaxation(keep * m0 + jump * (noise_sq + drift_sq) / m0, n - dt, dim, noise_std,
                                               lr, weight_decay).mean())

    scale = noise_std**2 * (noise_sq + drift_sq) / noise_sq   # G = scale·χ²_{p−1}

    def at(g: float) -> np.ndarray:   # every trial's M_n given G = g, weighted by G's density there
        density = stats.chi2.pdf(g / scale, dim - 1) / scale
        return density * theory.norm_sq_relaxation(keep * m0 + jump * g / m0, n - dt, dim, noise_std, lr, weight_decay)

    return float(integrate.quad_vec(at, 0.0, np.inf, epsrel=1e-12)[0].mean())


def test_theory_keys_momentum(engine_device):
    """With momentum α the norm and the risk follow the SGD closed forms at η/(1−α); the AU is √(2λη/(1+α)).
    The first update's jump, at η/(1−α) = 1, is E[η²L/M_0²] ≈ 0.09 of M_0: G's law is integrated (tolerance
    1e-9: the engine's rule for it is exact to ~1e-11 on χ²'s moments, tests/engine/test_regime.py)."""
    result = smdengine.run(spec(momentum=0.9))
    assert set(result.theory) == SGD_THEORY_KEYS
    assert result.theory["au_equilibrium"] == [pytest.approx(math.sqrt(2 * 0.1 * 0.01 / 1.9))] * 41
    k = theory.kappa(1.0, 2.0, 10, 1.0, 0.1 / (1 - 0.9), 0.01)
    assert result.theory["kappa"] == [pytest.approx(k, rel=1e-12)] * 41
    assert result.theory["risk_stationary"] == [pytest.approx(theory.risk_stationary(k, 10), rel=1e-12)] * 41
    m0 = initial_norms_sq(spec(momentum=0.9), engine_device)
    assert result.theory["norm_sq_theory"] == [
        pytest.approx(norm_sq_oracle(m0, n, 10, 1.0, 0.1 / (1 - 0.9), 0.01), rel=1e-9) for n in range(0, 401, 10)]


def test_theory_explicit_spectrum():
    not_two_level = smdengine.run(spec(dim=4, eigenvalues=[0.5, 1.0, 2.0, 4.0]))
    assert set(not_two_level.theory) == {"au_equilibrium", "norm_sq_theory"}
    assert "risk_stationary" not in not_two_level.summary
    two_level = smdengine.run(spec(dim=4, eigenvalues=[0.5, 2.0, 2.0, 2.0]))
    assert set(two_level.theory) == SGD_THEORY_KEYS
    assert two_level.theory["kappa"][0] == pytest.approx(theory.kappa(0.5, 2.0, 4, 1.0, 0.1, 0.01))


def test_theory_follows_the_schedule(engine_device):
    sched = [{"step": 150, "lr_factor": 0.1}, {"step": 300, "lr_factor": 2.0, "weight_decay_factor": 0.5}]
    th = smdengine.run(spec(lr_schedule=sched)).theory
    steps = list(range(0, 401, 10))
    rates = [(0.1, 0.01) if n < 150 else (0.01, 0.01) if n < 300 else (0.02, 0.005) for n in steps]
    assert th["au_equilibrium"] == [pytest.approx(math.sqrt(2 * lr * wd)) for lr, wd in rates]
    assert th["kappa"] == [pytest.approx(theory.kappa(1.0, 2.0, 10, 1.0, lr, wd)) for lr, wd in rates]
    # the norm prediction is continuous across a decay without rescale
    i = steps.index(150)
    m0 = initial_norms_sq(spec(lr_schedule=sched), engine_device)
    assert th["norm_sq_theory"][i] == pytest.approx(norm_sq_oracle(m0, 150, 10, 1.0, 0.1, 0.01), rel=1e-12)


def test_summary_is_the_tail_mean():
    # final phase starts at 160 → the tail is steps ≥ 160 + (400 − 160)/2 = 280, of the regular records (the
    # final row at 400 is shown, not averaged)
    result = smdengine.run(spec(lr_schedule=[{"step": 160, "lr_factor": 0.5}]))
    steps = result.series["step"]
    idx = [i for i, n in enumerate(steps) if 280 <= n < 400]
    assert len(idx) == 12
    for key, values in list(result.series.items()) + list(result.theory.items()):
        if key == "step":
            continue
        assert result.summary[key] == pytest.approx(sum(values[i] for i in idx) / len(idx), rel=1e-12), key
    assert set(result.summary) == (SERIES_KEYS - {"step"}) | SGD_THEORY_KEYS | {
        "equilibrium_steps_phase0", "equilibrium_steps_phase1", "equilibrium_steps_predicted_phase1"}


def test_initial_point_statistics():
    # X₀ ~ N(0, init_std² I): E|X₀|² = p·init_std², X̄₀ uniform so E f₀ = 1/p, r₀ = 0.9 (sd of f is
    # √(2(p−1)/(p²(p+2))) = 0.122, SE over 2000 trials 0.0027; tolerance 0.015 ≈ 5.5 SE)
    s = smdengine.run(spec(seed=4, trials=2000, steps=10, record_every=10, init_std=3.0)).series
    assert s["risk"][0] == pytest.approx(0.9, abs=0.015)
    assert s["norm_sq"][0] == pytest.approx(90.0, rel=0.03)   # χ²₁₀·9: SE 90·√(2/10)/√2000 = 0.9
    # E[1/χ²₁₀] = 1/8 with relative sd √(2/((k−2)²(k−4)))·8 = 0.58, SE 1.3%; tolerance 6% ≈ 4.6 SE
    assert s["eff_lr"][0] == pytest.approx(0.1 / 9.0 / 8.0, rel=0.06)


# ----------------------------------------------------------------------------- the update itself


def reference_run(seed, trials, dim, eig, sigma, lr, wd, momentum, init_std, steps, record_every,
                  schedule=()):
    """Textbook NRQ SGD/SGDM in float64: g = (P A X̄ + σ P ε)/|X|, P = I − X̄X̄ᵀ, drawing ε in the
    engine's order from generators seeded alike, so the two runs see the same noise: X₀ from torch's,
    ε from NumPy's ziggurat (PCG64), the engine's normal source for float64 on the CPU."""
    gen = torch.Generator().manual_seed(seed)
    noise = np.random.Generator(np.random.PCG64(seed))
    a = torch.tensor(eig, dtype=torch.float64)
    x = init_std * torch.randn(trials, dim, generator=gen, dtype=torch.float64)
    v = torch.zeros_like(x)
    changes = {s["step"]: s for s in schedule}
    out = {k: [] for k in SERIES_KEYS}
    for n in range(steps):
        if n in changes:
            c = changes[n]
            lr, wd = lr * c["lr_factor"], wd * c.get("weight_decay_factor", 1.0)
            if c.get("rescale"):
                x = x * (c["lr_factor"] / c.get("weight_decay_factor", 1.0)) ** 0.25
        eps = torch.from_numpy(noise.standard_normal((trials, dim)))
        norm = x.norm(dim=1, keepdim=True)
        xb = x / norm
        ax = a * xb
        g = (ax - xb * (xb * ax).sum(1, keepdim=True) + sigma * (eps - xb * (xb * eps).sum(1, keepdim=True))) / norm
        if momentum:
            v = momentum * v + g + wd * x
            new = x - lr * v
        else:
            new = x - lr * (g + wd * x)
        if n % record_every == 0:
            nb = new / new.norm(dim=1, keepdim=True)
            dot = (xb * nb).sum(1)
            perp = (nb - xb * dot.unsqueeze(1)).norm(dim=1)
            angle = torch.atan2(perp, dot)
            s = norm.squeeze(1) ** 2
            out["step"].append(n)
            out["risk"].append(1.0 - (xb[:, 0] ** 2).mean().item())
            out["loss"].append(((a * xb * xb).sum(1) / 2).mean().item())
            out["au_mean"].append(angle.mean().item())
            out["au_rms"].append(angle.square().mean().sqrt().item())
            out["norm_sq"].append(s.mean().item())
            out["eff_lr"].append((lr / s).mean().item())
        x = new
    out["final"] = (x, lr)
    return out


def want_final(want: dict, p) -> dict[str, float]:
    """The final row of :func:`reference_run`'s last state."""
    x, lr = want.pop("final")
    a = torch.tensor(p.spectrum(), dtype=torch.float64)
    s = x.square().sum(1)
    xb = x / s.sqrt().unsqueeze(1)
    return {"risk": 1.0 - (xb[:, 0] ** 2).mean().item(), "loss": ((a * xb * xb).sum(1) / 2).mean().item(),
            "norm_sq": s.mean().item(), "eff_lr": (lr / s).mean().item()}


@pytest.mark.parametrize("case", [
    dict(),
    dict(momentum=0.9),
    dict(dim=5, eigenvalues=[0.1, 0.7, 1.0, 1.0, 3.0], noise_std=0.4, init_std=2.0, lr=0.3, weight_decay=0.05),
    dict(lr_schedule=[{"step": 120, "lr_factor": 0.1, "rescale": True},
                      {"step": 250, "lr_factor": 3.0, "weight_decay_factor": 0.5}]),
], ids=["sgd", "sgdm", "spectrum", "schedule"])
@pytest.mark.cpu_stream
def test_update_matches_textbook_implementation(case):
    s = spec(seed=21, trials=40, steps=400, record_every=5, **case)
    p = smdengine.parse_spec(s).params
    got = smdengine.run(s).series
    want = reference_run(21, p.trials, p.dim, p.spectrum(), p.noise_std, p.lr, p.weight_decay, p.momentum,
                         p.init_std, p.steps, p.record_every, case.get("lr_schedule", ()))
    assert got["step"] == [*want["step"], p.steps]
    for key in SERIES_KEYS - {"step"}:
        assert got[key][:-1] == pytest.approx(want[key], rel=1e-9, abs=0.0), key
    for key, value in want_final(want, p).items():   # the state after the last update
        assert got[key][-1] == pytest.approx(value, rel=1e-9, abs=0.0), key


# ----------------------------------------------------------------------------- the angle


def test_angle_tiny_rotation():
    # rotate e₁ by θ = 1e−8 in the (e₁, e₂) plane; cos θ rounds to 1, so arccos(cos) would give 0
    theta = 1e-8
    u = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    v = torch.tensor([[math.cos(theta), math.sin(theta), 0.0]], dtype=torch.float64)
    assert torch.arccos((u * v).sum(1).clamp(-1, 1)).item() == 0.0  # the naive formula fails
    assert _angle(u, v).item() == pytest.approx(theta, rel=1e-12)
    assert _angle(5.0 * u, 0.25 * v).item() == pytest.approx(theta, rel=1e-12)  # scale-free


@pytest.mark.parametrize("theta", [1e-10, 1e-8, 1e-4, 0.3, math.pi / 2, 2.5, math.pi])
def test_angle_random_planes(theta):
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(50, 2, generator=gen, dtype=torch.float64))
    e1, e2 = q[:, 0], q[:, 1]
    u = torch.stack([3.0 * e1, e1, 0.1 * e1])
    v = torch.stack([math.cos(theta) * e1 + math.sin(theta) * e2] * 3) * torch.tensor([[1.0], [7.0], [0.5]],
                                                                                        dtype=torch.float64)
    # rounding of the unit vectors is ~1e−16 per coordinate, so |û − v̂| is good to ~1e−15 absolute
    assert _angle(u, v).tolist() == [pytest.approx(theta, rel=1e-6, abs=1e-14)] * 3


# ----------------------------------------------------------------------------- devices


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present")
def test_cuda_requested_without_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="(?i)cuda"):
        smdengine.run({**spec(), "device": "cuda"})
    with pytest.raises(RuntimeError, match="(?i)cuda"):
        smdengine.resolve_device("cuda")
    assert smdengine.resolve_device("auto").type == "cpu"


def test_run_accepts_a_parsed_spec_and_rejects_bad_dicts():
    parsed = smdengine.parse_spec(spec(seed=2))
    assert same(smdengine.run(parsed).series, smdengine.run(spec(seed=2)).series)
    import pydantic
    with pytest.raises(pydantic.ValidationError):
        smdengine.run(spec(lr=-1.0))


def test_a_kernel_that_fails_to_build_falls_back_to_the_torch_update(monkeypatch):
    """The Triton update compiles at the first step (a C compiler and a supported GPU needed): a failure
    there warns and the torch operations compute that step and the rest, from the untouched state."""
    from smdengine.nrq import stepper as stepper_module

    def build_fails(*_args):
        raise RuntimeError("Failed to find C compiler")

    def make(kernel) -> stepper_module.Stepper:
        monkeypatch.setattr(stepper_module, "_fused_update", lambda _x, _mode: kernel)
        x = torch.randn(5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
        st = stepper_module.Stepper(x, torch.linspace(1.0, 2.0, 7), [1.0], [0.0],
                                    [torch.Generator().manual_seed(1)], [5])
        st.rates = [(0.1, 0.01)]
        st.set_rates()
        return st

    plain, failing = make(None), make(build_fails)
    want = [plain.step() for _ in range(3)]
    with pytest.warns(RuntimeWarning, match="Triton nrq update failed to build .*C compiler.*torch operations"):
        got = [failing.step() for _ in range(3)]
    assert failing.kernel is None
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True)) and torch.equal(failing.x, plain.x)
