"""Load on the HTTP API: many pollers and a steady stream of submissions against `smd serve`.

It starts a private Redis and PostgreSQL (tests/servers.py: free loopback ports, temporary data,
removed afterwards), then ``smd serve`` (the API and its embedded, supervised Celery worker) as a
subprocess on a free port with

    SMD_BROKER_URL=<redis>  SMD_DATABASE_URL=<postgres>  SMD_STATE_DIR=<tmp>  SMD_PORT=<port>

and waits for /readyz (/healthz where the API has no /readyz). For --duration seconds, in one
asyncio process with one httpx.AsyncClient (a connection pool of --clients + 30 × --rate + 10, so
that requests do not wait for a connection in the client; 30 s timeout):

  submitter  POST /v1/experiments at --rate per second, open loop (each POST is its own task, so a
             slow answer does not lower the rate), a tiny nrq spec: dim 10, 16 trials, 200 steps,
             record_every 20 (a few ms of engine time).
  clients    --clients closed-loop pollers, no think time (--think S: a random pause of ~S seconds
             between rounds, and the clients' starts spread over S): each round picks one of the 50
             most recently submitted jobs and GETs /v1/experiments/{id}, then
             /v1/experiments/{id}/results?max_points=50; about every 10th round also
             GET /v1/experiments?limit=20.

Per endpoint (submit, status, results, list) it records the requests, the errors (a non-2xx answer
or an exception, tallied by kind: "HTTP 500", "ReadTimeout", ...) and the latencies, and prints a
table (requests, requests/s, errors, p50 and p99 in ms) with totals, then the experiments by status
as the API reports them at the end (how many of the submitted jobs finished), and the tracebacks
and warning/error lines of the server's log, counted by text. Requests in flight at the deadline
are allowed to finish (they are counted; the rate divides by the whole load phase).

Exit status 1 when any request failed, any job failed or the server died (the target is 0
errors), else 0. Without
redis-server or the PostgreSQL binaries it prints "skipped" and exits 0 (as ``make bench`` needs).

The client, the server, its worker, PostgreSQL and Redis share the machine: on 2 cores the
pollers' own CPU time is part of what is measured (latencies are seen by the client, including
its event loop's delays). The load average is printed at the start and the end.

    .venv/bin/python bench/load.py [--duration 60 --clients 200 --rate 20]
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import math
import os
import random
import re
import signal
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
from _machine import load_average  # noqa: E402

from tests.servers import ServerNotAvailable, free_port, fresh_database, postgres_server, redis_server  # noqa: E402

ENDPOINTS = ("submit", "status", "results", "list")
RECENT = 50           # clients poll the jobs among the last RECENT submitted
LIST_EVERY = 10       # a client lists experiments about once in this many rounds
TIMEOUT = 30.0        # seconds, every request
KEEPALIVE = 2.0       # seconds an idle client connection is kept (uvicorn closes them after 5)
STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")


def tiny_spec(seed: int) -> dict:
    """As tests/conftest.py small_spec, smaller: a few ms of engine time."""
    return {"kind": "nrq", "seed": seed, "device": "cpu", "name": f"load-{seed}",
            "params": {"dim": 10, "eig_low": 1.0, "eig_high": 2.0, "noise_std": 1.0, "lr": 0.1,
                       "weight_decay": 0.01, "trials": 16, "steps": 200, "record_every": 20}}


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)   # seconds, every request (errors too)
    errors: collections.Counter = field(default_factory=collections.Counter)

    @property
    def requests(self) -> int:
        return len(self.latencies)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of an ascending list; nan when empty."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


class Load:
    def __init__(self, client: httpx.AsyncClient, clients: int, rate: float, duration: float, think: float = 0.0):
        self.client, self.n_clients, self.rate, self.duration = client, clients, rate, duration
        self.think = think
        self.stats = {name: Stats() for name in ENDPOINTS}
        self.submitted: list[str] = []
        self.recent: collections.deque[str] = collections.deque(maxlen=RECENT)
        self.stop = asyncio.Event()
        self.first_id = asyncio.Event()
        self.error_samples: dict[str, str] = {}   # error kind -> one example (url, body)

    async def request(self, endpoint: str, method: str, url: str, **kwargs) -> httpx.Response | None:
        stats = self.stats[endpoint]
        t0 = time.perf_counter()
        try:
            response = await self.client.request(method, url, **kwargs)
        except Exception as exc:  # timeouts, refused/reset connections, pool timeouts ...
            stats.latencies.append(time.perf_counter() - t0)
            kind = type(exc).__name__
            stats.errors[kind] += 1
            self.error_samples.setdefault(f"{endpoint} {kind}", f"{method} {url}: {exc!r}"[:300])
            return None
        stats.latencies.append(time.perf_counter() - t0)
        if not 200 <= response.status_code < 300:
            kind = f"HTTP {response.status_code}"
            stats.errors[kind] += 1
            self.error_samples.setdefault(f"{endpoint} {kind}", f"{method} {url}: {response.text[:300]}")
            return None
        return response

    async def submit_one(self, seed: int) -> None:
        response = await self.request("submit", "POST", "/v1/experiments", json=tiny_spec(seed))
        if response is not None:
            job_id = response.json()["id"]
            self.submitted.append(job_id)
            self.recent.append(job_id)
            self.first_id.set()

    async def submitter(self) -> None:
        tasks: list[asyncio.Task] = []
        start, i = time.monotonic(), 0
        while not self.stop.is_set():
            tasks.append(asyncio.create_task(self.submit_one(i)))
            i += 1
            delay = start + i / self.rate - time.monotonic()
            if delay > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), delay)
        await asyncio.gather(*tasks)

    async def poller(self, number: int) -> None:
        rng = random.Random(number)
        rounds = rng.randrange(LIST_EVERY)  # spread the list calls over the clients
        await self.first_id.wait()
        if self.think > 0:  # with a think time, the clients' rounds are spread out from the start
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), rng.uniform(0, self.think))
        while not self.stop.is_set():
            job_id = rng.choice(self.recent)
            await self.request("status", "GET", f"/v1/experiments/{job_id}")
            if self.stop.is_set():
                break
            await self.request("results", "GET", f"/v1/experiments/{job_id}/results",
                               params={"max_points": 50})
            rounds += 1
            if rounds % LIST_EVERY == 0 and not self.stop.is_set():
                await self.request("list", "GET", "/v1/experiments", params={"limit": 20})
            if self.think > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), self.think * rng.uniform(0.5, 1.5))

    async def run(self) -> float:
        """The load phase; returns its wall time (deadline + the requests in flight then)."""
        t0 = time.monotonic()
        tasks = [asyncio.create_task(self.submitter())]
        tasks += [asyncio.create_task(self.poller(n)) for n in range(self.n_clients)]
        try:
            await asyncio.sleep(self.duration)
        finally:
            self.stop.set()
            self.first_id.set()  # releases pollers still waiting (if no submission ever succeeded)
            await asyncio.gather(*tasks)
        return time.monotonic() - t0


def print_table(stats: dict[str, Stats], elapsed: float) -> None:
    head = f"{'endpoint':<9} {'requests':>9} {'req/s':>8} {'errors':>7} {'p50 ms':>8} {'p99 ms':>8}"
    print(head)
    print("-" * len(head))
    rows = [(name, s.latencies, sum(s.errors.values())) for name, s in stats.items()]
    rows.append(("total", [x for s in stats.values() for x in s.latencies], sum(r[2] for r in rows)))
    for i, (name, lat, errors) in enumerate(rows):
        if i == len(rows) - 1:
            print("-" * len(head))
        lat = sorted(lat)
        print(f"{name:<9} {len(lat):>9} {len(lat) / elapsed:>8.1f} {errors:>7} "
              f"{percentile(lat, 50) * 1e3:>8.1f} {percentile(lat, 99) * 1e3:>8.1f}")


async def status_counts(client: httpx.AsyncClient) -> dict[str, int]:
    """Experiments by status, read one status after another from the terminal ones back to queued,
    so a job that moves on between two reads is missed, never counted twice; "total" is one read."""
    counts = {}
    for status in (*STATUSES[2:], "running", "queued", None):
        r = await client.get("/v1/experiments", params={"limit": 1, **({"status": status} if status else {})})
        r.raise_for_status()
        counts[status or "total"] = r.json()["total"]
    return counts


async def wait_ready(base: str, proc: subprocess.Popen, log: Path, timeout: float) -> str:
    """Poll /readyz (or /healthz where /readyz is 404) until 200; returns the path that answered."""
    deadline = time.monotonic() + timeout
    path, last = "/readyz", "no answer"
    async with httpx.AsyncClient(base_url=base, timeout=5.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"smd serve exited with code {proc.returncode}; log:\n{tail(log)}")
            try:
                r = await client.get(path)
                if r.status_code == 404 and path == "/readyz":
                    path = "/healthz"
                    continue
                if r.status_code == 200:
                    return path
                last = f"{path}: HTTP {r.status_code} {r.text[:200]}"
            except httpx.HTTPError as exc:
                last = f"{path}: {exc!r}"
            await asyncio.sleep(0.2)
    raise RuntimeError(f"smd serve not ready within {timeout:g} s ({last}); log:\n{tail(log)}")


def tail(path: Path, limit: int = 4000) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-limit:]
    return "(no log)"


def _die_with_parent() -> None:  # in the child, before exec: SIGTERM it if this bench dies
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop_serve(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM the process group of smd serve (uvicorn, the worker and its pool), SIGKILL after timeout (its
    worker's warm shutdown 20 s, a cold one's soft shutdown time 30 s, 5 s more: smdcli.serve)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"smd serve did not stop within {timeout:g} s; SIGKILL", flush=True)
    with contextlib.suppress(ProcessLookupError):  # leftovers of the group (e.g. a worker child)
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def log_problems(log: Path) -> tuple[int, collections.Counter]:
    """Tracebacks in the server log, and their exception lines and the WARNING/ERROR/CRITICAL lines
    counted by text (timestamps dropped, addresses and ids masked)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    lines = text.splitlines()
    kinds: collections.Counter = collections.Counter()

    def mask(line: str) -> str:
        line = re.sub(r"^\d{4}-\d\d-\d\d [\d:,.]+ ", "", line)
        return re.sub(r"\b[0-9a-f]{32}\b", "<id>", re.sub(r"0x[0-9a-f]+", "0x…", line))[:200]

    for i, line in enumerate(lines):
        if line.startswith("Traceback"):
            # the exception line: the first non-indented line after the traceback body
            for nxt in lines[i + 1:i + 500]:
                if nxt and not nxt.startswith((" ", "Traceback")):
                    kinds[mask(nxt)] += 1
                    break
        elif re.search(r"\b(WARNING|ERROR|CRITICAL)\b", line):
            kinds[mask(line)] += 1
    return text.count("Traceback (most recent call last)"), kinds


async def bench(args, base: str, proc: subprocess.Popen, log: Path) -> tuple[int, int | str, bool]:
    """Readiness, the load phase and its report; returns (request errors, failed jobs, server alive)."""
    t = time.monotonic()
    probe = await wait_ready(base, proc, log, args.startup_timeout)
    print(f"smd serve ready ({probe}) after {time.monotonic() - t:.1f} s", flush=True)
    # room for every poller and for the submissions of one timeout period (a slow server does not
    # queue them in the client's pool)
    pool = args.clients + int(args.rate * TIMEOUT) + 10
    # idle connections expire before uvicorn's keep-alive timeout (5 s) closes them: reusing one the
    # server is closing at that moment fails with a ReadError (a client-side race, not a server error)
    limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool, keepalive_expiry=KEEPALIVE)
    async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT, limits=limits) as client:
        load = Load(client, args.clients, args.rate, args.duration, args.think)
        print(f"load: {args.clients} clients (think time {args.think:g} s), {args.rate:g} submissions/s, "
              f"{args.duration:g} s ...", flush=True)
        elapsed = await load.run()
        try:
            counts = await status_counts(client)
        except Exception as exc:
            print(f"could not count the jobs by status: {exc!r}")
            counts = None
    alive = proc.poll() is None

    print()
    print(f"load phase {elapsed:.1f} s (deadline {args.duration:g} s + requests in flight); "
          f"load average now {load_average()}")
    print()
    print_table(load.stats, elapsed)
    errors = sum(sum(s.errors.values()) for s in load.stats.values())
    if errors:
        print()
        print("errors by kind:")
        for name, s in load.stats.items():
            for kind, n in s.errors.most_common():
                print(f"  {name:<8} {kind:<28} {n:>7}   e.g. {load.error_samples.get(f'{name} {kind}', '')}")
    print()
    if counts is None:
        print(f"jobs submitted: {len(load.submitted)} accepted; by status: unavailable (see above)")
    else:
        finished = counts["succeeded"] + counts["failed"] + counts["cancelled"]
        print(f"jobs submitted: {len(load.submitted)} accepted, {counts['total']} in the database; "
              f"finished at the end: {finished} "
              f"({', '.join(f'{k} {counts[k]}' for k in STATUSES)})")
    if not alive:
        print(f"smd serve DIED during the run (exit code {proc.returncode})")
    return errors, ("?" if counts is None else counts["failed"]), alive


def print_log_summary(log: Path) -> None:
    tracebacks, kinds = log_problems(log)
    print(f"server log (whole run, shutdown included): {tracebacks} traceback(s), "
          f"{sum(kinds.values())} exception/warning/error line(s)" + (":" if kinds else ""))
    for line, n in kinds.most_common(10):
        print(f"  {n:>6} × {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    parser.add_argument("--clients", type=int, default=200, help="concurrent polling clients (default 200)")
    parser.add_argument("--rate", type=float, default=20.0, help="submissions per second (default 20)")
    parser.add_argument("--think", type=float, default=0.0,
                        help="mean pause of a client between rounds, seconds (default 0: closed loop)")
    parser.add_argument("--log-level", default="WARNING",
                        help="SMD_LOG_LEVEL of smd serve (default WARNING: no access log line per request)")
    parser.add_argument("--startup-timeout", type=float, default=120.0, help="seconds to wait for readiness")
    parser.add_argument("--keep-log", type=Path, help="copy the server log here at the end")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.clients < 1 or args.rate <= 0:
        parser.error("--duration and --rate must be > 0, --clients >= 1")

    print(f"bench/load.py: python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"httpx {httpx.__version__}; load average at start {load_average()}", flush=True)
    try:
        with redis_server() as redis_url, postgres_server() as pg_admin_url, \
                tempfile.TemporaryDirectory(prefix="smd-load-") as state:
            db_url = fresh_database(pg_admin_url, "smd_load")
            port = free_port()
            env = {**os.environ, "SMD_BROKER_URL": redis_url, "SMD_DATABASE_URL": db_url,
                   "SMD_STATE_DIR": state, "SMD_PORT": str(port), "SMD_HOST": "127.0.0.1", "SMD_AUTH": "off",
                   "SMD_LOG_LEVEL": args.log_level, "PYTHONUNBUFFERED": "1"}
            env.pop("SMD_WORKER_NAME", None)
            log = Path(state) / "serve.log"
            print(f"redis {redis_url}, postgres {db_url}, smd serve on 127.0.0.1:{port}", flush=True)
            with open(log, "wb") as out:
                proc = subprocess.Popen([sys.executable, "-m", "smdcli.main", "serve"], cwd=ROOT, env=env,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, preexec_fn=_die_with_parent)
            try:
                errors, failed, alive = asyncio.run(bench(args, f"http://127.0.0.1:{port}", proc, log))
            finally:
                t = time.monotonic()
                stop_serve(proc)
                print(f"smd serve stopped (exit code {proc.returncode}) in {time.monotonic() - t:.1f} s", flush=True)
                if args.keep_log:
                    with contextlib.suppress(OSError):
                        args.keep_log.write_bytes(log.read_bytes())
            print_log_summary(log)
    except ServerNotAvailable as exc:
        print(f"skipped: {exc}")
        return 0
    ok = errors == 0 and failed == 0 and alive
    print()
    print(f"{'PASS' if ok else 'FAIL'}: {errors} request error(s), {failed} failed job(s) (target: 0); "
          f"load average at the end {load_average()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
