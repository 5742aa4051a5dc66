"""The verdict ``finding`` (smdengine/presets/_checks.py: a claim that does not hold on the model, for a cause a
diagnostic check shows) and the measurements behind the findings of the train presets: the drive h̃ recovered
from the tracked norm theory, the band's entry of a noisy relaxation, and the multistage and pseudo-overfitting
checks on documents made here (a synthetic norm dynamics whose drive falls, or not, at each decay)."""
from __future__ import annotations

import math
import random

import pytest

from smdengine import ChildRecord, evaluate_checks, expand_study, preset_study
from smdengine._science import au_equilibrium, band_entry, phase_at, relaxation_time
from smdengine.presets import CheckDef, exploratory, train
from smdengine.presets._checks import Outcome, run_checks

# ----------------------------------------------------------------------------- the verdict logic


def _outcome(measured: float, **kw) -> Outcome:
    return Outcome(1.0, measured, 0.1, "a rule", **kw)


def _run(outcomes: dict[str, Outcome | None]) -> dict[str, dict]:
    checks = [CheckDef(cid, f"claim {cid} (seed 000)") for cid in outcomes]

    def evaluator(_study):
        return {cid: (lambda o=o: o) for cid, o in outcomes.items() if o is not None}
    return {row["id"]: row for row in run_checks(checks, evaluator, [], [])}


def test_a_contradicted_claim_whose_diagnostic_holds_is_a_finding():
    rows = _run({"claim": _outcome(0.5, finding="the drive falls", diagnostics=("cause",)),
                 "cause": _outcome(1.05)})
    assert rows["cause"]["verdict"] == "reproduced"
    assert rows["claim"]["verdict"] == "finding"
    assert rows["claim"]["note"].startswith("finding: the drive falls (shown by cause reproduced)")
    assert "> tolerance" in rows["claim"]["note"]            # the measurement's own reason is kept
    assert rows["claim"]["measured"] == 0.5 and rows["claim"]["predicted"] == 1.0


@pytest.mark.parametrize(("diagnostic", "state"), [(_outcome(0.5), "not_reproduced"), (None, "inconclusive"),
                                                   (Outcome(1.0, 1.05, 0.1, "r", effect=0.01), "inconclusive")])
def test_a_finding_needs_its_diagnostic_reproduced(diagnostic, state):
    rows = _run({"claim": _outcome(0.5, finding="the drive falls", diagnostics=("cause",)), "cause": diagnostic})
    assert rows["cause"]["verdict"] == state
    assert rows["claim"]["verdict"] == "not_reproduced"
    assert f"the known cause (the drive falls) is not shown: diagnostic cause {state}" in rows["claim"]["note"]


def test_every_diagnostic_must_hold_and_an_absent_one_does_not():
    rows = _run({"claim": _outcome(0.5, finding="x", diagnostics=("a", "b")), "a": _outcome(1.0), "b": _outcome(0.2)})
    assert rows["claim"]["verdict"] == "not_reproduced" and "diagnostic a reproduced, b not_reproduced" in rows["claim"]["note"]
    rows = _run({"claim": _outcome(0.5, finding="x", diagnostics=("elsewhere",))})
    assert rows["claim"]["verdict"] == "not_reproduced" and "elsewhere absent" in rows["claim"]["note"]


def test_a_finding_applies_only_to_a_contradicted_claim():
    rows = _run({"claim": _outcome(1.02, finding="x", diagnostics=("cause",)), "cause": _outcome(1.0)})
    assert rows["claim"]["verdict"] == "reproduced" and rows["claim"]["note"] is None
    inconclusive = Outcome(0.0, 0.01, 0.1, "r", sense="above", finding="x", diagnostics=("cause",))
    rows = _run({"claim": inconclusive, "cause": _outcome(1.0)})
    assert rows["claim"]["verdict"] == "inconclusive" and rows["claim"]["note"].endswith("diagnostic cause reproduced")


def test_a_finding_without_a_diagnostic_is_refused():
    with pytest.raises(ValueError, match="diagnostic"):
        Outcome(1.0, 0.5, 0.1, "r", finding="the drive falls")


# ----------------------------------------------------------------------------- documents made here

LAYERS = ("layers.0.weight", "layers.1.weight")
DRIVE = {"layers.0.weight": 0.6, "layers.1.weight": 0.3}


def _document(p, seed: int, fall: float, noise: float = 0.03) -> dict:
    """A run whose every layer follows the norm dynamics of seed 003 Thm 1/2 update by update: |w|⁴ relaxes to
    c·η·h̃ at the rate 1/τ (τ = (1−α)/(4λη)), the AU is √(2λη/(1+α))·(|w*|/|w|)², the drive h̃ is multiplied by
    ``fall`` at each decay (1: constant), the rescale multiplies |w| at the phase's start; records every
    ``record_every`` updates (the AU the RMS of the window's, |w| the mean, ×(1 + noise·N(0,1)) per record),
    ``norm_theory`` the equilibrium norm of the running mean of h̃ (the tracker's), a final row at step == steps
    with the window metrics None."""
    rng = random.Random(1000 * seed + int(100 * fall))
    a, r = p.momentum, p.record_every
    phases = p.phases()

    def c(ph) -> float:
        return ph.lr / (ph.weight_decay * (1 - a) * (2 - ph.weight_decay * ph.lr / (1 + a)))

    steps = [*range(0, p.total_steps, r), p.total_steps]
    layers = {}
    for g in LAYERS:
        h = DRIVE[g]
        x = c(phases[0]) * h * 1.0          # |w|⁴, at equilibrium from the start
        m = h                               # the running mean of h̃
        au, norm, theory, unit = [], [], [], []
        for n in steps[:-1]:
            squares, roots = [], []
            for t in range(n, n + r):
                ph = phase_at(phases, t)
                if t == ph.start and t > 0:
                    h *= fall
                    x *= ph.rescale ** 4
                tau = relaxation_time(ph.lr, ph.weight_decay, a)
                squares.append(au_equilibrium(ph.lr, ph.weight_decay, a) ** 2 * c(ph) * h / x)
                roots.append(x ** 0.25)
                x += (c(ph) * h - x) / tau
            ph = phase_at(phases, n + r - 1)
            beta = min(1.0, 4 * ph.weight_decay * ph.lr / (1 - a))
            m = (1 - beta) ** r * m + (1 - (1 - beta) ** r) * h
            au.append(math.sqrt(math.fsum(squares) / r) * (1 + noise * rng.gauss(0, 1)))
            norm.append(math.fsum(roots) / r)
            theory.append((c(ph) * m) ** 0.25)
            unit.append(h)
        ph = phases[-1]
        layers[g] = {"au_rms": [*au, None], "norm": [*norm, x ** 0.25], "norm_theory": [*theory, (c(ph) * m) ** 0.25],
                     "unit_grad_sq": [*unit, None]}
    acc = [0.95 + 0.001 * (seed % 3)] * len(steps)
    return {"series": {"step": steps, "test_acc": acc, "train_acc": [*acc[:-1], None],
                       "test_loss": [0.2] * len(steps), "train_loss": [*([0.1] * (len(steps) - 1)), None]},
            "layers": layers,
            "summary": {"test_acc_final": acc[-1], **{f"equilibrium_steps_phase{i}": 0 for i in range(len(phases))}}}


def _made(pid: str, fall: float, seeds=(0, 1, 2, 3, 4, 5)):
    records, documents = [], []
    for c in expand_study(preset_study(pid, "quick", seeds=list(seeds))):
        doc = _document(c.spec.params, c.seed, fall)
        records.append(ChildRecord(c.index, c.point, c.values, c.seed, "succeeded", c.spec.model_dump(mode="json"),
                                   doc["summary"], {}))
        documents.append(doc)
    return records, documents


def test_the_drive_is_recovered_from_the_norm_theory():
    """With momentum the tracker records h̃ only through norm_theory; two successive records give it back (the
    first record and the final row have none)."""
    records, documents = _made("train-multistage-rescale", 0.5, seeds=(0, 1))
    study = train.Study(records, documents)
    steps, drive = train.drive_series(study, 0)
    for g in LAYERS:
        got = drive[g][0]
        assert math.isnan(got[0]) and math.isnan(got[-1])
        want = [DRIVE[g] * 0.5 ** sum(n >= d for d in train.QUICK_DECAYS) for n in steps]
        assert got[1:-1] == pytest.approx(want[1:-1], rel=1e-9)


def test_the_band_entry_of_a_noisy_relaxation():
    """The AU of |w|⁴ relaxing from k× its equilibrium enters the ±10% band at τ·x_b(k) (0.035τ late: the smoothing
    over τ); with 5% record noise the records smoothed and the crossing interpolated put it within two records."""
    tau, k, r = 300.0, 8.0, 50
    steps = list(range(0, 4000, r))

    def au(n: int) -> float:
        return (1 + (k - 1) * math.exp(-(n + (r - 1) / 2) / tau)) ** -0.5
    exact = train.band_entry_steps(steps, [au(n) for n in steps], 0, 4000, r, 1.0, 0.1, tau / 2)
    assert 0 < exact - tau * band_entry(k) < 0.04 * tau     # the centred mean lags the concave rise (entry_values)
    rng = random.Random(3)
    noisy = [train.band_entry_steps(steps, [au(n) * (1 + 0.05 * rng.gauss(0, 1)) for n in steps], 0, 4000, r, 1.0,
                                    0.1, tau / 2) for _ in range(20)]
    assert sum(noisy) / len(noisy) == pytest.approx(tau * band_entry(k), abs=2 * r)
    assert train.band_entry_steps(steps, [0.5] * len(steps), 0, 4000, r, 1.0, 0.1, tau / 2) is None
    assert train.band_entry_steps(steps, [1.0] * len(steps), 0, 4000, r, 1.0, 0.1, tau / 2) == (r - 1) / 2


def test_multistage_with_a_constant_drive_reproduces_the_claims():
    rows = {c["id"]: c for c in evaluate_checks("train-multistage-rescale", *_made("train-multistage-rescale", 1.0))}
    for cid in ("off-stage2", "on-stage2", "on-stage3", "on-stage4", "off-stage3", "off-stage4"):
        assert rows[cid]["verdict"] == "reproduced", rows[cid]
    # the drive did not move: the diagnostics predict what the claims do, and cannot tell the two apart
    for cid in ("off-stage2-cause", "on-stage2-cause", "on-stage3-cause", "on-stage4-cause"):
        assert rows[cid]["verdict"] == "inconclusive", rows[cid]
        assert "wider than the effect tested" in rows[cid]["note"]
    assert rows["on-stage3-cause"]["predicted"] == pytest.approx(rows["on-stage3"]["predicted"], rel=1e-3)


def test_multistage_with_a_falling_drive_is_a_finding():
    """The drive halves at each decay: the rescaled AU starts at √½ of the theory, the standard run's |w|⁴ has 2k
    to fall; the claims are contradicted and their diagnostics, from the measured drive, reproduced."""
    rows = {c["id"]: c for c in evaluate_checks("train-multistage-rescale", *_made("train-multistage-rescale", 0.5))}
    for cid in ("on-stage2", "on-stage3", "on-stage4", "off-stage2"):
        assert rows[cid]["verdict"] == "finding", rows[cid]
        assert rows[cid]["note"].startswith("finding: the drive h̃") and f"shown by {cid}-cause reproduced" in rows[cid]["note"]
        assert rows[f"{cid}-cause"]["verdict"] == "reproduced", rows[f"{cid}-cause"]
    assert rows["on-stage3"]["measured"] / rows["on-stage3"]["predicted"] == pytest.approx(math.sqrt(0.5), rel=0.05)
    p = expand_study(preset_study("train-multistage-rescale", "quick"))[0].spec.params
    tau = relaxation_time(p.phases()[1].lr, p.weight_decay, p.momentum)
    assert rows["off-stage2-cause"]["predicted"] == pytest.approx(tau * band_entry(20.0), rel=0.02)
    assert rows["off-stage3"]["verdict"] == rows["off-stage4"]["verdict"] == "reproduced"


def test_pseudo_overfitting_checks_on_documents_made_here():
    """SGD: the drive is the recorded L; a falling drive makes off-settle and on-first-record findings."""
    rows = {c["id"]: c for c in evaluate_checks("train-pseudo-overfitting", *_made("train-pseudo-overfitting", 0.5))}
    for cid in ("off-settle", "on-first-record"):
        assert rows[cid]["verdict"] == "finding", rows[cid]
        assert rows[cid]["note"].startswith("finding: the unit-gradient norm² L")
        assert rows[f"{cid}-cause"]["verdict"] == "reproduced"
    rows = {c["id"]: c for c in evaluate_checks("train-pseudo-overfitting", *_made("train-pseudo-overfitting", 1.0))}
    assert rows["off-settle"]["verdict"] == rows["on-first-record"]["verdict"] == "reproduced"


def test_pseudo_overfitting_test_metrics_skip_the_decay_record():
    """The test accuracy of the record at the decay step is the state before the new rate's first update (with the
    rescale: before the batch-norm running statistics adapt), so the window of a state metric starts after it."""
    p = expand_study(preset_study("train-pseudo-overfitting", "quick", seeds=[0, 1]))[0].spec.params
    start, n = exploratory.rise_window(p)
    assert exploratory.window_of(p, "train_loss") == (start, start + n)
    assert exploratory.window_of(p, "test_acc") == (start + 1, start + n + 1)
