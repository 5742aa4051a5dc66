"""Machine instructions per update of the multi-step nrq kernel (smdengine/nrq/_multistep.py), counted
from its SASS, with no GPU: Triton compiles the kernel for a Hopper target (sm_90) and its bundled
nvdisasm disassembles it. The count is what the arithmetic (issue) limit in bench/README.md rests on.

The loop of updates is the one backward branch of the kernel; inside it the record branch (taken on the
first update of a record step only) is the longest forward branch in it, left out. Each
thread holds ROWS·K·Q / (32·num_warps) elements of the tile, each element 1 coordinate slot (padding
included), so instructions per slot = instructions per thread-update / elements per thread.

    .venv/bin/python bench/kernel_instructions.py [--dims 10,100,1000] [--momentum]

Needs Triton (not a dependency: ``pip install triton==3.6.0``).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]+\*/")
BRANCH = re.compile(r"BRA `\((\.L_x_\d+)\)")


def sass_of(p: int, momentum: bool) -> tuple[str, tuple[int, int, int, int]]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from smdengine.nrq import _multistep

    q, k, rows, warps = _multistep.layout(p)
    ptr = "*fp32"
    signature = {"x_ptr": ptr, "v_ptr": ptr, "a_ptr": ptr, "seed_ptr": "*i64", "trial_ptr": "*i32", "c1_ptr": ptr,
                 "c2_ptr": ptr, "c3_ptr": ptr, "c4_ptr": ptr, "rec_ptr": ptr, "n_rows": "i32", "step0": "i32",
                 "n_steps": "i32", "record": "i32", "p": "constexpr", "Q": "constexpr", "K": "constexpr",
                 "ROWS": "constexpr", "MOMENTUM": "constexpr", "FAST": "constexpr"}
    src = ASTSource(fn=_multistep._advance, signature=signature,
                    constexprs={"p": p, "Q": q, "K": k, "ROWS": rows, "MOMENTUM": momentum, "FAST": True})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        sass = subprocess.run([nvdisasm, "-c", cubin.name], check=True, capture_output=True, text=True).stdout
    return sass, (q, k, rows, warps)


def loop_count(sass: str) -> tuple[int, int]:
    """(instructions of the update loop without the record branch, of the record branch)."""
    lines = sass.splitlines()
    label = {line[:-1]: i for i, line in enumerate(lines) if re.fullmatch(r"\.L_x_\d+:", line)}
    loops = [(label[m.group(1)], i) for i, line in enumerate(lines)
             if (m := BRANCH.search(line)) and label.get(m.group(1), i) < i]
    start, end = max(loops, key=lambda span: span[1] - span[0])
    body = lines[start:end + 1]
    count = sum(1 for line in body if INSTRUCTION.match(line))
    record = 0
    for i, line in enumerate(body):
        m = BRANCH.search(line)
        if m and m.group(1) + ":" in body[i:]:
            skipped = sum(1 for x in body[i:body.index(m.group(1) + ":")] if INSTRUCTION.match(x))
            record = max(record, skipped)
    return count - record, record


def per_coordinate(p: int, momentum: bool = False) -> float:
    """SASS instructions per coordinate and update of the kernel's update loop (record branch left out),
    padding included: what the issue limit of bench/nrq_gpu.py divides by."""
    sass, (_q, _k, rows, warps) = sass_of(p, momentum)
    update, _record = loop_count(sass)
    return update * 32 * warps / (rows * p)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", default="10,100,1000")
    ap.add_argument("--momentum", action="store_true")
    args = ap.parse_args()
    try:
        import triton
    except ImportError:
        print("kernel_instructions: skipped — Triton is not installed (pip install triton==3.6.0)")
        return 0
    print(f"multi-step nrq kernel, float32{', momentum' if args.momentum else ''}, sm_90 SASS (Triton {triton.__version__})")
    print(f"{'p':>5} {'tile':>9} {'warps':>5} | {'per thread-update':>17} {'record':>6} | {'per slot':>8} "
          f"{'per coordinate':>14}")
    for p in (int(d) for d in args.dims.split(",")):
        sass, (q, k, rows, warps) = sass_of(p, args.momentum)
        update, record = loop_count(sass)
        per_thread = rows * k * q / (32 * warps)
        print(f"{p:>5} {rows:>3}×{k}×{q:<3} {warps:>5} | {update:>17} {record:>6} | "
              f"{update / per_thread:8.1f} {update / per_thread * k * q / p:14.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
