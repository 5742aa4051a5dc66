"""Server-Sent Events: an experiment's status and progress, pushed as they change.

``GET /v1/experiments/{id}/events`` answers ``text/event-stream``. Every event is a snapshot of
the experiment (its revision is the event id); the stream polls the database, each poll a short
store read (its own transaction) in a worker thread (the event loop never waits on the database and no connection is held
between polls), and ends after the event that reports a terminal status.
"""
from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Collection
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.exc import DBAPIError

from api.deps import ExperimentDep, SettingsDep
from api.responses import NOT_FOUND
from api.results import result_document
from store import jobs
from store.clock import utc_iso
from store.models import TERMINAL, Experiment

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/experiments", tags=["experiments"])

RETRY_MS = 2000  # how long an EventSource waits before it reconnects (sent as `retry:`)
KEEPALIVE = b": keep-alive\n\n"
_FIELDS = ("id", "status", "progress", "step", "total_steps", "revision", "error", "cancel_requested",
           "attempts", "started_at", "start_step", "pace_started_at", "pace_start_step", "progressed_at",
           "finished_at", "updated_at")
_LAST_EVENT_ID = re.compile(r"\s*(-?\d{1,18})\s*")


class EventStream(StreamingResponse):
    """``text/event-stream``. Not fastapi.sse.EventSourceResponse: as a route's response_class that one
    makes FastAPI expect a generator endpoint (and send its own keep-alives)."""

    media_type = "text/event-stream"


EVENT_FORMAT = (
    "A stream of Server-Sent Events, each a snapshot of the experiment:\n\n"
    "    id: <revision>\n"
    "    event: status | progress\n"
    "    data: {\"id\": ..., \"status\": ..., \"progress\": ..., \"step\": ..., \"total_steps\": ..., "
    "\"revision\": ..., \"error\": ..., \"cancel_requested\": ..., \"attempts\": ..., \"started_at\": ..., "
    "\"start_step\": ..., \"pace_started_at\": ..., \"pace_start_step\": ..., \"progressed_at\": ..., "
    "\"finished_at\": ..., \"updated_at\": ..., \"eta\": ...}\n\n"
    "(eta as in the experiment: the estimated finish while running, else null.) "
    f"The stream starts with `retry: {RETRY_MS}`, then the current state (unless Last-Event-ID shows the client "
    "already has it), then an event whenever the revision changes: `status` for the first event and "
    "whenever the status changed, `progress` otherwise. Idle streams get `: keep-alive` comment lines. "
    "The stream ends after the event reporting succeeded, failed or cancelled (at once when Last-Event-ID "
    "is already that event's id), after `event: deleted` (the experiment was deleted), or when `timeout` "
    "runs out. With `points=true`, the first event and every change are followed by `event: points` when "
    "points were stored since the last sent: `data: {\"series\": ..., \"layers\": ..., \"theory\": ...}`, "
    "as in the results document, only the steps after those already sent.")


def _state(fields: dict[str, Any]) -> dict[str, Any]:
    """The event payload from the values of _FIELDS (times in ISO 8601 UTC, as ExperimentOut writes them)."""
    state = dict(fields)
    state["eta"] = utc_iso(jobs.estimated_finish(state["status"], bool(state["cancel_requested"]),
                                                 state["pace_started_at"], state["step"], state["pace_start_step"],
                                                 state["total_steps"], state["progressed_at"]))
    for name in ("started_at", "pace_started_at", "progressed_at", "finished_at", "updated_at"):
        state[name] = utc_iso(state[name])
    state["cancel_requested"] = bool(state["cancel_requested"])
    return state


def _of(experiment: Experiment) -> dict[str, Any]:
    return _state({name: getattr(experiment, name) for name in _FIELDS})


def _read(url: str, experiment_id: str) -> dict[str, Any] | None:
    """One poll (in a worker thread): the current state, None once the experiment is deleted."""
    fields = jobs.read_fields(url, experiment_id, _FIELDS)
    return None if fields is None else _state(fields)


def _event(state: dict[str, Any], kind: str) -> bytes:
    data = json.dumps(state, separators=(",", ":"))  # one line: JSON escapes newlines in strings
    return f"id: {state['revision']}\nevent: {kind}\ndata: {data}\n\n".encode()


def _points_reader(db: str, experiment_id: str, fields: list[str] | None,
                   since_step: int) -> Callable[[], bytes | None]:
    """``event: points`` with the points stored after the last step sent (none: nothing)."""
    last = [since_step]

    def read() -> bytes | None:
        experiment = jobs.get(db, experiment_id)
        if experiment is None:
            return None
        doc = result_document(db, experiment, fields, since_step=last[0])
        steps = doc["series"].get("step", [])
        if not steps:
            return None
        last[0] = steps[-1]
        data = json.dumps({"series": doc["series"], "layers": doc["layers"], "theory": doc["theory"]},
                          separators=(",", ":"))
        return f"event: points\ndata: {data}\n\n".encode()
    return read


def _known_revision(last_event_id: str | None) -> int | None:
    """The client's Last-Event-ID as an integer; None when absent or malformed (then ignored)."""
    match = _LAST_EVENT_ID.fullmatch(last_event_id) if last_event_id is not None else None
    return int(match.group(1)) if match else None


async def _stream(request: Request, read: Callable[[], dict[str, Any] | None], first: dict[str, Any],
                  known: int | None, poll_seconds: float, keepalive_seconds: float,
                  timeout: float | None, ended: Collection[str] = TERMINAL,
                  extra: Callable[[], bytes | None] | None = None) -> AsyncIterator[bytes]:
    """Snapshots from ``read()`` (None: deleted), polled in a worker thread, until a status in ``ended``
    (the resource's id and revision are the snapshot's ``id`` and ``revision``); after the first
    snapshot and after each change, what ``extra()`` gives (read in a worker thread), if anything."""
    clock = anyio.current_time
    deadline = None if timeout is None else clock() + timeout
    yield f"retry: {RETRY_MS}\n\n".encode()
    status, revision = first["status"], first["revision"]
    if known is None or known < revision:
        yield _event(first, "status")
    if extra is not None and (more := await anyio.to_thread.run_sync(extra)):
        yield more
    if status in ended:  # sent now, or the client already has it
        return
    quiet_since = next_poll = clock()
    next_poll += poll_seconds
    failing = False
    while True:
        now = clock()
        wake = min(next_poll, quiet_since + keepalive_seconds, deadline if deadline is not None else next_poll)
        if wake > now:
            await anyio.sleep(wake - now)
        if await request.is_disconnected():
            return
        now = clock()
        if deadline is not None and now >= deadline:
            return
        if now >= next_poll:
            next_poll = now + poll_seconds
            try:
                state = await anyio.to_thread.run_sync(read)
            except DBAPIError as exc:  # the database is away: keep the stream, try again next poll
                if not failing:
                    log.warning("events for experiment %s: cannot read it (%s); retrying", first["id"], exc)
                failing = True
            else:
                if failing:
                    log.info("events for experiment %s: database back", first["id"])
                failing = False
                if state is None:
                    yield f"event: deleted\ndata: {json.dumps({'id': first['id']})}\n\n".encode()
                    return
                if state["revision"] != revision:
                    yield _event(state, "status" if state["status"] != status else "progress")
                    status, revision, quiet_since = state["status"], state["revision"], clock()
                    if extra is not None and (more := await anyio.to_thread.run_sync(extra)):
                        yield more
                    if status in ended:
                        return
                    continue
        if clock() - quiet_since >= keepalive_seconds:
            yield KEEPALIVE
            quiet_since = clock()


@router.get("/{experiment_id}/events", operation_id="streamEvents", response_class=Response,
            # response_class without a media type: FastAPI documents the errors as application/json
            # (with EventStream it would document them as text/event-stream); the 200 is described here
            responses={200: {"description": EVENT_FORMAT,
                             "content": {"text/event-stream": {"schema": {
                                 # OpenAPI 3.1: the schema of one event (its fields), not of the whole stream
                                 "type": "object", "required": ["data"],
                                 "properties": {"event": {"type": "string", "enum": ["status", "progress", "deleted",
                                                                             "points"]},
                                                "id": {"type": "string"}, "data": {"type": "string"},
                                                "retry": {"type": "integer"}}}}}},
                       **NOT_FOUND})
async def stream_events(experiment: ExperimentDep, request: Request, settings: SettingsDep,
                        timeout: Annotated[float | None, Query(
                            gt=0, le=3600, description="Close the stream after this many seconds "
                                                       "(default: when the experiment ends).")] = None,
                        last_event_id: Annotated[str | None, Header(
                            alias="Last-Event-ID", description="The id of the last event received (sent by "
                                                               "EventSource on reconnect): the current state "
                                                               "is sent only if it is newer.")] = None,
                        points: Annotated[bool, Query(description=(
                            "Also send `event: points` after each change: the points recorded since the last "
                            "ones sent (since_step), as the results document's series, layers and theory."))] = False,
                        fields: Annotated[str | None, Query(
                            max_length=2000, description="With points: only these series/theory names "
                                                         "(comma-separated; step always).")] = None,
                        since_step: Annotated[int | None, Query(
                            ge=-1, le=2**62, description="With points: the first points event starts after "
                                                         "this step (default: from the first point).")] = None):
    """Stream the experiment's status and progress changes as Server-Sent Events until it ends; with
    ``points=true`` also the new points, so that a live chart needs one connection."""
    extra = None
    if points:
        selected = [f.strip() for f in fields.split(",") if f.strip()] if fields else None
        if selected:   # a 422 now rather than a broken stream later
            result_document(settings.db_url, experiment, selected, max_points=2)
        extra = _points_reader(settings.db_url, experiment.id, selected, -1 if since_step is None else since_step)
    body = _stream(request, functools.partial(_read, settings.db_url, experiment.id), _of(experiment),
                   _known_revision(last_event_id),
                   settings.events_poll_seconds, settings.events_keepalive_seconds, timeout, extra=extra)
    return EventStream(body, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
