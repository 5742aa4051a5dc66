"""The entry points: dispatch a validated spec to its kind's simulator."""
from __future__ import annotations

from typing import Any, Optional

from smdengine.runtime import ProgressCallback, RunResult, StopCheck
from smdengine.spec import ExperimentSpec, parse_spec


def run(spec: ExperimentSpec | dict, *, on_progress: Optional[ProgressCallback] = None,
        should_stop: Optional[StopCheck] = None, progress_interval: float = 0.5) -> RunResult:
    """Run one experiment to completion.

    on_progress: called with a :class:`Progress` at most every ``progress_interval`` seconds and
    once at the end, carrying the points recorded since the previous call.
    should_stop: polled after each progress event; when it returns true the run raises
    :class:`Cancelled` (all points so far were already delivered).
    """
    spec = parse_spec(spec)
    if spec.kind == "nrq":
        from smdengine.nrq.simulate import simulate_nrq

        return simulate_nrq(spec, on_progress=on_progress, should_stop=should_stop,
                            progress_interval=progress_interval)
    raise ValueError(f"kind: expected one of 'nrq', got {spec.kind!r}")


def output_names(kind: str) -> tuple[str, ...]:
    """Every series and theory name a run of this kind can produce."""
    if kind == "nrq":
        from smdengine.nrq.simulate import METRICS, THEORY

        return ("step", *METRICS, *THEORY)
    raise ValueError(f"kind: expected one of 'nrq', got {kind!r}")


def predict(spec: ExperimentSpec | dict) -> dict[str, Any]:
    """Theory predictions for a spec, aligned on the steps the run will record (no simulation)."""
    spec = parse_spec(spec)
    if spec.kind == "nrq":
        from smdengine.nrq.predict import predict_nrq

        return predict_nrq(spec)
    raise ValueError(f"kind: expected one of 'nrq', got {spec.kind!r}")
