"""smdengine — the science of SMD Lab.

A small solver-library surface: one entry point per experiment kind, reached through
:func:`run` with a validated spec. Everything else is private.

    spec = parse_spec({"kind": "nrq", "seed": 0, "params": {...}})   # pydantic.ValidationError on bad input
    result = run(spec, on_progress=print, should_stop=lambda: False)
    result.to_document()   # {"series": {...}, "theory": {...}, "summary": {...}}

This package imports no web, queue or database library.
"""
from smdengine.entry import output_names, predict, run
from smdengine.runtime import (
                               Cancelled,
                               Checkpoint,
                               CheckpointHooks,
                               IncompatibleCheckpoint,
                               Progress,
                               RunResult,
                               resolve_device,
)
from smdengine.spec import ExperimentSpec, parse_spec, spec_json_schema

__all__ = [
    "Cancelled",
    "Checkpoint",
    "CheckpointHooks",
    "IncompatibleCheckpoint",
    "ExperimentSpec",
    "Progress",
    "RunResult",
    "output_names",
    "parse_spec",
    "predict",
    "resolve_device",
    "run",
    "spec_json_schema",
]
