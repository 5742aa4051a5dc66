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
(two workers, six children of 30 s set-up and 100 s of steps: 40 s in, 1160 s for 350 s left). Until then
each running child ends after its own time left (:func:`store.jobs.remaining_seconds`: at its pace since
its first progress report), and the queued children, longest first, each go to the worker that frees
first (one per running child), taking a set-up and a time per step as the running children's slowest do:
a child's time per step is its time left over its steps left, its set-up the rest of its whole run.

Once a run has ended, the estimate is the larger of the remaining work at the stretch's pace and the
slowest running child's time left at its own pace: a study cannot end before that child, which matters
once fewer children are left than workers. None before any work was done and no running child has a pace.
"""
from __future__ import annotations

import heapq
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

    def working_as(self, status: Status) -> bool:
        """Working, and running or queued (``status``): the two kinds of a first wave's work."""
        return self.working and self.status == status

    @property
    def steps_left(self) -> int:
        """The steps it has still to run (a queued child's from the step it will start at)."""
        return self.total_steps - self.steps_to(self.step)

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


def _first_wave(children: list[ChildTimes], now: datetime, slowest: float) -> float:
    """Seconds until the last child ends when the running children end at their own pace (``slowest`` for one
    without a pace yet) and each queued child, longest first, starts on the worker that frees first, taking the
    slowest set-up and time per step of the running children (module docstring)."""
    running = [child for child in children if child.working_as(Status.running)]
    step_seconds = set_up = 0.0
    for child in running:
        if child.own_remaining is None or child.started_at is None or child.step >= child.total_steps:
            continue
        per_step = child.own_remaining / (child.total_steps - child.step)
        whole = (now - as_utc(child.started_at)).total_seconds() + child.own_remaining
        step_seconds = max(step_seconds, per_step)
        set_up = max(set_up, whole - per_step * (child.total_steps - child.start_step))
    free = [slowest if child.own_remaining is None else child.own_remaining for child in running] or [0.0]
    heapq.heapify(free)
    for steps in sorted((child.steps_left for child in children if child.working_as(Status.queued)), reverse=True):
        heapq.heappush(free, heapq.heappop(free) + set_up + steps * step_seconds)
    return max(free)


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
    slowest = max((child.own_remaining for child in children
                   if child.working_as(Status.running) and child.own_remaining is not None), default=None)
    if not any_ended:   # a first wave: each child's own pace, then the queued ones on the workers as they free
        return None if slowest is None else _first_wave(children, now, slowest)
    remaining = sum(child.work(child.steps_left, in_units) for child in children if child.working)
    elapsed = (now - stretch_start).total_seconds()
    at_pace = remaining * elapsed / done if done > 0 and elapsed > 0 else None
    known = [value for value in (at_pace, slowest) if value is not None]
    return max(known) if known else None
