"""Closed forms for the Noisy Rayleigh Quotient (seed 000; shared/design.md §4).

Notation: p = dim, σ = noise_std, η = lr, λ = weight_decay, α = momentum, t in updates.
"""
from __future__ import annotations

import math

from scipy import integrate


def au_equilibrium(lr: float, weight_decay: float, momentum: float = 0.0) -> float:
    """Root-mean-square angular update at equilibrium, √(2λη/(1+α)) (radians per update)."""
    return math.sqrt(2.0 * weight_decay * lr / (1.0 + momentum))


def norm_sq_equilibrium(dim: int, noise_std: float, lr: float, weight_decay: float) -> float:
    """|X|² at equilibrium near the optimum, √((p−1)σ²η/(2λ)) (continuous time, SGD)."""
    return math.sqrt((dim - 1) * noise_std**2 * lr / (2.0 * weight_decay))


def norm_sq_relaxation(norm_sq_start: float, t: float, dim: int, noise_std: float,
                       lr: float, weight_decay: float) -> float:
    """M_t = |X_t|² from M_0 (continuous time, SGD). From M' = (1−ηλ)²M + η²L/M with
    L = (p−1)σ²: d(M²)/dt = −4ληM² + 2η²L, so M_t² = e^{−4ληt}(M_0² − M*²) + M*² with
    M*² = (p−1)σ²η/(2λ); without weight decay M² grows linearly, M_t² = M_0² + 2η²(p−1)σ²t."""
    unit_grad_sq = (dim - 1) * noise_std**2
    if weight_decay == 0.0:
        return math.sqrt(norm_sq_start**2 + 2.0 * lr**2 * unit_grad_sq * t)
    target = unit_grad_sq * lr / (2.0 * weight_decay)
    decay = math.exp(-4.0 * lr * weight_decay * t)
    return math.sqrt(max(decay * (norm_sq_start**2 - target) + target, 0.0))


def kappa(eig_low: float, eig_high: float, dim: int, noise_std: float, lr: float, weight_decay: float) -> float:
    """Concentration of the stationary law of f = X̄₁²: κ = (a_h − a_l)√(p−1) / (2σ√(2ηλ))."""
    return (eig_high - eig_low) * math.sqrt(dim - 1) / (2.0 * noise_std * math.sqrt(2.0 * lr * weight_decay))


def risk_stationary(kappa_value: float, dim: int) -> float:
    """Limiting risk r* = ∫(1−f)ρ*(f)df / ∫ρ*(f)df, ρ*(f) ∝ e^{2κf} f^{−1/2} (1−f)^{(p−3)/2}.

    Exact quadrature for any κ > 0 and p ≥ 2. With f = sin²φ the density becomes the smooth
    e^{2κ sin²φ} cos^{p−2}φ on [0, π/2] (no endpoint singularities) and 1 − f = cos²φ. It is
    integrated in logs, scaled by its maximum at cos²φ* = min(1, (p−2)/(4κ)), and split there.
    Small-ηλ asymptote: r* ≈ (p−1)/(4κ).
    """
    if not kappa_value > 0:
        raise ValueError(f"kappa: expected > 0, got {kappa_value}")

    def log_density(phi: float) -> float:
        c = math.cos(phi)
        if dim == 2:
            return 2.0 * kappa_value * math.sin(phi) ** 2
        return 2.0 * kappa_value * math.sin(phi) ** 2 + (dim - 2) * math.log(c) if c > 0 else -math.inf

    peak = math.acos(math.sqrt(min(1.0, (dim - 2) / (4.0 * kappa_value))))
    top = log_density(peak)
    kw = dict(limit=500, epsabs=0.0, epsrel=1e-10)

    def integral(extra) -> float:
        g = lambda phi: math.exp(log_density(phi) - top) * extra(phi)  # noqa: E731
        pieces = [(0.0, peak), (peak, math.pi / 2)]
        return math.fsum(integrate.quad(g, lo, hi, **kw)[0] for lo, hi in pieces if hi > lo)

    return integral(lambda phi: math.cos(phi) ** 2) / integral(lambda phi: 1.0)


def risk_stationary_asymptote(kappa_value: float, dim: int) -> float:
    """Large-κ (small ηλ) limit of :func:`risk_stationary`: (p−1)/(4κ)."""
    return (dim - 1) / (4.0 * kappa_value)
