"""GET /v1/queue in-process with auth on, on SQLite and PostgreSQL: fair-share positions, priority
within a user, running jobs, estimated starts, admin-only all=true; and a store-level check that
workers start jobs in the order queue_order predicts."""
from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from store import jobs, users
from store.migrate import upgrade_head
from store.models import Experiment, as_utc
from tests.conftest import auth, small_spec
from tests.dbutil import session_scope
from worker.runner import execute, execute_next

QUICK = dict(trials=8, steps=100, record_every=20)


def submit(client, key, priority: str = "normal", **params) -> str:
    r = client.post("/v1/experiments", json={**small_spec(**{**QUICK, **params}), "priority": priority},
                    headers=auth(key))
    assert r.status_code == 202, r.text
    return r.json()["id"]


def queue(client, key, **params) -> dict:
    r = client.get("/v1/queue", headers=auth(key), params=params)
    assert r.status_code == 200, r.text
    return r.json()


def positions(body: dict) -> dict[str, int]:
    return {job["id"]: job["position"] for job in body["jobs"]}


def test_round_robin_positions(lab):
    client, keys, _ = lab
    a = [submit(client, keys.alice) for _ in range(4)]
    b = submit(client, keys.bob)

    mine = queue(client, keys.bob)
    assert [job["id"] for job in mine["jobs"]] == [b]
    job = mine["jobs"][0]
    assert job["position"] == 2 and job["owner"] == "bob" and job["status"] == "queued"
    assert job["queue"] == "cpu" and job["kind"] == "nrq" and job["priority"] == "normal"
    assert job["estimated_start"] is None   # no succeeded job yet: no duration history
    assert mine["queues"]["cpu"] == {"queued": 5, "running": 0, "workers": 0, "processes": 0, "busy_processes": 0,
                                     "mean_duration_seconds": None}
    assert mine["queues"]["gpu"] == {"queued": 0, "running": 0, "workers": 0, "processes": 0, "busy_processes": 0,
                                     "mean_duration_seconds": None}

    theirs = queue(client, keys.alice)
    assert [job["id"] for job in theirs["jobs"]] == a   # by position
    assert positions(theirs) == {a[0]: 1, a[1]: 3, a[2]: 4, a[3]: 5}
    assert {job["owner"] for job in theirs["jobs"]} == {"alice"}


def test_processes_counts_the_workers_up_and_busy(lab):
    """workers counts those holding a job; processes those up (their presence row renewed within a lease), so
    an idle worker is not read as none: the answer a user asks of the queue when a job waits."""
    from sqlalchemy import update

    from store import workers
    from store.clock import db_now
    from store.models import WorkerProcess

    client, keys, settings = lab
    workers.beat(settings.db_url, "idle/1", "cpu", busy=False)
    workers.beat(settings.db_url, "both/2", "gpu,cpu", busy=True, study_id=None)
    workers.beat(settings.db_url, "gone/3", "cpu", busy=True)
    with session_scope(settings.db_url) as session:   # not renewed for two leases: a process that died
        session.execute(update(WorkerProcess).where(WorkerProcess.id == "gone/3")
                        .values(seen_at=db_now(-2 * settings.lease_seconds)))
    body = queue(client, keys.bob)["queues"]
    # busy in the same unit as up: each process (the stale busy one counts in neither)
    assert (body["cpu"]["processes"], body["cpu"]["busy_processes"], body["cpu"]["workers"]) == (2, 1, 0)
    assert (body["gpu"]["processes"], body["gpu"]["busy_processes"], body["gpu"]["workers"]) == (1, 1, 0)


def test_a_submission_says_how_many_processes_serve_its_queue(lab):
    """A cuda job on a service without a GPU worker was accepted without a word and stayed queued: the answer to
    a submission (and a rerun) gives queue_processes, 0 there; a later GET leaves it out (GET /v1/queue is live)."""
    from store import workers

    client, keys, settings = lab
    workers.beat(settings.db_url, "cpu-only/1", "cpu", busy=False)
    sent = {**small_spec(**QUICK), "device": "cuda"}
    gpu = client.post("/v1/experiments", json=sent, headers=auth(keys.alice)).json()
    assert gpu["queue"] == "gpu" and gpu["queue_processes"] == 0, gpu
    cpu = client.post("/v1/experiments", json=small_spec(**QUICK), headers=auth(keys.alice)).json()
    assert cpu["queue"] == "cpu" and cpu["queue_processes"] == 1, cpu
    rerun = client.post(f"/v1/experiments/{gpu['id']}/rerun", json={}, headers=auth(keys.alice)).json()
    assert rerun["queue_processes"] == 0, rerun
    assert client.get(f"/v1/experiments/{gpu['id']}", headers=auth(keys.alice)).json()["queue_processes"] is None


def test_priority_orders_a_users_own_jobs(lab):
    client, keys, _ = lab
    low = submit(client, keys.alice, "low")
    first = submit(client, keys.alice)
    second = submit(client, keys.alice)
    b = submit(client, keys.bob, "low")
    assert positions(queue(client, keys.alice)) == {first: 1, second: 3, low: 4}
    assert positions(queue(client, keys.bob)) == {b: 2}
    assert [job["priority"] for job in queue(client, keys.alice)["jobs"]] == ["normal", "normal", "low"]


def test_running_jobs_and_estimated_starts(lab):
    client, keys, settings = lab
    done = submit(client, keys.alice)
    assert execute(settings, done) == "succeeded"   # duration history for the cpu queue
    a = [submit(client, keys.alice) for _ in range(3)]
    b = submit(client, keys.bob)
    with session_scope(settings.db_url) as session:
        claim = jobs.claim_next(session, ["cpu"], "w1", settings.lease_seconds)
    assert claim.experiment_id == b   # alice was served last, bob never: bob goes first

    body = queue(client, keys.bob)
    stats = body["queues"]["cpu"]
    assert stats["queued"] == 3 and stats["running"] == 1 and stats["workers"] == 1
    with session_scope(settings.db_url) as session:
        row = session.get(Experiment, done)
        started, finished = as_utc(row.started_at), as_utc(row.finished_at)
        running = session.get(Experiment, b).started_at
    assert stats["mean_duration_seconds"] == pytest.approx((finished - started).total_seconds(), abs=1e-3)
    [job] = body["jobs"]
    assert job["status"] == "running" and job["position"] is None
    assert datetime.fromisoformat(job["estimated_start"]) == as_utc(running)

    now = datetime.now(UTC)
    mine = queue(client, keys.alice)["jobs"]
    assert [(job["id"], job["position"]) for job in mine] == [(a[0], 1), (a[1], 2), (a[2], 3)]
    for job in mine:
        expected = now + timedelta(seconds=math.ceil(job["position"] / 1) * stats["mean_duration_seconds"])
        assert abs((datetime.fromisoformat(job["estimated_start"]) - expected).total_seconds()) < 5, job

    # a second worker holding a lease halves the wait in whole rounds
    with session_scope(settings.db_url) as session:
        assert jobs.claim_next(session, ["cpu"], "w2", settings.lease_seconds).experiment_id == a[0]
    body = queue(client, keys.alice)
    assert body["queues"]["cpu"]["workers"] == 2 and body["queues"]["cpu"]["running"] == 2
    got = {job["id"]: job for job in body["jobs"]}
    assert got[a[0]]["position"] is None and got[a[0]]["status"] == "running"
    assert (got[a[1]]["position"], got[a[2]]["position"]) == (1, 2)
    assert got[a[0]]["estimated_start"] is not None
    first, second = (datetime.fromisoformat(got[i]["estimated_start"]) for i in a[1:])
    assert abs((second - first).total_seconds()) < 1   # ceil(1/2) = ceil(2/2): both in the first round
    # running first, then queued by position
    assert [job["id"] for job in body["jobs"]] == [a[0], a[1], a[2]]


def test_all_is_for_admins(lab):
    client, keys, _ = lab
    a = submit(client, keys.alice)
    b = submit(client, keys.bob)
    r = client.get("/v1/queue", headers=auth(keys.alice), params={"all": "true"})
    assert r.status_code == 403 and "admin" in r.json()["detail"], r.text
    assert queue(client, keys.alice, all="false")["jobs"][0]["id"] == a
    everyone = queue(client, keys.root, all="true")
    assert positions(everyone) == {a: 1, b: 2}
    assert {job["owner"] for job in everyone["jobs"]} == {"alice", "bob"}
    assert queue(client, keys.root)["jobs"] == []   # the admin has no jobs of its own
    for headers in ({}, auth("smd_000000000000_" + "x" * 43), auth(keys.alice[:-2])):
        r = client.get("/v1/queue", headers=headers)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer", r.text


def test_ended_and_cancelled_jobs_are_not_listed(lab):
    client, keys, settings = lab
    a = [submit(client, keys.alice) for _ in range(3)]
    assert client.post(f"/v1/experiments/{a[1]}/cancel", headers=auth(keys.alice)).status_code == 202
    assert execute(settings, a[0]) == "succeeded"
    body = queue(client, keys.alice)
    assert positions(body) == {a[2]: 1} and body["queues"]["cpu"]["queued"] == 1
    assert body["queues"]["cpu"]["mean_duration_seconds"] > 0


def test_openapi_documents_the_queue(lab):
    client, _, _ = lab
    operation = client.get("/openapi.json").json()["paths"]["/v1/queue"]["get"]
    assert operation["operationId"] == "getQueue" and operation["tags"] == ["queue"]
    assert {"200", "401", "403"} <= set(operation["responses"])
    assert operation["responses"]["403"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")


def test_workers_start_jobs_in_the_predicted_order(settings):
    """execute_next, one job at a time, starts them in the order queue_order predicted."""
    upgrade_head(settings.db_url)
    with session_scope(settings.db_url) as session:
        owners = {name: users.create_user(session, name).id for name in ("ann", "ben", "cat")}
    spec = small_spec(**QUICK)

    def add(owner: str, priority: int = 1) -> str:
        with session_scope(settings.db_url) as session:
            return jobs.create(session, kind="nrq", name=None, spec=spec, total_steps=QUICK["steps"],
                               owner_id=owners[owner], priority=priority).id

    add("cat")   # cat was served before: it comes after the owners never served
    assert execute_next(settings, ["cpu"], "w") == "succeeded"
    submitted = [add("ann", 0), add("ann"), add("cat"), add("ben"), add("ann", 2), add("cat", 0), add("ben"),
                 add("ann")]
    with session_scope(settings.db_url) as session:
        predicted = jobs.queue_order(session, "cpu")
    assert sorted(predicted) == sorted(submitted)
    while execute_next(settings, ["cpu"], "w") != "idle":
        pass
    with session_scope(settings.db_url) as session:
        rows = session.execute(select_started(submitted)).all()
    started = [experiment_id for experiment_id, status in rows]
    assert {status for _, status in rows} == {"succeeded"}
    assert started == predicted
    # round robin: ann and ben (never served) first, cat (served before) third; each user's own by priority
    names = {i: n for n, ids in (("ann", submitted[0:2] + [submitted[4], submitted[7]]),
                                 ("ben", [submitted[3], submitted[6]]),
                                 ("cat", [submitted[2], submitted[5]])) for i in ids}
    assert [names[i] for i in started] == ["ann", "ben", "cat", "ann", "ben", "cat", "ann", "ann"]
    assert [i for i in started if names[i] == "ann"] == [submitted[4], submitted[1], submitted[7], submitted[0]]


def select_started(ids: list[str]):
    from sqlalchemy import select

    return (select(Experiment.id, Experiment.status).where(Experiment.id.in_(ids))
            .order_by(Experiment.started_at, Experiment.id))
