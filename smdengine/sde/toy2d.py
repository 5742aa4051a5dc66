"""Seed 001 §4 / Fig. 5a: gradient descent with weight decay on the scale-invariant toy loss

    L(x, y) = x²/(x² + y²),   ∇L = (2xy², −2x²y)/(x² + y²)² = (2xy/|w|⁴)·(y, −x),

from a cloud of ``trials`` nearby starts w₀ = centre + cloud_radius·N(0, I₂), batched as a
(trials, 2) tensor. Time t counts GD steps; η = lr, λ = weight_decay.

integrator "gd":   w ← w − η(∇L(w) + λw), one update per unit time (seed 001's GD + WD);
integrator "flow": w ← w − η·dt(∇L(w) + λw), k = 1/dt Euler updates per unit time, i.e. Euler for
                   the gradient flow dw/dt = −η(∇L + λw).

Recorded at t = 0, r, 2r, … < steps (before the update t → t+1) and at t = steps (the final state): with u_i = w_i/|w_i| the unit
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
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from smdengine._declare import Model, Outputs, PlotDef
from smdengine._lazy import lazy_import
from smdengine._science import record_steps
from smdengine._simulator import Context, Row, Simulator
from smdengine.sde._common import Recording, params_of, substeps

if TYPE_CHECKING:
    import torch

    from smdengine._registry import SDESpec
else:
    torch = lazy_import("torch", globals())


class Toy2DParams(Recording):
    """Seed 001 §4: GD + weight decay on L(x, y) = x²/(x² + y²) from a cloud of nearby starts."""

    model: Literal["toy2d"] = Field(..., description="The sde model: GD on the scale-invariant 2-D toy loss x²/(x² + y²) "
                                                 "(seed 001 §4).")
    lr: float = Field(0.1, gt=0, le=10, description="η.")
    weight_decay: float = Field(0.5, ge=0, le=100, description="λ.")
    center: tuple[float, float] = Field((0.1, 1.0), strict=False,  # a JSON list makes the pair
                                        description="Centre (x₀, y₀) of the cloud of starts.")
    cloud_radius: float = Field(1e-6, ge=0, le=1e3, description="Starts are centre + N(0, radius²I).")
    trials: int = Field(100, ge=1, le=1_000_000, description="Points in the cloud.")
    integrator: Literal["gd", "flow"] = Field("gd", description="gd: one step per unit time; flow: Euler with small dt.")
    dt: float = Field(0.01, gt=0, le=1, description="Flow step in units of GD steps; 1/k. Used by integrator flow.")
    steps: int = Field(400, ge=1, le=100_000_000, description="Horizon, in GD steps.")
    record_every: int = Field(1, ge=1, description="Record every this many GD steps.")

    @model_validator(mode="after")
    def _check(self) -> Toy2DParams:
        substeps(self.dt)
        if not all(math.isfinite(c) and abs(c) <= 1e6 for c in self.center) or self.center == (0.0, 0.0):
            raise ValueError(f"center: expected a finite point other than the origin, got {self.center}")
        return self

    def substeps(self) -> int:
        return substeps(self.dt) if self.integrator == "flow" else 1

    def regime_warnings(self) -> list[dict[str, Any]]:
        """``decay_not_positive`` when ηλh ≥ 1 (h = 1 for gd, dt for flow): the update's decay factor
        1 − ηλh is not positive (each update reverses w's own part; from 2 on |w| grows instead of
        decaying), so ``stable_until``, derived from r² = r₀²(1 − ηλh)^{2t/h}, is omitted. The flow lines
        are the exact gradient flow, a reference whatever the integrator does, and are kept."""
        h = 1.0 / self.substeps()
        x = self.lr * self.weight_decay * h
        if x < 1.0:
            return []
        step = "ηλ" if h == 1.0 else "ηλ·dt"
        return [{"code": "decay_not_positive",
                 "message": f"η = {self.lr:.3g}, λ = {self.weight_decay:.3g}: {step} = {x:.3g} ≥ 1: the decay factor "
                            f"1 − {step} of the update is not positive, so each update reverses w's own part "
                            f"(and from 2 on |w| grows instead of decaying) and stable_until's linearisation "
                            f"does not apply; omitted: stable_until.",
                 "omits": ["stable_until"]}]

    @property
    def work(self) -> int:
        return self.trials * self.steps * self.substeps() * 2


OUTPUTS = Outputs(
    metrics=("spread", "loss", "norm_sq"),
    theory=("loss_flow", "norm_sq_flow", "stable_until"),
    summary=("spread_final", "spread_max"),
    plots={
        "spread": PlotDef("Spread of the cloud of directions", "RMS distance", ("spread",), log_y=True,
                          times=("stable_until",)),
        "loss": PlotDef("Loss x²/(x²+y²)", "loss", ("loss",), ("loss_flow",), log_y=True),
        "norm": PlotDef("Squared norm", "|w|²", ("norm_sq",), ("norm_sq_flow",), log_y=True),
    },
)


class Toy2D(Simulator["SDESpec"]):
    """The cloud as a (trials, 2) tensor. Resumable after any whole step (state: the cloud w; the
    generator only draws the starts)."""

    names, STATE = OUTPUTS.metrics, ("w",)
    p: Toy2DParams

    def __init__(self, spec: SDESpec, ctx: Context):
        super().__init__(spec, ctx)
        p = self.p
        self.k = p.substeps()
        h = 1.0 / self.k
        device, dtype = ctx.device, ctx.dtype
        # drawn in float64 so that float32 and float64 runs start from the same cloud (up to rounding)
        w = torch.tensor(p.center, dtype=torch.float64, device=device) + p.cloud_radius * torch.randn(
            p.trials, 2, generator=ctx.gen, dtype=torch.float64, device=device)
        self.w = w.to(dtype)
        # the update is w ← (1 − ηλh)w − ηh·(2xy/|w|⁴)·(y, −x), with (y, −x) = flip(w)·(1, −1)
        # (elementwise ops only, no CPU BLAS matmul per step: bench/README.md, "Engine timings")
        self.shrink = 1.0 - p.lr * p.weight_decay * h
        self.kick = torch.tensor([-2.0 * p.lr * h, 2.0 * p.lr * h], dtype=dtype, device=device)

    def step(self, n: int, record: bool) -> Row | None:
        w = self.w
        row = _metrics(w) if record else None
        for _ in range(self.k):
            coef = w.prod(dim=1).div_(w.square().sum(dim=1).square_()).unsqueeze_(1)  # xy/|w|⁴
            w = torch.addcmul(w * self.shrink, coef * self.kick, w.flip(1))
        self.w = w
        return row

    def final_row(self) -> Row:
        return _metrics(self.w)

    @classmethod
    def predict(cls, spec: SDESpec) -> dict[str, Any]:
        """``loss_flow`` and ``norm_sq_flow`` (exact gradient flow from the centre) on the record steps,
        and the scalar ``stable_until`` for the spec's integrator."""
        p = params_of(spec, Toy2DParams)
        x0, y0 = p.center
        t = np.asarray(record_steps(p.steps, p.record_every), dtype=np.float64)
        loss, norm_sq = flow_from(x0, y0, p.lr, p.weight_decay, t)
        return {"loss_flow": loss.tolist(), "norm_sq_flow": norm_sq.tolist(),
                "stable_until": stable_until(x0 * x0 + y0 * y0, p.lr, p.weight_decay, 1.0 / p.substeps())}

    def summarize(self, series: dict[str, list], theory: dict[str, Any]) -> dict[str, Any]:
        """Tail means + ``spread_final`` (the final state) and ``spread_max``."""
        summary = super().summarize(series, theory)
        final = _metrics(self.w)["spread"].item()
        summary["spread_final"] = final
        summary["spread_max"] = max([final, *series["spread"]], key=lambda v: math.inf if math.isnan(v) else v)
        return summary


def _metrics(w: torch.Tensor) -> Row:
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


MODEL = Model("toy2d", Toy2DParams, "smdengine.sde.toy2d:Toy2D", OUTPUTS)
