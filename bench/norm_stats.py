"""A normalization's statistics: ``torch.var_mean`` (the baseline) against two passes (the mean, then the mean
of the centred squares), forward and backward, on the train kind's shapes, in one process.

The train kind (``smdengine/train/layers.py``, ``var_mean``) takes the two passes on the CPU, where
``torch.var_mean``'s Welford update ran several times slower, and ``torch.var_mean`` elsewhere: one kernel
where the two passes launch four, and a GPU's small steps are bound by launches. This script measures that
choice on a device: the time of a batch norm's forward + backward (over the batch of a (trials, batch,
features) activation, as a dense layer's) and of its forward alone, each way, the ratio baseline / two
passes (> 1: the two passes are faster), and the largest difference of the normalized outputs. Each is
the median of ``--repeat`` timed blocks of 50 calls, the two ways in turns; the load average is printed
before and after.

    .venv/bin/python bench/norm_stats.py [--device cpu|cuda] [--dtype float32|float64] [--repeat 7]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def welford(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.var_mean(x, dim=1, unbiased=False, keepdim=True)


def two_passes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean = x.mean(dim=1, keepdim=True)
    centred = x - mean
    return (centred * centred).mean(dim=1, keepdim=True), mean


def normalize(stats, x: torch.Tensor) -> torch.Tensor:
    var, mean = stats(x)
    return (x - mean) * torch.rsqrt(var + 1e-5)


def timed(fn, device: torch.device, calls: int = 50) -> float:
    """Seconds per call of ``fn`` over a block of ``calls`` (the device synchronized at both ends)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    print(f"device {device}, {args.dtype}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"load {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"{'trials, batch, features':>24} | {'fwd+bwd: var_mean':>17} {'two passes':>10} {'ratio':>6} | "
          f"{'fwd: var_mean':>13} {'two passes':>10} {'ratio':>6} | max |Δy|")
    gen = torch.Generator(device=device).manual_seed(0)
    for shape in ((1, 128, 256), (4, 128, 256), (4, 128, 64), (64, 128, 256)):
        x = torch.randn(*shape, device=device, dtype=dtype, generator=gen).requires_grad_()
        grad = torch.randn(*shape, device=device, dtype=dtype, generator=gen)
        both = {}
        for name, stats in (("var_mean", welford), ("two", two_passes)):
            def backward(stats=stats, x=x, grad=grad) -> None:
                normalize(stats, x).backward(grad)

            def forward(stats=stats, x=x) -> None:
                with torch.no_grad():
                    normalize(stats, x)
            both[name] = (backward, forward)
        for fns in both.values():   # warm-up (allocator, kernels)
            fns[0]()
            fns[1]()
        times: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.repeat):
            for name, fns in both.items():
                for k, fn in enumerate(fns):
                    times.setdefault((name, k), []).append(timed(fn, device))
        med = {key: statistics.median(v) * 1e3 for key, v in times.items()}
        with torch.no_grad():
            diff = (normalize(welford, x) - normalize(two_passes, x)).abs().max().item()
        print(f"{str(shape):>24} | {med['var_mean', 0]:>14.3f} ms {med['two', 0]:>7.3f} ms "
              f"{med['var_mean', 0] / med['two', 0]:>5.2f}× | {med['var_mean', 1]:>10.3f} ms {med['two', 1]:>7.3f} ms "
              f"{med['var_mean', 1] / med['two', 1]:>5.2f}× | {diff:.1e}")
    print(f"load {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
