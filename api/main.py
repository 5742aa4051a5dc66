"""The FastAPI application factory."""
from __future__ import annotations

import json
import logging
import re
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.utils import get_flat_params
from fastapi.encoders import jsonable_encoder as jsonable
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from api import dashboard
from api.edges import BodyLimit, HeadAsGet, JsonBodies, NoNul
from api.responses import DB_RETRY_AFTER_SECONDS, INVALID, RETRY_AFTER_HEADER, TOO_LARGE, UNSUPPORTED_MEDIA
from api.routes import events, experiments, exports, health, ops, plots, presets, queue, studies, study_charts
from api.schemas import ErrorOut
from smdengine import error_location, error_message, field_path, json_safe
from store import retry
from store.migrate import upgrade_head
from store.settings import LOG_FORMAT, Settings, get_settings
from store.users import local_user
from worker.sweeper import Sweeper


def _located(errors, body: Any) -> list:
    """Each 422 error where the request put the value: a missing or unknown union tag (kind, params.model,
    params.dataset.name) is reported at the union, so its loc points at the tag field itself (("body", "kind"));
    any other as :func:`smdengine.error_location` and :func:`smdengine.error_message` give it (a check across a
    spec's params at the field its message names, without pydantic's "Value error, "). An error in the body
    also gets ``field``, its path as the request wrote it (:func:`smdengine.field_path`)."""
    out = []
    for err in errors:
        tag = str(err.get("type", ""))
        if tag in ("invalid_kind", "invalid_model", "invalid_name") and not isinstance(err.get("input"), dict):
            # not an object at all (a list for a spec): no tag field to point at, and not a wrong tag
            err = {**err, "type": "object_type", "msg": f"expected a JSON object, got {_json_type(err.get('input'))}"}
        elif tag in ("invalid_kind", "invalid_model", "invalid_name"):
            err = {**err, "loc": (*err.get("loc", ()), tag.removeprefix("invalid_")), "msg": error_message(err)}
        else:
            placed = error_location(err)
            given = err.get("input")
            for part in placed[len(tuple(err.get("loc", ()))):]:   # a check across fields, placed at one of them:
                given = (given.get(part) if isinstance(given, dict)   # its input is that field's value
                         else given[part] if isinstance(given, list) and isinstance(part, int) and part < len(given)
                         else None)
            err = {**err, "loc": placed, "msg": error_message(err), **({"input": given} if "input" in err else {})}
            if isinstance((err.get("ctx") or {}).get("error"), Exception):   # JSON wrote the check's exception as {}:
                err = {k: v for k, v in err.items() if k != "ctx"}            # the message says it
        field = ".".join(map(str, field_path(body, err["loc"][1:]))) if tuple(err["loc"][:1]) == ("body",) else ""
        if field and tag != "json_invalid":   # (a JSON syntax error's loc is a character offset)
            err["field"] = field
        out.append(err)
    return out


def _json_type(value: Any) -> str:
    """The JSON type of a parsed value, for a message: "a list", "a string", …"""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {list: "a list", str: "a string", type(None): "null"}.get(type(value), type(value).__name__)


class _StreamsClosedAtStop(logging.Filter):
    """uvicorn's ERROR "Cancel N running task(s), timeout graceful shutdown exceeded" told of a normal stop: the
    requests still open then are event streams (a dashboard on a job), which end only with their job, and are
    closed after smdcli.serve.GRACEFUL_SHUTDOWN_SECONDS. Said at INFO, in those words."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "Cancel %s running task(s), timeout graceful shutdown exceeded":
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = "closing %s request(s) still open at the stop (event streams end only with their job)"
        return True


def _quiet_stream_cancels() -> None:
    """Install :class:`_StreamsClosedAtStop` on uvicorn's logger, once per process (after uvicorn's logging
    configuration, which a process applies when it starts)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _StreamsClosedAtStop) for f in logger.filters):
        logger.addFilter(_StreamsClosedAtStop())


ECHO_CHARS = 400   # the most of a rejected value a 422 repeats (as JSON text, cut there beyond it)


def _echoable(detail: list) -> list:
    """A 422's errors as they can be sent back: every text with its lone surrogates (valid JSON escapes that UTF-8
    cannot encode) written as \\udXXX escapes, and each error's ``input``, the rejected value, cut to its first
    :data:`ECHO_CHARS` characters of JSON: a 100 MB name must not come back as a 100 MB answer."""
    out = []
    for err in detail:
        err = _utf8_safe(err)
        if "input" in err:
            text = json.dumps(err["input"], ensure_ascii=False)
            if len(text) > ECHO_CHARS:
                err["input"] = f"{text[:ECHO_CHARS]}… ({len(text)} characters of JSON in all)"
        out.append(err)
    return out


def _utf8_safe(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8") if _SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {_utf8_safe(k): _utf8_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_utf8_safe(v) for v in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


ROUTERS = (experiments.csv_router, experiments.router, exports.router, events.router, queue.router, plots.router, studies.router,
           studies.plan_router, study_charts.router,
           presets.router, health.router, ops.router)


# A transient database error (store/retry.py: unreachable, refused, cut) is answered 503 with
# Retry-After (DB_RETRY_AFTER_SECONDS), never 500: the request was fine, the database was away.
DB_UNAVAILABLE = {503: {"model": ErrorOut, "description": "The database is unreachable for now (an outage or a "
                                                          "restart); retry after the Retry-After seconds.",
                        "headers": RETRY_AFTER_HEADER}}


class _RequestPatience:
    """Every request's store calls retry a transient database error for at most
    SMD_DB_REQUEST_RETRY_SECONDS (store.retry.patience), then the 503 handler answers."""

    def __init__(self, app: ASGIApp, seconds: float):
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with retry.patience(self.seconds):  # copied into the thread-pool calls of this request
            await self.app(scope, receive, send)


class UnsafeAuth(RuntimeError):
    """Auth is off on an address other machines can reach."""


def check_auth(settings: Settings) -> None:
    if settings.auth == "off" and not settings.loopback:
        raise UnsafeAuth(f"SMD_AUTH=off is allowed only on a loopback address (127.0.0.1, ::1, localhost), "
                         f"not on SMD_HOST={settings.host}: create users and keys (smd users create NAME; "
                         f"smd keys create NAME) and keep auth on")


def process_app() -> FastAPI:
    """The app of one of several API processes (SMD_API_WORKERS, smdcli.serve.run_api): settings from the
    environment, the schema already migrated by the process that started them. A new interpreter: its log lines
    (the sweeper's among them) are formatted as `smd`'s, where they came bare or not at all."""
    settings = get_settings()
    logging.basicConfig(level=settings.log_level, format=LOG_FORMAT)
    return create_app(settings, migrate=False)


def create_app(settings: Settings | None = None, *, migrate: bool = True) -> FastAPI:
    """The app. ``migrate``: apply the migrations at start-up (every schema change is a migration);
    ``smd serve``, which has already applied them for its worker too, passes False."""
    settings = settings or get_settings()
    check_auth(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        _quiet_stream_cancels()
        if migrate:
            upgrade_head(settings.db_url)
        if settings.auth == "off":  # create the local user now, not racing in concurrent first requests
            # in a thread: a store call may wait for the database (store.retry), never on the event loop
            try:
                await anyio.to_thread.run_sync(local_user, settings.db_url)
            except IntegrityError:   # another API process (SMD_API_WORKERS) created it at the same moment
                await anyio.to_thread.run_sync(local_user, settings.db_url)
        sweeper = Sweeper(settings).start() if settings.sweeper else None
        try:
            yield
        finally:
            if sweeper is not None:
                sweeper.stop()

    app = FastAPI(title="SMD Lab", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,   # api.dashboard's
                  description="Simulation jobs on Spherical Motion Dynamics: submit a spec, poll its status, "
                              "read results and plots.")
    app.state.settings = settings

    def every_route() -> list[Any]:
        """The app's routes, each router's own among them (the app keeps an included router as one entry)."""
        return [*app.router.routes, *(route for router in ROUTERS for route in router.routes)]

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # a NaN/Infinity literal in the body must still get its 422 (JSON cannot echo it back)
        return JSONResponse(status_code=422, content={"detail": _echoable(json_safe(jsonable(_located(exc.errors(), exc.body))))})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 405:  # Starlette names only the first route on the path; RFC 9110 wants them all
            routes = every_route()
            allowed = {method for route in routes if getattr(route, "methods", None)
                       and route.matches(request.scope)[0] != Match.NONE for method in route.methods}
            if "GET" in allowed:
                allowed.add("HEAD")   # api.edges.HeadAsGet
            if allowed:
                exc.headers = {**(exc.headers or {}), "Allow": ", ".join(sorted(allowed))}
        return await http_exception_handler(request, exc)

    @app.exception_handler(SQLAlchemyError)
    async def _database_error(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        if not retry.is_transient(exc):
            raise exc  # a bug or a constraint: a 500, as before
        retry.journal.failed(exc)  # the sweeper of this process holds back lease expiry after an outage
        return JSONResponse(status_code=503, headers={"Retry-After": str(DB_RETRY_AFTER_SECONDS)},
                            content={"detail": "the database is unreachable for now (an outage or a restart); "
                                               f"retry in {DB_RETRY_AFTER_SECONDS} s"})

    for router in ROUTERS:
        for route in router.routes:
            if isinstance(route, APIRoute):
                _document_errors(route)
        app.include_router(router)   # copies each route, its responses' models included
    app.include_router(dashboard.router)
    app.add_middleware(_RequestPatience, seconds=settings.db_request_retry_seconds)
    app.add_middleware(NoNul)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)   # outside NoNul, which reads the whole body
    app.add_middleware(JsonBodies, routes=every_route)
    app.add_middleware(HeadAsGet)
    if settings.auth == "off":
        app.openapi = lambda: _without_auth(app)
    return app


def _document_errors(route: APIRoute) -> None:
    """Every error a route answers documented as JSON with its model, so that a generated client parses it: the
    503 of an unreachable database (on every route that reads or writes it), the 422 (ValidationErrorOut: FastAPI
    would otherwise document its own HTTPValidationError beside the service's declared 422s, or none), the 413 and
    415 of a route that reads a body (api.edges); and on a
    route whose 200 is not JSON (CSV, Parquet), its errors as application/json, which is what it sends (FastAPI
    would give a model's response the route's media type)."""
    route.responses = dict(route.responses)   # often a shared constant (NOT_FOUND, ...): never changed in place
    declared = {str(code) for code in route.responses}
    if "503" not in declared:
        route.responses[503] = DB_UNAVAILABLE[503]
    if "422" not in declared and (get_flat_params(route.dependant) or route.body_field is not None):
        route.responses[422] = INVALID[422]
    if "415" not in declared and route.body_field is not None:
        route.responses[415] = UNSUPPORTED_MEDIA[415]
    if "413" not in declared and route.body_field is not None:
        route.responses[413] = TOO_LARGE[413]
    response_class = route.response_class
    if isinstance(response_class, DefaultPlaceholder):
        response_class = response_class.value
    if getattr(response_class, "media_type", None) in (None, "application/json"):
        return
    for code, response in list(route.responses.items()):
        model = response.get("model")
        if model is not None and not str(code).startswith("2"):
            route.responses[code] = {**{k: v for k, v in response.items() if k != "model"}, "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}


def _without_auth(app: FastAPI) -> dict:
    """The schema of an app with auth off: no security requirement, since no key is asked for (a key in the
    query string is still refused: its 401 stays documented)."""
    if app.openapi_schema is None:
        schema = FastAPI.openapi(app)
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                operation.pop("security", None)
        schema.get("components", {}).pop("securitySchemes", None)
    return app.openapi_schema
