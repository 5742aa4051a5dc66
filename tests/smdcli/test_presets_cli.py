"""`smd presets` without the service: list and show from this engine, bad input, and `run --local` at a
tiny override-reduced size (runs, tables, checks.json equal to the engine's evaluation of the written
documents, figure.png, the verdict table). The remote commands run against a real `smd serve` in
tests/integration/test_presets_serve.py."""
from __future__ import annotations

import json

import pytest

import smdengine
from smdcli.main import main
from smdcli.presets import parse_overrides

PRESET = "nrq-equilibrium-tradeoff"
TINY = ["--set", "params.steps=1500", "--set", "params.trials=32", "--set", "params.record_every=50"]
PNG = b"\x89PNG\r\n\x1a\n"


def test_list_and_show(capsys):
    assert main(["presets", "list"]) == 0
    out = capsys.readouterr().out
    for preset in smdengine.PRESETS.values():
        assert preset.id in out and preset.title in out
        # its figure whole up to any parenthesis (cut at 18 characters it read "004 App. E (text;")
        assert f" {preset.seed} {preset.figure.split(' (')[0]}  " in out, preset.figure
    assert "quick: " in out and " runs, work " in out and "(text;" not in out
    assert main(["presets", "list", "--json"]) == 0
    assert {e["id"] for e in json.loads(capsys.readouterr().out)} == set(smdengine.PRESETS)

    assert main(["presets", "show", PRESET]) == 0
    out = capsys.readouterr().out
    preset = smdengine.PRESETS[PRESET]
    assert preset.description in out and all(c.claim in out for c in preset.checks)
    assert '"points"' in out   # the study each size expands to
    assert main(["presets", "show", PRESET, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["sizes"]["quick"]["spec"] == smdengine.preset_study(PRESET, "quick")


def test_bad_input_exits_2(tmp_path, capsys):
    assert main(["presets", "show", "nope"]) == 2
    assert PRESET in capsys.readouterr().err   # lists the ids
    assert main(["presets", "run", "nope", "--local", "-o", str(tmp_path / "a")]) == 2
    assert main(["presets", "run", PRESET, "--local", "-o", str(tmp_path / "b"), "--size", "huge"]) == 2
    assert "quick" in capsys.readouterr().err
    assert main(["presets", "run", PRESET, "--local", "-o", str(tmp_path / "c"), "--set", "params.lrr=1"]) == 2
    assert "params.lrr" in capsys.readouterr().err
    assert main(["presets", "run", PRESET, "--local", "-o", str(tmp_path / "d"), "--set", "oops"]) == 2
    assert main(["presets", "run", PRESET, "--local"]) == 2        # -o missing
    assert not any((tmp_path / d).exists() for d in "abcd")


def test_seeds_its_checks_cannot_use_exit_2_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["presets", "run", "toy2d-chaos", "--local", "-o", str(out), "--seeds", "0", "--quiet"]) == 2
    assert ("seeds: expected at least 2 seeds for preset toy2d-chaos (its checks' standard errors are over seeds), "
            "got 1") in capsys.readouterr().err
    assert main(["presets", "run", PRESET, "--local", "-o", str(out), "--seeds", "4", "2", "4", "--quiet"]) == 2
    assert "seeds: expected distinct seeds, got 4 more than once" in capsys.readouterr().err
    assert not out.exists()


def test_parse_overrides():
    assert parse_overrides(["a.b=1", "c=x", "d=[1, 2]", "e=0.5", "f=true"]) == \
        {"a.b": 1, "c": "x", "d": [1, 2], "e": 0.5, "f": True}
    assert parse_overrides([]) is None
    with pytest.raises(ValueError):
        parse_overrides(["=1"])


def test_run_local_writes_checks_figure_and_prints_verdicts(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["presets", "run", PRESET, "--local", "-o", str(out), "--seeds", "0", "1", "-j", "1", "--quiet",
                 *TINY]) == 0
    printed = capsys.readouterr().out
    written = json.loads((out / "checks.json").read_text())
    assert written["preset"] == PRESET and written["size"] == "quick"
    checks = written["checks"]
    assert [c["id"] for c in checks] == [c.id for c in smdengine.PRESETS[PRESET].checks]
    assert all(c["verdict"] in ("reproduced", "not_reproduced", "inconclusive") for c in checks)
    for check in checks:
        assert check["id"] in printed and check["verdict"] in printed and check["claim"] in printed

    # the checks are the engine's evaluation of the documents written to children/
    table = json.loads((out / "table.json").read_text())["rows"]
    assert len(table) == 6 and {r["seed"] for r in table} == {0, 1}
    docs = [json.loads((out / "children" / f"{r['index']}.json").read_text()) for r in table]
    records = [smdengine.ChildRecord(index=r["index"], point=r["point"], seed=r["seed"], status=d["status"],
                                     values={k: r[k] for k in ("params.lr", "params.init_std")}, spec=d["spec"],
                                     summary=d["summary"], theory=d["theory"]) for r, d in zip(table, docs, strict=True)]
    assert smdengine.json_safe(smdengine.evaluate_checks(PRESET, records, docs)) == checks
    assert docs[0]["spec"]["params"]["steps"] == 1500 and docs[0]["spec"]["params"]["trials"] == 32

    figure = (out / "figure.png").read_bytes()
    assert figure.startswith(PNG) and len(figure) > 30_000
    assert (out / "table.csv").exists() and (out / "overlay_risk.png").exists()
