"""Does a row's result depend on how many rows are computed with it? For each operation of the NRQ
update, rows 32–63 computed inside a batch of 103 rows against the same 32 rows alone (their own tensor):
'same' where bit for bit equal, else the largest relative difference. This is what decides whether a
fused sweep's member can equal its run alone on a device (issue 19 point 3; smdengine.nrq._fused_step).

    python bench/batch_invariance.py [--device cuda|cpu]
"""
from __future__ import annotations

import argparse
import os

import torch


def ops(a: torch.Tensor) -> dict:
    reduce = torch.stack([torch.ones_like(a), a], dim=1)
    out = {
        "matmul (x·x)@[1,a]": lambda x, e: (x * x) @ reduce,
        "linalg.vecdot(x, e)": lambda x, e: torch.linalg.vecdot(x, e),
        "sum(x·x, dim=1)": lambda x, e: (x * x).sum(dim=1),
        "vector_norm(x, dim=1)": lambda x, e: torch.linalg.vector_norm(x, dim=1),
    }
    if a.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return out   # Triton runs on CUDA, or on the CPU in its interpreter
    try:
        from smdengine.nrq._fused_step import update
    except ImportError:
        return out

    def kernel(x, e):
        cols = tuple(torch.full((x.shape[0], 1), 0.05, dtype=x.dtype, device=x.device) for _ in range(3))
        return update(x.clone(), e, None, a, x.new_empty(x.shape[0], 2), cols)
    out["triton update (sq)"] = kernel
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(ap.parse_args().device)
    print(f"rows 32–63 of 103 vs the 32 alone, on {device} — torch {torch.__version__}", flush=True)
    for dtype in (torch.float32, torch.float64):
        for p in (10, 100, 1000):
            gen = torch.Generator(device=device).manual_seed(0)
            x, e = (torch.randn(103, p, generator=gen, dtype=dtype, device=device) for _ in range(2))
            a = torch.linspace(1.0, 2.0, p, dtype=dtype, device=device)
            cells = []
            for name, fn in ops(a).items():
                whole, part = fn(x, e)[32:64], fn(x[32:64].clone(), e[32:64].clone())
                diff = float(((whole - part).abs() / part.abs().clamp_min(1e-30)).max())
                cells.append(f"{name}: {'same' if torch.equal(whole, part) else f'{diff:.1e}'}")
            print(f"{str(dtype)[6:]:>7} p={p:<5} " + "; ".join(cells))


if __name__ == "__main__":
    main()
