"""OpenAPI response fragments shared by the routes (``responses=`` of a route decorator)."""
from __future__ import annotations

from typing import Any, Literal

from fastapi import HTTPException

from api.schemas import ErrorOut, ValidationErrorOut

Responses = dict[int | str, dict[str, Any]]

UNAUTHORIZED: Responses = {401: {"model": ErrorOut, "description": "Missing, invalid or revoked API key "
                                                                  "(WWW-Authenticate: Bearer)."}}
NOT_FOUND: Responses = {**UNAUTHORIZED,
                        404: {"model": ErrorOut, "description": "No experiment with that id that you may see."}}
FORBIDDEN: Responses = {403: {"model": ErrorOut,
                              "description": "You may read it but not change it (owner or admin only)."}}
NOT_MODIFIED: Responses = {304: {"description": "Not modified: the If-None-Match tag is still current (no body)."}}
STUDY_NOT_FOUND: Responses = {**UNAUTHORIZED,
                              404: {"model": ErrorOut, "description": "No study with that id that you may see."}}


# A 503 (the database, or for /readyz the broker, is unreachable for now: an outage or a restart) carries
# Retry-After: every route's through the handler in api/main.py, the probes' and /metrics' set by themselves.
DB_RETRY_AFTER_SECONDS = 5
RETRY_AFTER: dict[str, str] = {"Retry-After": str(DB_RETRY_AFTER_SECONDS)}
RETRY_AFTER_HEADER: dict[str, Any] = {"Retry-After": {"description": "Seconds to wait before retrying.",
                                                      "schema": {"type": "integer"}}}


def invalid(description: str) -> Responses:
    """A documented 422: its body is always ValidationErrorOut (FastAPI's own validation errors and the service's
    alike: a list of errors, each with loc, msg and type)."""
    return {422: {"model": ValidationErrorOut, "description": description}}


INVALID: Responses = invalid("A parameter or the body is invalid: each error names where (loc) and why (msg).")
UNSUPPORTED_MEDIA: Responses = {415: {"model": ErrorOut, "description": "The body is not JSON (a Content-Type "
                                                                         "other than application/json)."}}

TOO_LARGE: Responses = {413: {"model": ErrorOut, "description": "The body is larger than the service takes "
                                                                "(SMD_MAX_BODY_BYTES, 2 MiB by default)."}}


def query_error(key: str, reason: str) -> HTTPException:
    """A 422 naming the query parameter ``key`` and why, shaped like FastAPI's own validation errors."""
    return HTTPException(status_code=422, detail=[{"loc": ["query", key], "msg": reason, "type": "value_error"}])


def data_unavailable_message(problem: dict[str, str]) -> str:
    """The 422 message of a spec whose dataset this server does not have (``ExperimentSpec.missing_data``):
    refused at submission, where its run would fail seconds after it started."""
    return (f"{problem['field']}: not available on this server: {problem['message'].removeprefix('dataset: ')} (the "
            "API checks its own SMD_DATA_DIR; the workers need the data too)")


# Which quota a 429 is about. ``work``: the request itself is too big, so waiting never helps (a client
# should not retry); ``active_jobs``: room comes as jobs end, and Retry-After estimates when.
QUOTA_HEADER = "SMD-Quota"


def over_quota(detail: str, *, quota: Literal["work", "active_jobs"], retry_after: int | None) -> HTTPException:
    """A 429 naming the quota in its detail and in the SMD-Quota header, with Retry-After unless ``None``: a
    request that does not fit the active-jobs limit even with none active (waiting can never make room)."""
    headers = {QUOTA_HEADER: quota} if retry_after is None else {"Retry-After": str(retry_after), QUOTA_HEADER: quota}
    return HTTPException(status_code=429, detail=detail, headers=headers)


def quota_response(description: str) -> Responses:
    """The documented 429 of a route that checks quotas."""
    return {429: {"model": ErrorOut, "description": description, "headers": {
        "Retry-After": {"description": "Seconds until room is expected (an estimate). Absent when no wait can "
                                       "help: SMD-Quota: work, or a study with more children than the active-jobs "
                                       "limit itself.", "schema": {"type": "integer"}},
        QUOTA_HEADER: {"description": "The quota: 'work' (this request is too big; waiting does not help) or "
                                      "'active_jobs' (wait for jobs to end).",
                       "schema": {"type": "string", "enum": ["work", "active_jobs"]}}}}}
