"""How long a small job waits in `smd serve` (embedded SQLite, filesystem broker): submission to running,
and to succeeded, and how long the service takes to stop, for each arm of settings in one run: a broker
polling interval (SMD_BROKER_POLL_SECONDS) and whether the worker imports the simulators before it forks
(SMD_WORKER_PRELOAD). The first arm is the baseline: kombu's own default of 1 s, no preload.

    .venv/bin/python bench/serve_latency.py [--arms 1.0:off,0.1:off,0.1:on] [--jobs 8]

Each arm starts its own `smd serve` (auth off, a fresh state folder), lets it settle, submits ``--jobs``
tiny nrq jobs one after another (the next once the previous succeeded), then SIGTERMs its process group
and times the exit. Prints the first job's time to succeeded (the worker's first: after 13 s of idle service),
then the others' medians, their ratio to the first arm and the idle service's CPU (all its processes, over 10 s).
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _machine import load_average

SPEC = {"kind": "nrq", "seed": 0, "params": {"dim": 10, "trials": 16, "steps": 200, "record_every": 20}}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU of the live processes of a process group (Linux /proc)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:   # fields after the name: state, ppid, pgrp, ...
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def arm(poll: float, preload: str, jobs: int) -> dict[str, float]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="smd-latency-") as state:
        env = {**os.environ, "SMD_STATE_DIR": state, "SMD_PORT": str(port), "SMD_AUTH": "off",
               "SMD_BROKER_POLL_SECONDS": str(poll), "SMD_WORKER_PRELOAD": preload}
        log = open(Path(state) / "serve.log", "w")
        proc = subprocess.Popen([sys.executable, "-m", "smdcli.main", "serve"], env=env, start_new_session=True,
                                stdout=log, stderr=subprocess.STDOUT)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"smd serve did not start: {Path(state, 'serve.log').read_text()[-2000:]}")
                time.sleep(0.1)
            time.sleep(3)   # the worker child up and idle
            cpu0 = group_cpu_seconds(proc.pid)
            time.sleep(10)
            idle_cpu = (group_cpu_seconds(proc.pid) - cpu0) / 10
            to_running, to_done = [], []
            for _ in range(jobs + 1):   # the first job is reported apart: the pool process's first
                start = time.monotonic()
                job = client.post("/v1/experiments", json=SPEC).json()["id"]
                running = None
                while True:
                    status = client.get(f"/v1/experiments/{job}").json()["status"]
                    if status != "queued" and running is None:
                        running = time.monotonic() - start
                    if status in ("succeeded", "failed", "cancelled"):
                        break
                    time.sleep(0.01)
                to_running.append(running)
                to_done.append(time.monotonic() - start)
        finally:
            start = time.monotonic()
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            stop = time.monotonic() - start
            log.close()
    return {"first": to_done[0], "running": statistics.median(to_running[1:]), "done": statistics.median(to_done[1:]),
            "stop": stop, "idle_cpu": idle_cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default="1.0:off,0.1:off,0.1:on",
                        help="POLL:PRELOAD pairs (polling interval in s, on|off), the first the baseline")
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    arms = [(float(poll), preload) for poll, preload in (a.split(":") for a in args.arms.split(","))]
    print(f"# smd serve, {args.jobs} tiny nrq jobs one after another; load average {load_average()}")
    print(f"{'poll (s)':>8} {'preload':>7} {'first job (s)':>13} {'to running (s)':>14} {'to succeeded (s)':>16} {'x baseline':>10} "
          f"{'stop (s)':>8} {'idle CPU':>9}")
    base = None
    for poll, preload in arms:
        r = arm(poll, preload, args.jobs)
        base = base or r["done"]
        print(f"{poll:>8g} {preload:>7} {r['first']:>13.3f} {r['running']:>14.3f} {r['done']:>16.3f} {r['done'] / base:>10.2f} {r['stop']:>8.2f} "
              f"{100 * r['idle_cpu']:>8.2f}%")
    print(f"# load average at the end {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
