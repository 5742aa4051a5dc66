"""The NRQ SDE (seed 000 eq. 9) by Euler–Maruyama, batched over trials.

    dX = −η(PAX̄/|X| + λX) dt + (ησ/|X|) P dB,   t in SGD steps,

so one step of size dt is the discrete SGD update with drift rate η·dt and noise rate η·√dt
(:class:`smdengine.nrq.stepper.Stepper`); with dt = 1 it *is* SGD. Recorded at whole steps
t = 0, r, 2r, …: risk 1 − E X̄₁², norm_sq E|X|², eff_lr E η/|X|², gamma E(|X|²/η)² (seed 001),
and au_rms, the continuous AU of seed 000 Def. 1, √(E|X̄_{t+dt} − X̄_t|²/dt) (radians per step).
The run's theory conditions the closed-form norm on the realized initial norms.
f = X̄₁² at the records of the tail (last half of the final phase) is histogrammed over [0, 1].
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from smdengine._declare import Model, Outputs, PlotDef
from smdengine._lazy import lazy_import
from smdengine._runtime import saved
from smdengine._science import phase_at, record_steps
from smdengine._simulator import Context, Row, Simulator
from smdengine.nrq import theory
from smdengine.nrq.predict import predict_physics
from smdengine.nrq.spec import NORM_PLOT, RISK_PLOT, NRQPhysics
from smdengine.sde._common import DT_DESCRIPTION, params_of, substeps

if TYPE_CHECKING:
    import torch

    from smdengine._registry import SDESpec
else:
    torch = lazy_import("torch", globals())


class NRQSDEParams(NRQPhysics):
    """Seed 000 eq. 9: dX = −η(PAX̄/|X| + λX)dt + (ησ/|X|)P dB, t in SGD steps."""

    model: Literal["nrq"]
    method: Literal["euler_maruyama"] = "euler_maruyama"
    dt: float = Field(1.0, gt=0, le=1, description=DT_DESCRIPTION)
    f_bins: int = Field(50, ge=2, le=1000, description="Bins of the histogram of f = X̄₁² over the tail.")

    @model_validator(mode="after")
    def _check_dt(self) -> NRQSDEParams:
        substeps(self.dt)
        return self

    @property
    def work(self) -> int:
        return self.trials * self.steps * substeps(self.dt) * self.dim


OUTPUTS = Outputs(
    metrics=("risk", "norm_sq", "au_rms", "eff_lr", "gamma"),
    theory=("norm_sq_theory", "gamma_theory", "au_theory", "au_equilibrium", "risk_stationary", "kappa"),
    distributions=("f_histogram",),
    plots={
        "risk": RISK_PLOT,
        "au": PlotDef("Continuous angular update (seed 000 Def. 1)", "radians per step", ("au_rms",),
                      ("au_theory", "au_equilibrium"), log_y=True),
        "norm": NORM_PLOT,
        "f_histogram": PlotDef("Stationary law of f = X̄₁² (tail of the run)", "density", ("f_histogram",),
                               style="histogram"),
    },
)


class NRQSDE(Simulator["SDESpec"]):
    """Series: means over trials at whole steps; theory :meth:`predict` given the realized initial norms;
    summary: tail means; distribution ``f_histogram``. Resumable after any whole step (state: X, the
    RNG, the phase's lr/wd and the histogram counts)."""

    names = OUTPUTS.metrics
    p: NRQSDEParams

    def __init__(self, spec: SDESpec, ctx: Context):
        from smdengine.nrq.stepper import Stepper

        super().__init__(spec, ctx)
        p = self.p
        self.k = substeps(p.dt)
        self.dt = 1.0 / self.k
        device, dtype = ctx.device, ctx.dtype
        a = torch.tensor(p.spectrum(), dtype=dtype, device=device)
        x = p.init_std * torch.randn(p.trials, p.dim, generator=ctx.gen, dtype=dtype, device=device)
        self.init_norms_sq = x.square().sum(dim=1).cpu().numpy()
        self.stepper = Stepper(x, a, p.noise_std, 0.0, ctx.gen)
        self.phase_by_start = {ph.start: ph for ph in p.phases()}
        self.tail = p.tail_start()
        self.counts = torch.zeros(p.f_bins, dtype=torch.float64, device=device)
        self.lr = self.wd = 0.0

    def step(self, n: int, record: bool) -> Row | None:
        stepper = self.stepper
        phase = self.phase_by_start.get(n)
        if phase is not None:
            self.lr, self.wd = stepper.enter(phase)
        lr, wd = self.lr, self.wd
        drift, noise = lr * self.dt, lr * math.sqrt(self.dt)
        todo = self.k
        row = None
        if record:
            before = stepper.x.clone()
            sq = stepper.step(drift, wd, noise)
            todo -= 1
            row = _metrics(before, stepper.x, sq, lr, self.dt)
            if n >= self.tail:
                f = before[:, 0] ** 2 / sq[:, 0]
                self.counts += torch.histc(f, bins=self.p.f_bins, min=0.0, max=1.0).to(torch.float64)
        for _ in range(todo):
            stepper.step(drift, wd, noise)
        return row

    def state(self) -> dict[str, Any]:
        return {"f_counts": saved(self.counts), **self.stepper.state()}

    def load_state(self, state: dict[str, Any], step: int) -> None:
        self.lr, self.wd = self.stepper.load_state(state)
        self.counts.copy_(state["f_counts"])

    @classmethod
    def predict(cls, spec: SDESpec) -> dict[str, Any]:
        return predict(spec)

    def theory(self) -> dict[str, Any]:
        return predict(self.spec, self.init_norms_sq)

    def distributions(self) -> dict[str, Any]:
        return {"f_histogram": _f_histogram(self.p, self.counts.tolist())}


def _metrics(before: torch.Tensor, after: torch.Tensor, sq: torch.Tensor, lr: float, dt: float) -> Row:
    s = sq[:, 0]
    unit_before = before / s.sqrt().unsqueeze(1)
    unit_after = after / torch.linalg.vector_norm(after, dim=1, keepdim=True)
    return {
        "risk": 1.0 - (before[:, 0] ** 2 / s).mean(),
        "norm_sq": s.mean(),
        "au_rms": ((unit_after - unit_before).square().sum(dim=1).mean() / dt).sqrt(),
        "eff_lr": (lr / s).mean(),
        "gamma": (s / lr).square().mean(),
    }


def predict(spec: SDESpec, init_norms_sq: np.ndarray | None = None) -> dict[str, Any]:
    """The SGD theory of the ``nrq`` kind (closed-form M_t, √(2λη), κ, r*) on the record steps,
    plus gamma_theory = (M_t/η)² (seed 001 Lemma 5.2 with Tr Σ = (p−1)σ²) and
    au_theory = √((p−1)σ²)·η/M_t (seed 000 Lemma 1). ``init_norms_sq``: as for
    :func:`smdengine.nrq.predict.predict_nrq`."""
    p = params_of(spec, NRQSDEParams)
    out = predict_physics(p, 0.0, init_norms_sq)
    all_phases = p.phases()
    lrs = [phase_at(all_phases, n).lr for n in record_steps(p.steps, p.record_every)]
    noise_norm = math.sqrt(p.dim - 1) * p.noise_std
    out["gamma_theory"] = [(m / lr) ** 2 for m, lr in zip(out["norm_sq_theory"], lrs, strict=True)]
    out["au_theory"] = [noise_norm * lr / m if m > 0 else math.nan
                        for m, lr in zip(out["norm_sq_theory"], lrs, strict=True)]
    return out


def _f_histogram(p: NRQSDEParams, counts: list[float]) -> dict[str, Any]:
    """Empirical density of f over the tail records, and ρ*(f) averaged over the same bins
    (two-level spectrum with weight decay in the final phase; otherwise null)."""
    edges = [i / p.f_bins for i in range(p.f_bins + 1)]
    total = sum(counts)
    width = 1.0 / p.f_bins
    density = [c / (total * width) if total else math.nan for c in counts]
    levels, final = p.two_level(), p.phases()[-1]
    expected = None
    if levels is not None and final.weight_decay > 0:
        kappa = theory.kappa(levels[0], levels[1], p.dim, p.noise_std, final.lr, final.weight_decay)
        expected = theory.f_density_bins(kappa, p.dim, edges)
    return {"bin_edges": edges, "density": density, "density_theory": expected, "samples": int(total)}


MODEL = Model("nrq", NRQSDEParams, "smdengine.sde.nrq:NRQSDE", OUTPUTS)
