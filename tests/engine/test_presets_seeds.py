"""The seeds a preset accepts: as many as its checks can use (``Preset.min_seeds``/``max_seeds``), distinct, refused
by :func:`preset_study` before anything runs; one seed where every check has an error within one run; and the checks
of normalized-linear-time-scaling, which pool the trials of every seed of a point (synthetic documents)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from smdengine import PRESETS, ChildRecord, evaluate_checks, expand_study, preset_study
from smdengine.presets import check_seeds
from smdengine.presets import sde as sde_presets
from smdengine.presets._checks import Study

ONE_SEED = ("nrq-equilibrium-tradeoff", "nrq-momentum-risk", "normalized-linear-time-scaling")


def test_every_preset_declares_the_seeds_its_checks_can_use():
    """One seed where every check has a Monte-Carlo error within one run (tail batch means, the trials of one
    run); at least two where some check's standard error is over seeds. The catalog's own seeds pass."""
    assert len(PRESETS) == 21
    for pid, preset in PRESETS.items():
        assert (preset.min_seeds, preset.max_seeds) == (1 if pid in ONE_SEED else 2, None), pid
        for size, study in preset.sizes.items():
            assert len(study["seeds"]) >= preset.min_seeds, (pid, size)
            assert preset_study(pid, size)["seeds"] == study["seeds"]


@pytest.mark.parametrize("pid, seeds, message", [
    ("toy2d-chaos", [0], "seeds: expected at least 2 seeds for preset toy2d-chaos (its checks' standard errors "
                         "are over seeds), got 1"),
    ("train-architectures", [3], "seeds: expected at least 2 seeds for preset train-architectures"),
    ("nrq-equilibrium-tradeoff", [], "seeds: expected at least 1 seeds for preset nrq-equilibrium-tradeoff, got 0"),
    ("normalized-linear-time-scaling", [101, 102, 101, 103, 102],
     "seeds: expected distinct seeds, got 101, 102 more than once"),
    ("nrq-scale-equivalence", [0, -1], "seeds: expected integers in [0, 2^63 − 1], got -1"),
])
def test_seeds_its_checks_cannot_use_are_refused(pid, seeds, message):
    with pytest.raises(ValueError) as info:
        preset_study(pid, "quick", seeds=seeds, overrides={"params.bogus": 1})   # before the overrides are read
    assert str(info.value).startswith(message), str(info.value)


def test_seeds_within_the_rule_are_taken():
    assert preset_study("normalized-linear-time-scaling", seeds=list(range(101, 109)))["seeds"] == list(range(101, 109))
    assert preset_study("nrq-momentum-risk", seeds=[7])["seeds"] == [7]
    assert preset_study("toy2d-chaos", seeds=[4, 2])["seeds"] == [4, 2]
    capped = replace(PRESETS["toy2d-chaos"], max_seeds=3)
    check_seeds(capped, [0, 1, 2])
    with pytest.raises(ValueError, match=r"^seeds: expected 2 to 3 seeds for preset toy2d-chaos, got 4$"):
        check_seeds(capped, [0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"^seeds: expected exactly 1 seeds for preset toy2d-chaos, got 2$"):
        check_seeds(replace(capped, min_seeds=1, max_seeds=1), [0, 1])


# ----------------------------------------------------------------------------- normalized-linear-time-scaling

TRIALS = 40


def _scaling_run(seeds: list[int], trials: int = TRIALS, thetas: dict | None = None
                 ) -> tuple[list[ChildRecord], list[dict]]:
    """Children of the quick study at ``trials`` (record_trials the same) and synthetic documents: the theory the
    model predicts (τ, ηt on its records) and, per record, ``trials`` angles of spread growing with τ, independent
    per seed; ``thetas`` ({(point, seed): rows}) gives a child's angles instead."""
    from smdengine.sde.normalized_linear import NormalizedLinear
    study = preset_study("normalized-linear-time-scaling", seeds=seeds,
                         overrides={"params.trials": trials, "params.record_trials": trials})
    records, docs = [], []
    for c in expand_study(study):
        theory = NormalizedLinear.predict(c.spec)
        tau = np.asarray(theory["tau"])
        if thetas is not None:
            rows = thetas[(c.point, c.seed)]
        else:
            rng = np.random.default_rng([c.point, c.seed])
            rows = (rng.standard_normal((len(tau), trials)) * (0.3 + 0.5 * tau[:, None])).tolist()
        records.append(ChildRecord(c.index, c.point, c.values, c.seed, "succeeded", c.spec.model_dump(mode="json")))
        docs.append({"series": {"step": list(range(len(tau))), "theta": rows}, "theory": theory})
    return records, docs


def test_time_scaling_checks_pool_the_trials_of_every_seed():
    """8 seeds (the issue's run: both checks were inconclusive, "expected one run, got 8") give both checks a
    measurement, over 8 × trials independent trials: the same numbers as one run with all of those trials."""
    seeds = list(range(101, 109))
    records, docs = _scaling_run(seeds)
    checks = {c["id"]: c for c in evaluate_checks("normalized-linear-time-scaling", records, docs)}
    for check in checks.values():
        assert check["measured"] is not None and check["tolerance"] is not None, check
        assert "not measurable" not in (check["note"] or ""), check
        assert f"over the {8 * TRIALS} independent trials of its 8 seeds pooled" in check["tolerance_rule"]

    # the same angles as one run per point with 8 × TRIALS trials (the seeds' trials side by side)
    rows = {}
    for r, d in zip(records, docs, strict=True):
        pooled = rows.setdefault((r.point, 0), [[] for _ in d["series"]["theta"]])
        for row, more in zip(pooled, d["series"]["theta"], strict=True):
            row.extend(more)
    one = evaluate_checks("normalized-linear-time-scaling", *_scaling_run([0], 8 * TRIALS, rows))
    for a, b in zip(checks.values(), one, strict=True):
        assert (a["measured"], a["tolerance"], a["predicted"]) == pytest.approx(
            (b["measured"], b["tolerance"], b["predicted"]), rel=1e-9, abs=1e-12)
        assert a["verdict"] == b["verdict"]


def test_the_pooled_standard_error_shrinks_as_the_root_of_the_seeds():
    tau_c = None
    errors = {}
    for n in (1, 4):
        records, docs = _scaling_run(list(range(n)))
        s = Study(records, docs)
        other, small, tau_c, _ = sde_presets._reference(s)
        stat = sde_presets._cv_at(s, small, "tau", tau_c)
        assert stat.how.startswith(f"over the {n * TRIALS} independent trials")
        errors[n] = stat.se
    assert errors[1] / errors[4] == pytest.approx(math.sqrt(4), rel=0.25)


def test_a_child_recording_fewer_trials_is_not_measurable():
    records, docs = _scaling_run([0, 1])
    assert records[-1].point == 2 and records[-1].seed == 1   # η 1e−4, read by both checks
    docs[-1]["series"]["theta"] = [row[:-1] for row in docs[-1]["series"]["theta"]]
    checks = evaluate_checks("normalized-linear-time-scaling", records, docs)
    assert all(c["verdict"] == "inconclusive" and "record_trials must equal trials" in c["note"] for c in checks)


@pytest.mark.parametrize("pid", ["nrq-equilibrium-tradeoff", "nrq-momentum-risk"])
def test_one_seed_measures_every_check_of_a_tail_mean_preset(pid):
    """min_seeds 1 holds: with one seed each tail mean's error comes from batch means of its tail records."""
    from tests.presetruns import run_children
    tiny = {"params.steps": 1500, "params.trials": 32, "params.record_every": 50}
    checks = evaluate_checks(pid, *run_children(expand_study(preset_study(pid, seeds=[0], overrides=tiny))))
    for check in checks:
        assert check["measured"] is not None and check["tolerance"] is not None, check
        assert "blocks of the one seed's tail records" in check["tolerance_rule"], check
