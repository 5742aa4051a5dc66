"""The tier-1 presets added on the sde kind's models and nrq-early-large-lr, each run through the engine at a reduced
size where its checks are still decisive (fixed seeds), reproduce their seed's claims; predictions come from code."""
from __future__ import annotations

import math

import pytest

from smdengine import PRESETS, evaluate_checks, expand_study, preset_study
from smdengine.presets import sde as sde_presets
from tests.presetruns import run_children

VERDICTS = {"reproduced", "not_reproduced", "inconclusive"}


def checks_of(pid: str, study: dict) -> dict[str, dict]:
    checks = evaluate_checks(pid, *run_children(expand_study(study)))
    assert [c["id"] for c in checks] == [c.id for c in PRESETS[pid].checks]
    for c in checks:
        assert c["verdict"] in VERDICTS and c["tolerance_rule"], c
        assert c["verdict"] == "reproduced", c
    return {c["id"]: c for c in checks}


@pytest.mark.slow
def test_early_large_lr():
    by_id = checks_of("nrq-early-large-lr", preset_study("nrq-early-large-lr", seeds=[0, 1, 2, 3],
                                                         overrides={"params.trials": 60}))
    # an early large LR settles sooner; with the rescale at the decay itself
    assert by_id["settle-0"]["predicted"] > by_id["settle-1"]["predicted"] > by_id["settle-2"]["predicted"] == 600
    assert by_id["slope"]["predicted"] == pytest.approx(2 * math.log1p(-0.1 * 0.01), rel=1e-3)


@pytest.mark.slow
def test_sde_nrq_stationary():
    by_id = checks_of("sde-nrq-stationary", preset_study("sde-nrq-stationary", seeds=[0, 1, 2, 3],
                                                         overrides={"params.trials": 100, "params.steps": 8000}))
    from smdengine.nrq import theory
    assert by_id["tail-risk-0"]["predicted"] == pytest.approx(
        theory.risk_stationary(theory.kappa(1.0, 2.0, 10, 1.0, 0.1, 0.01), 10), rel=1e-12)


def test_toy2d_chaos():
    checks_of("toy2d-chaos", preset_study("toy2d-chaos", seeds=[0, 1, 2], overrides={"params.steps": 200}))


@pytest.mark.slow
@pytest.mark.parametrize("pid,steps", [("norm-map-sgd", 40_000), ("norm-map-sgdm", 10_000)])
def test_norm_maps(pid, steps):
    by_id = checks_of(pid, preset_study(pid, seeds=[0, 1, 2], overrides={
        "params.steps": steps, "params.unit_grad_sq.sine_period": 2 * math.pi * steps / 10}))
    if pid == "norm-map-sgd":   # the map's own fixed point √(Lη/(2λ)) (eq. 185 truncates (1−λη)²)
        assert by_id["equilibrium-constant"]["predicted"] == pytest.approx(math.sqrt(10 * 0.1 / (2 * 0.001)), rel=1e-12)
        assert by_id["relaxation-time"]["predicted"] == pytest.approx(1 / (4 * 0.1 * 0.001), rel=1e-3)


@pytest.mark.slow
def test_normalized_linear_time_scaling():
    study = sde_presets.scaling_study("reduced", (4e-2, 4e-3, 4e-4), 1.0, 200)
    by_id = checks_of("normalized-linear-time-scaling", study)
    assert "finite-ηλ correction" in by_id["equal-tau-agree"]["note"]
    assert by_id["equal-lr-time-differ"]["predicted"] > 0
