"""Training step time of the ``train`` kind with and without the SMD tracking, on the CPU.

For three configurations on the bundled digits (label noise 0.3, batch norm, scale-invariant,
batch 128, λ = 2e-3, record_every = 50, one trial):

  mlp      depth 2, width 256, SGD, η = 0.5
  cnn      depth 3, width 32, SGD, η = 0.5
  mlp+mom  the mlp with heavy-ball momentum α = 0.9, η = 0.05

it calls ``smdengine.train.simulate.simulate(spec, track=True)`` (the angular-update tracking: the
Gram matrix of [w, v] per weight and step, reduced per window) and ``track=False`` (no tracker, no
Gram matrix; same model, same data, same seed, same trajectory) on specs parsed once by
``smdengine.parse_spec``.

What is measured: the wall time of whole ``simulate`` calls. One-off costs (loading the data,
building the model, the scale-invariance check, the final evaluation, the summary, first-step
warm-up) are removed by differencing: a short run of SHORT = record_every = 50 steps carries them,
and a long run of SHORT + N steps carries them plus N steps, so an arm's step time in one pair is
(its long run − the median of its short runs) / N. N = 500 = the default eval_every for runs of
≥ 500 steps (a 50-step run evaluates once, at step 0), so the difference contains exactly one
test-set evaluation and N/50 recorded windows: the per-step time includes their share, as it does in
a real run. A config is warmed up (one short and one long run per arm), then SHORTS short runs per
arm are timed, then the pairs: a long run of each arm, tracked and untracked back to back (which goes
first alternates between pairs), so that load from other processes and slow drifts of the machine's
speed hit both alike.

Why pairs, a median and an interval: on a shared 2-core VM two identical runs differ by ±5 % (an
untracked-vs-untracked control gave per-pair ratios from 0.95 to 1.07), so any single ratio, or a
ratio of best-of times (which swung from 0.85 to 1.32 between two runs), can land on either side of a
5 % bound while the true overhead is a few percent. Each pair gives one ratio tracked/untracked of runs taken
seconds apart; the row prints their median and a distribution-free ~95 % confidence interval of the
median (order statistics of the binomial(n, ½) law, no assumption about the noise's shape).

Verdict per row: PASS when the interval's upper end is ≤ 1.05 (overhead ≤ 5 % at ~95 % confidence),
FAIL when its lower end is > 1.05, UNSURE otherwise (the machine was too noisy to tell: run again, or
with more --pairs). The last column checks that both arms ended with the same final test loss
(tracking must not change the trajectory). Target (issue): overhead ≤ 5 % for mlp and cnn; the
momentum row is judged against the same bound. The exit status is 0 whatever the verdict (benchmarks
report, tests don't assert speed).

    .venv/bin/python bench/train_overhead.py [--quick] [--threads 2] [--pairs P]
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
import smdengine  # noqa: E402
from smdengine.train.simulate import simulate  # noqa: E402
from _machine import load_average

TARGET = 1.05          # tracked / untracked step time
SHORT = 50             # = record_every: the short run that carries the one-off costs
SHORTS = 4             # short runs per arm (their median is the one-off cost)
N = 500                # extra steps of the long run (= eval_every)
BASE = {"dataset": {"name": "digits"}, "label_noise": 0.3, "model": "mlp", "depth": 2, "width": 256,
        "norm": "batch", "scale_invariant": True, "batch_size": 128, "lr": 0.5, "weight_decay": 2e-3,
        "record_every": 50}
# name, overrides of BASE, pairs (default): a long run takes ~1 s (mlp) or ~4 s (cnn) on a quiet 2-core
# machine; the pair counts put each row at about 1–2 minutes
CONFIGS = (
    ("mlp", {}, 40),
    ("cnn", {"model": "cnn", "depth": 3, "width": 32}, 16),
    ("mlp+mom", {"momentum": 0.9, "lr": 0.05}, 40),
)
TARGET_ROWS = ("mlp", "cnn")


def make_spec(overrides: dict, steps: int):
    return smdengine.parse_spec({"kind": "train", "seed": 0, "device": "cpu",
                                 "params": {**BASE, **overrides, "steps": steps}})


def timed(spec, track: bool) -> tuple[float, float]:
    """Wall time of one simulate call and its final test loss."""
    gc.collect()                       # garbage of the previous run is not charged to this one
    t0 = time.perf_counter()
    result = simulate(spec, track=track)
    return time.perf_counter() - t0, result.summary["test_loss_final"]


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median: the k-th smallest and k-th largest of n
    values, k the largest with P(Binomial(n, ½) < k) ≤ (1 − level)/2 (the whole range when n is too small)."""
    xs, n = sorted(values), len(values)
    k, below = 0, 0.0
    while k < n // 2:
        below += math.comb(n, k) / 2 ** n          # P(B = k) added: now P(B ≤ k) = P(B < k + 1)
        if below > (1 - level) / 2:
            break
        k += 1
    k = max(k, 1)
    return xs[k - 1], xs[n - k]


def measure(overrides: dict, pairs: int) -> dict:
    specs = {"short": make_spec(overrides, SHORT), "long": make_spec(overrides, SHORT + N)}
    for track in (True, False):        # warm-up: data, oneDNN primitives, allocator
        for spec in specs.values():
            timed(spec, track)
    short = {True: [], False: []}
    for i in range(SHORTS):
        for track in ((True, False) if i % 2 == 0 else (False, True)):
            short[track].append(timed(specs["short"], track)[0])
    long = {True: [], False: []}
    final = {True: set(), False: set()}
    for i in range(pairs):
        for track in ((True, False) if i % 2 == 0 else (False, True)):
            took, loss = timed(specs["long"], track)
            long[track].append(took)
            final[track].add(loss)
    step = {track: [(t - statistics.median(short[track])) / N for t in long[track]] for track in (True, False)}
    ratios = [tt / tu for tt, tu in zip(step[True], step[False])]
    return {"tracked": statistics.median(step[True]), "untracked": statistics.median(step[False]),
            "median": statistics.median(ratios), "interval": median_interval(ratios),
            "same": final[True] == final[False] and len(final[True]) == 1}


def judge(interval: tuple[float, float]) -> str:
    low, high = interval
    return "PASS" if high <= TARGET else "FAIL" if low > TARGET else "UNSURE"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (~1 minute): 4 pairs per row")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--pairs", type=int, default=None,
                    help="tracked/untracked pairs per row (default mlp 40, cnn 16, mlp+mom 40; --quick 4)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    try:
        load1 = os.getloadavg()[0]
    except OSError:
        load1 = 0.0
    print(f"train step time, tracked vs untracked — torch {torch.__version__}, {torch.get_num_threads()} torch "
          f"threads, {os.cpu_count()} CPUs, {platform.machine()}{', quick' if args.quick else ''}; "
          f"load average {load_average()}")
    if load1 > 0.5:
        print("warning: load average > 0.5 before the start: other processes are (or were, in the last minute or "
              "two) busy; busy ones stall torch's worker threads, so compare runs taken on a quiet machine")
    print(f"digits, noise 0.3, batch norm, batch 128, λ=2e-3, record_every 50, 1 trial; N = {N}; per arm {SHORTS} short runs "
          f"({SHORT} steps), then pairs of long runs ({SHORT}+N steps); ms/step = median over pairs of "
          f"(long − median short)/N; ratio = tracked/untracked per pair: median and ~95% interval of the median")
    header = (f"{'config':>8} {'pairs':>5} | {'untracked':>9} {'tracked':>9} | {'median':>6} {'interval':>13} "
              f"{'≤1.05?':>6} | {'same loss':>9}")
    print(header)
    print("-" * len(header))
    t_start, cpu_start = time.perf_counter(), time.process_time()
    verdict = {}
    for name, overrides, default_pairs in CONFIGS:
        pairs = args.pairs or (4 if args.quick else default_pairs)
        r = measure(overrides, pairs)
        low, high = r["interval"]
        verdict[name] = judge(r["interval"])
        print(f"{name:>8} {pairs:>5} | {r['untracked'] * 1e3:>9.3f} {r['tracked'] * 1e3:>9.3f} | {r['median']:>6.3f} "
              f"{f'[{low:.3f}, {high:.3f}]':>13} {verdict[name]:>6} | {'yes' if r['same'] else 'NO':>9}", flush=True)
    wall = time.perf_counter() - t_start
    cores = (time.process_time() - cpu_start) / wall
    print(f"(total {wall:.0f} s, using {cores:.1f} CPU cores on average; load average now {load_average()}, "
          f"this process included)")
    if cores < 0.6 * min(torch.get_num_threads(), os.cpu_count() or 1):
        print("warning: this process got far less CPU than its torch threads ask for: another process was busy, "
              "so the step times are inflated and the ratios noisy. Compare runs taken on a quiet machine.")
    rows = [verdict[name] for name in TARGET_ROWS]
    overall = "FAIL" if "FAIL" in rows else "UNSURE" if "UNSURE" in rows else "PASS"
    print(f"target: tracked/untracked ≤ {TARGET} for {' and '.join(TARGET_ROWS)} => {overall} (mlp+mom: "
          f"{verdict['mlp+mom']}); PASS = the interval's upper end is within the bound")
    return 0


if __name__ == "__main__":
    sys.exit(main())
