"""Closed forms for the Noisy Rayleigh Quotient (seed 000; docs/theory.md).

Notation: p = dim, σ = noise_std, η = lr, λ = weight_decay, α = momentum, t in updates.
"""
from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import numpy as np
from numpy.polynomial.legendre import leggauss

from smdengine._science import au_equilibrium

__all__ = ["au_equilibrium", "f_density_bins", "init_norm_sq_law", "kappa", "norm_sq_equilibrium",
           "norm_sq_relaxation", "risk_stationary", "risk_stationary_asymptote", "risk_stationary_large_kappa",
           "risk_stationary_many"]


def norm_sq_equilibrium(dim: int, noise_std: float, lr: float, weight_decay: float) -> float:
    """|X|² at equilibrium near the optimum, √((p−1)σ²η/(2λ)) (continuous time, SGD)."""
    return math.sqrt((dim - 1) * noise_std**2 * lr / (2.0 * weight_decay))


def norm_sq_relaxation(norm_sq_start, t, dim: int, noise_std: float,
                       lr: float, weight_decay: float):
    """M_t = |X_t|² from M_0 (continuous time, SGD). From M' = (1−ηλ)²M + η²L/M with
    L = (p−1)σ²: d(M²)/dt = −4ληM² + 2η²L, so M_t² = e^{−4ληt}(M_0² − M*²) + M*² with
    M*² = (p−1)σ²η/(2λ); without weight decay M² grows linearly, M_t² = M_0² + 2η²(p−1)σ²t.
    ``norm_sq_start`` and ``t`` may be floats or numpy arrays (broadcast together)."""
    m0 = np.asarray(norm_sq_start, dtype=np.float64)
    unit_grad_sq = (dim - 1) * noise_std**2
    if weight_decay == 0.0:
        out = np.sqrt(m0**2 + 2.0 * lr**2 * unit_grad_sq * t)
    else:
        target = unit_grad_sq * lr / (2.0 * weight_decay)
        decay = np.exp(-4.0 * lr * weight_decay * np.asarray(t, dtype=np.float64))
        out = np.asarray(decay * (m0**2 - target))   # then in place: steps × nodes is the large array
        out += target
        np.sqrt(np.maximum(out, 0.0, out=out), out=out)
    return float(out) if out.ndim == 0 else out


def init_norm_sq_law(dim: int, init_std: float, nodes: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature (values, weights) for M_0 = |X_0|² with X_0 ~ N(0, s²I_p), i.e. s²·χ²_p:
    generalized Gauss–Laguerre in u = M_0/(2s²) (exact for polynomials of degree < 2·nodes).
    Averaging a theory curve over it removes the Jensen bias of using E M_0 = p·s² alone
    (the curves are concave in M_0). For p > 400 χ²_p/p is within 7% of 1 and the mean suffices."""
    if dim > 400:
        return np.array([dim * init_std**2]), np.array([1.0])
    u, w = _genlaguerre_rule(nodes, dim / 2.0 - 1.0)
    return 2.0 * init_std**2 * u, w


@functools.lru_cache(maxsize=64)   # the API asks for it at every nrq submission: read-only arrays, shared
def _genlaguerre_rule(nodes: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Generalized Gauss–Laguerre nodes and weights normalized to sum 1, for the weight u^α e^{−u}: the
    Golub–Welsch rule. The three-term recurrence of the monic Laguerre polynomials has a_k = 2k + α + 1 and
    b_k² = k(k + α), so the nodes are the eigenvalues of the symmetric tridiagonal matrix with a_k on its
    diagonal and b_k beside it, and each weight is the square of its unit eigenvector's first component
    (times the weight's mass Γ(α+1), which the normalization drops). SciPy's ``roots_genlaguerre`` returns
    the same nodes (to 1e-13 relative for p ≤ 400, tests/engine/test_theory.py) but multiplies the weights
    by Γ(α+1), which overflows from α > 171 (p ≥ 344: every weight NaN after normalizing); and this keeps
    SciPy out of the API's predictions (its import is slow)."""
    k = np.arange(nodes, dtype=np.float64)
    off = np.sqrt(k[1:] * (k[1:] + alpha))
    values, vectors = np.linalg.eigh(np.diag(2.0 * k + alpha + 1.0) + np.diag(off, 1) + np.diag(off, -1))
    weights = vectors[0] ** 2
    weights /= weights.sum()
    values.setflags(write=False)
    weights.setflags(write=False)
    return values, weights


def kappa(eig_low: float, eig_high: float, dim: int, noise_std: float, lr: float, weight_decay: float) -> float:
    """Concentration of the stationary law of f = X̄₁²: κ = (a_h − a_l)√(p−1) / (2σ√(2ηλ)); +inf where the
    denominator underflows to 0 (σ = 1e-250 with λ = 1e-200: the law is then all at f = 1, r* = 0)."""
    denominator = 2.0 * noise_std * math.sqrt(2.0 * lr * weight_decay)
    return (eig_high - eig_low) * math.sqrt(dim - 1) / denominator if denominator > 0 else math.inf


def risk_stationary(kappa_value: float, dim: int) -> float:
    """Limiting risk r* = ∫(1−f)ρ*(f)df / ∫ρ*(f)df, ρ*(f) ∝ e^{2κf} f^{−1/2} (1−f)^{(p−3)/2}.

    Exact quadrature for any κ > 0 and p ≥ 2 (see :class:`_StationaryLaw`) up to :data:`LARGE_KAPPA`, the
    large-κ expansion beyond (:func:`risk_stationary_large_kappa`). Small-ηλ asymptote: r* ≈ (p−1)/(4κ).
    """
    return risk_stationary_many([kappa_value], dim)[0]


def risk_stationary_many(kappas: Sequence[float], dim: int) -> list[float]:
    """:func:`risk_stationary` of each κ in ``kappas``, all their quadratures in one NumPy evaluation per
    rule (:func:`_integrals`): a fused sweep's members at once. Each value is the one its κ gets alone."""
    large = {k for k in kappas if k >= LARGE_KAPPA}   # the rest by quadrature (a κ ≤ 0 or NaN refused there)
    distinct = [k for k in dict.fromkeys(kappas) if k not in large]   # members that share ηλ share κ: one each
    risk = dict(zip(distinct, _risk_by_quadrature(distinct, dim), strict=True))
    return [risk_stationary_large_kappa(k, dim) if k in large else risk[k] for k in kappas]


def _risk_by_quadrature(kappas: Sequence[float], dim: int) -> list[float]:
    """r* of each (distinct) κ by quadrature, whatever its size (:func:`_integrals`)."""
    laws = [_StationaryLaw(k, dim) for k in kappas]
    integrals = _integrals(laws, 0.0, math.pi / 2, cos_powers=(2, 0))
    return [numerator / total for numerator, total in integrals]


LARGE_KAPPA = 1e8   # from here on r* is its two-term expansion (relative error ≤ 1e-11 measured, p ≤ 10⁵)


def risk_stationary_large_kappa(kappa_value: float, dim: int) -> float:
    """r* for κ ≥ :data:`LARGE_KAPPA`: (p−1)/(4κ)·(1 + 1/(4κ)). Near f = 1, u = 1 − f has the density
    ∝ e^{−2κu} u^{s−1} (1 − u)^{−1/2}, s = (p−1)/2: a Gamma(s, 2κ) law times 1 + u/2 + O(u²), so
    E u = (s/2κ)(1 + (s+1)/(4κ))/(1 + s/(4κ)) + O(s/κ³) = (s/2κ)(1 + 1/(4κ)) + O(s/κ³). There the quadrature in φ
    cannot resolve the peak (its width 1/√(8κ) near π/2, against a spacing of 2e-16 between doubles: 10% off
    at κ = 1e30, and a zero total, so no value at all, from ~1e100), while the expansion's next term is
    O(p/κ²) relatively: it agrees with the quadrature to ≤ 1e-11 at κ = 1e8 for p from 2 to 10⁵
    (tests/engine/test_theory.py)."""
    return (dim - 1) / (4.0 * kappa_value) * (1.0 + 1.0 / (4.0 * kappa_value))


def f_density_bins(kappa_value: float, dim: int, edges: list[float]) -> list[float]:
    """The stationary density ρ*(f) averaged over each bin [edges[i], edges[i+1]] of [0, 1]
    (probability of the bin over its width), to set beside a histogram of f = X̄₁². From :data:`LARGE_KAPPA` on,
    the law lies within ~(p−1)/(4κ) ≤ 2.5e-4 of f = 1 (sd smaller still): all of it in the bin holding its mean."""
    if kappa_value >= LARGE_KAPPA:
        mean = 1.0 - risk_stationary_large_kappa(kappa_value, dim)
        holding = max(i for i, f in enumerate(edges[:-1]) if f <= mean)
        return [1.0 / (f1 - f0) if i == holding else 0.0
                for i, (f0, f1) in enumerate(zip(edges, edges[1:], strict=False))]
    law = _StationaryLaw(kappa_value, dim)
    phis = [math.asin(math.sqrt(min(max(f, 0.0), 1.0))) for f in edges]
    return [float(law.integral(lo, hi) / law.total / (f1 - f0))
            for lo, hi, f0, f1 in zip(phis, phis[1:], edges, edges[1:], strict=False)]


class _StationaryLaw:
    """ρ*(f) ∝ e^{2κf} f^{−1/2} (1−f)^{(p−3)/2} in the variable f = sin²φ, where ρ* df becomes the
    smooth e^{2κ sin²φ} cos^{p−2}φ dφ on [0, π/2] (no endpoint singularities) and 1 − f = cos²φ.
    Integrated in logs, scaled by its maximum at cos²φ* = min(1, (p−2)/(4κ)), split there."""

    def __init__(self, kappa_value: float, dim: int):
        if not kappa_value > 0:
            raise ValueError(f"kappa: expected > 0, got {kappa_value}")
        self.kappa, self.dim = kappa_value, dim
        self.peak = math.acos(math.sqrt(min(1.0, (dim - 2) / (4.0 * kappa_value))))
        # the peak's width 1/√|ℓ''| of the log density ℓ = 2κ sin²φ + (p−2) ln cos φ: ℓ'' = 2(p−2) − 8κ
        # inside, 4κ − (p−2) at φ = 0, −4κ at φ = π/2 (p = 2). The integral is cut at the peak and 10 widths
        # on each side, so that a narrow peak (large κ) gets its own pieces instead of falling between nodes.
        m = dim - 2
        curvature = (4.0 * kappa_value if m == 0 else m - 4.0 * kappa_value if self.peak == 0.0
                     else 8.0 * kappa_value - 2.0 * m)
        width = 1.0 / math.sqrt(curvature) if curvature > 0 else math.inf
        self.cuts = sorted({self.peak, *(c for c in (self.peak - 10 * width, self.peak + 10 * width)
                                         if 0.0 < c < math.pi / 2)})

    @functools.cached_property
    def total(self) -> float:
        """∫_0^{π/2} density/max dφ."""
        return self.integral(0.0, math.pi / 2)

    def integral(self, lo: float, hi: float, cos_power: int = 0) -> float:
        """∫_lo^hi (density/max)·cos^{cos_power}φ dφ (:func:`_integrals` of this law alone)."""
        return _integrals([self], lo, hi, (cos_power,))[0][0]

    def pieces(self, lo: float, hi: float) -> list[tuple[float, float]]:
        """[lo, hi] cut at the peak and 10 widths on each side of it (:meth:`__init__`)."""
        cuts = [lo, *(c for c in self.cuts if lo < c < hi), hi]
        return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]

    def shift(self) -> float:
        """ℓ(φ*) in cosines: 2κ cos²φ* − (p−2) ln cos φ*, subtracted so that the density's maximum is 1."""
        c_peak, m = math.cos(self.peak), self.dim - 2
        return 2.0 * self.kappa * c_peak**2 - (m * math.log(c_peak) if m else 0.0)

    def adaptive(self, a: float, b: float, power: int) -> float:
        """QUADPACK on one piece, the integrand of :func:`_integrals` with cos^{power}: its fallback."""
        two_kappa, shift, exp, cos, log = 2.0 * self.kappa, self.shift(), math.exp, math.cos, math.log

        def g(phi: float) -> float:
            c = cos(phi)
            return exp(shift - two_kappa * c * c + (power * log(c) if power else 0.0)) if c > 0 else 0.0

        from scipy import integrate  # only this fallback needs SciPy: not imported with the module

        return integrate.quad(g, a, b, limit=500, epsabs=0.0, epsrel=1e-10)[0]


RULE_ROWS = 256   # pieces evaluated together by :func:`_integrals`: arrays of at most 256 × 128 nodes


def _integrals(laws: Sequence[_StationaryLaw], lo: float, hi: float,
               cos_powers: tuple[int, ...]) -> list[list[float]]:
    """For each law (all of one p), ∫_lo^hi (density/max)·cos^{c}φ dφ for each c in ``cos_powers``: on each of
    its pieces (:meth:`_StationaryLaw.pieces`) Gauss–Legendre with 64 and then 128 nodes; where the two differ
    by more than 1e-12 of the law's integral over [lo, hi] (a peak too narrow for them: large κ or p),
    QUADPACK's adaptive rule to 1e-10 on that piece (a far tail's piece, 1e-18 of the integral, needs no
    more than the rule). The pieces of every law are rows of one array per rule, :data:`RULE_ROWS` at a
    time (a cosine and a log per node, an exp per power), and every operation is elementwise or a sum
    along a row, so a law's integrals do not depend on the laws beside it: those of a fused sweep's
    members are those of each alone."""
    pieces = [law.pieces(lo, hi) for law in laws]
    rows = [(law, a, b) for law, own in zip(laws, pieces, strict=True) for a, b in own]
    m = laws[0].dim - 2 if laws else 0
    coarse: list[list[float]] = [[] for _ in cos_powers]   # [power][row], 64 nodes
    fine: list[list[float]] = [[] for _ in cos_powers]     # 128 nodes
    for first in range(0, len(rows), RULE_ROWS):
        block = rows[first:first + RULE_ROWS]
        a, b = np.array([[a, b] for _, a, b in block]).T
        # ℓ(φ) − ℓ(φ*) = −2κ(cos²φ − cos²φ*) + (p−2)(ln cos φ − ln cos φ*), then × cos^{c}φ: in cosines,
        # which keep their relative precision near π/2, where 2κ sin²φ − ℓ(φ*) cancelled (1e-8 at κ = 1e9)
        two_kappa = np.array([[2.0 * law.kappa] for law, _, _ in block])
        shift = np.array([[law.shift()] for law, _, _ in block])
        half, mid = (0.5 * (b - a))[:, None], (0.5 * (b + a))[:, None]
        for nodes, into in ((64, coarse), (128, fine)):
            x, w = _legendre(nodes)
            c = np.cos(half * x + mid)   # interior points: cos φ > 0
            base, log_c = shift - two_kappa * c * c, np.log(c)
            for k, column in zip(cos_powers, into, strict=True):
                # a sum along each row (a matrix product's order of summation may depend on the rows beside)
                integrand = np.exp(base + (m + k) * log_c if m + k else base)
                column.extend((half[:, 0] * (integrand * w).sum(axis=1)).tolist())
    spans = [slice(end - len(own), end) for own, end in zip(pieces, itertools.accumulate(map(len, pieces)),
                                                               strict=True)]   # each law's rows
    values = []   # [power][row]
    for k, rough, exact in zip(cos_powers, coarse, fine, strict=True):
        tolerance = [1e-12 * abs(math.fsum(exact[span])) for span in spans for _ in range(span.stop - span.start)]
        values.append([v128 if abs(v128 - v64) <= tol else law.adaptive(pa, pb, m + k)
                       for v64, v128, tol, (law, pa, pb) in zip(rough, exact, tolerance, rows, strict=True)])
    return [[math.fsum(v[span]) for v in values] for span in spans]


@functools.lru_cache(maxsize=4)
def _legendre(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights on [−1, 1]."""
    return leggauss(nodes)


def risk_stationary_asymptote(kappa_value: float, dim: int) -> float:
    """Large-κ (small ηλ) limit of :func:`risk_stationary`: (p−1)/(4κ)."""
    return (dim - 1) / (4.0 * kappa_value)
