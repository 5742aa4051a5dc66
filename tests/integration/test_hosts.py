"""Several hosts on one machine (tests/integration/hosts.py: network namespaces on a bridge): PostgreSQL and
Redis on the bridge's own address, `smd api` on host `api`, one `smd worker` on each of hosts h1, h2 and h3,
whose clocks are true, 10 minutes ahead and 10 minutes behind (tests/integration/clocks.py; true where
libfaketime cannot be installed, said in the test's output).

- A 48-point study spreads over the three hosts (each runs part of it), every child in one attempt (the
  hosts with clocks off included: leases are on the database's clock), through a Redis restarted without
  its data mid-study (the doorbells of the queued children are lost; the sweeper rings them again).
- A worker host's link goes down past its lease while it runs a job: another host takes the job over
  from its checkpoint, the partitioned host's writes after the link comes back are fenced (it logs the
  lost lease and writes nothing), the attempts are `lost` then `succeeded`, and the stored series and
  summary equal those of a run alone.

Skipped, with the reason, where root or `ip netns` is missing.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import httpx
import pytest

import smdengine
from tests.integration.clocks import ClockUnavailable, wall_clock_off
from tests.integration.hosts import Lab, unavailable
from tests.integration.procs import RestartableRedis, smd_cli, stop, wait_http
from tests.integration.test_study_workers import ENDED, nrq, wait_study
from tests.servers import PG_DATABASE, PG_USER, PostgresCluster

pytestmark = pytest.mark.integration   # and serial: tests/conftest.py SERIAL_MODULES

LEASE_SECONDS = 5
API_PORT = 8000   # the API host's own address: no other process there
CLOCKS = {"h1": None, "h2": "+10m", "h3": "-10m"}   # each worker host's wall clock


class Site:
    """The hosts, their servers and processes (module-scoped: starting them costs ~15 s)."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.lab = Lab("h")
        self.procs: dict[str, subprocess.Popen] = {}
        self.pg: PostgresCluster | None = None
        self.redis: RestartableRedis | None = None
        self.client: httpx.Client | None = None

    def __enter__(self) -> Site:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        tmp = self.tmp
        self.pg = PostgresCluster(settings={"listen_addresses": f"127.0.0.1,{self.lab.gateway}"})
        with open(self.pg.data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {self.lab.subnet} trust\n")
        self.pg.start()
        self.redis = RestartableRedis(tmp, bind=("127.0.0.1", self.lab.gateway), persist=False)
        self.redis.start()
        try:
            self.clocks = {host: wall_clock_off(skew, tmp / "clock") for host, skew in CLOCKS.items() if skew}
        except ClockUnavailable as exc:
            self.clocks, self.no_clocks = {}, str(exc)
        for host, clock in self.clocks.items():   # really off (else the tests would prove nothing), and sleeping
            ahead = float(subprocess.run([sys.executable, "-c", "import time; time.sleep(0.01); print(time.time())"],
                                         env={**os.environ, **clock}, capture_output=True, text=True, timeout=30,
                                         check=True).stdout) - time.time()
            assert abs(ahead - 60 * int(CLOCKS[host].rstrip("m"))) < 10, (host, ahead)
        self.env = {**os.environ, "SMD_AUTH": "on", "SMD_API_WORKERS": "1",
                    "SMD_DATABASE_URL": f"postgresql+psycopg://{PG_USER}@{self.lab.gateway}:{self.pg.port}/{PG_DATABASE}",
                    "SMD_BROKER_URL": f"redis://{self.lab.gateway}:{self.redis.port}/0",
                    "SMD_FLUSH_SECONDS": "0.3", "SMD_LEASE_SECONDS": str(LEASE_SECONDS), "SMD_SWEEP_SECONDS": "0.5",
                    "SMD_CHECKPOINT_SECONDS": "0.5", "SMD_WORKER_CONCURRENCY": "1", "SMD_WORKER_QUEUES": "cpu",
                    "SMD_SOFT_SHUTDOWN_SECONDS": "2", "SMD_FUSE_MAX": "4"}
        smd_cli({**self.env, "SMD_DATABASE_URL": self.pg.url}, "users", "create", "alice")   # from the database host
        key = smd_cli({**self.env, "SMD_DATABASE_URL": self.pg.url}, "keys", "create", "alice").strip()
        api = self.lab.add_host("api")
        self.base = f"http://{api.address}:{API_PORT}"
        self.start("api", ["api"], SMD_HOST=api.address, SMD_PORT=str(API_PORT))
        for name in CLOCKS:
            self.lab.add_host(name)
            self.start(name, ["worker"], SMD_WORKER_NAME=name)
        self.client = httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {key}"}, timeout=30,
                                   trust_env=False)   # no proxy for the bridge
        wait_http(f"{self.base}/healthz", self.procs["api"], self.tmp / "api.log", client=self.client)

    def start(self, host: str, command: list[str], **env: str) -> None:
        env = {**self.env, **self.clocks.get(host, {}), "SMD_STATE_DIR": str(self.tmp / host / "state"), **env}
        self.procs[host] = self.lab.spawn(self.lab.hosts[host], [sys.executable, "-m", "smdcli.main", *command], env,
                                          self.tmp / f"{host}.log")

    def log(self, host: str) -> str:
        return (self.tmp / f"{host}.log").read_text(errors="replace")

    def logs(self, tail: int = 2500) -> str:
        return "\n".join(f"--- {host}\n{self.log(host)[-tail:]}" for host in self.procs)

    def attempts(self, experiment_id: str) -> list[dict]:
        return self.client.get(f"/v1/experiments/{experiment_id}/attempts").json()

    def close(self) -> None:
        try:
            stop(*self.procs.values(), timeout=2)
            if self.client is not None:
                self.client.close()
            if self.redis is not None:
                self.redis.stop()
            if self.pg is not None:
                self.pg.close()
        finally:
            self.lab.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"no hosts: {reason}")
    with Site(tmp_path_factory.mktemp("hosts")) as s:
        yield s


def host_of(attempt: dict) -> str:
    return attempt["worker"].split("/")[0]


def test_a_study_spreads_over_three_hosts_in_one_attempt_each_through_a_redis_restart(site):
    if not site.clocks:
        print(f"h2 and h3 run on the true clock: {site.no_clocks}")
    study = {"name": "spread", "base": nrq(64, 9_000, 450),
             "grid": {"params.lr": [0.02 + 0.002 * i for i in range(48)]}}
    r = site.client.post("/v1/studies", json=study)
    assert r.status_code == 202, r.text
    study_id = r.json()["id"]

    def some_done_many_queued(body: dict) -> bool:
        statuses = Counter(c["status"] for c in body["children"])
        return statuses["succeeded"] >= 4 and statuses["queued"] >= 12

    before = wait_study(site.client, study_id, some_done_many_queued, timeout=120, logs=site.logs)
    site.redis.stop()           # every queued child's doorbell is gone with it
    site.redis.start()
    restarted = Counter(c["status"] for c in before["children"])
    body = wait_study(site.client, study_id, lambda b: b["status"] in ENDED, timeout=240, logs=site.logs)
    assert body["status"] == "succeeded", (body, site.logs())
    ran = Counter()
    for child in body["children"]:
        attempts = site.attempts(child["id"])
        assert [a["outcome"] for a in attempts] == ["succeeded"], (child, attempts, site.logs())
        ran[host_of(attempts[0])] += 1
    print(f"Redis restarted without data at {dict(restarted)}; children run per host: {dict(ran)}")
    assert set(ran) == set(CLOCKS), ran   # each host ran part of it, those with clocks off included


def test_a_host_cut_off_past_its_lease_is_taken_over_and_fenced(site):
    spec = nrq(256, 40_000, 400)
    r = site.client.post("/v1/experiments", json=spec)
    assert r.status_code == 202, r.text
    experiment_id = r.json()["id"]
    t0 = time.monotonic()
    timeline: list[str] = []

    def mark(what: str) -> None:
        timeline.append(f"{time.monotonic() - t0:6.1f} s  {what}")

    def running_with_checkpoint() -> dict | None:
        body = site.client.get(f"/v1/experiments/{experiment_id}").json()
        return body if body["status"] == "running" and body["progress"] > 0.15 else None

    deadline = time.monotonic() + 120
    while (body := running_with_checkpoint()) is None:
        assert time.monotonic() < deadline, site.logs()
        time.sleep(0.2)
    cut = host_of(site.attempts(experiment_id)[0])
    mark(f"running on {cut} at {body['progress']:.0%}; its link goes down")
    site.lab.set_link(site.lab.hosts[cut], up=False)

    deadline = time.monotonic() + 60
    while len(attempts := site.attempts(experiment_id)) < 2:
        assert time.monotonic() < deadline, (attempts, site.logs())
        time.sleep(0.2)
    mark(f"attempt 1 {attempts[0]['outcome']}; attempt 2 on {host_of(attempts[1])}")
    assert host_of(attempts[1]) != cut
    time.sleep(LEASE_SECONDS)    # the cut host keeps computing, unheard, well past its lease
    mark(f"link of {cut} up again")
    site.lab.set_link(site.lab.hosts[cut], up=True)

    deadline = time.monotonic() + 120
    while (body := site.client.get(f"/v1/experiments/{experiment_id}").json())["status"] not in ENDED:
        assert time.monotonic() < deadline, site.logs()
        time.sleep(0.3)
    mark(f"experiment {body['status']}")
    deadline = time.monotonic() + 90   # TCP retransmits back off: the cut host's first write may wait a while
    while f"experiment {experiment_id}: lease lost" not in site.log(cut):
        assert time.monotonic() < deadline, site.logs()
        time.sleep(0.3)
    mark(f"{cut}: its next write is refused (lease lost); it stops")
    print("\n".join(["partition timeline:", *timeline]))

    attempts = site.attempts(experiment_id)
    assert [a["outcome"] for a in attempts] == ["lost", "succeeded"], attempts
    assert attempts[1]["resumed_from_step"] is not None, attempts
    alone = smdengine.json_safe(smdengine.run(spec).to_document())
    served = site.client.get(f"/v1/experiments/{experiment_id}/results").json()
    assert served["summary"] == alone["summary"]
    assert {k: served["series"][k] for k in alone["series"]} == alone["series"]
