"""The normalized linear model of seed 002 §6.1: SGD + weight decay (eq. 18) or its SDE (eq. 19).

Model F_z(x) = ⟨x̄, z⟩ (x̄ = x/|x|, x ∈ R^D), N = D − 2 inputs z_i ~ N(0, I_D), targets
y_i = ⟨x̄*, z_i⟩, loss L(x) = (1/2N) Σ (⟨x̄, z_i⟩ − y_i)². The zero-loss directions form the affine
plane S = x̄* + null(Z) and Γ₁ = S ∩ unit sphere is a circle of radius ρ = |Π_null x̄*| around
c = x̄* − Π_null x̄*. Per step, ε ~ N(0, σ̂²I) adds the loss ⟨x̄, ε⟩, whose gradient is Pε/|x|:

    sgd (eq. 18):  x ← (1 − ηλ)x − η(∇L(x) + Pε/|x|)
    sde (eq. 19):  dX = −η(∇L + λX) dt + (η/|X|) P dW_σ̂   (Euler–Maruyama, step dt, t in SGD steps)

Every trial starts at x₀ = init_norm·x̄* (θ = 0 on Γ₁); trials differ only by their noise. The
data (Z, x*) come from ``data_seed`` so that runs with different η share them.

Recorded at t = 0, r, 2r, … < steps and at t = steps (the final state): ``theta`` — for the first ``record_trials`` trials, the angle (rad) of
the projection of x̄ on the plane of Γ₁, measured around c from the direction of x̄*;
``circular_variance`` 1 − |mean e^{iθ}| over all trials; ``norm`` mean |x|; ``loss`` mean L.
Theory (seed 002 eq. 11–12, with R(0) = init_norm): ``norm_scale`` R(t), ``tau`` the time change
τ(t) = ½ ln(1 + (e^{4ηλt} − 1)·η/(2λR(0)⁴)), ``lr_time`` ηt. Without weight decay (λ = 0, seed 002
Thm 3.2: the same limiting diffusion, exponentially slower) both have closed λ → 0 limits,
R(t)⁴ = R(0)⁴ + 2η²t and τ(t) = ½ ln(1 + 2η²t/R(0)⁴), which are what is returned; no theory line of
this model needs λ > 0, so none is omitted. Out of regime (ηλh > 0.1, h the update's step:
:meth:`NormalizedLinearParams.regime_warnings`) ``tau`` and ``norm_scale`` are omitted.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from smdengine._declare import Model, Outputs, PlotDef
from smdengine._lazy import lazy_import
from smdengine._runtime import saved
from smdengine._science import REGIME_CODES, Phase, record_steps, regime_warnings
from smdengine._simulator import Context, Row, Simulator
from smdengine.sde._common import DT_DESCRIPTION, Recording, params_of, substeps

if TYPE_CHECKING:
    import torch

    from smdengine._registry import SDESpec
else:
    torch = lazy_import("torch", globals())


class NormalizedLinearParams(Recording):
    """Seed 002 §6.1: F_z(x) = ⟨x/|x|, z⟩, N = D − 2 random inputs, ℓ2 loss plus the noise ⟨x/|x|, ε⟩."""

    model: Literal["normalized_linear"] = Field(..., description="The sde model: the normalized linear model of seed 002 §6.1.")
    dim: int = Field(10, ge=3, le=10_000, description="D; N = D − 2 samples, so Γ₁ is a circle.")
    noise_std: float = Field(0.3, gt=0, le=1e3, description="σ̂, with ε ~ N(0, σ̂²I).")
    lr: float = Field(1e-2, gt=0, le=10, description="η.")
    weight_decay: float = Field(0.05, ge=0, le=100, description="λ; 0 runs without weight decay (seed 002 Thm 3.2).")
    trials: int = Field(60, ge=1, le=1_000_000, description="Independent runs from the same start.")
    integrator: Literal["sgd", "sde"] = Field("sgd", description="sgd: eq. 18 (discrete); sde: eq. 19 by Euler–Maruyama.")
    dt: float = Field(1.0, gt=0, le=1, description=DT_DESCRIPTION + " Used by integrator sde.")
    init_norm: float = Field(1.0, gt=0, le=1e3, description="|x₀|; every trial starts at init_norm·x*/|x*| on Γ.")
    data_seed: int = Field(0, ge=0, le=2**63 - 1, description="Seed of the inputs z_i and target x* (kept fixed across η).")
    record_trials: int = Field(60, ge=1, le=1000, description="Trials whose angle θ is stored at every record.")
    steps: int = Field(20_000, ge=1, le=100_000_000, description="Horizon, in SGD steps.")

    @model_validator(mode="after")
    def _check(self) -> NormalizedLinearParams:
        substeps(self.dt)
        if self.integrator == "sgd" and self.dt != 1.0:
            raise ValueError(f"dt: expected 1 with integrator sgd (it has no step size), got {self.dt}")
        return self

    def substeps(self) -> int:
        return substeps(self.dt) if self.integrator == "sde" else 1

    def regime_warnings(self) -> list[dict[str, Any]]:
        """The update's decay factor is 1 − ηλh (h = 1 for sgd, dt for sde): x = ηλh ≥ 2 no equilibrium
        norm, ≥ 1 a reversing update, > 0.1 beyond the small-ηλ regime of eq. 11–12 (see
        :func:`smdengine._science.phase_regime`); each omits ``norm_scale`` and ``tau`` (``lr_time`` is the
        plain time axis ηt and is kept). λ = 0 is in regime."""
        closed = ["tau", "norm_scale"]
        return regime_warnings([Phase(0, self.lr, self.weight_decay, 1.0)], dict.fromkeys(REGIME_CODES, closed),
                               h=1.0 / self.substeps(), total_steps=self.steps)

    @property
    def work(self) -> int:
        return self.trials * self.steps * self.substeps() * self.dim * (self.dim - 2)


OUTPUTS = Outputs(
    metrics=("theta", "circular_variance", "norm", "loss"),
    theory=("tau", "norm_scale", "lr_time"),
    summary=("circular_variance_final",),
    plots={
        "angles": PlotDef("Angle θ on the solution circle Γ₁", "θ (rad)", ("theta",), style="angles"),
        "norm": PlotDef("Weight norm", "|x|", ("norm",), ("norm_scale",)),
    },
)


class NormalizedLinear(Simulator["SDESpec"]):
    """The (trials, D) states. Resumable after any whole step (state: x and the RNG)."""

    names = OUTPUTS.metrics
    p: NormalizedLinearParams

    def __init__(self, spec: SDESpec, ctx: Context):
        super().__init__(spec, ctx)
        p = self.p
        self.k = p.substeps()
        dt = 1.0 / self.k
        self.problem = Problem(p.dim, p.data_seed, ctx.device, ctx.dtype)
        self.x = (p.init_norm * self.problem.x_star).expand(p.trials, p.dim).clone()
        self.eps = torch.empty_like(self.x)
        self.drift, self.noise = p.lr * dt, p.lr * math.sqrt(dt) * p.noise_std
        self.shown = min(p.record_trials, p.trials)

    def step(self, n: int, record: bool) -> Row | None:
        x, problem, gen = self.x, self.problem, self.ctx.gen
        row = self.final_row() if record else None
        for _ in range(self.k):
            torch.randn(x.shape, generator=gen, out=self.eps)
            problem.step(x, self.eps, self.drift, self.p.weight_decay, self.noise)
        return row

    def final_row(self) -> Row:
        """The row of the current state (every metric of this model is one of the state)."""
        x, problem = self.x, self.problem
        theta, loss = problem.angle(x), problem.loss(x)
        return {
            "theta": theta[:self.shown],
            "circular_variance": 1.0 - torch.stack([theta.cos().mean(), theta.sin().mean()]).norm(),
            "norm": torch.linalg.vector_norm(x, dim=1).mean(),
            "loss": loss.mean(),
        }

    def state(self) -> dict[str, Any]:
        return {"x": saved(self.x), "rng": self.ctx.gen.get_state()}

    def load_state(self, state: dict[str, Any], step: int) -> None:
        self.x.copy_(state["x"])
        self.ctx.gen.set_state(state["rng"])

    @classmethod
    def predict(cls, spec: SDESpec) -> dict[str, Any]:
        """R(t), τ(t) and ηt on the record steps."""
        p = params_of(spec, NormalizedLinearParams)
        t = np.asarray(record_steps(p.steps, p.record_every), dtype=np.float64)
        return {"tau": time_change(t, p.lr, p.weight_decay, p.init_norm).tolist(),
                "norm_scale": norm_scale(t, p.lr, p.weight_decay, p.init_norm).tolist(),
                "lr_time": (p.lr * t).tolist()}

    def summarize(self, series: dict[str, list], theory: dict[str, Any]) -> dict[str, Any]:
        """Tail means + ``circular_variance_final`` (of the state after the last update)."""
        summary = super().summarize(series, theory)
        summary["circular_variance_final"] = float(self.final_row()["circular_variance"])
        return summary


def norm_scale(t: np.ndarray, lr: float, weight_decay: float, init_norm: float = 1.0) -> np.ndarray:
    """R(t) = (η/(2λ) + e^{−4ηλt}(R₀⁴ − η/(2λ)))^{1/4} (seed 002 eq. 11 with R(0) = R₀); at λ = 0 its limit
    (R₀⁴ + 2η²t)^{1/4} (e^{−4ηλt} = 1 − 4ηλt + O(λ²): η/(2λ)·4ηλt = 2η²t)."""
    if weight_decay == 0.0:
        return (init_norm**4 + 2.0 * lr**2 * np.asarray(t, dtype=np.float64)) ** 0.25
    c = lr / (2.0 * weight_decay)
    return (c + np.exp(-4.0 * lr * weight_decay * t) * (init_norm**4 - c)) ** 0.25


def time_change(t: np.ndarray, lr: float, weight_decay: float, init_norm: float = 1.0) -> np.ndarray:
    """τ(t) = ∫₀ᵗ η²/R(s)⁴ ds = ½ ln(1 + (e^{4ηλt} − 1)·k), k = η/(2λR₀⁴) (seed 002 eq. 12),
    evaluated in logs so that large 4ηλt does not overflow. At λ = 0 its limit ½ ln(1 + 2η²t/R₀⁴)
    ((e^{x} − 1)·k → 4ηλt·η/(2λR₀⁴)), the integral of η²/R(s)⁴ with R⁴ = R₀⁴ + 2η²s."""
    if weight_decay == 0.0:
        return 0.5 * np.log1p(2.0 * lr**2 * np.asarray(t, dtype=np.float64) / init_norm**4)
    x = 4.0 * lr * weight_decay * np.asarray(t, dtype=np.float64)
    k = lr / (2.0 * weight_decay * init_norm**4)
    if k < 1.0:  # ln((1 − k) + k e^x)
        return 0.5 * np.logaddexp(math.log1p(-k), math.log(k) + x)
    return 0.5 * (math.log(k) + x + np.log1p((1.0 - k) / k * np.exp(-x)))


def inverse_time_change(tau: np.ndarray, lr: float, weight_decay: float, init_norm: float = 1.0) -> np.ndarray:
    """t(T) = ln((e^{2T} − 1)/k + 1)/(4ηλ), the SGD steps that reach τ = T; at λ = 0,
    R₀⁴(e^{2T} − 1)/(2η²)."""
    if weight_decay == 0.0:
        return init_norm**4 * np.expm1(2.0 * np.asarray(tau, dtype=np.float64)) / (2.0 * lr**2)
    k = lr / (2.0 * weight_decay * init_norm**4)
    return np.log(np.expm1(2.0 * np.asarray(tau, dtype=np.float64)) / k + 1.0) / (4.0 * lr * weight_decay)


class Problem:
    """The data of one normalized linear problem and the batched update on (trials, D) states."""

    def __init__(self, dim: int, data_seed: int, device: torch.device, dtype: torch.dtype):
        # drawn in float64 on the CPU so the problem is the same on every device and dtype
        gen = torch.Generator().manual_seed(data_seed)
        n = dim - 2
        z = torch.randn(n, dim, generator=gen, dtype=torch.float64)
        x_star = torch.randn(dim, generator=gen, dtype=torch.float64)
        x_star /= torch.linalg.vector_norm(x_star)
        _, _, vh = torch.linalg.svd(z)               # rows n, n+1 of vh span null(Z)
        null = vh[n:].T                              # (D, 2)
        along = null @ (null.T @ x_star)             # Π_null x̄*
        radius = torch.linalg.vector_norm(along)
        u1 = along / radius
        u2 = null @ (null.T @ torch.randn(dim, generator=gen, dtype=torch.float64))
        u2 -= u1 * (u1 @ u2)
        u2 /= torch.linalg.vector_norm(u2)
        self.radius = float(radius)
        self.centre = (x_star - along).to(device, dtype)
        self.z = z.to(device, dtype)                 # (N, D)
        self.y = (z @ x_star).to(device, dtype)      # (N,)
        self.x_star = x_star.to(device, dtype)       # (D,), unit
        self.basis = torch.stack([u1, u2], dim=1).to(device, dtype)  # (D, 2): u1 towards x̄*
        self.n = n

    def angle(self, x: torch.Tensor) -> torch.Tensor:
        """θ (trials,): angle of the projection of x̄ on the plane of Γ₁ (around its centre)."""
        coords = (x / torch.linalg.vector_norm(x, dim=1, keepdim=True)) @ self.basis
        return torch.atan2(coords[:, 1], coords[:, 0])

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """L(x) (trials,)."""
        unit = x / torch.linalg.vector_norm(x, dim=1, keepdim=True)
        return (unit @ self.z.T - self.y).square().mean(dim=1) / 2.0

    def step(self, x: torch.Tensor, eps: torch.Tensor, drift: float, weight_decay: float, noise: float) -> None:
        """In place: x ← x − drift·(∇L(x) + λx) − noise·Pε/|x| for standard-normal ε (trials, D)."""
        r = torch.linalg.vector_norm(x, dim=1, keepdim=True)
        unit = x / r
        residual = unit @ self.z.T - self.y                       # (trials, N)
        # drift·∇L + noise·Pε/|x| = P(drift·Zᵀres/N + noise·ε)/|x|
        v = torch.addmm(eps, residual, self.z, beta=noise, alpha=drift / self.n)
        v.sub_(unit * torch.linalg.vecdot(v, unit).unsqueeze(1)).div_(r)
        x.mul_(1.0 - drift * weight_decay).sub_(v)


MODEL = Model("normalized_linear", NormalizedLinearParams, "smdengine.sde.normalized_linear:NormalizedLinear", OUTPUTS)
