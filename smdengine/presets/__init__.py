"""Presets: named studies over the seeds' figures, at sizes, with checks (README: Studies; docs/presets.md).

A preset is a study spec per size (``quick``: minutes on a 2-core CPU; ``paper``: the seed's own scale)
and a list of checks. Each check is one claim of a seed (one sentence with its reference); after the
study's children have ended, :func:`evaluate_checks` computes for each the ``predicted`` value from
theory (the formulas of docs/theory.md, by code), the ``measured`` value from the children's results, a
``tolerance`` from the Monte-Carlo error of that measurement, and a verdict:

- ``reproduced`` when |measured − predicted| ≤ tolerance (a one-sided claim says so in its rule);
- ``inconclusive`` when a child it needs is missing or failed, or when the tolerance is wider than the
  effect being tested (each check names its effect);
- ``not_reproduced`` otherwise;
- ``finding`` when the check names a known cause for not holding on this model and every diagnostic check
  that shows it is reproduced (:mod:`smdengine.presets._checks`).

Importing this package imports no torch (nor scipy: theory is imported when checks are evaluated).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from smdengine._compare import ChildRecord
from smdengine.presets._checks import Evaluator, run_checks

__all__ = ["PRESETS", "CheckDef", "PanelDef", "Preset", "check_seeds", "estimate", "evaluate_checks", "preset_study"]


@dataclass(frozen=True)
class CheckDef:
    """One claim of a seed a preset checks: ``claim`` is one sentence with its seed reference."""

    id: str
    claim: str


@dataclass(frozen=True)
class PanelDef:
    """One panel of a preset's figure: ``metric`` of the chosen ``points`` (None: all) against ``x``
    (an overlay x: step, lr_time, tau, intrinsic_time); the service draws the metric's theory dashed."""

    title: str
    metric: str
    x: str = "step"
    log_y: bool = False
    points: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Preset:
    """A named study over a seed figure. ``sizes``: size name → study spec dict (base + grid/zip/points/
    seeds, name); ``gpu_sizes``: the sizes that need a GPU.

    ``min_seeds`` and ``max_seeds`` (None: no limit) are how many distinct seeds its checks can use: a run
    with other seeds is refused before anything runs (:func:`preset_study`). The default, 2, is that of a
    standard error over seeds (:func:`smdengine.presets._checks.over_seeds`); a preset whose every check also
    has a Monte-Carlo error within one run (batch means of the tail, the trials of one run) declares 1."""

    id: str
    title: str
    seed: str
    figure: str
    description: str
    kinds: tuple[str, ...]
    tier: int
    exploratory: bool
    sizes: Mapping[str, dict]
    checks: tuple[CheckDef, ...]
    panels: tuple[PanelDef, ...]
    gpu_sizes: tuple[str, ...] = ()
    min_seeds: int = 2
    max_seeds: int | None = None


def _catalog() -> tuple[dict[str, Preset], dict[str, Evaluator]]:
    from smdengine.presets import exploratory, networks, nrq, schedules, sde, train

    presets: dict[str, Preset] = {}
    evaluators: dict[str, Evaluator] = {}
    for module in (nrq, sde, train, schedules, networks, exploratory):
        for preset, evaluator in module.PRESETS:
            if preset.id in presets:
                raise RuntimeError(f"preset {preset.id!r} declared twice")
            presets[preset.id] = preset
            evaluators[preset.id] = evaluator
    return presets, evaluators


PRESETS, _EVALUATORS = _catalog()


def _preset(preset_id: str) -> Preset:
    try:
        return PRESETS[preset_id]
    except KeyError:
        raise KeyError(f"unknown preset {preset_id!r}; expected one of {', '.join(PRESETS)}") from None


def preset_study(preset_id: str, size: str = "quick", seeds: list[int] | None = None,
                 overrides: Mapping[str, Any] | None = None) -> dict:
    """The study spec of a preset at ``size``: ``overrides`` ({dotted path: value}) are set on the base,
    ``seeds`` replace the study's seeds. KeyError for an unknown preset, ValueError for an unknown size, for
    seeds its checks cannot use ("seeds: expected …, got …": :func:`check_seeds`) or an override of a path the
    preset varies (or one inside or above it); validation of the values is the study expansion's."""
    from smdengine._study import set_path

    preset = _preset(preset_id)
    if size not in preset.sizes:
        raise ValueError(f"size: expected one of {', '.join(preset.sizes)}, got {size!r}")
    study = deepcopy(dict(preset.sizes[size]))
    check_seeds(preset, list(seeds) if seeds is not None else study.get("seeds") or [study["base"].get("seed", 0)])
    axes = [*study.get("grid", {}), *study.get("zip", {}),
            *dict.fromkeys(p for point in study.get("points") or () for p in point),
            *(["seed"] if seeds is not None or "seeds" in study else [])]   # each child's seed is one of the seeds
    for path, value in (overrides or {}).items():
        varied = next((a for a in axes if _overlaps(path, a)), None)
        if varied is not None:   # the points would overwrite it: refuse rather than ignore it
            instead = ('give "seeds": [...]' if varied == "seed" else
                       "run the study yourself with POST /v1/studies to vary it differently")
            raise ValueError(f"{path}: expected a path the preset does not vary, got one that overlaps its axis "
                             f"{varied!r} ({instead})")
        set_path(study["base"], path, deepcopy(value))
    if seeds is not None:
        study["seeds"] = list(seeds)
    return study


def check_seeds(preset: Preset, seeds: Sequence[int]) -> None:
    """ValueError ("seeds: expected …, got …") unless ``seeds`` are distinct integers in [0, 2^63 − 1] and as
    many as the preset's checks can use (``min_seeds`` to ``max_seeds``)."""
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= 2**63 - 1]
    if bad:
        raise ValueError(f"seeds: expected integers in [0, 2^63 − 1], got {', '.join(map(repr, bad[:5]))}")
    from smdengine._study import distinct_seeds

    distinct_seeds(seeds, "seeds")   # the same run twice: a standard error over seeds would be falsely small
    low, high = preset.min_seeds, preset.max_seeds
    if len(seeds) < low or (high is not None and len(seeds) > high):
        want = (f"at least {low}" if high is None else f"exactly {low}" if low == high else f"{low} to {high}")
        why = " (its checks' standard errors are over seeds)" if len(seeds) < low and low > 1 else ""
        raise ValueError(f"seeds: expected {want} seeds for preset {preset.id}{why}, got {len(seeds)}")


def _overlaps(a: str, b: str) -> bool:
    """Whether one dotted path is the other or lies inside it."""
    x, y = a.split("."), b.split(".")
    return x[:len(y)] == y or y[:len(x)] == x


def estimate(preset_id: str, size: str) -> dict:
    """{"runs": number of children, "work": Σ each child spec's ``work``, "gpu": whether the size needs one}."""
    from smdengine._study import expand_study

    children = expand_study(preset_study(preset_id, size))
    return {"runs": len(children), "work": int(math.fsum(c.spec.work for c in children)),
            "gpu": size in PRESETS[preset_id].gpu_sizes}


def evaluate_checks(preset_id: str, children: Sequence[ChildRecord],
                    documents: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Every check of the preset, in order: {"id", "claim", "predicted", "measured", "tolerance",
    "tolerance_rule", "verdict", "note"}. ``documents[i]`` is the result document of ``children[i]``
    (a failed child's may be empty)."""
    preset = _preset(preset_id)
    if len(children) != len(documents):
        raise ValueError(f"documents: expected one per child ({len(children)}), got {len(documents)}")
    return run_checks(preset.checks, _EVALUATORS[preset_id], children, documents)
