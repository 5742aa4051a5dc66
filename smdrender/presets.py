"""Presets as shown: the catalog entries `GET /v1/presets` (and `smd presets list`) show, the pending checks of a
running preset study, and the preset's figure (its panels drawn from the children's series, the
verdicts under them). Pure functions of what the caller gathered (no database, no HTTP): the API
(`api/routes/presets.py`, `api/routes/studies.py`) and `smd presets run --local` share them, so the
served figure and the local one are drawn by the same code.

The presets themselves, their study specs, estimates and checks are the engine's
(`smdengine.PRESETS`, `preset_study`, `estimate`, `evaluate_checks`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import smdengine
from smdengine import json_safe, theory_of, time_axis

MAX_LINE_POINTS = 2000      # points per line of a panel (downsampled beyond)


def preset_or_none(preset_id: str) -> Any | None:
    return smdengine.PRESETS.get(preset_id)


def catalog_entry(preset: Any, details: bool = False) -> dict[str, Any]:
    """What `GET /v1/presets` shows of a preset; with ``details`` each size also carries the study
    spec it expands to (`GET /v1/presets/{id}`)."""
    sizes: dict[str, Any] = {}
    for size in preset.sizes:
        estimate = smdengine.estimate(preset.id, size)
        entry = {"runs": int(estimate["runs"]), "work": int(estimate["work"]), "gpu": bool(estimate["gpu"])}
        if details:
            entry["spec"] = smdengine.preset_study(preset.id, size)
        sizes[size] = entry
    return json_safe({
        "id": preset.id, "title": preset.title, "seed": str(preset.seed), "figure": preset.figure,
        "description": preset.description, "kinds": list(preset.kinds), "tier": int(preset.tier),
        "exploratory": bool(preset.exploratory),
        "min_seeds": int(preset.min_seeds), "max_seeds": preset.max_seeds,
        "checks": [{"id": c.id, "claim": c.claim} for c in preset.checks],
        "panels": [{"title": p.title, "metric": p.metric, "x": p.x, "log_y": bool(p.log_y),
                    "points": None if p.points is None else [int(i) for i in p.points]} for p in preset.panels],
        "sizes": sizes})


def pending_checks(preset: Any) -> list[dict[str, Any]]:
    """The checks of a study that has not ended: each claim with verdict ``pending``."""
    return [{"id": c.id, "claim": c.claim, "predicted": None, "measured": None, "tolerance": None,
             "tolerance_rule": None, "verdict": "pending", "note": "evaluated once every run has ended"}
            for c in preset.checks]


def failed_checks(preset: Any, error: BaseException) -> list[dict[str, Any]]:
    """The checks when the engine could not evaluate them: verdict ``error``, the reason in the note."""
    return [{"id": c.id, "claim": c.claim, "predicted": None, "measured": None, "tolerance": None,
             "tolerance_rule": None, "verdict": "error",
             "note": f"the engine could not evaluate the checks: {type(error).__name__}: {error}"}
            for c in preset.checks]


# ----------------------------------------------------------------------------- figure


@dataclass(frozen=True)
class FigureChild:
    """What a panel needs of one child: its place, spec and recorded document (series, layers, theory)."""

    index: int
    point: int
    seed: int
    values: Mapping[str, Any]
    kind: str
    spec: Mapping[str, Any]
    status: str
    series: Mapping[str, list]
    layers: Mapping[str, Mapping[str, list]]
    theory: Mapping[str, Any]


def figure_child(index: int, point: int, seed: int, values: Mapping[str, Any], document: Mapping[str, Any]
                 ) -> FigureChild:
    """A child from its result document (the service's `result_document`, or `smd study run`'s file)."""
    return FigureChild(index=index, point=point, seed=seed, values=values or {}, kind=str(document.get("kind")),
                       spec=document.get("spec") or {}, status=str(document.get("status")),
                       series=document.get("series") or {}, layers=document.get("layers") or {},
                       theory=document.get("theory") or {})


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _float(value: Any) -> float:
    return float(value) if _number(value) else math.nan


def _metric_values(child: FigureChild, metric: str) -> tuple[list, str]:
    """The recorded values of ``metric`` and a label suffix: a global series; a per-layer key
    ``"<layer>/<metric>"``; or a per-layer metric name, averaged over the layers that record it."""
    if metric in child.series:
        return list(child.series[metric]), ""
    layer, sep, name = metric.rpartition(smdengine.LAYER_SEPARATOR)
    if sep and name in child.layers.get(layer, {}):
        return list(child.layers[layer][name]), ""
    per_layer = [list(metrics[metric]) for metrics in child.layers.values() if metric in metrics]
    if not per_layer:
        return [], ""
    n = min(len(v) for v in per_layer)
    mean = [sum(_float(v[i]) for v in per_layer) / len(per_layer) for i in range(n)]
    return mean, f" (mean of {len(per_layer)} layers)" if len(per_layer) > 1 else ""


def _labels(children: Sequence[FigureChild], seeds: bool = True) -> list[str]:
    """Legend labels: the axis values that differ between the panel's children, and (with
    ``seeds``) the seed when the seeds differ."""
    paths = list(dict.fromkeys(path for c in children for path in c.values))
    varying = [p for p in paths if len({repr(c.values.get(p)) for c in children}) > 1]
    seeds = seeds and len({c.seed for c in children}) > 1
    from smdrender.labels import point_label

    return [point_label(c.values, varying, c.seed if seeds else None) or f"point {c.point}" for c in children]


def panel_lines(panel: Any, children: Sequence[FigureChild]) -> list[dict[str, Any]]:
    """The lines of one panel: ``panel.metric`` of each succeeded child of ``panel.points`` (all when
    None; the seeds of a point share its colour and its legend entry) against ``panel.x`` (`smdengine.time_axis`), its theory (the metric's first dashed theory,
    `smdengine.theory_of`) beside it; at most :data:`MAX_LINE_POINTS` points per line."""
    from smdrender.downsample import downsample_indices

    chosen = [c for c in children if c.status == "succeeded"
              and (panel.points is None or c.point in set(panel.points))]
    lines = []
    seen: set[int] = set()
    for child, label in zip(chosen, _labels(chosen, seeds=False), strict=True):
        steps = list(child.series.get("step", []))
        ys, suffix = _metric_values(child, panel.metric)
        try:
            xs = time_axis(child.spec, steps, panel.x, child.theory)
        except ValueError:
            xs = [float(s) for s in steps]   # an axis this child cannot have: drawn against step
        keep = downsample_indices(len(steps), MAX_LINE_POINTS) if len(steps) > MAX_LINE_POINTS else range(len(steps))
        name = theory_of(child.kind, child.spec, panel.metric.rpartition(smdengine.LAYER_SEPARATOR)[2])
        given = child.theory.get(name) if name else None
        theory = given if isinstance(given, list) else [given] * len(steps) if _number(given) else None
        first = child.point not in seen
        seen.add(child.point)
        lines.append({"label": (label + suffix) if first else None, "group": child.point, "x": [xs[i] for i in keep],
                      "y": [_float(ys[i]) if i < len(ys) else math.nan for i in keep],
                      "theory": None if theory is None else [_float(theory[i]) if i < len(theory) else math.nan
                                                             for i in keep]})
    return lines


def value_text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(value_text(v) for v in value[:6]) + (", …" if len(value) > 6 else "") + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {value_text(v)}" for k, v in list(value.items())[:6]) + "}"
    return str(value)


VERDICT_MARKS = {"reproduced": "✓", "not_reproduced": "✗", "inconclusive": "?", "finding": "◆", "pending": "…", "error": "!"}


def verdict_text(check: Mapping[str, Any]) -> str:
    """One line of a check: verdict, claim, predicted, measured ± tolerance (rule), note."""
    verdict = str(check.get("verdict"))
    text = (f"{VERDICT_MARKS.get(verdict, '·')} {verdict.upper().replace('_', ' ')}: {check.get('claim', '')}  "
            f"predicted {value_text(check.get('predicted'))}, measured {value_text(check.get('measured'))}"
            f" ± {value_text(check.get('tolerance'))}")
    if check.get("tolerance_rule"):
        text += f" ({check['tolerance_rule']})"
    if check.get("note") and verdict not in ("pending",):
        text += f". {check['note']}"
    return text


def render_figure(preset: Any, children: Sequence[FigureChild], checks: Sequence[Mapping[str, Any]] | None,
                  fmt: str, size: str | None = None) -> bytes:
    """The preset's figure: its panels (`smdrender.study_plots.figure`), the checks' verdicts under them."""
    from smdrender import study_plots

    panels = [{"title": p.title, "metric": p.metric, "x": p.x, "log_y": p.log_y,
               "lines": panel_lines(p, children)} for p in preset.panels]
    verdicts = [(verdict_text(c), str(c.get("verdict"))) for c in (checks or [])]
    title = f"{preset.title} — seed {preset.seed}, {preset.figure}" + (f" ({size} size)" if size else "")
    return study_plots.figure(title, panels, verdicts, fmt)
