"""Server-Sent Events (GET /v1/experiments/{id}/events) on SQLite and PostgreSQL: a job followed from
queued to succeeded, resuming with Last-Event-ID, keep-alives and the timeout, deletion, cancel, auth,
and a real uvicorn server (HTTP streaming and client disconnects).

Starlette's TestClient streams a response incrementally (client.stream + iter_lines return each
chunk as the app sends it, and leaving the block cancels the app), so most tests use it; one test
runs uvicorn in a thread to check the same over real HTTP."""
from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable
from datetime import datetime

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy import delete

import api.routes.events as events_module
from api.main import create_app
from store import users
from store.migrate import upgrade_head
from store.models import Experiment
from store.settings import Settings
from tests.conftest import small_spec
from tests.dbutil import session_scope
from tests.servers import free_port
from worker.runner import execute

FIELDS = {"id", "status", "progress", "step", "total_steps", "revision", "error", "cancel_requested",
          "updated_at"}
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The shared settings (SQLite and PostgreSQL); workers write progress and streams poll often, so
    that even a short job shows progress events."""
    return settings.model_copy(update={"events_poll_seconds": 0.05, "events_keepalive_seconds": 5.0,
                                       "flush_seconds": 0.05, "sweeper": False})


def parse(lines: Iterable[str]) -> Iterable[dict]:
    """SSE blocks as dicts (event, id, data decoded from JSON, retry, comment), with the arrival time."""
    block: dict = {}
    for line in lines:
        if line == "":
            if block:
                block["at"] = time.monotonic()
                yield block
            block = {}
        elif line.startswith(":"):
            block["comment"] = line[1:].strip()
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            assert name in ("event", "id", "data", "retry"), line
            block[name] = json.loads(value) if name == "data" else value
    assert not block, f"stream ended inside a block: {block}"


def events_of(blocks: list[dict]) -> list[dict]:
    return [b for b in blocks if "event" in b]


def collect(client, experiment_id: str, *, headers: dict | None = None, **params) -> tuple[list[dict], float]:
    """Every block until the server closes the stream, and how long that took."""
    start = time.monotonic()
    with client.stream("GET", f"/v1/experiments/{experiment_id}/events", params=params,
                       headers=headers or {}) as r:
        assert r.status_code == 200, r.read()
        blocks = list(parse(r.iter_lines()))
    return blocks, time.monotonic() - start


def submit(client, spec: dict, headers: dict | None = None) -> str:
    r = client.post("/v1/experiments", json=spec, headers=headers or {})
    assert r.status_code == 202, r.text
    return r.json()["id"]


def check_snapshot(event: dict, experiment_id: str) -> dict:
    data = event["data"]
    assert FIELDS <= set(data), data
    assert data["id"] == experiment_id and event["id"] == str(data["revision"])
    assert ISO_UTC.fullmatch(data["updated_at"]), data["updated_at"]
    datetime.fromisoformat(data["updated_at"].replace("Z", "+00:00"))
    return data


def test_follows_a_job_from_queued_to_succeeded(client, settings):
    experiment_id = submit(client, small_spec(steps=3000, record_every=50))
    runner: threading.Thread | None = None
    blocks = []
    with client.stream("GET", f"/v1/experiments/{experiment_id}/events") as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache" and r.headers["x-accel-buffering"] == "no"
        for block in parse(r.iter_lines()):
            blocks.append(block)
            if "event" in block and runner is None:  # the queued state came at once: now run the job
                runner = threading.Thread(target=execute, args=(settings, experiment_id, "sse-worker"))
                runner.start()
    assert runner is not None
    runner.join(timeout=60)
    assert blocks[0] == {"retry": "2000", "at": blocks[0]["at"]}
    events = events_of(blocks)
    states = [check_snapshot(e, experiment_id) for e in events]
    assert events[0]["event"] == "status" and states[0]["status"] == "queued"
    assert events[-1]["event"] == "status" and states[-1]["status"] == "succeeded"
    assert states[-1]["progress"] == 1.0 and states[-1]["step"] == 3000 and states[-1]["error"] is None
    revisions = [s["revision"] for s in states]
    assert revisions == sorted(set(revisions)), revisions  # strictly increasing
    for before, event, state in zip(states, events[1:], states[1:], strict=False):
        assert event["event"] == ("status" if state["status"] != before["status"] else "progress")
        assert state["progress"] >= before["progress"]
    progress = [s for e, s in zip(events, states, strict=False) if e["event"] == "progress"]
    assert progress and all(s["status"] == "running" for s in progress)
    # the theory is stored before the first step (a revision at progress 0, which a poll may catch);
    # after it, the stream shows the run part way
    started = [s for s in progress if s["progress"] > 0]
    assert all(s["step"] == 0 for s in progress if s["progress"] == 0), progress
    assert started and 0 < started[0]["progress"] < 1, progress
    assert [s["status"] for e, s in zip(events, states, strict=False) if e["event"] == "status"] == \
        ["queued", "running", "succeeded"]


def test_resume_with_last_event_id(client, settings):
    experiment_id = submit(client, small_spec())
    assert execute(settings, experiment_id, "sse-worker") == "succeeded"
    blocks, _ = collect(client, experiment_id)  # no Last-Event-ID: the final state, then the end
    [final] = events_of(blocks)
    revision = int(final["id"])
    assert final["event"] == "status" and final["data"]["status"] == "succeeded" and revision > 1

    for last in (revision, revision + 7):  # the client has it: the stream ends at once, no events
        blocks, took = collect(client, experiment_id, headers={"Last-Event-ID": str(last)})
        assert events_of(blocks) == [] and took < 2, (last, blocks)
    for last in (revision - 1, 0, "garbage", "1e3", ""):  # older or malformed: the current state is sent
        blocks, _ = collect(client, experiment_id, headers={"Last-Event-ID": str(last)})
        [event] = events_of(blocks)
        assert event["event"] == "status" and event["id"] == str(revision), (last, blocks)
        assert event["data"] == final["data"]


def test_keepalive_and_timeout(client, settings):
    experiment_id = submit(client, small_spec())  # queued; nobody runs it
    fast = settings.model_copy(update={"events_keepalive_seconds": 0.2})
    with TestClient(create_app(fast)) as c:
        blocks, took = collect(c, experiment_id, timeout=1)
        assert 0.9 <= took < 5, took
        [event] = events_of(blocks)
        assert event["event"] == "status" and event["data"]["status"] == "queued" and event["id"] == "0"
        pings = [b for b in blocks if b.get("comment") == "keep-alive"]
        assert 3 <= len(pings) <= 6, blocks
        assert all(b.keys() == {"comment", "at"} for b in pings)

        # the client already has revision 0: no event, only keep-alives until the timeout
        blocks, took = collect(c, experiment_id, timeout=0.5, headers={"Last-Event-ID": "0"})
        assert events_of(blocks) == [] and 0.4 <= took < 5
        assert [b for b in blocks if "comment" in b] and blocks[0]["retry"] == "2000"


def test_cancel_ends_the_stream(client):
    experiment_id = submit(client, small_spec())
    with client.stream("GET", f"/v1/experiments/{experiment_id}/events", params={"timeout": 30}) as r:
        stream = parse(r.iter_lines())
        first = next(b for b in stream if "event" in b)
        assert first["data"]["status"] == "queued" and not first["data"]["cancel_requested"]
        assert client.post(f"/v1/experiments/{experiment_id}/cancel").status_code == 202
        rest = events_of(list(stream))
    assert [e["event"] for e in rest] == ["status"], rest
    assert rest[0]["data"]["status"] == "cancelled"  # a queued job is cancelled at once
    assert int(rest[0]["id"]) > int(first["id"])


def test_deleted_while_streaming(client, settings):
    experiment_id = submit(client, small_spec())
    with client.stream("GET", f"/v1/experiments/{experiment_id}/events", params={"timeout": 30}) as r:
        stream = parse(r.iter_lines())
        assert next(b for b in stream if "event" in b)["data"]["status"] == "queued"
        with session_scope(settings.db_url) as session:  # gone behind the API's back (e.g. a purge)
            session.execute(delete(Experiment).where(Experiment.id == experiment_id))
        rest = list(stream)
    assert [(b["event"], b["data"]) for b in rest] == [("deleted", {"id": experiment_id})], rest


def test_unknown_experiment_and_bad_timeout(client):
    r = client.get("/v1/experiments/nope/events")
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    experiment_id = submit(client, small_spec())
    for bad in ("0", "-1", "3601", "soon"):
        assert client.get(f"/v1/experiments/{experiment_id}/events", params={"timeout": bad}).status_code == 422


def test_auth(tmp_path, database_url):
    upgrade_head(database_url)
    with session_scope(database_url) as session:
        owner = users.create_user(session, "alice")
        _, key = users.create_key(session, owner)
        _, other = users.create_key(session, users.create_user(session, "bob"))
    settings = Settings(state_dir=tmp_path / "state", database_url=database_url, auth="on", sweeper=False)
    with TestClient(create_app(settings)) as c:
        experiment_id = submit(c, small_spec(), headers={"Authorization": f"Bearer {key}"})
        path = f"/v1/experiments/{experiment_id}/events"
        r = c.get(path, params={"timeout": 0.1})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert c.get(path, headers={"Authorization": "Bearer smd_bogus_key"}).status_code == 401
        assert c.get(path, headers={"Authorization": f"Bearer {other}"}).status_code == 404  # alice's job is private
        blocks, _ = collect(c, experiment_id, timeout=0.1, headers={"Authorization": f"Bearer {key}"})
        assert events_of(blocks)[0]["data"]["status"] == "queued"


def test_openapi_documents_the_stream(client):
    operation = client.get("/openapi.json").json()["paths"]["/v1/experiments/{experiment_id}/events"]["get"]
    assert operation["operationId"] == "streamEvents" and operation["tags"] == ["experiments"]
    responses = operation["responses"]
    assert list(responses["200"]["content"]) == ["text/event-stream"]
    assert "event: status" in responses["200"]["description"]
    for code in ("401", "404"):
        assert responses[code]["content"] == {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
    params = {p["name"]: p for p in operation["parameters"]}
    assert params["timeout"]["in"] == "query" and params["Last-Event-ID"]["in"] == "header"


class _Server:
    """uvicorn in a thread, on a free loopback port."""

    def __init__(self, app):
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        assert not self.thread.is_alive(), "uvicorn did not stop"


def test_real_server_streams_and_stops_when_the_client_leaves(settings, monkeypatch):
    polls = []
    read = events_module._read
    monkeypatch.setattr(events_module, "_read", lambda *args: polls.append(time.monotonic()) or read(*args))
    app = create_app(settings.model_copy(update={"events_keepalive_seconds": 0.2}))
    with _Server(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        experiment_id = submit(http, small_spec())
        start = time.monotonic()
        with http.stream("GET", f"/v1/experiments/{experiment_id}/events") as r:
            assert r.status_code == 200 and r.headers["x-accel-buffering"] == "no"
            stream = parse(r.iter_lines())
            first = next(b for b in stream if "event" in b)
            assert first["at"] - start < 2  # arrives at once, not when the (endless) response ends
            ping = next(b for b in stream if "comment" in b)
            assert ping["comment"] == "keep-alive" and ping["at"] > first["at"]
        time.sleep(0.5)  # the client has gone: the server notices and stops polling for it
        assert polls, "the stream never polled"
        stopped = len(polls)
        time.sleep(0.5)
        assert len(polls) == stopped, "the stream kept polling after its client left"

        # and a job followed over HTTP to its end
        runner = threading.Thread(target=execute, args=(settings, experiment_id, "sse-worker"))
        runner.start()
        with http.stream("GET", f"/v1/experiments/{experiment_id}/events", params={"timeout": 60}) as r:
            last = events_of(list(parse(r.iter_lines())))[-1]
        runner.join(timeout=60)
        assert last["event"] == "status" and last["data"]["status"] == "succeeded"


def test_points_events_carry_each_new_point_once(client, settings):
    experiment_id = submit(client, small_spec(steps=3000, record_every=50))
    runner: threading.Thread | None = None
    blocks = []
    with client.stream("GET", f"/v1/experiments/{experiment_id}/events",
                       params={"points": "true", "fields": "risk,au_equilibrium"}) as r:
        assert r.status_code == 200
        for block in parse(r.iter_lines()):
            blocks.append(block)
            if "event" in block and runner is None:
                runner = threading.Thread(target=execute, args=(settings, experiment_id, "sse-worker"))
                runner.start()
    assert runner is not None
    runner.join(timeout=60)
    points = [b["data"] for b in blocks if b.get("event") == "points"]
    assert len(points) >= 2   # while running, and the last ones
    steps = [s for p in points for s in p["series"]["step"]]
    full = client.get(f"/v1/experiments/{experiment_id}/results", params={"fields": "risk,au_equilibrium"}).json()
    assert steps == full["series"]["step"]                         # every point, once, in order
    assert [v for p in points for v in p["series"]["risk"]] == full["series"]["risk"]
    assert [v for p in points for v in p["theory"]["au_equilibrium"]] == full["theory"]["au_equilibrium"]
    assert set(points[0]["series"]) == {"step", "risk"}
    assert [b for b in events_of(blocks) if b["event"] != "points"][-1]["data"]["status"] == "succeeded"
    # later, from a step on: only what follows it; a bad field is a 422 before any stream
    later, _ = collect(client, experiment_id, points="true", since_step=2000)
    (rest,) = [b["data"] for b in later if b.get("event") == "points"]
    assert rest["series"]["step"] == [s for s in full["series"]["step"] if s > 2000]
    assert client.get(f"/v1/experiments/{experiment_id}/events",
                      params={"points": "true", "fields": "nope"}).status_code == 422
