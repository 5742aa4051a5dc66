"""Discrete SGD / heavy-ball SGDM + weight decay on the Noisy Rayleigh Quotient, batched over trials.

State X: (trials, p). Loss L(X) = XᵀAX/(2XᵀX), A = diag(a). With s = |X|², q = XᵀAX and
ε ~ N(0, I) drawn fresh each update, the scale-invariant stochastic gradient is
    g = (P A X̄ + σ P ε)/|X| = A X/s − X q/s² + σ ε/√s − σ X (X·ε)/s^{3/2},     g ⟂ X,
so the SGD update X ← X − η(g + λX) is one per-trial scale of X, one per-coordinate scale and one
noise term. Written that way a step costs one randn, two reductions and three (trials, p) passes.
SGDM (seed 003 Thm 2): v ← αv + g + λX; X ← X − ηv.
"""
from __future__ import annotations

import math
import time
from typing import Optional

import torch

from smdengine.nrq.predict import predict_nrq
from smdengine.nrq.schedule import phases, tail_start
from smdengine.nrq.spec import NRQSpec
from smdengine.runtime import Cancelled, Progress, ProgressCallback, RunResult, StopCheck, resolve_device, resolve_dtype

METRICS = ("risk", "loss", "au_mean", "au_rms", "norm_sq", "eff_lr")
THEORY = ("au_equilibrium", "norm_sq_theory", "risk_stationary", "kappa")


def simulate_nrq(spec: NRQSpec, *, on_progress: Optional[ProgressCallback] = None,
                 should_stop: Optional[StopCheck] = None, progress_interval: float = 0.5) -> RunResult:
    """Run an ``nrq`` spec; series ``step`` + :data:`METRICS` (means over trials), theory from
    :func:`predict_nrq`, summary = tail means (last half of the final phase)."""
    p = spec.params
    device, dtype = resolve_device(spec.device), resolve_dtype(p.dtype)
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    a = torch.tensor(p.spectrum(), dtype=dtype, device=device)
    x = p.init_std * torch.randn(p.trials, p.dim, generator=gen, dtype=dtype, device=device)
    stepper = _Stepper(x, a, p.noise_std, p.momentum, gen)
    phase_by_start = {ph.start: ph for ph in phases(p)}

    series: dict[str, list] = {"step": [], **{m: [] for m in METRICS}}
    pending_steps: list[int] = []
    pending_rows: list[torch.Tensor] = []

    def flush() -> None:
        nonlocal pending_steps, pending_rows
        rows = torch.stack(pending_rows).tolist() if pending_rows else []
        points = {"step": pending_steps, **{m: [r[i] for r in rows] for i, m in enumerate(METRICS)}}
        for key, values in points.items():
            series[key].extend(values)
        pending_steps, pending_rows = [], []
        if on_progress is not None:
            on_progress(Progress(step=n, total_steps=p.steps, points=points))

    lr = wd = 0.0
    last_emit = time.monotonic()
    n = 0
    while n < p.steps:
        phase = phase_by_start.get(n)
        if phase is not None:
            lr, wd = phase.lr, phase.weight_decay
            if phase.rescale != 1.0:
                stepper.rescale(phase.rescale)
        if n % p.record_every == 0:
            pending_steps.append(n)
            pending_rows.append(stepper.step_recorded(lr, wd))
        else:
            stepper.step(lr, wd)
        n += 1
        if time.monotonic() - last_emit >= progress_interval:
            flush()
            last_emit = time.monotonic()
            if should_stop is not None and should_stop():
                raise Cancelled(n)
    flush()
    theory = predict_nrq(spec)
    return RunResult(series=series, theory=theory, summary=_summary(series, theory, tail_start(p)))


def _summary(series: dict[str, list], theory: dict[str, list], start: float) -> dict[str, float]:
    """Means over recorded steps ≥ start (the last recorded point when none is)."""
    steps = series["step"]
    idx = [i for i, n in enumerate(steps) if n >= start] or [len(steps) - 1]
    out = {}
    for key, values in list(series.items()) + list(theory.items()):
        if key != "step" and isinstance(values, list):
            out[key] = math.fsum(values[i] for i in idx) / len(idx)
    return out


class _Stepper:
    """The batched update. Buffers are reused so a step allocates only small (trials,) tensors."""

    def __init__(self, x: torch.Tensor, a: torch.Tensor, noise_std: float, momentum: float,
                 gen: torch.Generator):
        self.x, self.a, self.sigma, self.alpha, self.gen = x, a, noise_std, momentum, gen
        self.eps = torch.empty_like(x)
        self.buf = torch.empty_like(x)
        self.v = torch.zeros_like(x) if momentum else None
        self.reduce = torch.stack([torch.ones_like(a), a], dim=1)  # (p, 2): |X|², XᵀAX in one matmul

    def rescale(self, factor: float) -> None:
        """X ← factor·X. The momentum buffer, dominated by g ∝ 1/|X|, scales by 1/factor."""
        self.x.mul_(factor)
        if self.v is not None:
            self.v.div_(factor)

    def step(self, lr: float, wd: float) -> torch.Tensor:
        """One update; returns (s, q) = (|X|², XᵀAX) before it, shape (trials, 2)."""
        x, eps, buf = self.x, self.eps, self.buf
        torch.randn(x.shape, generator=self.gen, out=eps)
        sq = torch.mul(x, x, out=buf) @ self.reduce
        s, q = sq[:, 0:1], sq[:, 1:2]
        e = torch.linalg.vecdot(x, eps).unsqueeze(1)
        inv_s = s.reciprocal()
        rs = inv_s.sqrt()
        # radial part of g/X: q/s² + σ(X·ε)/s^{3/2} (a (trials, 1) column)
        radial = (q * inv_s + self.sigma * e * rs) * inv_s
        if self.v is None:
            coef = torch.addcmul(radial.mul_(lr).add_(1.0 - lr * wd), inv_s, self.a, value=-lr)
            torch.mul(x, coef, out=buf)
            torch.addcmul(buf, eps, rs, value=-lr * self.sigma, out=x)
        else:
            coef = torch.addcmul(radial.neg_().add_(wd), inv_s, self.a)  # (g + λX) = X·coef + σε/√s
            self.v.mul_(self.alpha).addcmul_(x, coef).addcmul_(eps, rs, value=self.sigma)
            x.add_(self.v, alpha=-lr)
        return sq

    def step_recorded(self, lr: float, wd: float) -> torch.Tensor:
        """An update that also measures; returns the METRICS row (means over trials)."""
        before = self.x.clone()
        sq = self.step(lr, wd)
        s, q = sq[:, 0], sq[:, 1]
        angle = _angle(before, self.x)
        return torch.stack([
            1.0 - (before[:, 0] ** 2 / s).mean(),
            (q / (2.0 * s)).mean(),
            angle.mean(),
            angle.square().mean().sqrt(),
            s.mean(),
            (lr / s).mean(),
        ])


def _angle(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Row-wise angle between u and v, 2·atan2(|û−v̂|, |û+v̂|): accurate for tiny angles,
    where arccos of the cosine loses half the digits."""
    u = u / torch.linalg.vector_norm(u, dim=1, keepdim=True)
    v = v / torch.linalg.vector_norm(v, dim=1, keepdim=True)
    return 2.0 * torch.atan2(torch.linalg.vector_norm(u - v, dim=1), torch.linalg.vector_norm(u + v, dim=1))
