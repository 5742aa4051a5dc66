"""PNG/SVG plots of an experiment's results, theory drawn dashed (matplotlib, Agg backend).

Which plots exist, and what each draws, is declared by the engine beside each kind's or model's
metrics (:class:`smdengine.PlotDef`), looked up by :func:`plot_key` (the kind, or ``<kind>/<model>``);
this module knows no kind or model by name and renders by style: ``line`` (series against step), ``histogram`` (a distribution beside its theory density),
``angles`` (per-trial angles against ηt and against the time change τ, seed 002 Fig. 2),
``layers`` (a per-layer metric of every layer against step, one colour per layer, with its per-layer
theory dashed in the same colour and global theory dashed black).
"""
from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

import smdengine
from smdengine import PlotDef
from smdrender.downsample import downsample_indices
from smdrender.labels import theory_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LEGEND_MAX_LAYERS = 10   # more layers: coloured by depth with a colour bar instead of a legend
DRAW_MAX_POINTS = 4000   # most points drawn per line

MEDIA_TYPES = {"png": "image/png", "svg": "image/svg+xml"}


def plot_key(kind: str, spec: dict[str, Any]) -> str:
    """The key of an experiment's plots: the kind, or ``<kind>/<model>`` (smdengine.plot_key)."""
    return smdengine.plot_key(kind, spec)


def available(key: str) -> list[str]:
    return sorted(smdengine.plots(key))


def document_max_points(key: str) -> int | None:
    """``max_points`` for the result document a plot is drawn from: the whole document when the
    kind declares that its plots thin themselves (so sparse evaluation points are not lost to an
    even downsampling of the steps), else :data:`DRAW_MAX_POINTS`."""
    return None if smdengine.full_document_plots(key) else DRAW_MAX_POINTS


def render(key: str, name: str, doc: dict[str, Any], fmt: str) -> bytes:
    """Draw plot ``name`` of a result document; returns the encoded image."""
    # matplotlib loads with the first plot, not with the module (the API imports it: ~0.4 s of every start)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    plot = smdengine.plots(key)[name]
    wide = plot.style == "angles"
    fig = Figure(figsize=(11, 4.2) if wide else (7, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    label = doc.get("spec", {}).get("name") or doc["id"][:8]
    if plot.style == "histogram":
        _histogram(fig.add_subplot(), plot, doc)
    elif plot.style == "angles":
        _angles(fig.subplots(1, 2, sharey=True), plot, doc)
    elif plot.style == "layers":
        _layers(fig, fig.add_subplot(), plot, _thinned(doc))
    else:
        _lines(fig.add_subplot(), plot, doc)
    fig.suptitle(f"{plot.title} — {label} ({doc['status']})", fontsize=10)
    return encode(fig, fmt)


def encode(fig: Figure, fmt: str) -> bytes:
    """A finished figure laid out (tight, unless it has its own layout engine) and encoded as ``fmt``
    (a key of :data:`MEDIA_TYPES`)."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format=fmt)
    return out.getvalue()


def _lines(ax, plot: PlotDef, doc: dict[str, Any]) -> None:
    if plot.sparse:
        doc = _thinned(doc)
    steps = doc["series"].get("step", [])
    colors = iter(["C0", "C1", "C2", "C3", "C4"])
    for key in plot.series:
        if key not in doc["series"]:
            continue
        xs, ys = _defined(steps, doc["series"][key])
        if key in plot.sparse or len(ys) <= FEW_POINTS:   # a line through one point draws nothing
            ax.plot(xs, ys, "o-", color=next(colors), lw=1.2, ms=3, label=key)
        else:
            ax.plot(steps, _nan(doc["series"][key]), color=next(colors), lw=1.4, label=key)
    _theory(ax, plot, doc, steps)
    _broken(ax, steps, [doc["series"][k] for k in plot.series if k in doc["series"]], doc)
    if plot.log_y and _positive([doc["series"].get(k, []) for k in plot.series]):
        ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("step")
    ax.set_ylabel(plot.ylabel)
    _finish(ax)


def _theory(ax, plot: PlotDef, doc: dict[str, Any], steps: list) -> None:
    """Global theory, black: series dashed (then dotted, dash-dotted), numbers as horizontal lines,
    times as vertical lines."""
    styles = iter(["--", ":", "-."])
    words = dict(plot.theory_labels)
    for key in plot.theory:
        value = doc["theory"].get(key)
        label = theory_label(key, f" {words[key]}" if key in words else "")
        if isinstance(value, list) and value:
            ax.plot(steps[: len(value)], _nan(value), next(styles), color="k", lw=1.2, label=label)
        elif isinstance(value, (int, float)):
            ax.axhline(value, ls=next(styles), color="k", lw=1.2, label=label)
    for key in plot.times:
        value = doc["theory"].get(key)
        if isinstance(value, (int, float)):
            ax.axvline(value, ls=":", color="k", lw=1.2, label=theory_label(key))


def _layers(fig, ax, plot: PlotDef, doc: dict[str, Any]) -> None:
    """Every layer's ``plot.series`` metric solid and its ``plot.layer_theory`` metrics dashed, in one
    colour per layer (tab10 with a legend up to LEGEND_MAX_LAYERS layers; beyond, viridis by depth
    with a colour bar); global theory dashed black."""
    steps = doc["series"].get("step", [])
    layers = {name: metrics for name, metrics in doc.get("layers", {}).items()
              if any(m in metrics for m in (*plot.series, *plot.layer_theory))}
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    few = len(layers) <= LEGEND_MAX_LAYERS
    cmap = colormaps["viridis"]
    drawn = []
    for i, (name, metrics) in enumerate(layers.items()):
        color = f"C{i}" if few else cmap(i / max(len(layers) - 1, 1))
        for key in plot.series:
            if key in metrics:
                ax.plot(steps, _nan(metrics[key]), color=color, lw=1.2, label=name if few else None,
                        **_markers(metrics[key]))
                drawn.append(metrics[key])
        for key in plot.layer_theory:
            if key in metrics:
                ax.plot(steps, _nan(metrics[key]), "--", color=color, lw=1.0, **_markers(metrics[key]))
                drawn.append(metrics[key])
    _theory(ax, plot, doc, steps)
    for key in plot.layer_theory:  # one legend entry for the dashed per-layer theory
        if any(key in metrics for metrics in layers.values()):
            ax.plot([], [], "--", color="0.4", lw=1.0, label=theory_label(key, ", layer's colour"))
    if not layers:
        _note(ax, "no layer recorded yet")
    else:
        _broken(ax, steps, drawn, doc)
    if layers and not few:
        bar = fig.colorbar(ScalarMappable(Normalize(0, len(layers) - 1), cmap), ax=ax, pad=0.02)
        bar.set_label(f"layer, input → output ({len(layers)} layers)", fontsize=8)
        bar.ax.tick_params(labelsize=7)
    if plot.log_y and _positive(drawn):
        ax.set_yscale("log", nonpositive="mask")
    ax.set_xlabel("step")
    ax.set_ylabel(plot.ylabel)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=7 if len(handles) <= 6 else 6, ncol=1 if len(handles) <= 6 else 2)


def _histogram(ax, plot: PlotDef, doc: dict[str, Any]) -> None:
    hist = doc.get("distributions", {}).get(plot.series[0])
    if not hist:
        _note(ax, "available when the run has finished")
    else:
        edges = hist["bin_edges"]
        ax.stairs(_nan(hist["density"]), edges, fill=True, alpha=0.5, color="C0",
                  label=f"simulated ({hist['samples']} samples)")
        if hist.get("density_theory"):
            ax.stairs(_nan(hist["density_theory"]), edges, ls="--", color="k", lw=1.2, label="ρ*(f) (theory)")
        ax.set_xlim(edges[0], edges[-1])
    ax.set_xlabel(plot.xlabel or plot.series[0])
    ax.set_ylabel(plot.ylabel)
    _finish(ax)


def _angles(axes, plot: PlotDef, doc: dict[str, Any]) -> None:
    points = doc["series"].get(plot.series[0], [])
    for ax, (axis, xlabel) in zip(axes, (("lr_time", "ηt (learning rate × steps)"), ("tau", "τ(t) (seed 002 eq. 12)")), strict=False):
        times = doc["theory"].get(axis) or []
        xs, ys = [], []
        for x, row in zip(times, points, strict=False):
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


FEW_POINTS = 2   # a series with at most this many defined points is drawn with markers (record_every ~ steps)


def _markers(values: list) -> dict[str, Any]:
    """Markers for a series of at most FEW_POINTS defined points (its line alone would not show)."""
    few = sum(v is not None and v == v for v in values) <= FEW_POINTS
    return {"marker": "o", "ms": 3} if few else {}


def _defined(steps: list, values: list) -> tuple[list, list]:
    """The (step, value) points where the value is defined."""
    pairs = [(x, v) for x, v in zip(steps, values, strict=False) if v is not None]
    return [x for x, _ in pairs], [v for _, v in pairs]


def _thinned(doc: dict[str, Any], max_points: int = DRAW_MAX_POINTS) -> dict[str, Any]:
    """The document on at most about ``max_points`` evenly spread steps, plus, for each series with
    gaps (evaluation points such as test loss), up to ``max_points`` of its defined points, so
    sparse series are not lost; series, layer series and theory series stay aligned on step."""
    n = len(doc["series"].get("step", []))
    if n <= max_points:
        return doc
    idx = set(downsample_indices(n, max_points))
    for values in doc["series"].values():
        defined = [i for i, v in enumerate(values) if v is not None]
        if defined and len(defined) < n:
            idx.update(defined[j] for j in downsample_indices(len(defined), max_points))
    idx = sorted(idx)

    def pick(values: Any) -> Any:
        return [values[i] for i in idx] if isinstance(values, list) and len(values) == n else values

    return {**doc, "series": {k: pick(v) for k, v in doc["series"].items()},
            "layers": {name: {m: pick(v) for m, v in metrics.items()} for name, metrics in doc.get("layers", {}).items()},
            "theory": {k: pick(v) for k, v in doc["theory"].items()}}


def _positive(lines: list[list]) -> bool:
    vals = [v for line in lines for v in line if v is not None]
    return bool(vals) and min(vals) > 0


def _broken(ax, steps: list, lines: list[list], doc: dict[str, Any]) -> None:
    """Say why a line stops or none shows: the run's numbers broke (a diverging rate, an underflow): the
    summary's nonfinite_from_step, or an ended run's recorded steps without one finite value. The x axis then spans every
    recorded step (NaN draws nothing, and the axes ended where the line did)."""
    since = (doc.get("summary") or {}).get("nonfinite_from_step")
    finite = any(isinstance(v, (int, float)) and math.isfinite(v) for line in lines for v in line)
    ended = doc.get("status") in ("succeeded", "failed", "cancelled")   # a running job's evaluations come later
    broken = (ended or since is not None) and any(lines) and not finite
    if (broken or since is not None) and len(steps) > 1:
        ax.set_xlim(steps[0], steps[-1])
    if broken:
        _note(ax, "no finite value recorded" + (f" (non-finite from step {since})" if since is not None else ""))
    elif since is not None:
        ax.annotate(f"non-finite from step {since}", xy=(0.5, 0.97), xycoords="axes fraction", ha="center",
                    va="top", fontsize=8, color="C3", bbox={"boxstyle": "round", "fc": "white", "ec": "none"})


def _note(ax, message: str) -> None:
    """A message in the middle of an empty axes (annotate: the same as Axes.text at axes coordinates)."""
    ax.annotate(message, xy=(0.5, 0.5), xycoords="axes fraction", ha="center", va="center",
                bbox={"boxstyle": "round", "fc": "white", "ec": "0.7"})   # legible over a theory line
