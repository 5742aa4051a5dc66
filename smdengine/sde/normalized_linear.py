"""The normalized linear model of seed 002 §6.1: SGD + weight decay (eq. 18) or its SDE (eq. 19).

Model F_z(x) = ⟨x̄, z⟩ (x̄ = x/|x|, x ∈ R^D), N = D − 2 inputs z_i ~ N(0, I_D), targets
y_i = ⟨x̄*, z_i⟩, loss L(x) = (1/2N) Σ (⟨x̄, z_i⟩ − y_i)². The zero-loss directions form the affine
plane S = x̄* + null(Z) and Γ₁ = S ∩ unit sphere is a circle of radius ρ = |Π_null x̄*| around
c = x̄* − Π_null x̄*. Per step, ε ~ N(0, σ̂²I) adds the loss ⟨x̄, ε⟩, whose gradient is Pε/|x|:

    sgd (eq. 18):  x ← (1 − ηλ)x − η(∇L(x) + Pε/|x|)
    sde (eq. 19):  dX = −η(∇L + λX) dt + (η/|X|) P dW_σ̂   (Euler–Maruyama, step dt, t in SGD steps)

Every trial starts at x₀ = init_norm·x̄* (θ = 0 on Γ₁); trials differ only by their noise. The
data (Z, x*) come from ``data_seed`` so that runs with different η share them.

Recorded at t = 0, r, 2r, …: ``theta`` — for the first ``record_trials`` trials, the angle (rad) of
the projection of x̄ on the plane of Γ₁, measured around c from the direction of x̄*;
``circular_variance`` 1 − |mean e^{iθ}| over all trials; ``norm`` mean |x|; ``loss`` mean L.
Theory (seed 002 eq. 11–12, with R(0) = init_norm): ``norm_scale`` R(t), ``tau`` the time change
τ(t) = ½ ln(1 + (e^{4ηλt} − 1)·η/(2λR(0)⁴)), ``lr_time`` ηt.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from smdengine.recorder import Recorder, tail_means
from smdengine.runtime import (
    CheckpointHooks,
    ProgressCallback,
    RunResult,
    StopCheck,
    resolve_device,
    resolve_dtype,
    saved,
)
from smdengine.sde.spec import SDESpec

METRICS = ("theta", "circular_variance", "norm", "loss")
THEORY = ("tau", "norm_scale", "lr_time")
DISTRIBUTIONS = ()


def simulate(spec: SDESpec, *, on_progress: ProgressCallback | None = None,
             should_stop: StopCheck | None = None, progress_interval: float = 0.5,
             checkpoint: CheckpointHooks | None = None) -> RunResult:
    """Run the model; series ``step`` + :data:`METRICS`, theory from :func:`predict`, summary = tail
    means + ``circular_variance_final``. Resumable after any whole step (state: x and the RNG)."""
    p = spec.params
    k = p.substeps()
    dt = 1.0 / k
    device, dtype = resolve_device(spec.device), resolve_dtype(p.dtype)
    problem = Problem(p.dim, p.data_seed, device, dtype)
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    x = (p.init_norm * problem.x_star).expand(p.trials, p.dim).clone()
    eps = torch.empty_like(x)
    drift, noise = p.lr * dt, p.lr * math.sqrt(dt) * p.noise_std
    shown = min(p.record_trials, p.trials)
    recorder = Recorder(METRICS, p.steps, on_progress, should_stop, progress_interval, checkpoint)

    first = 0
    if recorder.resumed is not None:
        state = recorder.resumed.state
        first = recorder.resumed.step
        x.copy_(state["x"])
        gen.set_state(state["rng"])
    recorder.snapshot = lambda _step: {"x": saved(x), "rng": gen.get_state()}
    for n in range(first, p.steps):
        if n % p.record_every == 0:
            theta, loss = problem.angle(x), problem.loss(x)
            recorder.record(n, {
                "theta": theta[:shown],
                "circular_variance": 1.0 - torch.stack([theta.cos().mean(), theta.sin().mean()]).norm(),
                "norm": torch.linalg.vector_norm(x, dim=1).mean(),
                "loss": loss.mean(),
            })
        for _ in range(k):
            torch.randn(x.shape, generator=gen, out=eps)
            problem.step(x, eps, drift, p.weight_decay, noise)
        recorder.tick(n + 1)
    recorder.flush(p.steps)
    prediction = predict(spec)
    summary = tail_means(recorder.series, prediction, p.steps / 2.0)
    summary["circular_variance_final"] = recorder.series["circular_variance"][-1]
    return RunResult(series=recorder.series, theory=prediction, summary=summary)


def predict(spec: SDESpec) -> dict[str, Any]:
    """R(t), τ(t) and ηt on the record steps."""
    p = spec.params
    t = np.arange(0, p.steps, p.record_every, dtype=np.float64)
    return {"tau": time_change(t, p.lr, p.weight_decay, p.init_norm).tolist(),
            "norm_scale": norm_scale(t, p.lr, p.weight_decay, p.init_norm).tolist(),
            "lr_time": (p.lr * t).tolist()}


def norm_scale(t: np.ndarray, lr: float, weight_decay: float, init_norm: float = 1.0) -> np.ndarray:
    """R(t) = (η/(2λ) + e^{−4ηλt}(R₀⁴ − η/(2λ)))^{1/4} (seed 002 eq. 11 with R(0) = R₀)."""
    c = lr / (2.0 * weight_decay)
    return (c + np.exp(-4.0 * lr * weight_decay * t) * (init_norm**4 - c)) ** 0.25


def time_change(t: np.ndarray, lr: float, weight_decay: float, init_norm: float = 1.0) -> np.ndarray:
    """τ(t) = ∫₀ᵗ η²/R(s)⁴ ds = ½ ln(1 + (e^{4ηλt} − 1)·k), k = η/(2λR₀⁴) (seed 002 eq. 12),
    evaluated in logs so that large 4ηλt does not overflow."""
    x = 4.0 * lr * weight_decay * np.asarray(t, dtype=np.float64)
    k = lr / (2.0 * weight_decay * init_norm**4)
    if k < 1.0:  # ln((1 − k) + k e^x)
        return 0.5 * np.logaddexp(math.log1p(-k), math.log(k) + x)
    return 0.5 * (math.log(k) + x + np.log1p((1.0 - k) / k * np.exp(-x)))


def inverse_time_change(tau: np.ndarray, lr: float, weight_decay: float, init_norm: float = 1.0) -> np.ndarray:
    """t(T) = ln((e^{2T} − 1)/k + 1)/(4ηλ), the SGD steps that reach τ = T."""
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
