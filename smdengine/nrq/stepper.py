"""The batched NRQ update, shared by the discrete ``nrq`` kind and the ``sde`` kind's nrq model.

State X: (trials, p). Loss L(X) = XᵀAX/(2XᵀX), A = diag(a). With s = |X|², q = XᵀAX and
ε ~ N(0, I) drawn fresh each update, the scale-invariant stochastic gradient is
    g = (P A X̄ + σ P ε)/|X| = A X/s − X q/s² + σ ε/√s − σ X (X·ε)/s^{3/2},     g ⟂ X,
so the SGD update X ← X − η(g + λX) is one per-trial scale of X, one per-coordinate scale and one
noise term. Written that way a step costs one randn, two reductions and three (trials, p) passes.
SGDM (seed 003 Thm 2): v ← αv + g + λX; X ← X − ηv.

The normal source: on the CPU in float64, NumPy's ziggurat generator (PCG64, seeded with the run's
seed) fills ε about 1.6× as fast as torch's CPU normal generator, which lifts the whole update by about
1.4×; in float32 torch's vectorised generator is the faster one (bench/normal_source.py). So float64
CPU runs draw ε from NumPy, every other run from the torch generator; either way the generator state
is in the checkpoint.

Members (fused sweeps). The rows of X may belong to several runs ("members") that share the shape
and the spectrum but not the rates: every rate (η, λ, σ, α) is a (trials, 1) column, each member
draws its noise from its own generator into its own rows, and every operation is row-wise (the two
reductions are per row). So a member's rows evolve bit for bit as they would in a run of that member
alone — a single run is the case of one member, computed by the same code. Momentum (SGDM) members
and SGD members take different code paths and are never fused together.

On CUDA, when Triton is installed, everything after the noise is one kernel
(:mod:`smdengine.nrq._fused_step`): one launch and two sweeps of each row (reduce, then update) instead
of ~10 kernels over X, and each row summed in an order that does not depend on the number of rows,
which torch's matmul does not promise on a GPU — without it a fused member can differ from its run
alone in the last bits there.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from smdengine._runtime import saved
from smdengine._science import Phase


class Stepper:
    """The batched update over members (module docstring). ``sizes[c]`` rows of X are member c's,
    in order; ``gens[c]`` its generator; ``noise_std`` and ``momentum`` one value per member.
    Buffers are reused so a step allocates only small (trials, 1) columns."""

    NUMPY_FLOAT64 = True   # float64 CPU noise from NumPy's ziggurat (module docstring); False: torch's (benches)
    # the Triton update: None: on CUDA where Triton imports; True: wherever it imports (on the CPU only under
    # TRITON_INTERPRET=1); False: never. A kernel that fails to build at the first step falls back, with a warning.
    KERNEL: bool | None = None

    def __init__(self, x: torch.Tensor, a: torch.Tensor, noise_std: Sequence[float], momentum: Sequence[float],
                 gens: Sequence[torch.Generator], sizes: Sequence[int]):
        if len({m > 0 for m in momentum}) > 1:
            raise ValueError("momentum: expected all members with momentum or all without")
        self.x, self.a, self.gens, self.sizes = x, a, list(gens), list(sizes)
        self.rows = [slice(start, start + n) for start, n in zip(_starts(self.sizes), self.sizes, strict=True)]
        self.sigma = self.column(noise_std)
        self.alpha = self.column(momentum) if momentum[0] else None
        self.eps = torch.empty_like(x)
        self.numpy_gens = ([np.random.Generator(np.random.PCG64(gen.initial_seed())) for gen in self.gens]
                           if self.NUMPY_FLOAT64 and x.device.type == "cpu" and x.dtype == torch.float64 else None)
        self.v = torch.zeros_like(x) if self.alpha is not None else None
        self.reduce = torch.stack([torch.ones_like(a), a], dim=1)  # (p, 2): |X|², XᵀAX in one matmul
        self.rates: list[tuple[float, float]] = [(0.0, 0.0)] * len(self.sizes)  # (lr, wd) per member
        self.lr = self.wd = self.sig = self.keep = self.sigma  # set by enter()
        self.kernel = _fused_update(x, self.KERNEL)
        self.kernel_built = False
        self.buf = torch.empty_like(x) if self.kernel is None else None   # the torch path's scratch

    def column(self, values: Sequence[float]) -> torch.Tensor:
        """One value per member → a (trials, 1) column of the state's dtype and device."""
        per_member = torch.tensor(list(values), dtype=self.x.dtype, device=self.x.device)
        sizes = torch.tensor(self.sizes, device=self.x.device)
        return torch.repeat_interleave(per_member, sizes).unsqueeze(1)

    def state(self, member: int = 0) -> dict[str, Any]:
        """What a checkpoint of one member needs: its rows of X (and v), its generator state and the
        rates of the phase in force (CPU copies) — the same whether or not it runs fused."""
        rows = self.rows[member]
        out = {"x": saved(self.x[rows]), "rng": self.gens[member].get_state(), "rates": self.rates[member]}
        if self.numpy_gens is not None:
            out["numpy_rng"] = self.numpy_gens[member].bit_generator.state
        if self.v is not None:
            out["v"] = saved(self.v[rows])
        return out

    def load_state(self, state: dict[str, Any], member: int = 0) -> None:
        """Restore :meth:`state` of one member. Call :meth:`set_rates` once every member is loaded."""
        rows = self.rows[member]
        self.x[rows].copy_(state["x"])
        if self.v is not None:
            self.v[rows].copy_(state["v"])
        self.gens[member].set_state(state["rng"])
        if self.numpy_gens is not None:
            self.numpy_gens[member].bit_generator.state = state["numpy_rng"]
        lr, wd = state["rates"]
        self.rates[member] = (lr, wd)

    def enter(self, phases: Sequence[Phase], dt: float = 1.0) -> None:
        """Start a schedule phase, one :class:`smdengine._science.Phase` per member: its rates, and
        its rescale X ← factor·X. The momentum buffer, dominated by g ∝ 1/|X|, scales by 1/factor."""
        for rows, phase in zip(self.rows, phases, strict=True):
            if phase.rescale != 1.0:
                self.x[rows].mul_(phase.rescale)
                if self.v is not None:
                    self.v[rows].div_(phase.rescale)
        self.rates = [(phase.lr, phase.weight_decay) for phase in phases]
        self.set_rates(dt)

    def set_rates(self, dt: float = 1.0) -> None:
        """The per-trial columns of :attr:`rates` for Euler–Maruyama updates of size ``dt`` (SGD:
        dt = 1): drift lr·dt, noise lr·√dt·σ, and the decay factor 1 − lr·dt·λ."""
        lrs = [lr * dt for lr, _ in self.rates]
        self.lr = self.column(lrs)
        self.wd = self.column([wd for _, wd in self.rates])
        self.keep = self.column([1.0 - lr * wd for lr, (_, wd) in zip(lrs, self.rates, strict=True)])
        self.sig = self.sigma * self.column([lr * dt ** 0.5 for lr, _ in self.rates])

    def draw_noise(self) -> None:
        """ε ~ N(0, I) into :attr:`eps`, each member's rows from its own generator."""
        eps = self.eps
        if self.numpy_gens is not None:
            into = eps.numpy()   # the same memory
            for rows, rng in zip(self.rows, self.numpy_gens, strict=True):
                rng.standard_normal(out=into[rows])
            return
        for rows, gen in zip(self.rows, self.gens, strict=True):
            torch.randn(eps[rows].shape, generator=gen, out=eps[rows])

    def step(self) -> torch.Tensor:
        """One update X ← X − lr(∇L + λX) − noise_lr·σPε/|X| with the columns of :meth:`set_rates`
        (SGDM: v ← αv + g + λX, X ← X − lr·v). Returns (s, q) = (|X|², XᵀAX) before it, shape
        (trials, 2)."""
        x, eps = self.x, self.eps
        self.draw_noise()
        if self.kernel is not None:
            columns = ((self.lr, self.keep, self.sig) if self.alpha is None
                       else (self.lr, self.wd, self.sigma, self.alpha))
            try:   # the first call compiles (a C compiler and a supported GPU needed); X is untouched if it fails
                sq = self.kernel(x, eps, self.v, self.a, x.new_empty(x.shape[0], 2), columns)
            except Exception as exc:   # noqa: BLE001 — a build failure: the torch ops compute the same update
                if self.kernel_built:
                    raise
                warnings.warn(f"the Triton nrq update failed to build ({type(exc).__name__}: {exc}); "
                              "using the torch operations", RuntimeWarning, stacklevel=2)
                self.kernel, self.buf = None, torch.empty_like(x)
            else:
                self.kernel_built = True
                return sq
        buf = self.buf
        assert buf is not None
        sq = torch.mul(x, x, out=buf) @ self.reduce
        s, q = sq[:, 0:1], sq[:, 1:2]
        e = torch.linalg.vecdot(x, eps).unsqueeze(1)
        inv_s = s.reciprocal()
        rs = inv_s.sqrt()
        if self.v is None or self.alpha is None:
            # radial part of the update over X: lr·q/s² + sig·(X·ε)/s^{3/2} (a (trials, 1) column)
            noise = rs.mul_(self.sig)
            radial = (q * inv_s).mul_(self.lr).addcmul_(e, noise).mul_(inv_s)
            coef = torch.addcmul(radial.add_(self.keep), inv_s.mul_(self.lr), self.a, value=-1.0)
            torch.mul(x, coef, out=buf)
            torch.addcmul(buf, eps, noise, value=-1.0, out=x)
        else:
            noise = rs.mul_(self.sigma)
            radial = (q * inv_s + e * noise) * inv_s
            coef = torch.addcmul(radial.neg_().add_(self.wd), inv_s, self.a)  # (g + λX) = X·coef + σε/√s
            self.v.mul_(self.alpha).addcmul_(x, coef).addcmul_(eps, noise)
            x.addcmul_(self.v, self.lr, value=-1.0)
        return sq


def _fused_update(x: torch.Tensor, mode: bool | None) -> Any:
    """:func:`smdengine.nrq._fused_step.update` where :attr:`Stepper.KERNEL` asks for it (on CUDA by
    default) and Triton imports; else None (the torch path)."""
    if mode is False or (mode is None and x.device.type != "cuda"):
        return None
    try:
        from smdengine.nrq._fused_step import update
    except ImportError:   # no Triton: the torch path
        return None
    return update


def _starts(sizes: Sequence[int]) -> list[int]:
    out, start = [], 0
    for n in sizes:
        out.append(start)
        start += n
    return out


def angle(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Row-wise angle between u and v, 2·atan2(|û−v̂|, |û+v̂|): accurate for tiny angles,
    where arccos of the cosine loses half the digits."""
    u = u / torch.linalg.vector_norm(u, dim=1, keepdim=True)
    v = v / torch.linalg.vector_norm(v, dim=1, keepdim=True)
    return 2.0 * torch.atan2(torch.linalg.vector_norm(u - v, dim=1), torch.linalg.vector_norm(u + v, dim=1))
