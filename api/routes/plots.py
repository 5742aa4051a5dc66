"""The plots resource: PNG/SVG renderings of an experiment's series with theory dashed."""
from __future__ import annotations

from enum import StrEnum

from fastapi import APIRouter, HTTPException, Response

from api import plots
from api.deps import DbDep, ExperimentDep
from api.responses import UNAUTHORIZED
from api.results import result_document
from api.schemas import ErrorOut

router = APIRouter(prefix="/v1/experiments", tags=["plots"])


class PlotFormat(StrEnum):
    png = "png"
    svg = "svg"


@router.get("/{experiment_id}/plots/{name}.{fmt}", response_class=Response, operation_id="getPlot",
            responses={200: {"content": {"image/png": {}, "image/svg+xml": {}}, "description": "The plot."},
                       **UNAUTHORIZED,
                       404: {"model": ErrorOut, "description": "No such experiment, or no such plot for its "
                                                               "kind/model (the detail lists those that apply)."}})
def get_plot(experiment: ExperimentDep, db: DbDep, name: str, fmt: PlotFormat):
    """A plot of the experiment (which ones depends on its kind and model), theory dashed."""
    key = plots.plot_key(experiment.kind, experiment.spec)
    if name not in plots.available(key):
        raise HTTPException(status_code=404, detail=f"no plot {name!r} for {key}; "
                                                    f"available: {', '.join(plots.available(key))}")
    doc = result_document(db, experiment, max_points=plots.document_max_points(key))
    image = plots.render(key, name, doc, fmt.value)
    return Response(content=image, media_type=plots.MEDIA_TYPES[fmt.value])
