"""Reference problems with known answers for smdengine.nrq.theory (docs/theory.md).

Each check uses a method independent of the implementation under test: closed forms
(Bessel functions for p = 2, Dawson's integral for p = 3), a brute-force composite Simpson rule on
a fine numpy grid after a substitution that removes the endpoint singularities, and a numerical
ODE solution for the norm relaxation.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, special

from smdengine.nrq import theory

# The reference problem: p=10, a=(1,2), σ=1, η=0.1, λ=0.01.
REF = dict(eig_low=1.0, eig_high=2.0, dim=10, noise_std=1.0, lr=0.1, weight_decay=0.01)


# ----------------------------------------------------------------------------- kappa


def test_kappa_reference_problem():
    # κ = (a_h − a_l)√(p−1) / (2σ√(2ηλ)) = 1·3 / (2·√0.002) = 33.541019662...
    k = theory.kappa(**REF)
    assert k == pytest.approx(3.0 / (2.0 * math.sqrt(0.002)), rel=1e-14)
    assert k == pytest.approx(33.54, abs=0.005)


@pytest.mark.parametrize("factor", [2.0, 0.5, 7.0])
def test_kappa_scalings(factor):
    base = theory.kappa(**REF)
    # linear in the gap, inverse in σ, inverse square-root in ηλ; invariant when ηλ is fixed
    assert theory.kappa(**{**REF, "eig_high": 1.0 + factor}) == pytest.approx(factor * base, rel=1e-13)
    assert theory.kappa(**{**REF, "noise_std": factor}) == pytest.approx(base / factor, rel=1e-13)
    assert theory.kappa(**{**REF, "lr": REF["lr"] * factor}) == pytest.approx(base / math.sqrt(factor), rel=1e-13)
    assert theory.kappa(**{**REF, "lr": REF["lr"] * factor, "weight_decay": REF["weight_decay"] / factor}) \
        == pytest.approx(base, rel=1e-13)


# ----------------------------------------------------------------------------- stationary risk


def brute_force_risk(kappa: float, p: int, n: int = 400_001) -> float:
    """r* = ∫(1−f)ρ*/∫ρ*, ρ*(f) ∝ e^{2κf} f^{−1/2}(1−f)^{(p−3)/2}, by composite Simpson.

    Substituting f = cos²φ (φ ∈ [0, π/2], so 1−f = sin²φ) turns ρ*(f)df into
    2 e^{2κ} e^{−2κ sin²φ} sin^{p−2}φ dφ: bounded and smooth for every p ≥ 2 (the f^{−1/2} and, for
    p = 2, (1−f)^{−1/2} singularities are gone). The weight is evaluated in logs and shifted by its
    maximum (the constant e^{2κ} and any other constant cancel), so neither κ = 1e6 nor p = 10 000
    overflows or underflows. In y = 2κ sin²φ the weight is ≤ e^{−y} y^{(p−3)/2}, a Gamma((p−1)/2)
    shape, negligible beyond y_max = (p−1)/2 + 40√p + 200; as 2κ sin²φ ≥ 2κ(2φ/π)², the grid stops at
    φ = (π/2)√(y_max/2κ) when that is below π/2, so it resolves the peak for huge κ.
    """
    y_max = (p - 1) / 2.0 + 40.0 * math.sqrt(p) + 200.0
    top = min(math.pi / 2, (math.pi / 2) * math.sqrt(y_max / (2.0 * kappa)))
    phi = np.linspace(0.0, top, n)
    s2 = np.sin(phi) ** 2
    with np.errstate(divide="ignore"):
        log_sin_power = (p - 2) / 2.0 * np.log(s2) if p > 2 else np.zeros(n)  # log sin^{p−2}φ, −inf at 0
    log_w = -2.0 * kappa * s2 + log_sin_power
    w = np.exp(log_w - log_w.max())
    simpson = np.ones(n)
    simpson[1:-1:2], simpson[2:-1:2] = 4.0, 2.0
    return float(np.sum(simpson * s2 * w) / np.sum(simpson * w))


def closed_form_risk_p2(kappa: float) -> float:
    """p = 2: with f = sin²θ, ψ = 2θ the law is von Mises, ∝ e^{−κ cos ψ} on [0, π], so
    r* = (1 − I₁(κ)/I₀(κ))/2 (exponentially scaled Bessel functions: no overflow)."""
    return 0.5 * (1.0 - special.ive(1, kappa) / special.ive(0, kappa))


def closed_form_risk_p3(kappa: float) -> float:
    """p = 3: with f = u², ρ* ∝ e^{c u²} du on [0, 1], c = 2κ. Integrating by parts,
    E f = e^c/(2c I₀) − 1/(2c) with I₀ = ∫₀¹ e^{cu²}du = e^c D(√c)/√c (D: Dawson's integral), so
    r* = 1 − 1/(2√c D(√c)) + 1/(2c)."""
    c = 2.0 * kappa
    return 1.0 - 1.0 / (2.0 * math.sqrt(c) * special.dawsn(math.sqrt(c))) + 1.0 / (2.0 * c)


KAPPAS = [0.01, 0.3, 1.0, 33.54101966249684, 1e3, 1e6]


@pytest.mark.parametrize("kappa", KAPPAS)
@pytest.mark.parametrize("p", [2, 3, 10, 100])
def test_risk_stationary_vs_brute_force(kappa, p):
    assert theory.risk_stationary(kappa, p) == pytest.approx(brute_force_risk(kappa, p), rel=1e-8)


@pytest.mark.parametrize("kappa", KAPPAS)
def test_risk_stationary_p2_closed_form(kappa):
    assert theory.risk_stationary(kappa, 2) == pytest.approx(closed_form_risk_p2(kappa), rel=1e-9)


@pytest.mark.parametrize("kappa", [0.01, 0.3, 1.0, 33.54101966249684, 1e3, 1e5])
def test_risk_stationary_p3_closed_form(kappa):
    # (κ = 1e6 is left out: the closed form then cancels 1 − (1 − 5e−7) and keeps ~9 digits.)
    assert theory.risk_stationary(kappa, 3) == pytest.approx(closed_form_risk_p3(kappa), rel=1e-9)


def test_brute_force_reference_is_itself_right():
    # the independent references agree with each other (p = 2, 3) before they judge anything
    for k in (0.01, 1.0, 50.0, 1e4):
        assert brute_force_risk(k, 2) == pytest.approx(closed_form_risk_p2(k), rel=1e-10)
        assert brute_force_risk(k, 3) == pytest.approx(closed_form_risk_p3(k), rel=1e-9)


@pytest.mark.parametrize("kappa", [0.01, 1.0, 40.0])
def test_risk_stationary_p300_small_kappa(kappa):
    # 2κ ≤ 100: the implementation integrates over the whole range
    assert theory.risk_stationary(kappa, 300) == pytest.approx(brute_force_risk(kappa, 300), rel=1e-8)


def test_brute_force_reference_high_dim():
    # the reference for large p: uniform-sphere limit and large-κ asymptote (see the tests below)
    for p in (300, 1000, 10_000):
        assert brute_force_risk(1e-6, p) == pytest.approx((p - 1) / p, rel=1e-6)
        assert brute_force_risk(1e6, p) / ((p - 1) / 4e6) - 1.0 == pytest.approx(2.5e-7, rel=0.05, abs=p / 4e12)


@pytest.mark.parametrize("p, kappa", [(200, 60.0), (300, 60.0), (300, 1e3), (300, 1e6), (1000, 0.01),
                                      (1000, 40.0), (1000, 1e3), (1000, 1e6), (10_000, 1.0), (10_000, 1e6)])
def test_risk_stationary_high_dim(p, kappa):
    assert theory.risk_stationary(kappa, p) == pytest.approx(brute_force_risk(kappa, p), rel=1e-8)


def test_risk_stationary_reference_problem():
    # docs/theory.md: p=10, a=(1,2), σ=1, η=0.1, λ=0.01 → r* ≈ 0.0676
    r = theory.risk_stationary(theory.kappa(**REF), 10)
    assert r == pytest.approx(0.0676, abs=5e-5)


@pytest.mark.parametrize("p", [2, 3, 10, 100])
def test_risk_stationary_small_kappa_is_uniform_sphere(p):
    # κ → 0: f = X̄₁² with X̄ uniform on the sphere, E f = 1/p, so r* → (p−1)/p; first-order
    # correction: dr*/dκ = −2 Var f = −4(p−1)/(p²(p+2)) (Var of Beta(1/2, (p−1)/2)).
    k = 1e-6
    expected = (p - 1) / p - 4.0 * (p - 1) / (p * p * (p + 2)) * k
    assert theory.risk_stationary(k, p) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("p", [2, 3, 10, 100])
@pytest.mark.parametrize("kappa", [1e3, 1e4, 1e6])
def test_risk_stationary_large_kappa_asymptote(kappa, p):
    # In y = 2κ(1−f) the law is e^{−y} y^{(p−3)/2} (1 − y/2κ)^{−1/2}; expanding the last factor,
    # r* = (p−1)/(4κ) · (1 + 1/(4κ) + O(κ⁻²)) for every p.
    r = theory.risk_stationary(kappa, p)
    asym = theory.risk_stationary_asymptote(kappa, p)
    assert asym == (p - 1) / (4.0 * kappa)
    # second-order term measured ≈ p/(16κ²); allow 5% of the first-order term plus p/(4κ²)
    assert r / asym - 1.0 == pytest.approx(1.0 / (4.0 * kappa), rel=0.05, abs=p / (4.0 * kappa**2))


@pytest.mark.parametrize("p", [2, 4, 10, 1000, 100_000])
@pytest.mark.parametrize("kappa", [1e7, 1e8, 1e9])
def test_risk_stationary_finds_a_narrow_peak(kappa, p):
    # the peak of the law in φ is ~κ^{-1/2} wide: with cuts only at its maximum, every quadrature node of
    # a piece missed it and r* came out 39% low at p = 10, κ = 1e9 (and p = 2 divided by zero). Beyond the
    # asymptote's first correction 1/(4κ) the next is ~p/(16κ²) (allowed p/(8κ²): 1.25e-10 at p = 10⁵, κ = 1e7;
    # ≤ 1.25e-12 from κ = 1e8); the quadrature's own error measured ≤ 9e-12 (p = 2, κ = 1e9), so 3e-11 leaves
    # room for another machine's rounding. The quadrature itself, which risk_stationary leaves for the expansion from LARGE_KAPPA = 1e8 on:
    # this is the agreement that justifies the switch.
    [r] = theory._risk_by_quadrature([kappa], p)
    assert r / theory.risk_stationary_asymptote(kappa, p) - 1.0 == pytest.approx(1.0 / (4.0 * kappa),
                                                                                 abs=3e-11 + p / (8.0 * kappa**2))
    if kappa >= theory.LARGE_KAPPA:
        assert theory.risk_stationary(kappa, p) == pytest.approx(r, rel=3e-11)


def gamma_form_risk(kappa: float, p: int) -> float:
    """r* = E[1 − f] from the law of y = 2κ(1 − f), ∝ e^{−y} y^{s−1} (1 − y/2κ)^{−1/2} on [0, 2κ], s = (p−1)/2,
    by SciPy's adaptive quadrature in y (relative to the Gamma(s) law's own scale, so that a huge κ is no
    narrow peak): an independent reference where the quadrature in φ cannot resolve the peak."""
    s = (p - 1) / 2.0
    # the Gamma law's bulk, s ± 60√s (+ 200 for small s): e^{−y}y^{s} is below 1e-25 of its peak outside
    low, top = max(0.0, s - 60.0 * math.sqrt(s) - 200.0), min(2.0 * kappa, s + 60.0 * math.sqrt(s) + 200.0)
    peak = -s + s * math.log(s)   # the log of e^{−y}y^{s} at its maximum, subtracted: no underflow at p = 10⁵

    def weight(y: float, power: int) -> float:
        return math.exp(-y + (s - 1 + power) * math.log(y) - peak) / math.sqrt(1.0 - y / (2.0 * kappa))

    moment = integrate.quad(weight, low, top, args=(1,), epsabs=0.0, epsrel=1e-12, limit=200, points=[s])[0]
    total = integrate.quad(weight, low, top, args=(0,), epsabs=0.0, epsrel=1e-12, limit=200, points=[s])[0]
    return moment / total / (2.0 * kappa)


@pytest.mark.parametrize("p", [2, 10, 100_000])
@pytest.mark.parametrize("kappa", [1e8, 1e30, 1e100, 1e300])
def test_risk_stationary_and_the_density_at_a_kappa_no_quadrature_resolves(kappa, p):
    """σ = 1e-200 gives κ ~ 1e200: the peak, 1/√(8κ) wide at φ = π/2, is below the spacing of doubles there, and
    the quadrature came out 10% off at κ = 1e30, then with a zero total (a run of such a spec failed with
    ZeroDivisionError). The expansion, and the density's whole mass in the bin holding f = 1 − r*."""
    r = theory.risk_stationary(kappa, p)
    assert 0 < r < 1 and r == pytest.approx(gamma_form_risk(kappa, p), rel=1e-11)   # measured ≤ 1.5e-11 … at κ = 1e8
    edges = [i / 20 for i in range(21)]
    assert theory.f_density_bins(kappa, p, edges) == [0.0] * 19 + [pytest.approx(20.0)]


@pytest.mark.parametrize(("p", "bins"), [(10, 20), (100_000, 1000)])
def test_the_density_at_the_switch_is_the_quadratures(p, bins):
    """At κ = LARGE_KAPPA the bins by quadrature (just below it) and by the point mass agree: the law's whole
    mass lies in the last bin either way. At p = 10⁵ its mean 1 − f is (p−1)/(4κ) = 2.5e-4, a quarter of the
    narrowest bin the spec allows (f_bins ≤ 1000), its sd ~1e-6: the tail beyond the bin, e^{−O(10⁶)}, is none
    in doubles."""
    edges = [i / bins for i in range(bins + 1)]
    below = theory.f_density_bins(theory.LARGE_KAPPA * (1 - 1e-9), p, edges)
    at = theory.f_density_bins(theory.LARGE_KAPPA, p, edges)
    assert at == [0.0] * (bins - 1) + [pytest.approx(float(bins))]
    assert below == pytest.approx(at, rel=1e-9, abs=1e-300)


def test_a_run_whose_kappa_no_quadrature_resolves_succeeds():
    """σ = 1e-200 (valid: noise_std > 0): the run ends with its theory, r* the expansion's."""
    import smdengine

    spec = {"kind": "nrq", "seed": 0, "device": "cpu", "params": {"noise_std": 1e-200, "steps": 20, "trials": 4,
                                                                     "record_every": 10}}
    document = smdengine.run(smdengine.parse_spec(spec)).to_document()
    p = smdengine.parse_spec(spec).params
    kappa = theory.kappa(1.0, 2.0, p.dim, p.noise_std, p.lr, p.weight_decay)
    assert document["theory"]["risk_stationary"] == [theory.risk_stationary_large_kappa(kappa, p.dim)] * 3


def test_risk_stationary_monotone_in_kappa():
    ks = np.geomspace(1e-3, 1e6, 40)
    rs = [theory.risk_stationary(float(k), 10) for k in ks]
    assert all(b < a for a, b in zip(rs, rs[1:], strict=False))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_risk_stationary_rejects_nonpositive_kappa(bad):
    with pytest.raises(ValueError, match="kappa"):
        theory.risk_stationary(bad, 10)


# ----------------------------------------------------------------------------- norm relaxation
#
# M = |X|². The discrete SGD update with g ⟂ X gives M' = (1−ηλ)²M + η²|g|²M/M, |g|² = L/M, i.e.
# dM/dt ≈ −2ηλM + η²L/M, so with L ≈ (p−1)σ² (near the optimum)
#     dM²/dt = −4λη M² + 2(p−1)σ²η²,         equilibrium M*² = (p−1)σ²η/(2λ).
# (The brief wrote the source term as 2(p−1)σ²η; that ODE would have equilibrium (p−1)σ²/(2λ),
# contradicting docs/theory.md's M*² = (p−1)σ²η/(2λ) — the η² above is the consistent one, and it is
# what a simulation with λ = 0 shows: M² grows by 2(p−1)σ²η² per step.)


def ode_norm_sq(m0: float, t: float, dim: int, noise_std: float, lr: float, weight_decay: float) -> float:
    def rhs(_, y):
        return [-4.0 * weight_decay * lr * y[0] + 2.0 * (dim - 1) * noise_std**2 * lr**2]

    sol = integrate.solve_ivp(rhs, (0.0, t), [m0 * m0], method="DOP853", rtol=1e-12, atol=1e-12)
    return math.sqrt(sol.y[0, -1])


NORM = dict(dim=10, noise_std=1.0, lr=0.1, weight_decay=0.01)


@pytest.mark.parametrize("m0", [0.01, 1.0, 6.7, 10.0, 100.0])
def test_norm_sq_relaxation_start_and_limit(m0):
    assert theory.norm_sq_relaxation(m0, 0.0, **NORM) == pytest.approx(m0, rel=1e-13)
    m_star = math.sqrt(9 * 0.1 / (2 * 0.01))  # √45 ≈ 6.708
    assert theory.norm_sq_equilibrium(**NORM) == pytest.approx(m_star, rel=1e-14)
    # 4ληt = 400: e^{−400}·M0² is far below the rounding of M*²
    assert theory.norm_sq_relaxation(m0, 1e5, **NORM) == pytest.approx(m_star, rel=1e-13)


@pytest.mark.parametrize("params", [
    NORM,
    dict(dim=100, noise_std=0.5, lr=0.01, weight_decay=0.05),
    dict(dim=2, noise_std=3.0, lr=1.0, weight_decay=1e-4),
])
@pytest.mark.parametrize("m0", [0.05, 1.0, 50.0])
@pytest.mark.parametrize("frac", [0.01, 0.3, 1.0, 3.0])
def test_norm_sq_relaxation_vs_ode(params, m0, frac):
    t = frac / (4.0 * params["lr"] * params["weight_decay"])  # in units of the relaxation time
    assert theory.norm_sq_relaxation(m0, t, **params) == pytest.approx(ode_norm_sq(m0, t, **params), rel=1e-8)


@pytest.mark.parametrize("t", [0.0, 10.0, 1e4])
def test_norm_sq_relaxation_without_weight_decay(t):
    params = dict(NORM, weight_decay=0.0)
    assert theory.norm_sq_relaxation(3.0, t, **params) == pytest.approx(ode_norm_sq(3.0, t, **params), rel=1e-8)


# ----------------------------------------------------------------------------- angular update


@pytest.mark.parametrize("lr, wd, momentum, expected", [
    (0.1, 0.01, 0.0, math.sqrt(0.002)),          # 0.04472...
    (0.1, 0.01, 0.9, math.sqrt(0.002 / 1.9)),    # 0.03244...
    (0.01, 0.01, 0.0, math.sqrt(0.0002)),        # after an LR decay by 10: 1/√10 of the above
    (1.0, 5e-4, 0.5, math.sqrt(1e-3 / 1.5)),
    (0.1, 0.0, 0.0, 0.0),                        # no weight decay: no equilibrium AU
])
def test_au_equilibrium(lr, wd, momentum, expected):
    assert theory.au_equilibrium(lr, wd, momentum) == pytest.approx(expected, rel=1e-14, abs=0.0)


def test_au_equilibrium_depends_on_lr_times_wd_only():
    assert theory.au_equilibrium(0.3, 0.02) == pytest.approx(theory.au_equilibrium(0.06, 0.1), rel=1e-14)
    assert theory.au_equilibrium(0.1, 0.01) / theory.au_equilibrium(0.01, 0.01) == pytest.approx(math.sqrt(10))


@pytest.mark.parametrize("dim", [2, 3, 10, 100, 342])
def test_the_init_norm_law_is_scipys_gauss_laguerre_rule(dim):
    """The Golub–Welsch nodes and weights against SciPy's ``roots_genlaguerre`` (weights normalized), where
    SciPy's weights are finite (its Γ(α+1) factor overflows from p = 344)."""
    nodes, weights = theory.init_norm_sq_law(dim, 0.5)
    u, w = special.roots_genlaguerre(48, dim / 2.0 - 1.0)
    assert np.allclose(nodes, 2.0 * 0.25 * u, rtol=1e-12, atol=0.0)
    assert np.allclose(weights, w / w.sum(), rtol=0.0, atol=1e-14)


@pytest.mark.parametrize("dim", [2, 343, 344, 400])
def test_the_init_norm_law_has_the_moments_of_a_scaled_chi_square(dim):
    """M₀ = s²·χ²_p: E M₀ = p s², E M₀² = p(p+2) s⁴, E M₀^{-1} = 1/((p−2) s²) for p > 2, and √M₀'s mean
    √2 s Γ((p+1)/2)/Γ(p/2). The rule is exact for polynomials of degree < 96; 1/M₀ and √M₀ are not
    polynomials (quadrature error, far below 1e-9 at p ≥ 343)."""
    s2 = 0.3**2
    m, w = theory.init_norm_sq_law(dim, 0.3)
    assert np.all(np.isfinite(w)) and np.all(w > 0) and w.sum() == pytest.approx(1.0, abs=1e-14)
    assert (w * m).sum() == pytest.approx(dim * s2, rel=1e-12)
    assert (w * m**2).sum() == pytest.approx(dim * (dim + 2) * s2**2, rel=1e-12)
    if dim > 2:
        assert (w / m).sum() == pytest.approx(1.0 / ((dim - 2) * s2), rel=1e-9)
        half = math.exp(math.lgamma((dim + 1) / 2) - math.lgamma(dim / 2))
        assert (w * np.sqrt(m)).sum() == pytest.approx(math.sqrt(2 * s2) * half, rel=1e-9)
