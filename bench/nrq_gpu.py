"""nrq throughput on a GPU beside its roofline (issue 19 point 2), in trial-steps per second.

For p ∈ {10, 100, 1000} × trials ∈ {10³, 10⁴, 10⁵, 10⁶} × {float32, float64} (SGD, σ = 1), in one
process on one device:

  engine    ``smdengine.run`` end to end, marginal cost of an update: (T(3n) − T(n)) / 2n with
            record_every = steps, so setup, the theory and the single record drop out.
  step      the engine's own update (``Stepper.step``: the noise, then on CUDA with Triton one kernel for
            the reductions and the update) in a plain Python loop: the engine's cost without the driver.
  torch     the same update written as torch operations (``Stepper.KERNEL = False``, ~10 kernels): the
            unfused step, the engine's update on CUDA without Triton.
  graph     the same update, ``--chunk`` of them captured once as a CUDA graph and replayed (CUDA
            only): the kernel launches of a chunk cost one launch.
  rng       ``torch.randn`` of the (trials, p) noise into a buffer, once per update: the noise alone.
  roofline  the copy bandwidth measured here over the bytes a fused update must move: read and write
            X once, 2·p·itemsize per trial-step (the noise generated in registers, the reductions
            fused into the same pass).

``limit`` says what bounds the engine's update: ``launch`` where an update of this size costs no more
than 1.5× one of a single trial (fixed per-kernel cost), ``rng`` where drawing the noise takes half
the update or more, else ``memory`` (each of its kernels is a pass over X). ``of roof`` is the best
of step and graph over the roofline. Cells whose run would not fit in 80% of the free device memory
are skipped. On the CPU (no --device cuda) the same table is made without the graph column,
which is how the script is checked here; --quick keeps p ≤ 100 and trials ≤ 10⁴.

    python bench/nrq_gpu.py [--device cuda|cpu] [--quick] [--chunk 32] [--seconds 0.2]
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from _machine import load_average

import smdengine  # noqa: E402
from smdengine._simulator import Context  # noqa: E402
from smdengine.nrq.simulate import NRQRun  # noqa: E402
from smdengine.nrq.stepper import Stepper  # noqa: E402

DIMS = (10, 100, 1000)
TRIALS = (10**3, 10**4, 10**5, 10**6)
DTYPES = ("float32", "float64")
LR, WD, SIGMA = 0.1, 0.01, 1.0


def spec(p: int, trials: int, dtype: str, steps: int, device: str) -> dict:
    return {"kind": "nrq", "seed": 0, "device": device,
            "params": {"dim": p, "trials": trials, "steps": steps, "record_every": steps, "dtype": dtype,
                       "lr": LR, "weight_decay": WD, "noise_std": SIGMA}}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_of(fn: Callable[[], object], device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def copy_bandwidth(device: torch.device, nbytes: int) -> float:
    """Bytes read plus written per second by a device-to-device copy of ``nbytes`` (median of 10)."""
    src = torch.rand(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = sorted(seconds_of(lambda: dst.copy_(src), device) for _ in range(10))
    return 2 * nbytes / times[len(times) // 2]


def simulator(p: int, trials: int, dtype: str, device: torch.device, kernel: bool | None = None) -> NRQRun:
    """A run's simulator, its first phase entered; ``kernel``: :attr:`Stepper.KERNEL` while it is built."""
    saved, Stepper.KERNEL = Stepper.KERNEL, kernel
    try:
        return _simulator(p, trials, dtype, device)
    finally:
        Stepper.KERNEL = saved


def _simulator(p: int, trials: int, dtype: str, device: torch.device) -> NRQRun:
    parsed = smdengine.parse_spec(spec(p, trials, dtype, 10, device.type))
    gen = torch.Generator(device=device).manual_seed(0)
    sim = NRQRun(parsed, Context(device, getattr(torch, dtype), gen))
    sim.step_members(0, False)   # enters the first phase (sets the rate columns)
    return sim


def steps(sim: NRQRun, n: int) -> None:
    """n updates of the engine's stepper (outputs dropped at once)."""
    for _ in range(n):
        sim.stepper.step()


def per_update(run_n: Callable[[int], object], device: torch.device, budget: float, repeats: int) -> float:
    """Seconds per update of ``run_n(n)`` (n updates), n calibrated to ~``budget`` s, best of ``repeats``."""
    run_n(2)
    n, took = 4, seconds_of(lambda: run_n(4), device)
    while took < budget / 4 and n < 10**6:
        n *= 4
        took = seconds_of(lambda n=n: run_n(n), device)
    n = max(1, int(n * budget / max(took, 1e-9)))
    return min(seconds_of(lambda: run_n(n), device) for _ in range(repeats)) / n


def engine_update(p: int, trials: int, dtype: str, device: torch.device, budget: float, step: float) -> float:
    """Marginal seconds per update of ``smdengine.run``: (T(3n) − T(n)) / 2n, each the best of three,
    n sized from the plain loop's ``step`` seconds per update (so that T(3n) − T(n) spans ~``budget``);
    NaN when the difference is lost in the noise of the runs' fixed costs."""
    def run(n: int) -> float:
        return seconds_of(lambda: smdengine.run(spec(p, trials, dtype, n, device.type)), device)
    run(4)
    n = max(8, math.ceil(budget / 2 / step))
    diff = min(run(3 * n) for _ in range(3)) - min(run(n) for _ in range(3))
    return diff / (2 * n) if diff > 0 else math.nan


def graph_update(sim: NRQRun, device: torch.device, chunk: int, budget: float) -> float | str:
    """Seconds per update of ``chunk`` updates captured as one CUDA graph; a reason string if capture fails."""
    if device.type != "cuda":
        return "n/a"
    stepper = sim.stepper
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):   # warm-up on a side stream, as capture requires
            for _ in range(3):
                stepper.step()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        for gen in stepper.gens:   # a non-default generator must be registered with the graph
            graph.register_generator_state(gen)
        with torch.cuda.graph(graph):
            for _ in range(chunk):
                stepper.step()
    except Exception as exc:   # noqa: BLE001 — reported in the table, the other columns still stand
        return f"{type(exc).__name__}: {exc}"[:60]

    def replay(n: int) -> None:   # n replays: n·chunk updates
        for _ in range(n):
            graph.replay()
    return per_update(replay, device, budget, 3) / chunk


def rng_update(p: int, trials: int, dtype: str, device: torch.device, budget: float) -> float:
    gen = torch.Generator(device=device).manual_seed(0)
    buf = torch.empty(trials, p, dtype=getattr(torch, dtype), device=device)

    def draw(n: int) -> None:
        for _ in range(n):
            torch.randn((trials, p), generator=gen, out=buf)
    return per_update(draw, device, budget, 3)


def fits(p: int, trials: int, dtype: str, device: torch.device) -> bool:
    """The peak of an engine run, ~10 (trials, p) states (X, ε, the buffer, the reductions' and the record's
    temporaries), within 80% of free memory."""
    need = 10 * p * trials * torch.finfo(getattr(torch, dtype)).bits // 8
    if device.type == "cuda":
        return need < 0.8 * torch.cuda.mem_get_info(device)[0]
    return need < 2 * 2**30


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    ap.add_argument("--quick", action="store_true", help="p ≤ 100, trials ≤ 10⁴, short timings")
    ap.add_argument("--chunk", type=int, default=32, help="updates per CUDA graph")
    ap.add_argument("--seconds", type=float, default=0.2, help="time budget of one measurement")
    args = ap.parse_args(argv)
    device = smdengine.resolve_device(args.device)
    dims, trials_grid = (DIMS[:2], TRIALS[:2]) if args.quick else (DIMS, TRIALS)
    budget = args.seconds / 4 if args.quick else args.seconds
    warnings.filterwarnings("ignore")   # quadrature warnings from the theory at p = 1000

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    bw = copy_bandwidth(device, 2**30 if device.type == "cuda" else 2**28)
    triton = smdengine.provenance(spec(10, 1, "float32", 1, device.type))["triton"]   # None: the kernel cannot run
    print(f"nrq on {device.type} ({name}) — torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"copy bandwidth {bw / 1e9:.0f} GB/s (read + write){', quick' if args.quick else ''}; "
          f"update: {'Triton ' + triton if triton else 'torch ops'}; "
          f"load average {load_average()}")
    print("trial-steps/s; engine = smdengine.run (marginal); step = Stepper.step loop; "
          f"torch = the update as torch ops; graph = {args.chunk} steps per CUDA graph replay; rng = torch.randn per step; "
          "roofline = bandwidth / (2·p·itemsize)")
    print(f"{'p':>5} {'trials':>8} {'dtype':>7} | {'engine':>9} {'step':>9} {'torch':>9} {'graph':>9} {'rng':>9} | "
          f"{'roofline':>9} {'of roof':>7} {'limit':>7}")
    for dtype in DTYPES:
        itemsize = torch.finfo(getattr(torch, dtype)).bits // 8
        for p in dims:
            one = simulator(p, 1, dtype, device)   # one trial: the update's fixed (per-kernel) cost
            single = per_update(lambda n, one=one: steps(one, n), device, budget, 3)
            for trials in trials_grid:
                if not fits(p, trials, dtype, device):
                    print(f"{p:>5} {trials:>8} {dtype:>7} | skipped: does not fit in 80% of free memory")
                    continue
                sim = simulator(p, trials, dtype, device)
                step = per_update(lambda n, sim=sim: steps(sim, n), device, budget, 3)
                graph = graph_update(sim, device, args.chunk, budget)
                del sim   # before the next simulator and the engine's own run of the same size
                plain = simulator(p, trials, dtype, device, kernel=False)
                unfused = per_update(lambda n, sim=plain: steps(sim, n), device, budget, 3)
                del plain
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                rng = rng_update(p, trials, dtype, device, budget)
                engine = engine_update(p, trials, dtype, device, budget, step)
                roof = bw / (2 * p * itemsize)
                best = min(step, graph) if isinstance(graph, float) else step
                limit = "launch" if step <= 1.5 * single else "rng" if rng >= step / 2 else "memory"
                graph_col = f"{trials / graph:9.3g}" if isinstance(graph, float) else f"{graph[:9]:>9}"
                print(f"{p:>5} {trials:>8} {dtype:>7} | {trials / engine:9.3g} {trials / step:9.3g} {trials / unfused:9.3g} {graph_col} "
                      f"{trials / rng:9.3g} | {roof:9.3g} {trials / best / roof:7.1%} {limit:>7}", flush=True)
                if isinstance(graph, str) and graph != "n/a":
                    print(f"      graph capture failed: {graph}")
    print(f"load average {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
