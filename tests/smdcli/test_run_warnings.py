"""`smd run` prints a spec's out-of-regime warnings to stderr, and its output lacks the omitted theory."""
from __future__ import annotations

import json

from smdcli.local import run_local


def test_smd_run_prints_warnings(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"kind": "nrq", "params": {"lr": 10, "weight_decay": 0.5, "trials": 4, "steps": 20,
                                                          "record_every": 5}}))
    out = tmp_path / "out.json"
    assert run_local(spec, out, quiet=True) == 0
    err = capsys.readouterr().err
    assert "smd run: warning: no_equilibrium: η = 10, λ = 0.5: ηλ = 5." in err
    assert json.loads(out.read_text())["theory"] == {}


def test_smd_run_in_regime_prints_none(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"kind": "nrq", "params": {"trials": 4, "steps": 20, "record_every": 5}}))
    assert run_local(spec, tmp_path / "out.json", quiet=True) == 0
    assert "warning" not in capsys.readouterr().err
