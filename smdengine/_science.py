"""Science and checks shared by the kinds (torch-free): the equilibrium angular update, the rate
phases of a schedule, the tail of a run, the record-count and schedule-range validators, and the
summary rules.

Schedules (``nrq``'s ``lr_schedule``, ``train``'s ``schedule``) are lists of entries with ``step``,
``lr_factor``, ``weight_decay_factor`` and ``rescale``: from ``step`` on, the rates in force are
multiplied by the factors (cumulative), and ``rescale`` multiplies the scale-invariant weights by
(lr_factor/weight_decay_factor)^¼, straight to the new equilibrium (design §4).
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


def au_equilibrium(lr: float, weight_decay: float, momentum: float = 0.0) -> float:
    """Root-mean-square angular update at equilibrium, √(2λη/(1+α)) (radians per update; seed 003)."""
    return math.sqrt(2.0 * weight_decay * lr / (1.0 + momentum))


@dataclass(frozen=True)
class Phase:
    start: int            # first update of the phase
    lr: float             # η in force
    weight_decay: float   # λ in force
    rescale: float        # factor applied to the scale-invariant weights at the start (1.0: none)


def rate_phases(lr: float, weight_decay: float, entries: Iterable[Any]) -> list[Phase]:
    """Phases in order; factors are cumulative (each entry, a kind's ScheduleEntry with its step resolved,
    multiplies the rates then in force)."""
    out = [Phase(0, lr, weight_decay, 1.0)]
    for entry in entries:
        prev = out[-1]
        factor = (entry.lr_factor / entry.weight_decay_factor) ** 0.25 if entry.rescale else 1.0
        out.append(Phase(int(entry.step or 0), prev.lr * entry.lr_factor,
                         prev.weight_decay * entry.weight_decay_factor, factor))
    return out


def phase_at(all_phases: Sequence[Phase], step: int) -> Phase:
    """The phase in force at ``step`` (phases are sorted by start, the first starts at 0)."""
    return all_phases[bisect.bisect_right([ph.start for ph in all_phases], step) - 1]


def record_steps(steps: int, record_every: int) -> list[int]:
    """Steps n at which a run records: 0, r, 2r, … < steps."""
    return list(range(0, steps, record_every))


def tail_start(all_phases: Sequence[Phase], steps: int) -> float:
    """Summaries average over the last half of the final phase: steps ≥ this value."""
    final = all_phases[-1].start
    return final + (steps - final) / 2.0


# ----------------------------------------------------------------------------- validators


def check_recording(steps: int, record_every: int, max_points: int = 1_000_000) -> None:
    """``record_every`` ≤ ``steps`` and at most ``max_points`` recorded points."""
    if record_every > steps:
        raise ValueError(f"record_every: expected ≤ steps ({steps}), got {record_every}")
    if steps // record_every > max_points:
        raise ValueError(f"record_every: expected at most {max_points:,} recorded points (steps/record_every)"
                         .replace(",", " "))


def check_schedule(field: str, entries: Iterable[Any], lr: float, weight_decay: float, steps: int,
                   lr_max: float, weight_decay_max: float, strict_weight_decay: bool, bounds: str) -> None:
    """Entries at strictly increasing steps in [1, steps), and the rates in force within range:
    lr ∈ [1e-12, lr_max]; weight decay ≤ weight_decay_max, and (``strict_weight_decay``) 0 or ≥ 1e-12.
    ``bounds``: the range as the error message states it."""
    last = 0
    for entry in entries:
        step = int(entry.step or 0)
        if step <= last or step >= steps:
            raise ValueError(f"{field}: expected strictly increasing steps in [1, steps), got {entry.step}")
        last, lr, weight_decay = step, lr * entry.lr_factor, weight_decay * entry.weight_decay_factor
        wd_ok = weight_decay <= weight_decay_max and (not strict_weight_decay or weight_decay == 0
                                                      or weight_decay >= 1e-12)
        if not (1e-12 <= lr <= lr_max and wd_ok):
            raise ValueError(f"{field}: expected the rates in force to stay in {bounds}, "
                             f"got lr={lr:.3g}, weight_decay={weight_decay:.3g} from step {step}")


# ----------------------------------------------------------------------------- summary rules


def tail_means(series: dict[str, list], theory: dict[str, Any], start: float) -> dict[str, float]:
    """The summary rule of every scalar series and theory series: the mean over the recorded steps
    ≥ start (the last recorded point when none is). NaN propagates."""
    steps = series["step"]
    idx = [i for i, n in enumerate(steps) if n >= start] or [len(steps) - 1]
    out = {}
    for key, values in list(series.items()) + list(theory.items()):
        if key == "step" or not isinstance(values, list) or not values or isinstance(values[0], list):
            continue
        out[key] = math.fsum(values[i] for i in idx) / len(idx)
    return out
