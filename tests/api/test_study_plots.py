"""smdrender.study_plots: overlay, heatmap and scatter render PNG and SVG from small synthetic inputs,
including empty inputs and missing cells."""
from __future__ import annotations

import math

import pytest

from smdrender import grid, labels, study_plots

PNG = b"\x89PNG\r\n\x1a\n"
LRS = [0.025, 0.05, 0.1, 0.2]
WDS = [0.0025, 0.005, 0.01, 0.02]


def _check(data: bytes, fmt: str, min_size: int = 5000) -> None:
    if fmt == "png":
        assert data.startswith(PNG)
    else:
        assert b"<svg" in data[:2000] and data.rstrip().endswith(b"</svg>")
    assert len(data) > min_size


def _rows(missing: tuple[int, int] | None = (1, 2)) -> list[dict]:
    rows = []
    for i, lr in enumerate(LRS):
        for j, wd in enumerate(WDS):
            theory = math.sqrt(lr * wd)
            row = {"point": 4 * i + j, "params.lr": lr, "params.weight_decay": wd, "intrinsic_lr": lr * wd,
                   "n": 2, "risk": theory * 1.02, "risk_se": theory * 0.01, "risk_stationary": theory}
            if (i, j) == missing:   # a failed point: no measurement
                row.update(n=0, risk=None, risk_se=None)
            rows.append(row)
    return rows


def _lines(n: int, theory: bool = True) -> list[dict]:
    xs = [float(s) for s in range(0, 1000, 10)]
    out = []
    for k in range(n):
        level = 0.01 * (k + 1)
        out.append({"label": f"child {k}", "x": xs, "y": [level + math.exp(-s / 200) for s in xs],
                    "theory": [level] * len(xs) if theory else None})
    return out


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_overlay(fmt):
    _check(study_plots.overlay(_lines(3), "risk", "step", fmt), fmt)


@pytest.mark.parametrize("x", ["step", "lr_time", "tau", "intrinsic_time"])
def test_overlay_many_lines_colour_bar_and_x_axes(x):
    _check(study_plots.overlay(_lines(20, theory=False), "risk", x, "png"), "png")


def test_overlay_empty_and_gaps():
    _check(study_plots.overlay([], "risk", "step", "png"), "png", 2000)
    gappy = [{"label": "a", "x": [0.0, 1.0, 2.0], "y": [1.0, None, 0.5], "theory": [None, 0.4, 0.4]},
             {"label": "b", "x": [], "y": [], "theory": None}]
    _check(study_plots.overlay(gappy, "loss", "step", "svg"), "svg", 2000)


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_heatmap_with_theory_and_missing_cell(fmt):
    data = study_plots.heatmap(_rows(), "params.lr", "params.weight_decay", "risk", "risk_stationary", fmt)
    _check(data, fmt)
    if fmt == "svg":   # the iso-ηλ diagonals are in the legend
        assert "iso-ηλ".encode() in data


def test_heatmap_axes_swapped_without_theory():
    _check(study_plots.heatmap(_rows(None), "params.weight_decay", "params.lr", "risk", None, "png"), "png")


def test_heatmap_other_axes_single_level_and_categorical():
    rows = [{"params.dim": d, "params.momentum": m, "risk": 0.1 * d + m} for d in (2, 5, 10) for m in (0.0, 0.9)]
    _check(study_plots.heatmap(rows, "params.dim", "params.momentum", "risk", "risk_stationary", "png"), "png")
    rows = [{"model": name, "params.lr": 0.1, "risk": 0.5} for name in ("a", "b")]
    _check(study_plots.heatmap(rows, "model", "params.lr", "risk", None, "png"), "png")


def test_heatmap_empty():
    _check(study_plots.heatmap([], "params.lr", "params.weight_decay", "risk", "risk_stationary", "png"), "png", 2000)
    rows = [{"params.lr": 0.1, "params.weight_decay": 0.01, "risk": None}]
    _check(study_plots.heatmap(rows, "params.lr", "params.weight_decay", "risk", None, "svg"), "svg", 2000)


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_scatter(fmt):
    xs = [1e-5 * 1.5 ** k for k in range(30)]
    curve = (None, xs, [math.sqrt(x) if k != 3 else None for k, x in enumerate(xs)])
    _check(study_plots.scatter(_rows(), "intrinsic_lr", "risk", "risk_stationary", [curve], fmt), fmt)
    two = [("weight_decay=0.01", xs, [math.sqrt(x) for x in xs]), ("weight_decay=0.02", xs, [2 * math.sqrt(x) for x in xs])]
    _check(study_plots.scatter(_rows(), "intrinsic_lr", "risk", "risk_stationary", two, fmt), fmt)


def test_scatter_without_theory_or_se_and_empty():
    rows = [{"params.lr": lr, "risk": lr * 2, "risk_se": None} for lr in LRS]
    _check(study_plots.scatter(rows, "params.lr", "risk", None, [], "png"), "png")
    _check(study_plots.scatter([], "intrinsic_lr", "risk", None, [], "png"), "png", 2000)


def test_legend_labels_use_short_paths_or_the_runs_name():
    values = {"params.schedule.0.rescale": True, "params.schedule.1.rescale": False, "params.lr": 0.1}
    assert labels.point_label(values, seed=3) == "0.rescale=true, 1.rescale=false, lr=0.1, seed=3"
    # a list or mapping value as the study's table shows it (compact JSON), not Python's repr
    schedule = {"params.lr_schedule": [{"step": 600, "lr_factor": 0.1, "rescale": False}], "params.lr": 1.0}
    assert labels.point_label(schedule) == 'lr_schedule=[{"step":600,"lr_factor":0.1,"rescale":false}], lr=1'
    assert labels.point_label({"params.lr_schedule": [], "params.dim": 10}) == "lr_schedule=[], dim=10"
    named = {"name": "A (LR halved)", "params.schedule.0.lr_factor": 0.5, "params.schedule.1.lr_factor": 0.5}
    assert labels.point_label(named) == "A (LR halved)"
    assert labels.point_label(named, seed=1) == "A (LR halved), seed=1"


def test_a_heatmap_title_says_which_axes_its_cells_average(monkeypatch):
    """Three axes drawn over two: each cell the mean of the third's settings, said under the title."""
    titles = []
    real = study_plots.encode
    monkeypatch.setattr(study_plots, "encode", lambda fig, fmt: (titles.append(fig._suptitle.get_text()),
                                                                  real(fig, fmt))[1])
    rows = [{"params.lr": lr, "params.weight_decay": wd, "params.momentum": m, "risk": lr * wd + m}
            for lr in (0.05, 0.1) for wd in (0.01, 0.02) for m in (0.0, 0.5)]
    axes = ["params.lr", "params.weight_decay", "params.momentum"]
    study_plots.heatmap(rows, "params.lr", "params.weight_decay", "risk", None, "png", study_axes=axes)
    study_plots.heatmap(rows, "params.lr", "params.momentum", "risk", None, "png", study_axes=axes)
    one = [r for r in rows if r["params.momentum"] == 0.0]
    study_plots.heatmap(one, "params.lr", "params.weight_decay", "risk", None, "png", study_axes=axes)
    assert titles == ["risk over params.lr × params.weight_decay\neach cell: the mean over params.momentum ∈ {0, 0.5}",
                      "risk over params.lr × params.momentum\neach cell: the mean over params.weight_decay ∈ {0.01, 0.02}",
                      "risk over params.lr × params.weight_decay"]


def test_a_heatmap_writes_list_and_boolean_levels_as_the_table_does(monkeypatch):
    """A schedule axis (list values) on a tick and in the averaged note, a boolean axis on a tick: compact JSON
    (labels.legend_value), as the study's table and legends write them, not Python's repr."""
    seen: list[tuple[list[str], str]] = []
    real = study_plots.encode

    def capture(fig, fmt):
        ticks = [t.get_text() for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()]
        seen.append((ticks, fig._suptitle.get_text()))
        return real(fig, fmt)

    monkeypatch.setattr(study_plots, "encode", capture)
    schedules = [[], [{"step": 600, "lr_factor": 0.1}]]
    rows = [{"params.lr_schedule": s, "params.nesterov": n, "params.lr": lr, "risk": lr + len(s) + n}
            for s in schedules for n in (False, True) for lr in (0.1, 1.0)]
    axes = ["params.lr_schedule", "params.nesterov", "params.lr"]
    study_plots.heatmap(rows, "params.lr_schedule", "params.nesterov", "risk", None, "png", study_axes=axes)
    study_plots.heatmap(rows, "params.lr", "params.nesterov", "risk", None, "png", study_axes=axes)
    (ticks, title), (_, averaged) = seen
    assert {"[]", '[{"step":600,"lr_factor":0.1}]', "false", "true"} <= set(ticks), ticks
    assert not any("'" in t or t in ("False", "True") for t in ticks), ticks
    assert averaged.endswith('each cell: the mean over params.lr_schedule ∈ {[], [{"step":600,"lr_factor":0.1}]}'), averaged
    # the heatmap's JSON (GET …/charts/heatmap) takes its xs and ys from the same levels
    assert grid.levels(rows, "params.lr_schedule") == ["[]", '[{"step":600,"lr_factor":0.1}]']
