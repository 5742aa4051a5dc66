"""Several NRQ updates in one Triton launch, the noise drawn inside the kernel from a counter-based
stream: the state of a trial (X, and v with momentum) stays in registers between two record steps,
and no ε tensor ever exists in memory.

The noise stream (:data:`NOISE_STREAM`, named in a run's provenance). ε of update n (0-based), trial
t (0-based, within its run) and coordinate j of a run with seed S and dimension p: with Q = ⌈p/4⌉,
write j = k·Q + i (0 ≤ i < Q, k ∈ {0, 1, 2, 3}); Philox-4×32 with 10 rounds, key (S mod 2³², ⌊S/2³²⌋)
and counter (i, t, n, 0), gives four 32-bit words w₀…w₃. In float32, the radii come from w₀ and w₂ as
u = w·2⁻³² + 2⁻³³ ∈ (0, 1] (w rounded to float32 first), r = √(−2 ln 2 · log₂ u); the angles from w₁ and
w₃ as θ = 2π·2⁻³²·w' ∈ [−π, π] (w' the word as a signed integer); then ε_{0Q+i} = r₀ cos θ₁,
ε_{1Q+i} = r₀ sin θ₁, ε_{2Q+i} = r₂ cos θ₃, ε_{3Q+i} = r₂ sin θ₃ (Box–Muller). On the GPU log₂, sin and
cos are its approximate instructions (MUFU: log₂ absolute error ≤ 2⁻²² on [½, 2], else 2 ulp; sin and cos
absolute error ~2⁻²¹ on [−π, π]) and √ is the approximate one too: each normal costs a few instructions
besides Philox, where an exact log alone cost ~20 (v1 of the stream). The interpreter computes the same
formulas with NumPy's float32 functions. ε depends only on (S, t, n, j): a fused member draws exactly
what it draws alone, in any batch and at any row; a checkpoint needs only the state and the step; a
float64 run casts the float32 normals. tests/engine/test_multistep.py checks the
stream against a NumPy Philox written from the Random123 paper.

Arithmetic. Each update is the one of :mod:`smdengine.nrq._fused_step` (the same formulas, stepper
module docstring): three row reductions, then the update. A row is held as four (ROWS, QB) tiles (the
four k above), and the tile shape and warp count depend on p alone, never on the number of rows, so a
row's sums are made in an order that depends only on p and the dtype (one compilation per p, dtype
and momentum). The step count, the first step and the record flag are runtime arguments: the same
compiled code advances 1 or 1000 steps, so where a launch starts or ends never changes a bit, which
is what makes a resumed checkpoint and a fused member exact.

At a record step (the first update of a launch with ``record``) it also writes, per row, what the
record row needs: (|X|², XᵀAX, X₁², |X/|X| − X'/|X'||², |X/|X| + X'/|X'||²) of the state X before the
update and X' after it.

``TRITON_INTERPRET=1`` runs it on CPU tensors (slowly): that is how it is checked without a GPU.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice
from triton.language.random import philox_impl

NOISE_STREAM = "philox4x32-10 box-muller v2: key seed, counter (coordinate mod ⌈p/4⌉, trial, update, 0)"
MAX_DIM = 8192   # a row in registers: 4·QB ≤ 8192 values over ≤ 8 warps
RECORD_COLUMNS = 5   # s, q, x1², |u − u'|², |u + u'|²


@triton.jit
def _normals(k_lo, k_hi, c0, c1, step, FAST: tl.constexpr):
    """Four blocks of N(0, 1) (float32) for the counters (c0, c1, step, 0) under key (k_lo, k_hi) (the
    key per row, (ROWS, 1): its schedule is computed once per row, not per element). ``FAST``: log₂, sin
    and cos by the GPU's approximate instructions (the interpreter has no libdevice: its own)."""
    zero = c0 * 0
    w0, w1, w2, w3 = philox_impl(c0, c1, zero + step, zero, k_lo, k_hi, 10)
    u0 = w0.to(tl.float32) * 2.3283064365386963e-10 + 1.1641532182693481e-10   # w·2⁻³² + 2⁻³³ ∈ (0, 1]
    u2 = w2.to(tl.float32) * 2.3283064365386963e-10 + 1.1641532182693481e-10
    t1 = w1.to(tl.int32, bitcast=True).to(tl.float32) * 1.4629180792671596e-09   # 2π·int32(w)·2⁻³² ∈ [−π, π]
    t3 = w3.to(tl.int32, bitcast=True).to(tl.float32) * 1.4629180792671596e-09
    if FAST:
        r0 = tl.sqrt(-1.3862943611198906 * libdevice.fast_log2f(u0))   # −2 ln u = −2 ln 2 · log₂ u
        r2 = tl.sqrt(-1.3862943611198906 * libdevice.fast_log2f(u2))
        return (r0 * libdevice.fast_cosf(t1), r0 * libdevice.fast_sinf(t1), r2 * libdevice.fast_cosf(t3),
                r2 * libdevice.fast_sinf(t3))
    else:
        r0 = tl.sqrt(-1.3862943611198906 * tl.log2(u0))
        r2 = tl.sqrt(-1.3862943611198906 * tl.log2(u2))
        return r0 * tl.cos(t1), r0 * tl.sin(t1), r2 * tl.cos(t3), r2 * tl.sin(t3)


@triton.jit
def _row_keys(seed_ptr, trial_ptr, rows, row_ok, QB: tl.constexpr):
    """Per row: the key halves (ROWS, 1) and the counters c0 = i (1, QB), c1 = trial (ROWS, 1), uint32."""
    seed = tl.load(seed_ptr + rows, mask=row_ok, other=0)
    k_lo = (seed & 0xFFFFFFFF).to(tl.uint32)[:, None]
    k_hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)[:, None]
    trial = tl.load(trial_ptr + rows, mask=row_ok, other=0).to(tl.uint32)[:, None]
    c0 = tl.arange(0, QB).to(tl.uint32)[None, :]
    return k_lo, k_hi, c0 + trial * 0, trial + c0 * 0   # the key (ROWS, 1); the counters (ROWS, QB)


@triton.jit(do_not_specialize=["n_rows", "step"])
def _draw(out_ptr, seed_ptr, trial_ptr, n_rows, step, p: tl.constexpr, Q: tl.constexpr, QB: tl.constexpr,
          ROWS: tl.constexpr, FAST: tl.constexpr):
    """ε of update ``step`` into out (n_rows, p): the stream alone (tests and references)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    i = tl.arange(0, QB)
    base = rows.to(tl.int64)[:, None] * p
    k_lo, k_hi, c0, c1 = _row_keys(seed_ptr, trial_ptr, rows, row_ok, QB)
    n0, n1, n2, n3 = _normals(k_lo, k_hi, c0, c1, step.to(tl.uint32), FAST)
    ok = row_ok[:, None] & (i < Q)[None, :]
    dtype = out_ptr.dtype.element_ty
    tl.store(out_ptr + base + i[None, :], n0.to(dtype), mask=ok & (i < p)[None, :])
    tl.store(out_ptr + base + (Q + i)[None, :], n1.to(dtype), mask=ok & (Q + i < p)[None, :])
    tl.store(out_ptr + base + (2 * Q + i)[None, :], n2.to(dtype), mask=ok & (2 * Q + i < p)[None, :])
    tl.store(out_ptr + base + (3 * Q + i)[None, :], n3.to(dtype), mask=ok & (3 * Q + i < p)[None, :])


@triton.jit(do_not_specialize=["n_rows", "step0", "n_steps", "record"])
def _advance(x_ptr, v_ptr, a_ptr, seed_ptr, trial_ptr, c1_ptr, c2_ptr, c3_ptr, c4_ptr, rec_ptr,
             n_rows, step0, n_steps, record, p: tl.constexpr, Q: tl.constexpr, QB: tl.constexpr,
             ROWS: tl.constexpr, MOMENTUM: tl.constexpr, FAST: tl.constexpr):
    """Updates step0 … step0 + n_steps − 1 of rows [pid·ROWS, pid·ROWS + ROWS) of X (n_rows, p),
    contiguous (and v). Per-row columns (n_rows,): SGD c1 = lr, c2 = keep (1 − lr·λ), c3 = sig (lr·σ);
    SGDM c1 = lr, c2 = λ, c3 = σ, c4 = α; seeds (int64) and trial indices (int32). With ``record`` ≠ 0,
    rec (n_rows, 5) gets the record columns of the first update (module docstring)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    i = tl.arange(0, QB)
    base = rows.to(tl.int64)[:, None] * p
    ok = row_ok[:, None] & (i < Q)[None, :]
    m0 = ok & (i < p)[None, :]
    m1 = ok & (Q + i < p)[None, :]
    m2 = ok & (2 * Q + i < p)[None, :]
    m3 = ok & (3 * Q + i < p)[None, :]
    o0 = base + i[None, :]
    o1 = base + (Q + i)[None, :]
    o2 = base + (2 * Q + i)[None, :]
    o3 = base + (3 * Q + i)[None, :]
    x0 = tl.load(x_ptr + o0, mask=m0, other=0.0)
    x1 = tl.load(x_ptr + o1, mask=m1, other=0.0)
    x2 = tl.load(x_ptr + o2, mask=m2, other=0.0)
    x3 = tl.load(x_ptr + o3, mask=m3, other=0.0)
    a0 = tl.load(a_ptr + i, mask=(i < Q) & (i < p), other=0.0)[None, :]
    a1 = tl.load(a_ptr + Q + i, mask=(i < Q) & (Q + i < p), other=0.0)[None, :]
    a2 = tl.load(a_ptr + 2 * Q + i, mask=(i < Q) & (2 * Q + i < p), other=0.0)[None, :]
    a3 = tl.load(a_ptr + 3 * Q + i, mask=(i < Q) & (3 * Q + i < p), other=0.0)[None, :]
    dtype = x0.dtype
    if MOMENTUM:
        v0 = tl.load(v_ptr + o0, mask=m0, other=0.0)
        v1 = tl.load(v_ptr + o1, mask=m1, other=0.0)
        v2 = tl.load(v_ptr + o2, mask=m2, other=0.0)
        v3 = tl.load(v_ptr + o3, mask=m3, other=0.0)
    else:
        v0 = x0
        v1 = x1
        v2 = x2
        v3 = x3
    k_lo, k_hi, c0, c1 = _row_keys(seed_ptr, trial_ptr, rows, row_ok, QB)
    lr = tl.load(c1_ptr + rows, mask=row_ok, other=0.0)
    cb = tl.load(c2_ptr + rows, mask=row_ok, other=0.0)
    cc = tl.load(c3_ptr + rows, mask=row_ok, other=0.0)
    alpha = tl.load(c4_ptr + rows, mask=row_ok, other=0.0)
    it = 0
    while it < n_steps:   # a while loop: the interpreter cannot iterate a runtime range (NumPy ≥ 2)
        n0, n1, n2, n3 = _normals(k_lo, k_hi, c0, c1, (step0 + it).to(tl.uint32), FAST)
        e0 = tl.where(m0, n0.to(dtype), 0.0)
        e1 = tl.where(m1, n1.to(dtype), 0.0)
        e2 = tl.where(m2, n2.to(dtype), 0.0)
        e3 = tl.where(m3, n3.to(dtype), 0.0)
        xx0 = x0 * x0
        xx1 = x1 * x1
        xx2 = x2 * x2
        xx3 = x3 * x3
        s = tl.where(row_ok, tl.sum((xx0 + xx1) + (xx2 + xx3), axis=1), 1.0)
        q = tl.sum((xx0 * a0 + xx1 * a1) + (xx2 * a2 + xx3 * a3), axis=1)
        xe = tl.sum((x0 * e0 + x1 * e1) + (x2 * e2 + x3 * e3), axis=1)
        inv_s = 1.0 / s
        if MOMENTUM:
            noise = tl.sqrt(inv_s) * cc
            radial = (q * inv_s + xe * noise) * inv_s
            c0_ = (cb - radial)[:, None]           # g + λX = X·(c0 + a/s) + σε/√s
            ca = inv_s[:, None]
            nz = noise[:, None]
            v0 = alpha[:, None] * v0 + x0 * (c0_ + ca * a0) + e0 * nz
            v1 = alpha[:, None] * v1 + x1 * (c0_ + ca * a1) + e1 * nz
            v2 = alpha[:, None] * v2 + x2 * (c0_ + ca * a2) + e2 * nz
            v3 = alpha[:, None] * v3 + x3 * (c0_ + ca * a3) + e3 * nz
            y0 = x0 - lr[:, None] * v0
            y1 = x1 - lr[:, None] * v1
            y2 = x2 - lr[:, None] * v2
            y3 = x3 - lr[:, None] * v3
        else:
            noise = tl.sqrt(inv_s) * cc
            radial = (q * inv_s * lr + xe * noise) * inv_s
            c0_ = (radial + cb)[:, None]           # X ← X·(c0 − a·lr/s) − sig·ε/√s
            ca = -(inv_s * lr)[:, None]
            nz = noise[:, None]
            y0 = x0 * (c0_ + ca * a0) - e0 * nz
            y1 = x1 * (c0_ + ca * a1) - e1 * nz
            y2 = x2 * (c0_ + ca * a2) - e2 * nz
            y3 = x3 * (c0_ + ca * a3) - e3 * nz
        if (record != 0) & (it == 0):
            s_after = tl.sum((y0 * y0 + y1 * y1) + (y2 * y2 + y3 * y3), axis=1)
            r = (1.0 / tl.sqrt(s))[:, None]
            r_after = (1.0 / tl.sqrt(tl.where(row_ok, s_after, 1.0)))[:, None]
            d0 = x0 * r - y0 * r_after
            d1 = x1 * r - y1 * r_after
            d2 = x2 * r - y2 * r_after
            d3 = x3 * r - y3 * r_after
            p0 = x0 * r + y0 * r_after
            p1 = x1 * r + y1 * r_after
            p2 = x2 * r + y2 * r_after
            p3 = x3 * r + y3 * r_after
            first = tl.sum(tl.where((i == 0)[None, :], xx0, 0.0), axis=1)
            out = rec_ptr + rows * 5
            tl.store(out, s, mask=row_ok)
            tl.store(out + 1, q, mask=row_ok)
            tl.store(out + 2, first, mask=row_ok)
            tl.store(out + 3, tl.sum((d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3), axis=1), mask=row_ok)
            tl.store(out + 4, tl.sum((p0 * p0 + p1 * p1) + (p2 * p2 + p3 * p3), axis=1), mask=row_ok)
        x0 = y0
        x1 = y1
        x2 = y2
        x3 = y3
        it += 1
    tl.store(x_ptr + o0, x0, mask=m0)
    tl.store(x_ptr + o1, x1, mask=m1)
    tl.store(x_ptr + o2, x2, mask=m2)
    tl.store(x_ptr + o3, x3, mask=m3)
    if MOMENTUM:
        tl.store(v_ptr + o0, v0, mask=m0)
        tl.store(v_ptr + o1, v1, mask=m1)
        tl.store(v_ptr + o2, v2, mask=m2)
        tl.store(v_ptr + o3, v3, mask=m3)


@triton.jit(do_not_specialize=["n_cols"])
def _segment_means(col_ptr, start_ptr, size_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """out[m, c] = mean of col[start_m : start_m + size_m, c] over a (n, n_cols) table, program (m, c):
    blocks of BLOCK rows in order, then one tree over the block: the order depends on size_m alone."""
    m = tl.program_id(0)
    c = tl.program_id(1)
    start = tl.load(start_ptr + m)
    size = tl.load(size_ptr + m)
    acc = tl.zeros((BLOCK,), dtype=col_ptr.dtype.element_ty)
    first = 0
    while first < size:
        k = first + tl.arange(0, BLOCK)
        acc += tl.load(col_ptr + (start + k).to(tl.int64) * n_cols + c, mask=k < size, other=0.0)
        first += BLOCK
    tl.store(out_ptr + m * n_cols + c, tl.sum(acc, axis=0) / size.to(acc.dtype))


def _fast() -> bool:
    """The GPU's approximate sin and cos, except under ``TRITON_INTERPRET=1`` (no libdevice there)."""
    return os.environ.get("TRITON_INTERPRET") != "1"


def layout(p: int) -> tuple[int, int, int, int]:
    """(Q, QB, ROWS, num_warps) for dimension p: a function of p alone (module docstring)."""
    q = -(-p // 4)
    qb = triton.next_power_of_2(q)
    rows = max(1, 512 // (4 * qb))
    warps = max(1, min(8, rows * 4 * qb // 256))
    return q, qb, rows, warps


def advance(x: torch.Tensor, v: torch.Tensor | None, a: torch.Tensor, seeds: torch.Tensor, trials: torch.Tensor,
            columns: tuple[torch.Tensor, ...], step0: int, n_steps: int, rec: torch.Tensor | None) -> None:
    """Updates step0 … step0 + n_steps − 1 of X (n, p) in place (and v), p ≤ :data:`MAX_DIM`; ``seeds``
    (n,) int64 and ``trials`` (n,) int32 key each row's noise; ``columns`` the (n, 1) rate columns of
    :func:`_advance`; ``rec`` (n, 5): the record columns of update step0 (None: not a record step)."""
    n, p = x.shape
    q, qb, rows, warps = layout(p)
    c1, c2, c3, *rest = columns
    c4 = rest[0] if rest else c3
    record = rec is not None
    _advance[(triton.cdiv(n, rows),)](x, x if v is None else v, a, seeds, trials, c1, c2, c3, c4,
                                      rec if record else x, n, step0, n_steps, int(record), p=p, Q=q, QB=qb,
                                      ROWS=rows, MOMENTUM=v is not None, FAST=_fast(), num_warps=warps)


def draw(seeds: torch.Tensor, trials: torch.Tensor, step: int, p: int, dtype: torch.dtype) -> torch.Tensor:
    """ε (n, p) of update ``step`` for rows keyed by ``seeds`` and ``trials``: the stream of :func:`advance`."""
    n = seeds.shape[0]
    q, qb, rows, warps = layout(p)
    out = torch.empty(n, p, dtype=dtype, device=seeds.device)
    _draw[(triton.cdiv(n, rows),)](out, seeds, trials, n, step, p=p, Q=q, QB=qb, ROWS=rows, FAST=_fast(),
                                   num_warps=warps)
    return out


def segment_means(table: torch.Tensor, starts: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """(members, c) means of each member's rows of ``table`` (n, c), each in an order fixed by its size."""
    out = table.new_empty(starts.shape[0], table.shape[1])
    _segment_means[(starts.shape[0], table.shape[1])](table.contiguous(), starts, sizes, out, table.shape[1],
                                                      BLOCK=256)
    return out
