"""`smd study run`: a study run here without the service — expansion order, tables, plots, results
independent of the number of worker processes, failed children, bad studies, and the Corollary-3
scale invariance (issue 16)."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

import smdengine
from smdcli.main import main

PNG = b"\x89PNG\r\n\x1a\n"
LRS, WDS, SEEDS = [0.1, 0.2], [0.01, 0.02], [0, 1]
GRID = {"name": "tiny grid", "visibility": "lab",
        "base": {"kind": "nrq", "seed": 0, "params": {"dim": 10, "trials": 32, "steps": 300, "record_every": 20}},
        "grid": {"params.lr": LRS, "params.weight_decay": WDS}, "seeds": SEEDS}


def _write(tmp_path: Path, study: dict, name: str = "study.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(study))
    return path


def _table(out: Path) -> dict:
    return json.loads((out / "table.json").read_text())


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_grid_tables_plots_and_independent_of_jobs(tmp_path):
    study = _write(tmp_path, GRID)
    one, two = tmp_path / "j1", tmp_path / "j2"
    assert main(["study", "run", str(study), "-o", str(one), "-j", "1", "--quiet"]) == 0
    smd = Path(sys.executable).parent / "smd"
    proc = subprocess.run([str(smd), "study", "run", str(study), "-o", str(two), "-j", "2"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "8 children (4 points × 2 seeds), 2 processes" in proc.stderr

    table = _table(one)
    rows = table["rows"]
    assert len(rows) == 8
    expected = [(lr, wd, seed) for lr in LRS for wd in WDS for seed in SEEDS]   # grid row-major × seeds
    assert [(r["params.lr"], r["params.weight_decay"], r["seed"]) for r in rows] == expected
    assert [r["index"] for r in rows] == list(range(8))
    assert [r["point"] for r in rows] == [i // 2 for i in range(8)]
    assert all(r["status"] == "succeeded" and r["experiment_id"] is None for r in rows)
    assert all(r["intrinsic_lr"] == r["params.lr"] * r["params.weight_decay"] for r in rows)
    assert {"risk", "risk_stationary", "norm_sq"} <= set(table["columns"])
    assert table["columns"] == smdengine.table_columns(rows)

    # -j 1 and -j 2 (one fused batch of 8, or two of 4), and every child alone: the same numbers, exactly
    assert _table(two) == table
    alone = tmp_path / "alone"
    assert main(["study", "run", str(_write(tmp_path, {**GRID, "fuse": False}, "alone.json")), "-o", str(alone),
                 "--quiet"]) == 0
    assert _table(alone) == table
    for name in ("table.csv", "table_by_point.csv"):
        assert (one / name).read_bytes() == (two / name).read_bytes()
    for i in range(8):
        a = json.loads((one / "children" / f"{i}.json").read_text())
        b = json.loads((two / "children" / f"{i}.json").read_text())
        assert a == b and a["status"] == "succeeded" and a["spec"]["seed"] == SEEDS[i % 2]
        assert a["kind"] == "nrq" and a["id"] is None and len(a["series"]["risk"]) == 16   # 15 records, the end

    flat = _csv_rows(one / "table.csv")
    assert len(flat) == 8 and float(flat[3]["risk"]) == rows[3]["risk"]
    by_point = _csv_rows(one / "table_by_point.csv")
    assert len(by_point) == 4 and [int(r["n"]) for r in by_point] == [2] * 4
    mean = (rows[0]["risk"] + rows[1]["risk"]) / 2
    assert float(by_point[0]["risk"]) == pytest.approx(mean, rel=1e-12) and float(by_point[0]["risk_se"]) > 0

    for name in ("overlay_risk.png", "overlay_norm_sq.png", "heatmap_risk.png", "scatter_risk_intrinsic_lr.png"):
        data = (one / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, name
        assert (two / name).exists()
    assert not (one / "overlay_loss.png").exists()   # no theory for the loss


def test_a_failed_child_is_recorded_and_exits_1(tmp_path, monkeypatch, capsys):
    real = smdengine.run

    def flaky(spec, **kwargs):
        if spec["params"]["lr"] == 0.2 and spec["seed"] == 1:
            raise RuntimeError("diverged (test)")
        return real(spec, **kwargs)

    def batch_fails(specs, **kwargs):   # the fused batch fails: each child runs again alone
        raise RuntimeError("diverged in the batch (test)")

    monkeypatch.setattr(smdengine, "run", flaky)
    monkeypatch.setattr(smdengine, "run_fused", batch_fails)
    study = {**GRID, "grid": {"params.lr": LRS}, "base": {**GRID["base"], "params": {**GRID["base"]["params"],
                                                                                         "steps": 100}}}
    out = tmp_path / "out"
    assert main(["study", "run", str(_write(tmp_path, study)), "-o", str(out), "--quiet"]) == 1
    assert "child 3 (point 1 params.lr=0.2, seed 1) failed: RuntimeError: diverged (test)" in capsys.readouterr().err
    rows = _table(out)["rows"]
    assert [r["status"] for r in rows] == ["succeeded", "succeeded", "succeeded", "failed"]
    assert "risk" not in rows[3]
    doc = json.loads((out / "children" / "3.json").read_text())
    assert doc["status"] == "failed" and "diverged" in doc["error"]
    by_point = _csv_rows(out / "table_by_point.csv")
    assert [r["n"] for r in by_point] == ["2", "1"] and by_point[1]["statuses"] == "failed,succeeded"
    assert (out / "overlay_risk.png").exists() and (out / "scatter_risk_intrinsic_lr.png").exists()


@pytest.mark.parametrize(("change", "text"), [
    ({"grid": {"params.learning_rate": [0.1, 0.2]}}, "axis params.learning_rate: not a field"),
    ({"grid": {"params.lr": [0.1, -0.2]}}, "point 1, params.lr: Input should be greater than 0 (at params.lr=-0.2)"),
    ({"grid": {}, "zip": {"params.lr": [0.1, 0.2], "params.weight_decay": [0.1]}}, "zip: expected axes of equal"),
    ({"grid": {"params.lr": [0.1], "seed": [5, 6]}},
     "seeds: give the seeds either as an axis on `seed` or as `seeds`, not both"),
])
def test_a_bad_study_exits_2_naming_the_axis(tmp_path, capsys, change, text):
    out = tmp_path / "out"
    assert main(["study", "run", str(_write(tmp_path, {**GRID, **change})), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the study is not valid" in err and text in err
    assert not (out / "table.json").exists()


def test_corollary_3_scale_invariance(tmp_path):
    """init_std·k, lr·k², weight_decay/k² (k = 1, 3, 10) give the same risk series (float64)."""
    ks = [1, 3, 10]
    study = {"name": "corollary 3",
             "base": {"kind": "nrq", "seed": 3,
                      "params": {"dim": 10, "trials": 300, "steps": 3000, "record_every": 50, "dtype": "float64"}},
             "zip": {"params.init_std": [1.0 * k for k in ks], "params.lr": [0.05 * k * k for k in ks],
                     "params.weight_decay": [0.02 / (k * k) for k in ks]}}
    out = tmp_path / "out"
    assert main(["study", "run", str(_write(tmp_path, study)), "-o", str(out), "-j", "1", "--quiet"]) == 0
    docs = [json.loads((out / "children" / f"{i}.json").read_text()) for i in range(3)]
    risks = [d["series"]["risk"] for d in docs]
    assert len(risks[0]) == 61 and risks[0][0] > 10 * risks[0][-1]   # it moved: from ~0.9 towards equilibrium
    worst = max(abs(a - b) for other in risks[1:] for a, b in zip(risks[0], other, strict=True))
    assert worst <= 1e-8
    norms = [d["series"]["norm_sq"][-1] for d in docs]   # while |X|² scales by k²
    assert norms[1] == pytest.approx(9 * norms[0], rel=1e-9) and norms[2] == pytest.approx(100 * norms[0], rel=1e-9)
    assert (out / "overlay_risk.png").exists() and not (out / "heatmap_risk.png").exists()


def test_a_points_study_gets_a_heatmap_only_where_its_points_fill_a_grid():
    """nrq-momentum-risk's points move momentum with init_std: a heatmap over them was a mostly empty diagonal."""
    from types import SimpleNamespace

    from smdcli.study import heatmap_axes

    axes = ["params.momentum", "params.init_std", "params.lr"]
    study = SimpleNamespace(points=[{}], axes=lambda: axes, grid={}, zip={})
    diagonal = [{"params.momentum": m, "params.init_std": s, "params.lr": 0.1} for m, s in ((0.0, 1.0), (0.5, 2.0),
                                                                                             (0.9, 3.0))]
    assert heatmap_axes(study, diagonal) is None
    full = [{"params.momentum": m, "params.init_std": 1.0, "params.lr": lr} for m in (0.0, 0.9) for lr in (0.1, 0.2)]
    assert heatmap_axes(study, full) == ("params.momentum", "params.lr")


def test_the_bar_counts_the_studys_steps_not_its_children(tmp_path, monkeypatch):
    """A study of children of 100 and 900 steps, run one after the other: its bar shows 10% once the first has
    ended (where a count of children said half), then 100% with both ended."""
    from io import StringIO

    from smdcli.study import study_progress

    assert study_progress({0: 100, 1: 900}, {1: 0.5}, succeeded={0}) == pytest.approx(0.55)
    assert study_progress({0: 100, 1: 900}, {0: 2.0}, succeeded=()) == pytest.approx(0.1)   # past 1 counts 1
    # a failed child's steps not done stay in the total, as the service counts them
    assert study_progress({0: 100, 1: 900}, {0: 0.5, 1: 1.0}, succeeded={1}) == pytest.approx(0.95)
    assert study_progress({}, {}, succeeded=()) == 1.0

    class Terminal(StringIO):   # the bar is drawn on a terminal only
        def isatty(self) -> bool:
            return True

    stderr = Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    study = {"base": {"kind": "nrq", "params": {"dim": 10, "trials": 8, "record_every": 100}},
             "points": [{"params.steps": 100}, {"params.steps": 900}], "fuse": False}
    assert main(["study", "run", str(_write(tmp_path, study)), "-o", str(tmp_path / "out"), "-j", "1"]) == 0
    frames = [frame.strip() for frame in stderr.getvalue().split("\r") if "children ended" in frame]
    first_ended = next(frame for frame in frames if "1/2 children ended" in frame)
    assert first_ended.startswith("10%|"), frames
    assert frames[-1].startswith("100%|") and "2/2 children ended" in frames[-1], frames
