"""Run presets at a size with the engine here (no service) and print the README's "Reproducing the
seeds" table: every check's claim id, predicted and measured values, tolerance and verdict.

    .venv/bin/python scripts/reproduce_seeds.py [-o DIR] [-j N] [--size quick] [--seeds S ...] [PRESET_ID ...]

Each preset runs as `smd presets run ID --local -o DIR/ID -j N` (its figure.png and checks.json stay
in DIR/ID); without ids, every preset of the catalog, in catalog order. ``--seeds`` replaces every
preset's seeds (a preset that cannot use them refuses before running: its row says so).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "—" if value is None else str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ids", nargs="*")
    parser.add_argument("-o", "--output", type=Path, default=Path("reproduce"))
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--size", default="quick")
    parser.add_argument("--seeds", type=int, nargs="+", help="run every preset with these seeds instead of its own")
    args = parser.parse_args()
    from smdengine import PRESETS

    rows = ["| preset (seed, figure) | check | predicted | measured | tolerance | verdict |", "|---|---|---|---|---|---|"]
    for preset_id in args.ids or list(PRESETS):
        preset = PRESETS[preset_id]
        out = args.output / preset_id
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "smdcli.main", "presets", "run", preset_id, "--local",
                               "-o", str(out), "-j", str(args.jobs), "--size", args.size,
                               "--no-limit",   # a reproduction runs each preset whole (one paper size is 6.9e10 work)
                               *(["--seeds", *map(str, args.seeds)] if args.seeds else [])],
                              capture_output=True, text=True)
        seconds = time.monotonic() - started
        print(f"{preset_id}: exit {done.returncode} in {seconds:.0f} s", file=sys.stderr)
        if not (out / "checks.json").exists():
            print(done.stderr[-2000:], file=sys.stderr)
            reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
            rows.append(f"| `{preset_id}` | (no checks: exit {done.returncode}; {reason}) | | | | |")
            continue
        label = f"`{preset_id}` ({preset.seed}, {preset.figure}; {seconds:.0f} s)"
        for check in json.loads((out / "checks.json").read_text())["checks"]:
            rows.append(f"| {label} | {check['id']} | {fmt(check['predicted'])} | {fmt(check['measured'])} | "
                        f"{fmt(check['tolerance'])} | {check['verdict']} |")
            label = ""
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
