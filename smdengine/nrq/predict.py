"""Theory series of an ``nrq`` run, aligned on its record steps (design §4)."""
from __future__ import annotations

from typing import Any

from smdengine.nrq import theory
from smdengine.nrq.schedule import phase_at, phases, record_steps
from smdengine.nrq.spec import NRQSpec


def predict_nrq(spec: NRQSpec) -> dict[str, Any]:
    """``au_equilibrium`` always; ``norm_sq_theory`` for SGD; ``risk_stationary`` and ``kappa``
    for SGD on a two-level spectrum. Each a list aligned on the record steps."""
    p = spec.params
    steps = record_steps(p)
    all_phases = phases(p)
    out: dict[str, Any] = {
        "au_equilibrium": [theory.au_equilibrium(phase_at(all_phases, n).lr, phase_at(all_phases, n).weight_decay,
                                                 p.momentum) for n in steps],
    }
    if p.momentum != 0.0:
        return out
    out["norm_sq_theory"] = _norm_sq_series(spec, steps, all_phases)
    levels = p.two_level()
    if levels is not None:
        per_phase = {}
        for phase in all_phases:
            if phase.weight_decay > 0:
                k = theory.kappa(levels[0], levels[1], p.dim, p.noise_std, phase.lr, phase.weight_decay)
                per_phase[phase.start] = (k, theory.risk_stationary(k, p.dim))
            else:  # no equilibrium without weight decay
                per_phase[phase.start] = (float("nan"), float("nan"))
        out["kappa"] = [per_phase[phase_at(all_phases, n).start][0] for n in steps]
        out["risk_stationary"] = [per_phase[phase_at(all_phases, n).start][1] for n in steps]
    return out


def _norm_sq_series(spec: NRQSpec, steps: list[int], all_phases) -> list[float]:
    """Closed-form M_t = |X_t|², restarted at each phase from the value carried over
    (times the rescale factor², when the phase rescales X). M_0 = E|X₀|² = p·init_std²."""
    p = spec.params
    start_value: dict[int, float] = {}
    m = p.dim * p.init_std**2
    for i, phase in enumerate(all_phases):
        m *= phase.rescale**2
        start_value[phase.start] = m
        end = all_phases[i + 1].start if i + 1 < len(all_phases) else p.steps
        m = theory.norm_sq_relaxation(m, end - phase.start, p.dim, p.noise_std, phase.lr, phase.weight_decay)
    out = []
    for n in steps:
        ph = phase_at(all_phases, n)
        out.append(theory.norm_sq_relaxation(start_value[ph.start], n - ph.start, p.dim, p.noise_std,
                                             ph.lr, ph.weight_decay))
    return out
