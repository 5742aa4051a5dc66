"""PNG/SVG plots of an experiment's series, theory drawn dashed (matplotlib, Agg backend)."""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


@dataclass(frozen=True)
class PlotDef:
    title: str
    ylabel: str
    series: tuple[str, ...]
    theory: tuple[str, ...]
    log_y: bool = False


PLOTS: dict[str, dict[str, PlotDef]] = {
    "nrq": {
        "risk": PlotDef("Risk r_t = 1 − E[X̄₁²]", "risk", ("risk",), ("risk_stationary",), log_y=True),
        "au": PlotDef("Angular update per step", "radians", ("au_rms", "au_mean"), ("au_equilibrium",), log_y=True),
        "norm": PlotDef("Squared weight norm", "|X|²", ("norm_sq",), ("norm_sq_theory",), log_y=True),
    },
}

MEDIA_TYPES = {"png": "image/png", "svg": "image/svg+xml"}


def available(kind: str) -> list[str]:
    return sorted(PLOTS.get(kind, {}))


def render(kind: str, name: str, doc: dict[str, Any], fmt: str) -> bytes:
    """Draw plot ``name`` of a result document; returns the encoded image."""
    plot = PLOTS[kind][name]
    steps = doc["series"].get("step", [])
    fig = Figure(figsize=(7, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = iter(["C0", "C1", "C2", "C3", "C4"])
    for key in plot.series:
        if key in doc["series"]:
            ax.plot(steps, _nan(doc["series"][key]), color=next(colors), lw=1.4, label=key)
    for key in plot.theory:
        value = doc["theory"].get(key)
        if isinstance(value, list) and value:
            ax.plot(steps[: len(value)], _nan(value), "--", color="k", lw=1.2, label=f"{key} (theory)")
        elif isinstance(value, (int, float)):
            ax.axhline(value, ls="--", color="k", lw=1.2, label=f"{key} (theory)")
    if plot.log_y and _positive(doc, plot):
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(plot.ylabel)
    ax.set_title(f"{plot.title} — {doc.get('spec', {}).get('name') or doc['id'][:8]} ({doc['status']})", fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format=fmt)
    return out.getvalue()


def _nan(values: list) -> list[float]:
    return [float("nan") if v is None else v for v in values]


def _positive(doc: dict[str, Any], plot: PlotDef) -> bool:
    vals = [v for k in plot.series for v in doc["series"].get(k, []) if v is not None]
    return bool(vals) and min(vals) > 0
