"""The entry points: dispatch a validated spec to its simulator module.

Each simulator module (``smdengine.nrq.simulate``, ``smdengine.sde.<model>``) provides
``simulate(spec, on_progress=, should_stop=, progress_interval=, checkpoint=)``, ``predict(spec)``
and the names it produces: ``METRICS`` (series), ``THEORY`` and ``DISTRIBUTIONS``. Checkpointing
follows the protocol of :mod:`smdengine.recorder`.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from smdengine.runtime import (
    CheckpointHooks,
    IncompatibleCheckpoint,
    ProgressCallback,
    RunResult,
    StopCheck,
    fingerprint,
    resolve_device,
)
from smdengine.sde.spec import MODELS as _SDE_MODELS
from smdengine.spec import KINDS, ExperimentSpec, parse_spec


def _module(spec) -> ModuleType:
    if spec.kind == "nrq":
        return importlib.import_module("smdengine.nrq.simulate")
    if spec.kind == "train":
        return importlib.import_module("smdengine.train.simulate")
    return importlib.import_module(f"smdengine.sde.{spec.params.model}")


def run(spec: ExperimentSpec | dict, *, on_progress: ProgressCallback | None = None,
        should_stop: StopCheck | None = None, progress_interval: float = 0.5,
        data_dir: str | None = None, checkpoint: CheckpointHooks | None = None) -> RunResult:
    """Run one experiment to completion.

    on_progress: called with a :class:`Progress` at most every ``progress_interval`` seconds and
    once at the end, carrying the points recorded since the previous call.
    should_stop: polled after each progress event; when it returns true the run raises
    :class:`Cancelled` (all points so far were already delivered).
    data_dir: where datasets that are not bundled live (``train`` kind, cifar10); the service
    passes ``SMD_DATA_DIR``.
    checkpoint: ``save`` receives a :class:`~smdengine.runtime.Checkpoint` every ``interval``
    seconds (after a progress event); with ``resume`` the run continues from that checkpoint and
    its progress events carry only the points after it. Raises
    :class:`~smdengine.runtime.IncompatibleCheckpoint` when ``resume`` was made by another spec,
    device type or format.
    """
    spec = parse_spec(spec)
    extra: dict[str, Any] = {"data_dir": data_dir} if spec.kind == "train" else {}
    if checkpoint is not None:
        checkpoint.fingerprint = fingerprint(spec.model_dump_json(), resolve_device(spec.device))
        if checkpoint.resume is not None and checkpoint.resume.fingerprint != checkpoint.fingerprint:
            raise IncompatibleCheckpoint("checkpoint: expected one made by this spec on this device type, "
                                         "got one from another run")
        extra["checkpoint"] = checkpoint
    return _module(spec).simulate(spec, on_progress=on_progress, should_stop=should_stop,
                                  progress_interval=progress_interval, **extra)


def predict(spec: ExperimentSpec | dict) -> dict[str, Any]:
    """Theory predictions for a spec, aligned on the steps the run will record (no simulation)."""
    spec = parse_spec(spec)
    return _module(spec).predict(spec)


def output_names(spec: ExperimentSpec | dict | str) -> tuple[str, ...]:
    """Every series, theory and distribution name a run of this spec can produce. A bare kind
    string gives the names over all of that kind's models."""
    if isinstance(spec, str):
        if spec not in KINDS:
            raise ValueError(f"kind: expected one of {', '.join(map(repr, KINDS))}, got {spec!r}")
        modules = ([importlib.import_module("smdengine.nrq.simulate")] if spec == "nrq" else
                   [importlib.import_module("smdengine.train.simulate")] if spec == "train" else
                   [importlib.import_module(f"smdengine.sde.{m}") for m in _SDE_MODELS])
    else:
        modules = [_module(parse_spec(spec))]
    names: dict[str, None] = {"step": None}
    for module in modules:
        for name in (*module.METRICS, *module.THEORY, *getattr(module, "DISTRIBUTIONS", ())):
            names[name] = None
    return tuple(names)
