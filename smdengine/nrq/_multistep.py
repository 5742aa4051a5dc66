"""Several NRQ updates in one Triton launch, the noise drawn inside the kernel from a counter-based
stream: the state of a trial (X, and v with momentum) stays in registers between two record steps,
and no ε tensor ever exists in memory.

The noise stream (:data:`NOISE_STREAM`, named in a run's provenance). ε of update n (0-based), trial
t (0-based, within its run) and coordinate j of a run with seed S and dimension p: with Q = ⌈p/8⌉
rounded up to a power of two, write j = k·Q + i (0 ≤ i < Q; k < ⌈p/Q⌉ ≤ 8) and k = 4h + l (h ∈ {0, 1},
l < 4); Philox-4×32 with 10 rounds, key (S mod 2³², ⌊S/2³²⌋) and counter (i, t, n, h), gives four
32-bit words w₀…w₃. In float32, the radii come from w₀ and w₂ as u = w·2⁻³² + 2⁻³³ ∈ (0, 1] (w rounded
to float32 first), r = √(−2 ln 2 · log₂ u), the angles from w₁ and w₃ as θ = 2π·2⁻³²·w' ∈ [−π, π] (w'
the word as a signed integer), and blocks l = 0…3 are r₀ cos θ₁, r₀ sin θ₁, r₂ cos θ₃, r₂ sin θ₃
(Box–Muller). On the GPU log₂, sin and cos are its approximate instructions (MUFU: log₂ absolute error
≤ 2⁻²² on [½, 2], else 2 ulp; sin and cos absolute error ~2⁻²¹ on [−π, π]) and √ is the approximate one
too. The interpreter computes the same formulas with NumPy's float32 functions. ε depends only on
(S, t, n, j): a fused member draws exactly what it draws alone, in any batch and at any row; a
checkpoint needs only the state and the step; a float64 run casts the float32 normals.
tests/engine/test_multistep.py checks the stream against a NumPy Philox written from the Random123
paper. (v1 of the stream: four blocks of ⌈p/4⌉, a float32 uniform from the signed word, the exact log;
it cost 1.4–2.1× the instructions per coordinate.)

Arithmetic. Each update is the one of :mod:`smdengine.nrq._fused_step` (the same formulas, stepper
module docstring): three row reductions, then the update. A row is held as its K = ⌈p/Q⌉ blocks, each a
(ROWS, Q) tile (the k above; only the last one has padding), so a thread holds up to eight values of a
row — one per block, the same i — and sums them before the Q lanes that share the row do, in log₂ Q
shuffles per sum (for Q ≤ 32; a larger Q spans warps, whose partial sums meet in shared memory, and
from p > 2048 a thread holds several columns); blocks no coordinate reaches are never computed, nor
normals no block uses. The tile
shape and warp count depend on p alone, never on the number of rows, so a row's sums are made in an
order that depends only on p and the dtype (one compilation per p, dtype and momentum). The step count,
the first step and the record flag are runtime arguments: the same compiled code advances 1 or 1000
steps, so where a launch starts or ends never changes a bit, which is what makes a resumed checkpoint
and a fused member exact.

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

NOISE_STREAM = "philox4x32-10 box-muller v2: key seed, counter (coordinate mod Q, trial, update, block ÷ 4), Q = 2^⌈log₂⌈p/8⌉⌉"
BLOCKS = 8   # a row is at most BLOCKS tiles of Q coordinates (module docstring)
MAX_DIM = 8192   # a row in registers: ≤ 8192 values over ≤ 8 warps
RECORD_COLUMNS = 5   # s, q, x1², |u − u'|², |u + u'|²


@triton.jit
def _radius(w, FAST: tl.constexpr):
    """r = √(−2 ln u), u = w·2⁻³² + 2⁻³³ ∈ (0, 1] (float32; −2 ln u = −2 ln 2 · log₂ u)."""
    u = w.to(tl.float32) * 2.3283064365386963e-10 + 1.1641532182693481e-10
    if FAST:
        return tl.sqrt(-1.3862943611198906 * libdevice.fast_log2f(u))
    else:
        return tl.sqrt(-1.3862943611198906 * tl.log2(u))


@triton.jit
def _angle(w):
    """θ = 2π·2⁻³²·w' ∈ [−π, π], w' the word as a signed integer (float32)."""
    return w.to(tl.int32, bitcast=True).to(tl.float32) * 1.4629180792671596e-09


@triton.jit
def _polar(r, t, SIN: tl.constexpr, FAST: tl.constexpr):
    """r·sin θ (``SIN``) or r·cos θ."""
    if FAST:
        return r * (libdevice.fast_sinf(t) if SIN else libdevice.fast_cosf(t))
    else:
        return r * (tl.sin(t) if SIN else tl.cos(t))


@triton.jit
def _normals(k_lo, k_hi, c0, c1, step, h: tl.constexpr, L: tl.constexpr, FAST: tl.constexpr):
    """Blocks 4h … 4h + L − 1 (L ≤ 4) of N(0, 1) (float32) from the counters (c0, c1, step, h) under key
    (k_lo, k_hi) (the key per row, (ROWS, 1): its schedule is computed once per row, not per element);
    a block no coordinate reaches is not computed. ``FAST``: log₂, sin and cos by the GPU's approximate
    instructions (the interpreter has no libdevice: its own)."""
    zero = c0 * 0
    w0, w1, w2, w3 = philox_impl(c0, c1, zero + step, zero + h, k_lo, k_hi, 10)
    r0 = _radius(w0, FAST)
    t1 = _angle(w1)
    out = (_polar(r0, t1, False, FAST),)
    if L > 1:
        out = out + (_polar(r0, t1, True, FAST),)
    if L > 2:
        r2 = _radius(w2, FAST)
        t3 = _angle(w3)
        out = out + (_polar(r2, t3, False, FAST),)
        if L > 3:
            out = out + (_polar(r2, t3, True, FAST),)
    return out


@triton.jit
def _noise(k_lo, k_hi, c0, c1, step, i, p: tl.constexpr, Q: tl.constexpr, K: tl.constexpr, dtype: tl.constexpr,
           FAST: tl.constexpr):
    """ε of update ``step``: a tuple of the K blocks (ROWS, Q), 0 beyond p (so that it never enters a row's sums)."""
    out = ()
    for h in tl.static_range((K + 3) // 4):
        group = _normals(k_lo, k_hi, c0, c1, step, h, K - 4 * h, FAST)
        for l in tl.static_range(4):
            if 4 * h + l < K:
                e = group[l].to(dtype)
                if (4 * h + l + 1) * Q > p:   # the last block, not full: mask its padding
                    e = tl.where(((4 * h + l) * Q + i < p)[None, :], e, 0.0)
                out = out + (e,)
    return out


@triton.jit
def _row_keys(seed_ptr, trial_ptr, rows, row_ok, Q: tl.constexpr):
    """Per row: the key halves (ROWS, 1) and the counters c0 = i (1, Q), c1 = trial (ROWS, 1), uint32."""
    seed = tl.load(seed_ptr + rows, mask=row_ok, other=0)
    k_lo = (seed & 0xFFFFFFFF).to(tl.uint32)[:, None]
    k_hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)[:, None]
    trial = tl.load(trial_ptr + rows, mask=row_ok, other=0).to(tl.uint32)[:, None]
    c0 = tl.arange(0, Q).to(tl.uint32)[None, :]
    return k_lo, k_hi, c0 + trial * 0, trial + c0 * 0   # the key (ROWS, 1); the counters (ROWS, Q)


@triton.jit
def _load(ptr, base, i, row_ok, p: tl.constexpr, Q: tl.constexpr, K: tl.constexpr):
    """The K blocks (ROWS, Q) of rows (n, p) at ``ptr`` (``base`` (ROWS, 1) the rows' offsets), 0 beyond p."""
    out = ()
    for k in tl.static_range(K):
        out = out + (tl.load(ptr + base + (k * Q + i)[None, :], mask=row_ok[:, None] & (k * Q + i < p)[None, :],
                             other=0.0),)
    return out


@triton.jit
def _load_vector(ptr, i, p: tl.constexpr, Q: tl.constexpr, K: tl.constexpr):
    """The K blocks (1, Q) of a vector (p,) at ``ptr``, 0 beyond p."""
    out = ()
    for k in tl.static_range(K):
        out = out + (tl.load(ptr + (k * Q + i)[None, :], mask=(k * Q + i < p)[None, :], other=0.0),)
    return out


@triton.jit
def _store(ptr, base, i, row_ok, blocks, p: tl.constexpr, Q: tl.constexpr, K: tl.constexpr):
    for k in tl.static_range(K):
        tl.store(ptr + base + (k * Q + i)[None, :], blocks[k], mask=row_ok[:, None] & (k * Q + i < p)[None, :])


@triton.jit
def _row_sum_of_products(us, ws, K: tl.constexpr):
    """Σ_j u_j·w_j per row, (ROWS,): the K blocks accumulated in the thread in order, then across the lanes."""
    acc = us[0] * ws[0]
    for k in tl.static_range(1, K):
        acc += us[k] * ws[k]
    return tl.sum(acc, axis=1)


@triton.jit(do_not_specialize=["n_rows", "step"])
def _draw(out_ptr, seed_ptr, trial_ptr, n_rows, step, p: tl.constexpr, Q: tl.constexpr, K: tl.constexpr,
          ROWS: tl.constexpr, FAST: tl.constexpr):
    """ε of update ``step`` into out (n_rows, p): the stream alone (tests and references)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    i = tl.arange(0, Q)
    k_lo, k_hi, c0, c1 = _row_keys(seed_ptr, trial_ptr, rows, row_ok, Q)
    eps = _noise(k_lo, k_hi, c0, c1, step.to(tl.uint32), i, p, Q, K, out_ptr.dtype.element_ty, FAST)
    _store(out_ptr, rows.to(tl.int64)[:, None] * p, i, row_ok, eps, p, Q, K)


@triton.jit(do_not_specialize=["n_rows", "step0", "n_steps", "record"])
def _advance(x_ptr, v_ptr, a_ptr, seed_ptr, trial_ptr, c1_ptr, c2_ptr, c3_ptr, c4_ptr, rec_ptr,
             n_rows, step0, n_steps, record, p: tl.constexpr, Q: tl.constexpr, K: tl.constexpr,
             ROWS: tl.constexpr, MOMENTUM: tl.constexpr, FAST: tl.constexpr):
    """Updates step0 … step0 + n_steps − 1 of rows [pid·ROWS, pid·ROWS + ROWS) of X (n_rows, p),
    contiguous (and v). Per-row columns (n_rows,): SGD c1 = lr, c2 = keep (1 − lr·λ), c3 = sig (lr·σ);
    SGDM c1 = lr, c2 = λ, c3 = σ, c4 = α; seeds (int64) and trial indices (int32). With ``record`` ≠ 0,
    rec (n_rows, 5) gets the record columns of the first update (module docstring). X, v, ε and the
    spectrum are tuples of the K blocks (ROWS, Q) of a row."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    i = tl.arange(0, Q)
    base = rows.to(tl.int64)[:, None] * p
    xs = _load(x_ptr, base, i, row_ok, p, Q, K)
    spectrum = _load_vector(a_ptr, i, p, Q, K)
    dtype: tl.constexpr = x_ptr.dtype.element_ty
    vs = _load(v_ptr, base, i, row_ok, p, Q, K) if MOMENTUM else xs
    k_lo, k_hi, c0, c1 = _row_keys(seed_ptr, trial_ptr, rows, row_ok, Q)
    lr = tl.load(c1_ptr + rows, mask=row_ok, other=0.0)
    cb = tl.load(c2_ptr + rows, mask=row_ok, other=0.0)
    cc = tl.load(c3_ptr + rows, mask=row_ok, other=0.0)
    alpha = tl.load(c4_ptr + rows, mask=row_ok, other=0.0)[:, None]
    it = 0
    while it < n_steps:   # a while loop: the interpreter cannot iterate a runtime range (NumPy ≥ 2)
        es = _noise(k_lo, k_hi, c0, c1, (step0 + it).to(tl.uint32), i, p, Q, K, dtype, FAST)
        sq = ()
        for k in tl.static_range(K):
            sq = sq + (xs[k] * xs[k],)
        s = tl.where(row_ok, _row_sum_of_products(xs, xs, K), 1.0)
        q = _row_sum_of_products(sq, spectrum, K)
        xe = _row_sum_of_products(xs, es, K)
        inv_s = 1.0 / s
        noise = tl.sqrt(inv_s) * cc
        ys = ()
        if MOMENTUM:
            radial = (q * inv_s + xe * noise) * inv_s
            c0_ = (cb - radial)[:, None]           # g + λX = X·(c0 + a/s) + σε/√s; v ← αv + g + λX
            ca = inv_s[:, None]
            nz = noise[:, None]
            step_lr = lr[:, None]
            new_vs = ()
            for k in tl.static_range(K):
                v = alpha * vs[k] + xs[k] * (c0_ + ca * spectrum[k]) + es[k] * nz
                new_vs = new_vs + (v,)
                ys = ys + (xs[k] - step_lr * v,)
            vs = new_vs
        else:
            radial = (q * inv_s * lr + xe * noise) * inv_s
            c0_ = (radial + cb)[:, None]           # X ← X·(c0 − a·lr/s) − sig·ε/√s
            ca = -(inv_s * lr)[:, None]
            nz = noise[:, None]
            for k in tl.static_range(K):
                ys = ys + (xs[k] * (c0_ + ca * spectrum[k]) - es[k] * nz,)
        if (record != 0) & (it == 0):
            s_after = tl.where(row_ok, _row_sum_of_products(ys, ys, K), 1.0)
            r = (1.0 / tl.sqrt(s))[:, None]
            r_after = (1.0 / tl.sqrt(s_after))[:, None]
            minus = ()
            plus = ()
            for k in tl.static_range(K):
                minus = minus + (xs[k] * r - ys[k] * r_after,)
                plus = plus + (xs[k] * r + ys[k] * r_after,)
            out = rec_ptr + rows * 5
            tl.store(out, s, mask=row_ok)
            tl.store(out + 1, q, mask=row_ok)
            tl.store(out + 2, tl.sum(tl.where((i == 0)[None, :], sq[0], 0.0), axis=1), mask=row_ok)
            tl.store(out + 3, _row_sum_of_products(minus, minus, K), mask=row_ok)
            tl.store(out + 4, _row_sum_of_products(plus, plus, K), mask=row_ok)
        xs = ys
        it += 1
    _store(x_ptr, base, i, row_ok, xs, p, Q, K)
    if MOMENTUM:
        _store(v_ptr, base, i, row_ok, vs, p, Q, K)


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
    """The GPU's approximate log₂, sin and cos, except under ``TRITON_INTERPRET=1`` (no libdevice there)."""
    return os.environ.get("TRITON_INTERPRET") != "1"


def layout(p: int) -> tuple[int, int, int, int]:
    """(Q, K, ROWS, num_warps) for dimension p, a function of p alone (module docstring): K blocks of Q
    coordinates, Q = 2^⌈log₂ ⌈p/8⌉⌉ and K = ⌈p/Q⌉ ≤ 8."""
    q = triton.next_power_of_2(-(-p // BLOCKS))
    rows = max(1, 512 // (BLOCKS * q))
    warps = max(1, min(8, rows * BLOCKS * q // 256))
    return q, -(-p // q), rows, warps


def advance(x: torch.Tensor, v: torch.Tensor | None, a: torch.Tensor, seeds: torch.Tensor, trials: torch.Tensor,
            columns: tuple[torch.Tensor, ...], step0: int, n_steps: int, rec: torch.Tensor | None) -> None:
    """Updates step0 … step0 + n_steps − 1 of X (n, p) in place (and v), p ≤ :data:`MAX_DIM`; ``seeds``
    (n,) int64 and ``trials`` (n,) int32 key each row's noise; ``columns`` the (n, 1) rate columns of
    :func:`_advance`; ``rec`` (n, 5): the record columns of update step0 (None: not a record step)."""
    n, p = x.shape
    q, k, rows, warps = layout(p)
    c1, c2, c3, *rest = columns
    c4 = rest[0] if rest else c3
    record = rec is not None
    _advance[(triton.cdiv(n, rows),)](x, x if v is None else v, a, seeds, trials, c1, c2, c3, c4,
                                      rec if record else x, n, step0, n_steps, int(record), p=p, Q=q, K=k,
                                      ROWS=rows, MOMENTUM=v is not None, FAST=_fast(), num_warps=warps)


def draw(seeds: torch.Tensor, trials: torch.Tensor, step: int, p: int, dtype: torch.dtype) -> torch.Tensor:
    """ε (n, p) of update ``step`` for rows keyed by ``seeds`` and ``trials``: the stream of :func:`advance`."""
    n = seeds.shape[0]
    q, k, rows, warps = layout(p)
    out = torch.empty(n, p, dtype=dtype, device=seeds.device)
    _draw[(triton.cdiv(n, rows),)](out, seeds, trials, n, step, p=p, Q=q, K=k, ROWS=rows, FAST=_fast(),
                                   num_warps=warps)
    return out


def segment_means(table: torch.Tensor, starts: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """(members, c) means of each member's rows of ``table`` (n, c), each in an order fixed by its size."""
    out = table.new_empty(starts.shape[0], table.shape[1])
    _segment_means[(starts.shape[0], table.shape[1])](table.contiguous(), starts, sizes, out, table.shape[1],
                                                      BLOCK=256)
    return out
