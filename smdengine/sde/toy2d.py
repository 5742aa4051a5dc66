"""Seed 001 §4 / Fig. 5a: gradient descent with weight decay on the scale-invariant toy loss

    L(x, y) = x²/(x² + y²),   ∇L = (2xy², −2x²y)/(x² + y²)² = (2xy/|w|⁴)·(y, −x),

from a cloud of ``trials`` nearby starts w₀ = centre + cloud_radius·N(0, I₂), batched as a
(trials, 2) tensor. Time t counts GD steps; η = lr, λ = weight_decay.

integrator "gd":   w ← w − η(∇L(w) + λw), one update per unit time (seed 001's GD + WD);
integrator "flow": w ← w − η·dt(∇L(w) + λw), k = 1/dt Euler updates per unit time, i.e. Euler for
                   the gradient flow dw/dt = −η(∇L + λw).

Recorded at t = 0, r, 2r, … < steps (before the update t → t+1): with u_i = w_i/|w_i| the unit
directions and ū their mean over the cloud,
``spread`` = √(mean_i |u_i − ū|²) (dimensionless; ≈ the rms angle of the cloud, in radians, when small),
``loss`` = mean_i L(w_i) ∈ [0, 1], ``norm_sq`` = mean_i |w_i|².

Theory: the exact gradient flow from the centre (the "flow" integrator as dt → 0). With φ the angle
from the y-axis (x = r sin φ, y = r cos φ, so L = sin²φ): ∇L ⟂ w and |∇L| = |sin 2φ|/r, hence
    d r²/dt = −2ηλ r²                       ⇒ r_t² = r₀² e^{−2ηλt},
    dφ/dt = −η sin 2φ / r²                  ⇒ d ln tan φ/dt = −2η/r_t² = −2η e^{2ηλt}/r₀²,
    ln tan φ_t = ln tan φ₀ − (e^{2ηλt} − 1)/(λ r₀²)     (λ > 0; λ = 0: ln tan φ₀ − 2ηt/r₀²).
L and the flow are symmetric under x → −x and y → −y, so φ₀ = atan2(|x₀|, |y₀|) ∈ [0, π/2].
Theory series ``loss_flow`` = sin²φ_t = 1/(1 + e^{−2 ln tan φ_t}) and ``norm_sq_flow`` = r_t²;
they show the flow's monotone approach to zero loss, the contrast to GD's chaos (seed 001 §4).
Scalar ``stable_until``: the time after which the integrator's own update becomes unstable near
zero loss. Linearising one update of size h (h = 1 for gd, dt for flow) at φ ≈ 0 gives
φ ← φ(1 − 2ηh/((1 − ηλh) r²)), unstable once r² < ηh/(1 − ηλh); with the norm decaying as
r² = r₀²(1 − ηλh)^{2t/h} (exact while ∇L ≈ 0) that is
t* = h·ln(r₀²(1 − ηλh)/(ηh))/(−2 ln(1 − ηλh)) (0 when already unstable at t = 0, ∞ when λ = 0
and stable at t = 0). It is an estimate: it ignores
the gradient's outward push on the norm before zero loss is reached. GD (h = 1) crosses it after
~8 steps from (0.05, 0.5) at η = 0.1, λ = 0.5 (~22 from (0.1, 1)) and then the cloud's tiny
differences are amplified (chaos). The exact flow is stable for all t, but no fixed step is: the
curvature ~1/r² grows as WD shrinks r, and Euler with step dt crosses its t* about ln(1/dt)/(2ηλ)
later than GD (from (0.05, 0.5): 32, 39, 48, 55 for dt = 0.1, 0.05, 0.02, 0.01) and then turns
chaotic too. By then ln tan φ has dropped by roughly 1/(ηλ·dt), so for small dt (ηλ·dt ≲ 1/700 in
float64) x has already underflowed to exactly 0 — a fixed point — and the instability never shows.

Summary: means over the recorded t ≥ steps/2 of every series and theory series, plus
``spread_final`` (the spread of the final state, t = steps) and ``spread_max`` (the largest spread
over the recorded points and the final state). Non-finite values propagate (a w that underflows to
0 gives NaN: with λ > 0, r² reaches the float64 limit after ~700/(ηλ) steps at zero loss).
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
from smdengine.sde.spec import SDESpec, Toy2DParams

METRICS = ("spread", "loss", "norm_sq")
THEORY = ("loss_flow", "norm_sq_flow", "stable_until")
DISTRIBUTIONS = ()


def simulate(spec: SDESpec, *, on_progress: ProgressCallback | None = None,
             should_stop: StopCheck | None = None, progress_interval: float = 0.5,
             checkpoint: CheckpointHooks | None = None) -> RunResult:
    """Run the cloud; series ``step`` + :data:`METRICS`, theory from :func:`predict`, summary =
    tail means + ``spread_final``, ``spread_max``. Resumable after any whole step (state: the cloud
    w; the generator only draws the starts)."""
    p: Toy2DParams = spec.params
    device, dtype = resolve_device(spec.device), resolve_dtype(p.dtype)
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    k = p.substeps()
    h = 1.0 / k
    # drawn in float64 so that float32 and float64 runs start from the same cloud (up to rounding)
    w = torch.tensor(p.center, dtype=torch.float64, device=device) + p.cloud_radius * torch.randn(
        p.trials, 2, generator=gen, dtype=torch.float64, device=device)
    w = w.to(dtype)
    # the update is w ← (1 − ηλh)w − ηh·(2xy/|w|⁴)·(y, −x), with (y, −x) = flip(w)·(1, −1)
    # (elementwise ops only: a CPU BLAS matmul per step is far slower on a busy machine)
    shrink = 1.0 - p.lr * p.weight_decay * h
    kick = torch.tensor([-2.0 * p.lr * h, 2.0 * p.lr * h], dtype=dtype, device=device)
    recorder = Recorder(METRICS, p.steps, on_progress, should_stop, progress_interval, checkpoint)
    first = 0
    if recorder.resumed is not None:
        first = recorder.resumed.step
        w = recorder.resumed.state["w"].to(device=device, dtype=dtype)
    recorder.snapshot = lambda _step: {"w": saved(w)}  # w is rebound by every update: the lambda reads the current one
    every = p.record_every
    for n in range(first, p.steps):
        if n % every == 0:
            recorder.record(n, _metrics(w))
        for _ in range(k):
            coef = w.prod(dim=1).div_(w.square().sum(dim=1).square_()).unsqueeze_(1)  # xy/|w|⁴
            w = torch.addcmul(w * shrink, coef * kick, w.flip(1))
        recorder.tick(n + 1)
    recorder.flush(p.steps)

    prediction = predict(spec)
    summary = tail_means(recorder.series, prediction, p.steps / 2.0)
    final = _metrics(w)["spread"].item()
    summary["spread_final"] = final
    summary["spread_max"] = max([final, *recorder.series["spread"]],
                                key=lambda v: math.inf if math.isnan(v) else v)
    return RunResult(series=recorder.series, theory=prediction, summary=summary)


def _metrics(w: torch.Tensor) -> dict[str, torch.Tensor]:
    sq = w.square()
    r2 = sq.sum(dim=1)
    u = w / r2.sqrt().unsqueeze(1)
    return {
        "spread": (u - u.mean(dim=0)).square().sum(dim=1).mean().sqrt(),
        "loss": (sq[:, 0] / r2).mean(),
        "norm_sq": r2.mean(),
    }


def flow_from(x0: float, y0: float, lr: float, weight_decay: float, t) -> tuple[np.ndarray, np.ndarray]:
    """Exact gradient flow dw/dt = −η(∇L + λw) from (x₀, y₀) at the times ``t``: (loss, |w|²)."""
    t = np.asarray(t, dtype=np.float64)
    r0_sq = x0 * x0 + y0 * y0
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        norm_sq = r0_sq * np.exp(-2.0 * lr * weight_decay * t)
        if x0 == 0.0 or y0 == 0.0:  # on an axis: a stationary direction (L = 0 or the maximum L = 1)
            return np.full_like(t, 0.0 if x0 == 0.0 else 1.0), norm_sq
        if weight_decay > 0:
            drop = np.expm1(2.0 * lr * weight_decay * t) / (weight_decay * r0_sq)
        else:
            drop = 2.0 * lr * t / r0_sq
        log_tan = math.log(abs(x0) / abs(y0)) - drop
        loss = 1.0 / (1.0 + np.exp(-2.0 * log_tan))  # sin²φ from ln tan φ, without overflow trouble
    return loss, norm_sq


def stable_until(r0_sq: float, lr: float, weight_decay: float, h: float) -> float:
    """t* of the module docstring: when an update of size h stops being stable at zero loss."""
    shrink = 1.0 - lr * weight_decay * h
    ratio = r0_sq * shrink / (lr * h)
    if ratio <= 1.0:
        return 0.0
    if weight_decay == 0:
        return math.inf
    return h * math.log(ratio) / (-2.0 * math.log(shrink))


def predict(spec: SDESpec) -> dict[str, Any]:
    """``loss_flow`` and ``norm_sq_flow`` (exact gradient flow from the centre) on the record steps,
    and the scalar ``stable_until`` for the spec's integrator."""
    p: Toy2DParams = spec.params
    x0, y0 = p.center
    t = np.arange(0, p.steps, p.record_every, dtype=np.float64)
    loss, norm_sq = flow_from(x0, y0, p.lr, p.weight_decay, t)
    return {"loss_flow": loss.tolist(), "norm_sq_flow": norm_sq.tolist(),
            "stable_until": stable_until(x0 * x0 + y0 * y0, p.lr, p.weight_decay, 1.0 / p.substeps())}
