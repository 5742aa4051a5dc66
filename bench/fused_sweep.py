"""A study's grid fused into one batched run vs its children run one by one (issue 19 point 3).

The grid: 64 points of the ``nrq`` kind, lr × weight_decay (8 × 8, log-spaced), each child with its
own seed, 1000 trials, p = 10, float32 (--dtype), ``--steps`` updates recorded every 100. It times, in
one process and on the device given (cpu, or cuda when there is one):

  separate  ``smdengine.run`` of each child in turn (what 64 workers' claims cost one after another)
  fused     ``smdengine.run_fused`` of the 64 children: one (64 000, p) batch with per-trial rates

and checks that the fused results equal the separate ones bit for bit (``RunResult.identical_to``). Each
is timed best of ``--repeat`` (interleaved, so that load from other processes hits both alike). The
ratio separate/fused is the speed-up; the target is ≥ 20× on a GPU (launch-bound there: 64 small
batches pay 64× the kernel launches of one). The load average is printed before and after.

    .venv/bin/python bench/fused_sweep.py [--quick] [--device cpu|cuda] [--dtype float32|float64]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from _machine import load_average

import smdengine  # noqa: E402

LRS = [0.01 * 2 ** (i / 2) for i in range(8)]
WDS = [1e-3 * 2 ** (i / 2) for i in range(8)]


def grid(steps: int, trials: int, dim: int, dtype: str, device: str) -> list[dict]:
    return [{"kind": "nrq", "seed": i * 8 + j, "device": device,
             "params": {"dim": dim, "trials": trials, "steps": steps, "record_every": 100, "dtype": dtype,
                        "lr": lr, "weight_decay": wd}}
            for i, lr in enumerate(LRS) for j, wd in enumerate(WDS)]


def theory_as_runs_compute_it(specs: list[dict]) -> float:
    """Seconds for every point's theory as a run computes it at its end (``NRQRun.member_theory``): the
    closed forms averaged over its ``trials`` realized initial squared norms (here drawn alike)."""
    from smdengine._registry import parse_spec
    from smdengine.nrq.predict import predict_physics

    parsed = [parse_spec(s) for s in specs]
    norms = [np.random.default_rng(i).chisquare(p.params.dim, p.params.trials) * p.params.init_std**2
             for i, p in enumerate(parsed)]
    t0 = time.perf_counter()
    for p, n in zip(parsed, norms, strict=True):
        predict_physics(p.params, p.params.momentum, n)
    return time.perf_counter() - t0


def timed(fn) -> tuple[float, object]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 steps, best of 1 (a smoke run)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args()
    steps, repeat = (200, 1) if args.quick else (args.steps, args.repeat)
    specs = grid(steps, args.trials, args.dim, args.dtype, args.device)
    name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine()
    print(f"device {args.device} ({name}), torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"load {load_average()}")
    print(f"{len(specs)} points × {args.trials} trials, p = {args.dim}, {steps} steps, {args.dtype}")
    # the kernels' first build (Triton compiles on a fresh machine: seconds) outside both arms' timings
    smdengine.run_fused([{**s, "params": {**s["params"], "steps": 2, "record_every": 1}} for s in specs[:2]])
    best_sep = best_fused = float("inf")
    separate = fused = None
    for _ in range(repeat):
        t, separate = timed(lambda: [smdengine.run(s) for s in specs])
        best_sep = min(best_sep, t)
        t, fused = timed(lambda: smdengine.run_fused(specs))
        best_fused = min(best_fused, t)
    assert separate is not None and fused is not None
    theory, _ = timed(lambda: [smdengine.predict(s) for s in specs])   # what both pay per point, unfused
    member_theory = theory_as_runs_compute_it(specs)
    identical = all(f is not None and f.identical_to(s) for f, s in zip(fused, separate, strict=True))
    work = len(specs) * args.trials * steps
    print(f"{'':10}{'seconds':>10}{'trial-steps/s':>16}")
    print(f"{'separate':10}{best_sep:10.3f}{work / best_sep:16.3e}")
    print(f"{'fused':10}{best_fused:10.3f}{work / best_fused:16.3e}")
    print(f"speed-up separate/fused: {best_sep / best_fused:.1f}×; fused results identical to separate: {identical}")
    print(f"of which the 64 points' theory (smdengine.predict, paid by both): {theory:.3f} s; as a run computes "
          f"it, from its realized initial norms: {member_theory:.3f} s")
    print(f"load {load_average()}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
