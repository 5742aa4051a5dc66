"""An experiment's PNGs say why a line stops or none shows: a run whose numbers broke (a diverging rate)
ends succeeded with non-finite records, and an empty axes read as a broken plot; a series of one or two points
(record_every near steps) shows its points."""
from __future__ import annotations

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import smdengine
from smdrender import plots


def _texts(series: dict, summary: dict, status: str = "succeeded") -> list[str]:
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    doc = {"series": series, "theory": {}, "summary": summary, "status": status}
    plots._lines(ax, smdengine.plots("nrq")["risk"], doc)
    return [t.get_text() for t in ax.texts]


def test_a_broken_run_says_so_on_its_plot():
    steps = [0, 10, 20]
    assert _texts({"step": steps, "risk": [None, None, None]}, {"nonfinite_from_step": 0}) == [
        "no finite value recorded (non-finite from step 0)"]
    assert _texts({"step": steps, "risk": [0.5, 0.4, None]}, {"nonfinite_from_step": 20}) == [
        "non-finite from step 20"]
    assert _texts({"step": steps, "risk": [0.5, 0.4, 0.3]}, {}) == []   # a sound run: nothing said
    assert _texts({"step": [], "risk": []}, {}) == []                    # nothing recorded yet: no claim
    assert _texts({"step": steps, "risk": [None] * 3}, {}, "running") == []   # an evaluation series still empty
    assert _texts({"step": steps, "risk": [None] * 3}, {}) == ["no finite value recorded"]
    doc = {"id": "0" * 32, "status": "succeeded", "spec": {}, "series": {"step": steps, "risk": [None] * 3},
           "theory": {}, "summary": {"nonfinite_from_step": 0}}
    assert plots.render("nrq", "risk", doc, "png").startswith(b"\x89PNG")


def _marked(name: str, series: dict, layers: dict | None = None) -> list[bool]:
    """Whether each drawn line of the plot (theory lines aside) has markers."""
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    doc = {"series": series, "theory": {}, "summary": {}, "status": "succeeded", "layers": layers or {}}
    plot = smdengine.plots("nrq" if layers is None else "train")[name]
    if layers is None:
        plots._lines(ax, plot, doc)
    else:
        plots._layers(fig, ax, plot, doc)
    return [line.get_marker() not in ("None", None, "") for line in ax.lines if line.get_label() != "_nolegend_"
            and "theory" not in str(line.get_label()) and len(line.get_xdata())]


def test_a_series_of_one_point_is_drawn_with_a_marker():
    """record_every = steps: au_rms has one value (step 0; the final row has none), which a line alone would not
    show; a series of many points keeps its plain line."""
    assert _marked("au", {"step": [0, 1000], "au_rms": [0.046, None], "au_mean": [0.039, None]}) == [True, True]
    many = list(range(0, 100, 10))
    assert _marked("au", {"step": many, "au_rms": [0.04] * 10, "au_mean": [0.03] * 10}) == [False, False]
    assert _marked("au", {"step": [0, 100]}, {"layers.0.weight": {"au_rms": [0.002, None]}}) == [True]
