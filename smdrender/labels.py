"""Legend labels of a study's points from their axis values, without matplotlib: the PNGs
(:mod:`smdrender.study_plots`) and the charts' JSON (``api/routes/study_charts.py``) name points and theory
curves alike."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any


def short_names(paths: Sequence[str]) -> dict[str, str]:
    """Each dotted path by its shortest unique tail (``params.lr`` → ``lr``; three schedule entries'
    ``rescale`` → ``0.rescale``, ``1.rescale``, ``2.rescale``), for legends."""
    out: dict[str, str] = {}
    for path in paths:
        parts = path.split(".")
        for k in range(1, len(parts) + 1):
            tail = ".".join(parts[-k:])
            if sum(p == tail or p.endswith("." + tail) for p in paths) == 1:
                break
        out[path] = tail
    return out


def point_label(values: Mapping[str, Any], paths: Sequence[str] | None = None, seed: int | None = None) -> str:
    """A legend label from axis values (those of ``paths``, default all): ``lr=0.1, weight_decay=0.01``,
    with ``seed=…`` when given. A point that names its run (the axis ``name``) is labelled by that name
    alone: its other values are what the name stands for (e.g. a schedule's every factor)."""
    paths = [p for p in (values if paths is None else paths) if p in values]
    if "name" in paths:
        return ", ".join([str(values["name"]), *([f"seed={seed}"] if seed is not None else [])])
    names = short_names(paths)
    parts = [f"{names[p]}={legend_value(values[p])}" for p in paths]
    return ", ".join([*parts, *([f"seed={seed}"] if seed is not None else [])])


def compact_json(value: Any) -> str:
    """A list or object as the study's table, its legends and a heatmap's levels all write it: JSON without
    spaces, ``[{"step":600,"lr_factor":0.1}]``."""
    return json.dumps(value, separators=(",", ":"), allow_nan=True)


def legend_value(value: Any) -> str:
    """An axis value in a legend: a float to 4 significant digits, an int or a string as it is, anything else (a
    schedule's list, a boolean, null) as compact JSON, as the study's table and the dashboard's legends write
    lists and booleans: ``[{"step":600,"lr_factor":0.1,"rescale":false}]``, not Python's repr. (The preset
    checks' tables shorten long values instead: smdrender.presets.value_text.)"""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return str(value)
    return compact_json(value)


def curve_label(served: Sequence[Mapping[str, Any]], fixed: Sequence[str],
                every: Sequence[Mapping[str, Any]]) -> str | None:
    """A scatter's theory curve's legend label from the values of the ``fixed`` axes of the combinations it
    serves, among ``every`` combination of the study: None when it serves them all (the one curve); the
    values they share where those name exactly the served ones (``weight_decay=0.01`` for a curve the
    init_std does not move); else each combination, joined by `` / `` (a theory of ηλ/(1−α) serves λ = 0.02,
    α = 0 and λ = 0.01, α = 0.5 alike)."""
    if len(served) >= len(every):
        return None
    common = shared_values(served, fixed)
    matching = [e for e in every if all(e.get(a) == v for a, v in common.items())]
    if common and len(matching) == len(served):
        return point_label(common, list(common))
    return " / ".join(point_label(s, fixed) for s in served)


def shared_values(served: Sequence[Mapping[str, Any]], fixed: Sequence[str]) -> dict[str, Any]:
    """The values of the ``fixed`` axes on which every one of ``served`` agrees."""
    return {a: served[0].get(a) for a in fixed if served and all(s.get(a) == served[0].get(a) for s in served)}


def theory_label(name: str, detail: str = "") -> str:
    """A theory line's legend entry: the quantity it predicts, then ``(theory…)`` with ``detail`` (" at
    equilibrium", ", layer's colour"): ``norm_sq_theory`` is "norm_sq (theory)", not "norm_sq_theory (theory)".
    The dashboard's charts.js ``theoryLabel`` writes the same."""
    return f"{name.removesuffix('_theory') or name} (theory{detail})"
