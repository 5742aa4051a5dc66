"""Theory series of an ``nrq`` run, aligned on its record steps (docs/theory.md)."""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from smdengine._science import EQUILIBRIUM_BAND, Phase, au_equilibrium, phase_regime, record_steps
from smdengine.nrq import theory
from smdengine.nrq.spec import NRQPhysics


def predict_physics(p: NRQPhysics, momentum: float = 0.0,
                    init_norms_sq: np.ndarray | None = None, dt: float = 1.0, moments: bool = False) -> dict[str, Any]:
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
    |X_0|² before a run, the realized ``init_norms_sq`` (one per trial) once it has started. The first
    update, of size ``dt`` in steps (1 for SGD, the Euler–Maruyama step of the sde kind), is taken exactly
    (:func:`_first_update`) and the closed form holds from there: a start far below the equilibrium norm
    first jumps far above it, which the closed form from M_0 would miss (it rises smoothly to M*).
    With ``moments`` also ``norm_sq_second`` E M_t² and ``norm_sq_inverse_second`` E 1/M_t² over the same law
    (the SDE's γ and RMS angular update: not theory names of their own).
    """
    return predict_physics_many([p], [momentum], [init_norms_sq], dt, moments)[0]


def predict_physics_many(ps: Sequence[NRQPhysics], momenta: Sequence[float],
                         init_norms_sq: Sequence[np.ndarray | None], dt: float = 1.0,
                         moments: bool = False) -> list[dict[str, Any]]:
    """:func:`predict_physics` of several problems that share the dimension, the spectrum, the steps, the
    record spacing and the schedule's steps (a fused sweep's members: their rates, scales and trial counts
    may differ), computed together: the norm series of all in a few array operations and every r* in one
    quadrature (:func:`smdengine.nrq.theory.risk_stationary_many`). Every operation is elementwise or a sum
    along one member's row, so each member's theory is exactly the one it gets alone (a run alone is the
    case of one member, computed by the same code)."""
    first = ps[0]
    starts = [ph.start for ph in first.phases()]
    for p in ps:
        shape = (p.dim, p.steps, p.record_every, p.eig_low, p.eig_high, p.eigenvalues)
        if (shape != (first.dim, first.steps, first.record_every, first.eig_low, first.eig_high, first.eigenvalues)
                or [ph.start for ph in p.phases()] != starts):
            raise ValueError("params: expected problems that differ only in rates, scales and trial counts, "
                             "got others")
    steps = record_steps(first.steps, first.record_every)
    phase_of = [bisect.bisect_right(starts, n) - 1 for n in steps]   # the phase in force at each record step
    true_phases = [p.phases() for p in ps]
    effective = [[replace(ph, lr=ph.lr / (1.0 - momentum)) for ph in own]
                 for own, momentum in zip(true_phases, momenta, strict=True)]
    outs: list[dict[str, Any]] = []
    for own, momentum in zip(true_phases, momenta, strict=True):
        au = [au_equilibrium(ph.lr, ph.weight_decay, momentum) for ph in own]
        outs.append({"au_equilibrium": [au[i] for i in phase_of]})
    realized = [None if norms is None else np.asarray(norms, dtype=np.float64) for norms in init_norms_sq]
    laws = [_initial_law(p, values) for p, values in zip(ps, realized, strict=True)]
    # record 0 is M_0's mean; the others come from the law after the first update (time dt)
    firsts = [_first_update(p, own[0], law, dt, values)
              for p, own, law, values in zip(ps, effective, laws, realized, strict=True)]
    series = _norm_sq_series(ps, steps[1:], phase_of[1:], effective, firsts, dt, moments)
    for p, out, moment, (nodes, weights, inverse), values in zip(ps, outs, series, laws, realized, strict=True):
        out["norm_sq_theory"] = [float(nodes @ weights), *moment[0]]
        if moments:   # at step 0 from M_0's law itself: the trials' own values after a run
            with np.errstate(all="ignore"):
                start = ((values**2).mean(), (1.0 / values**2).mean()) if values is not None else \
                    (nodes**2 @ weights, inverse**2 @ weights if p.dim > 4 else math.inf)   # E[1/χ²_p²] = ∞ at p ≤ 4
            out["norm_sq_second"] = [float(start[0]), *moment[1]]
            out["norm_sq_inverse_second"] = [float(start[1]), *moment[2]]
    levels = first.two_level()
    if levels is not None:
        kappas = {(c, i): theory.kappa(levels[0], levels[1], p.dim, p.noise_std, ph.lr, ph.weight_decay)
                  for c, (p, own) in enumerate(zip(ps, effective, strict=True))
                  for i, ph in enumerate(own) if ph.weight_decay > 0}   # no equilibrium without weight decay
        risks = dict(zip(kappas, theory.risk_stationary_many(list(kappas.values()), first.dim), strict=True))
        nan = float("nan")
        for c, out in enumerate(outs):
            kappa = [kappas.get((c, i), nan) for i in range(len(starts))]   # per phase, then per record step
            risk = [risks.get((c, i), nan) for i in range(len(starts))]
            out["kappa"] = [kappa[i] for i in phase_of]
            out["risk_stationary"] = [risk[i] for i in phase_of]
    return outs


Law = tuple[np.ndarray, np.ndarray, np.ndarray]   # M_0's nodes, their weights (sum 1), and 1/M_0 at each


def _initial_law(p: NRQPhysics, realized: np.ndarray | None) -> Law:
    """The law of M_0 = |X_0|²: before a run s²χ²_p (:func:`smdengine.nrq.theory.init_norm_sq_law`), after it
    the trials' ``realized`` values (at most 1024 weighted nodes, :func:`_sample_nodes`)."""
    if realized is not None:
        return _sample_nodes(realized, REALIZED_NODES)
    nodes, weights = theory.init_norm_sq_law(p.dim, p.init_std)
    with np.errstate(divide="ignore"):
        return nodes, weights, 1.0 / nodes


REALIZED_NODES = 1024   # the most nodes standing for a run's realized initial norms
JUMP_NODES_M0 = 64      # ... where each is crossed with the JUMP_NODES of the first gradient's law


def _sample_nodes(values: np.ndarray, most: int) -> Law:
    """Weighted nodes standing for a sample of initial squared norms: the values themselves when there are
    at most ``most``, else the means of the sorted values cut into ``most`` contiguous groups as
    ``np.array_split`` cuts them (the first n mod m one longer), each weighted by its share of n; and the
    mean of 1/M_0 over each group (the first update's jump is linear in 1/M_0: 1/mean would bias it low,
    7% at p = 3)."""
    n = len(values)
    with np.errstate(divide="ignore"):
        if n <= most:
            return values, np.full(n, 1.0 / n), 1.0 / values
        values = np.sort(values)
        inverses = 1.0 / values
    size, longer = divmod(n, most)
    cut = longer * (size + 1)

    def group_means(v: np.ndarray) -> np.ndarray:
        return np.concatenate([v[:cut].reshape(longer, size + 1).mean(axis=1),
                               v[cut:].reshape(most - longer, size).mean(axis=1)])

    weights = np.concatenate([np.full(longer, size + 1.0), np.full(most - longer, float(size))]) / n
    return group_means(values), weights, group_means(inverses)


SCALE_EXPONENT = 500   # the norm series' unit is 2^e, |e| ≤ this: its square and inverse square stay finite
BLOCK_ELEMENTS = 2**15   # the norm series is computed in blocks of (members, steps, nodes): 256 KB, in cache


def _norm_sq_series(ps: Sequence[NRQPhysics], steps: list[int], phase_of: list[int],
                    effective: Sequence[Sequence[Phase]], laws: Sequence[tuple[np.ndarray, np.ndarray]],
                    origin: float, moments: bool = False) -> list[list[list[float]]]:
    """``[E M_t]`` of each problem, with ``moments`` ``[E M_t, E M_t², E 1/M_t²]``, at the record ``steps``
    (``phase_of``: the index of the phase in force at each; each step ≥ ``origin``), M_t = |X_t|² by the closed form from each value of its law (nodes, weights) at step
    ``origin`` (in the first phase), restarted at each phase from the values carried over (times the rescale
    factor², when the phase rescales X).

    The closed form (:func:`smdengine.nrq.theory.norm_sq_relaxation`) is written M_t² = a_t·M_0² + b_t with
    a_t = e^{−4ληt}, b_t = (1 − e^{−4ληt})·M*², M*² = Lη/(2λ), L = (p−1)σ², or a_t = 1, b_t = 2η²Lt without
    weight decay: both terms are ≥ 0 (no clamp before the root), and b_t keeps its precision at small t
    (expm1). Problems whose laws have as many nodes are rows of one array, computed a block at a time: each
    element by the same operations and each sum along one member's row of one block, so how the blocks are
    cut changes no value. The moments are sums over the same nodes of M_t² and of its inverse."""
    outs = [np.empty((len(ps), len(steps))) for _ in range(3 if moments else 1)]
    steps_arr = np.asarray(steps, dtype=np.float64)
    phase_index = np.asarray(phase_of)
    n_phases = len(effective[0])
    starts = [origin, *(ph.start for ph in effective[0][1:])]   # where each phase's closed form starts
    groups: dict[int, list[int]] = {}
    for c, (nodes, _) in enumerate(laws):
        groups.setdefault(len(nodes), []).append(c)
    for n_nodes, group in groups.items():
        per_block = max(1, BLOCK_ELEMENTS // n_nodes)
        for first in range(0, len(group), per_block):   # a block of members, then of record steps
            members = group[first:first + per_block]
            rows = np.asarray(members)
            weights = np.stack([laws[c][1] for c in members])[:, None, :]   # (members, 1, nodes)
            # M² at origin, then at each phase's start, in units of a power of two per member, 2^(2e) with 2^e near
            # its largest node: exact (no value changes) and M up to ~1e300 squared without overflow
            nodes = np.stack([laws[c][0] for c in members])[:, None, :]
            exponent = np.clip(np.frexp(nodes.max(axis=2, keepdims=True))[1], -SCALE_EXPONENT, SCALE_EXPONENT)
            unit, unit_sq = np.ldexp(1.0, exponent), np.ldexp(1.0, 2 * exponent)
            m_sq = (nodes / unit) ** 2
            span = max(1, BLOCK_ELEMENTS // (len(members) * n_nodes))   # record steps per array
            for k in range(n_phases):
                rescale = np.array([effective[c][k].rescale for c in members])[:, None, None]
                m_sq = m_sq * rescale**4   # X ← factor·X multiplies M² by factor⁴
                coefficients = _coefficients([ps[c] for c in members], [effective[c][k] for c in members])
                where = np.flatnonzero(phase_index == k)
                for s in range(0, len(where), span):
                    chunk = where[s:s + span]
                    a, b = coefficients(steps_arr[chunk] - starts[k])
                    m_t = a * m_sq
                    m_t += b / unit_sq
                    at = rows[:, None], chunk[None, :]
                    if moments:   # M_t² = m_t·unit²
                        outs[1][at] = (m_t * weights).sum(axis=2) * unit_sq[:, :, 0]
                        with np.errstate(divide="ignore"):
                            outs[2][at] = (weights / m_t).sum(axis=2) / unit_sq[:, :, 0]
                    np.sqrt(m_t, out=m_t)
                    m_t *= weights
                    outs[0][at] = m_t.sum(axis=2) * unit[:, :, 0]
                if k + 1 < n_phases:   # the values the next phase starts from
                    a, b = coefficients(np.array([float(starts[k + 1] - starts[k])]))
                    m_sq = a * m_sq + b / unit_sq
    return [[out[c].tolist() for out in outs] for c in range(len(ps))]


def _coefficients(ps: Sequence[NRQPhysics],
                  phases: Sequence[Phase]) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(a, b) of M_t² = a·M_0² + b (:func:`_norm_sq_series`) for rows of problems in their phases: a function
    of the times t (steps,) since the phase began, returning two (rows, steps, 1) arrays."""
    unit_grad_sq = np.array([(p.dim - 1) * p.noise_std**2 for p in ps])[:, None, None]
    lr = np.array([ph.lr for ph in phases])[:, None, None]
    wd = np.array([ph.weight_decay for ph in phases])[:, None, None]
    decays = wd > 0
    rate = -4.0 * lr * wd
    target = unit_grad_sq * lr / (2.0 * np.where(decays, wd, 1.0))   # rows without weight decay: unused
    growth = 2.0 * lr**2 * unit_grad_sq

    def at(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = t[None, :, None]
        if decays.all():
            x = rate * t
            return np.exp(x), -np.expm1(x) * target
        if not decays.any():
            return np.ones((len(phases), t.shape[1], 1)), growth * t
        x = rate * t
        return np.where(decays, np.exp(x), 1.0), np.where(decays, -np.expm1(x) * target, growth * t)
    return at



TAIL_POINTS = 64   # times at which the tail's mean AU ratio is evaluated: the curve is smooth, the records regular
MAX_STEPS: int = next(bound.le for bound in NRQPhysics.model_fields["steps"].metadata if hasattr(bound, "le"))
LONGEST_DOUBLINGS = 20   # the longest run the advice looks at: 2²⁰ times the spec's steps (at most MAX_STEPS)
JUMP_NODES = 48   # nodes of the law of the first gradient's norm, where the first update's spread matters
SMALL_JUMP = 1e-2   # below this mean relative first jump E[η²·E G/M_0²], G's spread moves E[1/M_t²] by O(1e-4): G = E G


def tail_au_ratio(p: NRQPhysics, momentum: float = 0.0, dt: float = 1.0) -> float | None:
    """The summary's tail mean of ``au_rms`` divided by the final phase's ``au_equilibrium``, predicted before
    the run, for SGD(M) (the ``nrq`` kind) or the Euler–Maruyama integration of the NRQ SDE in steps of ``dt``
    (the ``sde`` kind's nrq model, α = 0; dt = 1 is SGD). None where the closed forms do not hold: a phase out
    of regime (:func:`smdengine._science.phase_regime`, its updates of size dt), a final phase without weight
    decay (no equilibrium), or norms that are not finite (at the ends of the floating-point range).

    Derivation (docs/theory.md, Relaxation): a trial's angular update is η·|g̃|/M_t, M = |X|², g̃ the gradient
    at unit norm, so its mean square over trials at step t is η²L·E[1/M_t²], and at equilibrium η²L/M*²:
    au_rms_t/AU* = √E[M*²/M_t²]. Each trial's M_t² follows the closed form M_t² = a_t·M_0² + b_t of
    :func:`_norm_sq_series` (at η/(1−α), the momentum rule there), phase after phase from its own M_0 (times the
    rescale factor⁴ where a phase rescales), and M_0 = |X_0|² follows init_std²·χ²_p
    (:func:`smdengine.nrq.theory.init_norm_sq_law`). Averaging over that law, not starting every trial from
    E M_0 = p·init_std², matters at small p: E[1/M_t²] is convex in M_0². The first update is taken exactly,
    M_1 = (1−ηλ)²M_0 + η²G/M_0: the closed form assumes M² ≫ η²L, and a start far below the equilibrium norm
    first jumps far above it. There G = |g̃_0|², the first gradient off X_0 at unit norm, follows σ²χ²_{p−1}
    scaled to its mean L + E|PAX̄_0|² (:func:`_first_update`), drawn with its own quadrature where the jump is large (the trials that jumped least dominate E[1/M_t²]); and
    with momentum η is η/(1−α), since the buffer carries the first gradient over the next ~1/(1−α) updates. The
    SDE's first update is its first Euler–Maruyama step, of drift rate η·dt and noise rate η·√dt:
    M_dt = (1−ηλ·dt)²M_0 + η²·dt·G/M_0, after which the same closed form holds (it is the SDE's own, in steps),
    and its ``au_rms`` is the same η|g̃|/M_t per step (√(E|ΔX̄|²/dt)). The ratio is then averaged over
    :data:`TAIL_POINTS` times spread evenly over the tail (the last half of the final phase), as the summary
    averages the regular records there."""
    start = _final_phase_start(p, momentum, dt)
    return None if start is None else _tail_ratios(p, start, [p.steps])[0]


@dataclass(frozen=True)
class _FinalStart:
    """Where the final phase's closed form starts, for :func:`_tail_ratios` (:func:`_final_phase_start`)."""

    phase: Phase        # the final phase, at η/(1−α)
    begin: float        # the time its closed form starts from: its start, or the first update's end (step dt)
    m_sq: np.ndarray    # (nodes,) each node's M² there
    weights: np.ndarray  # (nodes,) the nodes' weights, summing to 1


def _final_phase_start(p: NRQPhysics, momentum: float, dt: float = 1.0) -> _FinalStart | None:
    """The final phase's start (:class:`_FinalStart`) for :func:`tail_au_ratio`, or None where the closed forms
    do not hold or the norms are not finite. ``dt``: the size of an update in steps (1 for SGD)."""
    own = p.phases()
    if own[-1].weight_decay <= 0 or any(phase_regime(ph.lr, ph.weight_decay, momentum, dt) for ph in own):
        return None
    effective = [replace(ph, lr=ph.lr / (1.0 - momentum)) for ph in own]
    unit_grad_sq = (p.dim - 1) * p.noise_std**2
    norms, weights = _first_update(p, effective[0], _initial_law(p, None), dt)
    with np.errstate(all="ignore"):   # a start at the ends of the range: not finite, None
        m_sq = norms**2
        for phase, following in zip(effective, effective[1:], strict=False):
            # the first phase's closed form takes over after the exact first update, at step dt
            a, b = _phase_coefficients(unit_grad_sq, phase, following.start - max(phase.start, dt))
            m_sq = a * (m_sq * phase.rescale**4) + b
        final = effective[-1]
        m_sq = m_sq * final.rescale**4
    if not np.isfinite(m_sq).all():
        return None
    return _FinalStart(final, max(final.start, dt), m_sq, weights)


def _first_update(p: NRQPhysics, first: Phase, law: Law, dt: float,
                  realized: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The law (nodes, weights) of M after the first update, of size ``dt`` in steps, from the ``law`` of M_0
    (:func:`_initial_law`; ``realized``: the trials' values it stands for, if any) in the ``first`` phase (at
    η/(1−α) with momentum). The update shrinks X by (1−ηλ·dt) and moves it orthogonally to itself by the
    gradient at unit norm over |X_0|: drift η·dt·PAX̄_0/|X_0| and noise η·√dt·σPξ/|X_0|, so
    M_dt = (1−ηλ·dt)²M_0 + η²·dt·G/M_0 with E G = (p−1)σ² + dt·E|PAX̄_0|² (the cross term has mean 0), the drift
    at its mean over a uniform X̄_0 (:func:`_drift_sq`): at σ = 1 it is 0.8% of E G, at σ = 0.1 most of it. G's
    law is σ²χ²_{p−1} scaled to that mean, a quadrature of its own (:func:`_chi_square_log_rule`, crossed with
    at most :data:`JUMP_NODES_M0` nodes of M_0) where the mean relative jump E[η²·dt·E G/M_0²] is at least
    :data:`SMALL_JUMP`; below, G is its mean (its spread moves the results by O(1e-4))."""
    norms, weights, inverse = law
    noise_sq, drift_sq = (p.dim - 1) * p.noise_std**2, dt * _drift_sq(p)
    jump = first.lr**2 * dt   # η²·dt: the first update adds jump·G/M_0 to M
    with np.errstate(all="ignore"):   # a start at the ends of the range: not finite (the caller decides)
        keep = (1.0 - first.lr * first.weight_decay * dt) ** 2
        if (jump * (noise_sq + drift_sq) * inverse**2) @ weights < SMALL_JUMP:
            return keep * norms + jump * (noise_sq + drift_sq) * inverse, weights
        if realized is not None and len(norms) > JUMP_NODES_M0:
            norms, weights, inverse = _sample_nodes(realized, JUMP_NODES_M0)
        # σ²χ²_{p−1} scaled to the mean L + drift (not shifted by the drift: the trials whose G is near 0, which
        # dominate E[1/M_t²], exist with a drift too, |PAX̄_0 + noise| passing near 0; a shift lost them and
        # predicted a fifth of the measured ratio at p = 2)
        scale = (noise_sq + drift_sq) / noise_sq if noise_sq > 0 else math.inf   # σ² underflowed: no finite law
        grads, grad_weights = _chi_square_log_rule(p.dim - 1, p.noise_std**2 * scale)
        return ((keep * norms[:, None] + jump * grads[None, :] * inverse[:, None]).ravel(),
                (weights[:, None] * grad_weights[None, :]).ravel())


def _drift_sq(p: NRQPhysics) -> float:
    """E|PAX̄|² for X̄ uniform on the sphere (P = I − X̄X̄ᵀ): the squared deterministic gradient at unit norm
    at the start. |PAX̄|² = |AX̄|² − (X̄ᵀAX̄)², E X̄ᵀA²X̄ = Σa²/p and E(X̄ᵀAX̄)² = (2Σa² + (Σa)²)/(p(p+2)); on a
    two-level spectrum (a_h − a_l)²·E f(1−f) = (a_h − a_l)²(p−1)/(p(p+2)), f = X̄₁² ~ Beta(½, (p−1)/2)."""
    a = np.asarray(p.spectrum(), dtype=np.float64)
    total, squares, n = float(a.sum()), float(a @ a), p.dim
    return max(0.0, squares / n - (2.0 * squares + total * total) / (n * (n + 2.0)))


def _chi_square_log_rule(dof: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The law of scale·χ²_dof as :data:`JUMP_NODES` nodes evenly spaced in s = log x over the span where its
    density in s, ∝ exp(dof·s/2 − eˢ/2), is within e⁻³⁵ of its peak (cut at x = 10⁻¹³: the mass below is
    ~10⁻⁶·⁵ at one degree of freedom), weights that density normalized: the trapezoid rule there, spectrally
    accurate for a smooth integrand and blind to its scale. A Gauss–Laguerre rule in x misses the trials that
    jumped least when 1/M_t² peaks at a G far below σ² (at p ≤ 3 from a start far below the equilibrium norm:
    it predicted half the measured ratio). Above 400 degrees of freedom, as :func:`theory.init_norm_sq_law`,
    the mean alone."""
    if dof > 400:
        return np.array([scale * dof]), np.array([1.0])
    fine = np.linspace(-30.0, math.log(dof + 12.0 * math.sqrt(2.0 * dof) + 60.0), 4096)
    log_density = 0.5 * dof * fine - 0.5 * np.exp(fine)
    inside = fine[log_density >= log_density.max() - 35.0]
    logs = np.linspace(inside[0], inside[-1], JUMP_NODES)
    log_density = 0.5 * dof * logs - 0.5 * np.exp(logs)
    weights = np.exp(log_density - log_density.max())
    return scale * np.exp(logs), weights / weights.sum()


def _phase_coefficients(unit_grad_sq: float, phase: Phase, t: float) -> tuple[float, float]:
    """(a, b) of M_t² = a·M_0² + b after t steps of one phase (weight decay or not), as :func:`_coefficients`
    gives them, in floats: a chain of many phases is not many array operations."""
    if phase.weight_decay > 0:
        x = -4.0 * phase.lr * phase.weight_decay * t
        return math.exp(x), -math.expm1(x) * unit_grad_sq * phase.lr / (2.0 * phase.weight_decay)
    return 1.0, 2.0 * phase.lr**2 * unit_grad_sq * t


def _tail_ratios(p: NRQPhysics, start: _FinalStart, lengths: list[int]) -> list[float | None]:
    """:func:`tail_au_ratio` for runs of each of ``lengths`` steps (the final phase lengthened)."""
    final, begin, m_sq, weights = start.phase, start.begin, start.m_sq, start.weights
    target_sq = (p.dim - 1) * p.noise_std**2 * final.lr / (2.0 * final.weight_decay)   # M*²
    ends = np.array(lengths, dtype=np.float64)[:, None]
    tails = final.start + (ends - final.start) / 2.0   # smdengine._science.tail_start
    times = tails + (np.maximum(tails, ends - 1.0) - tails) * np.linspace(0.0, 1.0, TAIL_POINTS)[None, :] - begin
    with np.errstate(all="ignore"):   # every length at once: (lengths × TAIL_POINTS, nodes)
        a, b = _coefficients([p], [final])(np.maximum(times, 0.0).ravel())
        ratios = np.sqrt((target_sq / (a[0] * m_sq[None, :] + b[0])) @ weights).reshape(times.shape).mean(axis=1)
    return [float(r) if math.isfinite(r) else None for r in ratios]


def tail_forecast(p: NRQPhysics, momentum: float = 0.0, dt: float = 1.0) -> tuple[float | None, int | None]:
    """(:func:`tail_au_ratio`, the steps that settle the tail: :func:`_steps_to_settle`) with the chain up to the
    final phase computed once; the steps only for a ratio off the band (None for one within it, as for no
    ratio)."""
    start = _final_phase_start(p, momentum, dt)
    if start is None:
        return None, None
    ratio = _tail_ratios(p, start, [p.steps])[0]
    off = ratio is not None and abs(ratio - 1.0) > EQUILIBRIUM_BAND
    return ratio, _steps_to_settle(p, start) if off else None


def _steps_to_settle(p: NRQPhysics, start: _FinalStart) -> int | None:
    """The fewest steps (the final phase lengthened) from which every longer run's tail is predicted within
    ±:data:`smdengine._science.EQUILIBRIUM_BAND` of equilibrium, from the final phase's ``start``
    (:func:`_final_phase_start`), or None when none up to 2^:data:`LONGEST_DOUBLINGS` times the spec's steps (or the spec's limit,
    :data:`MAX_STEPS`) is. The ratio is not monotone in the length (each node's M_t² is, but the χ²_p spread of
    starts on both sides of M* makes the mean rise and fall back): the last length out of the band is found on
    a doubling grid, then the crossing after it by bisection (to 1%: the model is no finer)."""
    def settled(lengths: list[int]) -> list[bool]:
        return [r is not None and abs(r - 1.0) <= EQUILIBRIUM_BAND for r in _tail_ratios(p, start, lengths)]

    grid = [min(p.steps * 2**i, MAX_STEPS) for i in range(LONGEST_DOUBLINGS + 1)]
    grid = sorted(set(grid))
    marks = settled(grid)
    if not marks[-1]:
        return None
    last_out = max((i for i, ok in enumerate(marks) if not ok), default=None)
    if last_out is None:
        return p.steps
    low, high = grid[last_out], grid[last_out + 1]
    while high - low > max(1, low // 100):
        middle = (low + high) // 2
        if settled([middle])[0]:
            high = middle
        else:
            low = middle
    return high
