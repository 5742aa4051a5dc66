"""PNG/SVG plots of an experiment's results, theory drawn dashed (matplotlib, Agg backend).

Plots are looked up by :func:`plot_key`: the kind, or ``sde/<model>`` for the sde kind.
Styles: ``line`` (series against step), ``histogram`` (a distribution beside its theory density),
``angles`` (per-trial angles against ηt and against the time change τ, seed 002 Fig. 2).
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Literal

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


@dataclass(frozen=True)
class PlotDef:
    title: str
    ylabel: str
    series: tuple[str, ...] = ()
    theory: tuple[str, ...] = ()
    log_y: bool = False
    style: Literal["line", "histogram", "angles"] = "line"
    times: tuple[str, ...] = ()   # scalar theory values that are times: drawn as vertical lines


_RISK = PlotDef("Risk r_t = 1 − E[X̄₁²]", "risk", ("risk",), ("risk_stationary",), log_y=True)
_NORM_NRQ = PlotDef("Squared weight norm", "|X|²", ("norm_sq",), ("norm_sq_theory",), log_y=True)

PLOTS: dict[str, dict[str, PlotDef]] = {
    "nrq": {
        "risk": _RISK,
        "au": PlotDef("Angular update per step", "radians", ("au_rms", "au_mean"), ("au_equilibrium",), log_y=True),
        "norm": _NORM_NRQ,
    },
    "sde/nrq": {
        "risk": _RISK,
        "au": PlotDef("Continuous angular update (seed 000 Def. 1)", "radians per step", ("au_rms",),
                      ("au_theory", "au_equilibrium"), log_y=True),
        "norm": _NORM_NRQ,
        "f_histogram": PlotDef("Stationary law of f = X̄₁² (tail of the run)", "density", ("f_histogram",),
                               style="histogram"),
    },
    "sde/normalized_linear": {
        "angles": PlotDef("Angle θ on the solution circle Γ₁", "θ (rad)", ("theta",), style="angles"),
        "norm": PlotDef("Weight norm", "|x|", ("norm",), ("norm_scale",)),
    },
    "sde/norm_map": {
        "norm": PlotDef("Squared weight norm (seed 004 App. G map)", "|w|²", ("norm_sq",), ("norm_sq_equilibrium",)),
    },
    "sde/toy2d": {
        "spread": PlotDef("Spread of the cloud of directions", "RMS distance", ("spread",), log_y=True,
                          times=("stable_until",)),
        "loss": PlotDef("Loss x²/(x²+y²)", "loss", ("loss",), ("loss_flow",), log_y=True),
        "norm": PlotDef("Squared norm", "|w|²", ("norm_sq",), ("norm_sq_flow",), log_y=True),
    },
}

MEDIA_TYPES = {"png": "image/png", "svg": "image/svg+xml"}


def plot_key(kind: str, spec: dict[str, Any]) -> str:
    if kind == "sde":
        return f"sde/{(spec.get('params') or {}).get('model')}"
    return kind


def available(key: str) -> list[str]:
    return sorted(PLOTS.get(key, {}))


def render(key: str, name: str, doc: dict[str, Any], fmt: str) -> bytes:
    """Draw plot ``name`` of a result document; returns the encoded image."""
    plot = PLOTS[key][name]
    wide = plot.style == "angles"
    fig = Figure(figsize=(11, 4.2) if wide else (7, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    label = doc.get("spec", {}).get("name") or doc["id"][:8]
    if plot.style == "histogram":
        _histogram(fig.add_subplot(), plot, doc)
    elif plot.style == "angles":
        _angles(fig.subplots(1, 2, sharey=True), plot, doc)
    else:
        _lines(fig.add_subplot(), plot, doc)
    fig.suptitle(f"{plot.title} — {label} ({doc['status']})", fontsize=10)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format=fmt)
    return out.getvalue()


def _lines(ax, plot: PlotDef, doc: dict[str, Any]) -> None:
    steps = doc["series"].get("step", [])
    colors = iter(["C0", "C1", "C2", "C3", "C4"])
    for key in plot.series:
        if key in doc["series"]:
            ax.plot(steps, _nan(doc["series"][key]), color=next(colors), lw=1.4, label=key)
    styles = iter(["--", ":", "-."])
    for key in plot.theory:
        value = doc["theory"].get(key)
        if isinstance(value, list) and value:
            ax.plot(steps[: len(value)], _nan(value), next(styles), color="k", lw=1.2, label=f"{key} (theory)")
        elif isinstance(value, (int, float)):
            ax.axhline(value, ls=next(styles), color="k", lw=1.2, label=f"{key} (theory)")
    for key in plot.times:
        value = doc["theory"].get(key)
        if isinstance(value, (int, float)):
            ax.axvline(value, ls=":", color="k", lw=1.2, label=f"{key} (theory)")
    if plot.log_y and _positive(doc, plot):
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(plot.ylabel)
    _finish(ax)


def _histogram(ax, plot: PlotDef, doc: dict[str, Any]) -> None:
    hist = doc.get("distributions", {}).get(plot.series[0])
    if not hist:
        ax.text(0.5, 0.5, "available when the run has finished", ha="center", va="center", transform=ax.transAxes)
    else:
        edges = hist["bin_edges"]
        ax.stairs(_nan(hist["density"]), edges, fill=True, alpha=0.5, color="C0",
                  label=f"simulated ({hist['samples']} samples)")
        if hist.get("density_theory"):
            ax.stairs(_nan(hist["density_theory"]), edges, ls="--", color="k", lw=1.2, label="ρ*(f) (theory)")
        ax.set_xlim(edges[0], edges[-1])
    ax.set_xlabel("f")
    ax.set_ylabel(plot.ylabel)
    _finish(ax)


def _angles(axes, plot: PlotDef, doc: dict[str, Any]) -> None:
    points = doc["series"].get(plot.series[0], [])
    for ax, (axis, xlabel) in zip(axes, (("lr_time", "ηt (learning rate × steps)"), ("tau", "τ(t) (seed 002 eq. 12)"))):
        times = doc["theory"].get(axis) or []
        xs, ys = [], []
        for x, row in zip(times, points):
            for theta in row or []:
                if theta is not None and x is not None:
                    xs.append(x)
                    ys.append(theta)
        ax.scatter(xs, ys, s=2, alpha=0.3, color="C0", linewidths=0)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(plot.ylabel)


def _finish(ax) -> None:
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _nan(values: list) -> list[float]:
    return [float("nan") if v is None else v for v in values]


def _positive(doc: dict[str, Any], plot: PlotDef) -> bool:
    vals = [v for k in plot.series for v in doc["series"].get(k, []) if v is not None]
    return bool(vals) and min(vals) > 0
