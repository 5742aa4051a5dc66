"""Presets on the ``train`` kind: the angular update of every scale-invariant weight across architectures and
normalizations (seed 003 App. C.4 Fig. 9, seed 004 App. G Fig. 8). Tier 2 of docs/presets.md.

The seed shows MobileNet-V2 and ShuffleNet-V2+ on ImageNet: every scale-invariant weight's AU sits on
√(2λη/(1+α)). Here the same claim is checked on digits for the ``train`` kind's three models (mlp, cnn,
resnet) × its four normalizations (batch, group, layer, weight standardization): one point per pair, every
layer of every point against the prediction computed from that point's spec (:func:`train.final_au`), with
train.py's tolerance rule (:func:`train.banded`: the Monte-Carlo error over seeds, or the catalog's 10% band
where that is wider; the note says which applied).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

from smdengine.presets._checks import Missing, Outcome, Study, over_seeds
from smdengine.presets.train import final_au, layer_series, layer_tails, level_check, study

ARCH = {"lr": 0.5, "weight_decay": 2e-3, "momentum": 0.9}
MODELS = ("mlp", "cnn", "resnet")
NORMS = ("batch", "group", "layer", "weight_standardization")
DEPTHS = {"mlp": 2, "cnn": 3, "resnet": 8}
MAX_GROUPS = 8

# paper: the catalog's widths (mlp 256 = train.py's PAPER MLP, cnn and resnet 16), 4 trials, 6 seeds, 3000 steps.
# quick: measured here (1 thread, alone): mlp w64 1–5 ms/update, cnn w16 5 ms, w8 3 ms, resnet w16 14 ms, w8 8 ms;
# the 2 cores are shared, so quick halves the conv nets' width and keeps 1 trial × 6 seeds and 1000 steps
# (40 relaxation times τ = (1−α)/(4λη) = 25 updates; the mlp's and cnn's AU settle within the first 300). Measured
# at quick size with 3 seeds (3 min here, shared): the resnet's AU is erratic (records swing 0.007–0.05, one seed
# of the weight-standardized resnet collapsed its norm and blew up), so 3 seeds (t = 19) gave tolerances wider
# than the effect; 6 seeds (t = 6) keep the grid whole in about 6 minutes.
PAPER_WIDTHS = {"mlp": 256, "cnn": 16, "resnet": 16}
QUICK_WIDTHS = {"mlp": 64, "cnn": 8, "resnet": 8}
PAPER_RUN = {"trials": 4, "steps": 3000}
QUICK_RUN = {"trials": 1, "steps": 1000}
PAPER_SEEDS = list(range(6))
QUICK_SEEDS = list(range(6))


def norm_groups(model: str, width: int) -> int:
    """Group norm's groups for a model of this width: half the greatest common divisor of its normalized
    widths (groups of at least 2 channels or features), at most 8 — a divisor of every width, as the spec
    requires."""
    from types import SimpleNamespace

    from smdengine.train.shapes import widths
    g = math.gcd(*widths(SimpleNamespace(model=model, depth=DEPTHS[model], width=width)))
    return max(1, min(MAX_GROUPS, g // 2))


def points(widths: dict[str, int]) -> list[dict[str, Any]]:
    """One point per (model, norm), model-major."""
    out = []
    for model in MODELS:
        for norm in NORMS:
            point: dict[str, Any] = {"params.model": model, "params.depth": DEPTHS[model],
                                     "params.width": widths[model], "params.norm": norm}
            if norm == "group":
                point["params.norm_groups"] = norm_groups(model, widths[model])
            out.append(point)
    return out


def check_id(model: str, norm: str) -> str:
    return f"au-rms-{model}-{norm.replace('_', '-')}"


def _au(s: Study, point: int, diagnostic: str | None = None) -> Outcome:
    from smdengine._science import au_equilibrium
    p = s.params(point)
    predicted = final_au(p)
    sgd = au_equilibrium(p.phases()[-1].lr, p.phases()[-1].weight_decay)
    out = level_check(s, point, "au_rms", predicted, sgd - predicted,
                      "the gap to the momentum-free √(2λη) (the theory without α)")
    # per seed, the layer furthest from the theory: an erratic seed (AU far off, or a norm that blew up) shows here
    tails = layer_tails(s, point, "au_rms")
    seeds = s.seeds(point)
    worst = [max((v[i] for v in tails.values()), key=lambda x: abs(x / predicted - 1.0)) for i in range(len(seeds))]
    peak = {i: max(max(v) for v in series.values()) for i, series in enumerate(_norm_peaks(s, point))}
    out.note = ((out.note + "; ") if out.note else "") + "per seed (its worst layer's AU, its largest |w| record): " + \
        ", ".join(f"{seed} {w:.4g} {peak[i]:.3g}" for i, (seed, w) in enumerate(zip(seeds, worst, strict=True)))
    if diagnostic is not None:
        out.diagnostics = (diagnostic,)   # resolve_findings lists its verdict in the note when this is not reproduced
    return out


def _norm_peaks(s: Study, point: int) -> list[dict[str, list[float]]]:
    """Per seed, {layer: its |w| records} (NaN records dropped)."""
    _, series = layer_series(s, point, "norm")
    n = len(next(iter(series.values())))
    return [{g: [x for x in per_seed[i] if math.isfinite(x)] or [math.nan] for g, per_seed in series.items()}
            for i in range(n)]


def record_scatter(s: Study, point: int) -> list[float]:
    """Per seed, the largest over the layers of the RMS relative deviation of its tail AU records from
    √(2λη/(1+α)): √(mean over the tail records of (record/theory − 1)²). A stationary AU scatters by a few per
    cent here (one trial, records of 50 updates); an erratic one by tens of per cent or more."""
    p = s.params(point)
    theory, tail = final_au(p), p.tail_start()
    steps, series = layer_series(s, point, "au_rms")
    seeds = len(next(iter(series.values())))
    out = []
    for k in range(seeds):
        worst = 0.0
        for per_seed in series.values():
            xs = [v / theory - 1.0 for n, v in zip(steps, per_seed[k], strict=True) if n >= tail and math.isfinite(v)]
            if not xs:
                raise Missing(f"point {point}: no finite au_rms record in the tail")
            worst = max(worst, math.sqrt(math.fsum(x * x for x in xs) / len(xs)))
        out.append(worst)
    return out


def _erratic(s: Study, point: int, reference: int) -> Outcome:
    """Diagnostic of the resnet's check: per seed, ln(the resnet's record scatter / the cnn's, same norm and seed)
    (:func:`record_scatter`), one-sided above 0 (a log: the scatters differ by factors, and a ratio of two
    positive numbers is lopsided)."""
    resnet, cnn = record_scatter(s, point), record_scatter(s, reference)
    logs = [math.log(a / b) for a, b in zip(resnet, cnn, strict=True)]
    stat = over_seeds(logs, "seed pairs")
    return Outcome(0.0, stat.mean, stat.tolerance,
                   f"{stat.rule()}; per seed, ln(resnet / cnn) of the RMS relative deviation of the worst layer's tail "
                   "AU records from the theory; reproduced when above 0 by more than the tolerance, inconclusive "
                   "when above it within it", sense="above",
                   note="record scatter per seed, resnet " + ", ".join(f"{v:.3f}" for v in resnet)
                        + "; cnn " + ", ".join(f"{v:.3f}" for v in cnn))


def erratic_id(norm: str) -> str:
    return f"erratic-resnet-{norm.replace('_', '-')}"


def _arch(s: Study) -> dict[str, Callable[[], Outcome]]:
    """One check per point, in the grid's order (a missing point's check is inconclusive), and for each resnet
    point its diagnostic (:func:`_erratic`, against the cnn with the same norm)."""
    pairs = [(m, n) for m in MODELS for n in NORMS]
    out: dict[str, Callable[[], Outcome]] = {}
    for point, (m, n) in enumerate(pairs):
        out[check_id(m, n)] = partial(_au, s, point, erratic_id(n) if m == "resnet" else None)
    for n in NORMS:
        out[erratic_id(n)] = partial(_erratic, s, pairs.index(("resnet", n)), pairs.index(("cnn", n)))
    return out


def _arch_preset():
    from smdengine._science import au_equilibrium, relaxation_time
    from smdengine.presets import PanelDef, Preset
    from smdengine.presets.nrq import _checkdefs
    lr, wd, a = ARCH["lr"], ARCH["weight_decay"], ARCH["momentum"]
    tau = relaxation_time(lr, wd, a)
    checks = [(check_id(m, n), f"With {m} and {n.replace('_', ' ')} normalization (α {ARCH['momentum']:g}, η "
                               f"{ARCH['lr']:g}, λ {ARCH['weight_decay']:g}) every scale-invariant layer's tail "
                               "root-mean-square angular update is √(2λη/(1+α)) (seed 003 Fig. 9, seed 004 Fig. 8).")
              for m in MODELS for n in NORMS]
    checks += [(erratic_id(n), f"Diagnostic of {check_id('resnet', n)}: the small resnet with {n.replace('_', ' ')} "
                               "normalization trains erratically at this step: its tail AU records scatter around "
                               "√(2λη/(1+α)) by a larger factor than the cnn's with the same normalization and seed "
                               "(a tail root-mean-square over a few records then does not estimate the equilibrium; seed 003 Fig. 9's "
                               "equilibrium assumes a stationary AU).")
               for n in NORMS]
    au = au_equilibrium(lr, wd, a)
    quick = {m: f"{m} {QUICK_WIDTHS[m]}" for m in MODELS}
    return Preset(
        id="train-architectures", title="Digits: angular update across architectures and normalizations",
        seed="003", figure="Fig. 9 (seed 004 Fig. 8)",
        description=(
            "Every scale-invariant weight of an mlp (depth 2), a cnn (depth 3) and a pre-activation resnet (depth 8) "
            "with batch, group, layer norm or weight standardization (a 3 × 4 grid; group norm's groups are half the "
            "greatest common divisor of the model's widths, at most 8, so that they divide every width) is trained on "
            f"digits by SGDM α {ARCH['momentum']:g}, η {ARCH['lr']:g}, λ {ARCH['weight_decay']:g}, B 128; every "
            f"layer's AU settles on √(2λη/(1+α)) = {au:.4g} whatever the architecture or normalization (the seed: "
            "MobileNet-V2 and ShuffleNet-V2+ on ImageNet, η 0.5, λ 4e−5). Paper: the catalog's widths (mlp 256, cnn "
            "and resnet 16), 4 trials × 6 seeds, 3000 steps. Quick (reduced to run in minutes on 2 shared cores): "
            f"widths {', '.join(quick.values())} (the conv nets halved: a resnet of width 16 costs ~14 ms per update "
            "here alone), 1 trial × 6 seeds, and 1000 steps: the relaxation time (1−α)/(4λη) is only "
            f"{tau:.0f} updates, so the AU is at equilibrium long before the tail (the last 500 steps) is averaged. "
            "All 12 pairs are kept (every norm on every model is the figure's point); the catalog's 10% band applies "
            "where the Monte-Carlo tolerance is narrower. Measured here at quick size: the mlp and cnn sit within "
            "1.3% of the theory with every norm. At this η/(1−α) = 5 the small resnet trains erratically on digits: "
            "its tail AU records scatter by 20–200% around the theory where the cnn's scatter by 2–20% (the "
            "erratic-resnet-* diagnostics, resnet against cnn with the same norm and seed), spikes of 2–7× the theory "
            "alternate with records below it, and one weight-standardized seed's |w| blew up to ~10⁴. A tail RMS of "
            "10 such records does not estimate the equilibrium: with group norm and weight standardization the "
            "tolerance is wider than the gap to the momentum-free theory, so those checks are inconclusive (the "
            "per-seed values are in the notes)."),
        kinds=("train",), tier=2, exploratory=False, gpu_sizes=("paper",),
        sizes={"quick": study("train-architectures (quick)", {**ARCH, **QUICK_RUN}, QUICK_SEEDS,
                              points=points(QUICK_WIDTHS)),
               "paper": study("train-architectures (paper)", {**ARCH, **PAPER_RUN}, PAPER_SEEDS,
                              points=points(PAPER_WIDTHS))},
        checks=_checkdefs(*checks),
        panels=tuple(PanelDef(f"Angular update (rms), {m}, every layer and norm", "au_rms", log_y=True,
                              points=tuple(range(i * len(NORMS), (i + 1) * len(NORMS))))
                     for i, m in enumerate(MODELS))
        + (PanelDef("Weight norm |w| (mean of layers)", "norm", log_y=True),))


PRESETS: list[tuple[Any, Callable[[Study], dict[str, Callable[[], Outcome]]]]] = [
    (_arch_preset(), _arch),
]
