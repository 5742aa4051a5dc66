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
    """M_t = |X_t|² from M_0: M_t² = e^{−4ληt}(M_0² − M*²) + M*², M*² = (p−1)σ²η/(2λ)."""
    target = (dim - 1) * noise_std**2 * lr / (2.0 * weight_decay)
    if weight_decay == 0.0:  # M² grows linearly: dM²/dt = 2(p−1)σ²η
        return math.sqrt(norm_sq_start**2 + 2.0 * (dim - 1) * noise_std**2 * lr * t)
    decay = math.exp(-4.0 * lr * weight_decay * t)
    return math.sqrt(max(decay * (norm_sq_start**2 - target) + target, 0.0))


def kappa(eig_low: float, eig_high: float, dim: int, noise_std: float, lr: float, weight_decay: float) -> float:
    """Concentration of the stationary law of f = X̄₁²: κ = (a_h − a_l)√(p−1) / (2σ√(2ηλ))."""
    return (eig_high - eig_low) * math.sqrt(dim - 1) / (2.0 * noise_std * math.sqrt(2.0 * lr * weight_decay))


def risk_stationary(kappa_value: float, dim: int) -> float:
    """Limiting risk r* = ∫(1−f)ρ*(f)df / ∫ρ*(f)df, ρ*(f) ∝ e^{2κf} f^{−1/2} (1−f)^{(p−3)/2}.

    Exact quadrature, stable for any κ > 0: with y = 2κ(1−f) the density becomes
    e^{−y} y^{(p−3)/2} (2κ−y)^{−1/2} on [0, 2κ] and r* = E[y]/(2κ). For 2κ > 100 the range is
    cut at y = 100 (the tail weighs < e^{−100}) so that the (2κ−y)^{−1/2} factor stays smooth.
    Small-ηλ asymptote: r* ≈ (p−1)/(4κ).
    """
    if not kappa_value > 0:
        raise ValueError(f"kappa: expected > 0, got {kappa_value}")
    beta = (dim - 3) / 2.0
    span = 2.0 * kappa_value
    if span <= 100.0:
        weight = dict(weight="alg", wvar=(beta, -0.5))
        top, smooth = span, (lambda y: 1.0)
    else:
        weight = dict(weight="alg", wvar=(beta, 0.0))
        top, smooth = 100.0, (lambda y: (1.0 - y / span) ** -0.5)
    kw = dict(limit=200, epsabs=0.0, epsrel=1e-12)
    mass, _ = integrate.quad(lambda y: math.exp(-y) * smooth(y), 0.0, top, **weight, **kw)
    first, _ = integrate.quad(lambda y: y * math.exp(-y) * smooth(y), 0.0, top, **weight, **kw)
    return first / mass / span


def risk_stationary_asymptote(kappa_value: float, dim: int) -> float:
    """Large-κ (small ηλ) limit of :func:`risk_stationary`: (p−1)/(4κ)."""
    return (dim - 1) / (4.0 * kappa_value)
