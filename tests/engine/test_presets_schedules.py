"""The tier-2 schedule presets (smdengine/presets/schedules.py; seed 001 Figs 1, 3a, 4, 11): every size expands,
the predictions follow the formulas (computed here again from the specs), the evaluators read documents that
follow the theory exactly as reproduced, and one of them, run at a reduced size (fixed seeds), gives its
verdicts."""
from __future__ import annotations

import math

import pytest

import smdengine
from smdengine import PRESETS, ChildRecord, estimate, evaluate_checks, expand_study, preset_study
from smdengine._science import EQUILIBRIUM_BAND, au_equilibrium, phase_at
from smdengine.presets import schedules
from tests.presetruns import run_children

IDS = ["train-schedules-same-equilibrium", "train-lr-vs-wd-halving", "train-recovery-time", "train-three-schedules"]


def test_the_schedule_presets_are_in_the_catalog():
    assert [p.id for p, _ in schedules.PRESETS] == IDS
    assert set(IDS) <= set(PRESETS)


@pytest.mark.parametrize("pid", IDS)
def test_every_size_expands(pid):
    preset = PRESETS[pid]
    assert preset.tier == 2 and preset.kinds == ("train",) and not preset.exploratory
    assert all("seed 001" in c.claim for c in preset.checks)
    for size in ("quick", "paper"):
        children = expand_study(preset_study(pid, size))
        assert {c.spec.kind for c in children} == {"train"}
        assert len({c.seed for c in children}) >= 4            # the seeds are the Monte-Carlo replicates
        names = smdengine.output_names(children[0].spec)
        assert all(panel.metric in names for panel in preset.panels)
        assert estimate(pid, size)["gpu"] == (size == "paper")


def _equilibrium_norm4(lr: float, wd: float) -> float:
    """|w|⁴/L = η/(λ(2 − λη)) (SGD, seed 003 Thm 1)."""
    return lr / (wd * (2.0 - lr * wd))


def test_table1_schedules_meet_at_the_same_rates():
    """Seed 001 Table 1: every schedule's factors multiply to 1 by the equal phase, and only the final phase
    (lr ÷ 10, WD 0) follows it."""
    children = expand_study(preset_study("train-schedules-same-equilibrium", "quick"))
    ref = next(c.spec.params for c in children if c.values["name"] == schedules.REFERENCE)   # the constant one
    i, lo, hi = schedules.equal_window(ref)
    for c in children:
        p = c.spec.params
        equal = p.phases()[i]
        assert (equal.lr, equal.weight_decay) == pytest.approx((ref.lr, ref.weight_decay))
        assert phase_at(p.phases(), lo) == equal and phase_at(p.phases(), hi - 1) == equal
        assert p.phases()[i + 1].weight_decay == 0 and p.phases()[i + 1].start == hi
    assert len({tuple((ph.lr, ph.weight_decay) for ph in c.spec.params.phases()[:i]) for c in children}) == 5


def test_recovery_prediction_is_the_band_entry():
    """τ·x_b(k): τ = 1/(4λη) of the new rates, k = (η/λ before)/(η/λ after), x_b = ln((k−1)/((1−b)^−2 − 1))."""
    for c in expand_study(preset_study("train-recovery-time", "quick"))[::6]:
        p = c.spec.params
        before, after = p.phases()
        k = (before.lr / before.weight_decay) / (after.lr / after.weight_decay)
        expected = math.log((k - 1) / ((1 - EQUILIBRIUM_BAND) ** -2 - 1)) / (4 * after.lr * after.weight_decay)
        entry, k2, lam = schedules.recovery_prediction(p)
        assert (entry, k2, lam) == pytest.approx((expected, k, before.lr * before.weight_decay))
        assert entry * lam == pytest.approx(math.log((k - 1) / ((1 - EQUILIBRIUM_BAND) ** -2 - 1)) / 4)


# ----------------------------------------------------------------------------- documents that follow the theory


def _theory_document(p, seed: int) -> dict:
    """Every layer at the equilibrium of the rates in force (L = 1), with a small per-seed wobble; the train/test
    accuracy a function of λ_e, the final test accuracy of the seed; every phase settled at its predicted time."""
    wobble = 1.0 + 1e-3 * (seed - 2)
    steps = list(range(0, p.total_steps, p.record_every))
    layers: dict[str, dict[str, list[float]]] = {}
    for g in ("layers.0.weight", "layers.1.weight"):
        au, norm, eff = [], [], []
        for n in steps:
            ph = phase_at(p.phases(), n)
            w = (_equilibrium_norm4(ph.lr, ph.weight_decay) ** 0.25 if ph.weight_decay > 0 else 1.0) * wobble
            au.append(au_equilibrium(ph.lr, ph.weight_decay) * wobble)
            norm.append(w)
            eff.append(ph.lr / w**2)
        layers[g] = {"au_rms": au, "norm": norm, "eff_lr": eff, "unit_grad_sq": [1.0] * len(steps)}
    acc = [0.9 - 5 * phase_at(p.phases(), n).lr * phase_at(p.phases(), n).weight_decay + 1e-3 * seed for n in steps]
    summary = {"test_acc_final": 0.9 + 1e-3 * seed}
    for i in range(len(p.phases())):
        summary[f"equilibrium_steps_phase{i}"] = 0
    return {"series": {"step": steps, "train_acc": acc, "test_acc": acc}, "layers": layers, "summary": summary}


def _records(pid: str, settle=None):
    children = expand_study(preset_study(pid, "quick", seeds=[0, 1, 2, 3]))
    records, documents = [], []
    for c in children:
        doc = _theory_document(c.spec.params, c.seed)
        if settle is not None:
            doc["summary"]["equilibrium_steps_phase1"] = settle(c.spec.params, c.seed)
        records.append(ChildRecord(c.index, c.point, c.values, c.seed, "succeeded", c.spec.model_dump(mode="json"),
                                   doc["summary"], {}))
        documents.append(doc)
    return children, {c["id"]: c for c in evaluate_checks(pid, records, documents)}


def test_halving_predictions_and_verdicts_on_theory_documents():
    children, checks = _records("train-lr-vs-wd-halving")
    a, b = children[0].spec.params, children[4].spec.params
    assert (a.phases()[1].lr, b.phases()[1].weight_decay) == (a.lr / 2, b.weight_decay / 2)
    for k in range(1, len(schedules.HALVINGS) + 1):
        fa, fb = a.phases()[k], b.phases()[k]
        ratio = math.sqrt(_equilibrium_norm4(fb.lr, fb.weight_decay) / _equilibrium_norm4(fa.lr, fa.weight_decay))
        assert checks[f"norm-sq-{k}"]["predicted"] == pytest.approx(ratio, rel=1e-12)
        assert ratio == pytest.approx(2.0**k)                   # |w|⁴ ∝ η/λ at the same ηλ: (4^k)^½
        assert checks[f"au-rms-{k}"]["predicted"] == pytest.approx(1.0)
        assert checks[f"eff-lr-{k}"]["predicted"] == pytest.approx((fb.lr / fa.lr) / ratio)
    assert {c["verdict"] for c in checks.values()} == {"reproduced"}, checks


def test_same_equilibrium_verdicts_on_theory_documents():
    _, checks = _records("train-schedules-same-equilibrium")
    assert len(checks) == 16 and all(checks[f"au-rms-{s}"]["predicted"] == pytest.approx(1.0)
                                     for s in ("S1", "S3", "S4", "S5"))
    assert {c["verdict"] for c in checks.values()} == {"reproduced"}, checks


def test_three_schedules_verdicts_on_theory_documents():
    """Equal errors once λ_e is equal; the effect is the gap while it differs 2× (5·0.01 in accuracy here)."""
    children, checks = _records("train-three-schedules")
    assert {c["verdict"] for c in checks.values()} == {"reproduced"}, checks
    assert all(c["predicted"] == 0 and c["measured"] == pytest.approx(0, abs=1e-12) for c in checks.values())
    const, lr_decay = children[0].spec.params, children[4].spec.params
    gap = 5 * (lr_decay.phases()[1].lr * lr_decay.phases()[1].weight_decay - const.lr * const.weight_decay)
    assert f"its last half {gap:.3g}" in checks["train-error-lr-decay-equal"]["note"]


def test_recovery_verdicts_on_theory_documents():
    """Times at the prediction give reproduced; times that do not scale with 1/λ_e make the product checks fail."""
    def at_prediction(p, seed):
        return round(schedules.recovery_prediction(p)[0] / p.record_every) * p.record_every + 10 * (seed % 2)

    _, checks = _records("train-recovery-time", at_prediction)
    assert {c["verdict"] for c in checks.values()} == {"reproduced"}, checks
    _, checks = _records("train-recovery-time", lambda p, seed: 400 + 10 * (seed % 2))
    assert checks["product-1"]["verdict"] == checks["product-2"]["verdict"] == "not_reproduced"


# ----------------------------------------------------------------------------- a reduced run

# train-three-schedules at half the epochs (factors at 20/40, fine-tuning from 60 of 100: at λ_e 0.01 an epoch of
# 10 updates is 0.4 relaxation times, so each phase still lasts 8 of them), MLP depth 2 width 32, 2 trials, 4 seeds
REDUCED = {"params.width": 32, "params.depth": 2, "params.trials": 2, "params.epochs": 100,
           "params.schedule.0.epoch": 20, "params.schedule.1.epoch": 40, "params.schedule.2.epoch": 60}
SEEDS = [0, 1, 2, 3]


@pytest.mark.slow
@pytest.mark.cpu_stream   # the gap ≈ the tolerance (below): another stream's draws may tip "inconclusive" over
def test_three_schedules_reduced():
    pid = "train-three-schedules"
    records, documents = run_children(expand_study(preset_study(pid, "quick", seeds=SEEDS, overrides=REDUCED)))
    checks = {c["id"]: c for c in evaluate_checks(pid, records, documents)}
    assert list(checks) == [c.id for c in PRESETS[pid].checks]
    assert {k: c["verdict"] for k, c in checks.items()} == EXPECTED, checks
    assert all("0.02 vs 0.01" in c["note"] for c in checks.values())   # λ_e over epochs 21–40, computed


# test-error-*-finetune: with 4 seeds × 2 trials the test error's Monte-Carlo tolerance (≈ 0.02) is wider than
# the gap the runs show while their λ_e differ (≈ 0.015): inconclusive, as the rule says
EXPECTED = {"train-error-lr-decay-equal": "reproduced", "train-error-lr-decay-finetune": "reproduced",
            "test-error-lr-decay-equal": "reproduced", "test-error-lr-decay-finetune": "inconclusive",
            "train-error-wd-decay-equal": "reproduced", "train-error-wd-decay-finetune": "reproduced",
            "test-error-wd-decay-equal": "reproduced", "test-error-wd-decay-finetune": "inconclusive"}
