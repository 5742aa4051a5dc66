"""The ``train`` kind: SGD / SGDM + weight decay on a normalized network, all trials at once, with the
angular update of every scale-invariant weight tracked against √(2λη/(1+α)) (seed 003) and its
norm against the equilibrium of the running unit-gradient norm (seed 003 Thm 1/2).

Recorded on windows of ``record_every`` updates [n, n + r), labelled by their first step n:
global ``train_loss``/``train_acc`` (means over the window's minibatches and the trials), ``test_loss``/
``test_acc`` (the state at step n, when n is a multiple of ``eval_every``; NaN between), ``lr``,
``weight_decay``; per group ``<group>/<metric>`` for the tracker's metrics (tracker.METRICS).

Checkpoints (smdengine.recorder protocol) may be taken after any update, mid-window included: the
state holds the optimizer's storage, the normalization buffers, the generator, the batch order, the
window's accumulators (losses, hits, the pending evaluation, the tracker's Gram matrices and EMA).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from smdengine.nrq.schedule import Phase, phase_at, rate_phases
from smdengine.recorder import Recorder
from smdengine.runtime import (
    CheckpointHooks,
    ProgressCallback,
    RunResult,
    StopCheck,
    layer_key,
    resolve_device,
    resolve_dtype,
    saved,
)
from smdengine.train import models
from smdengine.train.data import Dataset, load_dataset
from smdengine.train.optimizer import SGD
from smdengine.train.spec import TrainParams, TrainSpec
from smdengine.train.tracker import METRICS as LAYER_METRICS
from smdengine.train.tracker import Tracker

GLOBAL = ("train_loss", "train_acc", "test_loss", "test_acc", "lr", "weight_decay")
METRICS = GLOBAL + LAYER_METRICS
THEORY = ("au_equilibrium",)
DISTRIBUTIONS = ()
EVAL_BATCH = 1000
INVARIANCE_TOL = {torch.float32: 1e-3, torch.float64: 1e-5}


def phases(p: TrainParams) -> list[Phase]:
    """Rates in force from each schedule entry on (factors are cumulative)."""
    return rate_phases(p.lr, p.weight_decay, p.schedule)


def au_equilibrium(lr: float, weight_decay: float, momentum: float) -> float:
    """√(2λη/(1+α)), the equilibrium RMS angular update per step (seed 003)."""
    return math.sqrt(2 * weight_decay * lr / (1 + momentum))


def predict(spec: TrainSpec) -> dict[str, Any]:
    """au_equilibrium on the record steps (the rates in force at each window's first step)."""
    p = spec.params
    all_phases = phases(p)
    out = []
    for n in range(0, p.steps - p.record_every + 1, p.record_every):
        ph = phase_at(all_phases, n)
        out.append(au_equilibrium(ph.lr, ph.weight_decay, p.momentum))
    return {"au_equilibrium": out}


def simulate(spec: TrainSpec, *, on_progress: ProgressCallback | None = None,
             should_stop: StopCheck | None = None, progress_interval: float = 0.5,
             data_dir: str | None = None, track: bool = True,
             checkpoint: CheckpointHooks | None = None) -> RunResult:
    """Train ``trials`` networks together and record the series (module docstring).

    track=False skips the per-weight tracking (for overhead benchmarks); layer series are then absent.
    """
    p = spec.params
    device, dtype = resolve_device(spec.device), resolve_dtype(p.dtype)
    data = load_dataset(p, device, dtype, data_dir)
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    net = models.build(p, p.trials, device, dtype, gen)
    groups = list(net.groups)
    position = {name: i for i, name in enumerate(net.trainable)}
    tracked = [(position[m], j) for j, g in enumerate(groups) for m in net.groups[g]]
    max_cos = check_scale_invariance(net, data, p.batch_size, gen, INVARIANCE_TOL[dtype])
    optimizer = SGD([net.params[name] for name in net.trainable], p.momentum, [i for i, _ in tracked])
    params = optimizer.params
    net.params.update(zip(net.trainable, params, strict=False))      # tracked weights are now views of the storage

    names = GLOBAL + (tuple(layer_key(g, m) for g in groups for m in LAYER_METRICS) if track else ())
    recorder = Recorder(names, p.steps, on_progress, should_stop, progress_interval, checkpoint)
    tracker = (Tracker(groups, [j for _, j in tracked], p.trials, p.record_every, p.momentum, optimizer.rows,
                       dtype, device) if track else None)
    all_phases = phases(p)
    phase_by_start = {ph.start: ph for ph in all_phases}
    batches = _Batches(data, p.trials, p.batch_size, gen)
    loss_sum = torch.zeros(p.trials, dtype=torch.float64, device=device)
    hits = torch.zeros(p.trials, dtype=torch.float64, device=device)
    window_end = p.steps - p.steps % p.record_every     # updates after the last full window are not recorded
    pending: dict[str, torch.Tensor] = {}
    phase = all_phases[0]

    start = 0
    if recorder.resumed is not None:
        state = recorder.resumed.state
        start = recorder.resumed.step
        # the phase in force at the last update done; a phase starting at `start` (and its rescale)
        # is entered by the loop, exactly once
        phase = phase_at(all_phases, start - 1) if start > 0 else all_phases[0]
        optimizer.load_state(state["optimizer"])
        with torch.no_grad():
            for k, b in state["buffers"].items():
                net.buffers[k].copy_(b)
        gen.set_state(state["rng"])
        batches.load_state(state["batches"])
        loss_sum.copy_(state["loss_sum"])
        hits.copy_(state["hits"])
        pending = {k: v.to(device if k in ("test_loss", "test_acc") else "cpu") for k, v in state["pending"].items()}
        if tracker is not None:
            tracker.load_state(state["tracker"])

    def snapshot(_step: int) -> dict[str, Any]:
        return {"optimizer": optimizer.state(), "buffers": {k: saved(b) for k, b in net.buffers.items()},
                "rng": gen.get_state(), "batches": batches.state(), "loss_sum": saved(loss_sum),
                "hits": saved(hits), "pending": {k: saved(v) for k, v in pending.items()},
                "tracker": tracker.state() if tracker is not None else None}

    recorder.snapshot = snapshot

    for n in range(start, p.steps):
        if n in phase_by_start and n > 0:
            phase = phase_by_start[n]
            if phase.rescale != 1.0:
                with torch.no_grad():
                    for g in groups:
                        for m in net.groups[g]:
                            net.params[m].mul_(phase.rescale)
        if n % p.record_every == 0 and n < window_end:
            nan = torch.tensor(math.nan, device=device, dtype=torch.float64)
            test_loss, test_acc = evaluate(net, data.x_test, data.y_test) if n % p.eval_every == 0 else (nan, nan)
            pending = {"test_loss": test_loss, "test_acc": test_acc,
                       "lr": torch.tensor(phase.lr, dtype=torch.float64),
                       "weight_decay": torch.tensor(phase.weight_decay, dtype=torch.float64)}
        x, y = batches.next()
        logits = net.forward(x, training=True)                                   # (T, B, K)
        per_trial = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1)
        grads = torch.autograd.grad(per_trial.sum(), params)
        with torch.no_grad():
            loss_sum += per_trial
            hits += (logits.argmax(-1) == y).to(torch.float64).mean(1)
            gram = None
            if tracker is not None and n < window_end:
                gram = tracker.slot(phase.lr, phase.weight_decay, optimizer.next_velocity_row())
            optimizer.step(grads, phase.lr, phase.weight_decay, gram)
        if (n + 1) % p.record_every == 0 and n < window_end:
            start = n + 1 - p.record_every
            row = {"train_loss": loss_sum.mean() / p.record_every, "train_acc": hits.mean() / p.record_every,
                   **pending}
            loss_sum.zero_()
            hits.zero_()
            if tracker is not None:
                for g, metrics in tracker.reduce(phase.lr, phase.weight_decay).items():
                    row.update({layer_key(g, m): value for m, value in metrics.items()})
            recorder.record(start, row)
        recorder.tick(n + 1)
    recorder.flush(p.steps)

    final_loss, final_acc = evaluate(net, data.x_test, data.y_test)
    prediction = predict(spec)
    summary = summarize(recorder.series, prediction, groups if track else [], tail_start(p, all_phases))
    summary.update(test_loss_final=float(final_loss), test_acc_final=float(final_acc),
                   scale_invariance_max_cos=max_cos, train_samples=int(data.y_train.shape[0]),
                   noisy_labels=int(data.noisy.sum()))
    return RunResult(series=recorder.series, theory=prediction, summary=summary)


class _Batches:
    """Per-trial minibatches without replacement: each trial reshuffles the training set every epoch
    (incomplete last batches dropped)."""

    def __init__(self, data: Dataset, trials: int, batch_size: int, gen: torch.Generator):
        self.data, self.trials, self.batch_size, self.gen = data, trials, batch_size, gen
        self.n = data.y_train.shape[0]
        self.per_epoch = self.n // batch_size
        self.k = self.per_epoch

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k == self.per_epoch:
            keys = torch.rand(self.trials, self.n, generator=self.gen, device=self.data.y_train.device)
            self.order = keys.argsort(dim=1)
            self.k = 0
        idx = self.order[:, self.k * self.batch_size:(self.k + 1) * self.batch_size]    # (T, B)
        self.k += 1
        return self.data.x_train[idx], self.data.y_train[idx]

    def state(self) -> dict[str, Any]:
        """The epoch's order (int32 when it fits: it is T × n) and the position in it."""
        if self.k == self.per_epoch:          # the next batch reshuffles: the order is not needed
            return {"k": self.k, "order": None}
        order = self.order.to(torch.int32) if self.n < 2**31 else self.order
        return {"k": self.k, "order": saved(order)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.k = int(state["k"])
        if state["order"] is not None:
            self.order = state["order"].to(device=self.data.y_train.device, dtype=torch.int64)


@torch.no_grad()
def evaluate(net: models.Net, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean test loss and accuracy over the trials (evaluation mode: running statistics)."""
    loss = torch.zeros((), dtype=torch.float64, device=x.device)
    hits = torch.zeros((), dtype=torch.float64, device=x.device)
    for i in range(0, x.shape[0], EVAL_BATCH):
        xb, yb = x[i:i + EVAL_BATCH], y[i:i + EVAL_BATCH]
        logits = net.forward(xb, training=False)                                  # (T, b, K)
        t = logits.shape[0]
        loss += F.cross_entropy(logits.flatten(0, 1), yb.repeat(t), reduction="sum").double() / t
        hits += (logits.argmax(-1) == yb).sum().double() / t
    return loss / x.shape[0], hits / x.shape[0]


def check_scale_invariance(net: models.Net, data: Dataset, batch_size: int, gen: torch.Generator,
                           tol: float) -> float:
    """⟨w, ∇_w L⟩ ≈ 0 for every group at the start (cosine of w and its gradient, every trial); raises
    when a group the architecture calls scale-invariant is not. Returns the largest |cos|."""
    kept = {k: b.clone() for k, b in net.buffers.items()}
    state = gen.get_state()
    idx = torch.randint(0, data.y_train.shape[0], (net.trials, batch_size), generator=gen,
                        device=data.y_train.device)
    gen.set_state(state)   # the check must not change the run's random stream
    names = [m for g in net.groups.values() for m in g]
    logits = net.forward(data.x_train[idx], training=True)
    loss = F.cross_entropy(logits.flatten(0, 1), data.y_train[idx].flatten(), reduction="none").sum()
    grads = dict(zip(names, torch.autograd.grad(loss, [net.params[m] for m in names]), strict=False))
    for k, b in kept.items():
        net.buffers[k].copy_(b)
    worst = 0.0
    with torch.no_grad():
        for group, group_members in net.groups.items():
            dot = sum(torch.linalg.vecdot(net.params[m].flatten(1), grads[m].flatten(1)) for m in group_members)
            wn = sum(net.params[m].flatten(1).square().sum(1) for m in group_members).sqrt()
            gn = sum(grads[m].flatten(1).square().sum(1) for m in group_members).sqrt()
            cos = (dot / (wn * gn).clamp_min(1e-300)).abs().max().item()
            if cos > tol:
                raise RuntimeError(f"scale invariance: expected ⟨w, ∇_w L⟩ ≈ 0 for {group}, got cos = {cos:.3g}")
            worst = max(worst, cos)
    return worst


def tail_start(p: TrainParams, all_phases: list[Phase]) -> float:
    """Summaries average the last half of the final phase."""
    final = all_phases[-1].start
    return final + (p.steps - final) / 2.0


def summarize(series: dict[str, list], theory: dict[str, list], groups: list[str], start: float) -> dict[str, Any]:
    """Tail means of the global series (NaN points skipped) and, under ``layers``, of every group's
    series (au_rms: the RMS over the tail) with its theory and ``equilibrium_step``: the first recorded step from which au_rms stays
    within 10% of au_equilibrium to the end (None when it never settles)."""
    steps = np.asarray(series["step"], dtype=np.float64)
    tail = steps >= start
    if not tail.any():
        tail[-1:] = True

    def mean(values, rms: bool = False) -> float | None:
        v = np.asarray(values, dtype=np.float64)[tail]
        v = v[np.isfinite(v)]
        if not v.size:
            return None
        # au_rms over the tail is the RMS of every tail step's angle: windows are of equal length
        return float(np.sqrt(np.mean(v * v))) if rms else float(v.mean())

    out: dict[str, Any] = {k: mean(series[k]) for k in GLOBAL}
    au_theory = np.asarray(theory["au_equilibrium"], dtype=np.float64)
    out["au_equilibrium"] = mean(au_theory)
    layers = {}
    for g in groups:
        entry = {m: mean(series[layer_key(g, m)], rms=m == "au_rms") for m in LAYER_METRICS}
        entry["au_equilibrium"] = out["au_equilibrium"]
        au = np.asarray(series[layer_key(g, "au_rms")], dtype=np.float64)
        outside = np.flatnonzero(~(np.abs(au - au_theory[:au.size]) <= 0.1 * au_theory[:au.size]))
        settle = 0 if outside.size == 0 else outside[-1] + 1
        entry["equilibrium_step"] = int(steps[settle]) if settle < steps.size else None
        layers[g] = entry
    out["layers"] = layers
    return out
