"""Discrete SGD / heavy-ball SGDM + weight decay on the Noisy Rayleigh Quotient, batched over trials
(the update itself is :class:`smdengine.nrq.stepper.Stepper`)."""
from __future__ import annotations

from typing import Any

import torch

from smdengine._simulator import Context, Row, Simulator
from smdengine.nrq.predict import predict_nrq
from smdengine.nrq.spec import OUTPUTS, NRQSpec
from smdengine.nrq.stepper import Stepper, angle


class NRQRun(Simulator[NRQSpec]):
    """Series: means over trials of the state X_n and its update n → n+1 at the record steps; theory
    :func:`predict_nrq` given the realized initial norms; summary: tail means (last half of the final
    phase). Checkpoint state: the stepper's (X, v, the generator, the rates in force)."""

    names = OUTPUTS.metrics

    def __init__(self, spec: NRQSpec, ctx: Context):
        super().__init__(spec, ctx)
        p = spec.params
        a = torch.tensor(p.spectrum(), dtype=ctx.dtype, device=ctx.device)
        x = p.init_std * torch.randn(p.trials, p.dim, generator=ctx.gen, dtype=ctx.dtype, device=ctx.device)
        self.init_norms_sq = x.square().sum(dim=1).cpu().numpy()
        self.stepper = Stepper(x, a, p.noise_std, p.momentum, ctx.gen)
        self.phase_by_start = {ph.start: ph for ph in p.phases()}
        self.lr = self.wd = 0.0

    def step(self, n: int, record: bool) -> Row | None:
        phase = self.phase_by_start.get(n)
        if phase is not None:
            self.lr, self.wd = self.stepper.enter(phase)
        if record:
            before = self.stepper.x.clone()
            sq = self.stepper.step(self.lr, self.wd)
            return _metrics(before, self.stepper.x, sq, self.lr)
        self.stepper.step(self.lr, self.wd)
        return None

    def state(self) -> dict[str, Any]:
        return self.stepper.state()

    def load_state(self, state: dict[str, Any], step: int) -> None:
        self.lr, self.wd = self.stepper.load_state(state)

    @classmethod
    def predict(cls, spec: NRQSpec) -> dict[str, Any]:
        return predict_nrq(spec)

    def theory(self) -> dict[str, Any]:
        return predict_nrq(self.spec, self.init_norms_sq)



def _metrics(before: torch.Tensor, after: torch.Tensor, sq: torch.Tensor, lr: float) -> Row:
    """The metrics row of the state ``before`` and its update (means over trials)."""
    s, q = sq[:, 0], sq[:, 1]
    au = angle(before, after)
    return {
        "risk": 1.0 - (before[:, 0] ** 2 / s).mean(),
        "loss": (q / (2.0 * s)).mean(),
        "au_mean": au.mean(),
        "au_rms": au.square().mean().sqrt(),
        "norm_sq": s.mean(),
        "eff_lr": (lr / s).mean(),
    }
