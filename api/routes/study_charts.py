"""A study's charts as data (JSON), for pages that draw them interactively: the content of the overlay,
heatmap and scatter PNGs of :mod:`api.routes.studies` — measured values beside their theory — in one
request per chart, never one per child.

- ``GET /v1/studies/{id}/charts``: what can be drawn now: the metrics with series (overlays), the measured
  summaries (scatter, heatmap), the axes and derived values, the overlay's time axes, and the axes whose
  values vary (what names a point).
- ``…/charts/overlay``: every started child's series of one metric (running ones as far as they got),
  its point, seed and axis values, and its theory series.
- ``…/charts/scatter``: per point the mean over seeds, its standard error and the theory value; the
  theory as a curve along x, one per value of a ``by`` axis.
- ``…/charts/heatmap``: the measured grid, its standard errors and the theory grid, and whether the iso-ηλ
  diagonals apply (x and y are the learning rate and the weight decay).
"""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from api.deps import DbDep, StudyDep
from api.responses import query_error
from api.routes.studies import (
    METRIC,
    NONE_STARTED,
    STARTED,
    STUDY_NOT_FOUND,
    _axes,
    _checked,
    _metrics,
    _not_applicable,
    _number,
    _placed,
    _point_rows,
    _series_metrics,
    overlay_line,
    scatter_curves,
)
from api.schemas import ValidationErrorOut
from smdengine import OVERLAY_X, json_safe, series_names, theory_of
from smdrender import grid
from store import series, studies

router = APIRouter(prefix="/v1/studies", tags=["studies"])

ISO_AXES = ("params.lr", "params.weight_decay")
CHART_RESPONSES: dict[int | str, dict[str, Any]] = {
    **STUDY_NOT_FOUND,
    422: {"description": "A metric or axis that does not apply to this study (a validation error whose msg lists "
                         "those that do).",
          "model": ValidationErrorOut}}


class ChartOptions(BaseModel):
    """What a study's charts can show now."""

    series_metrics: list[str] = Field(..., description="Metrics recorded as series by the children's kinds: "
                                                       "what an overlay draws (running children included).")
    summary_metrics: list[str] = Field(..., description="Measured summary values of the succeeded children: "
                                                        "what a scatter or heatmap draws (theory and inputs "
                                                        "excluded). Empty until a child succeeds.")
    axes: list[str] = Field(..., description="The study's axes and the derived values (ηλ, η/λ, …) present: "
                                             "x, y and colour-by choices.")
    varying: list[str] = Field(..., description="The axes whose values differ between points: a point is named "
                                                "by these.")
    overlay_x: list[str] = Field(..., description="The time axes of an overlay.")
    theory: dict[str, str] = Field(default_factory=dict, description="Each metric's theory name, where it has one.")


class OverlayLine(BaseModel):
    experiment_id: str
    point: int
    seed: int
    status: str
    values: dict[str, Any] = Field(..., description="The child's axis values, by dotted path.")
    x: list[float]
    y: list[float | None]
    theory: list[float | None] | None = Field(None, description="The metric's theory at the same x (null: none).")


class OverlayAbsent(BaseModel):
    """A started child whose kind (or model) records no such metric (a compare study may mix kinds)."""

    experiment_id: str
    point: int
    values: dict[str, Any]


class OverlayChart(BaseModel):
    metric: str
    x: str
    theory: str | None = Field(None, description="The theory drawn against the metric (null: none).")
    lines: list[OverlayLine]
    not_recorded: list[OverlayAbsent] = Field(default_factory=list, description=(
        "Started children left out because their kind records no such series (one line per point, not per seed)."))


class ScatterPoint(BaseModel):
    point: int
    values: dict[str, Any]
    x: float
    mean: float | None = Field(None, description="Mean over the point's succeeded children.")
    se: float | None = Field(None, description="Standard error of that mean (null with one seed).")
    n: int = Field(..., description="Succeeded children of the point.")
    theory: float | None = None


class TheoryCurve(BaseModel):
    points: list[int] = Field(default_factory=list, description="The points whose theory lies on this curve: "
                              "those whose values of the axes it holds fixed (every axis but x; along a derived "
                              "value, every axis but the learning rate, which the curve scales) it serves.")
    values: dict[str, Any] = Field(default_factory=dict, description="The values of those axes that all its points "
                                   "share (empty: one curve serves every point, or in a compare study).")
    label: str | None = Field(None, description="A legend label: the values it serves (a compare study: the "
                                                "members); null when one curve serves every point.")
    by: Any = Field(None, description="The value of the colour-by axis that all its points share (null: no "
                                      "colour-by axis, or its points differ in it).")
    x: list[float]
    y: list[float | None]


class ScatterChart(BaseModel):
    metric: str
    x: str
    by: str | None
    theory: str | None
    points: list[ScatterPoint]
    curves: list[TheoryCurve] = Field(default_factory=list, description="The theory along x (from a child's "
                                                                        "spec, x set to each value): one curve per "
                                                                        "combination of the values of the axes it "
                                                                        "holds fixed, where they differ.")


class HeatmapChart(BaseModel):
    metric: str
    x: str
    y: str
    theory: str | None
    xs: list[Any]
    ys: list[Any]
    z: list[list[float | None]] = Field(..., description="z[j][i]: the mean at (xs[i], ys[j]); null: no value.")
    se: list[list[float | None]]
    theory_z: list[list[float | None]] | None = None
    iso: bool = Field(..., description="x and y are the learning rate and the weight decay: iso-ηλ lines apply.")
    averaged_over: dict[str, list[Any]] = Field(default_factory=dict, description="The study's other axes whose "
                                                "values differ within a cell, with their values: each such cell is the "
                                                "mean over those settings (empty: every cell is one setting).")


@router.get("/{study_id}/charts", response_model=ChartOptions, operation_id="getStudyChartOptions",
            responses=STUDY_NOT_FOUND)
def chart_options(study: StudyDep, db: DbDep) -> ChartOptions:
    """What the study's charts can draw now (the page asks once, then per chart)."""
    children, rows = _point_rows(db, study)
    axes = _axes(study, rows)
    varying = [a for a in study.axes if len({repr(r.get(a)) for r in rows}) > 1]
    series_metrics = _series_metrics(children)
    summary = _metrics(children)
    theory: dict[str, str] = {}
    for child in children[:1]:
        for metric in dict.fromkeys([*series_metrics, *summary]):
            name = theory_of(child.kind, child.spec, metric)
            if name:
                theory[metric] = name
    return ChartOptions(series_metrics=series_metrics, summary_metrics=summary, axes=axes, varying=varying,
                        overlay_x=list(OVERLAY_X), theory=theory)


@router.get("/{study_id}/charts/overlay", response_model=OverlayChart, operation_id="getStudyOverlayData",
            responses=CHART_RESPONSES)
def overlay_data(study: StudyDep, db: DbDep, metric: Annotated[str, METRIC],
                 x: Annotated[str, Query(description=f"The time axis: {', '.join(OVERLAY_X)}.")] = "step"):
    """Every started child's series of ``metric`` against ``x`` (at most 2000 points a line), its theory."""
    children = studies.children(db, study.id)
    metrics = _series_metrics(children)
    if metric not in metrics:
        raise _not_applicable("metric", metric, metrics, none=NONE_STARTED)
    if x not in OVERLAY_X:
        raise _not_applicable("x", x, list(OVERLAY_X))
    lines, theory_name, absent = [], None, {}
    for child in children:
        if child.status not in STARTED:
            continue
        if metric not in series_names(child.spec):
            _index, point, values, _seed = _placed(study, child)
            absent.setdefault(point, OverlayAbsent(experiment_id=child.id, point=point, values=json_safe(dict(values))))
            continue
        line = overlay_line(study, child, series.read_series(db, child.id), metric, x)
        if line is None:
            continue
        theory_name = theory_name or line.theory_name
        _index, point, values, seed = _placed(study, child)   # a compare study's member: its own point
        lines.append(OverlayLine(
            experiment_id=child.id, point=point, seed=seed, status=child.status, values=json_safe(dict(values)),
            x=line.x, y=[_finite(v) for v in line.y],
            theory=None if line.theory is None else [_finite(v) for v in line.theory]))
    return OverlayChart(metric=metric, x=x, theory=theory_name, lines=lines, not_recorded=list(absent.values()))


@router.get("/{study_id}/charts/scatter", response_model=ScatterChart, operation_id="getStudyScatterData",
            responses=CHART_RESPONSES)
def scatter_data(study: StudyDep, db: DbDep, metric: Annotated[str, METRIC],
                 x: Annotated[str, Query(max_length=200, description="An axis or derived value.")],
                 by: Annotated[str | None, Query(max_length=200, description="An axis to colour by: the points and "
                                                                             "the theory curves by its value.")] = None):
    """The tail metric per point (mean ± standard error over seeds) against ``x``, the theory per point
    and as curves along x."""
    children, rows = _point_rows(db, study)
    checked = {"x": x, **({"by": by} if by else {})}
    theory = _checked(study, children, rows, metric, **checked)
    if by is not None and (by == x or by not in study.axes):   # a derived value is no child's own value
        others = ", ".join(a for a in study.axes if a != x) or "none"
        raise query_error("by", f"expected an axis of the study other than x ({others}), got {by!r}")
    points = [ScatterPoint(point=r["point"], values={a: r.get(a) for a in study.axes}, x=float(r[x]),
                           mean=_finite(r.get(metric)), se=_finite(r.get(f"{metric}_se")), n=r.get("n", 0),
                           theory=_finite(r.get(theory)) if theory else None)
              for r in json_safe(rows) if _number(r.get(x))]
    curves = [TheoryCurve(points=c.points, values=json_safe(c.values), label=c.label,
                          by=json_safe(c.values.get(by)) if by else None, x=c.xs, y=[_finite(v) for v in c.ys])
              for c in scatter_curves(study, children, rows, metric, x)]
    return ScatterChart(metric=metric, x=x, by=by, theory=theory, points=points, curves=curves)


@router.get("/{study_id}/charts/heatmap", response_model=HeatmapChart, operation_id="getStudyHeatmapData",
            responses=CHART_RESPONSES)
def heatmap_data(study: StudyDep, db: DbDep, metric: Annotated[str, METRIC],
                 x: Annotated[str, Query(max_length=200, description="An axis or derived value.")],
                 y: Annotated[str, Query(max_length=200, description="Another axis or derived value.")]):
    """The tail metric over two axes (means over seeds and their standard errors) and the theory grid.
    A point whose y value varies with x lands in its own cell (the grid spans the values present)."""
    children, rows = _point_rows(db, study)
    theory = _checked(study, children, rows, metric, x=x, y=y)
    if x == y:
        raise query_error("y", f"expected another axis than x, got {y!r} for both")
    rows = json_safe(rows)
    xs, ys = grid.levels(rows, x), grid.levels(rows, y)
    cells = lambda column: grid.cell_means(rows, x, y, column, xs, ys)  # noqa: E731 — the PNG's cells
    return HeatmapChart(metric=metric, x=x, y=y, theory=theory, xs=xs, ys=ys, z=cells(metric),
                        se=cells(f"{metric}_se"), theory_z=cells(theory) if theory else None,
                        iso={x, y} == set(ISO_AXES), averaged_over=grid.mixed_axes(rows, x, y, study.axes))


def _finite(value: Any) -> float | None:
    return float(value) if _number(value) else None


__all__ = ["router"]
