"""Which normal source makes the CPU engine faster (issue 19 point 5)?

Two sources of ε ~ N(0, I), for the nrq update's (trials, p) noise each step:

  torch  ``torch.randn(..., generator=g, out=eps)``: torch's CPU normal generator (vectorised
         Box–Muller over Philox/MT output)
  numpy  ``np.random.Generator(PCG64(seed)).standard_normal(out=eps.numpy())``: NumPy's ziggurat,
         written straight into the tensor's memory

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
    print(f"{'dtype':8}{'p':>6}{'trials':>8}{'torch N/s':>12}{'numpy N/s':>12}"
          f"{'engine torch':>14}{'engine numpy':>14}{'lift':>7}")
    for dtype in ("float32", "float64"):
        for p, trials in CELLS:
            steps = max(1, int(work / (p * trials)))
            best_src, best_eng = [0.0, 0.0], [float("inf"), float("inf")]
            for _ in range(repeat):
                rates = source_rates((trials, p), dtype, work)
                best_src = [max(a, b) for a, b in zip(best_src, rates, strict=True)]
                for i, numpy_source in enumerate((False, True)):
                    best_eng[i] = min(best_eng[i], engine_seconds(p, trials, dtype, steps, numpy_source))
            w = p * trials * steps
            print(f"{dtype:8}{p:6d}{trials:8d}{best_src[0]:12.2e}{best_src[1]:12.2e}"
                  f"{w / best_eng[0]:14.2e}{w / best_eng[1]:14.2e}{best_eng[0] / best_eng[1]:7.2f}")
    Stepper.NUMPY_FLOAT64, Stepper.draw_noise = True, _ENGINE_DRAW   # type: ignore[method-assign]
    print(f"load {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
