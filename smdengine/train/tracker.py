"""Per-step Spherical Motion Dynamics tracking of the scale-invariant weights of a network.

Each update w' = w − η·v (v = g + λw, or the heavy-ball velocity) is summarised per parameter and
trial by the Gram matrix of the optimizer's storage rows [w, v] or [w, v_a, v_b] (one batched
matmul, written by the optimizer into this tracker's window buffer), from which ⟨w,w⟩, ⟨w,v⟩,
⟨v,v⟩ and ⟨g,g⟩ follow (g: the minibatch gradient without weight decay, g = v − λw, or
v − αv_old − λw). At the end of a window, in float64, per group (members summed):

    |w'|² = |w|² − 2η⟨w,v⟩ + η²|v|²,  ⟨w,w'⟩ = |w|² − η⟨w,v⟩,
    |w ∧ w'| = η·√(|w|²|v|² − ⟨w,v⟩²)     (Lagrange's identity),
    Δ = atan2(|w ∧ w'|, ⟨w,w'⟩)          (accurate for the small angles of interest),

and the unit-gradient norm² L = |g|²·|w|² (seed 003: the gradient at w/|w|).

The equilibrium norm (``norm_theory``, seed 003 Thm 1/2) is driven by the running mean of h̃ = h·|w|²
with h = |g|² + 2α⟨v_old, g⟩ (seed 003 Thm 2, assumption 5; ⟨v_old, g⟩ = ⟨v, v_old⟩ − α|v_old|² −
λ⟨w, v_old⟩): momentum is not perpendicular to w, and the gradient's correlation with the previous
velocity feeds the norm as much as |g|² does. For SGD (α = 0) h̃ = L.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from smdengine._runtime import saved

SLOT_CACHE = 1024     # longest window whose per-step buffer views are made in advance


def norm_theory(unit_grad_sq: torch.Tensor, lr: float, weight_decay: float, momentum: float) -> torch.Tensor:
    """Equilibrium |w| for a unit-gradient norm² L (seed 003 Thm 1/2):
    |w|⁴ = ηL/(λ(1−α)(2 − λη/(1+α))); +inf without weight decay."""
    if weight_decay <= 0:
        return torch.full_like(unit_grad_sq, math.inf)
    denom = weight_decay * (1 - momentum) * (2 - weight_decay * lr / (1 + momentum))
    return (lr * unit_grad_sq / denom) ** 0.25


class Tracker:
    """Collects the Gram matrices of one window (written by the optimizer) and reduces them to the
    metrics of each group.

    members: the group index of each tracked parameter, in the optimizer's tracked order.
    rows: 2 for SGD storage [w, v], 3 for SGDM storage [w, v_a, v_b] (optimizer.SGD).
    """

    def __init__(self, group_names: Sequence[str], members: Sequence[int], trials: int, window: int,
                 momentum: float, rows: int, dtype: torch.dtype, device: torch.device):
        self.names = tuple(group_names)
        self.index = torch.tensor(list(members), device=device)
        self.grouped = list(members) != list(range(len(self.names)))   # some group has several members
        self.momentum = momentum
        self.buf = torch.zeros(window, len(members), trials, rows, rows, dtype=dtype, device=device)
        # the per-step, per-parameter views handed to the optimizer, made once (the step loop is
        # short enough that indexing the buffer each step shows up in the tracking overhead), but
        # only for windows of up to SLOT_CACHE steps: a view object weighs ~50× its Gram matrix
        self.slots = ([list(step.unbind(0)) for step in self.buf.unbind(0)] if window <= SLOT_CACHE else None)
        self.rates: list[tuple[float, float, int]] = []   # (η, λ, velocity row) of each step
        self.ema: torch.Tensor | None = None            # running mean of h̃ per (group, trial), float64

    def state(self) -> dict:
        """What a checkpoint needs (CPU copies): the Gram matrices and rates of the steps of the window
        in progress, and the running mean of h̃."""
        n = len(self.rates)
        return {"gram": saved(self.buf[:n]), "rates": [list(r) for r in self.rates],
                "ema": None if self.ema is None else saved(self.ema)}

    def load_state(self, state: dict) -> None:
        self.rates = [(float(lr), float(wd), int(row)) for lr, wd, row in state["rates"]]
        self.buf[:len(self.rates)].copy_(state["gram"])
        ema = state["ema"]
        self.ema = None if ema is None else ema.to(self.buf.device)

    def slot(self, lr: float, weight_decay: float, velocity_row: int) -> list[torch.Tensor]:
        """The buffers for the next step's Gram matrices: one (T, rows, rows) view per tracked parameter."""
        n = len(self.rates)
        out = self.slots[n] if self.slots is not None else list(self.buf[n].unbind(0))
        self.rates.append((lr, weight_decay, velocity_row))
        return out

    def reduce(self, lr: float, weight_decay: float) -> dict[str, dict[str, torch.Tensor]]:
        """Metrics of every group (spec.LAYER_METRICS) over the window (0-d tensors), and reset. lr,
        weight_decay: the rates in force at the end of the window (for the running-mean time scale and norm_theory)."""
        n = len(self.rates)
        gram = self.buf[:n].to(torch.float64)                       # (n, P, T, R, R)
        dev = gram.device
        eta, lam, new = (torch.tensor(c, dtype=torch.float64, device=dev).view(n, 1, 1) for c in zip(*self.rates, strict=False))
        ww = gram[..., 0, 0]
        if gram.shape[-1] == 2:                                     # SGD: v = g + λw
            wv, vv = gram[..., 0, 1], gram[..., 1, 1]
            gg = vv - 2 * lam * wv + lam.square() * ww
            hh = gg
        else:                                                       # SGDM: v = αv_old + g + λw
            a = self.momentum
            first = new == 1
            wv = torch.where(first, gram[..., 0, 1], gram[..., 0, 2])
            wo = torch.where(first, gram[..., 0, 2], gram[..., 0, 1])
            vv = torch.where(first, gram[..., 1, 1], gram[..., 2, 2])
            oo = torch.where(first, gram[..., 2, 2], gram[..., 1, 1])
            vo = gram[..., 1, 2]
            # g = v − αv_old − λw
            gg = vv + a * a * oo + lam.square() * ww - 2 * a * vo - 2 * lam * wv + 2 * a * lam * wo
            hh = gg + 2 * a * (vo - a * oo - lam * wo)              # h = |g|² + 2α⟨v_old, g⟩ (Thm 2)
        stats = torch.stack((ww, wv, vv, gg, hh), dim=-1)           # (n, P, T, 5)
        if self.grouped:
            stats = torch.zeros(n, len(self.names), *stats.shape[2:], dtype=stats.dtype, device=dev).index_add_(1, self.index, stats)
        ww, wv, vv, gg, hh = stats.unbind(-1)                       # (n, G, T)
        dot = ww - eta * wv
        cross = eta * (ww * vv - wv * wv).clamp_min(0).sqrt()
        angle = torch.atan2(cross, dot)
        unit = gg.clamp_min(0) * ww
        drive = hh.clamp_min(0) * ww                                # h̃, the L of Thm 2 (= unit for SGD)
        # running mean of h̃ with the norm's relaxation rate 4λη/(1−α) (seed 003 Thm 1/2)
        beta = min(1.0, 4 * weight_decay * lr / (1 - self.momentum)) if weight_decay > 0 else 1.0 / n
        weights = beta * (1 - beta) ** torch.arange(n - 1, -1, -1, dtype=torch.float64, device=dev)
        start = drive[0] if self.ema is None else self.ema
        self.ema = (1 - beta) ** n * start + torch.einsum("n,ngt->gt", weights, drive)
        theory = norm_theory(self.ema, lr, weight_decay, self.momentum)
        norm = ww.sqrt()
        out = {}
        for j, name in enumerate(self.names):
            out[name] = {
                "au_rms": angle[:, j].square().mean().sqrt(),
                "au_mean": angle[:, j].mean(),
                "norm": norm[:, j].mean(),
                "unit_grad_sq": unit[:, j].mean(),
                "eff_lr": (eta[:, 0] / ww[:, j]).mean(),
                "norm_theory": theory[j].mean(),
            }
        self.rates = []
        return out

    def now(self, ww: torch.Tensor, lr: float, weight_decay: float) -> dict[str, dict[str, torch.Tensor]]:
        """Metrics of every group at the state after the last update (the final row): ``norm``, ``eff_lr``
        and ``norm_theory`` (from the running mean of h̃ so far); those of an update NaN. ww: (P, T), |w|²
        of each tracked parameter per trial."""
        ww = ww.to(torch.float64)
        if self.grouped:
            ww = torch.zeros(len(self.names), ww.shape[1], dtype=ww.dtype, device=ww.device).index_add_(0, self.index, ww)
        nan = torch.tensor(math.nan, dtype=torch.float64, device=ww.device)
        theory = (norm_theory(self.ema, lr, weight_decay, self.momentum) if self.ema is not None
                  else torch.full_like(ww, math.nan))
        return {name: {"au_rms": nan, "au_mean": nan, "norm": ww[j].sqrt().mean(), "unit_grad_sq": nan,
                       "eff_lr": (lr / ww[j]).mean(), "norm_theory": theory[j].mean()}
                for j, name in enumerate(self.names)}
