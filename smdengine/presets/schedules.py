"""Presets on the ``train`` kind over LR/WD schedules: the equilibrium depends on the intrinsic LR λ_e = ηλ only,
not on the way there (seed 001 Figs 1, 3a, 4, 11; Table 1). Tier 2 of docs/presets.md.

The helpers, sizes and the model-error band are those of :mod:`smdengine.presets.train` (its module note: on
digits an equilibrium level is checked against max(the Monte-Carlo tolerance, the catalog's 10%), a time
against the Monte-Carlo error and the record spacing). Every predicted number is computed from the specs of the
children compared, by the formulas of docs/theory.md (:func:`smdengine._science.au_equilibrium`,
:func:`norm4_decay`, :func:`relaxation_time`, :func:`band_entry`, and the equilibrium |w|⁴ =
ηL/(λ(1−α)(2−λη/(1+α))) with the same unit-gradient norm L in the runs compared). The runs of a preset differ
only in their schedule, so the same seed gives the same initialisation and batch order: ratios and
differences are taken per seed pair and the seed pairs are the Monte-Carlo replicates.

Windows. A level is measured as the mean (au_rms: the RMS) of the records that lie wholly inside a window
of steps [lo, hi); which window is computed from the schedule (the end of a relaxation), and each check's
note gives the relaxation left at the window's start, |k − 1|·e^{−x} of |w|⁴ (x: the window's start
after the change, in units of τ = 1/(4λη)).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from smdengine.presets._checks import Missing, Outcome, Stat, Study, over_seeds
from smdengine.presets.train import (
    BASE,
    PAPER,
    PAPER_SEEDS,
    QUICK,
    QUICK_SEEDS,
    banded,
    layer_series,
    per_seed_ratio,
    settle_check,
    study,
    summary_values,
    worst_layer,
)

# ----------------------------------------------------------------------------- shared


def norm4(phase: Any, momentum: float = 0.0) -> float:
    """The equilibrium |w|⁴ of a phase per unit of L: η/(λ(1−α)(2−λη/(1+α))) (seed 003 Thm 1/2; docs/theory.md)."""
    lr, wd = phase.lr, phase.weight_decay
    return lr / (wd * (1.0 - momentum) * (2.0 - wd * lr / (1.0 + momentum)))


def phase_end(p: Any, i: int) -> int:
    phases = p.phases()
    return phases[i + 1].start if i + 1 < len(phases) else p.total_steps


def relaxation_left(p: Any, i: int, lo: int) -> str:
    """A note: how far |w|⁴ is predicted to be from the equilibrium of phase i at step ``lo``, |k−1|·e^{−x}."""
    from smdengine._science import norm4_decay, relaxation_time
    phases = p.phases()
    phase = phases[i]
    k = norm4_decay(phases[i - 1], phase) if i > 0 else math.nan
    x = (lo - phase.start) / relaxation_time(phase.lr, phase.weight_decay, p.momentum)
    return f"k {k:.4g}, window start {x:.3g} τ after the change: relaxation left in |w|⁴ {abs(k - 1) * math.exp(-x):.2g}"


def same_seeds(s: Study, point: int, ref: int) -> None:
    if s.seeds(point) != s.seeds(ref):
        raise Missing(f"points {point} and {ref} have different seeds ({s.seeds(point)} vs {s.seeds(ref)})")


def window_index(steps: Sequence[float], lo: float, hi: float, every: int) -> list[int]:
    """The records wholly inside [lo, hi) (a record covers the updates [n, n + record_every))."""
    return [j for j, n in enumerate(steps) if lo <= n and n + every <= hi]


def window_layers(s: Study, point: int, metric: str, lo: float, hi: float) -> dict[str, list[float]]:
    """{layer: per seed, the mean of ``metric`` over the records in [lo, hi) (au_rms: their RMS)}."""
    p = s.params(point)
    steps, series = layer_series(s, point, metric)
    idx = window_index(steps, lo, hi, p.record_every)
    if not idx:
        raise Missing(f"point {point}: no record in the steps [{lo:g}, {hi:g})")
    out: dict[str, list[float]] = {}
    for layer, per_seed in series.items():
        if metric == "au_rms":
            out[layer] = [math.sqrt(math.fsum(v[j] ** 2 for j in idx) / len(idx)) for v in per_seed]
        else:
            out[layer] = [math.fsum(v[j] for j in idx) / len(idx) for v in per_seed]
    return out


def window_global(s: Study, point: int, key: str, lo: float, hi: float) -> list[float]:
    """Per seed, the mean of a global series over the records in [lo, hi) (NaN records skipped: test_acc is
    recorded every eval_every)."""
    p = s.params(point)
    steps, per_seed = s.series(point, key)
    idx = window_index(steps, lo, hi, p.record_every)
    out = []
    for values in per_seed:
        kept = [values[j] for j in idx if math.isfinite(values[j])]
        if not kept:
            raise Missing(f"point {point}: no {key} record in the steps [{lo:g}, {hi:g})")
        out.append(math.fsum(kept) / len(kept))
    return out


def window_ratio(s: Study, point: int, ref: int, metric: str, lo: float, hi: float, power: float,
                 predicted: float, effect: float | None, effect_what: str, note: str = "") -> Outcome:
    """Every layer's window mean of ``metric``^power, point / ref per seed pair, against ``predicted`` (the
    worst layer; :func:`banded`)."""
    same_seeds(s, point, ref)
    top, bottom = window_layers(s, point, metric, lo, hi), window_layers(s, ref, metric, lo, hi)
    stats = {g: over_seeds(per_seed_ratio([v**power for v in top[g]], [v**power for v in bottom[g]]), "seed pairs")
             for g in top}
    _, stat, layers = worst_layer(stats, predicted)
    tol, rule = banded(stat, predicted)
    return Outcome(predicted, stat.mean, tol, rule + f"; per seed pair the ratio of the means over the steps "
                   f"[{lo:g}, {hi:g})", effect, effect_what, note="; ".join(n for n in (layers, note) if n))


def paired_difference(top: list[float], bottom: list[float]) -> Stat:
    if len(top) != len(bottom):
        raise Missing(f"unpaired seeds: {len(top)} vs {len(bottom)} values")
    return over_seeds([a - b for a, b in zip(top, bottom, strict=True)], "seed pairs")


def final_test_acc(s: Study, point: int, ref: int, what: str) -> Outcome:
    """test_acc_final(point) − test_acc_final(ref) per seed pair, against 0."""
    same_seeds(s, point, ref)
    a, b = summary_values(s, point, "test_acc_final"), summary_values(s, ref, "test_acc_final")
    if any(v is None for v in a + b):
        raise Missing("a child has no test_acc_final")
    stat = paired_difference([float(v) for v in a if v is not None], [float(v) for v in b if v is not None])
    return Outcome(0.0, stat.mean, stat.tolerance, stat.rule() + f"; of the per-seed difference {what}",
                   note=f"final test accuracy per seed: {[round(float(v), 4) for v in a if v is not None]} vs "
                        f"{[round(float(v), 4) for v in b if v is not None]}")


def _panels(*rows: tuple[str, str, bool]):
    from smdengine.presets import PanelDef
    return tuple(PanelDef(title, metric, log_y=log_y) for title, metric, log_y in rows)


LEVEL_PANELS = (("Angular update (rms), mean of layers", "au_rms", True), ("Weight norm |w|, mean of layers", "norm", True),
                ("Effective LR η/|w|², mean of layers", "eff_lr", True), ("Train accuracy", "train_acc", False),
                ("Test accuracy", "test_acc", False))


# ----------------------------------------------------------------------------- train-schedules-same-equilibrium

ETA0, LAMBDA0 = 0.4, 1e-2
# seed 001 Table 1 (one row per schedule): the lr factor at step 0, then the (lr, wd) factors at the 5 period
# starts; the seed's epochs 100…500 are 1…5 periods here, its epoch 1000 8 periods
TABLE1: dict[str, tuple[float, tuple[tuple[float, float], ...]]] = {
    "S1": (1.0, ((1 / 4, 1.0), (4.0, 1.0), (1 / 4, 1.0), (2.0, 1.0), (2.0, 1.0))),
    "S2": (1.0, ((1.0, 1.0),) * 5),
    "S3": (1.0, ((4.0, 1.0), (1 / 2, 1.0), (1 / 2, 1.0), (1 / 4, 1.0), (4.0, 1.0))),
    "S4": (1.0, ((1.0, 4.0), (1.0, 1 / 2), (1.0, 1 / 2), (1.0, 1 / 4), (1.0, 4.0))),
    "S5": (32.0, ((1 / 2, 1.0),) * 5),
}
REFERENCE = "S2"            # the constant schedule: every other is compared with it
# updates between factors (paper: the catalog's 1000 ≈ 4/λ₀_e = 16 relaxation times; quick: 500, 8 of them, which
# halves the run): equal (η, λ) from 5 periods on, the final change at 8, the end at 9
PERIOD_QUICK, PERIOD_PAPER = 500, 1000
FINAL = (0.1, 0.0)          # after 8 periods: lr × 0.1, weight_decay_factor 0 (the seed's "LR/10, WD = 0")


def _table1_schedule(period: int) -> list[dict[str, Any]]:
    return ([{"step": period * (i + 1), "lr_factor": 1.0, "weight_decay_factor": 1.0} for i in range(5)]
            + [{"step": 8 * period, "lr_factor": FINAL[0], "weight_decay_factor": FINAL[1]}])


def _table1_points() -> list[dict[str, Any]]:
    points = []
    for name, (at0, factors) in TABLE1.items():
        point: dict[str, Any] = {"name": name}
        if at0 != 1.0:
            point["params.lr"] = ETA0 * at0
        for i, (lr_f, wd_f) in enumerate(factors):
            if lr_f != 1.0:
                point[f"params.schedule.{i}.lr_factor"] = lr_f
            if wd_f != 1.0:
                point[f"params.schedule.{i}.weight_decay_factor"] = wd_f
        points.append(point)
    return points


def equal_window(p: Any) -> tuple[int, int, int]:
    """(the phase index with equal (η, λ), the window's first and end step): from one schedule period after
    the last factor to the final change (the seed's epochs 600–1000 of 500–1000)."""
    phases = p.phases()
    i = len(phases) - 2
    period = phases[i].start - phases[i - 1].start
    return i, phases[i].start + period, phases[i + 1].start


def _s1_level(s: Study, point: int, ref: int, metric: str) -> Outcome:
    from smdengine._science import au_equilibrium, norm4_decay
    a, b = s.params(point), s.params(ref)
    i, lo, hi = equal_window(a)
    if equal_window(b) != (i, lo, hi):
        raise Missing(f"points {point} and {ref} have different schedules' timing")
    pa, pb = a.phases()[i], b.phases()[i]
    norm_ratio = (norm4(pa, a.momentum) / norm4(pb, b.momentum)) ** 0.25       # |w| at the same L
    k = norm4_decay(a.phases()[i - 1], pa)
    if metric == "au_rms":
        predicted = au_equilibrium(pa.lr, pa.weight_decay, a.momentum) / au_equilibrium(pb.lr, pb.weight_decay,
                                                                                         b.momentum)
        effect, what = abs(k ** -0.5 - 1.0), "how far the AU starts the equal phase from its equilibrium, |k^(−½) − 1|"
    elif metric == "eff_lr":
        predicted = (pa.lr / pb.lr) / norm_ratio**2
        effect, what = abs(k ** -0.5 - 1.0), "how far η/|w|² starts the equal phase from its equilibrium, |k^(−½) − 1|"
    else:
        predicted = norm_ratio
        effect, what = abs(k ** 0.25 - 1.0), "how far |w| starts the equal phase from its equilibrium, |k^(¼) − 1|"
    return window_ratio(s, point, ref, metric, lo, hi, 1.0, predicted, effect, what, relaxation_left(a, i, lo))


def _same_equilibrium(s: Study) -> dict[str, Callable[[], Outcome]]:
    out: dict[str, Callable[[], Outcome]] = {}
    names = list(TABLE1)
    ref = names.index(REFERENCE)
    for j, name in enumerate(names):
        if j == ref:
            continue
        for metric, cid in (("au_rms", "au-rms"), ("norm", "norm"), ("eff_lr", "eff-lr")):
            out[f"{cid}-{name}"] = partial(_s1_level, s, j, ref, metric)
        out[f"final-test-acc-{name}"] = partial(final_test_acc, s, j, ref, f"{name} − {REFERENCE}")
    return out


def _same_equilibrium_preset():
    from smdengine.presets import Preset
    from smdengine.presets.nrq import _checkdefs
    checks = []
    for name in TABLE1:
        if name == REFERENCE:
            continue
        vs = f"schedule {name} vs {REFERENCE}"
        checks += [
            (f"au-rms-{name}", f"Once (η, λ) are equal, {vs}: every layer's angular update is the same, √(2λη) "
                               "(seed 001 Fig. 1, Table 1)."),
            (f"norm-{name}", f"Once (η, λ) are equal, {vs}: every layer's norm |w| is the same, whatever the "
                             "schedule before (seed 001 Fig. 1)."),
            (f"eff-lr-{name}", f"Once (η, λ) are equal, {vs}: every layer's effective LR η/|w|² is the same "
                               "(seed 001 Fig. 1)."),
            (f"final-test-acc-{name}", f"After lr ÷ 10 and WD 0, {vs}: the final test accuracy is the same "
                                       "(seed 001 Fig. 1, 'same best test accuracy')."),
        ]
    points = _table1_points()
    def params(period: int) -> dict[str, Any]:
        return {"lr": ETA0, "weight_decay": LAMBDA0, "steps": 9 * period, "schedule": _table1_schedule(period)}
    q, pp = PERIOD_QUICK, PERIOD_PAPER
    return Preset(
        id="train-schedules-same-equilibrium", title="Digits MLP: five LR/WD schedules, one equilibrium",
        seed="001", figure="Fig. 1 (Table 1; Figs 12–13)",
        description=(
            f"A batch-normalized, fully scale-invariant MLP (depth 2) on digits, plain SGD, B 128, η₀ {ETA0:g}, λ₀ "
            f"{LAMBDA0:g}, under the five schedules of seed 001 Table 1 (S1, S3: LR factors; S4: WD factors; S5: LR "
            "× 32 from the start, then ÷ 2; S2: constant), one factor per period (the seed's 100 epochs; here "
            f"{pp} updates, {pp * 4 * ETA0 * LAMBDA0:g} relaxation times 1/(4λ₀η₀), in paper size). All factors multiply to 1 after 5 periods: "
            "from then on every run has the same (η, λ), and after one more period every layer's angular update, norm "
            "and effective LR agree across schedules (checked from 6 periods to 8, each run against S2); after 8 "
            "periods lr × 0.1 and WD 0 (the seed's fine-tuning at epoch 1000) and the final test accuracies agree. "
            "S5's first period runs at ηλ = 32η₀λ₀, past the continuous-time regime: its run carries that warning. The seed: PreResNet32 on CIFAR-10, λ₀ 5e−4, 1000+ epochs. Quick: width 64, 1 trial × 6 seeds, a period "
            f"of {q} updates ({q * 4 * ETA0 * LAMBDA0:g} relaxation times; {9 * q} steps); paper: width 256, 4 trials × 6 seeds, periods of "
            f"{pp} ({9 * pp} steps)."),
        kinds=("train",), tier=2, exploratory=False, gpu_sizes=("paper",),
        sizes={"quick": study("train-schedules-same-equilibrium (quick)", {**params(q), **QUICK}, QUICK_SEEDS,
                              points=points),
               "paper": study("train-schedules-same-equilibrium (paper)", {**params(pp), **PAPER}, PAPER_SEEDS,
                              points=points)},
        checks=_checkdefs(*checks),
        panels=_panels(*LEVEL_PANELS))


# ----------------------------------------------------------------------------- train-lr-vs-wd-halving

HALVING = {"lr": 1.6, "weight_decay": 5e-3}
HALVINGS = (500, 1000, 2000, 4000)      # the seed's epochs 200, 400, 600, 800, … (λ_e ÷ 2 each)
HALVING_FINAL, HALVING_STEPS = 7000, 8000


def _halving_schedule() -> list[dict[str, Any]]:
    return ([{"step": n, "lr_factor": 1.0, "weight_decay_factor": 1.0} for n in HALVINGS]
            + [{"step": HALVING_FINAL, "lr_factor": 0.1, "weight_decay_factor": 0.0}])


HALVING_POINTS = [{"name": "A (LR halved)", **{f"params.schedule.{i}.lr_factor": 0.5 for i in range(len(HALVINGS))}},
                  {"name": "B (WD halved)",
                   **{f"params.schedule.{i}.weight_decay_factor": 0.5 for i in range(len(HALVINGS))}}]


def halving_window(p: Any, k: int) -> tuple[int, int]:
    """The last half of phase k (after the k-th halving), the end of its relaxation."""
    start, end = p.phases()[k].start, phase_end(p, k)
    return start + (end - start) // 2, end


def _halving_level(s: Study, a: int, b: int, k: int, metric: str) -> Outcome:
    from smdengine._science import au_equilibrium
    pa, pb = s.params(a), s.params(b)
    lo, hi = halving_window(pa, k)
    if halving_window(pb, k) != (lo, hi):
        raise Missing("the two runs' schedules differ in timing")
    fa, fb = pa.phases()[k], pb.phases()[k]
    prev = pa.phases()[k - 1]
    norm_sq = math.sqrt(norm4(fb, pb.momentum) / norm4(fa, pa.momentum))         # |w|²: B / A at the same L
    halving = math.sqrt((prev.lr * prev.weight_decay) / (fa.lr * fa.weight_decay)) - 1.0
    note = f"A: {relaxation_left(pa, k, lo)}; B: {relaxation_left(pb, k, lo)}"
    if metric == "au_rms":
        predicted = au_equilibrium(fb.lr, fb.weight_decay, pb.momentum) / au_equilibrium(fa.lr, fa.weight_decay,
                                                                                         pa.momentum)
        return window_ratio(s, b, a, "au_rms", lo, hi, 1.0, predicted, halving,
                            "the AU ratio of one more halving of λ_e, √2 − 1", note)
    if metric == "eff_lr":
        predicted = (fb.lr / fa.lr) / norm_sq
        return window_ratio(s, b, a, "eff_lr", lo, hi, 1.0, predicted, halving,
                            "the η/|w|² ratio of one more halving of λ_e, √2 − 1", note)
    before = math.sqrt(norm4(pb.phases()[k - 1], pb.momentum) / norm4(prev, pa.momentum))
    return window_ratio(s, b, a, "norm", lo, hi, 2.0, norm_sq, norm_sq - before,
                        "the step of the predicted ratio from the previous halving", note)


def _halving(s: Study) -> dict[str, Callable[[], Outcome]]:
    out: dict[str, Callable[[], Outcome]] = {}
    for k in range(1, len(HALVINGS) + 1):
        out[f"au-rms-{k}"] = partial(_halving_level, s, 0, 1, k, "au_rms")
        out[f"eff-lr-{k}"] = partial(_halving_level, s, 0, 1, k, "eff_lr")
        out[f"norm-sq-{k}"] = partial(_halving_level, s, 0, 1, k, "norm")
    out["final-test-acc"] = partial(final_test_acc, s, 1, 0, "B − A")
    return out


def _halving_preset():
    from smdengine.presets import Preset
    from smdengine.presets.nrq import _checkdefs
    checks = []
    for k, n in enumerate(HALVINGS, start=1):
        after = f"after halving {k} (step {n})"
        checks += [
            (f"au-rms-{k}", f"Halving the LR (A) or the WD (B) gives the same λ_e sequence: {after}, once relaxed, "
                            "every layer's angular update is the same in both runs (seed 001 Fig. 4)."),
            (f"eff-lr-{k}", f"{after[0].upper()}{after[1:]}, once relaxed, every layer's effective LR η/|w|² is the "
                            "same in runs A and B (seed 001 Fig. 4)."),
            (f"norm-sq-{k}", f"{after[0].upper()}{after[1:]}, every layer's |w|² of B over A is 2^{k} "
                             "(|w|⁴ ∝ η/λ at the same ηλ; seed 001 Fig. 4, seed 003 Thm 1)."),
        ]
    checks.append(("final-test-acc", "After lr ÷ 10 and WD 0 at the end, runs A and B reach the same test accuracy "
                                     "(seed 001 Fig. 4)."))
    params = {**HALVING, "steps": HALVING_STEPS, "schedule": _halving_schedule()}
    lr, wd = HALVING["lr"], HALVING["weight_decay"]
    return Preset(
        id="train-lr-vs-wd-halving", title="Digits MLP: halving the LR or the WD, the same intrinsic LR",
        seed="001", figure="Fig. 4",
        description=(
            f"A batch-normalized, fully scale-invariant MLP (depth 2) on digits, plain SGD, B 128, η {lr:g}, λ {wd:g}: "
            f"run A halves the LR, run B the WD, at steps {', '.join(map(str, HALVINGS))} (the seed: PreResNet32 on "
            "CIFAR-10, η 3.2, λ 5e−4, at epochs 200 … 4000), so both follow the same λ_e = ηλ; at step "
            f"{HALVING_FINAL} lr × 0.1 and WD 0. After each halving, once |w| has relaxed (checked over the last half "
            "of each stage, 3 to 4 relaxation times 1/(4λ_e) after it), the angular update and the effective LR "
            "η/|w|² agree between A and B while |w|² of B is 2^k that of A after k halvings (|w|⁴ ∝ η/λ); each "
            "stage is about 8 relaxation times long, as the seed's norm takes longer to settle as λ_e falls. "
            f"Quick: width 64, 1 trial × 6 seeds, {HALVING_STEPS} steps; paper: width 256, 4 trials × 6 seeds."),
        kinds=("train",), tier=2, exploratory=False, gpu_sizes=("paper",),
        sizes={"quick": study("train-lr-vs-wd-halving (quick)", {**params, **QUICK}, QUICK_SEEDS,
                              points=HALVING_POINTS),
               "paper": study("train-lr-vs-wd-halving (paper)", {**params, **PAPER}, PAPER_SEEDS,
                              points=HALVING_POINTS)},
        checks=_checkdefs(*checks),
        panels=_panels(*LEVEL_PANELS))


# ----------------------------------------------------------------------------- train-recovery-time

# label noise 0.3 (as train-au-sgd-vs-sgdm's): with clean labels the net fits the digits and the unit-gradient
# norm L of a record scatters over a decade, so that the AU of a 10-update record leaves the ±10% band every few
# records and no run "settles" (measured while sizing this preset: 0 of 18 runs within 2000 steps)
RECOVERY: dict[str, Any] = {"lr": 0.4, "steps": 5000, "label_noise": 0.3,
                            "schedule": [{"step": 3000, "lr_factor": 0.1, "weight_decay_factor": 10.0}]}
RECOVERY_WD = (5e-3, 1e-2, 2e-2)


def recovery_prediction(p: Any) -> tuple[float, float, float]:
    """(τ·x_b(k): the predicted updates until every layer's AU is back in the ±10% band after the change, k, λ_e).
    k = norm4_decay: the AU (∝ η/|w|) drops by the LR factor at once while the equilibrium AU √(2λη) is kept, so
    it starts k^(−½) = 0.1 of it, k = (η/λ before)/(η/λ after) = 100."""
    from smdengine._science import band_entry, norm4_decay, relaxation_time
    prev, phase = p.phases()[0], p.phases()[1]
    k = norm4_decay(prev, phase)
    return relaxation_time(phase.lr, phase.weight_decay, p.momentum) * band_entry(k), k, phase.lr * phase.weight_decay


def measured_drop(s: Study, point: int) -> str:
    """A note: per layer, (the AU of the last records before the change / the first after)² (the k the AU shows)."""
    p = s.params(point)
    start = p.phases()[1].start
    before = window_layers(s, point, "au_rms", start - 5 * p.record_every, start)
    after = window_layers(s, point, "au_rms", start, start + p.record_every)
    ks = {g: math.fsum((x / y) ** 2 for x, y in zip(before[g], after[g], strict=True)) / len(before[g]) for g in before}
    return "k from the measured AU drop (5 records before / the first after)², seed mean: " + ", ".join(
        f"{g} {v:.3g}" for g, v in ks.items())


def _recovery_settle(s: Study, point: int) -> Outcome:
    outcome = settle_check(s, point, 1)       # τ·x_b(k) against equilibrium_steps_phase1 (train-multistage-rescale's)
    entry, _, _ = recovery_prediction(s.params(point))
    pre = summary_values(s, point, "equilibrium_steps_phase0")
    note = (f"{outcome.note}; {measured_drop(s, point)}; before the change (equilibrium_steps_phase0 per seed) {pre}")
    return replace(outcome, effect=entry / 2, effect_what="half the predicted time (what a 2× larger λ_e would take "
                   "off)", note=note)


def _recovery_product(s: Study, point: int, ref: int) -> Outcome:
    """(T·λ_e)(point) / (T·λ_e)(ref) per seed pair, T = equilibrium_steps_phase1, against the predicted ratio."""
    same_seeds(s, point, ref)
    pa, pb = s.params(point), s.params(ref)
    ta, _, ea = recovery_prediction(pa)
    tb, _, eb = recovery_prediction(pb)
    predicted = (ta * ea) / (tb * eb)
    measured = {}
    for q in (point, ref):
        values = summary_values(s, q, "equilibrium_steps_phase1")
        if any(v is None or v <= 0 for v in values):
            raise Missing(f"point {q}: some seed's AU does not settle after the change (equilibrium_steps_phase1 "
                          f"{values})")
        measured[q] = [float(v) for v in values if v is not None]
    stat = over_seeds(per_seed_ratio([t * ea for t in measured[point]], [t * eb for t in measured[ref]]),
                      "seed pairs")
    mean_a, mean_b = (math.fsum(measured[q]) / len(measured[q]) for q in (point, ref))
    spacing = abs(stat.mean) * math.hypot(pa.record_every / mean_a, pb.record_every / mean_b)
    tol = math.hypot(stat.tolerance, spacing)
    rule = (f"√(({stat.rule()})² + (the record spacing relative to each time, propagated to the ratio)²) = "
            f"√({stat.tolerance:.3g}² + {spacing:.3g}²)")
    note = f"measured steps per seed: λ_e {ea:g} {measured[point]}, λ_e {eb:g} {measured[ref]}"
    return Outcome(predicted, stat.mean, tol, rule, abs(ea / eb - predicted),
                   "the ratio if the time did not scale with 1/λ_e, λ_e/λ_e,ref, minus the predicted", note=note)


def _recovery(s: Study) -> dict[str, Callable[[], Outcome]]:
    out: dict[str, Callable[[], Outcome]] = {}
    for i in range(len(RECOVERY_WD)):
        out[f"settle-{i}"] = partial(_recovery_settle, s, i)
    for i in range(1, len(RECOVERY_WD)):
        out[f"product-{i}"] = partial(_recovery_product, s, i, 0)
    return out


def _recovery_preset():
    from smdengine.presets import Preset
    from smdengine.presets.nrq import _checkdefs
    from smdengine.train.spec import TrainParams
    checks = []
    change = RECOVERY["schedule"][0]
    for i, wd in enumerate(RECOVERY_WD):
        p = TrainParams.model_validate({**BASE, **QUICK, **RECOVERY, "weight_decay": wd})
        entry, k, lam = recovery_prediction(p)
        checks.append((f"settle-{i}", f"At λ_e {lam:g} (λ {wd:g}), after lr × {change['lr_factor']:g} and WD × "
                                      f"{change['weight_decay_factor']:g} at step {change['step']} every layer's AU "
                                      f"is back in the ±10% band of √(2λη) after τ·x_b({k:g}) = {entry:.0f} updates, "
                                      "τ = 1/(4λ_e) (seed 001 Fig. 11, §6.2)."))
    lam0 = RECOVERY["lr"] * RECOVERY_WD[0]
    for i in range(1, len(RECOVERY_WD)):
        lam = RECOVERY["lr"] * RECOVERY_WD[i]
        checks.append((f"product-{i}", f"The recovery time × λ_e is the same at λ_e {lam:g} as at {lam0:g}: the time "
                                       "to equilibrium scales as 1/(ηλ) (seed 001 Fig. 11)."))
    points = [{"params.weight_decay": wd} for wd in RECOVERY_WD]
    return Preset(
        id="train-recovery-time", title="Digits MLP: time back to equilibrium ∝ 1/λ_e after lr ÷ 10, WD × 10",
        seed="001", figure="Fig. 11 (§6.2, App. F.2)",
        description=(
            "A batch-normalized, fully scale-invariant MLP (depth 2) on digits with 30% label noise (with clean labels the "
            "unit-gradient norm of a record scatters over a decade and the AU never stays in its ±10% band, so no "
            f"time can be measured), plain SGD, B 128, η {RECOVERY['lr']:g}, "
            f"λ ∈ {{{', '.join(f'{w:g}' for w in RECOVERY_WD)}}}: the runs first reach the equilibrium of their λ_e; at "
            f"step {change['step']} the LR is divided by 10 and the WD multiplied by 10, so λ_e is kept but the AU "
            "and the effective LR drop to a tenth (|w| has not moved). They return to the same equilibrium after "
            "τ·x_b(100) = ln(99/((1−0.1)^−2 − 1))/(4λ_e) updates (the ±10% band entry of |w|⁴ relaxing 100× down, "
            "docs/theory.md): the recovery time × λ_e is constant. The seed: VGG16 on CIFAR-10, λ_e not stated. Quick: "
            f"width 64, 1 trial × 6 seeds, {RECOVERY['steps']} steps, a record every {BASE['record_every']} updates "
            "(the time's resolution); paper: width 256, 4 trials × 6 seeds."),
        kinds=("train",), tier=2, exploratory=False, gpu_sizes=("paper",),
        sizes={"quick": study("train-recovery-time (quick)", {**RECOVERY, **QUICK}, QUICK_SEEDS, points=points),
               "paper": study("train-recovery-time (paper)", {**RECOVERY, **PAPER}, PAPER_SEEDS, points=points)},
        checks=_checkdefs(*checks),
        panels=_panels(("Angular update (rms), mean of layers", "au_rms", True),
                       ("Weight norm |w|, mean of layers", "norm", True),
                       ("Effective LR η/|w|², mean of layers", "eff_lr", True),
                       ("Unit-gradient norm² L, mean of layers", "unit_grad_sq", True)))


# ----------------------------------------------------------------------------- train-three-schedules

THREE: dict[str, Any] = {"depth": 3, "width": 64, "lr": 0.1, "weight_decay": 0.1, "epochs": 200, "record_every": 10,
         "eval_every": 10, "schedule": [{"epoch": 40, "lr_factor": 1.0, "weight_decay_factor": 1.0},
                                        {"epoch": 80, "lr_factor": 1.0, "weight_decay_factor": 1.0},
                                        {"epoch": 120, "lr_factor": 0.1, "weight_decay_factor": 0.0}]}
THREE_POINTS = [{"name": "Const"},
                {"name": "LR-decay", "params.lr": 4 * THREE["lr"], "params.schedule.0.lr_factor": 0.5,
                 "params.schedule.1.lr_factor": 0.5},
                {"name": "WD-decay", "params.weight_decay": 4 * THREE["weight_decay"],
                 "params.schedule.0.weight_decay_factor": 0.5, "params.schedule.1.weight_decay_factor": 0.5}]
THREE_QUICK, THREE_PAPER = {"trials": 4}, {"trials": 32}


def settled_start(p: Any, i: int, *others: Any) -> int:
    """The first record step of phase i at which the AU of every run (``p`` and ``others``, same phase starts) is
    predicted back in its ±10% band, τ·x_b(k) after the change (k = norm4_decay; the phase start without WD)."""
    from smdengine._science import band_entry, norm4_decay, relaxation_time
    start = p.phases()[i].start
    wait = 0.0
    for q in (p, *others):
        prev, phase = q.phases()[i - 1], q.phases()[i]
        if phase.weight_decay > 0 and prev.weight_decay > 0:
            wait = max(wait, relaxation_time(phase.lr, phase.weight_decay, q.momentum) * band_entry(norm4_decay(prev, phase)))
    return start + math.ceil(wait / p.record_every) * p.record_every


def _three_error(s: Study, point: int, ref: int, key: str, phase: int) -> Outcome:
    """Per seed pair, the difference of the trial-mean error 1 − ``key`` over phase ``phase`` (the equal-λ_e
    phase, epochs 81–120 from the predicted band entry on, or the fine-tuning, 121–200), against 0; the effect is the same difference over the
    last half of the phase before (epochs 61–80), when the λ_e differ."""
    same_seeds(s, point, ref)
    pa, pb = s.params(point), s.params(ref)
    fa, fb = pa.phases()[phase], pb.phases()[phase]
    if not (math.isclose(fa.lr, fb.lr) and math.isclose(fa.weight_decay, fb.weight_decay)):
        raise Missing(f"phase {phase} of points {point} and {ref} has different (η, λ)")
    lo, hi = settled_start(pa, phase, pb), phase_end(pa, phase)

    def gap(lo: float, hi: float) -> Stat:
        return paired_difference([1.0 - v for v in window_global(s, point, key, lo, hi)],
                                 [1.0 - v for v in window_global(s, ref, key, lo, hi)])
    stat = gap(lo, hi)
    e, equal = pa.phases()[1], pa.phases()[2]
    before = gap(e.start + (equal.start - e.start) // 2, equal.start)
    spe = pa.steps_per_epoch
    note = (f"λ_e over the steps [{e.start}, {equal.start}): {e.lr * e.weight_decay:g} vs "
            f"{pb.phases()[1].lr * pb.phases()[1].weight_decay:g}; the gap over its last half {before.mean:.3g} ± "
            f"{before.tolerance:.3g}")
    return Outcome(0.0, stat.mean, stat.tolerance,
                   stat.rule() + f"; of the per-seed difference of the mean error over the steps [{lo}, {hi}) (epochs "
                   f"{fa.start // spe + 1}–{hi // spe}, from the slower run's predicted band entry on)",
                   abs(before.mean), "the gap between the same runs over the last half of the phase before, when "
                   "their λ_e differ 2×", note=note)


def _three(s: Study) -> dict[str, Callable[[], Outcome]]:
    out: dict[str, Callable[[], Outcome]] = {}
    for j, name in ((1, "lr-decay"), (2, "wd-decay")):
        for key, what in (("train_acc", "train"), ("test_acc", "test")):
            out[f"{what}-error-{name}-equal"] = partial(_three_error, s, j, 0, key, 2)
            out[f"{what}-error-{name}-finetune"] = partial(_three_error, s, j, 0, key, 3)
    return out


def _three_preset():
    from smdengine.presets import Preset
    from smdengine.presets.nrq import _checkdefs
    checks = []
    for name, label in (("lr-decay", "LR-decay"), ("wd-decay", "WD-decay")):
        for what in ("train", "test"):
            checks += [
                (f"{what}-error-{name}-equal", f"With the same λ_e from epoch 81, {label} and Const have the same "
                                               f"trial-mean {what} error through epoch 120, once the AU is back in "
                                               "its band, τ·x_b(k) after the change (seed 001 Fig. 3a)."),
                (f"{what}-error-{name}-finetune", f"After η 0.01, λ 0 at epoch 121, {label} and Const have the same "
                                                  f"trial-mean {what} error over epochs 121–200, the strong form "
                                                  "(seed 001 Fig. 3a)."),
            ]
    return Preset(
        id="train-three-schedules", title="Digits MLP: Const, LR-decay and WD-decay meet at the same λ_e",
        seed="001", figure="Fig. 3a",
        description=(
            "A batch-normalized, fully scale-invariant MLP (depth 3, width 64) on digits, plain SGD, B 128 (10 steps "
            "per epoch), 200 epochs, three schedules of seed 001 Fig. 3a: Const (η 0.1, λ 0.1); LR-decay (η 0.4, "
            "÷ 2 at epochs 41 and 81); WD-decay (λ 0.4, ÷ 2 at epochs 41 and 81); from epoch 121 lr × 0.1 and WD 0 "
            "(η 0.01, λ 0 for all). From epoch 81 all three have λ_e 0.01 and their trial-mean train and test "
            "errors agree (and keep agreeing through the fine-tuning, the strong form), while over epochs 41–80 "
            "(λ_e 0.02 vs 0.01) they may differ: that gap is each check's effect. The seed: a 4-layer CNN on MNIST, "
            "500 trials. Quick: 4 trials × 6 seeds; paper: 32 trials (the catalog's) × 6 seeds; the seeds are "
            "the Monte-Carlo replicates of a trial mean, the error of a seed pair's difference."),
        kinds=("train",), tier=2, exploratory=False, gpu_sizes=("paper",),
        sizes={"quick": study("train-three-schedules (quick)", {**THREE, **THREE_QUICK}, QUICK_SEEDS,
                              points=THREE_POINTS),
               "paper": study("train-three-schedules (paper)", {**THREE, **THREE_PAPER}, PAPER_SEEDS,
                              points=THREE_POINTS)},
        checks=_checkdefs(*checks),
        panels=_panels(("Train accuracy", "train_acc", False), ("Test accuracy", "test_acc", False),
                       ("Angular update (rms), mean of layers", "au_rms", True),
                       ("Effective LR η/|w|², mean of layers", "eff_lr", True)))


PRESETS: list[tuple[Any, Callable[[Study], dict[str, Callable[[], Outcome]]]]] = [
    (_same_equilibrium_preset(), _same_equilibrium),
    (_halving_preset(), _halving),
    (_recovery_preset(), _recovery),
    (_three_preset(), _three),
]
