"""Discrete SGD / heavy-ball SGDM + weight decay on the Noisy Rayleigh Quotient, batched over trials,
and its Euler–Maruyama form, the ``sde`` kind's nrq model (:mod:`smdengine.sde.nrq`). The update
itself is :class:`smdengine.nrq.stepper.Stepper`."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from smdengine._runtime import saved
from smdengine._science import equilibrium_summary, phase_at, phase_regime, record_steps
from smdengine._simulator import Context, Row, Simulator
from smdengine.nrq import theory
from smdengine.nrq.predict import predict_physics
from smdengine.nrq.spec import OUTPUTS
from smdengine.nrq.stepper import Stepper, angle
from smdengine.sde import nrq as sde
from smdengine.sde._common import params_of, substeps


class NRQRun(Simulator[Any]):
    """Series: means over trials of the state X_n and its update n → n+1 at the record steps; theory
    :meth:`predict` given the realized initial norms; summary: tail means (last half of the final
    phase) and each phase's time to equilibrium of ``au_rms``. Checkpoint state: the stepper's (X, v,
    the generator, the rates in force)."""

    names = OUTPUTS.metrics
    k, dt = 1, 1.0   # updates per step and their size: one SGD update per step

    def __init__(self, spec: Any, ctx: Context):
        super().__init__(spec, ctx)
        p = self.p
        a = torch.tensor(p.spectrum(), dtype=ctx.dtype, device=ctx.device)
        x = p.init_std * torch.randn(p.trials, p.dim, generator=ctx.gen, dtype=ctx.dtype, device=ctx.device)
        self.init_norms_sq = x.square().sum(dim=1).cpu().numpy()
        self.stepper = Stepper(x, a, p.noise_std, getattr(p, "momentum", 0.0), ctx.gen)  # sde model: SGD
        self.phase_by_start = {ph.start: ph for ph in p.phases()}

    def step(self, n: int, record: bool) -> Row | None:
        stepper = self.stepper
        phase = self.phase_by_start.get(n)
        if phase is not None:
            stepper.enter(phase)
        lr, wd = stepper.rates
        drift, noise = lr * self.dt, lr * math.sqrt(self.dt)
        row = None
        if record:
            before = stepper.x.clone()
            row = self.metrics(n, before, stepper.step(drift, wd, noise))
        for _ in range(self.k - 1 if record else self.k):
            stepper.step(drift, wd, noise)
        return row

    def metrics(self, n: int, before: torch.Tensor, sq: torch.Tensor) -> Row:
        """The metrics row of the state ``before`` update n and of the update (means over trials);
        ``sq``: its (|X|², XᵀAX) (:meth:`Stepper.step`)."""
        s, q = sq[:, 0], sq[:, 1]
        au = angle(before, self.stepper.x)
        return {
            "risk": 1.0 - (before[:, 0] ** 2 / s).mean(),
            "loss": (q / (2.0 * s)).mean(),
            "au_mean": au.mean(),
            "au_rms": au.square().mean().sqrt(),
            "norm_sq": s.mean(),
            "eff_lr": (self.stepper.rates[0] / s).mean(),
        }

    def state(self) -> dict[str, Any]:
        return self.stepper.state()

    def load_state(self, state: dict[str, Any], step: int) -> None:
        self.stepper.load_state(state)

    @classmethod
    def predict(cls, spec: Any, init_norms_sq: np.ndarray | None = None) -> dict[str, Any]:
        """``au_equilibrium`` always; ``norm_sq_theory`` for SGD; ``risk_stationary`` and ``kappa``
        for SGD on a two-level spectrum (:func:`smdengine.nrq.predict.predict_physics`)."""
        return predict_physics(spec.params, spec.params.momentum, init_norms_sq)

    def theory(self) -> dict[str, Any]:
        return self.predict(self.spec, self.init_norms_sq)

    def summarize(self, series: dict[str, list], theory: dict[str, Any]) -> dict[str, Any]:
        """Tail means, and per phase i the measured ``equilibrium_steps_phase<i>`` of ``au_rms`` (the RMS
        over trials of update n's angle) beside ``equilibrium_steps_predicted_phase<i>``
        (:func:`smdengine._science.equilibrium_summary`)."""
        p = self.p
        return {**super().summarize(series, theory),
                **equilibrium_summary(p.phases(), p.steps, series["step"], [series["au_rms"]], p.momentum)}


class NRQSDE(NRQRun):
    """The sde kind's nrq model: k = 1/dt Euler–Maruyama updates per step. Series: means over trials at
    whole steps; summary: tail means; distribution ``f_histogram``. Resumable after any whole step
    (state: the stepper's and the histogram counts)."""

    names = sde.OUTPUTS.metrics
    p: sde.NRQSDEParams

    def __init__(self, spec: Any, ctx: Context):
        super().__init__(spec, ctx)
        self.k = substeps(self.p.dt)
        self.dt = 1.0 / self.k
        self.tail = self.p.tail_start()
        self.counts = torch.zeros(self.p.f_bins, dtype=torch.float64, device=ctx.device)

    def metrics(self, n: int, before: torch.Tensor, sq: torch.Tensor) -> Row:
        s, lr = sq[:, 0], self.stepper.rates[0]
        if n >= self.tail:
            f = before[:, 0] ** 2 / s
            self.counts += torch.histc(f, bins=self.p.f_bins, min=0.0, max=1.0).to(torch.float64)
        after = self.stepper.x
        unit_before = before / s.sqrt().unsqueeze(1)
        unit_after = after / torch.linalg.vector_norm(after, dim=1, keepdim=True)
        return {
            "risk": 1.0 - (before[:, 0] ** 2 / s).mean(),
            "norm_sq": s.mean(),
            "au_rms": ((unit_after - unit_before).square().sum(dim=1).mean() / self.dt).sqrt(),
            "eff_lr": (lr / s).mean(),
            "gamma": (s / lr).square().mean(),
        }

    def summarize(self, series: dict[str, list], theory: dict[str, Any]) -> dict[str, Any]:
        """Tail means only (its au_rms is the continuous-time rate, not an angle per update)."""
        return Simulator.summarize(self, series, theory)

    def state(self) -> dict[str, Any]:
        return {"f_counts": saved(self.counts), **super().state()}

    def load_state(self, state: dict[str, Any], step: int) -> None:
        super().load_state(state, step)
        self.counts.copy_(state["f_counts"])

    @classmethod
    def predict(cls, spec: Any, init_norms_sq: np.ndarray | None = None) -> dict[str, Any]:
        """The SGD theory of the ``nrq`` kind (closed-form M_t, √(2λη), κ, r*) on the record steps,
        plus gamma_theory = (M_t/η)² (seed 001 Lemma 5.2 with Tr Σ = (p−1)σ²) and
        au_theory = √((p−1)σ²)·η/M_t (seed 000 Lemma 1)."""
        p = params_of(spec, sde.NRQSDEParams)
        out = predict_physics(p, 0.0, init_norms_sq)
        all_phases = p.phases()
        lrs = [phase_at(all_phases, n).lr for n in record_steps(p.steps, p.record_every)]
        noise_norm = math.sqrt(p.dim - 1) * p.noise_std
        out["gamma_theory"] = [(m / lr) ** 2 for m, lr in zip(out["norm_sq_theory"], lrs, strict=True)]
        out["au_theory"] = [noise_norm * lr / m if m > 0 else math.nan
                            for m, lr in zip(out["norm_sq_theory"], lrs, strict=True)]
        return out

    def distributions(self) -> dict[str, Any]:
        """Empirical density of f over the tail records, and ρ*(f) averaged over the same bins
        (two-level spectrum with weight decay in the final phase, in regime; otherwise null)."""
        p, counts = self.p, self.counts.tolist()
        edges = [i / p.f_bins for i in range(p.f_bins + 1)]
        total = sum(counts)
        width = 1.0 / p.f_bins
        density = [c / (total * width) if total else math.nan for c in counts]
        levels, final = p.two_level(), p.phases()[-1]
        expected = None
        if levels is not None and final.weight_decay > 0 and phase_regime(final.lr, final.weight_decay, 0.0, p.dt) is None:
            kappa = theory.kappa(levels[0], levels[1], p.dim, p.noise_std, final.lr, final.weight_decay)
            expected = theory.f_density_bins(kappa, p.dim, edges)
        return {"f_histogram": {"bin_edges": edges, "density": density, "density_theory": expected,
                                "samples": int(total)}}
