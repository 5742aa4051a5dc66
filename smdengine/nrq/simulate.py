"""Discrete SGD / heavy-ball SGDM + weight decay on the Noisy Rayleigh Quotient, batched over trials
(the update itself is :class:`smdengine.nrq.stepper.Stepper`)."""
from __future__ import annotations

import torch

from smdengine.nrq.predict import predict_nrq
from smdengine.nrq.schedule import phases, tail_start
from smdengine.nrq.spec import NRQSpec
from smdengine.nrq.stepper import Stepper, angle
from smdengine.recorder import Recorder, tail_means
from smdengine.runtime import CheckpointHooks, ProgressCallback, RunResult, StopCheck, resolve_device, resolve_dtype

METRICS = ("risk", "loss", "au_mean", "au_rms", "norm_sq", "eff_lr")
THEORY = ("au_equilibrium", "norm_sq_theory", "risk_stationary", "kappa")


def simulate_nrq(spec: NRQSpec, *, on_progress: ProgressCallback | None = None,
                 should_stop: StopCheck | None = None, progress_interval: float = 0.5,
                 checkpoint: CheckpointHooks | None = None) -> RunResult:
    """Run an ``nrq`` spec; series ``step`` + :data:`METRICS` (means over trials), theory from
    :func:`predict_nrq` given the realized initial norms, summary = tail means (last half of the
    final phase)."""
    p = spec.params
    device, dtype = resolve_device(spec.device), resolve_dtype(p.dtype)
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    a = torch.tensor(p.spectrum(), dtype=dtype, device=device)
    x = p.init_std * torch.randn(p.trials, p.dim, generator=gen, dtype=dtype, device=device)
    init_norms_sq = x.square().sum(dim=1).cpu().numpy()
    stepper = Stepper(x, a, p.noise_std, p.momentum, gen)
    phase_by_start = {ph.start: ph for ph in phases(p)}
    recorder = Recorder(METRICS, p.steps, on_progress, should_stop, progress_interval, checkpoint)

    lr = wd = 0.0
    start = 0
    if recorder.resumed is not None:
        start = recorder.resumed.step
        lr, wd = stepper.load_state(recorder.resumed.state)
    recorder.snapshot = lambda _step: stepper.state()
    for n in range(start, p.steps):
        phase = phase_by_start.get(n)
        if phase is not None:
            lr, wd = stepper.enter(phase)
        if n % p.record_every == 0:
            before = stepper.x.clone()
            sq = stepper.step(lr, wd)
            recorder.record(n, _metrics(before, stepper.x, sq, lr))
        else:
            stepper.step(lr, wd)
        recorder.tick(n + 1)
    recorder.flush(p.steps)
    theory = predict_nrq(spec, init_norms_sq)
    return RunResult(series=recorder.series, theory=theory,
                     summary=tail_means(recorder.series, theory, tail_start(p)))


def _metrics(before: torch.Tensor, after: torch.Tensor, sq: torch.Tensor, lr: float) -> dict[str, torch.Tensor]:
    """The METRICS row of the state ``before`` and its update (means over trials)."""
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


simulate = simulate_nrq
predict = predict_nrq
