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
from typing import Any

import numpy as np
import torch

from smdengine.nrq import theory
from smdengine.nrq.predict import predict_physics
from smdengine.nrq.schedule import phase_at, phases, record_steps, tail_start
from smdengine.nrq.stepper import Stepper
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
from smdengine.sde.spec import SDESpec, substeps

METRICS = ("risk", "norm_sq", "au_rms", "eff_lr", "gamma")
THEORY = ("norm_sq_theory", "gamma_theory", "au_theory", "au_equilibrium", "risk_stationary", "kappa")
DISTRIBUTIONS = ("f_histogram",)


def simulate(spec: SDESpec, *, on_progress: ProgressCallback | None = None,
             should_stop: StopCheck | None = None, progress_interval: float = 0.5,
             checkpoint: CheckpointHooks | None = None) -> RunResult:
    """Run the nrq model; series ``step`` + :data:`METRICS` (means over trials), theory from
    :func:`predict`, summary = tail means, distribution ``f_histogram``. Resumable after any whole
    step (state: X, the RNG, the phase's lr/wd and the histogram counts)."""
    p = spec.params
    k = substeps(p.dt)
    dt = 1.0 / k
    device, dtype = resolve_device(spec.device), resolve_dtype(p.dtype)
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    a = torch.tensor(p.spectrum(), dtype=dtype, device=device)
    x = p.init_std * torch.randn(p.trials, p.dim, generator=gen, dtype=dtype, device=device)
    init_norms_sq = x.square().sum(dim=1).cpu().numpy()
    stepper = Stepper(x, a, p.noise_std, 0.0, gen)
    phase_by_start = {ph.start: ph for ph in phases(p)}
    recorder = Recorder(METRICS, p.steps, on_progress, should_stop, progress_interval, checkpoint)
    tail = tail_start(p)
    counts = torch.zeros(p.f_bins, dtype=torch.float64, device=device)

    lr = wd = 0.0
    first = 0
    if recorder.resumed is not None:
        first = recorder.resumed.step
        lr, wd = stepper.load_state(recorder.resumed.state)
        counts.copy_(recorder.resumed.state["f_counts"])
    recorder.snapshot = lambda _step: {"f_counts": saved(counts), **stepper.state()}
    for n in range(first, p.steps):
        phase = phase_by_start.get(n)
        if phase is not None:
            lr, wd = stepper.enter(phase)
        drift, noise = lr * dt, lr * math.sqrt(dt)
        todo = k
        if n % p.record_every == 0:
            before = stepper.x.clone()
            sq = stepper.step(drift, wd, noise)
            todo -= 1
            row = _metrics(before, stepper.x, sq, lr, dt)
            recorder.record(n, row)
            if n >= tail:
                f = before[:, 0] ** 2 / sq[:, 0]
                counts += torch.histc(f, bins=p.f_bins, min=0.0, max=1.0).to(torch.float64)
        for _ in range(todo):
            stepper.step(drift, wd, noise)
        recorder.tick(n + 1)
    recorder.flush(p.steps)
    prediction = predict(spec, init_norms_sq)
    return RunResult(series=recorder.series, theory=prediction,
                     summary=tail_means(recorder.series, prediction, tail),
                     distributions={"f_histogram": _f_histogram(spec, counts.tolist())})


def _metrics(before: torch.Tensor, after: torch.Tensor, sq: torch.Tensor, lr: float, dt: float) -> dict[str, torch.Tensor]:
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
    p = spec.params
    out = predict_physics(p, 0.0, init_norms_sq)
    all_phases = phases(p)
    lrs = [phase_at(all_phases, n).lr for n in record_steps(p)]
    noise_norm = math.sqrt(p.dim - 1) * p.noise_std
    out["gamma_theory"] = [(m / lr) ** 2 for m, lr in zip(out["norm_sq_theory"], lrs, strict=False)]
    out["au_theory"] = [noise_norm * lr / m if m > 0 else math.nan for m, lr in zip(out["norm_sq_theory"], lrs, strict=False)]
    return out


def _f_histogram(spec: SDESpec, counts: list[float]) -> dict[str, Any]:
    """Empirical density of f over the tail records, and ρ*(f) averaged over the same bins
    (two-level spectrum with weight decay in the final phase; otherwise null)."""
    p = spec.params
    edges = [i / p.f_bins for i in range(p.f_bins + 1)]
    total = sum(counts)
    width = 1.0 / p.f_bins
    density = [c / (total * width) if total else math.nan for c in counts]
    levels, final = p.two_level(), phases(p)[-1]
    expected = None
    if levels is not None and final.weight_decay > 0:
        kappa = theory.kappa(levels[0], levels[1], p.dim, p.noise_std, final.lr, final.weight_decay)
        expected = theory.f_density_bins(kappa, p.dim, edges)
    return {"bin_edges": edges, "density": density, "density_theory": expected, "samples": int(total)}
