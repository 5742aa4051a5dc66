"""The NRQ update of :class:`smdengine.nrq.stepper.Stepper` after the noise is drawn, as one Triton
kernel (CUDA): the three reductions |X|², XᵀAX, X·ε and the update of X (and v) in one launch that
sweeps each row twice (reduce, then update; the second sweep mostly hits the cache while a program's
tile is ≤ 2048 values, i.e. p ≤ 2048), instead of ~10 torch kernels, each a pass over memory and a
launch.

Why a kernel and not only speed: torch's matmul and reductions may sum a row in a different order for
another number of rows (cuBLAS and the reduction kernels pick their tiling from the whole shape), so
a member of a fused sweep would not evolve bit for bit as in its run alone. Here a row's arithmetic
depends only on p and the dtype (the compile-time tile), never on the number of rows or the row's
position: p is a compile-time constant (one compilation per p and dtype) and the row count a runtime
argument Triton does not specialise on (``do_not_specialize``).

Same formulas as the torch path (stepper module docstring); the results differ from it only by
rounding. ``TRITON_INTERPRET=1`` runs the kernel on CPU tensors (slowly), which is how it is checked
without a GPU.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

TILE = 2048   # elements per program: ROWS × BLOCK_P


@triton.jit(do_not_specialize=["n_rows"])
def _update(x_ptr, eps_ptr, v_ptr, a_ptr, sq_ptr, c1_ptr, c2_ptr, c3_ptr, c4_ptr, n_rows, p: tl.constexpr,
            MOMENTUM: tl.constexpr, ROWS: tl.constexpr, BLOCK_P: tl.constexpr):
    """Rows [pid·ROWS, pid·ROWS + ROWS) of X (n_rows, p), contiguous. Per-row columns (n_rows,):
    SGD: c1 = lr, c2 = keep (1 − lr·λ), c3 = sig (lr·σ); SGDM: c1 = lr, c2 = λ, c3 = σ, c4 = α.
    Writes (|X|², XᵀAX) before the update into sq (n_rows, 2)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    base = rows.to(tl.int64)[:, None] * p
    dtype = x_ptr.dtype.element_ty
    acc_s = tl.zeros((ROWS, BLOCK_P), dtype=dtype)
    acc_q = tl.zeros((ROWS, BLOCK_P), dtype=dtype)
    acc_e = tl.zeros((ROWS, BLOCK_P), dtype=dtype)
    for start in range(0, p, BLOCK_P):   # fixed chunks: the summation order depends on p alone
        cols = start + tl.arange(0, BLOCK_P)
        mask = row_ok[:, None] & (cols < p)[None, :]
        x = tl.load(x_ptr + base + cols[None, :], mask=mask, other=0.0)
        e = tl.load(eps_ptr + base + cols[None, :], mask=mask, other=0.0)
        a = tl.load(a_ptr + cols, mask=cols < p, other=0.0)
        xx = x * x
        acc_s += xx
        acc_q += xx * a[None, :]
        acc_e += x * e
    s = tl.where(row_ok, tl.sum(acc_s, axis=1), 1.0)
    q = tl.sum(acc_q, axis=1)
    xe = tl.sum(acc_e, axis=1)
    tl.store(sq_ptr + rows * 2, s, mask=row_ok)
    tl.store(sq_ptr + rows * 2 + 1, q, mask=row_ok)

    lr = tl.load(c1_ptr + rows, mask=row_ok, other=0.0)
    c2 = tl.load(c2_ptr + rows, mask=row_ok, other=0.0)
    c3 = tl.load(c3_ptr + rows, mask=row_ok, other=0.0)
    inv_s = 1.0 / s
    noise = tl.sqrt(inv_s) * c3
    if MOMENTUM:
        alpha = tl.load(c4_ptr + rows, mask=row_ok, other=0.0)
        radial = (q * inv_s + xe * noise) * inv_s
        c0 = c2 - radial           # g + λX = X·(c0 + a/s) + σε/√s
        ca = inv_s
    else:
        radial = (q * inv_s * lr + xe * noise) * inv_s
        c0 = radial + c2           # X ← X·(c0 − a·lr/s) − sig·ε/√s
        ca = -(inv_s * lr)
    for start in range(0, p, BLOCK_P):
        cols = start + tl.arange(0, BLOCK_P)
        mask = row_ok[:, None] & (cols < p)[None, :]
        offs = base + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        e = tl.load(eps_ptr + offs, mask=mask, other=0.0)
        a = tl.load(a_ptr + cols, mask=cols < p, other=0.0)
        coef = c0[:, None] + ca[:, None] * a[None, :]
        if MOMENTUM:
            v = tl.load(v_ptr + offs, mask=mask, other=0.0)
            v = alpha[:, None] * v + x * coef + e * noise[:, None]
            tl.store(v_ptr + offs, v, mask=mask)
            tl.store(x_ptr + offs, x - lr[:, None] * v, mask=mask)
        else:
            tl.store(x_ptr + offs, x * coef - e * noise[:, None], mask=mask)


def update(x: torch.Tensor, eps: torch.Tensor, v: torch.Tensor | None, a: torch.Tensor, sq: torch.Tensor,
           columns: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """One update of X (n, p) in place (and v), with the noise ε (n, p) already drawn; ``columns``: the
    per-row (n, 1) rate columns of the kernel's docstring. Returns ``sq`` (n, 2) filled with (|X|², XᵀAX)
    before the update."""
    n, p = x.shape
    block_p = min(triton.next_power_of_2(p), TILE)
    rows = max(1, TILE // block_p)
    c1, c2, c3, *rest = columns
    c4 = rest[0] if rest else c3
    _update[(triton.cdiv(n, rows),)](x, eps, x if v is None else v, a, sq, c1, c2, c3, c4, n, p,
                                     MOMENTUM=v is not None, ROWS=rows, BLOCK_P=block_p, num_warps=4)
    return sq
