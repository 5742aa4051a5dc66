"""PNG/SVG comparison plots of a study's children (matplotlib, Agg backend), theory dashed.

Pure functions of data the caller has already gathered (no database, no HTTP, no engine call):

- :func:`overlay`: one metric of every child against a time axis, one colour per child, its theory
  dashed in the same colour;
- :func:`heatmap`: a tail metric over two axes, measured beside theory on the same colour scale, with
  the iso-ηλ diagonals when the axes are the learning rate and the weight decay;
- :func:`scatter`: a tail metric against an axis or derived value, error bars over seeds, the theory
  per point as open markers and a theory curve dashed;
- :func:`figure`: a preset's panels (each drawn as an overlay is, by :func:`draw_lines`) in a grid
  like the seed's figure, with the verdicts of its checks printed under them.

Encoding, colours and small helpers are shared with :mod:`smdrender.plots`.
"""
from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.layout_engine import PlaceHolderLayoutEngine
from matplotlib.patheffects import withStroke
from matplotlib.ticker import LogFormatter, MaxNLocator, NullFormatter, NullLocator

from smdrender.grid import cell_means, mixed_axes
from smdrender.grid import levels as _levels
from smdrender.grid import numeric as _numeric
from smdrender.labels import legend_value, theory_label
from smdrender.plots import MEDIA_TYPES, _nan, _note, encode

__all__ = ["MEDIA_TYPES", "X_LABELS", "draw_lines", "figure", "heatmap", "overlay", "scatter"]

LEGEND_MAX_LINES = 12      # more lines: a colour bar by line order instead of a legend
TAB_MAX_LINES = 10         # up to this many lines: tab10 colours; beyond, a colormap
LOG_Y_DECADES = 1.5        # log y when positive values span more than this many decades
LOG_AXIS_DECADES = 1.0     # log axis (heatmap, scatter x) when positive values span more than this
CELL_TEXT_MAX = 64         # write each cell's value in it up to this many cells per panel
ISO_AXES = frozenset({"params.lr", "params.weight_decay"})

X_LABELS = {
    "step": "step",
    "lr_time": "ηt (learning rate × steps)",
    "tau": "τ(t) (seed 002 eq. 12)",
    "intrinsic_time": "t·ηλ (intrinsic time)",
}

AXIS_LABELS = {
    "params.lr": "η (params.lr)",
    "params.weight_decay": "λ (params.weight_decay)",
    "intrinsic_lr": "ηλ (intrinsic_lr)",
    "lr_over_wd": "η/λ (lr_over_wd)",
    "effective_intrinsic_lr": "ηλ/(1−α) (effective_intrinsic_lr)",
}


# ----------------------------------------------------------------------------- overlay


def overlay(lines: list[dict], metric: str, x: str, fmt: str) -> bytes:
    """``metric`` of every line (``{"label", "x", "y", "theory"}``) on one axes against ``x`` (a key of
    :data:`X_LABELS`, or any name); theory dashed in the line's colour."""
    fig = _figure(7.5, 4.6)
    ax = fig.add_subplot()
    n = draw_lines(fig, ax, lines, metric, x)
    ax.set_title(f"{metric} of {n} {'child' if n == 1 else 'children'} against {X_LABELS.get(x, x)}", fontsize=10)
    return encode(fig, fmt)


def draw_lines(fig: Figure, ax, lines: list[dict], metric: str, x: str, log_y: bool | None = None,
               small: bool = False) -> int:
    """Draw ``lines`` on ``ax`` (the overlay's drawing, shared with :func:`figure`): one colour per
    line (per ``group`` when lines carry one: the seeds of one point, labelled once), its theory
    dashed in that colour, a legend (a colour bar by line order beyond
    :data:`LEGEND_MAX_LINES`); log y when ``log_y``, or with None when positive values span more
    than :data:`LOG_Y_DECADES`. ``small``: smaller legend text (panels of a grid). Returns the
    number of lines."""
    n = len(lines)
    groups = list(dict.fromkeys(line.get("group", i) for i, line in enumerate(lines)))
    shade = {g: k for k, g in enumerate(groups)}
    few = len(groups) <= TAB_MAX_LINES
    cmap = colormaps["viridis"]
    drawn: list[list] = []
    has_theory = False
    for i, line in enumerate(lines):
        k = shade[line.get("group", i)]
        color = f"C{k}" if few else cmap(k / max(len(groups) - 1, 1))
        xs, ys = list(line.get("x") or []), list(line.get("y") or [])
        m = min(len(xs), len(ys))
        label = line.get("label", i) if len(groups) <= LEGEND_MAX_LINES else None
        present = [(a, b) for a, b in zip(xs[:m], ys[:m], strict=True) if _number(b)]
        sparse = 0 < len(present) < m / 2   # evaluated at some steps only (e.g. test accuracy): connect them
        px, py = ([a for a, _ in present], [b for _, b in present]) if sparse else (xs[:m], _nan(ys[:m]))
        ax.plot(px, py, color=color, lw=1.3 if "group" not in line else 1.0, marker="o" if sparse else None,
                markersize=2.5, label=None if label is None else str(label))
        drawn.append(ys[:m])
        theory = line.get("theory")
        if theory:
            k = min(len(xs), len(theory))
            # above every measured line (zorder 2): a theory hidden under the data cannot be compared
            ax.plot(xs[:k], _nan(list(theory[:k])), "--", color=color, lw=1.2, zorder=4)
            has_theory = True
    if has_theory:
        ax.plot([], [], "--", color="0.4", lw=1.0, label="theory (line's colour)")
    values = [v for ys in drawn for v in ys]
    if not any(v is not None for v in values):
        _note(ax, "no data")
    elif log_y if log_y is not None else _spans(values, LOG_Y_DECADES):
        if any(_number(v) and v > 0 for v in values):
            ax.set_yscale("log", nonpositive="mask")
    if len(groups) > LEGEND_MAX_LINES:
        bar = fig.colorbar(ScalarMappable(Normalize(0, len(groups) - 1), cmap), ax=ax, pad=0.02)
        bar.set_label(f"child, in line order ({len(groups)} lines)" if len(groups) == n
                      else f"point, in order ({len(groups)} points)", fontsize=8)
        bar.ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        bar.ax.tick_params(labelsize=7)
    ax.set_xlabel(X_LABELS.get(x, x), fontsize=8 if small else None)
    ax.set_ylabel(metric, fontsize=8 if small else None)
    if small:
        ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        size = (6 if small else 7) if len(handles) <= 7 else (5 if small else 6)
        ax.legend(handles, labels, fontsize=size, ncol=1 if len(handles) <= 7 else 2)
    return n


# ----------------------------------------------------------------------------- preset figure

VERDICT_COLOURS = {"reproduced": "#1a7f37", "not_reproduced": "#cf222e", "inconclusive": "#9a6700",
                   "finding": "#0550ae", "pending": "0.45", "error": "#cf222e"}
FIGURE_COLUMNS = 4          # panels per row, as the seeds lay theirs out (000 Fig. 2: four per row)
VERDICT_WRAP = 150          # characters per line of a verdict


def figure(title: str, panels: list[dict], verdicts: list[tuple[str, str]], fmt: str) -> bytes:
    """A preset's figure: ``panels`` (``{"title", "metric", "x", "log_y", "lines"}``, lines as for
    :func:`overlay`) in a grid of up to :data:`FIGURE_COLUMNS` per row, each drawn by
    :func:`draw_lines`; under them one line per check (``(text, verdict)``), coloured by verdict."""
    n = max(len(panels), 1)
    cols = min(n, FIGURE_COLUMNS)
    rows = math.ceil(n / cols)
    wrapped = [(textwrap.wrap(text, VERDICT_WRAP) or [""], verdict) for text, verdict in verdicts]
    line_in = 0.17                                   # inches per line of text
    text_in = (0.45 + line_in * sum(len(lines) for lines, _ in wrapped)) if verdicts else 0.0
    top_in, panel_in, label_in = 0.55, 3.3, 0.55     # title, one row of panels, the last row's x labels
    height = top_in + rows * panel_in + label_in + text_in + 0.1
    fig = _figure(max(4.3 * cols, 9.0), height)
    fig.set_layout_engine(PlaceHolderLayoutEngine(adjust_compatible=True, colorbar_gridspec=True))
    grid = fig.add_gridspec(rows, cols, left=0.06, right=0.98, top=1 - top_in / height,
                            bottom=(label_in + text_in + 0.1) / height, hspace=0.45, wspace=0.3)
    for i, panel in enumerate(panels):
        ax = fig.add_subplot(grid[i // cols, i % cols])
        draw_lines(fig, ax, panel.get("lines") or [], str(panel.get("metric", "")), str(panel.get("x", "step")),
                   log_y=bool(panel.get("log_y")), small=True)
        ax.set_title(f"({chr(ord('a') + i)}) {panel.get('title', '')}", fontsize=9)
    if not panels:
        _note(fig.add_subplot(grid[0, 0]), "no panels")
    if verdicts:
        y = text_in + 0.05
        fig.text(0.02, y / height, "Checks", fontsize=9, fontweight="bold", va="top")
        y -= 0.3
        for lines, verdict in wrapped:
            for j, line in enumerate(lines):
                fig.text(0.02 if j == 0 else 0.035, y / height, line, fontsize=7.5, va="top",
                         color=VERDICT_COLOURS.get(verdict, "0.1"))
                y -= line_in
    fig.suptitle(title, fontsize=11, y=1 - 0.12 / height, va="top")
    return encode(fig, fmt)


# ----------------------------------------------------------------------------- heatmap


def heatmap(rows: list[dict], x: str, y: str, metric: str, theory: str | None, fmt: str,
            study_axes: Sequence[str] = ()) -> bytes:
    """``metric`` over the (``x``, ``y``) grid of the rows (one per point), and beside it ``theory`` (a
    column of the rows) on the same colour scale; rows sharing a cell are averaged (the title names the
    ``study_axes`` that are then averaged over: :func:`smdrender.grid.mixed_axes`), missing cells are
    blank."""
    xs, ys = _levels(rows, x), _levels(rows, y)
    panels = [(metric, f"measured: {metric}")]
    if theory:
        panels.append((theory, f"theory: {theory}"))
    fig = _figure(5.2 * len(panels) + 1.2, 4.6, layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    grids = [_grid(rows, x, y, column, xs, ys) for column, _ in panels]
    finite = np.concatenate([g[np.isfinite(g)] for g in grids]) if grids else np.array([])
    if finite.size:
        lo, hi = float(finite.min()), float(finite.max())
        if lo > 0 and _spans([lo, hi], 1.0):
            norm: Normalize = LogNorm(lo, hi)
        else:
            norm = Normalize(lo, hi if hi > lo else lo + (abs(lo) or 1.0) * 1e-9)
    else:
        norm = Normalize(0, 1)
    cmap = colormaps["viridis"]
    xe, x_log = _edges(xs)
    ye, y_log = _edges(ys)
    iso = {x, y} == ISO_AXES and _numeric(xs) and _numeric(ys)
    for ax, grid, (column, title) in zip(axes, grids, panels, strict=True):
        ax.set_title(title, fontsize=9)
        if not xs or not ys:
            _note(ax, "no data")
            continue
        ax.pcolormesh(xe, ye, np.ma.masked_invalid(grid), cmap=cmap, norm=norm, shading="flat")
        if not np.isfinite(grid).any():
            _note(ax, f"no values of {column}")
        _scale_axis(ax, "x", xs, xe, x_log)
        _scale_axis(ax, "y", ys, ye, y_log)
        ax.set_xlabel(AXIS_LABELS.get(x, x))
        ax.set_ylabel(AXIS_LABELS.get(y, y))
        if grid.size <= CELL_TEXT_MAX:
            _cell_text(ax, grid, xs, ys, xe, ye, norm, cmap)
        if iso:
            _iso_diagonals(ax, xs, ys, xe, ye, x == "params.lr")
    if iso and xs and ys:
        axes[0].legend(loc="upper left", fontsize=7, framealpha=0.7)
    if finite.size:
        bar = fig.colorbar(ScalarMappable(norm, cmap), ax=list(axes), pad=0.02, shrink=0.9)
        bar.set_label(f"{metric} (tail mean)" + (", same scale" if theory else ""), fontsize=8)
        bar.ax.tick_params(labelsize=7, which="both")
        if isinstance(norm, LogNorm):   # every tick as the cells write values (0.04, 0.006): a log colour bar
            # would mix 4×10⁻², 10⁻² (its major ticks' smaller type) and 6×10⁻³; matplotlib still picks the
            # minor ticks it labels
            bar.ax.yaxis.set_major_formatter(_PlainLog(labelOnlyBase=False))
            bar.ax.yaxis.set_minor_formatter(_PlainLog(labelOnlyBase=False))
    mixed = mixed_axes(rows, x, y, study_axes)
    averaged = "; ".join(f"{a} ∈ {{{', '.join(f'{v:g}' if _number(v) else legend_value(v) for v in values)}}}"
                         for a, values in mixed.items())
    fig.suptitle(f"{metric} over {x} × {y}" + (f", beside {theory}" if theory else "")
                 + (f"\neach cell: the mean over {averaged}" if averaged else ""), fontsize=10)
    return encode(fig, fmt)


class _PlainLog(LogFormatter):
    """A log axis's ticks written as plain numbers (0.04, 0.006, 1e-05: three significant digits), on the
    ticks matplotlib's own log formatter labels."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:.3g}" if super().__call__(x, pos) else ""


def _grid(rows: list[dict], x: str, y: str, column: str, xs: list, ys: list) -> np.ndarray:
    """grid[j, i] = mean of ``column`` over the rows at (xs[i], ys[j]); NaN where none has a number."""
    return np.array([[math.nan if v is None else v for v in row] for row in cell_means(rows, x, y, column, xs, ys)],
                    dtype=float).reshape(len(ys), len(xs))


def _edges(levels: list) -> tuple[np.ndarray, bool]:
    """Cell edges around the levels (in data coordinates when numeric, geometric midpoints when the
    axis is logarithmic; else around the positions 0..n−1) and whether the axis is logarithmic."""
    n = len(levels)
    if not _numeric(levels):
        return np.arange(n + 1) - 0.5, False
    v = np.asarray(levels, dtype=float)
    log = bool(v.min() > 0) and (_spans(list(v), LOG_AXIS_DECADES) or _geometric(v))
    t = np.log(v) if log else v
    if n == 1:
        half = 0.2 if log else (abs(t[0]) * 0.1 or 0.5)
        e = np.array([t[0] - half, t[0] + half])
    else:
        mid = (t[1:] + t[:-1]) / 2
        e = np.concatenate([[t[0] - (mid[0] - t[0])], mid, [t[-1] + (t[-1] - mid[-1])]])
    return (np.exp(e) if log else e), log


def _geometric(v: np.ndarray) -> bool:
    """At least three increasing levels with one common ratio (a logspace axis: equal cells on a log scale)."""
    if len(v) < 3 or not np.all(np.diff(v) > 0):
        return False
    ratios = v[1:] / v[:-1]
    return bool(np.allclose(ratios, ratios[0], rtol=1e-6))


def _scale_axis(ax, which: str, levels: list, edges: np.ndarray, log: bool) -> None:
    """Log scale when the edges are geometric; one tick per cell labelled with its axis value."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    if log:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    positions = list(levels) if _numeric(levels) else list(range(len(levels)))
    axis.set_ticks(positions, [_fmt(v) for v in levels], fontsize=7)
    axis.set_minor_locator(NullLocator())
    (ax.set_xlim if which == "x" else ax.set_ylim)(edges[0], edges[-1])


def _cell_text(ax, grid, xs, ys, xe, ye, norm, cmap) -> None:
    xc = xs if _numeric(xs) else list(range(len(xs)))
    yc = ys if _numeric(ys) else list(range(len(ys)))
    for j, yv in enumerate(yc):
        for i, xv in enumerate(xc):
            value = grid[j, i]
            if not math.isfinite(value):
                continue
            shade = norm(value)
            dark = np.ma.is_masked(shade) or float(shade) < 0.55
            # outlined in the cell's own colour, so that an iso-ηλ diagonal through the cell's centre (a
            # grid of matching ratios) stops at the number instead of crossing it
            outline = [withStroke(linewidth=3, foreground=cmap(0.0 if np.ma.is_masked(shade) else float(shade)))]
            ax.text(xv, yv, f"{value:.3g}", ha="center", va="center", fontsize=7, color="white" if dark else "black",
                    zorder=4, path_effects=outline)


def _iso_diagonals(ax, xs: list, ys: list, xe: np.ndarray, ye: np.ndarray, x_is_lr: bool) -> None:
    """The curves η·λ = c through the grid's cells: through every cell of the bottom row and of the
    right column (for a geometric grid of matching ratios, every diagonal of the grid)."""
    products = [xv * ys[0] for xv in xs] + [xs[-1] * yv for yv in ys[1:]]
    constants: list[float] = []
    for c in sorted(products):
        if c > 0 and not any(math.isclose(c, d, rel_tol=1e-6) for d in constants):
            constants.append(c)
    lo, hi = float(xe[0]), float(xe[-1])
    grid_x = np.geomspace(lo, hi, 200) if lo > 0 else np.linspace(lo, hi, 200)
    for k, c in enumerate(constants):
        with np.errstate(divide="ignore", invalid="ignore"):
            curve_y = np.where(grid_x > 0, c / grid_x, np.nan)
        ax.plot(grid_x, curve_y, ":", color="white", lw=1.0, alpha=0.85,
                label="iso-ηλ (η·λ = const)" if k == 0 else None)
    ax.set_xlim(xe[0], xe[-1])
    ax.set_ylim(ye[0], ye[-1])


# ----------------------------------------------------------------------------- scatter


def scatter(rows: list[dict], x: str, metric: str, theory: str | None,
            curves: Sequence[tuple[str | None, list[float], list[float | None]]], fmt: str) -> bytes:
    """``metric`` (the mean over seeds) of every row against ``x``, error bars from ``<metric>_se``;
    ``theory`` (a column) as open markers; each of ``curves`` (label, xs, ys) as a dashed line (the label
    names what the curve holds fixed: the other axes' values; None for the one curve of every point)."""
    fig = _figure(7, 4.6)
    ax = fig.add_subplot()
    points = sorted((r[x], r[metric], r.get(f"{metric}_se")) for r in rows
                    if _number(r.get(x)) and _number(r.get(metric)))
    xs_all: list[float] = [p[0] for p in points]
    ys_all: list[float] = [p[1] for p in points]
    if points:
        ax.errorbar(xs_all, ys_all, yerr=[p[2] if _number(p[2]) else 0.0 for p in points], fmt="o", color="C0",
                    ms=5, capsize=3, lw=1.2, label=f"{metric} (mean ± s.e. over seeds)")
    if theory:
        tpoints = sorted((r[x], r[theory]) for r in rows if _number(r.get(x)) and _number(r.get(theory)))
        if tpoints:
            ax.plot([p[0] for p in tpoints], [p[1] for p in tpoints], "o", mfc="none", mec="k", ms=8, mew=1.2,
                    label=theory_label(theory, ", per point"))
            xs_all += [p[0] for p in tpoints]
            ys_all += [p[1] for p in tpoints]
    for k, (name, cx, cy) in enumerate(curves):
        pairs = sorted((a, b) for a, b in zip(cx, cy, strict=False) if _number(a))
        if pairs:
            ax.plot([p[0] for p in pairs], _nan([p[1] for p in pairs]), "--", color="k" if name is None else f"C{k + 1}",
                    lw=1.2, label=theory_label(theory or metric, f" curve{'' if name is None else ', ' + name}"))
            xs_all += [p[0] for p in pairs]
            ys_all += [p[1] for p in pairs if p[1] is not None]
    if not points:
        _note(ax, f"no values of {metric}")
    if _spans(xs_all, LOG_AXIS_DECADES):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())   # labelled minor ticks collide within a decade
    if _spans(ys_all, LOG_Y_DECADES):
        ax.set_yscale("log", nonpositive="mask")
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(AXIS_LABELS.get(x, x))
    ax.set_ylabel(f"{metric} (tail mean)")
    ax.grid(alpha=0.3)
    handles = ax.get_legend_handles_labels()[0]
    if len(handles) > 3:   # several labelled curves: below the axes, where it hides no point
        fig.set_size_inches(7, 4.6 + 0.2 * len(handles))
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    elif handles:
        ax.legend(fontsize=8)
    ax.set_title(f"{metric} against {x} ({len(points)} {'point' if len(points) == 1 else 'points'})", fontsize=10)
    return encode(fig, fmt)


# ----------------------------------------------------------------------------- helpers


def _figure(width: float, height: float, layout: str | None = None) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _spans(values: Sequence[Any], decades: float) -> bool:
    """All values positive numbers spanning more than ``decades`` decades."""
    vals = [float(v) for v in values if _number(v)]
    return bool(vals) and min(vals) > 0 and math.log10(max(vals) / min(vals)) > decades


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else legend_value(value)
