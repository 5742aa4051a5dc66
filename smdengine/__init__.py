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

from smdengine._compare import (
    CURVE_POINTS,
    OVERLAY_X,
    ChildRecord,
    curve_grid,
    group_by_point,
    study_table,
    table_columns,
    theory_curve,
    theory_curves,
    theory_of,
    time_axis,
)
from smdengine._declare import Outputs, PlotDef
from smdengine._driver import fuse_key, predict, resolve_device, run, run_fused
from smdengine._provenance import engine_version, provenance
from smdengine._registry import (
    KINDS,
    PHASE_SUMMARY,
    SPECS,
    ExperimentSpec,
    continuable,
    full_document_plots,
    layer_metric_names,
    load_simulators,
    output_names,
    parse_spec,
    plot_key,
    plots,
    series_names,
    spec_json_schema,
    spec_paths,
    spec_warnings,
    summary_names,
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
from smdengine._spec_base import WORK_UNITS, Label, error_location, error_message, printable, tagged_union
from smdengine._study import (
    DERIVED_AXES,
    MAX_CURVES,
    Child,
    Span,
    StudyError,
    StudySpec,
    curve_axes,
    derived_values,
    distinct_curves,
    expand_study,
    field_path,
    override_spec,
    valid_paths,
)
from smdengine.presets import PRESETS, CheckDef, PanelDef, Preset, estimate, evaluate_checks, preset_study

__all__ = ["WORK_UNITS", "CURVE_POINTS", "DERIVED_AXES", "MAX_CURVES", "OVERLAY_X", "curve_axes", "curve_grid", "distinct_curves", "Child", "ChildRecord", "Span", "StudyError", "StudySpec", "derived_values",
           "expand_study", "override_spec", "field_path", "group_by_point", "study_table", "table_columns", "theory_curve", "theory_curves", "theory_of", "time_axis",
           "valid_paths", "KINDS", "LAYER_SEPARATOR", "SPECS", "Cancelled", "Checkpoint", "CheckpointHooks", "ExperimentSpec",
           "IncompatibleCheckpoint", "Outputs", "PlotDef", "Progress", "RunResult", "full_document_plots", "json_safe",
           "layer_key", "layer_metric_names", "load_simulators", "output_names", "parse_spec", "plot_key", "plots", "predict", "resolve_device", "run",
           "series_names",
           "run_fused", "fuse_key", "error_location", "error_message", "continuable", "spec_paths", "summary_names", "PHASE_SUMMARY", "engine_version", "provenance",
           "spec_json_schema", "spec_warnings", "split_layers", "tagged_union", "Label", "printable", "PRESETS", "CheckDef", "PanelDef", "Preset", "estimate",
           "evaluate_checks", "preset_study"]
