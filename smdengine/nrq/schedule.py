"""Phases of an ``nrq`` run: the rates in force between schedule entries, and the record steps."""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from smdengine.nrq.spec import NRQPhysics


@dataclass(frozen=True)
class Phase:
    start: int            # first update of the phase
    lr: float             # η in force
    weight_decay: float   # λ in force
    rescale: float        # factor applied to X at the start (1.0: none)


def phases(params: NRQPhysics) -> list[Phase]:
    """Phases in order; factors are cumulative (each entry multiplies the rates then in force)."""
    return rate_phases(params.lr, params.weight_decay, params.lr_schedule)


def rate_phases(lr: float, weight_decay: float, entries) -> list[Phase]:
    """Phases from schedule entries with ``step``, ``lr_factor``, ``weight_decay_factor`` and
    ``rescale`` (the ``nrq`` and ``train`` kinds' schedules)."""
    out = [Phase(0, lr, weight_decay, 1.0)]
    for entry in entries:
        prev = out[-1]
        factor = (entry.lr_factor / entry.weight_decay_factor) ** 0.25 if entry.rescale else 1.0
        out.append(Phase(entry.step, prev.lr * entry.lr_factor,
                         prev.weight_decay * entry.weight_decay_factor, factor))
    return out


def record_steps(params: NRQPhysics) -> list[int]:
    """Steps n at which the state X_n and the update n → n+1 are recorded: 0, r, 2r, … < steps."""
    return list(range(0, params.steps, params.record_every))


def phase_at(all_phases: list[Phase], step: int) -> Phase:
    """The phase in force at ``step`` (phases are sorted by start, the first starts at 0)."""
    return all_phases[bisect.bisect_right([ph.start for ph in all_phases], step) - 1]


def tail_start(params: NRQPhysics) -> float:
    """Summaries average over the last half of the final phase: steps ≥ this value."""
    final = phases(params)[-1].start
    return final + (params.steps - final) / 2.0
