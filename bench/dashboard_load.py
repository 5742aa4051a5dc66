"""Many open dashboards watching running jobs: latency of the polls they send, against `smd serve`.

It starts ``smd serve`` the way a user runs it (the API and its embedded, supervised worker; SQLite and
the filesystem broker in a temporary SMD_STATE_DIR, SMD_AUTH=off, a free loopback port,
SMD_LOG_LEVEL=WARNING so that uvicorn writes no access-log line per request), waits for /readyz, and
then, for each N of --dashboards:

  1. submits --jobs nrq jobs (dim 10, 1000 trials, record_every 100, --steps steps, 300 000 by
     default: long enough to run through the measurement, ~75 s alone on a 2-core machine; each is
     cancelled at its end) and waits until every one is running and has written points
     (SMD_WORKER_CONCURRENCY = --jobs, so that they all run at once). The job's size matters: its
     theory series (steps / 100 points each, ~240 kB of JSON by default) are stored on its row;
  2. opens N simulated dashboards, their starts spread evenly over one 2 s period, each watching one
     of the jobs (round-robin). Every 2 s (--period) a dashboard polls as the dashboard's experiment
     page does, one request after the other:
        GET /v1/experiments/{id}                                       If-None-Match: <its last ETag>
        GET /v1/experiments/{id}/results?since_step=<last step seen>&max_points=2000   If-None-Match
     Its first round has no ETag yet and asks for the whole document (no since_step), as the page
     does when it opens: those results are counted as ``open``, the later ones as ``results``.
     A poll that overruns the period starts the next one at once (no catch-up burst);
  3. after --duration seconds lets the polls in flight finish, checks that the jobs were still
     running at the end, cancels them and waits until they have ended.

Before the first N, the largest N polls for --warmup seconds (4 by default; not counted), so that
the measurements see a server that has been in use: on a freshly started server, 200 dashboards
waited up to 170 ms for their answers during their first second (p99 of a 15 s run 117 ms), and
the same load right after within 35 ms (p99 17 ms). Between measurements the server idles a few seconds.

Clients. Each dashboard has its own connection, kept alive between its polls, as a browser tab keeps
its own: the server sees N persistent connections, which is what N open dashboards cost it. By default
(--client light) the requests go through bench/_http1.py, a minimal HTTP/1.1 client on uvloop (about a
fifth of httpx's CPU per request: on 2 cores the client's CPU is CPU the server lacks, where real
dashboards run in browsers on other machines); --client httpx sends them through an httpx.AsyncClient
per dashboard with a one-connection pool, on asyncio's loop, as the bench's first versions did. The idle
connection is dropped after 4 s, before uvicorn's 5 s keep-alive timeout can close it under a request.
Every request has a 10 s timeout.

Output, per N: requests, requests/s, the share answered 304 Not Modified, errors (any status other
than 2xx/304, an exception or a timeout), p50 and p99 latency in ms as the client sees them (request
sent → body read), per endpoint (status, results, open) and overall; the CPU time the API process,
the worker (its main process and pool) and this client used during the measurement, in cores
(CPU seconds ÷ wall seconds), and the API's CPU time per request (less sensitive than latency to
other load on the machine, until the API runs short of CPU); the load average. Then one summary table over all N, the check of the
issue's targets (p99 ≤ 100 ms and 0 errors at N = 200 and at N = 500, one job running) and the problems of the
server log. Exit status 0 unless --strict is given and the target was missed.

Everything shares the machine: on 2 cores the client's own CPU time is part of what is measured.

    .venv/bin/python bench/dashboard_load.py [--dashboards 50,200,500 --duration 25 --jobs 1]
    .venv/bin/python bench/dashboard_load.py --dashboards 200 --duration 10   # quick check
    .venv/bin/python bench/dashboard_load.py --api-workers 1                  # the single-process baseline
    .venv/bin/python bench/dashboard_load.py --url http://api-host:8000 --key KEY [--api-pid PID]
                                              # a running server (PostgreSQL, Redis, workers elsewhere)

With SMD_API_WORKERS > 1 the API's CPU is that of all its processes.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import httpx  # noqa: E402

try:
    import uvloop
except ImportError:  # pragma: no cover - the service installs it
    uvloop = None
from _http1 import Connection  # noqa: E402
from _machine import load_average  # noqa: E402
from load import _die_with_parent, log_problems, percentile, stop_serve, tail, wait_ready  # noqa: E402

from tests.integration.procs import children, cmdline  # noqa: E402
from tests.servers import free_port  # noqa: E402

ENDPOINTS = ("status", "results", "open")
MAX_POINTS = 2000        # as the dashboard (api/dashboard/static/charts.js MAX_POINTS)
TIMEOUT = 10.0           # seconds, every request
KEEPALIVE = 4.0          # seconds an idle connection is kept (uvicorn closes them after 5)
TARGET_NS, TARGET_P99_MS = (200, 500), 100.0


def job_spec(steps: int, seed: int) -> dict:
    return {"kind": "nrq", "seed": seed, "device": "cpu", "name": f"dashboard-load-{seed}",
            "params": {"dim": 10, "eig_low": 1.0, "eig_high": 2.0, "noise_std": 1.0, "lr": 0.1,
                       "weight_decay": 0.01, "trials": 1000, "steps": steps, "record_every": 100}}


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)   # seconds, every request (errors too)
    not_modified: int = 0
    errors: dict[str, int] = field(default_factory=dict)   # kind -> count

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


@dataclass
class Phase:
    n: int
    elapsed: float
    stats: dict[str, Stats]
    cpu: dict[str, float]          # cores used during the measurement, by part
    note: str = ""

    def rows(self) -> list[tuple[str, list[float], int, int]]:
        """(name, sorted latencies, 304s, errors) per endpoint, then the total."""
        rows = [(name, sorted(s.latencies), s.not_modified, sum(s.errors.values())) for name, s in self.stats.items()]
        rows.append(("total", sorted(x for r in rows for x in r[1]), sum(r[2] for r in rows), sum(r[3] for r in rows)))
        return rows

    @property
    def total(self) -> tuple[str, list[float], int, int]:
        return self.rows()[-1]


class HttpxConnection:
    """The same GETs through httpx (``--client httpx``): a one-connection pool, as the bench's first versions."""

    def __init__(self, base: str, headers: dict[str, str] | None = None, timeout: float = TIMEOUT,
                 keepalive: float = KEEPALIVE):
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=keepalive)
        self.client = httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits, verify=False,
                                        headers=headers or {})

    async def get(self, path: str, params: dict | None = None, headers: dict[str, str] | None = None):
        return await self.client.get(path, params=params, headers=headers)

    async def aclose(self) -> None:
        await self.client.aclose()


CLIENTS = {"light": Connection, "httpx": HttpxConnection}


class Dashboard:
    """One open experiment page: its own connection, the last ETags and the last step it has seen."""

    def __init__(self, base: str, job_id: str, stats: dict[str, Stats], headers: dict[str, str] | None = None,
                 client: str = "light"):
        self.client = CLIENTS[client](base, headers, timeout=TIMEOUT, keepalive=KEEPALIVE)
        self.path, self.stats = f"/v1/experiments/{job_id}", stats
        self.etags: dict[str, str] = {}
        self.last_step: int | None = None

    async def get(self, endpoint: str, path: str, params: dict | None = None):
        key = "results" if endpoint == "open" else endpoint
        headers = {"If-None-Match": self.etags[key]} if key in self.etags else {}
        stats = self.stats[endpoint]
        t0 = time.perf_counter()
        try:
            response = await self.client.get(path, params=params, headers=headers)
        except Exception as exc:  # timeouts, refused or reset connections
            stats.latencies.append(time.perf_counter() - t0)
            stats.error(type(exc).__name__)
            return None
        stats.latencies.append(time.perf_counter() - t0)
        if response.status_code == 304:
            stats.not_modified += 1
            return None
        if not 200 <= response.status_code < 300:
            stats.error(f"HTTP {response.status_code}")
            return None
        if "etag" in response.headers:
            self.etags[key] = response.headers["etag"]
        return response

    async def poll(self) -> None:
        await self.get("status", self.path)
        if self.last_step is None:
            response = await self.get("open", f"{self.path}/results", {"max_points": MAX_POINTS})
        else:
            response = await self.get("results", f"{self.path}/results",
                                      {"since_step": self.last_step, "max_points": MAX_POINTS})
        if response is not None:
            steps = json.loads(response.content)["series"].get("step") or []
            if steps:
                self.last_step = steps[-1]

    async def run(self, start: float, period: float, deadline: float) -> None:
        """Poll at start, start + period, ... until the deadline (a late poll: the next one at once)."""
        tick = start
        while tick < deadline:
            await asyncio.sleep(max(0.0, tick - time.monotonic()))
            await self.poll()
            tick = max(tick + period, time.monotonic())


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        found += kids
        todo += kids
    return found


def cpu_parts(api_pid: int | None) -> dict[str, float]:
    """CPU seconds so far of the API (its process and, with SMD_API_WORKERS > 1, its uvicorn processes),
    of the worker (`smd serve`'s embedded worker and its pool) and of this client; without a local server
    (--url), the client's only."""
    times = os.times()
    out = {"client": times.user + times.system}
    if api_pid is None:
        return out
    below = descendants(api_pid)
    workers = {p for p in below if "smdcli.main worker" in cmdline(p)}
    workers |= {d for w in list(workers) for d in descendants(w)}
    out["api"] = cpu_seconds(api_pid) + sum(cpu_seconds(p) for p in below if p not in workers)
    out["worker"] = sum(cpu_seconds(p) for p in workers)
    return {"api": out["api"], "worker": out["worker"], "client": out["client"]}


async def wait_jobs(client: httpx.AsyncClient, ids: list[str], done, timeout: float, what: str) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        states = [(await client.get(f"/v1/experiments/{i}")).raise_for_status().json() for i in ids]
        if all(done(s) for s in states):
            return states
        if time.monotonic() > deadline:
            raise RuntimeError(f"jobs not {what} within {timeout:g} s: "
                               f"{[(s['id'], s['status'], s.get('error')) for s in states]}")
        await asyncio.sleep(0.3)


async def phase(args, base: str, api_pid: int | None, n: int, seed: int, duration: float) -> Phase:
    # a long timeout: after an overloaded phase the server may still be working off abandoned requests
    async with httpx.AsyncClient(base_url=base, timeout=300.0, headers=auth_headers(args)) as client:
        ids = []
        for j in range(args.jobs):
            r = await client.post("/v1/experiments", json=job_spec(args.steps, seed + j))
            r.raise_for_status()
            ids.append(r.json()["id"])
        if not ids:  # no job: the dashboards watch an ended one (every poll a 304 once they have its ETags)
            r = await client.post("/v1/experiments", json=job_spec(1000, seed))
            ids = [r.raise_for_status().json()["id"]]
            await wait_jobs(client, ids, lambda s: s["status"] == "succeeded", 60, "finished")
            steps0 = 0
        else:
            running = await wait_jobs(client, ids, lambda s: s["status"] == "running" and s["step"] > 0, 60, "running")
            steps0 = sum(s["step"] for s in running)

        stats = {name: Stats() for name in ENDPOINTS}
        dashboards = [Dashboard(base, ids[i % len(ids)], stats, auth_headers(args), args.client) for i in range(n)]
        try:
            cpu0, t0 = cpu_parts(api_pid), time.monotonic()
            start = t0 + 0.05
            deadline = start + duration
            await asyncio.gather(*(d.run(start + args.period * i / n, args.period, deadline)
                                   for i, d in enumerate(dashboards)))
            elapsed = time.monotonic() - start
            cpu1 = cpu_parts(api_pid)
        finally:
            await asyncio.gather(*(d.client.aclose() for d in dashboards))

        note = ""
        if args.jobs:
            states = [(await client.get(f"/v1/experiments/{i}")).json() for i in ids]
            t1 = time.monotonic()
            note = f"jobs: {(sum(s['step'] for s in states) - steps0) / (t1 - t0):.0f} steps/s during the measurement"
            ended = [s["id"] for s in states if s["status"] != "running"]
            if ended:
                note += f"\nWARNING: {len(ended)} job(s) ended before the end of the measurement: raise --steps"
            for i in ids:
                await client.post(f"/v1/experiments/{i}/cancel")
            await wait_jobs(client, ids, lambda s: s["status"] in ("succeeded", "failed", "cancelled"), 60, "ended")
    cpu = {part: (cpu1[part] - cpu0[part]) / elapsed for part in cpu0}
    return Phase(n, elapsed, stats, cpu, note)


def print_phase(p: Phase) -> None:
    head = (f"{'endpoint':<9} {'requests':>9} {'req/s':>7} {'304':>6} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8}")
    print(head)
    print("-" * len(head))
    rows = p.rows()
    for i, (name, lat, not_modified, errors) in enumerate(rows):
        if i == len(rows) - 1:
            print("-" * len(head))
        share = f"{not_modified / len(lat):.0%}" if lat else "-"
        print(f"{name:<9} {len(lat):>9} {len(lat) / p.elapsed:>7.1f} {share:>6} {errors:>7} "
              f"{percentile(lat, 50) * 1e3:>8.1f} {percentile(lat, 99) * 1e3:>8.1f}")
    kinds = {f"{name}: {kind}": count for name, s in p.stats.items() for kind, count in s.errors.items()}
    if kinds:
        print("errors: " + ", ".join(f"{kind} × {count}" for kind, count in kinds.items()))
    requests = len(rows[-1][1])
    per_request = (f"; API {p.cpu['api'] * p.elapsed / max(1, requests) * 1e3:.2f} ms CPU per request"
                   if "api" in p.cpu else "; API CPU not measured (a server elsewhere)")
    print("CPU (cores): " + ", ".join(f"{part} {cores:.2f}" for part, cores in p.cpu.items()) + per_request
          + f"; load average {load_average()}")
    if p.note:
        print(p.note)


def print_summary(phases: list[Phase], jobs: int) -> bool:
    print()
    print(f"summary ({jobs} job(s) running): latency in ms")
    names = [*ENDPOINTS, "total"]
    head = f"{'N':>5} " + " ".join(f"{name + ' p50/p99':>18}" for name in names) + f" {'req':>7} {'304':>5} {'errors':>6}"
    print(head)
    print("-" * len(head))
    for p in phases:
        rows = {r[0]: r for r in p.rows()}
        cells = " ".join(f"{percentile(rows[n][1], 50) * 1e3:>8.1f} /{percentile(rows[n][1], 99) * 1e3:>8.1f}"
                         for n in names)
        _, lat, not_modified, errors = rows["total"]
        print(f"{p.n:>5} {cells} {len(lat):>7} {not_modified / max(1, len(lat)):>5.0%} {errors:>6}")
    ok = True
    for n in TARGET_NS:
        target = next((p for p in phases if p.n == n), None)
        if target is None or jobs != 1:
            print(f"target (N = {n}, one job running: p99 ≤ {TARGET_P99_MS:g} ms, 0 errors): not measured")
            continue
        _, lat, _, errors = target.total
        p99 = percentile(lat, 99) * 1e3
        met = p99 <= TARGET_P99_MS and errors == 0
        ok &= met
        print(f"target at N = {n}, one job running: p99 {p99:.1f} ms (≤ {TARGET_P99_MS:g}), "
              f"{errors} error(s) (0): {'PASS' if met else 'FAIL'}")
    return ok


def run_loop(args, main):
    """``--client light``: on uvloop when it is installed (the service installs it), less of the client's CPU;
    ``httpx``: on asyncio's own loop, as the bench's first versions ran."""
    return uvloop.run(main) if uvloop and args.client == "light" else asyncio.run(main)


def auth_headers(args) -> dict[str, str]:
    return {"Authorization": f"Bearer {args.key}"} if args.key else {}


async def bench(args, base: str, proc: subprocess.Popen | None, log: Path | None) -> list[Phase]:
    if proc is not None and log is not None:
        t = time.monotonic()
        await wait_ready(base, proc, log, args.startup_timeout)
        print(f"smd serve ready after {time.monotonic() - t:.1f} s", flush=True)
    pid = proc.pid if proc is not None else args.api_pid
    if args.warmup > 0:
        n = max(args.dashboards)
        print(f"warm-up: {n} dashboards for {args.warmup:g} s (not counted) ...", flush=True)
        await phase(args, base, pid, n, seed=10_000, duration=args.warmup)
    phases = []
    for k, n in enumerate(args.dashboards):
        print(f"\nN = {n} dashboards, {args.jobs} job(s) running, {args.duration:g} s, "
              f"a poll every {args.period:g} s; load average {load_average()} ...", flush=True)
        phases.append(await phase(args, base, pid, n, seed=100 * k, duration=args.duration))
        print_phase(phases[-1])
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"smd serve died (exit code {proc.returncode}); log:\n{tail(log)}")
    return phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dashboards", default="50,200,500",
                        help="comma-separated numbers of dashboards, one measurement each (default 50,200,500)")
    parser.add_argument("--duration", type=float, default=25.0, help="seconds of polling per N (default 25)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="jobs running during each measurement (default 1; 0: the dashboards watch an ended job)")
    parser.add_argument("--steps", type=int, default=300_000,
                        help="steps of each job, enough to outlast the measurement (default 300000; cancelled "
                             "after it). Its theory, stored on the row, holds steps / 100 points per series")
    parser.add_argument("--warmup", type=float, default=4.0,
                        help="seconds of polling by the largest N before the first measurement, not counted "
                             "(default 4; 0: none)")
    parser.add_argument("--period", type=float, default=2.0, help="seconds between a dashboard's polls (default 2)")
    parser.add_argument("--log-level", default="WARNING", help="SMD_LOG_LEVEL of smd serve (default WARNING)")
    parser.add_argument("--startup-timeout", type=float, default=120.0, help="seconds to wait for readiness")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target (N = 200, 500) is missed")
    parser.add_argument("--api-workers", type=int, default=None,
                        help="SMD_API_WORKERS of the smd serve started here (default: its default, the cores)")
    parser.add_argument("--url", default=None,
                        help="poll this running server instead of starting smd serve (any database: PostgreSQL "
                             "too); it needs a worker for --jobs. Its CPU is measured only with --api-pid")
    parser.add_argument("--key", default=None, help="API key for --url (Authorization: Bearer)")
    parser.add_argument("--api-pid", type=int, default=None,
                        help="with --url: the local `smd api`/`smd serve` process whose CPU (and its children's) "
                             "to measure")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="light",
                        help="how the dashboards send their requests: light (default; bench/_http1.py, a fraction "
                             "of httpx's CPU, which this machine's server would otherwise lack) or httpx")
    args = parser.parse_args(argv)
    if args.client == "light" and args.url and not args.url.startswith("http://"):
        parser.error("--client light: an http:// --url (https: --client httpx)")
    try:
        args.dashboards = [int(x) for x in args.dashboards.split(",") if x.strip()]
    except ValueError:
        parser.error("--dashboards: comma-separated integers")
    if not args.dashboards or min(args.dashboards) < 1 or args.duration <= 0 or args.jobs < 0 or args.period <= 0 \
            or args.warmup < 0:
        parser.error("--dashboards ≥ 1, --duration > 0, --jobs ≥ 0, --period > 0, --warmup ≥ 0")

    print(f"bench/dashboard_load.py: python {sys.version.split()[0]}, {os.cpu_count()} CPUs, client {args.client}"
          f"{' (httpx ' + httpx.__version__ + ')' if args.client == 'httpx' else ''}, event loop "
          f"{'uvloop' if uvloop and args.client == 'light' else 'asyncio'}; load average at start {load_average()}", flush=True)
    if args.url:
        print(f"server: {args.url} (not started here)", flush=True)
        phases = run_loop(args, bench(args, args.url.rstrip("/"), None, None))
        ok = print_summary(phases, args.jobs)
        print(f"load average at the end {load_average()}")
        return 1 if args.strict and not ok else 0
    with tempfile.TemporaryDirectory(prefix="smd-dashboards-") as state:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SMD_")}
        env.update(SMD_STATE_DIR=state, SMD_PORT=str(port), SMD_HOST="127.0.0.1", SMD_AUTH="off",
                   SMD_LOG_LEVEL=args.log_level, SMD_WORKER_CONCURRENCY=str(max(1, args.jobs)), PYTHONUNBUFFERED="1")
        if args.api_workers is not None:
            env["SMD_API_WORKERS"] = str(args.api_workers)
        print(f"smd serve: SMD_API_WORKERS={env.get('SMD_API_WORKERS', 'default (cores)')}", flush=True)
        log = Path(state) / "serve.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "smdcli.main", "serve"], cwd=ROOT, env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=_die_with_parent)
        try:
            phases = run_loop(args, bench(args, f"http://127.0.0.1:{port}", proc, log))
        finally:
            stop_serve(proc)
        tracebacks, kinds = log_problems(log)
    ok = print_summary(phases, args.jobs)
    print(f"server log: {tracebacks} traceback(s), {sum(kinds.values())} warning/error line(s)"
          + "".join(f"\n  {n:>6} × {line}" for line, n in kinds.most_common(10)))
    print(f"load average at the end {load_average()}")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
