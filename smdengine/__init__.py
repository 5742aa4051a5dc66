"""smdengine — the science of SMD Lab.

The service (api/, worker/, smdcli/, store/) imports only this package's top level. Validate → build
→ integrate, as a solver library:

    spec = parse_spec({"kind": "nrq", "seed": 0, "params": {...}})   # pydantic.ValidationError on bad input
    result = run(spec, on_progress=print, should_stop=lambda: False)
    result.to_document()   # {"series": {...}, "theory": {...}, "summary": {...}}

Importing it imports no torch (specs, output names and plot definitions are torch-free); torch is
loaded when a run or prediction starts. Kinds and models are registered in ``_registry``; the run
loop is ``_driver``; a simulator implements ``_simulator.Simulator``. Everything with a leading
underscore, and the kind subpackages (``nrq``, ``sde``, ``train``), is internal.
This package imports no web, queue or database library.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smdengine._declare import Outputs, PlotDef
from smdengine._registry import (
    KINDS,
    SPECS,
    ExperimentSpec,
    full_document_plots,
    output_names,
    parse_spec,
    plot_key,
    plots,
    spec_json_schema,
)
from smdengine._runtime import (
    LAYER_SEPARATOR,
    Cancelled,
    Checkpoint,
    CheckpointHooks,
    IncompatibleCheckpoint,
    Progress,
    RunResult,
    json_safe,
    layer_key,
    split_layers,
)
from smdengine._spec_base import tagged_union

if TYPE_CHECKING:
    import torch

    from smdengine._registry import AnySpec
    from smdengine._runtime import ProgressCallback, StopCheck


def run(spec: AnySpec | dict[str, Any], *, on_progress: ProgressCallback | None = None,
        should_stop: StopCheck | None = None, progress_interval: float = 0.5,
        data_dir: str | None = None, checkpoint: CheckpointHooks | None = None) -> RunResult:
    """Run one experiment to completion (:func:`smdengine._driver.run`)."""
    from smdengine import _driver

    return _driver.run(spec, on_progress=on_progress, should_stop=should_stop, progress_interval=progress_interval,
                       data_dir=data_dir, checkpoint=checkpoint)


def predict(spec: AnySpec | dict[str, Any]) -> dict[str, Any]:
    """Theory predictions for a spec, aligned on the steps the run will record (no simulation)."""
    from smdengine import _driver

    return _driver.predict(spec)


def resolve_device(device: str) -> torch.device:
    """``"auto"`` → cuda when available, else cpu; ``"cuda"`` fails fast when there is none."""
    from smdengine import _driver

    return _driver.resolve_device(device)


__all__ = [
    "KINDS",
    "LAYER_SEPARATOR",
    "SPECS",
    "Cancelled",
    "Checkpoint",
    "CheckpointHooks",
    "ExperimentSpec",
    "IncompatibleCheckpoint",
    "Outputs",
    "PlotDef",
    "Progress",
    "RunResult",
    "full_document_plots",
    "json_safe",
    "layer_key",
    "output_names",
    "parse_spec",
    "plot_key",
    "plots",
    "predict",
    "resolve_device",
    "run",
    "spec_json_schema",
    "split_layers",
    "tagged_union",
]
