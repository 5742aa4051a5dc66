"""Assembling the result document from the row and its stored series: per-layer split, field
selection, downsampling."""
from __future__ import annotations

import bisect
import logging
from typing import Any

from api.responses import query_error
from smdengine import LAYER_SEPARATOR, json_safe, output_names, split_layers
from smdrender.downsample import downsample_indices, minmax_indices
from store import jobs
from store.models import Experiment
from store.series import read_series, read_series_after

log = logging.getLogger(__name__)


def result_document(db: str, experiment: Experiment, fields: list[str] | None = None,
                    max_points: int | None = None, since_step: int | None = None,
                    until_step: int | None = None, downsample: str = "even") -> dict[str, Any]:
    """The docs/measurements.md document. Flat stored series named ``"<layer>/<metric>"`` (per-layer metrics
    of the ``train`` kind) go to ``layers: {layer: {metric: [...]}}``, the others to ``series``;
    ``layers`` is ``{}`` for kinds without layers. While running, series and layer series hold the
    points written so far and theory series are cut to the same length, so everything stays
    aligned on ``step``.

    ``fields`` selects by name: a series, theory or distribution name; a per-layer metric name
    (``au_rms``: that metric in every layer); a full key ``"<layer>/<metric>"`` (that one series);
    or a layer name (all of that layer's metrics). ``step`` is always kept.

    ``since_step`` keeps only the points recorded after that step and ``until_step`` those at or
    before it (series, layers and theory series alike), before any downsampling."""
    if since_step is None:
        offset, stored = 0, read_series(db, experiment.id)
    else:  # only the stored points from point `offset` on: those after since_step, and a few before
        offset, stored = read_series_after(db, experiment.id, since_step)
    series, layers = split_layers(stored)
    n = offset + len(series.get("step", []))
    # not loaded with the row (store.jobs.get); unchanged since the row's revision: from memory
    stored_theory, distributions = jobs.outputs(db, experiment.id, experiment.revision)
    theory = {k: (v[:n] if isinstance(v, list) else v) for k, v in stored_theory.items()}
    if (since_step is not None or until_step is not None) and n:
        steps = series["step"]  # recorded in increasing order
        first = 0 if since_step is None else bisect.bisect_right(steps, since_step)
        end = len(steps) if until_step is None else bisect.bisect_right(steps, until_step)
        window = slice(first, max(first, end))
        series = {k: v[window] for k, v in series.items()}
        layers = {layer: {m: v[window] for m, v in metrics.items()} for layer, metrics in layers.items()}
        in_theory = slice(offset + first, offset + max(first, end))  # theory holds every point from 0
        theory = {k: (v[in_theory] if isinstance(v, list) else v) for k, v in theory.items()}
        n = len(series["step"])
    if fields:
        _check_fields(experiment, fields, series, layers, theory, distributions, recorded=n > 0)
        wanted = set(fields)
        series = {k: v for k, v in series.items() if k == "step" or k in wanted}
        theory = {k: v for k, v in theory.items() if k in wanted}
        distributions = {k: v for k, v in distributions.items() if k in wanted}
        layers = {layer: {m: v for m, v in metrics.items()
                          if layer in wanted or m in wanted or f"{layer}{LAYER_SEPARATOR}{m}" in wanted}
                  for layer, metrics in layers.items()}
        layers = {layer: metrics for layer, metrics in layers.items() if metrics}
    if max_points is not None and n > max_points:
        keep = (minmax_indices([*series.values(), *(v for m in layers.values() for v in m.values())], n, max_points)
                if downsample == "minmax" else downsample_indices(n, max_points))
        series = {k: [v[i] for i in keep] for k, v in series.items()}
        layers = {layer: {m: [v[i] for i in keep] for m, v in metrics.items()} for layer, metrics in layers.items()}
        theory = {k: ([v[i] for i in keep] if isinstance(v, list) else v) for k, v in theory.items()}
    return {
        "id": experiment.id, "kind": experiment.kind, "status": experiment.status,
        "progress": experiment.progress, "spec": experiment.spec,
        "series": json_safe(series), "layers": json_safe(layers), "theory": json_safe(theory),
        "summary": json_safe(experiment.summary or {}), "distributions": json_safe(distributions),
    }


def _check_fields(experiment: Experiment, fields: list[str], series: dict, layers: dict, theory: dict,
                  distributions: dict, recorded: bool) -> None:
    """422 naming the unknown fields and listing what is available (series, theory, distribution,
    layer and per-layer metric names; full ``"<layer>/<metric>"`` keys are accepted, not listed).

    Layer names are only known once points are recorded: before that, a full key whose metric is a
    known name is accepted (it selects nothing until the layer exists); a bare layer name is not."""
    names = set(series) | set(theory) | set(distributions) | set(_output_names(experiment)) | {"step"}
    metrics = {m for per_layer in layers.values() for m in per_layer}
    known = names | metrics | set(layers)

    def is_known(field: str) -> bool:
        if field in known:
            return True
        layer, sep, metric = field.rpartition(LAYER_SEPARATOR)
        if not sep:
            return False
        return metric in layers.get(layer, ()) or (not recorded and metric in known)

    unknown = [f for f in fields if not is_known(f)]
    if unknown:
        raise query_error("fields", f"unknown field(s) {', '.join(unknown)}; available: {', '.join(sorted(known))}"
                          + (f" and '<layer>{LAYER_SEPARATOR}<metric>' keys" if layers else ""))


def _output_names(experiment: Experiment) -> tuple[str, ...]:
    """The names the experiment's spec can produce; for a spec stored by an older version, those of
    its kind; when even that fails (an engine module missing or broken), none (the known names are
    then what is stored), never a 500."""
    for source in (experiment.spec, experiment.kind):
        try:
            return output_names(source)
        except Exception:  # noqa: BLE001 - only narrows a 422 listing
            log.debug("output_names(%r) failed", source, exc_info=True)
    return ()
