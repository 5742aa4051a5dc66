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

Several updates per launch (:meth:`Stepper.advance`): on CUDA with Triton and p ≤ 8192 the ``nrq`` kind
advances from one record step to the next in one kernel (:mod:`smdengine.nrq._multistep`), X (and v)
held in registers and ε drawn inside the kernel from a counter-based stream keyed by (seed, trial,
update, coordinate) instead of the torch generator. Which stream a run draws is :func:`noise_stream`
(named in its provenance and checked when a checkpoint is resumed).
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from numpy.random import PCG64, Generator

from smdengine._runtime import IncompatibleCheckpoint, saved
from smdengine._science import Phase

TORCH_STREAM = "torch generator"
NUMPY_STREAM = "numpy pcg64 ziggurat"


class Stepper:
    """The batched update over members (module docstring). ``sizes[c]`` rows of X are member c's,
    in order; ``gens[c]`` its generator; ``noise_std`` and ``momentum`` one value per member.
    Buffers are reused so a step allocates only small (trials, 1) columns."""

    NUMPY_FLOAT64 = True   # float64 CPU noise from NumPy's ziggurat (module docstring); False: torch's (benches)
    # the Triton update: None: on CUDA where Triton imports; True: wherever it imports (on the CPU only under
    # TRITON_INTERPRET=1); False: never. A kernel that fails to build at the first step falls back, with a warning.
    KERNEL: bool | None = None

    def __init__(self, x: torch.Tensor, a: torch.Tensor, noise_std: Sequence[float], momentum: Sequence[float],
                 gens: Sequence[torch.Generator], sizes: Sequence[int], multistep: bool = False):
        if len({m > 0 for m in momentum}) > 1:
            raise ValueError("momentum: expected all members with momentum or all without")
        self.x, self.a, self.gens, self.sizes = x, a, list(gens), list(sizes)
        self.rows = row_slices(self.sizes)
        self.sigma = self.column(noise_std)
        self.alpha = self.column(momentum) if momentum[0] else None
        self.eps = torch.empty_like(x)
        self.numpy_gens = ([Generator(PCG64(gen.initial_seed())) for gen in self.gens]
                           if self.NUMPY_FLOAT64 and x.device.type == "cpu" and x.dtype == torch.float64 else None)
        self.v = torch.zeros_like(x) if self.alpha is not None else None
        self.reduce = torch.stack([torch.ones_like(a), a], dim=1)  # (p, 2): |X|², XᵀAX in one matmul
        self.rates: list[tuple[float, float]] = [(0.0, 0.0)] * len(self.sizes)  # (lr, wd) per member
        self.lr = self.wd = self.sig = self.keep = self.sigma  # set by enter()
        self.kernel = _fused_update(x, self.KERNEL)
        self.kernel_built = False
        self.buf = torch.empty_like(x) if self.kernel is None else None   # the torch path's scratch
        self.multistep = _multistep(x, self.KERNEL) if multistep else None
        self.multistep_built = False
        if self.multistep is not None:   # each row's noise key: its member's seed and its trial index in the member
            # built on the host and copied once each, not a launch per member
            seeds = np.array([_signed64(gen.initial_seed()) for gen in self.gens], dtype=np.int64)
            self.seeds = torch.from_numpy(np.repeat(seeds, self.sizes)).to(x.device)
            starts = np.array(_starts(self.sizes), dtype=np.int64)
            trials = (np.arange(x.shape[0]) - np.repeat(starts, self.sizes)).astype(np.int32)   # index in the member
            self.trials = torch.from_numpy(trials).to(x.device)
            self.record = x.new_empty(x.shape[0], 5)
            self.starts = torch.from_numpy(starts).to(x.device)
            self.counts = torch.tensor(self.sizes, dtype=torch.int64, device=x.device)

    @property
    def stream(self) -> str:
        """The noise stream this stepper draws from (:func:`noise_stream`)."""
        if self.multistep is not None:
            from smdengine.nrq._multistep import NOISE_STREAM
            return NOISE_STREAM
        return NUMPY_STREAM if self.numpy_gens is not None else TORCH_STREAM

    def column(self, values: Sequence[float]) -> torch.Tensor:
        """One value per member → a (trials, 1) column of the state's dtype and device (each value rounded to
        the dtype once, as torch.tensor rounds it), built on the host and copied once (no repeat_interleave on
        the device, whose output size would synchronize with it)."""
        return column(values, self.sizes, self.x.dtype, self.x.device)

    def state(self, member: int = 0) -> dict[str, Any]:
        """What a checkpoint of one member needs: its rows of X (and v), its generator state and the
        rates of the phase in force (CPU copies) — the same whether or not it runs fused."""
        rows = self.rows[member]
        out = {"x": saved(self.x[rows]), "rng": self.gens[member].get_state(), "rates": self.rates[member],
               "stream": self.stream}
        if self.numpy_gens is not None:
            out["numpy_rng"] = self.numpy_gens[member].bit_generator.state
        if self.v is not None:
            out["v"] = saved(self.v[rows])
        return out

    def load_state(self, state: dict[str, Any], member: int = 0) -> None:
        """Restore :meth:`state` of one member. Call :meth:`set_rates` once every member is loaded."""
        rows = self.rows[member]
        if state.get("stream", NUMPY_STREAM if self.numpy_gens is not None else TORCH_STREAM) != self.stream:
            raise IncompatibleCheckpoint(f"checkpoint: expected one drawn from the noise stream {self.stream!r}, "
                                         f"got one from {state.get('stream', TORCH_STREAM)!r}")
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


    def advance(self, step0: int, n_steps: int, record: bool) -> torch.Tensor | None:
        """Updates step0 … step0 + n_steps − 1 in one launch of the multi-step kernel (``multistep`` not
        None), the noise from the counter-based stream. Returns, when ``record``, the record columns of
        update step0, (trials, 5): |X|², XᵀAX, X₁², |u − u'|², |u + u'|² (u, u' the unit states before and
        after it); else None."""
        assert self.multistep is not None
        columns = ((self.lr, self.keep, self.sig) if self.alpha is None
                   else (self.lr, self.wd, self.sigma, self.alpha))
        rec = self.record if record else None
        try:   # the first call compiles; X is untouched if it fails
            self.multistep(self.x, self.v, self.a, self.seeds, self.trials, columns, step0, n_steps, rec)
        except Exception as exc:   # noqa: BLE001 — a build failure: one update per launch, the torch generator's noise
            if self.multistep_built:
                raise
            warnings.warn(f"the Triton multi-step nrq update failed to build ({type(exc).__name__}: {exc}); "
                          "using one update per launch", RuntimeWarning, stacklevel=2)
            self.multistep = None
            before = self.x.clone() if record else None
            sq = self.step()
            rec = None if before is None else record_columns(before, self.x, sq)
            for _ in range(n_steps - 1):
                self.step()
            return rec
        self.multistep_built = True
        return rec


def record_columns(before: torch.Tensor, after: torch.Tensor, sq: torch.Tensor) -> torch.Tensor:
    """The record columns of :meth:`Stepper.advance` from the states around one update, (trials, 5)."""
    u = before / sq[:, 0:1].sqrt()
    w = after / torch.linalg.vector_norm(after, dim=1, keepdim=True)
    return torch.stack([sq[:, 0], sq[:, 1], before[:, 0] ** 2, (u - w).square().sum(dim=1),
                        (u + w).square().sum(dim=1)], dim=1)


def noise_stream(device: str, dtype: str, dim: int) -> str:
    """The noise stream an ``nrq`` run on ``device`` (cpu|cuda) draws from: the counter-based stream of
    :mod:`smdengine.nrq._multistep` on CUDA with Triton (p ≤ its MAX_DIM); NumPy's generator for float64
    on the CPU; else the torch generator."""
    if _multistep_available(device, dim, Stepper.KERNEL):
        from smdengine.nrq._multistep import NOISE_STREAM
        return NOISE_STREAM
    if device == "cpu" and dtype == "float64" and Stepper.NUMPY_FLOAT64:
        return NUMPY_STREAM
    return TORCH_STREAM


def _multistep_available(device: str, dim: int, mode: bool | None) -> bool:
    if mode is False or (mode is None and device != "cuda"):
        return False
    try:
        from smdengine.nrq._multistep import MAX_DIM
    except ImportError:
        return False
    return dim <= MAX_DIM


def _multistep(x: torch.Tensor, mode: bool | None) -> Any:
    """:func:`smdengine.nrq._multistep.advance` where :attr:`Stepper.KERNEL` asks for the kernels and
    the row fits in registers; else None."""
    if not _multistep_available(x.device.type, x.shape[1], mode):
        return None
    from smdengine.nrq._multistep import advance
    return advance


def column(values: Sequence[float], sizes: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Value c repeated ``sizes[c]`` times, as a (sum of sizes, 1) column (:meth:`Stepper.column`)."""
    per_row = np.repeat(np.asarray(values, dtype=np.float64), sizes)
    return torch.from_numpy(per_row).to(device=device, dtype=dtype).unsqueeze(1)


def _signed64(seed: int) -> int:
    """A seed < 2⁶⁴ as the int64 of the same bits (the kernel reads them back as two 32-bit halves)."""
    return seed - 2**64 if seed >= 2**63 else seed


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


def row_slices(sizes: Sequence[int]) -> list[slice]:
    """The rows of each member of a batch whose members have ``sizes`` rows each, in order."""
    return [slice(start, start + n) for start, n in zip(_starts(sizes), sizes, strict=True)]


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
