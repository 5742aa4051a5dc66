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

Recorded at t = 0, r, 2r, … < steps (the state before the update t → t+1), means over trials:
``norm_sq`` = E|w_t|² (= x_t, or X_t[0]) and ``unit_grad_sq_mean`` = E[L_t] (the deterministic drive
mean at t, not the realised L_t). Theory ``norm_sq_equilibrium`` = the fixed point x* of the map with
L = E[L_t] at each recorded t (a quasi-static prediction: it lags a varying E[L_t] by about a
relaxation time). Summary: means over the recorded steps t ≥ steps/2 of every series and of the
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
from typing import Any

import numpy as np
import torch

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
from smdengine.sde.spec import NormMapParams, SDESpec

METRICS = ("norm_sq", "unit_grad_sq_mean")
THEORY = ("norm_sq_equilibrium",)
DISTRIBUTIONS = ()

CHUNK = 4096
"""Most steps of drive (deterministic part and noise) generated per tensor op."""

CHUNK_ELEMENTS = 1 << 14
"""...and at most about this many values (steps × trials) per chunk: below PyTorch's CPU grain size,
so the chunk's ops stay single-threaded (multi-threaded they cost ~100× more on a loaded machine)."""

MM_MAX_TRIALS = 64
"""SGDM on the CPU: up to this many trials the linear part is one (trials × 3)·(3 × 3) addmm
(fastest for few trials); above it, elementwise column updates (the CPU BLAS goes multi-threaded on
larger matmuls and then costs ~100× more per step on a loaded machine). On CUDA always addmm. Both
paths compute the same map."""


def simulate(spec: SDESpec, *, on_progress: ProgressCallback | None = None,
             should_stop: StopCheck | None = None, progress_interval: float = 0.5,
             checkpoint: CheckpointHooks | None = None) -> RunResult:
    """Iterate the SGD or SGDM norm map; series ``step`` + :data:`METRICS`, theory from
    :func:`predict`, summary = tail means + ``rel_error_max_tail``."""
    p: NormMapParams = spec.params
    device, dtype = resolve_device(spec.device), resolve_dtype(p.dtype)
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    saving = checkpoint is not None and checkpoint.save is not None
    recorder = Recorder(METRICS, p.steps, on_progress, should_stop, progress_interval, checkpoint)
    if p.momentum == 0:
        stepper = _SGD(p, device, dtype)
    elif device.type != "cpu" or p.trials <= MM_MAX_TRIALS:
        stepper = _SGDMMatmul(p, device, dtype)
    else:
        stepper = _SGDMColumns(p, device, dtype)

    g = p.unit_grad_sq
    chunk = max(1, min(CHUNK, CHUNK_ELEMENTS // p.trials))
    first = skip = 0   # the first chunk's start, and the rows of it already applied before a resume
    if recorder.resumed is not None:
        state = recorder.resumed.state
        chunk, first = int(state["chunk"]), int(state["chunk_start"])
        skip = recorder.resumed.step - first
        stepper.load_state(state)
        gen.set_state(state["rng"])
    start = run_start = first
    chunk_rng = None

    def snapshot(step: int) -> dict[str, Any]:
        return {"chunk": chunk, "chunk_start": start, "rng": chunk_rng, **stepper.state(step - run_start)}

    recorder.snapshot = snapshot
    for start in range(first, p.steps, chunk):
        m = min(chunk, p.steps - start)
        if saving:
            chunk_rng = gen.get_state()
        # E[L_t] in numpy (the same expression as predict's; torch.sin goes multi-threaded on a
        # chunk and then costs ~100× more on a loaded machine)
        mean_l = torch.from_numpy(_drive_mean(g, np.arange(start, start + m, dtype=np.float64))).to(device)
        drive = mean_l.unsqueeze(1).expand(m, p.trials)
        if g.noise == "uniform":
            u = torch.rand(m, p.trials, generator=gen, dtype=torch.float64, device=device)
            drive = drive + g.noise_half_width * (2.0 * u - 1.0)
        rows, means = (drive * stepper.scale).to(dtype), mean_l.to(dtype)
        if skip:
            rows, means = rows[skip:], means[skip:]
        run_start = start + skip
        stepper.run(run_start, rows, means.unbind(0), p.record_every, recorder)
        skip = 0
    recorder.flush(p.steps)

    prediction = predict(spec)
    tail = p.steps / 2.0
    summary = tail_means(recorder.series, prediction, tail)
    summary["rel_error_max_tail"] = _rel_error_max(recorder.series, prediction["norm_sq_equilibrium"], tail)
    return RunResult(series=recorder.series, theory=prediction, summary=summary)


# The steppers' run(start, drive, ...) applies the drive rows to steps start, start + 1, …; their
# state(done) is the map's state (CPU copies) after ``done`` rows of the run in progress, and
# load_state sets it before the first run.


class _SGD:
    """x ← (1 − 2λη)x + L_tη²/x, evaluated as c·(x + (L_tη²/c)/x) with c = 1 − 2λη: two in-place ops."""

    def __init__(self, p: NormMapParams, device: torch.device, dtype: torch.dtype):
        self.shrink = 1.0 - 2.0 * p.weight_decay * p.lr
        self.scale = p.lr * p.lr / self.shrink  # the drive rows hold L_tη²/c
        self.x = torch.full((p.trials,), p.init_norm_sq, dtype=dtype, device=device)

    def state(self, done: int) -> dict[str, torch.Tensor]:
        return {"x": saved(self.x)}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.x.copy_(state["x"])

    def run(self, start: int, drive: torch.Tensor, means, every: int, recorder: Recorder) -> None:
        x, shrink = self.x, self.shrink
        for i, row in enumerate(drive.unbind(0)):
            n = start + i
            if n % every == 0:
                recorder.record(n, {"norm_sq": x.mean(), "unit_grad_sq_mean": means[i]})
            x.addcdiv_(row, x).mul_(shrink)
            recorder.tick(n + 1)


def _sgdm_increment_matrix(p: NormMapParams) -> list[list[float]]:
    """B = M − diag(1, 0, 0), M the SGDM map in the coordinates (a, p, q) (see :class:`_SGDMMatmul`)."""
    le, alpha = p.lr * p.weight_decay, p.momentum
    gamma = 1.0 - le
    return [[-le * (2.0 - le), 2.0 * alpha * gamma, alpha * alpha],
            [-gamma * le, alpha * (2.0 * gamma - 1.0), alpha * alpha],
            [le * le, -2.0 * alpha * le, alpha * alpha]]


class _SGDMMatmul:
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

    def __init__(self, p: NormMapParams, device: torch.device, dtype: torch.dtype):
        self.scale = p.lr * p.lr
        self.bt = torch.tensor(_sgdm_increment_matrix(p), dtype=torch.float64).T.contiguous().to(device, dtype)
        y = torch.zeros((p.trials, 3), dtype=dtype, device=device)
        y[:, 0] = p.init_norm_sq
        self.buffers = [y, torch.empty_like(y)]
        self.force = torch.empty((p.trials, 1), dtype=dtype, device=device)

    def state(self, done: int) -> dict[str, torch.Tensor]:
        # run swaps the two buffers after every row and stores their order only at its end
        return {"y": saved(self.buffers[done % 2])}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.buffers[0].copy_(state["y"])

    def run(self, start: int, drive: torch.Tensor, means, every: int, recorder: Recorder) -> None:
        (src, src_a), (dst, dst_a) = [(y, y[:, :1]) for y in self.buffers]  # a as a (trials, 1) view
        bt, force = self.bt, self.force
        rows = drive.unsqueeze(2).unbind(0)  # (trials, 1) each
        for i, row in enumerate(rows):
            n = start + i
            if n % every == 0:
                recorder.record(n, {"norm_sq": src_a.mean(), "unit_grad_sq_mean": means[i]})
            torch.div(row, src_a, out=force)
            torch.addmm(force, src, bt, out=dst)
            dst_a.add_(src_a)
            src, src_a, dst, dst_a = dst, dst_a, src, src_a
            recorder.tick(n + 1)
        self.buffers = [src, dst]


class _SGDMColumns:
    """The map of :class:`_SGDMMatmul` with the columns a, p, q as separate tensors, elementwise."""

    def __init__(self, p: NormMapParams, device: torch.device, dtype: torch.dtype):
        self.scale = p.lr * p.lr
        self.b = _sgdm_increment_matrix(p)
        full = dict(dtype=dtype, device=device)
        self.cols = [torch.full((p.trials,), p.init_norm_sq, **full)] + [torch.zeros((p.trials,), **full)
                                                                        for _ in range(2)]
        self.work = [torch.empty((p.trials,), **full) for _ in range(4)]

    def state(self, done: int) -> dict[str, torch.Tensor]:
        # run updates a and p in place, swaps q with the spare work column after every row and
        # stores the columns only at its end
        q = self.cols[2] if done % 2 == 0 else self.work[3]
        return {"a": saved(self.cols[0]), "p": saved(self.cols[1]), "q": saved(q)}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        for column, key in zip(self.cols, "apq", strict=False):
            column.copy_(state[key])

    def run(self, start: int, drive: torch.Tensor, means, every: int, recorder: Recorder) -> None:
        a, pp, q = self.cols
        force, common, da, spare = self.work
        (b00, b01, b02), (b10, b11, _), (b20, b21, _) = self.b
        alpha_sq = b02
        for i, row in enumerate(drive.unbind(0)):
            n = start + i
            if n % every == 0:
                recorder.record(n, {"norm_sq": a.mean(), "unit_grad_sq_mean": means[i]})
            torch.div(row, a, out=force)
            torch.add(force, q, alpha=alpha_sq, out=common)  # α²q + F, shared by all three rows
            torch.mul(a, b00, out=da).add_(pp, alpha=b01).add_(common)
            torch.add(common, a, alpha=b20, out=spare).add_(pp, alpha=b21)  # q'
            pp.mul_(b11).add_(a, alpha=b10).add_(common)  # p'
            a.add_(da)
            q, spare = spare, q
            recorder.tick(n + 1)
        self.cols = [a, pp, q]
        self.work = [force, common, da, spare]


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


def predict(spec: SDESpec) -> dict[str, Any]:
    """``norm_sq_equilibrium``: the map's fixed point for L = E[L_t] at each recorded step."""
    p: NormMapParams = spec.params
    t = np.arange(0, p.steps, p.record_every, dtype=np.float64)
    mean_l = _drive_mean(p.unit_grad_sq, t)
    return {"norm_sq_equilibrium": equilibrium(mean_l, p.lr, p.weight_decay, p.momentum).tolist()}


def _rel_error_max(series: dict[str, list], expected: list[float], start: float) -> float:
    """max over recorded steps ≥ start of |norm_sq/expected − 1| (NaN when a value is not finite)."""
    worst = 0.0
    for n, got, want in zip(series["step"], series["norm_sq"], expected, strict=False):
        if n >= start:
            err = abs(got / want - 1.0)
            if not math.isfinite(err):
                return math.nan
            worst = max(worst, err)
    return worst
