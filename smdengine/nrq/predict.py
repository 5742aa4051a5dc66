"""Theory series of an ``nrq`` run, aligned on its record steps (docs/theory.md)."""
from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Any

import numpy as np

from smdengine._science import Phase, au_equilibrium, record_steps
from smdengine.nrq import theory
from smdengine.nrq.spec import NRQPhysics


def predict_physics(p: NRQPhysics, momentum: float = 0.0,
                    init_norms_sq: np.ndarray | None = None) -> dict[str, Any]:
    """Theory of the NRQ problem ``p`` run with momentum ``momentum``: ``au_equilibrium``
    √(2λη/(1+α)), ``norm_sq_theory``, and on a two-level spectrum ``risk_stationary`` and ``kappa``.
    Each a list aligned on the record steps.

    With momentum α the norm and the risk follow the SGD closed forms at the effective rate
    η/(1−α) (docs/theory.md, Momentum): heavy-ball v ← αv + g + λX, X ← X − ηv moves X, over times
    long against 1/(1−α) updates, as SGD with η/(1−α) does — the equilibrium |X|⁴ of seed 003 Thm 2,
    ηL/(λ(1−α)(2 − λη/(1+α))), is the SGD one at η/(1−α) up to the λη/(1+α) against λη/(1−α) of
    the discrete step, and its relaxation rate is 4λη/(1−α) — while the angular update is not
    (√(2λη/(1+α)), not √(2λη/(1−α))). The risk law's κ at η/(1−α) is the measured rule (0.1% at
    α = 0.9, p = 10; ``nrq-momentum-risk``); the AU is taken at the true η.

    ``norm_sq_theory`` averages the closed form over the initial squared norms: the law of
    |X_0|² before a run, the realized ``init_norms_sq`` (one per trial) once it has started.
    """
    steps = record_steps(p.steps, p.record_every)
    true_phases = p.phases()
    starts = [ph.start for ph in true_phases]
    phase_of = [bisect.bisect_right(starts, n) - 1 for n in steps]   # the phase in force at each record step
    au = [au_equilibrium(ph.lr, ph.weight_decay, momentum) for ph in true_phases]
    out: dict[str, Any] = {"au_equilibrium": [au[i] for i in phase_of]}
    all_phases = [replace(ph, lr=ph.lr / (1.0 - momentum)) for ph in true_phases]   # effective rates
    if init_norms_sq is None:
        nodes, weights = theory.init_norm_sq_law(p.dim, p.init_std)
    else:   # at most 1024 weighted nodes standing for the sample: sorted, averaged in contiguous groups
        nodes, weights = _group_means(np.sort(np.asarray(init_norms_sq, dtype=np.float64)), 1024)
    out["norm_sq_theory"] = _norm_sq_series(p, steps, phase_of, all_phases, nodes, weights)
    levels = p.two_level()
    if levels is not None:
        per_phase = []
        for phase in all_phases:
            if phase.weight_decay > 0:
                k = theory.kappa(levels[0], levels[1], p.dim, p.noise_std, phase.lr, phase.weight_decay)
                per_phase.append((k, theory.risk_stationary(k, p.dim)))
            else:  # no equilibrium without weight decay
                per_phase.append((float("nan"), float("nan")))
        out["kappa"] = [per_phase[i][0] for i in phase_of]
        out["risk_stationary"] = [per_phase[i][1] for i in phase_of]
    return out


def _group_means(values: np.ndarray, most: int) -> tuple[np.ndarray, np.ndarray]:
    """The means of ``values`` (n,) cut into min(most, n) contiguous groups as ``np.array_split`` cuts
    them (the first n mod m one longer), and each group's share of n: two reshapes, each group's mean
    taken along a row as a group's own mean would be, instead of a NumPy call per group."""
    n = len(values)
    m = min(most, n)
    size, longer = divmod(n, m)
    head = values[:longer * (size + 1)].reshape(longer, size + 1)
    tail = values[longer * (size + 1):].reshape(m - longer, size)
    means = np.concatenate([head.mean(axis=1), tail.mean(axis=1)])
    weights = np.concatenate([np.full(longer, size + 1.0), np.full(m - longer, float(size))]) / n
    return means, weights


def _norm_sq_series(p: NRQPhysics, steps: list[int], phase_of: list[int], all_phases: list[Phase],
                    nodes: np.ndarray, weights: np.ndarray) -> list[float]:
    """E M_t at the record ``steps`` (``phase_of``: the index of the phase in force at each), M_t = |X_t|²
    by the closed form from each initial value in ``nodes`` (weighted), restarted at each phase from
    the values carried over (times the rescale factor², when the phase rescales X)."""
    start_value: dict[int, np.ndarray] = {}
    m = nodes
    for i, phase in enumerate(all_phases):
        m = m * phase.rescale**2
        start_value[phase.start] = m
        if i + 1 < len(all_phases):   # the values the next phase starts from
            m = theory.norm_sq_relaxation(m, all_phases[i + 1].start - phase.start, p.dim, p.noise_std, phase.lr,
                                          phase.weight_decay)
    out = np.empty(len(steps))
    steps_arr = np.asarray(steps, dtype=np.float64)
    phase_index = np.asarray(phase_of)
    for k, ph in enumerate(all_phases):
        where = np.flatnonzero(phase_index == k)
        for chunk in np.array_split(where, max(1, len(where) // 2048)):
            t = (steps_arr[chunk] - ph.start)[:, None]
            m_t = theory.norm_sq_relaxation(start_value[ph.start][None, :], t, p.dim, p.noise_std,
                                            ph.lr, ph.weight_decay)
            out[chunk] = m_t @ weights
    return out.tolist()
