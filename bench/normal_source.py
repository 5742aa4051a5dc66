"""Which normal source makes the CPU engine faster (issue 19 point 5)?

Two sources of ε ~ N(0, I), for the nrq update's (trials, p) noise each step:

  torch  ``torch.randn(..., generator=g, out=eps)``: torch's CPU normal generator (vectorised
         Box–Muller over Philox/MT output)
  numpy  ``np.random.Generator(PCG64(seed)).standard_normal(out=eps.numpy())``: NumPy's ziggurat,
         written straight into the tensor's memory

and, as a source alone, the GPU kernel's counter-based stream (smdengine/nrq/_multistep.py, v2) computed
with torch integer ops on the CPU (:func:`counter_normals`; issue 35: the CPU path keeps its stream unless
a counter-based one is as fast there). Each update's ε is then a function of (seed, trial, update,
coordinate) alone, at the price of 10 Philox rounds of 64-bit tensor ops per four normals.

It prints, in one process, for float32 and float64 at p ∈ {10, 100, 1000}:
  - each source alone, in normals/s (best of --repeat);
  - the whole engine (``smdengine.run`` of an nrq spec, recording once) with each source, in
    trial-steps/s, and the lift numpy/torch. The engine's choice is ``Stepper.NUMPY_FLOAT64``
    (numpy for float64 on the CPU, torch otherwise); the bench flips it to time both.

Both sources are seeded per run and their states go into checkpoints (tests/engine/test_checkpoint.py),
so either keeps per-seed reproducibility and exact resume. The load average is printed before and
after: a busy machine lowers both alike (they alternate).

    .venv/bin/python bench/normal_source.py [--quick] [--repeat N]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from _machine import load_average

import smdengine  # noqa: E402
from smdengine.nrq.stepper import Stepper  # noqa: E402

CELLS = ((10, 1000), (100, 1000), (1000, 100))   # (p, trials)


M0, M1, W0, W1, LOW = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF


def _mulhilo(m: int, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 32-bit words of m·c for uint32 values held in int64 (c split in 16-bit halves: no overflow)."""
    a = m * (c & 0xFFFF)
    b = m * (c >> 16)
    mid = a + ((b & 0xFFFF) << 16)
    return (b >> 16) + (mid >> 32), mid & LOW


def counter_normals(seed: int, trials: torch.Tensor, step: int, p: int, dtype: torch.dtype) -> torch.Tensor:
    """ε (len(trials), p) of update ``step`` from stream v2 of the multi-step kernel, in torch ops (float32
    functions on the CPU): tests/engine/test_multistep.py checks it against the NumPy oracle."""
    q = 1 << (-(-p // 8) - 1).bit_length()
    i = torch.arange(q, dtype=torch.int64)[None, :]
    t = trials.to(torch.int64)[:, None]
    blocks = []
    for half in range(-(-p // (4 * q))):
        c = [i + 0 * t, t + 0 * i, torch.full_like(i + t, step), torch.full_like(i + t, half)]
        k0, k1 = seed & LOW, (seed >> 32) & LOW
        for _ in range(10):
            hi0, lo0 = _mulhilo(M0, c[0])
            hi1, lo1 = _mulhilo(M1, c[2])
            c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
            k0, k1 = (k0 + W0) & LOW, (k1 + W1) & LOW
        r0, r2 = (torch.sqrt(-1.3862943611198906 * torch.log2(w.to(torch.float32) * 2.0**-32 + 2.0**-33))
                  for w in (c[0], c[2]))
        t1, t3 = (torch.where(w >= 2**31, w - 2**32, w).to(torch.float32) * 1.4629180792671596e-09 for w in (c[1], c[3]))
        blocks += [r0 * torch.cos(t1), r0 * torch.sin(t1), r2 * torch.cos(t3), r2 * torch.sin(t3)]
    return torch.cat(blocks, dim=1)[:, :p].to(dtype)


def counter_rate(shape: tuple[int, int], dtype: str, numel_target: float) -> float:
    trials = torch.arange(shape[0], dtype=torch.int32)
    n = max(2, int(numel_target // (shape[0] * shape[1]) // 10))
    t0 = time.perf_counter()
    for step in range(n):
        counter_normals(12345, trials, step, shape[1], getattr(torch, dtype))
    return n * shape[0] * shape[1] / (time.perf_counter() - t0)


def source_rates(shape: tuple[int, int], dtype: str, numel_target: float) -> tuple[float, float]:
    t = torch.empty(shape, dtype=getattr(torch, dtype))
    gen, rng, view = torch.Generator().manual_seed(0), np.random.Generator(np.random.PCG64(0)), t.numpy()
    n = max(5, int(numel_target // t.numel()))
    t0 = time.perf_counter()
    for _ in range(n):
        torch.randn(shape, generator=gen, out=t)
    t1 = time.perf_counter()
    for _ in range(n):
        rng.standard_normal(out=view, dtype=view.dtype)
    t2 = time.perf_counter()
    return n * t.numel() / (t1 - t0), n * t.numel() / (t2 - t1)


def engine_seconds(p: int, trials: int, dtype: str, steps: int, numpy_source: bool) -> float:
    Stepper.NUMPY_FLOAT64 = numpy_source
    if dtype == "float32" and numpy_source:   # the engine never uses numpy for float32: patch it in
        Stepper.draw_noise = _numpy_draw      # type: ignore[method-assign]
    else:
        Stepper.draw_noise = _ENGINE_DRAW     # type: ignore[method-assign]
    spec = {"kind": "nrq", "seed": 0, "device": "cpu",
            "params": {"dim": p, "trials": trials, "steps": steps, "record_every": steps, "dtype": dtype}}
    t0 = time.perf_counter()
    smdengine.run(spec)
    return time.perf_counter() - t0


_ENGINE_DRAW = Stepper.draw_noise


def _numpy_draw(self: Stepper) -> None:
    if not hasattr(self, "_bench_rngs"):
        self._bench_rngs = [np.random.Generator(np.random.PCG64(g.initial_seed())) for g in self.gens]
    into = self.eps.numpy()
    for rows, rng in zip(self.rows, self._bench_rngs, strict=True):
        rng.standard_normal(out=into[rows], dtype=into.dtype)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller runs, best of 1 (a smoke run)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work, repeat = (2e6, 1) if args.quick else (3e7, args.repeat)
    print(f"torch {torch.__version__}, numpy {np.__version__}, threads {torch.get_num_threads()}, "
          f"load {load_average()}")
    print(f"{'dtype':8}{'p':>6}{'trials':>8}{'torch N/s':>12}{'numpy N/s':>12}{'counter N/s':>13}"
          f"{'engine torch':>14}{'engine numpy':>14}{'lift':>7}")
    for dtype in ("float32", "float64"):
        for p, trials in CELLS:
            steps = max(1, int(work / (p * trials)))
            best_src, best_eng = [0.0, 0.0, 0.0], [float("inf"), float("inf")]
            for _ in range(repeat):
                rates = (*source_rates((trials, p), dtype, work), counter_rate((trials, p), dtype, work))
                best_src = [max(a, b) for a, b in zip(best_src, rates, strict=True)]
                for i, numpy_source in enumerate((False, True)):
                    best_eng[i] = min(best_eng[i], engine_seconds(p, trials, dtype, steps, numpy_source))
            w = p * trials * steps
            print(f"{dtype:8}{p:6d}{trials:8d}{best_src[0]:12.2e}{best_src[1]:12.2e}{best_src[2]:13.2e}"
                  f"{w / best_eng[0]:14.2e}{w / best_eng[1]:14.2e}{best_eng[0] / best_eng[1]:7.2f}")
    Stepper.NUMPY_FLOAT64, Stepper.draw_noise = True, _ENGINE_DRAW   # type: ignore[method-assign]
    print(f"load {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
