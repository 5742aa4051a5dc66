"""nrq throughput on a GPU beside its two limits (issues 19 and 35), in trial-steps per second.

For p ∈ {10, 100, 1000} × trials ∈ {10³, 10⁴, 10⁵, 10⁶} × --dtypes (SGD, σ = 1), in one process on one
device:

  engine    ``smdengine.run`` end to end, marginal cost of an update: (T(3n) − T(n)) / 2n with
            record_every = steps, so setup, the theory and the single record drop out. On CUDA with
            Triton this is the multi-step kernel, its noise drawn inside the kernel.
  multi     the multi-step kernel alone (``Stepper.advance``, --span updates per launch) in a Python loop.
  step      the single-step path of issue 19 (``Stepper.step``: ``torch.randn`` writes ε, then one Triton
            kernel for the reductions and the update): the baseline, in the same process.
  graph     ``step``, --chunk of them captured once as a CUDA graph and replayed (CUDA only).
  rng       ``torch.randn`` of the (trials, p) noise into a buffer, once per update: the noise alone.
  roofline  the copy bandwidth measured here over the bytes an update must move when X goes through
            memory every update: read and write X once, 2·p·itemsize per trial-step (issue 19's limit).
  arith     the arithmetic limit of the multi-step kernel, whose state stays on chip: the GPU's FP32
            instruction rate (a float32 matrix product without TF32, measured here, FLOP/s ÷ 2) over
            the operations of a trial-step, p·OPS_PER_COORDINATE (the count below, noise included).
  issue     the instruction-issue limit of the multi-step kernel (float32): SMs × 128 lanes × the SM
            clock (nvidia-smi's clocks.max.sm) over the SASS instructions of a trial-step, counted in
            its update loop as compiled for sm_90 by the local Triton (bench/kernel_instructions.py,
            padding included). The honest limit once the state is on chip: every instruction, not only
            the FP32 ones, takes an issue slot.

``of roof``, ``of arith`` and ``of issue`` are the engine's share of the limits. ``limit`` says what bounds the
engine: ``launch`` where an update costs no more than 1.5× one of a single trial, else the nearest of
``memory``, ``issue`` and ``arith``. Cells whose run would not fit in 80% of the free device memory are
skipped. On the CPU (no --device cuda) the same table is made without the graph, arith and issue columns,
which is how the script is checked here; --quick keeps p ≤ 100 and trials ≤ 10⁴.

    python bench/nrq_gpu.py [--device cuda|cpu] [--quick] [--dtypes float32,float64] [--span 100]
                            [--chunk 32] [--seconds 0.2]
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
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

# operations per coordinate and update of the multi-step kernel (per SASS-level instruction, an FMA one),
# noise stream v2: Philox-4×32-10 for 4 normals: 10 rounds × (the high and the low word of 2 products: 4
# multiplies; 2 three-way xors that take the key too) = 60, so 15 per normal; the word to a uniform or an angle 2
# (convert, scale); Box–Muller 4 per normal (per pair: log₂, its scale, √, the angle's range reduction, sin,
# cos, 2 products); the update 8 (the mask of ε, three reductions' FMAs and x², the coefficient, the product
# and the noise FMA). An estimate, stated so that the limit it gives can be checked; the issue column
# counts the compiled instructions instead.
OPS_PER_COORDINATE = 15 + 2 + 4 + 8
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


def single_step(p: int, trials: int, dtype: str, device: torch.device, kernel: bool | None = None) -> NRQRun:
    """A simulator on the single-step path (no multi-step kernel): issue 19's update."""
    saved = NRQRun.MULTISTEP
    NRQRun.MULTISTEP = False
    try:
        return simulator(p, trials, dtype, device, kernel)
    finally:
        NRQRun.MULTISTEP = saved


def fp32_rate(device: torch.device) -> float:
    """FP32 FLOP/s of an 8192³ float32 matrix product without TF32 (median of 5); NaN on the CPU."""
    if device.type != "cuda":
        return math.nan
    saved, torch.backends.cuda.matmul.allow_tf32 = torch.backends.cuda.matmul.allow_tf32, False
    try:
        a = torch.randn(8192, 8192, device=device)
        b = torch.randn(8192, 8192, device=device)
        a @ b
        times = sorted(seconds_of(lambda: a @ b, device) for _ in range(5))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return 2 * 8192**3 / times[2]


def issue_rate(device: torch.device) -> float:
    """Instructions the GPU can issue per second, SMs × 128 (four schedulers of a warp each per cycle) ×
    the maximum SM clock; NaN on the CPU or without nvidia-smi."""
    if device.type != "cuda":
        return math.nan
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits",
                              "-i", str(device.index or 0)], capture_output=True, text=True, timeout=20, check=True)
        clock = float(out.stdout.split()[0]) * 1e6
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return math.nan
    return torch.cuda.get_device_properties(device).multi_processor_count * 128 * clock


def instructions_per_coordinate(p: int) -> float:
    """bench/kernel_instructions.py's count for the float32 SGD kernel; NaN where it cannot compile."""
    try:
        from kernel_instructions import per_coordinate
        return per_coordinate(p)
    except Exception:   # no Triton, or no nvdisasm beside it: the column is left out
        return math.nan


def multi(sim: NRQRun, span: int, n: int) -> None:
    """n updates of the multi-step kernel, ``span`` per launch."""
    stepper, done = sim.stepper, 0
    while done < n:
        k = min(span, n - done)
        stepper.advance(done, k, False)
        done += k


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
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated: float32,float64")
    ap.add_argument("--span", type=int, default=100, help="updates per launch of the multi-step kernel")
    ap.add_argument("--chunk", type=int, default=32, help="updates per CUDA graph")
    ap.add_argument("--seconds", type=float, default=0.2, help="time budget of one measurement")
    args = ap.parse_args(argv)
    device = smdengine.resolve_device(args.device)
    dims, trials_grid = (DIMS[:2], TRIALS[:2]) if args.quick else (DIMS, TRIALS)
    budget = args.seconds / 4 if args.quick else args.seconds
    warnings.filterwarnings("ignore")   # quadrature warnings from the theory at p = 1000

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    bw = copy_bandwidth(device, 2**30 if device.type == "cuda" else 2**28)
    rate = fp32_rate(device)
    issue = issue_rate(device)
    prov = smdengine.provenance(spec(10, 1, "float32", 1, device.type))
    print(f"nrq on {device.type} ({name}) — torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"copy bandwidth {bw / 1e9:.0f} GB/s (read + write), FP32 {rate / 1e12:.1f} TFLOP/s (no TF32)"
          f"{', quick' if args.quick else ''}; triton {prov['triton']}; noise: {prov['noise_stream']}; "
          f"load average {load_average()}")
    print(f"trial-steps/s; engine = smdengine.run (marginal); multi = {args.span} updates per launch; "
          f"step = issue 19's update (randn + one kernel); graph = {args.chunk} steps per CUDA graph replay; "
          "rng = torch.randn per step; roofline = bandwidth / (2·p·itemsize); "
          f"arith = FP32 rate / 2 / ({OPS_PER_COORDINATE}·p); issue = {issue:.3g} instructions/s / (SASS "
          "instructions per coordinate·p), float32")
    print(f"{'p':>5} {'trials':>8} {'dtype':>7} | {'engine':>9} {'multi':>9} {'step':>9} {'graph':>9} {'rng':>9} | "
          f"{'roofline':>9} {'of roof':>7} {'arith':>9} {'of arith':>8} {'issue':>9} {'of issue':>8} {'limit':>7}")
    for dtype in args.dtypes.split(","):
        itemsize = torch.finfo(getattr(torch, dtype)).bits // 8
        for p in dims:
            per_coordinate = (instructions_per_coordinate(p) if dtype == "float32" and math.isfinite(issue)
                              else math.nan)
            issue_limit = issue / (per_coordinate * p)
            one = simulator(p, 1, dtype, device)   # one trial: the update's fixed (per-launch) cost
            advance = multi if one.stepper.multistep is not None else lambda sim, _span, n: steps(sim, n)
            single = per_update(lambda n, one=one, advance=advance: advance(one, args.span, n), device, budget, 3)
            for trials in trials_grid:
                if not fits(p, trials, dtype, device):
                    print(f"{p:>5} {trials:>8} {dtype:>7} | skipped: does not fit in 80% of free memory")
                    continue
                sim = simulator(p, trials, dtype, device)
                has_multi = sim.stepper.multistep is not None
                many = (per_update(lambda n, sim=sim: multi(sim, args.span, n), device, budget, 3)
                        if has_multi else math.nan)
                del sim
                old = single_step(p, trials, dtype, device)
                step = per_update(lambda n, sim=old: steps(sim, n), device, budget, 3)
                graph = graph_update(old, device, args.chunk, budget)
                del old   # before the next simulator and the engine's own run of the same size
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                rng = rng_update(p, trials, dtype, device, budget)
                engine = engine_update(p, trials, dtype, device, budget, many if has_multi else step)
                roof = bw / (2 * p * itemsize)
                arith = rate / 2 / (OPS_PER_COORDINATE * p)
                nearest = min((bound, name) for bound, name in ((roof, "memory"), (issue_limit, "issue"),
                                                                 (arith, "arith")) if math.isfinite(bound))
                limit = "launch" if engine <= 1.5 * single else nearest[1]
                graph_col = f"{trials / graph:9.3g}" if isinstance(graph, float) else f"{graph[:9]:>9}"
                arith_cols = (f"{arith:9.3g} {trials / engine / arith:8.1%}" if math.isfinite(arith)
                              else f"{'n/a':>9} {'n/a':>8}")
                arith_cols += (f" {issue_limit:9.3g} {trials / engine / issue_limit:8.1%}" if math.isfinite(issue_limit)
                               else f" {'n/a':>9} {'n/a':>8}")
                print(f"{p:>5} {trials:>8} {dtype:>7} | {trials / engine:9.3g} {trials / many:9.3g} "
                      f"{trials / step:9.3g} {graph_col} {trials / rng:9.3g} | {roof:9.3g} "
                      f"{trials / engine / roof:7.1%} {arith_cols} {limit:>7}", flush=True)
                if isinstance(graph, str) and graph != "n/a":
                    print(f"      graph capture failed: {graph}")
    print(f"load average {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
