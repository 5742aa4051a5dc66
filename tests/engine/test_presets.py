"""Presets in the engine: the catalog is consistent, and each shipped preset, run through the engine at a
reduced size where its checks are still decisive (fixed seeds), reproduces its seed's claims; a broken
measurement is not reproduced and a missing child makes its checks inconclusive."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from copy import deepcopy

import pytest

import smdengine
from smdengine import PRESETS, ChildRecord, estimate, evaluate_checks, expand_study, preset_study
from smdengine.nrq import theory
from smdengine.presets import nrq as nrq_presets
from tests.presetruns import run_children

VERDICTS = {"reproduced", "not_reproduced", "inconclusive"}


def test_catalog_is_consistent():
    assert len(PRESETS) == len({p.id for p in PRESETS.values()})
    for pid, preset in PRESETS.items():
        assert preset.id == pid and preset.tier in (1, 2, 3) and preset.description
        assert "quick" in preset.sizes and set(preset.gpu_sizes) <= set(preset.sizes)
        assert len({c.id for c in preset.checks}) == len(preset.checks) > 0
        assert all("seed" in c.claim.lower() for c in preset.checks), pid   # every claim names its seed reference
        for size in preset.sizes:
            children = expand_study(preset_study(pid, size))
            assert {c.spec.kind for c in children} <= set(preset.kinds)
            names = smdengine.output_names(children[0].spec)
            for panel in preset.panels:
                assert panel.metric in names, (pid, panel.metric)
                assert panel.points is None or max(panel.points) <= max(c.point for c in children)
            est = estimate(pid, size)
            assert est["runs"] == len(children) and est["gpu"] == (size in preset.gpu_sizes)
            assert est["work"] == sum(c.spec.work for c in children)


def test_importing_presets_loads_no_torch_nor_scipy():
    code = ("import sys, smdengine; assert smdengine.PRESETS; "
            "print(json.dumps(['torch' in sys.modules, 'scipy' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [False, False]


def test_preset_study_arguments():
    pid = "nrq-equilibrium-tradeoff"
    with pytest.raises(KeyError, match="unknown preset 'nope'.*nrq-equilibrium-tradeoff"):
        preset_study("nope")
    with pytest.raises(ValueError, match="size: expected one of quick, paper"):
        preset_study(pid, "huge")
    study = preset_study(pid, "quick", seeds=[5], overrides={"params.trials": 7, "params.steps": 300})
    assert study["seeds"] == [5] and study["base"]["params"]["trials"] == 7
    assert PRESETS[pid].sizes["quick"]["base"]["params"]["trials"] != 7   # the catalog is not changed
    children = expand_study(study)
    assert [c.spec.params.trials for c in children] == [7, 7, 7]
    # an override of a path the points set (or one inside or above it) would be overwritten: refused
    for path in ("params.lr", "params.init_std", "params"):
        with pytest.raises(ValueError, match=f"{path}: expected a path the preset does not vary"):
            preset_study(pid, "quick", overrides={path: 0.2})


def test_initial_norms_sit_at_equilibrium():
    for lr in nrq_presets.TRADEOFF_LRS:
        std = nrq_presets.equilibrium_init_std(lr, 0.01)
        assert 10 * std**2 == pytest.approx(theory.norm_sq_equilibrium(10, 1.0, lr, 0.01), rel=1e-3)


# ----------------------------------------------------------------------------- running presets

SEEDS = [0, 1, 2, 3, 4, 5]


def run_preset(pid: str, overrides: dict, seeds=SEEDS, fuse: bool = False) -> tuple[list[ChildRecord], list[dict]]:
    return run_children(expand_study(preset_study(pid, "quick", seeds=seeds, overrides=overrides)), fuse=fuse)


def assert_verdicts(pid, records, documents, expected=None):
    checks = evaluate_checks(pid, records, documents)
    assert [c["id"] for c in checks] == [c.id for c in PRESETS[pid].checks]
    for c in checks:
        assert c["verdict"] in VERDICTS and c["tolerance_rule"], c
        want = (expected or {}).get(c["id"], "reproduced")
        assert c["verdict"] == want, c
    return checks


@pytest.fixture(scope="module")
def tradeoff():
    return run_preset("nrq-equilibrium-tradeoff", {"params.trials": 150, "params.steps": 8000})


@pytest.mark.slow
def test_equilibrium_tradeoff(tradeoff):
    checks = assert_verdicts("nrq-equilibrium-tradeoff", *tradeoff)
    by_id = {c["id"]: c for c in checks}
    # predictions come from the formulas: κ, r* by quadrature, √(2ηλ)
    k = theory.kappa(1.0, 2.0, 10, 1.0, 0.1, 0.01)
    assert by_id["tail-risk-1"]["predicted"] == pytest.approx(theory.risk_stationary(k, 10), rel=1e-12)
    assert by_id["au-rms-2"]["predicted"] == pytest.approx(math.sqrt(2 * 0.4 * 0.01), rel=1e-12)


@pytest.mark.slow   # the tradeoff preset's runs (shared with test_equilibrium_tradeoff)
def test_a_broken_measurement_is_not_reproduced(tradeoff):
    records, documents = deepcopy(tradeoff)
    for r, d in zip(records, documents, strict=True):
        if r.point == 1:   # AU measured 5% too large at η 0.1
            d["summary"]["au_rms"] *= 1.05
            d["series"]["au_rms"] = [v * 1.05 if v is not None else None for v in d["series"]["au_rms"]]
        if r.point == 2:   # tail risk 4% too large at η 0.4: beyond the catalog's 3% band of the continuous limit
            d["summary"]["risk"] *= 1.04
    by_id = {c["id"]: c for c in evaluate_checks("nrq-equilibrium-tradeoff", records, documents)}
    assert by_id["au-rms-1"]["verdict"] == "not_reproduced" and by_id["au-rms-1"]["note"]
    assert by_id["tail-risk-2"]["verdict"] == "not_reproduced"
    assert by_id["tail-risk-2"]["tolerance"] >= 0.03 * by_id["tail-risk-2"]["predicted"]
    assert by_id["au-rms-0"]["verdict"] == "reproduced"


def test_a_missing_child_makes_its_checks_inconclusive(tradeoff):
    records, documents = tradeoff
    failed = [ChildRecord(r.index, r.point, r.values, r.seed, "failed", r.spec) if r.point == 2 else r
              for r in records]
    docs = [{} if r.point == 2 else d for r, d in zip(records, documents, strict=True)]
    by_id = {c["id"]: c for c in evaluate_checks("nrq-equilibrium-tradeoff", failed, docs)}
    for cid in ("tail-risk-2", "au-rms-2", "risk-ratio"):
        assert by_id[cid]["verdict"] == "inconclusive" and "failed" in by_id[cid]["note"], by_id[cid]
        assert by_id[cid]["measured"] is None
    assert by_id["au-rms-0"]["verdict"] == "reproduced"
    # a missing point (not expanded at all) is inconclusive too
    only = [(r, d) for r, d in zip(records, documents, strict=True) if r.point != 0]
    by_id = {c["id"]: c for c in evaluate_checks("nrq-equilibrium-tradeoff", *map(list, zip(*only, strict=True)))}
    assert by_id["tail-risk-0"]["verdict"] == "inconclusive"


@pytest.mark.slow
def test_momentum_risk():
    assert_verdicts("nrq-momentum-risk", *run_preset("nrq-momentum-risk", {"params.trials": 150, "params.steps": 8000}))


@pytest.mark.slow
def test_scale_equivalence():
    assert_verdicts("nrq-scale-equivalence", *run_preset("nrq-scale-equivalence",
                                                         {"params.trials": 150, "params.steps": 8000}))


@pytest.mark.slow
def test_escape_rescale():
    # the 12 children (2 points × 6 seeds, 40 000 steps each) differ only in seed and rescale: one fused batch,
    # bit for bit their runs alone, at less than half their cost (the per-update overhead is paid once)
    assert_verdicts("nrq-escape-rescale", *run_preset("nrq-escape-rescale", {"params.trials": 150}, fuse=True))


@pytest.mark.parametrize("pid", list(PRESETS))
def test_a_study_without_runs_gives_every_check_inconclusive(pid):
    """Whatever an evaluator reads first, a study whose runs are all absent yields every check, inconclusive
    and saying why (no exception)."""
    checks = evaluate_checks(pid, [], [])
    assert [c["id"] for c in checks] == [c.id for c in PRESETS[pid].checks]
    assert all(c["verdict"] == "inconclusive" and c["note"].startswith("not measurable") for c in checks), checks
