"""OpenAPI response fragments shared by the routes (``responses=`` of a route decorator)."""
from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from api.schemas import ErrorOut

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


def query_error(key: str, reason: str) -> HTTPException:
    """A 422 naming the query parameter ``key`` and why, shaped like FastAPI's own validation errors."""
    return HTTPException(status_code=422, detail=[{"loc": ["query", key], "msg": reason, "type": "value_error"}])
