"""A study's estimated finish: its remaining work at the pace of its current stretch of running.

Work is counted in steps: what is left is the steps every active (queued or running) child has still to
take, from the step it will restart at if it is queued again (a study whose children differ in length, a
sweep over ``steps``, is paced by its steps, not by its count of children). A step's cost differs between
kinds, so a compare study whose members are of several kinds counts each child as one unit instead, done
in the fraction ``step / total_steps``. A failed or cancelled child leaves nothing to do, nor does one asked
to cancel (it is stopping, not working), and a study with no other active child has no ETA.

The pace is the work the study's runs did since the start of its **current stretch**, over that time.
Each attempt that ran (a running child's current attempt, an ended child's last one) covers
``[started_at, finished_at or now]`` and did ``step − start_step`` of its child's steps. The
stretch is the chain of such intervals that reaches now, where a gap between two of them is crossed
only when a child of the study was waiting through it (queued since ``queued_at``, not started before
its end): a study whose children wait their turn behind other users' jobs keeps its whole history,
while the old runs of a compare study's members, or a child's run before it was continued, are not this
stretch's pace. A queued child's ``started_at`` belongs to an attempt that is over, so it covers no time.

The stretch's pace counts each run's set-up (data, model, the engine's start) as the study's time, as
every child still queued will pay it. Until a run of the stretch has ended, though, its work is that of
runs still in their first seconds, and the pace would count the set-up of one wave against a few steps
(two workers, six children of 30 s set-up and 100 s of steps: 40 s in, 1160 s for 350 s left). Until then the estimate is the slowest running child's
time left at its own pace (:func:`store.jobs.remaining_seconds`: since its first progress report),
plus, for the children still queued, as many waves as the running children take, each as long as the
longest running child's whole run (its time so far and its time left).

Once a run has ended, the estimate is the larger of the remaining work at the stretch's pace and the
slowest running child's time left at its own pace: a study cannot end before that child, which matters
once fewer children are left than workers. None before any work was done and no running child has a pace.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import accumulate

from store.models import ACTIVE, Status, as_utc

_FOREVER = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True)
class ChildTimes:
    """What a study's ETA needs of one child (times on the database's clock)."""

    status: str
    step: int                         # a queued child's: the step it will start from (its checkpoint's, else 0)
    total_steps: int
    kind: str
    start_step: int                   # the step its current (last) attempt started from
    queued_at: datetime | None        # when its current (last) attempt was queued
    started_at: datetime | None       # its current (last) attempt's start
    finished_at: datetime | None
    own_remaining: float | None = None   # a running child's seconds left at its own pace, once it has one
    stopping: bool = False               # asked to cancel: what it has left will not be done

    @property
    def working(self) -> bool:
        """Active and not stopping: it still has work that counts toward the study's end."""
        return self.status in ACTIVE and not self.stopping

    def steps_to(self, step: int) -> int:
        """Its steps up to ``step``, within [0, total_steps]."""
        return max(0, min(step, self.total_steps))

    def work(self, steps: int, in_units: bool) -> float:
        """``steps`` of it as work: steps, or with ``in_units`` the fraction of its steps (each child one unit)."""
        if not in_units:
            return float(steps)
        return steps / self.total_steps if self.total_steps > 0 else 0.0


def _ran(child: ChildTimes, now: datetime, in_units: bool) -> tuple[datetime, datetime, float, bool] | None:
    """(start, end, work done, ended) of the attempt a child ran, or None when it covers no time."""
    if child.started_at is None or child.status == Status.queued:
        return None
    finished = child.finished_at if child.status != Status.running else None
    done = child.work(max(0, child.steps_to(child.step) - child.steps_to(child.start_step)), in_units)
    return as_utc(child.started_at), now if finished is None else as_utc(finished), done, finished is not None


class _Waiting:
    """The children's waits for their current attempt, each over [queued_at, its start, its end while queued,
    or forever): whether one waited through a gap is a bisection and a prefix maximum, not a loop over children."""

    def __init__(self, children: list[ChildTimes]) -> None:
        spans = []
        for child in children:
            if child.queued_at is None:
                continue
            queued = as_utc(child.queued_at)
            if child.status == Status.queued:
                until = _FOREVER
            elif child.started_at is not None and as_utc(child.started_at) >= queued:
                until = as_utc(child.started_at)
            elif child.finished_at is not None:   # ended while queued (cancelled)
                until = as_utc(child.finished_at)
            else:
                continue
            spans.append((queued, until))
        spans.sort()
        self._queued = [queued for queued, _ in spans]
        self._latest_end = list(accumulate((until for _, until in spans), max))

    def through(self, gap_start: datetime, gap_end: datetime) -> bool:
        """Whether a child queued by gap_start was still waiting at gap_end."""
        waiting = bisect_right(self._queued, gap_start)
        return waiting > 0 and self._latest_end[waiting - 1] >= gap_end


def eta_seconds(children: Iterable[ChildTimes], now: datetime) -> float | None:
    """Seconds until the study's estimated finish (module docstring); None when nothing says."""
    children = list(children)
    if not any(child.working for child in children):
        return None
    now = as_utc(now)
    in_units = len({child.kind for child in children}) > 1   # steps of different kinds do not add up
    runs = sorted((run for child in children if (run := _ran(child, now, in_units)) is not None),
                  key=lambda run: run[1], reverse=True)
    waiting = _Waiting(children)
    stretch_start, done, any_ended = now, 0.0, False
    for start, end, work, ended in runs:   # by end, latest first: the stretch is a prefix of this order
        if end < stretch_start and not waiting.through(end, stretch_start):
            break
        stretch_start, done, any_ended = min(stretch_start, start), done + work, any_ended or ended
    paced = [(as_utc(child.started_at), child.own_remaining) for child in children if child.working
             and child.status == Status.running and child.started_at is not None and child.own_remaining is not None]
    slowest = max((left for _, left in paced), default=None)
    if not any_ended:   # a first wave: each child's own pace, and as many more waves as the queued ones need
        if slowest is None:
            return None
        queued = sum(child.working and child.status == Status.queued for child in children)
        running = sum(child.working and child.status == Status.running for child in children)
        whole = max((now - started).total_seconds() + left for started, left in paced)
        return slowest + math.ceil(queued / max(running, 1)) * whole
    remaining = sum(child.work(child.total_steps - child.steps_to(child.step), in_units)
                    for child in children if child.working)
    elapsed = (now - stretch_start).total_seconds()
    at_pace = remaining * elapsed / done if done > 0 and elapsed > 0 else None
    known = [value for value in (at_pace, slowest) if value is not None]
    return max(known) if known else None
