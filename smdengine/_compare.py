"""A study's comparison (torch-free until a theory curve is asked for): the table of its children, the
same grouped by point over seeds, the time axes of an overlay and the theory of a scatter.

The table has one row per child: ``index``, ``point``, ``seed``, ``experiment_id``, ``status``, ``warnings``
(its spec's warnings, ``"<code>: <message>"`` joined by `` | ``, empty when none), the axis
values (named by their paths), the derived values (:func:`smdengine._study.derived_values`), every
summary value (each metric's tail mean, and each theory series' tail mean) and every scalar theory
value. Grouped by point, each numeric value is the mean over the point's succeeded children beside
``<name>_se``, the standard error of that mean (sample standard deviation / √n; null for n < 2).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from smdengine._registry import parse_spec, plot_key, plots, spec_warnings
from smdengine._science import rate_phases, record_steps, tail_means
from smdengine._study import DERIVED_AXES, MAX_CURVES, Key, derived_values, same_curve, set_path

OVERLAY_X = ("step", "lr_time", "tau", "intrinsic_time")
ROW_FIELDS = ("index", "point", "seed", "experiment_id", "status", "warnings")


@dataclass(frozen=True)
class ChildRecord:
    """What the table needs of one child: where it sits in the study and what it produced."""

    index: int
    point: int
    values: Mapping[str, Any]
    seed: int
    status: str
    spec: Mapping[str, Any]
    summary: Mapping[str, Any] | None = None
    theory: Mapping[str, Any] | None = None
    experiment_id: str | None = None
    warnings: Sequence[Mapping[str, Any]] | None = None   # as stored; None: from the spec (spec_warnings)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def study_table(children: Sequence[ChildRecord]) -> list[dict[str, Any]]:
    """One row per child, in expansion order (see the module docstring for the columns)."""
    rows = []
    for child in sorted(children, key=lambda c: c.index):
        spec = parse_spec(dict(child.spec))
        warnings = child.warnings if child.warnings is not None else spec_warnings(spec)
        row: dict[str, Any] = {"index": child.index, "point": child.point, "seed": child.seed,
                               "experiment_id": child.experiment_id, "status": child.status,
                               "warnings": " | ".join(f"{w['code']}: {w['message']}" for w in warnings)}
        row.update(child.values)
        row.update(derived_values(spec))
        row.update(child.summary or {})
        row.update({k: v for k, v in (child.theory or {}).items() if _number(v) and k not in row})
        rows.append(row)
    return rows


def table_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every column of a table, first seen first."""
    return list(dict.fromkeys(key for row in rows for key in row))


def group_by_point(rows: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> list[dict[str, Any]]:
    """One row per point: its ``warnings`` (the first child's: a point's children differ only by seed), its
    axis and derived values, ``n`` (succeeded children), ``children`` and, for
    every other numeric column, the mean over the succeeded children and ``<name>_se``."""
    fixed = {*ROW_FIELDS, *axes, *DERIVED_AXES}
    points: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        points.setdefault(row["point"], []).append(row)
    out = []
    for point, members in sorted(points.items()):
        first = members[0]
        group: dict[str, Any] = {"point": point, "warnings": first.get("warnings", ""), **{a: first.get(a) for a in axes},
                                 **{d: first[d] for d in DERIVED_AXES if d in first}}
        done = [m for m in members if m["status"] == "succeeded"]
        group.update(n=len(done), children=len(members),
                     statuses=",".join(sorted({m["status"] for m in members})))
        names = [k for k in table_columns(done) if k not in fixed and all(_number(m.get(k)) for m in done)]
        for name in names:
            values = [float(m[name]) for m in done]
            mean = math.fsum(values) / len(values)
            se = (math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))
                  if len(values) > 1 else None)
            group[name], group[f"{name}_se"] = mean, se
        out.append(group)
    return out


# ----------------------------------------------------------------------------- what a metric compares to


def theory_of(kind: str, spec: Mapping[str, Any], metric: str) -> str | None:
    """The theory a metric is drawn against: the first dashed theory of a declared plot of that metric."""
    for plot in plots(plot_key(kind, spec)).values():
        if metric in plot.series and plot.theory:
            return plot.theory[0]
    return None


def time_axis(spec: Mapping[str, Any], steps: Sequence[float], x: str,
              theory: Mapping[str, Any] | None = None) -> list[float]:
    """The x values of an overlay at the recorded ``steps``: ``step``; ``lr_time`` = Σ η per update;
    ``intrinsic_time`` = Σ ηλ per update (t·ηλ at constant rates); ``tau``, seed 002's time change
    τ(t) = ½ ln(1 + (e^{4ηλt} − 1)·η/(2λR₀⁴)) with R₀ the model's ``init_norm`` (1 without one), at
    constant rates only. A theory series of the same name (the normalized linear model's ``tau`` and
    ``lr_time``) is used as it is. Raises ValueError naming what is missing."""
    if x not in OVERLAY_X:
        raise ValueError(f"x: expected one of {', '.join(OVERLAY_X)}, got {x!r}")
    if x == "step":
        return [float(s) for s in steps]
    given = (theory or {}).get(x)
    if isinstance(given, list) and len(given) == len(steps):
        return [float(v) for v in given]
    params = parse_spec(dict(spec)).params
    rates = getattr(params, "lr", None), getattr(params, "weight_decay", None)
    if not (_number(rates[0]) and _number(rates[1])):
        raise ValueError(f"x: {x} needs a model with lr and weight_decay")
    lr, wd = float(rates[0]), float(rates[1])   # type: ignore[arg-type]
    entries = getattr(params, "lr_schedule", None) or getattr(params, "schedule", None) or []
    phases = rate_phases(lr, wd, entries)
    if x == "tau":
        if len(phases) > 1:
            raise ValueError("x: tau needs constant rates (no schedule)")
        import numpy as np

        from smdengine.sde.normalized_linear import time_change
        return time_change(np.asarray(steps, dtype=np.float64), lr, wd, getattr(params, "init_norm", 1.0)).tolist()
    ends = [p.start for p in phases[1:]] + [math.inf]
    rate = [p.lr * (p.weight_decay if x == "intrinsic_time" else 1.0) for p in phases]
    # the rate in force is piecewise constant: sum it over the updates before each recorded step
    return [math.fsum(r * max(0.0, min(float(s), end) - p.start) for r, p, end in zip(rate, phases, ends, strict=True))
            for s in steps]


def theory_value(spec: Any, name: str) -> float | None:
    """A theory value of a spec by the summary rule (a series' tail mean; a number as it is), from
    :func:`smdengine.predict` (imports torch)."""
    from smdengine._driver import predict
    spec = parse_spec(spec)
    predicted = predict(spec)
    value = predicted.get(name)
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, list) or not value:
        return None
    params = spec.params
    # the regular records, as summaries average them: the last entry is the final row's (Simulator.final_row)
    regular = value[:-1] or value
    steps = record_steps(params.steps, params.record_every)[:len(regular)]
    start = params.tail_start() if hasattr(params, "tail_start") else steps[-1]
    return tail_means({"step": steps}, {name: regular}, start).get(name)


def theory_curve(spec: Mapping[str, Any], x: str, metric: str, xs: Sequence[float]) -> list[float | None] | None:
    """The theory of ``metric`` along ``x`` from a child's spec: ``x`` a dotted path is set to each
    value; a derived axis (all linear in η at fixed λ and α) is reached by scaling ``params.lr``.
    None when the metric has no theory, or ``x`` is neither."""
    kind = str(spec.get("kind"))
    name = theory_of(kind, spec, metric)
    if name is None:
        return None
    base = parse_spec(dict(spec))
    if x in DERIVED_AXES:
        x0 = derived_values(base).get(x)
        if not x0:
            return None
        path, values = "params.lr", [base.params.lr * v / x0 for v in xs]   # type: ignore[union-attr]
    else:
        path, values = x, list(xs)
    out: list[float | None] = []
    for value in values:
        data = base.model_dump(mode="json")
        set_path(data, path, value)
        try:
            out.append(theory_value(data, name))
        except ValueError:   # outside the spec's bounds: no theory there
            out.append(None)
    return out



CURVE_POINTS = 60       # x values of a scatter's theory curve
PROBE_POINTS = 8        # of those, where two candidates are compared before either is drawn in full
MAX_CANDIDATES = 96     # combinations probed at most (each probe costs PROBE_POINTS theory values)


def curve_grid(low: float, high: float) -> list[float]:
    """CURVE_POINTS values from low to high: geometric when both are positive and a decade or more apart."""
    if high <= low:
        return [low]
    if low > 0 and high / low > 10:
        return [math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / (CURVE_POINTS - 1))
                for i in range(CURVE_POINTS)]
    return [low + (high - low) * i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS)]


def theory_curves(candidates: Sequence[tuple[Key, Mapping[str, Any]]], x: str, metric: str,
                  xs: Sequence[float]) -> list[tuple[list[Key], list[float], list[float | None]]]:
    """A scatter's theory curves of ``metric`` along ``x`` over ``xs``, from one (key, child spec) per
    combination of the values of the axes a curve holds fixed (:func:`smdengine.curve_axes`), as
    :func:`distinct_curves` gives them: each distinct curve once with the keys it serves.

    Candidates are first compared on PROBE_POINTS of ``xs`` (its ends included), and only one per group
    that agrees there is computed in full: a theory of ηλ alone along ``intrinsic_lr`` draws one curve
    for any number of λ values at the cost of one curve and a probe per λ. The others of a group are
    then compared where that curve starts or stops having values (a regime bound, e.g. ηλ·dt ≤ 0.1, that
    falls between two probes for one dt and not another), and split off where they differ. Curves are
    told apart by their values at the probes and by where their gaps begin and end (analytic pieces
    that agree at eight points and differ between them would be merged).

    Along a whole-number field (``params.steps``, ``params.dim``) ``xs`` are rounded, each once: such a
    field refuses 3457.6, and a curve of values only at its ends drew nothing.

    Empty when more than MAX_CANDIDATES combinations, or more than MAX_CURVES distinct curves, would
    have to be drawn (probing stops there), or when a spec cannot be moved along ``x`` (a path it lacks);
    candidates whose metric has no theory, or none at the probed values, are left out."""
    if len(candidates) > MAX_CANDIDATES or not xs:
        return []
    try:
        if candidates and _whole_numbers(candidates[0][1], x):
            xs = list(dict.fromkeys(round(v) for v in xs))
        groups = _probe_groups(candidates, x, metric, [xs[i] for i in _probe_indices(len(xs))])
        return _drawn(groups, x, metric, xs) if groups is not None else []
    except (KeyError, IndexError, TypeError, ValueError):   # x is not a path these specs can be moved along
        return []


def _whole_numbers(spec: Mapping[str, Any], x: str) -> bool:
    """Whether ``x`` is a path to a whole-number field of ``spec`` (its validated value an int, not a bool:
    a float field holds a float even where the spec wrote 1)."""
    if x in DERIVED_AXES:
        return False
    node: Any = parse_spec(dict(spec)).model_dump(mode="json")
    for part in x.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return isinstance(node, int) and not isinstance(node, bool)


def _probe_indices(n: int) -> list[int]:
    stride = max(1, math.ceil((n - 1) / (PROBE_POINTS - 1)))
    return sorted({*range(0, n, stride), n - 1})


_Member = tuple[Key, Mapping[str, Any]]


def _probe_groups(candidates: Sequence[_Member], x: str, metric: str,
                  probe: list[float]) -> list[list[_Member]] | None:
    """The candidates grouped by their values at ``probe``, in order; None past MAX_CURVES groups."""
    groups: list[tuple[list[_Member], list[float | None]]] = []
    for key, spec in candidates:
        ys = theory_curve(spec, x, metric, probe)
        if ys is None or not any(y is not None and math.isfinite(y) for y in ys):   # no theory here
            continue
        same = next((members for members, seen in groups if same_curve(ys, seen)), None)
        if same is not None:
            same.append((key, spec))
        elif len(groups) == MAX_CURVES:
            return None
        else:
            groups.append(([(key, spec)], ys))
    return [members for members, _ in groups]


def _drawn(groups: list[list[_Member]], x: str, metric: str,
           xs: Sequence[float]) -> list[tuple[list[Key], list[float], list[float | None]]]:
    """Each group's curve from its first member over ``xs``; a member whose values differ from it where it
    starts or stops having values (:func:`_gap_edges`) leaves the group for a curve of its own."""
    curves: list[tuple[list[Key], list[float], list[float | None]]] = []
    queue = list(groups)
    while queue:
        first, *others = queue.pop(0)
        ys = theory_curve(first[1], x, metric, xs)
        if ys is None:
            continue
        edges = _gap_edges(ys)
        kept: list[_Member] = [first]
        apart: list[_Member] = []
        for member in others:
            at_edges = theory_curve(member[1], x, metric, [xs[i] for i in edges]) if edges else []
            (kept if at_edges is not None and same_curve(at_edges, [ys[i] for i in edges]) else apart).append(member)
        if apart:
            if len(curves) + 1 + len(queue) + 1 > MAX_CURVES:
                return []
            queue.append(apart)
        curves.append(([key for key, _ in kept], list(xs), ys))
    return curves


def _gap_edges(ys: Sequence[float | None]) -> list[int]:
    """The indices on both sides of each place where ``ys`` goes from a value to a gap or back."""
    gap = [y is None or math.isnan(y) for y in ys]
    return sorted({i for t in range(1, len(ys)) if gap[t] != gap[t - 1] for i in (t - 1, t)})
