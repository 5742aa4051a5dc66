"""Exceptions of :mod:`smdlab`: each carries the HTTP status and the server's ``detail``."""
from __future__ import annotations

from typing import Any


class SMDError(Exception):
    """A request the service answered with an error (``status``, ``detail``), or could not be made
    (``status`` None: connection refused, timeout, …)."""

    def __init__(self, message: str, status: int | None = None, detail: Any = None):
        super().__init__(message)
        self.status, self.detail = status, detail


class SMDValidationError(SMDError):
    """422: the spec (or a parameter) is invalid. ``errors``: ``[{"field": "params.lr", "loc": [...],
    "reason": "Input should be greater than 0", "point": None}, ...]``, one per invalid field; ``point``: for
    a study's point, ``{"index": 1, "values": {"params.lr": -0.1}}`` (its axis values), else None."""

    def __init__(self, message: str, status: int, detail: Any):
        super().__init__(message, status, detail)
        items = detail if isinstance(detail, list) else [{"loc": [], "msg": str(detail)}]
        self.errors = [{"field": field_of_error(e), "loc": list(e.get("loc", [])),
                        "reason": str(e.get("msg", "")), "point": point_of(e)} for e in items if isinstance(e, dict)]


class QuotaExceeded(SMDError):
    """429: over a quota; ``retry_after`` seconds is when the server expects room; ``quota`` which one
    (``"work"``: the request is too big, never waited out; ``"active_jobs"``: room comes as jobs end, unless
    ``retry_after`` is None: a study with more children than the limit itself)."""

    def __init__(self, message: str, status: int, detail: Any, retry_after: float | None, quota: str | None = None):
        super().__init__(message, status, detail)
        self.retry_after, self.quota = retry_after, quota


class NotFound(SMDError):
    """404: no such resource, or not yours to see."""


class Conflict(SMDError):
    """409: the resource is not in a state that allows it (e.g. cancel of an ended experiment)."""


def field_of_error(error: dict[str, Any]) -> str:
    """The field a 422 error names: the service's ``field`` (the path as the request wrote it), else the
    field read from its loc (a service before ``field``)."""
    field = error.get("field")
    return field if isinstance(field, str) and field else field_of(error.get("loc", []))


def field_of(loc: list[Any]) -> str:
    """The dotted field of a FastAPI error location, without "body" and union tags such as "nrq"."""
    parts = [str(p) for p in loc]
    if parts[:1] == ["body"]:
        parts = parts[1:]
    if len(parts) > 1 and parts[0] in ("nrq", "sde", "train"):   # the tagged union's member
        parts = parts[1:]
    return ".".join(parts)


def point_of(error: dict[str, Any]) -> dict[str, Any] | None:
    """The study point a 422 error is about (``index``, ``values``: its axis values), or None."""
    point = error.get("point")
    return point if isinstance(point, dict) else None


def values_text(values: dict[str, Any]) -> str:
    """A point's axis values as ``params.lr=-0.1, params.weight_decay=0.01``."""
    return ", ".join(f"{path}={value}" for path, value in values.items())


def at_point(error: dict[str, Any]) -> str:
    """`` (at params.lr=-0.1, ...)`` for an error about a study's point: which values made it invalid, which
    its index alone does not say (a grid's points are numbered in expansion order); else ``""``."""
    values = (point_of(error) or {}).get("values")
    return f" (at {values_text(values)})" if isinstance(values, dict) and values else ""


def error_text(error: dict[str, Any]) -> str:
    """``field: reason`` of one 422 error, the field said once where the service's message already starts with
    it ("kind: expected one of …", not "kind: kind: expected one of …"), and the point's values for a study's."""
    return f"{field_said(field_of_error(error), str(error.get('msg')))}{at_point(error)}"


def field_said(where: str, reason: str) -> str:
    """``where: reason``, ``where`` said once: the engine's messages often start with their field, in full
    ("kind: expected …") or by its last part ("record_every: expected …" at params.record_every)."""
    if not where or reason.startswith(f"{where}: "):
        return reason
    path = where.rsplit(" ", 1)[-1]   # "point 1, params.lr" and "axis params.lrr" end with the field's path
    for said in (path, path.rsplit(".", 1)[-1], path.lstrip("-").replace("-", "_")):   # (--status: the query's status)
        if reason.startswith(f"{said}: "):
            return f"{where}: {reason.removeprefix(f'{said}: ')}"
    return f"{where}: {reason}"


def message_of(status: int, detail: Any) -> str:
    if isinstance(detail, list):
        lines = [error_text(e) if isinstance(e, dict) else str(e) for e in detail]
        return f"HTTP {status}: " + "; ".join(lines)
    return f"HTTP {status}: {detail}"
