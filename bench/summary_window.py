"""The time-to-equilibrium summary's smoothing (``smdengine._science.settle_steps``): its sliding window
against the rule as first written, each record's window summed anew with ``math.fsum`` (the baseline,
O(records · window)), in one process, on a series of ``n`` records whose window (τ/4 updates) spans
the whole run: the worst case, what a long run with a slow relaxation records. Checks that both give
the same step, and prints the ratio and the load average.

    .venv/bin/python bench/summary_window.py [--records 1000 3000 10000]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import load_average  # noqa: E402

from smdengine._science import EQUILIBRIUM_BAND, settle_steps  # noqa: E402


def by_definition(steps: list[int], values: list[float], target: float, timescale: float) -> int | None:
    """The baseline: each record's window [n − τ/8, n + τ/8] gathered and summed anew (one phase, width 1)."""
    half, settled, lo, hi = timescale / 8.0, None, 0, 0
    squares = [v * v for v in values]
    for j, n in enumerate(steps):
        while steps[lo] < n - half:
            lo += 1
        while hi + 1 < len(steps) and steps[hi + 1] <= n + half:
            hi += 1
        window = [s for s in squares[lo:hi + 1] if math.isfinite(s)]
        ok = bool(window) and abs(math.sqrt(math.fsum(window) / len(window)) / target - 1.0) <= EQUILIBRIUM_BAND
        settled = None if not ok else j if settled is None else settled
    return None if settled is None else steps[settled]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, nargs="+", default=[1000, 3000, 10_000])
    args = ap.parse_args()
    print(f"load {load_average()}")
    print(f"{'records':>8}{'by definition (s)':>19}{'sliding (s)':>13}{'ratio':>9}  same step")
    same_everywhere = True
    for n in args.records:
        steps = list(range(0, 10 * n, 10))
        values = [0.1 * (1.0 + 0.5 * math.exp(-i / (n / 5))) for i in range(n)]   # relaxes to the target
        t0 = time.perf_counter()
        slow = by_definition(steps, values, 0.1, timescale=1e12)
        t1 = time.perf_counter()
        fast = settle_steps(steps, values, 0, 10 * n, 0.1, timescale=1e12)
        t2 = time.perf_counter()
        same_everywhere &= slow == fast
        print(f"{n:8d}{t1 - t0:19.4f}{t2 - t1:13.4f}{(t1 - t0) / (t2 - t1):8.0f}×  {slow == fast}")
    print(f"load {load_average()}")
    return 0 if same_everywhere else 1


if __name__ == "__main__":
    sys.exit(main())
