"""SGD / heavy-ball SGDM + weight decay over trial-batched parameters (docs/theory.md):
v = g + λw (α = 0) or v ← αv + g + λw, then w ← w − ηv.

Tracked parameters (the scale-invariant weights) live in one storage per parameter, rows
(T, n) of ``[w, v]`` (SGD) or ``[w, v_a, v_b]`` (SGDM, the velocity alternating between two rows),
so that a single batched matmul per parameter and step gives every inner product the tracker
needs — the Gram matrix of the rows, per trial — in one pass over memory and without copying
the weights. The parameter tensors the network uses are views of row 0.

On the CPU, with several torch threads, a long row is cut into one piece per thread and the pieces' Gram
matrices are summed: a (rows, n)·(n, rows) product is a single GEMM that runs on one thread, whereas a
batch of pieces is spread over the threads (timings: bench/README.md, "Engine timings").
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from smdengine._runtime import saved

SPLIT_MIN = 32768     # shortest row (elements) cut into one piece per thread for the Gram product


class SGD:
    def __init__(self, params: list[torch.Tensor], momentum: float, tracked: Sequence[int] = ()):
        """params: leaf tensors (T, ...); tracked: indices of the parameters to track. The tracked
        entries of ``params`` are replaced by views of their storage (use :attr:`params` afterwards)."""
        self.momentum = momentum
        self.rows = 2 if momentum == 0 else 3
        self.tracked = list(tracked)
        self.storage: list[torch.Tensor] = []
        # per tracked parameter: (T·c, rows, n/c) and (T·c, n/c, rows) views of the storage, and a
        # (T·c, rows, rows) buffer for the c pieces' Gram matrices (None when c = 1)
        self.gram_operands: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
        threads = torch.get_num_threads()
        self.params = list(params)
        for i in self.tracked:
            w = params[i].detach()
            store = torch.zeros((self.rows, w.shape[0], w[0].numel()), dtype=w.dtype, device=w.device)
            store[0].copy_(w.flatten(1))
            view = store[0].view(w.shape)
            view.requires_grad_(True)
            self.params[i] = view
            self.storage.append(store)
            n = store.shape[2]
            # CPU only: a GPU spreads one bmm over its cores already
            split = w.device.type == "cpu" and threads > 1 and n >= SPLIT_MIN and n % threads == 0
            pieces = threads if split else 1
            rows = store.view(self.rows, w.shape[0] * pieces, n // pieces).transpose(0, 1)
            partial = None if pieces == 1 else store.new_empty((w.shape[0] * pieces, self.rows, self.rows))
            self.gram_operands.append((rows, rows.transpose(1, 2), partial))
        self.others = sorted(set(range(len(params))) - set(self.tracked))
        self.velocity = ([torch.zeros_like(self.params[i]) for i in self.others] if momentum > 0 else None)
        self.count = 0

    def state(self) -> dict:
        """What a checkpoint needs (CPU copies): every storage row (weights and velocities), the
        untracked parameters and their velocities, and the step count (which velocity row is next)."""
        out = {"count": self.count, "storage": [saved(s) for s in self.storage],
               "others": [saved(self.params[i]) for i in self.others]}
        if self.velocity is not None:
            out["velocity"] = [saved(v) for v in self.velocity]
        return out

    @torch.no_grad()
    def load_state(self, state: dict) -> None:
        self.count = int(state["count"])
        for store, s in zip(self.storage, state["storage"], strict=True):
            store.copy_(s)
        for i, p in zip(self.others, state["others"], strict=True):
            self.params[i].copy_(p)
        if self.velocity is not None:
            for v, s in zip(self.velocity, state["velocity"], strict=True):
                v.copy_(s)

    def next_velocity_row(self) -> int:
        """Row of the storage that receives the velocity of the next step (the other holds the previous)."""
        return 1 if self.momentum == 0 else 1 + self.count % 2

    @torch.no_grad()
    def step(self, grads: Sequence[torch.Tensor], lr: float, weight_decay: float,
             gram_out: Sequence[torch.Tensor] | None = None) -> None:
        """Apply one update. gram_out, when given, holds one (T, rows, rows) tensor per tracked parameter
        and receives the Gram matrices of its storage rows after v is formed and before w moves."""
        new = self.next_velocity_row()
        self.count += 1
        for k, i in enumerate(self.tracked):
            store, g = self.storage[k], grads[i].flatten(1)
            torch.add(g, store[0], alpha=weight_decay, out=store[new])
            if self.momentum:
                store[new].add_(store[3 - new], alpha=self.momentum)
            if gram_out is not None:
                rows, rows_t, partial = self.gram_operands[k]
                if partial is None:
                    torch.bmm(rows, rows_t, out=gram_out[k])
                else:
                    torch.bmm(rows, rows_t, out=partial)
                    torch.sum(partial.view(gram_out[k].shape[0], -1, self.rows, self.rows), 1, out=gram_out[k])
            store[0].add_(store[new], alpha=-lr)
        if self.others:
            ps = [self.params[i] for i in self.others]
            gs = [grads[i] for i in self.others]
            if self.velocity is None:
                v = torch._foreach_add(gs, ps, alpha=weight_decay) if weight_decay else gs
            else:
                v = self.velocity
                torch._foreach_mul_(v, self.momentum)
                torch._foreach_add_(v, gs)
                if weight_decay:
                    torch._foreach_add_(v, ps, alpha=weight_decay)
            torch._foreach_add_(ps, v, alpha=-lr)
