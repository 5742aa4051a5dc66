"""Assembling the result document from the row and its stored series: field selection, downsampling."""
from __future__ import annotations

from typing import Any, Optional

from fastapi import HTTPException
from pydantic import ValidationError
from sqlalchemy.orm import Session

from smdengine import output_names
from smdengine.runtime import json_safe
from store.models import Experiment
from store.series import read_series


def result_document(session: Session, experiment: Experiment, fields: Optional[list[str]] = None,
                    max_points: Optional[int] = None) -> dict[str, Any]:
    """The design §3 document. While running, series hold the points written so far and theory
    series are cut to the same length, so everything stays aligned on ``step``."""
    series = read_series(session, experiment.id)
    n = len(series.get("step", []))
    theory = {k: (v[:n] if isinstance(v, list) else v) for k, v in (experiment.theory or {}).items()}
    distributions = experiment.distributions or {}
    if fields:
        known = set(series) | set(theory) | set(distributions) | set(_output_names(experiment))
        unknown = [f for f in fields if f not in known and f != "step"]
        if unknown:
            raise HTTPException(status_code=422, detail=[{
                "loc": ["query", "fields"], "type": "value_error",
                "msg": f"unknown field(s) {', '.join(unknown)}; available: {', '.join(sorted(known))}"}])
        series = {k: v for k, v in series.items() if k == "step" or k in fields}
        theory = {k: v for k, v in theory.items() if k in fields}
        distributions = {k: v for k, v in distributions.items() if k in fields}
    if max_points is not None and n > max_points:
        keep = downsample_indices(n, max_points)
        series = {k: [v[i] for i in keep] for k, v in series.items()}
        theory = {k: ([v[i] for i in keep] if isinstance(v, list) else v) for k, v in theory.items()}
    return {
        "id": experiment.id, "kind": experiment.kind, "status": experiment.status,
        "progress": experiment.progress, "spec": experiment.spec,
        "series": json_safe(series), "theory": json_safe(theory), "summary": json_safe(experiment.summary or {}),
        "distributions": json_safe(distributions),
    }


def downsample_indices(n: int, max_points: int) -> list[int]:
    """At most ``max_points`` (≥ 2) evenly spread indices of range(n), first and last included."""
    if n <= max_points:
        return list(range(n))
    return sorted({round(i * (n - 1) / (max_points - 1)) for i in range(max_points)})


def _output_names(experiment: Experiment) -> tuple[str, ...]:
    try:
        return output_names(experiment.spec)
    except (ValueError, ValidationError):  # a spec stored by an older version: the kind's names
        return output_names(experiment.kind)
