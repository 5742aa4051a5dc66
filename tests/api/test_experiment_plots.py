"""An experiment's PNGs say why a line stops or none shows: a run whose numbers broke (a diverging rate)
ends succeeded with non-finite records, and an empty axes read as a broken plot."""
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
