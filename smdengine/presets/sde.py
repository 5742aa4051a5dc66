"""Presets on the ``sde`` kind's models (seed 000 Thm 2, seed 001 Fig. 5a, seed 002 Fig. 2, seed 004 App. G).

Every predicted number is computed here from the spec of the child it is compared with (docs/theory.md;
:mod:`smdengine.nrq.theory`, :mod:`smdengine.sde.norm_map`, :mod:`smdengine.sde.normalized_linear`); tolerances
are Student-t multiples of a Monte-Carlo standard error (over seeds, or over the independent trials of one run),
except where a run is deterministic, and then the rule says what bounds the error instead.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

from smdengine.presets._checks import CONFIDENCE, Missing, Outcome, Stat, Study, over_seeds, t_factor

QUICK_SEEDS = list(range(8))
NRQ_BASE: dict[str, Any] = {"model": "nrq", "dim": 10, "eig_low": 1.0, "eig_high": 2.0, "noise_std": 1.0,
                            "dtype": "float64", "record_every": 100}


def sde_study(name: str, params: dict[str, Any], seeds: list[int], **axes: Any) -> dict[str, Any]:
    return {"name": name, "base": {"kind": "sde", "seed": 0, "params": params}, **axes, "seeds": seeds}


def _checkdefs(*pairs: tuple[str, str]):
    from smdengine.presets import CheckDef
    return tuple(CheckDef(i, c) for i, c in pairs)


def _panel(title: str, metric: str, x: str = "step", log_y: bool = False, points: tuple[int, ...] | None = None):
    from smdengine.presets import PanelDef
    return PanelDef(title, metric, x=x, log_y=log_y, points=points)


def _preset(**fields: Any):
    from smdengine.presets import Preset
    return Preset(**fields)


def _difference(a: Stat, b: Stat) -> tuple[float, float, str]:
    k = max(a.k, b.k)
    return a.mean - b.mean, k * math.hypot(a.se, b.se), f"{k:.2f} × √(se_a² + se_b²), each {a.how}"


# ----------------------------------------------------------------------------- sde-nrq-stationary

STATIONARY = {"lr": 0.1, "weight_decay": 0.01, "init_std": 0.82, "steps": 20_000, "f_bins": 50}
STATIONARY_DTS = (1.0, 0.5)
NULL_DRAWS = 20_000   # Monte-Carlo draws of the goodness-of-fit statistic under the null


def _stationary_risk(p: Any, lr_factor: float = 1.0) -> float:
    from smdengine.nrq import theory
    lo, hi = p.two_level()
    final = p.phases()[-1]
    return theory.risk_stationary(theory.kappa(lo, hi, p.dim, p.noise_std, final.lr * lr_factor,
                                               final.weight_decay), p.dim)


def _tail_risk(s: Study, point: int) -> Outcome:
    stat = s.tail(point, "risk")
    p = s.params(point)
    predicted = _stationary_risk(p)
    return Outcome(predicted, stat.mean, stat.tolerance, stat.rule(), abs(_stationary_risk(p, 4.0) - predicted),
                   "|r*(ηλ) − r*(4ηλ)|")


def _bin_masses(p: Any, lr_factor: float = 1.0) -> list[float]:
    from smdengine.nrq import theory
    lo, hi = p.two_level()
    final = p.phases()[-1]
    kappa = theory.kappa(lo, hi, p.dim, p.noise_std, final.lr * lr_factor, final.weight_decay)
    edges = [i / p.f_bins for i in range(p.f_bins + 1)]
    return [d / p.f_bins for d in theory.f_density_bins(kappa, p.dim, edges)]


def _f_law(s: Study, point: int) -> Outcome:
    """Total variation ½Σ|p̂_b − p*_b| between the seed-mean histogram of f (bin masses) and ρ* (bin-averaged by
    quadrature); the tolerance: its 99.73% quantile under the null p̂_b = p*_b + se_b·t_{n−1} (independent bins,
    se_b the standard error over seeds of bin b), by Monte-Carlo with a fixed generator."""
    import numpy as np
    members = s.members(point)
    p = s.params(point)
    masses = []
    for child, doc in members:
        hist = (doc.get("distributions") or {}).get("f_histogram")
        if not hist or not hist.get("samples"):
            raise Missing(f"point {point}: child {child.index} has no f_histogram")
        masses.append([d / p.f_bins for d in hist["density"]])
    m = np.asarray(masses)
    n = len(m)
    if n < 2:
        raise Missing("a standard error needs at least 2 seeds")
    expected = np.asarray(_bin_masses(p))
    se = m.std(axis=0, ddof=1) / math.sqrt(n)
    tv = 0.5 * float(np.abs(m.mean(axis=0) - expected).sum())
    rng = np.random.default_rng(12345)
    null = 0.5 * np.abs(rng.standard_t(n - 1, size=(NULL_DRAWS, len(se))) * se).sum(axis=1)
    tolerance = float(np.quantile(null, CONFIDENCE))
    neighbour = 0.5 * float(np.abs(np.asarray(_bin_masses(p, 4.0)) - expected).sum())
    return Outcome(0.0, tv, tolerance,
                   f"the {CONFIDENCE:.2%} quantile of the total variation under the null (each bin mass = ρ*'s + "
                   f"se_b·t_{n - 1}, se_b over {n} seeds: sample sd/√{n}; {NULL_DRAWS} draws, fixed generator)",
                   neighbour, "the total variation between ρ* at ηλ and at 4ηλ",
                   note=f"null median {float(np.median(null)):.3g}")


def _stationary(s: Study) -> dict[str, Callable[[], Outcome]]:
    out: dict[str, Callable[[], Outcome]] = {}
    for i in range(len(STATIONARY_DTS)):
        out[f"tail-risk-{i}"] = partial(_tail_risk, s, i)
        out[f"f-law-{i}"] = partial(_f_law, s, i)
    return out


def _stationary_preset():
    e = STATIONARY
    params = {**NRQ_BASE, **{k: v for k, v in e.items()}}
    points = [{"params.dt": dt} for dt in STATIONARY_DTS]
    checks = []
    for i, dt in enumerate(STATIONARY_DTS):
        checks += [(f"tail-risk-{i}", f"With Euler–Maruyama step dt = {dt:g} the SDE's tail risk 1 − E f is the "
                                      "stationary r* = ∫(1−f)ρ* (seed 000 Thm 2, Cor 1; κ corrected in docs/theory.md)."),
                   (f"f-law-{i}", f"With dt = {dt:g} the law of f = X̄₁² over the tail is ρ*(f) ∝ e^{{2κf}} f^{{−½}}"
                                  "(1−f)^{(p−3)/2}: the histogram's total variation from ρ* is within its Monte-Carlo "
                                  "null (seed 000 Thm 2).")]
    return _preset(
        id="sde-nrq-stationary", title="NRQ SDE: the stationary law of the progress index f",
        seed="000", figure="Thm 2 (no figure)",
        description=(
            f"The NRQ SDE (seed 000 eq. 9; p 10, a (1, 2), σ 1) at η {e['lr']:g}, λ {e['weight_decay']:g}, started "
            f"at its equilibrium norm and integrated with dt ∈ {{{', '.join(f'{d:g}' for d in STATIONARY_DTS)}}} "
            f"(dt 1 is SGD itself). Over the last half of {e['steps']} steps the progress index f = X̄₁² follows "
            "ρ*(f) ∝ e^{2κf} f^{−½}(1−f)^{(p−3)/2} with κ = (a_h−a_l)√(p−1)/(2σ√(2ηλ)) (the seed drops a_h−a_l), "
            "and the risk is its quadrature r*. Checks: tail risk vs r* and a goodness-of-fit statistic (total "
            "variation of the binned histogram from ρ*, against its Monte-Carlo null over seeds)."),
        kinds=("sde",), tier=1, exploratory=False,
        sizes={"quick": sde_study("sde-nrq-stationary (quick)", {**params, "trials": 250}, QUICK_SEEDS, points=points),
               "paper": sde_study("sde-nrq-stationary (paper)", {**params, "trials": 2000}, QUICK_SEEDS,
                                  points=points)},
        checks=_checkdefs(*checks),
        panels=(_panel("Risk r_t", "risk", log_y=True), _panel("Continuous angular update", "au_rms", log_y=True),
                _panel("Squared norm |X|²", "norm_sq", log_y=True)),
        gpu_sizes=("paper",))


# ----------------------------------------------------------------------------- toy2d-chaos

TOY: dict[str, Any] = {"lr": 0.1, "weight_decay": 0.5, "center": [0.1, 1.0], "cloud_radius": 1e-6, "trials": 100, "steps": 400,
       "record_every": 1}
FLOW_DT = 0.01
DECADES = 2.0    # "orders of magnitude": the claim's threshold, at least two decades of growth


def _decades(s: Study, point: int) -> list[float]:
    members = s.members(point)
    out = []
    for child, doc in members:
        first = doc["series"]["spread"][0]
        top = (doc.get("summary") or {}).get("spread_max")
        if top is None or not first:
            raise Missing(f"point {point}: child {child.index} has no spread")
        out.append(math.log10(top / first))
    return out


def _gd_growth(s: Study) -> Outcome:
    stat = over_seeds(_decades(s, 0))
    return Outcome(DECADES, stat.mean, stat.tolerance, stat.rule() + "; reproduced when above the threshold by more",
                   sense="above", note="measured: mean over seeds of log₁₀(largest spread / initial spread)")


def _flow_growth(s: Study) -> Outcome:
    flow, gd = over_seeds(_decades(s, 1)), over_seeds(_decades(s, 0))
    return Outcome(0.0, flow.mean, flow.tolerance, flow.rule() + "; the flow contracts: predicted ≤ 0, read as 0",
                   gd.mean, "the decades of growth under GD") if flow.mean > 0 else Outcome(
        0.0, 0.0, flow.tolerance, flow.rule() + "; the flow contracts (growth ≤ 0 decades counts as 0)",
        gd.mean, "the decades of growth under GD", note=f"measured {flow.mean:.3g} decades (≤ 0)")


def _largest_rise(values: list[float]) -> float:
    return max((b - a for a, b in zip(values, values[1:], strict=False)), default=0.0)


def _flow_monotone(s: Study) -> Outcome:
    members = s.members(1)
    rises = [_largest_rise(doc["series"]["loss"]) for _, doc in members]
    scale = max(max(doc["series"]["loss"]) for _, doc in members)
    gd_rise = max(_largest_rise(doc["series"]["loss"]) for _, doc in s.members(0))
    return Outcome(0.0, max(0.0, max(rises)), 1e-12 * scale,
                   "float64 rounding of a deterministic, monotone flow (10⁻¹² × the largest loss); no Monte-Carlo "
                   "error: the measured value is the largest rise between records over all seeds",
                   gd_rise, "the largest loss rise between records under GD",
                   note=f"largest rise under GD {gd_rise:.3g}")


def _toy(s: Study) -> dict[str, Callable[[], Outcome]]:
    return {"gd-spread-grows": partial(_gd_growth, s), "flow-spread-does-not-grow": partial(_flow_growth, s),
            "flow-loss-monotone": partial(_flow_monotone, s)}


def _toy_preset():
    points = [{"params.integrator": "gd"}, {"params.integrator": "flow", "params.dt": FLOW_DT}]
    checks = _checkdefs(
        ("gd-spread-grows", f"GD + WD (η {TOY['lr']:g}, λ {TOY['weight_decay']:g}) on x²/(x²+y²) is chaotic near zero "
                            f"loss: a cloud of starts of radius {TOY['cloud_radius']:g} spreads by orders of magnitude "
                            f"(at least {DECADES:g} decades) (seed 001 §4, Fig. 5a)."),
        ("flow-spread-does-not-grow", "The gradient flow of the same loss (Euler, dt = 0.01) does not spread the "
                                      "cloud (seed 001 Fig. 5a): its growth is 0 decades or less."),
        ("flow-loss-monotone", "Along the gradient flow the loss decreases monotonically (seed 001 Fig. 5a)."),
    )
    return _preset(
        id="toy2d-chaos", title="Toy 2-d loss: GD with weight decay is chaotic, the gradient flow is not",
        seed="001", figure="Fig. 5a",
        description=(
            f"GD with weight decay (η {TOY['lr']:g}, λ {TOY['weight_decay']:g}) on the scale-invariant L = x²/(x²+y²) "
            f"from {TOY['trials']} starts within {TOY['cloud_radius']:g} of ({TOY['center'][0]}, {TOY['center'][1]}), against the "
            f"gradient flow (Euler with dt {FLOW_DT:g}). Weight decay shrinks |w| until the effective step η/|w|² "
            "makes an update at zero loss unstable (`stable_until`), after which GD amplifies the cloud's tiny "
            "differences by many orders of magnitude while the flow's loss falls monotonically to 0. The claim is "
            f"qualitative; the check's threshold, {DECADES:g} decades, is what 'orders of magnitude' means here, "
            "and the tolerance is the standard error of the log-growth over seeds (independent clouds)."),
        kinds=("sde",), tier=1, exploratory=False,
        sizes={"quick": sde_study("toy2d-chaos (quick)", {"model": "toy2d", **TOY}, QUICK_SEEDS, points=points),
               "paper": sde_study("toy2d-chaos (paper)", {"model": "toy2d", **TOY}, QUICK_SEEDS, points=points)},
        checks=checks,
        panels=(_panel("Spread of the cloud", "spread", log_y=True), _panel("Loss", "loss", log_y=True),
                _panel("Squared norm", "norm_sq", log_y=True)))


# ----------------------------------------------------------------------------- norm-map-sgd / norm-map-sgdm

NORM_MAP = {"lr": 0.1, "weight_decay": 0.001, "init_norm_sq": 10.0, "trials": 4}
DRIVES = (("constant", {"noise": "none", "sine_amplitude": 0.0}),
          ("noise", {"noise": "uniform", "sine_amplitude": 0.0}),
          ("sine", {"noise": "none", "sine_amplitude": 1.0}),
          ("sine+noise", {"noise": "uniform", "sine_amplitude": 1.0}))
NORM_MAP_SIZES = {"quick": (100_000, 2 * math.pi * 1e4, 100), "paper": (1_000_000, 2 * math.pi * 1e5, 1000)}
NORM_MAP_SEEDS = list(range(5))


def _fixed_point(p: Any, mean_l: float) -> float:
    from smdengine.sde.norm_map import equilibrium
    return float(equilibrium(mean_l, p.lr, p.weight_decay, p.momentum))


def _linear_rate(p: Any) -> float:
    """Spectral radius of the map linearized at its fixed point (constant L), by code: the SGD map's
    1 − 4λη; the SGDM 3-state map A − (Lη²/a*²)e e₀ᵀ."""
    import numpy as np
    le, a = p.lr * p.weight_decay, p.momentum
    if a == 0:
        return 1.0 - 4.0 * le
    x = _fixed_point(p, p.unit_grad_sq.mean)
    b = 1.0 + a - le
    jac = np.array([[b * b, -2 * a * b, a * a], [b, -a, 0.0], [1.0, 0.0, 0.0]])
    jac[0, 0] -= p.unit_grad_sq.mean * p.lr**2 / x**2
    return float(max(abs(np.linalg.eigvals(jac))))


def _const_equilibrium(s: Study, point: int) -> Outcome:
    p = s.params(point)
    values = [float(doc["summary"]["norm_sq"]) for _, doc in s.members(point)]
    x = _fixed_point(p, p.unit_grad_sq.mean)
    transient = abs(p.init_norm_sq - x) * _linear_rate(p) ** p.tail_start()
    return Outcome(x, values[0], transient + 1e-12 * x,
                   "deterministic run (no noise, no Monte-Carlo error): the transient left at the tail's start, "
                   "|x₀ − x*|·ρ^{steps/2} (ρ the linearized map's spectral radius), + 10⁻¹² x* for float64 rounding",
                   x - _fixed_point(p, p.unit_grad_sq.mean - p.unit_grad_sq.noise_half_width / 10),
                   "the change of x* for a 3% change of L")


def _noise_equilibrium(s: Study, point: int) -> Outcome:
    p = s.params(point)
    stat = s.tail(point, "norm_sq")
    x = _fixed_point(p, p.unit_grad_sq.mean)
    return Outcome(x, stat.mean, stat.tolerance, stat.rule(),
                   x - _fixed_point(p, p.unit_grad_sq.mean * 0.97), "the change of x* for a 3% change of L")


def _relaxation_time(s: Study, point: int) -> Outcome:
    """Per seed, the time constant 1/ρ of (norm_sq)² ≈ A e^{−ρt} + c fitted over the first 5 time constants (noise
    point: independent noise per seed). |w|⁴, not |w|², relaxes exponentially from far away (docs/theory.md: u = x² obeys
    u ← (1−4λη)u + 2Lη² up to O(λ²η²)). Predicted: −1/ln ρ, ρ the spectral radius of the map linearized at its fixed
    point (code); docs/theory.md's (1−α)/(4λη) is its first order in λη/(1−α)."""
    import numpy as np

    from smdengine._science import relaxation_time
    from smdengine.presets.nrq import _fit_rate
    p = s.params(point)
    first_order = relaxation_time(p.lr, p.weight_decay, p.momentum)
    predicted = -1.0 / math.log(_linear_rate(p))
    steps, values = s.series(point, "norm_sq")
    t = np.asarray(steps, dtype=np.float64)
    head = (t >= predicted / 2) & (t <= 6 * predicted)   # past the momentum's start-up transient
    if head.sum() < 10:
        raise Missing("fewer than 10 records within 6 time constants")
    # the fit reads a decaying excess: a rising norm (x₀ below x*) is fitted as −|w|⁴
    fits = [np.sign(v[0] - v[-1]) * np.square(np.asarray(v)[head]) for v in values]
    stat = over_seeds([1.0 / _fit_rate(t[head], y) for y in fits])
    return Outcome(predicted, stat.mean, stat.tolerance, stat.rule() + "; each seed's time from a least-squares fit "
                   "of norm_sq² = A e^{−t/T} + c over T/2 ≤ t ≤ 6T (T predicted)", predicted / 2,
                   "half the time constant (a factor-2 error, as between the seeds' bounds)",
                   note=f"docs/theory.md's first-order (1−α)/(4λη) = {first_order:.1f}")


def _lag(p: Any) -> tuple[float, float]:
    """Largest |norm_sq/x*(E L_t) − 1| over the tail predicted by linear response: x² (SGD; a* for SGDM)
    relaxes linearly to u*(t) ∝ E L_t with time constant T = (1−α)/(4λη), so the sine's steady state is
    u*(t) lagged by atan(ωT) and shrunk by 1/√(1 + (ωT)²). Returns (predicted, relative model error a/L̄)."""
    import numpy as np

    from smdengine._science import relaxation_time
    g = p.unit_grad_sq
    w = 2 * math.pi / g.sine_period * relaxation_time(p.lr, p.weight_decay, p.momentum)
    t = np.arange(math.ceil(p.tail_start() / p.record_every) * p.record_every, p.steps, p.record_every,
                  dtype=np.float64)
    phase = 2 * math.pi * t / g.sine_period
    ratio = g.sine_amplitude / g.mean
    star = 1.0 + ratio * np.sin(phase)
    resp = 1.0 + ratio * (np.sin(phase) - w * np.cos(phase)) / (1.0 + w * w)
    return float(np.abs(np.sqrt(resp / star) - 1.0).max()), ratio


def _tracking(s: Study, point: int) -> Outcome:
    p = s.params(point)
    predicted, ratio = _lag(p)
    values = [float(doc["summary"]["rel_error_max_tail"]) for _, doc in s.members(point)]
    return Outcome(predicted, values[0], ratio * predicted,
                   f"deterministic run (no Monte-Carlo error): the linear-response lag neglects terms of relative "
                   f"order a/L̄ = {ratio:g} (second order in the drive's amplitude), so a/L̄ × the predicted lag",
                   predicted, "the lag itself (0 for quasi-static tracking)")


def _norm_map(s: Study) -> dict[str, Callable[[], Outcome]]:
    return {"equilibrium-constant": partial(_const_equilibrium, s, 0),
            "equilibrium-noise": partial(_noise_equilibrium, s, 1),
            "relaxation-time": partial(_relaxation_time, s, 1),
            "tracks-slow-drive": partial(_tracking, s, 2)}


def _norm_map_preset(momentum: float):
    sgdm = momentum > 0
    pid = "norm-map-sgdm" if sgdm else "norm-map-sgd"
    name = "SGDM" if sgdm else "SGD"
    fixed = ("√(Lη/(λ(1−α)(2−λη/(1+α))))" if sgdm else "√(Lη/(2λ))")
    tau = "(1−α)/(4λη)" if sgdm else "1/(4λη)"
    points = [{"params.unit_grad_sq." + k: v for k, v in drive.items()} for _, drive in DRIVES]
    sizes = {}
    for size, (steps, period, record) in NORM_MAP_SIZES.items():
        record = record // 10 if sgdm else record   # ≥ 10 records per (1−α)/(4λη)
        params = {"model": "norm_map", **NORM_MAP, "momentum": momentum, "steps": steps, "record_every": record,
                  "unit_grad_sq": {"mean": 10.0, "noise_half_width": 3.0, "sine_period": period}}
        sizes[size] = sde_study(f"{pid} ({size})", params, NORM_MAP_SEEDS, points=points)
    checks = _checkdefs(
        ("equilibrium-constant", f"With L_t = 10 the {name} norm map settles at its fixed point x* = {fixed} "
                                 "(seed 004 App. G, Fig. 3–4; seed 003 Thm 1/2)."),
        ("equilibrium-noise", "With L_t = 10 + U(−3, 3) the mean norm settles at x* of E L = 10 (seed 004 App. G)."),
        ("relaxation-time", f"|w|⁴ relaxes to x*² with time constant ≈ {tau} (seed 003/004, docs/theory.md; exactly −1/ln ρ of "
                            "the linearized map), measured by an exponential fit to the noisy run's series."),
        ("tracks-slow-drive", "With L_t = 10 + sin(2πt/period) the norm tracks x*(L_t) with the linear-response lag "
                              "of its relaxation time (seed 004 App. G, Fig. 3–4: the norm follows a slowly varying L)."),
    )
    fig = "Fig. 4 (004 App. G Fig. 4; 003 Fig. 5)" if sgdm else "App. G Fig. 3 (003 Fig. 4)"
    return _preset(
        id=pid, title=f"{name} norm map: equilibrium, relaxation and tracking of the unit-gradient norm",
        seed="004", figure=fig,
        description=(
            f"Seed 004's synthetic {name} norm map at η 0.1, λ 0.001{', α ' + format(momentum, 'g') if sgdm else ''}, "
            "x₀ = 10, driven by four kinds of L_t: 10, 10 + U(−3, 3), 10 + sin, 10 + sin + U(−3, 3) (quick: period "
            "2π·10⁴ over 10⁵ steps; paper: the seed's 2π·10⁵ over 10⁶). The norm settles at the map's fixed point "
            f"{fixed} with time constant {tau}, and follows a slow L_t with a small lag. "
            + ("Finding: eq. 185 truncates (1−λη)² to 1−2λη, so the SGD map's fixed point is √(Lη/(2λ)), not Thm 1's "
               "√(Lη/(λ(2−λη))) (a 5·10⁻⁵ relative difference, below what the figure shows but above float64 "
               "rounding); the checks use the map's own fixed point." if not sgdm else
               "The 3-state map is exact for heavy-ball SGDM, and its fixed point is seed 003 Thm 2's.")),
        kinds=("sde",), tier=1, exploratory=False, sizes=sizes, checks=checks,
        panels=(_panel("Squared weight norm (constant and noisy L)", "norm_sq", points=(0, 1)),
                _panel("Squared weight norm (slow sine L)", "norm_sq", points=(2, 3)),
                _panel("E L_t", "unit_grad_sq_mean")))


# ----------------------------------------------------------------------------- normalized-linear-time-scaling

SCALING = {"dim": 10, "noise_std": 0.3, "weight_decay": 0.05, "init_norm": 1.0, "data_seed": 0}
SCALING_LRS = (1e-2, 1e-3, 1e-4)
SCALING_SIZES = {"quick": (1.5, 300), "paper": (4.0, 1000)}   # (τ reached by the smallest η, trials)
RECORDS = 400


def scaling_points(lrs: tuple[float, ...], tau_end: float) -> list[dict[str, Any]]:
    """One point per η: each runs to t(τ_end) of the smallest η's time change, or longer, far enough to
    cover that run's ηt as well (equal-ηt comparison)."""
    import numpy as np

    from smdengine.sde.normalized_linear import inverse_time_change
    wd, r0 = SCALING["weight_decay"], SCALING["init_norm"]
    smallest = min(lrs)
    lr_time = smallest * float(inverse_time_change(np.array([tau_end]), smallest, wd, r0)[0])
    out = []
    for lr in lrs:
        # the smallest η runs 2% past t(τ_end); the others 6% past what they must cover, so that their last
        # record (one record_every before the end) still lies beyond the smallest η's last τ and ηt
        margin = 1.02 if lr == smallest else 1.06
        steps = max(float(inverse_time_change(np.array([tau_end]), lr, wd, r0)[0]), 1.02 * lr_time / lr) * margin
        every = max(1, int(steps / RECORDS))
        out.append({"params.lr": lr, "params.steps": int(math.ceil(steps / every) * every),
                    "params.record_every": every})
    return out


def scaling_study(name: str, lrs: tuple[float, ...], tau_end: float, trials: int) -> dict[str, Any]:
    params = {"model": "normalized_linear", **SCALING, "integrator": "sgd", "trials": trials,
              "record_trials": trials}
    return sde_study(name, params, [0], points=scaling_points(lrs, tau_end))


def _cv_at(s: Study, point: int, x: str, value: float) -> Stat:
    """Circular variance 1 − |mean e^{iθ}| of the point's trials where its ``x`` (tau or lr_time) equals
    ``value``, linear between the two records around it, with its standard error over the independent trials:
    sd(cos(θ_i − θ̄))/√n (delta method; θ̄ the mean direction). The runs of a point differ only in their seed:
    the same inputs (data_seed) and start, independent noise, so the trials of all its seeds are pooled (n =
    seeds × trials), as one run with that many trials."""
    import numpy as np
    members = s.members(point)
    p = s.params(point)
    first = members[0][1]
    xs = np.asarray(first["theory"]["tau"] if x == "tau" else first["theory"]["lr_time"])
    thetas = []
    for child, doc in members:
        theta = doc["series"]["theta"]
        if len(theta[0]) != p.trials:
            raise Missing(f"point {point}: child {child.index} records {len(theta[0])} of {p.trials} trials; "
                          "record_trials must equal trials to compute the standard error over trials")
        if len(theta) != len(first["series"]["theta"]):
            raise Missing(f"point {point}: child {child.index} has {len(theta)} records, child "
                          f"{members[0][0].index} {len(first['series']['theta'])}")
        thetas.append(theta)
    j = int(np.searchsorted(xs, value))
    if j == 0 or j >= len(xs):
        raise Missing(f"point {point}: {x} = {value:.4g} outside the run ({xs[0]:.4g}–{xs[-1]:.4g})")
    w = (value - xs[j - 1]) / (xs[j] - xs[j - 1])

    def stat(i: int) -> tuple[float, float]:
        th = np.concatenate([np.asarray(theta[i], dtype=np.float64) for theta in thetas])
        c, sn = np.cos(th).mean(), np.sin(th).mean()
        dev = np.cos(th - math.atan2(sn, c))
        return 1.0 - math.hypot(c, sn), float(dev.std(ddof=1) / math.sqrt(len(th)))

    (c0, e0), (c1, e1) = stat(j - 1), stat(j)
    runs, n = len(thetas), p.trials * len(thetas)
    where = ("of one run" if runs == 1 else
             f"of its {runs} seeds pooled ({p.trials} each: the same inputs and start, independent noise)")
    return Stat((1 - w) * c0 + w * c1, max(e0, e1), t_factor(n - 1),
                f"over the {n} independent trials {where}: sd(cos(θ_i − θ̄))/√{n}, the larger of the two records "
                "interpolated between")


def _reference(s: Study) -> tuple[int, int, float, float]:
    """(point of the second-smallest η, point of the smallest, τ_c, ηt_c): the comparison time is the smallest η's
    last record, τ_c its τ and ηt_c its ηt."""
    lrs = {q: s.params(q).lr for q in s.by_point}
    if len(lrs) < 2:
        raise Missing("the time-scaling checks need two learning rates")
    order = sorted(lrs, key=lrs.__getitem__)
    small, other = order[0], order[1]
    doc = s.members(small)[0][1]
    return other, small, float(doc["theory"]["tau"][-1]), float(doc["theory"]["lr_time"][-1])


def _finding(s: Study, tau_c: float) -> str | None:
    lrs = {q: s.params(q).lr for q in s.by_point}
    order = sorted(lrs, key=lrs.__getitem__)
    if len(order) < 3:
        return None
    try:
        big, mid = _cv_at(s, order[-1], "tau", tau_c), _cv_at(s, order[1], "tau", tau_c)
    except Missing:
        return None
    return (f"finite-ηλ correction: at τ = {tau_c:.3g} the circular variance at η = {lrs[order[-1]]:g} is "
            f"{big.mean / mid.mean - 1:+.1%} relative to η = {lrs[order[1]]:g} ({(big.mean - mid.mean) / math.hypot(big.se, mid.se):+.1f} "
            "standard errors)")


def _equal_tau(s: Study) -> Outcome:
    other, small, tau_c, lr_time_c = _reference(s)
    a, b = _cv_at(s, other, "tau", tau_c), _cv_at(s, small, "tau", tau_c)
    diff, tol, rule = _difference(a, b)
    # the effect: how far apart the two are at equal ηt (what aligning by τ instead of ηt changes)
    c = _cv_at(s, other, "lr_time", lr_time_c)
    return Outcome(0.0, diff, tol, rule, c.mean - b.mean,
                   "the difference of the same two circular variances at equal ηt", note=_finding(s, tau_c))


def _equal_lr_time(s: Study) -> Outcome:
    """At ηt_c the larger-η run is further along in τ; the τ-alignment predicts its excess of circular variance
    over the smaller η: CV_other(τ_other(ηt_c)) − CV_other(τ_small(ηt_c)) read on the larger-η run's own curve."""
    other, small, tau_c, lr_time_c = _reference(s)
    a, b = _cv_at(s, other, "lr_time", lr_time_c), _cv_at(s, small, "lr_time", lr_time_c)
    diff, tol, rule = _difference(a, b)
    predicted = a.mean - _cv_at(s, other, "tau", tau_c).mean
    return Outcome(predicted, diff, tol, rule, predicted,
                   "the predicted difference (0 if runs aligned by ηt)",
                   note=f"ηt_c = {lr_time_c:.4g}, τ of the smaller η there = {tau_c:.3g}")


def _scaling(s: Study) -> dict[str, Callable[[], Outcome]]:
    return {"equal-tau-agree": partial(_equal_tau, s), "equal-lr-time-differ": partial(_equal_lr_time, s)}


def _scaling_preset():
    lrs = SCALING_LRS
    sizes = {size: scaling_study(f"normalized-linear-time-scaling ({size})", lrs, tau, trials)
             for size, (tau, trials) in SCALING_SIZES.items()}
    checks = _checkdefs(
        ("equal-tau-agree", f"Runs at η = {lrs[1]:g} and {lrs[2]:g} have the same circular variance of the angle θ on "
                            "the solution circle at equal τ(t) = ½ ln(1 + (e^{4ηλt} − 1)η/(2λ)) (seed 002 Fig. 2, "
                            "eq. 12: the limiting diffusion runs on τ)."),
        ("equal-lr-time-differ", "At equal ηt the two differ, by what the τ-alignment predicts: the larger η is "
                                 "½ ln 10 further along in τ (seed 002 Fig. 2: ηt does not align the runs)."),
    )
    return _preset(
        id="normalized-linear-time-scaling", title="Normalized linear model: τ, not ηt, aligns the learning rates",
        seed="002", figure="Fig. 2",
        description=(
            "Seed 002's normalized linear model (D 10, N 8, σ̂ 0.3, λ 0.05, |x₀| 1, the same inputs for every η) "
            f"with SGD at η ∈ {{{', '.join(f'{v:g}' for v in lrs)}}}: the direction diffuses on the circle of "
            "zero-loss directions, and the runs line up when plotted against the time change τ(t) (eq. 12), "
            "not against ηt (the smaller η is ln 10/(4λ) ≈ 11.5 units of ηt behind per decade). Quick size: the "
            "smallest η runs to τ = 1.5 (~0.5M steps; paper: τ = 4, about 0.9M steps on a GPU). The check compares "
            "η = 1e−3 with 1e−4 at the smallest η's last record, at equal τ (agreement within the Monte-Carlo "
            "error over trials; with several seeds, the trials of every seed pooled: the runs share their inputs) "
            "and at equal ηt (the predicted disagreement). Finding: η = 1e−2 (ηλ = 5e−4) is not "
            "in the small-ηλ limit: docs/theory.md measured its circular variance 4–19% above η = 1e−3's at equal τ (the "
            "off-manifold spread, ∝ √(ηλ), shrinks the circle's projected radius). In this project's quick run "
            "(300 trials, τ = 1.59) the difference was −9.9% at 1.0 standard error, not resolved at that size; "
            "each run's measured value is in the note of the equal-τ check."),
        kinds=("sde",), tier=1, exploratory=False, sizes=sizes, checks=checks,
        panels=(_panel("Circular variance vs ηt", "circular_variance", x="lr_time"),
                _panel("Circular variance vs τ", "circular_variance", x="tau"),
                _panel("Weight norm", "norm", x="tau", log_y=True)),
        gpu_sizes=("paper",),
        min_seeds=1)   # the error is over trials; more seeds add their trials to the pool (_cv_at)


PRESETS: list[tuple[Any, Callable[[Study], dict[str, Callable[[], Outcome]]]]] = [
    (_stationary_preset(), _stationary),
    (_toy_preset(), _toy),
    (_norm_map_preset(0.0), _norm_map),
    (_norm_map_preset(0.9), _norm_map),
    (_scaling_preset(), _scaling),
]
