"""The synthetic weight-norm maps of seed 004 App. G, batched over independent noise sequences.

Units: t counts map iterations (= SGD steps); x = |w|² is a squared weight norm; L_t is the squared
norm of the unit gradient (the gradient at w/|w|), dimensionless like the loss.

Drive (per trial, per step; ``unit_grad_sq``):

    L_t = mean + sine_amplitude·sin(2πt/sine_period) + ε_t,   ε_t ~ U(−h, h) iid when noise is uniform,
    E[L_t] = mean + sine_amplitude·sin(2πt/sine_period).

SGD (momentum α = 0), seed 004 eq. 185 exactly as written, state x of shape (trials,):

    x_{t+1} = (1 − 2λη) x_t + L_t η² / x_t.

Its fixed point for constant L is x*² = Lη/(2λ). Eq. 185 is the true SGD norm recursion
|w_{t+1}|² = (1 − λη)²|w_t|² + η²L_t/|w_t|² with (1 − λη)² = 1 − 2λη + λ²η² truncated, so x*² is
larger than seed 003 Thm 1's |w|⁴ = ηL/(λ(2 − λη)) by the factor (2 − λη)/2 (1 − 5·10⁻⁵ at
λη = 10⁻⁴): the theory here is the fixed point *of the map*, not of SGD.

SGDM (α > 0), seed 004 eq. 72–76 (186), state X = (|w_t|², ⟨w_t, w_{t−1}⟩, |w_{t−1}|²) per trial,
started at X₀ = (x₀, x₀, x₀) (w₋₁ = w₀, zero initial velocity):

    X_{t+1} = A X_t + (L_t η² / X_t[0]) e,   e = (1, 0, 0),   β = 1 + α − λη,
    A = [[β², −2αβ, α²], [β, −α, 0], [1, 0, 0]].

This recursion is exact for heavy-ball SGDM on a scale-invariant weight (no truncation), and its
fixed point for constant L (eq. 77) is x*² = Lη/(λ(1 − α)(2 − λη/(1 + α))) — seed 003 Thm 2. With
α = 0 it would give Thm 1's ηL/(λ(2 − λη)), *not* the SGD map's Lη/(2λ) (see above).
Derivation: rows 2–3 of X = AX + (Lη²/a)e give c = a and b = βa − αb, so b = βa/(1 + α); row 1 gives
Lη²/a² = 1 − α² − β² + 2αβ²/(1 + α) = (1 − α)/(1 + α)·((1 + α)² − β²)
= (1 − α)/(1 + α)·λη·(2(1 + α) − λη) = λη(1 − α)(2 − λη/(1 + α)).
(tests/engine/test_sde_norm_map.py also checks it against the iterated map.)

Relaxation (linearising at the fixed point): SGD x − x* ∝ (1 − 4λη)^t, time 1/(4λη);
SGDM time ≈ (1 − α)/(4λη).

Recorded at t = 0, r, 2r, … < steps (the state before the update t → t+1) and at t = steps (the final
state), means over trials:
``norm_sq`` = E|w_t|² (= x_t, or X_t[0]) and ``unit_grad_sq_mean`` = E[L_t] (the deterministic drive
mean at t, not the realised L_t). Theory ``norm_sq_equilibrium`` = the fixed point x* of the map with
L = E[L_t] at each recorded t (a quasi-static prediction: it lags a varying E[L_t] by about a
relaxation time). Summary: means over the regular records t ≥ steps/2 of every series and of the
theory, plus ``rel_error_max_tail`` = max over those steps of |norm_sq/norm_sq_equilibrium − 1|.

Randomness: the uniform noise is drawn in float64 (then cast to the run's dtype, so float32 and
float64 runs see the same ε) with ``torch.rand`` in chunks of steps × trials (rows = steps). On the
CPU generator the stream does not depend on how it is chunked (tested); on CUDA (Philox) it may,
which is why the chunk size is a function of ``trials`` only (:data:`CHUNK`, :data:`CHUNK_ELEMENTS`):
the same spec, seed, device and dtype give the same run.
Checkpoints: a run resumes after any step. Its state holds the map's state, the chunk size, the start
of the current chunk and the RNG state from before that chunk's draw: a resumed run draws the chunk
again (the same numbers) and skips the rows already applied.
Floating point: the SGD update is evaluated as (1 − 2λη)·(x + L_tη²/((1 − 2λη)x)) — the same map,
one op fewer, differing from the literal formula by rounding only. The SGDM map is iterated in the
coordinates (|w_t|², ⟨w_t, w_t − w_{t−1}⟩, |w_t − w_{t−1}|²), a linear change of variables of X
that keeps float32 accurate (see :class:`_SGDMMatmul`); in X itself float32 rounding of A moves the
equilibrium by ~0.1% at λη = 10⁻⁴, α = 0.9. Even so a float32 run cannot settle closer to x* than
a few τ·2⁻²⁴ (an increment below about an ulp of x is lost): at seed 004's η = 0.1, λ = 0.001,
1.5–3·10⁻⁴ for SGD (τ = 2500) and ~1.2·10⁻⁵ for SGDM (τ ≈ 250), with a constant L_t.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from smdengine._declare import Model, Outputs, PlotDef
from smdengine._lazy import lazy_import
from smdengine._runtime import saved
from smdengine._science import record_steps, tail_slice
from smdengine._simulator import Context, Row, Simulator
from smdengine._spec_base import StrictModel
from smdengine.sde._common import Recording, params_of

if TYPE_CHECKING:
    import torch

    from smdengine._registry import SDESpec
else:
    torch = lazy_import("torch", globals())

CHUNK = 4096
"""Most steps of drive (deterministic part and noise) generated per tensor op."""

CHUNK_ELEMENTS = 1 << 14
"""...and at most about this many values (steps × trials) per chunk: below PyTorch's CPU grain size,
so the chunk's ops stay single-threaded (bench/README.md, "Engine timings")."""

MM_MAX_TRIALS = 64
"""SGDM on the CPU: up to this many trials the linear part is one (trials × 3)·(3 × 3) addmm
(fastest for few trials); above it, elementwise column updates (the CPU BLAS goes multi-threaded on
larger matmuls; bench/README.md, "Engine timings"). On CUDA always addmm. Both paths compute the same map."""


class UnitGradSq(StrictModel):
    """L_t, the squared unit-gradient norm fed to the map: mean + amplitude·sin(2πt/period) + U(−h, h)."""

    mean: float = Field(10.0, gt=0, le=1e6, description="The constant part of L_t.")
    noise: Literal["none", "uniform"] = Field("none", description="uniform: add U(−h, h) to L_t at every step.")
    noise_half_width: float = Field(3.0, ge=0, le=1e6, description="h of the uniform noise (used when noise is uniform).")
    sine_amplitude: float = Field(0.0, ge=0, le=1e6, description="Amplitude of the sine part of L_t.")
    sine_period: float = Field(2 * math.pi * 1e5, gt=0, le=1e12, description="In steps; seed 004 uses sin(t/10⁵).")

    @model_validator(mode="after")
    def _positive(self) -> UnitGradSq:
        low = self.mean - self.sine_amplitude - (self.noise_half_width if self.noise == "uniform" else 0.0)
        if low <= 0:
            raise ValueError(f"unit_grad_sq: expected mean > sine_amplitude + noise_half_width so that L_t > 0, "
                             f"got a lowest value of {low:.6g}")
        return self


class NormMapParams(Recording):
    """Seed 004 App. G: x ← (1−2λη)x + L_t η²/x (SGD, x = |w|²) or the 3-state SGDM map (eq. 72–76)."""

    model: Literal["norm_map"] = Field(..., description="The sde model: the |w|² map of seed 004 App. G.")
    lr: float = Field(0.1, gt=0, le=10, description="η.")
    weight_decay: float = Field(0.001, gt=0, le=100, description="λ.")
    momentum: float = Field(0.0, ge=0, lt=1, description="α; 0 selects the SGD map, > 0 the SGDM map.")
    init_norm_sq: float = Field(10.0, gt=0, le=1e12, description="x₀ = |w₀|² (and |w₋₁|² = ⟨w₀, w₋₁⟩ = x₀).")
    trials: int = Field(1, ge=1, le=1_000_000, description="Independent noise sequences, averaged.")
    unit_grad_sq: UnitGradSq = Field(default_factory=lambda: UnitGradSq.model_validate({}),
                                     description="L_t, the squared unit-gradient norm the map is fed.")
    steps: int = Field(100_000, ge=1, le=100_000_000, description="Number of map iterations.")

    @model_validator(mode="after")
    def _check(self) -> NormMapParams:
        if not 0 < 2 * self.weight_decay * self.lr < 1:
            raise ValueError(f"weight_decay: expected 2λη < 1 so the map contracts, got {2 * self.weight_decay * self.lr:.6g}")
        return self

    @property
    def work(self) -> int:
        return self.trials * self.steps * 3

    def regime_warnings(self) -> list[dict[str, Any]]:
        """None: the validator's 2λη < 1 is exactly where the SGD map's fixed point is stable (the map's
        derivative there is 1 − 4λη), the SGDM map's fixed point is stable there too (its Jacobian's
        spectral radius is < 1 for every α ∈ [0, 1) and λη < 1/2; it first reaches 1 at λη ≈ 2(1 + α)),
        and the theory is the map's own fixed point, not a continuous-time approximation."""
        return []


OUTPUTS = Outputs(
    metrics=("norm_sq", "unit_grad_sq_mean"),
    theory=("norm_sq_equilibrium",),
    summary=("rel_error_max_tail",),
    plots={"norm": PlotDef("Squared weight norm (seed 004 App. G map)", "|w|²", ("norm_sq",), ("norm_sq_equilibrium",))},
)


class NormMap(Simulator["SDESpec"]):
    """Iterates the SGD or SGDM map (the subclass is chosen at construction: :class:`_SGD`,
    :class:`_SGDMMatmul` or :class:`_SGDMColumns`); the drive is generated in chunks of steps.
    Summary: tail means + ``rel_error_max_tail``.

    Each subclass's ``step(n, record)`` applies the drive row ``n − chunk_start`` of the current
    chunk (drawing the next chunk when the current one is used up); :attr:`MAP` names the tensor
    attributes of the map's state by their checkpoint keys."""

    names = OUTPUTS.metrics
    p: NormMapParams
    scale: float                  # the factor of the drive rows (set by the subclass)
    column_rows: bool = False     # drive rows as (trials, 1) columns (the matmul stepper)
    MAP: dict[str, str]

    def __new__(cls, spec: SDESpec, ctx: Context) -> NormMap:
        if cls is NormMap:
            p = params_of(spec, NormMapParams)
            if p.momentum == 0:
                cls = _SGD
            elif ctx.device.type != "cpu" or p.trials <= MM_MAX_TRIALS:
                cls = _SGDMMatmul
            else:
                cls = _SGDMColumns
        return super().__new__(cls)

    def __init__(self, spec: SDESpec, ctx: Context):
        super().__init__(spec, ctx)
        p = self.p
        self.chunk = max(1, min(CHUNK, CHUNK_ELEMENTS // p.trials))
        self.chunk_start = self.chunk_length = 0     # no chunk drawn yet: step 0 draws the first
        self.chunk_rng: torch.Tensor | None = None  # the generator state before the current chunk's draw
        self.rows: Sequence[torch.Tensor] = ()
        self.means: Sequence[torch.Tensor] = ()

    def _draw(self, start: int) -> int:
        """Generate the chunk of drive rows from step ``start``; returns 0, its first row."""
        p, ctx, g = self.p, self.ctx, self.p.unit_grad_sq
        m = min(self.chunk, p.steps - start)
        if ctx.checkpointing:
            self.chunk_rng = ctx.gen.get_state()
        # E[L_t] in numpy (the same expression as predict's; torch.sin goes multi-threaded on a
        # chunk, see CHUNK_ELEMENTS)
        mean_l = torch.from_numpy(_drive_mean(g, np.arange(start, start + m, dtype=np.float64))).to(ctx.device)
        drive = mean_l.unsqueeze(1).expand(m, p.trials)
        if g.noise == "uniform":
            u = torch.rand(m, p.trials, generator=ctx.gen, dtype=torch.float64, device=ctx.device)
            drive = drive + g.noise_half_width * (2.0 * u - 1.0)
        rows = (drive * self.scale).to(ctx.dtype)
        self.rows = rows.unsqueeze(2).unbind(0) if self.column_rows else rows.unbind(0)
        self.means = mean_l.to(ctx.dtype).unbind(0)
        self.chunk_start, self.chunk_length = start, m
        return 0

    def state(self) -> dict[str, Any]:
        return {"chunk": self.chunk, "chunk_start": self.chunk_start, "rng": self.chunk_rng,
                **{k: saved(getattr(self, a)) for k, a in self.MAP.items()}}

    def load_state(self, state: dict[str, Any], step: int) -> None:
        """Draw the checkpoint's chunk again from the generator state before it (the same numbers); the
        steps after ``step`` use its remaining rows."""
        self.chunk = int(state["chunk"])
        for k, a in self.MAP.items():
            getattr(self, a).copy_(state[k])
        if state["rng"] is not None:
            self.ctx.gen.set_state(state["rng"])
        self._draw(int(state["chunk_start"]))

    def step(self, n: int, record: bool) -> Row | None:
        raise NotImplementedError   # the subclass's

    def final_row(self) -> Row:
        """|w|² after the last update, and E L_t at ``steps`` (the drive's mean, a function of t)."""
        norm_sq = self.norm_sq()
        mean_l = _drive_mean(self.p.unit_grad_sq, np.array([self.p.steps], dtype=np.float64))
        return {"norm_sq": norm_sq.mean(), "unit_grad_sq_mean": torch.tensor(float(mean_l[0]), dtype=norm_sq.dtype,
                                                                             device=norm_sq.device)}

    def norm_sq(self) -> torch.Tensor:
        """|w|² of every trial now, (trials,)."""
        raise NotImplementedError   # the subclass's

    @classmethod
    def predict(cls, spec: SDESpec) -> dict[str, Any]:
        """``norm_sq_equilibrium``: the map's fixed point for L = E[L_t] at each recorded step."""
        p = params_of(spec, NormMapParams)
        t = np.asarray(record_steps(p.steps, p.record_every), dtype=np.float64)
        mean_l = _drive_mean(p.unit_grad_sq, t)
        return {"norm_sq_equilibrium": equilibrium(mean_l, p.lr, p.weight_decay, p.momentum).tolist()}

    def summarize(self, series: dict[str, list], theory: dict[str, Any]) -> dict[str, Any]:
        summary = super().summarize(series, theory)
        # max over the tail of |norm_sq/norm_sq_equilibrium − 1| (NaN when a value is not finite); the last
        # record's when none lies in the tail, as the tail means (it was 0.0: a perfect score from no record)
        tail = tail_slice(series["step"], self.p.tail_start())
        errors = [abs(got / want - 1.0) for got, want in zip(series["norm_sq"][tail],
                                                             theory["norm_sq_equilibrium"][tail], strict=True)]
        summary["rel_error_max_tail"] = max(errors, default=0.0) if all(map(math.isfinite, errors)) else math.nan
        return summary


class _SGD(NormMap):
    """x ← (1 − 2λη)x + L_tη²/x, evaluated as c·(x + (L_tη²/c)/x) with c = 1 − 2λη: two in-place ops."""

    MAP = {"x": "x"}

    def __init__(self, spec: SDESpec, ctx: Context):
        super().__init__(spec, ctx)
        p = self.p
        self.shrink = 1.0 - 2.0 * p.weight_decay * p.lr
        self.scale = p.lr * p.lr / self.shrink  # the drive rows hold L_tη²/c
        self.x = torch.full((p.trials,), p.init_norm_sq, dtype=ctx.dtype, device=ctx.device)

    def step(self, n: int, record: bool) -> Row | None:
        i = n - self.chunk_start
        if i == self.chunk_length:
            i = self._draw(n)
        x = self.x
        row = {"norm_sq": x.mean(), "unit_grad_sq_mean": self.means[i]} if record else None
        x.addcdiv_(self.rows[i], x).mul_(self.shrink)
        return row

    def norm_sq(self) -> torch.Tensor:
        return self.x


def _sgdm_increment_matrix(p: NormMapParams) -> list[list[float]]:
    """B = M − diag(1, 0, 0), M the SGDM map in the coordinates (a, p, q) (see :class:`_SGDMMatmul`)."""
    le, alpha = p.lr * p.weight_decay, p.momentum
    gamma = 1.0 - le
    return [[-le * (2.0 - le), 2.0 * alpha * gamma, alpha * alpha],
            [-gamma * le, alpha * (2.0 * gamma - 1.0), alpha * alpha],
            [le * le, -2.0 * alpha * le, alpha * alpha]]


class _SGDMMatmul(NormMap):
    """Eq. 186 in the coordinates Y = (a, p, q) = (|w_t|², ⟨w_t, w_t − w_{t−1}⟩, |w_t − w_{t−1}|²)
    = (a, a − b, a − 2b + c) of X = (a, b, c). With γ = 1 − λη and F = L_tη²/a, X ← AX + F e becomes

        a' = a + [−λη(2 − λη) a + 2αγ p + α² q] + F
        p' = −γλη a + α(2γ − 1) p + α² q + F
        q' = λ²η² a − 2αλη p + α² q + F,

    the same map (a linear change of variables; tested against eq. 186 written out), but well
    conditioned: in X the fixed point hangs on 1 − α² − β²(1 − α)/(1 + α) = O(λη(1 − α)), a
    difference of O(1) matrix entries, which float32 rounding of A shifts by ~0.1% at λη = 10⁻⁴;
    here every coefficient is computed as the small number it is and only a accumulates increments.
    Start: Y₀ = (x₀, 0, 0). One step: F = drive/a, Y' = F + Y Bᵀ (one addmm), a' += a."""

    column_rows, MAP = True, {"y": "y"}

    def __init__(self, spec: SDESpec, ctx: Context):
        super().__init__(spec, ctx)
        p = self.p
        self.scale = p.lr * p.lr
        self.bt = torch.tensor(_sgdm_increment_matrix(p), dtype=torch.float64).T.contiguous().to(ctx.device, ctx.dtype)
        y = torch.zeros((p.trials, 3), dtype=ctx.dtype, device=ctx.device)
        y[:, 0] = p.init_norm_sq
        # (Y, its column a as a (trials, 1) view) of the current state and of the next one: swapped every step
        self.src, self.dst = [(b, b[:, :1]) for b in (y, torch.empty_like(y))]
        self.force = torch.empty((p.trials, 1), dtype=ctx.dtype, device=ctx.device)

    @property
    def y(self) -> torch.Tensor:
        return self.src[0]

    def norm_sq(self) -> torch.Tensor:
        return self.src[1].squeeze(1)

    def step(self, n: int, record: bool) -> Row | None:
        i = n - self.chunk_start
        if i == self.chunk_length:
            i = self._draw(n)
        (src, src_a), (dst, dst_a) = self.src, self.dst
        row = {"norm_sq": src_a.mean(), "unit_grad_sq_mean": self.means[i]} if record else None
        torch.div(self.rows[i], src_a, out=self.force)
        torch.addmm(self.force, src, self.bt, out=dst)
        dst_a.add_(src_a)
        self.src, self.dst = self.dst, self.src
        return row


class _SGDMColumns(NormMap):
    """The map of :class:`_SGDMMatmul` with the columns a, p, q as separate tensors, elementwise."""

    MAP = {"a": "a", "p": "pp", "q": "q"}

    def __init__(self, spec: SDESpec, ctx: Context):
        super().__init__(spec, ctx)
        p = self.p
        self.scale = p.lr * p.lr
        (b00, b01, b02), (b10, b11, _), (b20, b21, _) = _sgdm_increment_matrix(p)
        self.b = (b00, b01, b02, b10, b11, b20, b21)
        full: dict[str, Any] = dict(dtype=ctx.dtype, device=ctx.device)
        self.a = torch.full((p.trials,), p.init_norm_sq, **full)
        self.pp, self.q = torch.zeros((p.trials,), **full), torch.zeros((p.trials,), **full)
        self.force, self.common, self.da, self.spare = (torch.empty((p.trials,), **full) for _ in range(4))

    def step(self, n: int, record: bool) -> Row | None:
        i = n - self.chunk_start
        if i == self.chunk_length:
            i = self._draw(n)
        a, pp, q, force, common, da, spare = self.a, self.pp, self.q, self.force, self.common, self.da, self.spare
        b00, b01, alpha_sq, b10, b11, b20, b21 = self.b
        row = {"norm_sq": a.mean(), "unit_grad_sq_mean": self.means[i]} if record else None
        torch.div(self.rows[i], a, out=force)
        torch.add(force, q, alpha=alpha_sq, out=common)  # α²q + F, shared by all three rows
        torch.mul(a, b00, out=da).add_(pp, alpha=b01).add_(common)
        torch.add(common, a, alpha=b20, out=spare).add_(pp, alpha=b21)  # q'
        pp.mul_(b11).add_(a, alpha=b10).add_(common)  # p'
        a.add_(da)
        self.q, self.spare = spare, q
        return row

    def norm_sq(self) -> torch.Tensor:
        return self.a


def _drive_mean(g, t: np.ndarray) -> np.ndarray:
    """E[L_t] at the steps ``t`` (float64): mean + amplitude·sin(2πt/period)."""
    if g.sine_amplitude == 0.0:
        return np.full_like(t, g.mean)
    return g.mean + g.sine_amplitude * np.sin(t * (2.0 * math.pi / g.sine_period))


def equilibrium(mean_unit_grad_sq, lr: float, weight_decay: float, momentum: float):
    """Fixed point x* = |w|² of the map for a constant L (works elementwise on arrays):
    SGD map √(Lη/(2λ)); SGDM map √(Lη/(λ(1 − α)(2 − λη/(1 + α))))."""
    if momentum > 0:
        denom = weight_decay * (1.0 - momentum) * (2.0 - weight_decay * lr / (1.0 + momentum))
    else:
        denom = 2.0 * weight_decay
    return np.sqrt(np.asarray(mean_unit_grad_sq, dtype=np.float64) * lr / denom)


MODEL = Model("norm_map", NormMapParams, "smdengine.sde.norm_map:NormMap", OUTPUTS)
