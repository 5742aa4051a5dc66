"""Per-step time of the SGDM norm map's two CPU paths (one addmm per step vs elementwise columns) at
several trial counts, to check ``smdengine.sde.norm_map.MM_MAX_TRIALS``: ``smdengine.run``
end to end, best of 2, the paths interleaved A B B A.

    .venv/bin/python bench/norm_map_sgdm_paths.py [torch threads, default 2]
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from smdengine import run as integrate  # noqa: E402
from smdengine.sde import norm_map  # noqa: E402


def main() -> None:
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    for trials in (1, 64, 65, 256, 1000, 4096):
        steps = max(2000, 200000 // max(trials, 1) * 10)
        steps = min(steps, 20000)
        spec = {"kind": "sde", "seed": 0, "device": "cpu", "params": {"model": "norm_map", "momentum": 0.9,
                "trials": trials, "steps": steps, "record_every": 100,
                "unit_grad_sq": {"noise": "uniform", "noise_half_width": 3.0}}}
        res = {}
        for order in ("mm", "cols", "cols", "mm"):
            norm_map.MM_MAX_TRIALS = 10**9 if order == "mm" else 0
            best = 1e9
            for _ in range(2):
                t0 = time.perf_counter(); integrate(spec); best = min(best, time.perf_counter() - t0)
            res.setdefault(order, []).append(best / steps * 1e6)
        print(f"trials {trials:5d}: addmm {min(res['mm']):7.2f} µs/step, columns {min(res['cols']):7.2f} µs/step "
              f"(threads {torch.get_num_threads()})", flush=True)


if __name__ == "__main__":
    main()
