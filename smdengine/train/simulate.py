"""The ``train`` kind: SGD / SGDM + weight decay on a normalized network, all trials at once, with the
angular update of every scale-invariant weight tracked against √(2λη/(1+α)) (seed 003) and its
norm against the equilibrium of the running unit-gradient norm (seed 003 Thm 1/2).

Recorded on windows of ``record_every`` updates [n, n + r), labelled by their first step n:
global ``train_loss``/``train_acc`` (means over the window's minibatches and the trials), ``test_loss``/
``test_acc`` (the state at step n, when n is a multiple of ``eval_every``; NaN between), ``lr``,
``weight_decay``; per group ``<group>/<metric>`` for the tracker's metrics (spec.LAYER_METRICS).
Then a final row at ``steps``, the state after the last update (:meth:`TrainRun.final_row`): test loss and
accuracy, the rates, and per group |w|, η/|w|² and the norm theory; the window metrics NaN there.

Checkpoints may be taken after any update, mid-window included: the state holds the optimizer's
storage, the normalization buffers, the generator, the batch order, the window's accumulators
(losses, hits, the pending evaluation, the tracker's Gram matrices and EMA).
"""
from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from functools import reduce
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from smdengine._runtime import layer_key, saved
from smdengine._science import au_equilibrium, equilibrium_summary, phase_at
from smdengine._simulator import Context, Row, Simulator
from smdengine.train import models
from smdengine.train.data import Dataset, load_dataset
from smdengine.train.optimizer import SGD
from smdengine.train.spec import GLOBAL_METRICS, LAYER_METRICS, TrainParams, TrainSpec
from smdengine.train.tracker import Tracker

EVAL_BATCH = 1000
INVARIANCE_TOL = {torch.float32: 1e-3, torch.float64: 1e-5}


class TrainRun(Simulator[TrainSpec]):
    """track=False skips the per-weight tracking (for the overhead bench); layer series are then absent."""

    p: TrainParams

    def __init__(self, spec: TrainSpec, ctx: Context, track: bool = True):
        super().__init__(spec, ctx)
        p = self.p
        device, dtype, gen = ctx.device, ctx.dtype, ctx.gen
        self.data = data = load_dataset(p, device, dtype, ctx.data_dir)
        self.net = net = models.build(p, p.trials, device, dtype, gen)
        self.groups = groups = list(net.groups)
        position = {name: i for i, name in enumerate(net.trainable)}
        tracked = [(position[m], j) for j, g in enumerate(groups) for m in net.groups[g]]
        self.max_cos = check_scale_invariance(net, data, p.batch_size, gen, INVARIANCE_TOL[dtype])
        self.optimizer = SGD([net.params[name] for name in net.trainable], p.momentum, [i for i, _ in tracked])
        self.params = self.optimizer.params
        net.params.update(zip(net.trainable, self.params, strict=True))  # tracked weights are now views of the storage

        self.names = GLOBAL_METRICS + (tuple(layer_key(g, m) for g in groups for m in LAYER_METRICS) if track else ())
        self.tracker = (Tracker(groups, [j for _, j in tracked], p.trials, p.record_every, p.momentum,
                                self.optimizer.rows, dtype, device) if track else None)
        self.all_phases = p.phases()
        self.phase_by_start = {ph.start: ph for ph in self.all_phases}
        self.batches = _Batches(data, p.trials, p.batch_size, gen)
        self.loss_sum = torch.zeros(p.trials, dtype=torch.float64, device=device)
        self.hits = torch.zeros(p.trials, dtype=torch.float64, device=device)
        # updates after the last full window are not recorded
        self.window_end = p.total_steps - p.total_steps % p.record_every
        self.pending: dict[str, torch.Tensor] = {}
        self.phase = self.all_phases[0]

    def step(self, n: int, record: bool) -> Row | None:
        p, net, phase, tracker = self.p, self.net, self.phase, self.tracker
        if n in self.phase_by_start and n > 0:
            phase = self.phase = self.phase_by_start[n]
            if phase.rescale != 1.0:
                with torch.no_grad():
                    for g in self.groups:
                        for m in net.groups[g]:
                            net.params[m].mul_(phase.rescale)
        in_window = n < self.window_end
        if record and in_window:
            nan = torch.tensor(math.nan, device=self.ctx.device, dtype=torch.float64)
            assert p.eval_every is not None   # set by the validator
            test_loss, test_acc = (evaluate(net, self.data.x_test, self.data.y_test) if n % p.eval_every == 0
                                   else (nan, nan))
            self.pending = {"test_loss": test_loss, "test_acc": test_acc,
                            "lr": torch.tensor(phase.lr, dtype=torch.float64),
                            "weight_decay": torch.tensor(phase.weight_decay, dtype=torch.float64)}
        x, y = self.batches.next()
        logits = net.forward(x, training=True)                                   # (T, B, K)
        per_trial = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(1)
        grads = torch.autograd.grad(per_trial.sum(), self.params)
        with torch.no_grad():
            self.loss_sum += per_trial
            self.hits += (logits.argmax(-1) == y).to(torch.float64).mean(1)
            gram = None
            if tracker is not None and in_window:
                gram = tracker.slot(phase.lr, phase.weight_decay, self.optimizer.next_velocity_row())
            self.optimizer.step(grads, phase.lr, phase.weight_decay, gram)
        if (n + 1) % p.record_every or not in_window:
            return None
        row = {"train_loss": self.loss_sum.mean() / p.record_every, "train_acc": self.hits.mean() / p.record_every,
               **self.pending}
        self.loss_sum.zero_()
        self.hits.zero_()
        if tracker is not None:
            for g, metrics in tracker.reduce(phase.lr, phase.weight_decay).items():
                row.update({layer_key(g, m): value for m, value in metrics.items()})
        return row

    def final_row(self) -> Row:
        """The state after the last update: test loss and accuracy, the rates in force and, per group,
        |w|, η/|w|² and the norm theory; the train loss and accuracy and the update metrics NaN."""
        phase, net = self.phase, self.net
        nan = torch.tensor(math.nan, device=self.ctx.device, dtype=torch.float64)
        test_loss, test_acc = evaluate(net, self.data.x_test, self.data.y_test)
        row = {"train_loss": nan, "train_acc": nan, "test_loss": test_loss, "test_acc": test_acc,
               "lr": torch.tensor(phase.lr, dtype=torch.float64),
               "weight_decay": torch.tensor(phase.weight_decay, dtype=torch.float64)}
        if self.tracker is not None:
            with torch.no_grad():
                ww = torch.stack([self.params[i].flatten(1).square().sum(1) for i in self.optimizer.tracked])
            for g, metrics in self.tracker.now(ww, phase.lr, phase.weight_decay).items():
                row.update({layer_key(g, m): value for m, value in metrics.items()})
        return row

    def state(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state(), "buffers": {k: saved(b) for k, b in self.net.buffers.items()},
                "rng": self.ctx.gen.get_state(), "batches": self.batches.state(), "loss_sum": saved(self.loss_sum),
                "hits": saved(self.hits), "pending": {k: saved(v) for k, v in self.pending.items()},
                "tracker": self.tracker.state() if self.tracker is not None else None}

    def load_state(self, state: dict[str, Any], step: int) -> None:
        # the phase in force at the last update done; a phase starting at `step` (and its rescale) is
        # entered by the next update, exactly once
        self.phase = phase_at(self.all_phases, step - 1) if step > 0 else self.all_phases[0]
        self.optimizer.load_state(state["optimizer"])
        with torch.no_grad():
            for k, b in state["buffers"].items():
                self.net.buffers[k].copy_(b)
        self.ctx.gen.set_state(state["rng"])
        self.batches.load_state(state["batches"])
        self.loss_sum.copy_(state["loss_sum"])
        self.hits.copy_(state["hits"])
        self.pending = {k: v.to(self.ctx.device if k in ("test_loss", "test_acc") else "cpu")
                        for k, v in state["pending"].items()}
        if self.tracker is not None:
            self.tracker.load_state(state["tracker"])

    @classmethod
    def predict(cls, spec: TrainSpec) -> dict[str, Any]:
        """au_equilibrium on the record steps (the rates in force at each window's first step, and at the end)."""
        p = spec.params
        all_phases = p.phases()
        windows = range(0, p.total_steps - p.record_every + 1, p.record_every)
        in_force = [phase_at(all_phases, n) for n in [*windows, p.total_steps]]
        return {"au_equilibrium": [au_equilibrium(ph.lr, ph.weight_decay, p.momentum) for ph in in_force]}

    def summarize(self, series: dict[str, list], theory: dict[str, Any]) -> dict[str, Any]:
        """:func:`summarize`, each phase's time to equilibrium of every layer's ``au_rms``
        (:func:`smdengine._science.equilibrium_summary`: the largest over the layers), the final test
        loss and accuracy, the scale-invariance check, and the data sizes."""
        final_loss, final_acc = evaluate(self.net, self.data.x_test, self.data.y_test)
        p, groups = self.p, self.groups if self.tracker is not None else []
        summary = summarize(series, theory, groups, p.tail_start())
        summary.update(equilibrium_summary(p.phases(), p.total_steps, series["step"],
                                           [series[layer_key(g, "au_rms")] for g in groups], p.momentum,
                                           width=p.record_every))
        summary.update(test_loss_final=float(final_loss), test_acc_final=float(final_acc),
                       scale_invariance_max_cos=self.max_cos, train_samples=int(self.data.y_train.shape[0]),
                       noisy_labels=int(self.data.noisy.sum()))
        return summary


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
            dot = _total(torch.linalg.vecdot(net.params[m].flatten(1), grads[m].flatten(1)) for m in group_members)
            wn = _total(net.params[m].flatten(1).square().sum(1) for m in group_members).sqrt()
            gn = _total(grads[m].flatten(1).square().sum(1) for m in group_members).sqrt()
            cos = (dot / (wn * gn).clamp_min(1e-300)).abs().max().item()
            if cos > tol:
                raise RuntimeError(f"scale invariance: expected ⟨w, ∇_w L⟩ ≈ 0 for {group}, got cos = {cos:.3g}")
            worst = max(worst, cos)
    return worst


def _total(parts: Iterable[torch.Tensor]) -> torch.Tensor:
    return reduce(operator.add, parts)   # left to right


def summarize(series: dict[str, list], theory: dict[str, list], groups: list[str], start: float) -> dict[str, Any]:
    """Tail means of the global series (NaN points skipped) and, under ``layers``, of every group's
    series (au_rms: the RMS over the tail) with its theory and ``equilibrium_step``: the first recorded step from which au_rms stays
    within 10% of au_equilibrium to the end (None when it never settles); without ``au_equilibrium`` in
    the theory (out of regime) neither key."""
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

    out: dict[str, Any] = {k: mean(series[k]) for k in GLOBAL_METRICS}
    has_theory = "au_equilibrium" in theory   # omitted out of regime (TrainParams.regime_warnings)
    if has_theory:
        au_theory = np.asarray(theory["au_equilibrium"], dtype=np.float64)
        out["au_equilibrium"] = mean(au_theory)
    layers = {}
    for g in groups:
        entry = {m: mean(series[layer_key(g, m)], rms=m == "au_rms") for m in LAYER_METRICS}
        layers[g] = entry
        if not has_theory:
            continue
        entry["au_equilibrium"] = out["au_equilibrium"]
        au = np.asarray(series[layer_key(g, "au_rms")], dtype=np.float64)
        outside = np.flatnonzero(~(np.abs(au - au_theory[:au.size]) <= 0.1 * au_theory[:au.size]))
        settle = 0 if outside.size == 0 else outside[-1] + 1
        entry["equilibrium_step"] = int(steps[settle]) if settle < steps.size else None
    out["layers"] = layers
    return out
