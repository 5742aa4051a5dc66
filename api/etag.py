"""Entity tags for polled resources: computed from the row's revision (and the stored point count)
before any series is read, so an unchanged resource costs one small query and a 304."""
from __future__ import annotations

import hashlib

from fastapi import Request, Response

from store.models import Experiment
from store.studies import StudyView


def tag(experiment: Experiment | StudyView, *parts: object) -> str:
    """A strong tag: the same revision, points and representation options give the same bytes. The
    revision covers every field a client sees (store.jobs bumps it on each change of status, progress,
    error, attempt or cancel flag); a study's revision adds its children's."""
    digest = hashlib.sha256(repr((experiment.id, experiment.revision, *parts)).encode()).hexdigest()[:32]
    return f'"{digest}"'


def matches(request: Request, current: str) -> bool:
    """If-None-Match holds ``current`` (weak comparison, as RFC 9110 asks for this header) or ``*``."""
    header: str | None = request.headers.get("if-none-match")
    if not header:
        return False
    candidates = {value.strip().removeprefix("W/") for value in header.split(",")}
    return "*" in candidates or current in candidates


def not_modified(current: str) -> Response:
    return Response(status_code=304, headers={"ETag": current})
