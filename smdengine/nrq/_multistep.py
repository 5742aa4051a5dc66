"""Several NRQ updates in one Triton launch, the noise drawn inside the kernel from a counter-based
stream: the state of a trial (X, and v with momentum) stays in registers between two record steps,
and no ε tensor ever exists in memory.

The noise stream (:data:`NOISE_STREAM`, named in a run's provenance). ε of update n (0-based), trial
t (0-based, within its run) and coordinate j of a run with seed S and dimension p: with Q = ⌈p/8⌉,
write j = k·Q + i (0 ≤ i < Q, 0 ≤ k < 8) and k = 4h + l (h ∈ {0, 1}, l < 4); Philox-4×32 with 10
rounds, key (S mod 2³², ⌊S/2³²⌋) and counter (i, t, n, h), gives four 32-bit words w₀…w₃. In float32,
the radii come from w₀ and w₂ as u = w·2⁻³² + 2⁻³³ ∈ (0, 1] (w rounded to float32 first),
r = √(−2 ln 2 · log₂ u), the angles from w₁ and w₃ as θ = 2π·2⁻³²·w' ∈ [−π, π] (w' the word as a
signed integer), and blocks l = 0…3 are r₀ cos θ₁, r₀ sin θ₁, r₂ cos θ₃, r₂ sin θ₃ (Box–Muller). On the
GPU log₂, sin and cos are its approximate instructions (MUFU: log₂ absolute error ≤ 2⁻²² on [½, 2],
else 2 ulp; sin and cos absolute error ~2⁻²¹ on [−π, π]) and √ is the approximate one too: a normal
costs a few instructions besides Philox, where an exact log alone cost ~20 (v1 of the stream: a
float32 uniform from the signed word, exact log, four blocks of ⌈p/4⌉). The interpreter computes the
same formulas with NumPy's float32 functions. ε depends only on (S, t, n, j): a fused member draws
exactly what it draws alone, in any batch and at any row; a checkpoint needs only the state and the
step; a float64 run casts the float32 normals. tests/engine/test_multistep.py checks the stream
against a NumPy Philox written from the Random123 paper.

Arithmetic. Each update is the one of :mod:`smdengine.nrq._fused_step` (the same formulas, stepper
module docstring): three row reductions, then the update. A row is held as eight (ROWS, QB) tiles
(the eight k above, QB = Q rounded up to a power of two): a thread holds the eight values of a column
i, so a row's sums are mostly made in the thread, and the lanes that share a row, QB of them, need
log₂ QB shuffles per sum (four blocks of ⌈p/4⌉ needed one more; the padding is the same). The tile
shape and warp count depend on p alone, never on the number of rows, so a row's sums are made in an
order that depends only on p and the dtype (one compilation per p, dtype and momentum). The step count, the first step and the record flag are runtime arguments: the same
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

NOISE_STREAM = "philox4x32-10 box-muller v2: key seed, counter (coordinate mod ⌈p/8⌉, trial, update, block ÷ 4)"
BLOCKS = 8   # a row is BLOCKS tiles of QB coordinates (module docstring, Arithmetic)
MAX_DIM = 8192   # a row in registers: BLOCKS·QB ≤ 8192 values over ≤ 8 warps
RECORD_COLUMNS = 5   # s, q, x1², |u − u'|², |u + u'|²


@triton.jit
def _normals(k_lo, k_hi, c0, c1, step, half, FAST: tl.constexpr):
    """Four blocks of N(0, 1) (float32) for the counters (c0, c1, step, half) under key (k_lo, k_hi) (the
    key per row, (ROWS, 1): its schedule is computed once per row, not per element). ``FAST``: log₂, sin
    and cos by the GPU's approximate instructions (the interpreter has no libdevice: its own)."""
    zero = c0 * 0
    w0, w1, w2, w3 = philox_impl(c0, c1, zero + step, zero + half, k_lo, k_hi, 10)
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


@triton.jit
def _masks(row_ok, i, h: tl.constexpr, p: tl.constexpr, Q: tl.constexpr):
    """Masks (ROWS, QB) of blocks k = 4h … 4h + 3 of a row: coordinate kQ + i exists."""
    ok = row_ok[:, None] & (i < Q)[None, :]
    return (ok & ((4 * h + 0) * Q + i < p)[None, :], ok & ((4 * h + 1) * Q + i < p)[None, :],
            ok & ((4 * h + 2) * Q + i < p)[None, :], ok & ((4 * h + 3) * Q + i < p)[None, :])


@triton.jit
def _load4(ptr, base, i, m0, m1, m2, m3, h: tl.constexpr, Q: tl.constexpr):
    """Blocks k = 4h … 4h + 3 of rows (ROWS, p) at ``ptr`` (``base`` (ROWS, 1) the rows' offsets) or of
    a vector (p,) (``base`` 0), 0 where masked."""
    return (tl.load(ptr + base + ((4 * h + 0) * Q + i)[None, :], mask=m0, other=0.0),
            tl.load(ptr + base + ((4 * h + 1) * Q + i)[None, :], mask=m1, other=0.0),
            tl.load(ptr + base + ((4 * h + 2) * Q + i)[None, :], mask=m2, other=0.0),
            tl.load(ptr + base + ((4 * h + 3) * Q + i)[None, :], mask=m3, other=0.0))


@triton.jit
def _store4(ptr, base, i, t0, t1, t2, t3, m0, m1, m2, m3, h: tl.constexpr, Q: tl.constexpr):
    tl.store(ptr + base + ((4 * h + 0) * Q + i)[None, :], t0, mask=m0)
    tl.store(ptr + base + ((4 * h + 1) * Q + i)[None, :], t1, mask=m1)
    tl.store(ptr + base + ((4 * h + 2) * Q + i)[None, :], t2, mask=m2)
    tl.store(ptr + base + ((4 * h + 3) * Q + i)[None, :], t3, mask=m3)


@triton.jit
def _noise4(k_lo, k_hi, c0, c1, step, h: tl.constexpr, m0, m1, m2, m3, dtype: tl.constexpr,
            FAST: tl.constexpr):
    """ε of blocks k = 4h … 4h + 3, 0 in the padding (so that it never enters a row's sums)."""
    n0, n1, n2, n3 = _normals(k_lo, k_hi, c0, c1, step, h, FAST)
    return (tl.where(m0, n0.to(dtype), 0.0), tl.where(m1, n1.to(dtype), 0.0), tl.where(m2, n2.to(dtype), 0.0),
            tl.where(m3, n3.to(dtype), 0.0))


@triton.jit
def _sum4(t0, t1, t2, t3):
    return (t0 + t1) + (t2 + t3)


@triton.jit
def _sgd4(x0, x1, x2, x3, a0, a1, a2, a3, e0, e1, e2, e3, c0_, ca, nz):
    """X ← X·(c0 + ca·a) − ε·nz on four blocks."""
    return (x0 * (c0_ + ca * a0) - e0 * nz, x1 * (c0_ + ca * a1) - e1 * nz, x2 * (c0_ + ca * a2) - e2 * nz,
            x3 * (c0_ + ca * a3) - e3 * nz)


@triton.jit
def _sgdm4(x0, x1, x2, x3, v0, v1, v2, v3, a0, a1, a2, a3, e0, e1, e2, e3, alpha, c0_, ca, nz):
    """v ← αv + X·(c0 + ca·a) + ε·nz on four blocks."""
    return (alpha * v0 + x0 * (c0_ + ca * a0) + e0 * nz, alpha * v1 + x1 * (c0_ + ca * a1) + e1 * nz,
            alpha * v2 + x2 * (c0_ + ca * a2) + e2 * nz, alpha * v3 + x3 * (c0_ + ca * a3) + e3 * nz)


@triton.jit
def _unit_gaps4(x0, x1, x2, x3, y0, y1, y2, y3, r, r_after):
    """Σ (x·r − y·r')² and Σ (x·r + y·r')² over four blocks, before the row reduction."""
    d0 = x0 * r - y0 * r_after
    d1 = x1 * r - y1 * r_after
    d2 = x2 * r - y2 * r_after
    d3 = x3 * r - y3 * r_after
    p0 = x0 * r + y0 * r_after
    p1 = x1 * r + y1 * r_after
    p2 = x2 * r + y2 * r_after
    p3 = x3 * r + y3 * r_after
    return (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3), (p0 * p0 + p1 * p1) + (p2 * p2 + p3 * p3)


@triton.jit(do_not_specialize=["n_rows", "step"])
def _draw(out_ptr, seed_ptr, trial_ptr, n_rows, step, p: tl.constexpr, Q: tl.constexpr, QB: tl.constexpr,
          ROWS: tl.constexpr, FAST: tl.constexpr):
    """ε of update ``step`` into out (n_rows, p): the stream alone (tests and references)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    i = tl.arange(0, QB)
    base = rows.to(tl.int64)[:, None] * p
    k_lo, k_hi, c0, c1 = _row_keys(seed_ptr, trial_ptr, rows, row_ok, QB)
    dtype: tl.constexpr = out_ptr.dtype.element_ty
    s = step.to(tl.uint32)
    for h in tl.static_range(2):
        m0, m1, m2, m3 = _masks(row_ok, i, h, p, Q)
        e0, e1, e2, e3 = _noise4(k_lo, k_hi, c0, c1, s, h, m0, m1, m2, m3, dtype, FAST)
        _store4(out_ptr, base, i, e0, e1, e2, e3, m0, m1, m2, m3, h, Q)


@triton.jit(do_not_specialize=["n_rows", "step0", "n_steps", "record"])
def _advance(x_ptr, v_ptr, a_ptr, seed_ptr, trial_ptr, c1_ptr, c2_ptr, c3_ptr, c4_ptr, rec_ptr,
             n_rows, step0, n_steps, record, p: tl.constexpr, Q: tl.constexpr, QB: tl.constexpr,
             ROWS: tl.constexpr, MOMENTUM: tl.constexpr, FAST: tl.constexpr):
    """Updates step0 … step0 + n_steps − 1 of rows [pid·ROWS, pid·ROWS + ROWS) of X (n_rows, p),
    contiguous (and v). Per-row columns (n_rows,): SGD c1 = lr, c2 = keep (1 − lr·λ), c3 = sig (lr·σ);
    SGDM c1 = lr, c2 = λ, c3 = σ, c4 = α; seeds (int64) and trial indices (int32). With ``record`` ≠ 0,
    rec (n_rows, 5) gets the record columns of the first update (module docstring). The eight blocks of a
    row are two groups of four (the normals of one Philox call each): A (k < 4) and B (k ≥ 4)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    i = tl.arange(0, QB)
    base = rows.to(tl.int64)[:, None] * p
    am0, am1, am2, am3 = _masks(row_ok, i, 0, p, Q)
    bm0, bm1, bm2, bm3 = _masks(row_ok, i, 1, p, Q)
    ax0, ax1, ax2, ax3 = _load4(x_ptr, base, i, am0, am1, am2, am3, 0, Q)
    bx0, bx1, bx2, bx3 = _load4(x_ptr, base, i, bm0, bm1, bm2, bm3, 1, Q)
    aa0, aa1, aa2, aa3 = _load4(a_ptr, 0, i, am0, am1, am2, am3, 0, Q)
    ba0, ba1, ba2, ba3 = _load4(a_ptr, 0, i, bm0, bm1, bm2, bm3, 1, Q)
    dtype: tl.constexpr = x_ptr.dtype.element_ty
    if MOMENTUM:
        av0, av1, av2, av3 = _load4(v_ptr, base, i, am0, am1, am2, am3, 0, Q)
        bv0, bv1, bv2, bv3 = _load4(v_ptr, base, i, bm0, bm1, bm2, bm3, 1, Q)
    else:
        av0, av1, av2, av3 = ax0, ax1, ax2, ax3
        bv0, bv1, bv2, bv3 = bx0, bx1, bx2, bx3
    k_lo, k_hi, c0, c1 = _row_keys(seed_ptr, trial_ptr, rows, row_ok, QB)
    lr = tl.load(c1_ptr + rows, mask=row_ok, other=0.0)
    cb = tl.load(c2_ptr + rows, mask=row_ok, other=0.0)
    cc = tl.load(c3_ptr + rows, mask=row_ok, other=0.0)
    alpha = tl.load(c4_ptr + rows, mask=row_ok, other=0.0)[:, None]
    it = 0
    while it < n_steps:   # a while loop: the interpreter cannot iterate a runtime range (NumPy ≥ 2)
        step = (step0 + it).to(tl.uint32)
        ae0, ae1, ae2, ae3 = _noise4(k_lo, k_hi, c0, c1, step, 0, am0, am1, am2, am3, dtype, FAST)
        be0, be1, be2, be3 = _noise4(k_lo, k_hi, c0, c1, step, 1, bm0, bm1, bm2, bm3, dtype, FAST)
        axx0, axx1, axx2, axx3 = ax0 * ax0, ax1 * ax1, ax2 * ax2, ax3 * ax3
        bxx0, bxx1, bxx2, bxx3 = bx0 * bx0, bx1 * bx1, bx2 * bx2, bx3 * bx3
        s = tl.where(row_ok, tl.sum(_sum4(axx0, axx1, axx2, axx3) + _sum4(bxx0, bxx1, bxx2, bxx3), axis=1), 1.0)
        q = tl.sum(_sum4(axx0 * aa0, axx1 * aa1, axx2 * aa2, axx3 * aa3)
                   + _sum4(bxx0 * ba0, bxx1 * ba1, bxx2 * ba2, bxx3 * ba3), axis=1)
        xe = tl.sum(_sum4(ax0 * ae0, ax1 * ae1, ax2 * ae2, ax3 * ae3)
                    + _sum4(bx0 * be0, bx1 * be1, bx2 * be2, bx3 * be3), axis=1)
        inv_s = 1.0 / s
        noise = tl.sqrt(inv_s) * cc
        if MOMENTUM:
            radial = (q * inv_s + xe * noise) * inv_s
            c0_ = (cb - radial)[:, None]           # g + λX = X·(c0 + a/s) + σε/√s
            ca = inv_s[:, None]
            nz = noise[:, None]
            av0, av1, av2, av3 = _sgdm4(ax0, ax1, ax2, ax3, av0, av1, av2, av3, aa0, aa1, aa2, aa3,
                                        ae0, ae1, ae2, ae3, alpha, c0_, ca, nz)
            bv0, bv1, bv2, bv3 = _sgdm4(bx0, bx1, bx2, bx3, bv0, bv1, bv2, bv3, ba0, ba1, ba2, ba3,
                                        be0, be1, be2, be3, alpha, c0_, ca, nz)
            step_lr = lr[:, None]
            ay0, ay1, ay2, ay3 = ax0 - step_lr * av0, ax1 - step_lr * av1, ax2 - step_lr * av2, ax3 - step_lr * av3
            by0, by1, by2, by3 = bx0 - step_lr * bv0, bx1 - step_lr * bv1, bx2 - step_lr * bv2, bx3 - step_lr * bv3
        else:
            radial = (q * inv_s * lr + xe * noise) * inv_s
            c0_ = (radial + cb)[:, None]           # X ← X·(c0 − a·lr/s) − sig·ε/√s
            ca = -(inv_s * lr)[:, None]
            nz = noise[:, None]
            ay0, ay1, ay2, ay3 = _sgd4(ax0, ax1, ax2, ax3, aa0, aa1, aa2, aa3, ae0, ae1, ae2, ae3, c0_, ca, nz)
            by0, by1, by2, by3 = _sgd4(bx0, bx1, bx2, bx3, ba0, ba1, ba2, ba3, be0, be1, be2, be3, c0_, ca, nz)
        if (record != 0) & (it == 0):
            s_after = tl.sum(_sum4(ay0 * ay0, ay1 * ay1, ay2 * ay2, ay3 * ay3)
                             + _sum4(by0 * by0, by1 * by1, by2 * by2, by3 * by3), axis=1)
            r = (1.0 / tl.sqrt(s))[:, None]
            r_after = (1.0 / tl.sqrt(tl.where(row_ok, s_after, 1.0)))[:, None]
            a_minus, a_plus = _unit_gaps4(ax0, ax1, ax2, ax3, ay0, ay1, ay2, ay3, r, r_after)
            b_minus, b_plus = _unit_gaps4(bx0, bx1, bx2, bx3, by0, by1, by2, by3, r, r_after)
            first = tl.sum(tl.where((i == 0)[None, :], axx0, 0.0), axis=1)
            out = rec_ptr + rows * 5
            tl.store(out, s, mask=row_ok)
            tl.store(out + 1, q, mask=row_ok)
            tl.store(out + 2, first, mask=row_ok)
            tl.store(out + 3, tl.sum(a_minus + b_minus, axis=1), mask=row_ok)
            tl.store(out + 4, tl.sum(a_plus + b_plus, axis=1), mask=row_ok)
        ax0, ax1, ax2, ax3 = ay0, ay1, ay2, ay3
        bx0, bx1, bx2, bx3 = by0, by1, by2, by3
        it += 1
    _store4(x_ptr, base, i, ax0, ax1, ax2, ax3, am0, am1, am2, am3, 0, Q)
    _store4(x_ptr, base, i, bx0, bx1, bx2, bx3, bm0, bm1, bm2, bm3, 1, Q)
    if MOMENTUM:
        _store4(v_ptr, base, i, av0, av1, av2, av3, am0, am1, am2, am3, 0, Q)
        _store4(v_ptr, base, i, bv0, bv1, bv2, bv3, bm0, bm1, bm2, bm3, 1, Q)


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
    q = -(-p // BLOCKS)
    qb = triton.next_power_of_2(q)
    rows = max(1, 512 // (BLOCKS * qb))
    warps = max(1, min(8, rows * BLOCKS * qb // 256))
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
