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

What bounds the fused run on a GPU is the host's work per member; figures on it follow, on any device:
the members' theory one member at a time (as the separate runs compute it) against all in one batch (as
the fused run does), checked identical; with ``--theory-ab N``, the fused run with the theory on its
thread beside the updates against it in line after them, N of each in turns; with ``--parts``, one more
fused run timed by part (setup, updates and records, final row, theory, summaries; the theory runs on a
thread beside the updates, so the run's wait for it is printed too); with ``--profile N``, last, the
host's profile of one fused run and of one run alone (cProfile, the top N functions by own time).

    .venv/bin/python bench/fused_sweep.py [--quick] [--theory-ab N] [--parts] [--profile N] [--device cpu|cuda]
                                          [--dtype float32|float64]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from _machine import load_average

import smdengine  # noqa: E402
from smdengine._runtime import identical  # noqa: E402

LRS = [0.01 * 2 ** (i / 2) for i in range(8)]
WDS = [1e-3 * 2 ** (i / 2) for i in range(8)]


def grid(steps: int, trials: int, dim: int, dtype: str, device: str) -> list[dict]:
    return [{"kind": "nrq", "seed": i * 8 + j, "device": device,
             "params": {"dim": dim, "trials": trials, "steps": steps, "record_every": 100, "dtype": dtype,
                        "lr": lr, "weight_decay": wd}}
            for i, lr in enumerate(LRS) for j, wd in enumerate(WDS)]


def members_theory(specs: list[dict]) -> tuple[float, float, bool]:
    """Seconds for every point's theory as the separate runs compute it, one member at a time
    (``NRQRun.predict_many`` of one spec, 64 times), and as the fused run does, all members in one batch;
    and whether the two are identical. Each from its realized initial squared norms (here drawn alike)."""
    from smdengine._registry import parse_spec
    from smdengine.nrq.simulate import NRQRun

    parsed = [parse_spec(s) for s in specs]
    norms = [np.random.default_rng(i).chisquare(p.params.dim, p.params.trials) * p.params.init_std**2
             for i, p in enumerate(parsed)]
    one, together = float("inf"), float("inf")
    for _ in range(5):   # best of 5: a few milliseconds each
        t0 = time.perf_counter()
        alone = [NRQRun.predict_many([p], [n])[0] for p, n in zip(parsed, norms, strict=True)]
        t1 = time.perf_counter()
        batch = NRQRun.predict_many(parsed, norms)
        t2 = time.perf_counter()
        one, together = min(one, t1 - t0), min(together, t2 - t1)
    return one, together, identical(alone, batch)


PARTS = {"setup": "__init__", "updates and records": "step_members", "final row": "final_members",
         "theory": "member_theories", "summaries": "member_summary"}


def fused_parts(specs: list[dict]) -> dict[str, float]:
    """Seconds of one fused run spent in each :data:`PARTS` method of ``NRQRun`` (each timed between two
    synchronizations of the device: what the host spends there, the GPU's work included), and in all. The
    theory runs on a thread beside the updates (``Simulator.THEORY_AT_START``): it is timed on that thread
    without synchronizing (NumPy only), and "wait for the theory" is how long the run waited for its result."""
    from smdengine import _driver
    from smdengine.nrq.simulate import NRQRun

    spent = dict.fromkeys(PARTS, 0.0)
    originals = {part: getattr(NRQRun, method) for part, method in PARTS.items()}
    beside = _driver._beside

    def clocked(part: str):
        method = originals[part]

        def run(*args, **kwargs):
            if part == "theory":   # on its own thread: a device synchronization there would wait for the updates
                t0 = time.perf_counter()
                out = method(*args, **kwargs)
                spent[part] += time.perf_counter() - t0
                return out
            t, out = timed(lambda: method(*args, **kwargs))
            spent[part] += t
            return out
        return run

    def waited(fn, members):   # the thread's future, its result() timed
        future = beside(fn, members)
        if future is None:
            return None
        spent["wait for the theory"] = 0.0
        take = future.result

        def result(timeout=None):
            t0 = time.perf_counter()
            try:
                return take(timeout)
            finally:
                spent["wait for the theory"] += time.perf_counter() - t0
        future.result = result   # type: ignore[method-assign]
        return future

    try:
        for part, method in PARTS.items():
            setattr(NRQRun, method, clocked(part))
        _driver._beside = waited
        spent["all"], _ = timed(lambda: smdengine.run_fused(specs))
    finally:
        for part, method in PARTS.items():
            setattr(NRQRun, method, originals[part])
        _driver._beside = beside
    return spent


def theory_ab(specs: list[dict], rounds: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(min, median) seconds of the fused run with its members' theory on a thread beside the updates (the
    engine's way, ``NRQRun.THEORY_AT_START``) and with it computed in line after the last update (the
    baseline), ``rounds`` of each in turns."""
    from smdengine.nrq.simulate import NRQRun

    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(rounds):
            for on_thread in (True, False):
                NRQRun.THEORY_AT_START = on_thread
                times[on_thread].append(timed(lambda: smdengine.run_fused(specs))[0])
    finally:
        NRQRun.THEORY_AT_START = True
    beside, inline = times[True], times[False]
    return (min(beside), float(np.median(beside))), (min(inline), float(np.median(inline)))


def host_profile(fn, top: int) -> str:
    """cProfile of one call of ``fn``: the ``top`` functions by own time (a wait for the device shows in the
    function that synchronizes), as lines "own ms, cumulative ms, calls, function"."""
    profile = cProfile.Profile()
    profile.runcall(fn)
    stats = pstats.Stats(profile).stats   # type: ignore[attr-defined]   # (file, line, name) → (…, calls, own, cum, …)
    rows = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:top]
    return "\n".join(f"  {own * 1e3:8.2f} {cumulative * 1e3:9.2f} {calls:7d}  {Path(file).name}:{line}({name})"
                     for (file, line, name), (_, calls, own, cumulative, _) in rows)


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
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="last, print the host's profile (cProfile, top N by own time) of one fused run and of one "
                         "run alone")
    ap.add_argument("--theory-ab", type=int, default=0, metavar="N",
                    help="then N rounds of the fused run with its theory on a thread beside the updates and in line "
                         "after them, in turns (the thread's effect, measured in this process)")
    ap.add_argument("--parts", action="store_true", help="then one more fused run, timed by part (setup, updates, "
                    "theory, summaries)")
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
    one_by_one, together, same_theory = members_theory(specs)
    same = all(f is not None and f.identical_to(s) for f, s in zip(fused, separate, strict=True))
    work = len(specs) * args.trials * steps
    print(f"{'':10}{'seconds':>10}{'trial-steps/s':>16}")
    print(f"{'separate':10}{best_sep:10.3f}{work / best_sep:16.3e}")
    print(f"{'fused':10}{best_fused:10.3f}{work / best_fused:16.3e}")
    print(f"speed-up separate/fused: {best_sep / best_fused:.1f}×; fused results identical to separate: {same}")
    print(f"the {len(specs)} points' theory from realized initial norms: one member at a time (separate runs) "
          f"{one_by_one * 1e3:.2f} ms, all in one batch (the fused run) {together * 1e3:.2f} ms "
          f"({one_by_one / together:.1f}×), identical: {same_theory}")
    if args.theory_ab:
        beside, inline = theory_ab(specs, args.theory_ab)
        print(f"fused run, theory beside the updates / in line after them ({args.theory_ab} each, in turns): "
              f"min {beside[0] * 1e3:.1f} / {inline[0] * 1e3:.1f} ms, median {beside[1] * 1e3:.1f} / "
              f"{inline[1] * 1e3:.1f} ms")
    if args.parts:
        spent = fused_parts(specs)
        print("one fused run, by part (ms): " + ", ".join(f"{part} {t * 1e3:.1f}" for part, t in spent.items()))
    print(f"load {load_average()}")
    if args.profile:   # last, so that the summary above stays the first lines (check.sh prints them)
        for label, fn in (("one fused run", lambda: smdengine.run_fused(specs)),
                          ("one run alone", lambda: smdengine.run(specs[0]))):
            note = ("; the members' theory runs on a thread of its own, outside this profile, and a wait for it "
                    "is a lock's acquire" if label == "one fused run" else "")
            print(f"host profile of {label} (top {args.profile} by own time{note}):\n"
                  f"  {'own ms':>8} {'cum ms':>9} {'calls':>7}  function\n{host_profile(fn, args.profile)}")
    return 0 if same and same_theory else 1


if __name__ == "__main__":
    sys.exit(main())
