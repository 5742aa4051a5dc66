"""The plots resource: PNG/SVG renderings of an experiment's series with theory dashed."""
from __future__ import annotations

from dataclasses import asdict
from enum import StrEnum
from typing import Annotated

from fastapi import APIRouter, HTTPException, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

import smdengine
from api.deps import DbDep, ExperimentDep
from api.responses import UNAUTHORIZED
from api.results import result_document
from api.schemas import ErrorOut
from smdrender import plots

router = APIRouter(prefix="/v1/experiments", tags=["plots"])


class PlotOut(BaseModel):
    """What one plot draws, as the engine declares it: enough for a client to draw it interactively
    from the result document (the dashboard does)."""

    name: str = Field(..., description="Its name in /plots/{name}.png.")
    title: str
    ylabel: str
    style: str = Field(..., description="line: series against step; histogram: a distribution beside its theory "
                                        "density; angles: per-trial angles against the theory times lr_time and "
                                        "tau; layers: a per-layer metric of every layer.")
    series: list[str] = Field(..., description="Series (or distribution, or per-layer metric) names drawn.")
    theory: list[str] = Field(..., description="Theory names drawn dashed (a number: a horizontal line).")
    log_y: bool
    times: list[str] = Field(..., description="Scalar theory values that are times (steps), drawn as vertical lines.")
    sparse: list[str] = Field(..., description="Series defined only at some steps (null elsewhere): drawn as markers.")
    layer_theory: list[str] = Field(..., description="Per-layer theory metrics, dashed in their layer's colour.")
    theory_labels: dict[str, str] = Field(..., description="What a theory line is, by name, for its legend "
                                                           "(au_theory: 'along the run: …'); only some have one.")
    xlabel: str | None = Field(None, description="The x axis's title where it is not the step (a histogram's "
                                                 "variable); null: the step (or the time an angles plot names).")


class PlotFormat(StrEnum):
    """A plot's file format (the path's extension)."""

    png = "png"
    svg = "svg"


@router.get("/{experiment_id}/plots/{name}.{fmt}", response_class=Response, operation_id="getPlot",
            responses={200: {"content": {"image/png": {}, "image/svg+xml": {}}, "description": "The plot."},
                       **UNAUTHORIZED,
                       404: {"model": ErrorOut, "description": "No such experiment, or no such plot for its "
                                                               "kind/model (the detail lists those that apply)."}})
def get_plot(experiment: ExperimentDep, db: DbDep,
             name: Annotated[str, PathParam(description="The plot's name, as GET /v1/experiments/{experiment_id}/plots "
                                                        "lists them for its kind and model.")],
             fmt: PlotFormat):
    """A plot of the experiment (which ones depends on its kind and model), theory dashed."""
    key = plots.plot_key(experiment.kind, experiment.spec)
    if name not in plots.available(key):
        raise HTTPException(status_code=404, detail=f"no plot {name!r} for {key}; "
                                                    f"available: {', '.join(plots.available(key))}")
    doc = result_document(db, experiment, max_points=plots.document_max_points(key))
    image = plots.render(key, name, doc, fmt.value)
    return Response(content=image, media_type=plots.MEDIA_TYPES[fmt.value])


@router.get("/{experiment_id}/plots", response_model=list[PlotOut], operation_id="listPlots",
            responses={**UNAUTHORIZED, 404: {"model": ErrorOut, "description": "No such experiment."}})
def list_plots(experiment: ExperimentDep):
    """The plots of the experiment's kind and model, each with the series and theory it draws."""
    declared = smdengine.plots(plots.plot_key(experiment.kind, experiment.spec))
    return [PlotOut(name=name, **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(plot).items()
                                  if k != "theory_labels"}, theory_labels=dict(plot.theory_labels))
            for name, plot in sorted(declared.items())]
