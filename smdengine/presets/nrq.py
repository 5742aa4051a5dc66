"""Presets on the ``nrq`` kind (seed 000's Noisy Rayleigh Quotient; seed 004 App. E; seed 001 App. E).

Every predicted number is computed here from the spec of the child it is compared with, by the formulas of
design §4 (:mod:`smdengine.nrq.theory`, :func:`smdengine._science.au_equilibrium`); nothing is typed from
the catalog. Each point runs with several seeds, and tolerances are the standard error over them.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

from smdengine.presets._checks import Missing, Outcome, Stat, Study, over_seeds, ratio

# shared by the tier-1 NRQ presets (shared/presets.md §3): p 10, a (1, 2), σ 1, float64, record every 100
NRQ_BASE: dict[str, Any] = {"dim": 10, "eig_low": 1.0, "eig_high": 2.0, "noise_std": 1.0, "dtype": "float64",
                            "record_every": 100}
QUICK_SEEDS = list(range(8))


def equilibrium_init_std(lr: float, weight_decay: float, momentum: float = 0.0, dim: int = 10,
                         noise_std: float = 1.0) -> float:
    """init_std with E|X₀|² = p·s² equal to the equilibrium |X|² √((p−1)σ²η/(2λ(1−α)))
    (:func:`smdengine.nrq.theory.norm_sq_equilibrium` at η/(1−α)), rounded to 4 digits."""
    norm_sq = math.sqrt((dim - 1) * noise_std**2 * lr / (1.0 - momentum) / (2.0 * weight_decay))
    return float(f"{math.sqrt(norm_sq / dim):.4g}")


def study(name: str, params: dict[str, Any], seeds: list[int], **axes: Any) -> dict[str, Any]:
    return {"name": name, "base": {"kind": "nrq", "seed": 0, "params": {**NRQ_BASE, **params}}, **axes,
            "seeds": seeds}


# ----------------------------------------------------------------------------- predictions


def final_rates(p: Any) -> tuple[float, float]:
    final = p.phases()[-1]
    return final.lr, final.weight_decay


def predicted_risk(p: Any) -> float:
    """r* of the final phase by quadrature; with momentum α the SGD formula at η/(1−α) (design §4)."""
    from smdengine.nrq import theory
    levels = p.two_level()
    if levels is None:
        raise Missing("the stationary risk needs a two-level spectrum")
    lr, wd = final_rates(p)
    lr_eff = lr / (1.0 - getattr(p, "momentum", 0.0))
    return theory.risk_stationary(theory.kappa(levels[0], levels[1], p.dim, p.noise_std, lr_eff, wd), p.dim)


def predicted_au(p: Any) -> float:
    from smdengine._science import au_equilibrium
    lr, wd = final_rates(p)
    return au_equilibrium(lr, wd, getattr(p, "momentum", 0.0))


def predicted_norm_sq(p: Any) -> float:
    from smdengine.nrq import theory
    lr, wd = final_rates(p)
    return theory.norm_sq_equilibrium(p.dim, p.noise_std, lr / (1.0 - getattr(p, "momentum", 0.0)), wd)


def _gap(values: dict[int, float], point: int) -> float:
    """Smallest |value(point) − value(other)| over the other points."""
    return min((abs(values[point] - v) for q, v in values.items() if q != point), default=math.inf)


def tail_check(s: Study, point: int, key: str, predict: Callable[[Any], float], others: list[int],
               effect_what: str) -> Outcome:
    """A tail mean against its prediction; the effect: the smallest gap to another point's prediction."""
    stat = s.tail(point, key)
    preds = {q: predict(s.params(q)) for q in others if q in s.by_point}
    preds[point] = predict(s.params(point))
    return Outcome(preds[point], stat.mean, stat.tolerance, stat.rule(), _gap(preds, point), effect_what)


def ratio_check(s: Study, top: int, bottom: int, key: str, predict: Callable[[Any], float],
                effect_what: str) -> Outcome:
    """tail(top)/tail(bottom) against predict(top)/predict(bottom); the effect: |predicted ratio − 1|."""
    stat = ratio(s.tail(top, key), s.tail(bottom, key))
    predicted = predict(s.params(top)) / predict(s.params(bottom))
    return Outcome(predicted, stat.mean, stat.tolerance, stat.rule(), predicted - 1.0, effect_what)


def _label(p: Any) -> str:
    lr, wd = final_rates(p)
    return f"η {lr:g}, λ {wd:g}"


# ----------------------------------------------------------------------------- nrq-equilibrium-tradeoff

TRADEOFF_LRS = (0.025, 0.1, 0.4)
TRADEOFF_WD = 0.01


def _tradeoff_points() -> list[dict[str, float]]:
    return [{"params.lr": lr, "params.init_std": equilibrium_init_std(lr, TRADEOFF_WD)} for lr in TRADEOFF_LRS]


def _tradeoff(s: Study) -> dict[str, Callable[[], Outcome]]:
    points = list(range(len(TRADEOFF_LRS)))
    out: dict[str, Callable[[], Outcome]] = {}
    for i in points:
        out[f"tail-risk-{i}"] = partial(tail_check, s, i, "risk", predicted_risk, points,
                                        "the smallest gap between its r* and another η's")
        out[f"au-rms-{i}"] = partial(tail_check, s, i, "au_rms", predicted_au, points,
                                     "the smallest gap between its √(2ηλ) and another η's")
    out["risk-ratio"] = lambda: ratio_check(s, points[-1], points[0], "risk", predicted_risk,
                                            "|r* ratio − 1| (no trade-off)")
    return out


def _tradeoff_checks():
    from smdengine.presets import CheckDef
    checks = []
    for i, lr in enumerate(TRADEOFF_LRS):
        checks.append(CheckDef(f"tail-risk-{i}", (
            f"At η = {lr:g}, λ = {TRADEOFF_WD:g} the tail risk equals the stationary risk r* of ρ*(f) ∝ "
            "e^{2κf} f^{−½}(1−f)^{(p−3)/2}, κ = (a_h−a_l)√(p−1)/(2σ√(2ηλ)), by quadrature "
            "(seed 000, Thm 2 / Cor 1, Fig. 2a–d; κ corrected in design §4).")))
        checks.append(CheckDef(f"au-rms-{i}", (
            f"At η = {lr:g}, λ = {TRADEOFF_WD:g} the root-mean-square angular update at equilibrium is √(2ηλ) "
            "(seed 000 Lemma 1 / Fig. 2a–d; seed 003 Thm 3).")))
    checks.append(CheckDef("risk-ratio", (
        f"The limiting risk grows with the angular update: r*(η = {TRADEOFF_LRS[-1]:g}) / r*(η = {TRADEOFF_LRS[0]:g}) "
        "is the ratio of the quadratures, near √(16) = 4 for r* ∝ √(ηλ) at small ηλ (seed 000, Cor 1, Fig. 2a–d).")))
    return tuple(checks)


def _tradeoff_preset():
    from smdengine.presets import PanelDef, Preset
    common = {"weight_decay": TRADEOFF_WD, "steps": 20_000}
    return Preset(
        id="nrq-equilibrium-tradeoff", title="NRQ: larger angular update, faster decrease, higher floor",
        seed="000", figure="Fig. 2a–d",
        description=(
            "Plain SGD with weight decay on the Noisy Rayleigh Quotient (p 10, a (1, 2), σ 1) at λ 0.01 and "
            "η ∈ {0.025, 0.1, 0.4}, each started at its equilibrium norm (Cor 1's hypothesis). A larger ηλ "
            "gives a larger angular update √(2ηλ): the risk falls faster but settles higher, at the r* of the "
            "stationary law (quadrature with the corrected κ; the seed's Cor 1 constant is 2× too large). "
            "Checks: tail risk vs r*, tail AU vs √(2ηλ) per η, and the ratio of the extreme r*."),
        kinds=("nrq",), tier=1, exploratory=False,
        sizes={
            "quick": study("nrq-equilibrium-tradeoff (quick)", {**common, "trials": 250}, QUICK_SEEDS,
                           points=_tradeoff_points()),
            "paper": study("nrq-equilibrium-tradeoff (paper)", {**common, "trials": 1000}, QUICK_SEEDS,
                           points=_tradeoff_points()),
        },
        checks=_tradeoff_checks(),
        panels=(PanelDef("Risk r_t", "risk", log_y=True), PanelDef("Angular update (rms)", "au_rms", log_y=True),
                PanelDef("Squared norm |X|²", "norm_sq", log_y=True)),
    )


PRESETS: list[tuple[Any, Callable[[Study], dict[str, Callable[[], Outcome]]]]] = [
    (_tradeoff_preset(), _tradeoff),
]

__all__ = ["PRESETS", "Missing", "Stat", "over_seeds"]
