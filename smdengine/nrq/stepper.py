"""The batched NRQ update, shared by the discrete ``nrq`` kind and the ``sde`` kind's nrq model.

State X: (trials, p). Loss L(X) = XᵀAX/(2XᵀX), A = diag(a). With s = |X|², q = XᵀAX and
ε ~ N(0, I) drawn fresh each update, the scale-invariant stochastic gradient is
    g = (P A X̄ + σ P ε)/|X| = A X/s − X q/s² + σ ε/√s − σ X (X·ε)/s^{3/2},     g ⟂ X,
so the SGD update X ← X − η(g + λX) is one per-trial scale of X, one per-coordinate scale and one
noise term. Written that way a step costs one randn, two reductions and three (trials, p) passes.
SGDM (seed 003 Thm 2): v ← αv + g + λX; X ← X − ηv.
"""
from __future__ import annotations

from typing import Any

import torch

from smdengine._runtime import saved
from smdengine._science import Phase


class Stepper:
    """The batched update. Buffers are reused so a step allocates only small (trials,) tensors."""

    def __init__(self, x: torch.Tensor, a: torch.Tensor, noise_std: float, momentum: float,
                 gen: torch.Generator):
        self.x, self.a, self.sigma, self.alpha, self.gen = x, a, noise_std, momentum, gen
        self.eps = torch.empty_like(x)
        self.buf = torch.empty_like(x)
        self.v = torch.zeros_like(x) if momentum else None
        self.reduce = torch.stack([torch.ones_like(a), a], dim=1)  # (p, 2): |X|², XᵀAX in one matmul
        self.rates: tuple[float, float] = (0.0, 0.0)  # (lr, weight_decay) of the phase entered last

    def state(self) -> dict[str, Any]:
        """What a checkpoint needs: X (and v), the generator state and the rates of the phase in
        force (CPU copies)."""
        out = {"x": saved(self.x), "rng": self.gen.get_state(), "rates": self.rates}
        if self.v is not None:
            out["v"] = saved(self.v)
        return out

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state`."""
        self.x.copy_(state["x"])
        if self.v is not None:
            self.v.copy_(state["v"])
        self.gen.set_state(state["rng"])
        lr, wd = state["rates"]
        self.rates = (lr, wd)

    def enter(self, phase: Phase) -> None:
        """Start a schedule phase (:class:`smdengine._science.Phase`): its rates, and its rescale
        X ← factor·X. The momentum buffer, dominated by g ∝ 1/|X|, scales by 1/factor."""
        if phase.rescale != 1.0:
            self.x.mul_(phase.rescale)
            if self.v is not None:
                self.v.div_(phase.rescale)
        self.rates = (phase.lr, phase.weight_decay)

    def step(self, lr: float, wd: float, noise_lr: float) -> torch.Tensor:
        """One update X ← X − lr(∇L + λX) − noise_lr·σPε/|X| (SGD: noise_lr = lr; Euler–Maruyama
        with step dt uses lr·dt and lr·√dt; SGDM ignores it: the noise enters v). Returns (s, q) = (|X|², XᵀAX)
        before it, shape (trials, 2)."""
        x, eps, buf = self.x, self.eps, self.buf
        sig = self.sigma * noise_lr
        torch.randn(x.shape, generator=self.gen, out=eps)
        sq = torch.mul(x, x, out=buf) @ self.reduce
        s, q = sq[:, 0:1], sq[:, 1:2]
        e = torch.linalg.vecdot(x, eps).unsqueeze(1)
        inv_s = s.reciprocal()
        rs = inv_s.sqrt()
        if self.v is None:
            # radial part of the update over X: lr·q/s² + sig·(X·ε)/s^{3/2} (a (trials, 1) column)
            radial = (q * inv_s).mul_(lr).addcmul_(e, rs, value=sig).mul_(inv_s)
            coef = torch.addcmul(radial.add_(1.0 - lr * wd), inv_s, self.a, value=-lr)
            torch.mul(x, coef, out=buf)
            torch.addcmul(buf, eps, rs, value=-sig, out=x)
        else:
            radial = (q * inv_s + self.sigma * e * rs) * inv_s
            coef = torch.addcmul(radial.neg_().add_(wd), inv_s, self.a)  # (g + λX) = X·coef + σε/√s
            self.v.mul_(self.alpha).addcmul_(x, coef).addcmul_(eps, rs, value=self.sigma)
            x.add_(self.v, alpha=-lr)
        return sq


def angle(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Row-wise angle between u and v, 2·atan2(|û−v̂|, |û+v̂|): accurate for tiny angles,
    where arccos of the cosine loses half the digits."""
    u = u / torch.linalg.vector_norm(u, dim=1, keepdim=True)
    v = v / torch.linalg.vector_norm(v, dim=1, keepdim=True)
    return 2.0 * torch.atan2(torch.linalg.vector_norm(u - v, dim=1), torch.linalg.vector_norm(u + v, dim=1))
