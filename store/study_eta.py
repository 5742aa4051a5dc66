"""A study's estimated finish: its remaining work at the pace of its current stretch of running.

Work is counted in children: a child is one unit, done in the fraction ``step / total_steps``. What is
left is the unfinished fraction of every active (queued or running) child; a failed or cancelled child
leaves nothing to do.

The pace is the work the study's runs did since the start of its **current stretch**, over that time.
Each attempt that ran (a running child's current attempt, an ended child's last one) covers
``[started_at, finished_at or now]`` and did ``(step − start_step) / total_steps`` of its child. The
stretch is the chain of such intervals that reaches now, where a gap between two of them is crossed
only when the study had a child waiting for its first run through it (created by then, not started
before its end): a study whose children wait their turn behind other users' jobs keeps its whole
history, while the old runs of a compare study's members, or the first run of a child that was later
continued, are not this stretch's pace. A queued child's ``started_at`` belongs to an attempt that is
over (a continued or requeued child), so it covers no time.

The estimate is the larger of that remaining work at that pace and the longest time a running child
still needs at its own attempt's pace (:func:`store.jobs.remaining_seconds`): a study cannot end before
its slowest running child, which matters once fewer children are left than workers. None before any
work was done in the stretch and no running child has a pace.
"""
from __future__ import annotations

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
    step: int
    total_steps: int
    start_step: int                   # the step its current (last) attempt started from
    created_at: datetime
    started_at: datetime | None       # its current (last) attempt's start
    finished_at: datetime | None
    attempts: int
    own_remaining: float | None = None   # a running child's seconds left at its own pace, once it has one

    def fraction(self, step: int) -> float:
        return min(1.0, step / self.total_steps) if self.total_steps > 0 else 0.0


def _ran(child: ChildTimes, now: datetime) -> tuple[datetime, datetime, float] | None:
    """(start, end, work done) of the attempt a child ran, or None when it covers no time."""
    if child.started_at is None or child.status == Status.queued:
        return None
    end = now if child.status == Status.running or child.finished_at is None else as_utc(child.finished_at)
    done = child.fraction(child.step) - child.fraction(child.start_step)
    return as_utc(child.started_at), end, max(0.0, done)


class _Waiting:
    """The children that waited for their first run, each over [created_at, its first start or forever):
    whether one waited through a gap is a bisection and a prefix maximum, not a loop over children."""

    def __init__(self, children: list[ChildTimes]) -> None:
        spans = []
        for child in children:
            if child.status == Status.queued and child.attempts == 0:
                spans.append((as_utc(child.created_at), _FOREVER))
            elif child.status != Status.queued and child.attempts == 1 and child.started_at is not None:
                spans.append((as_utc(child.created_at), as_utc(child.started_at)))
        spans.sort()
        self._created = [created for created, _ in spans]
        self._latest_start = list(accumulate((start for _, start in spans), max))

    def through(self, gap_start: datetime, gap_end: datetime) -> bool:
        """Whether a child created by gap_start waited for its first run until gap_end or later."""
        waiting = bisect_right(self._created, gap_start)
        return waiting > 0 and self._latest_start[waiting - 1] >= gap_end


def eta_seconds(children: Iterable[ChildTimes], now: datetime) -> float | None:
    """Seconds until the study's estimated finish (module docstring); None when nothing says."""
    children = list(children)
    now = as_utc(now)
    remaining = sum(1.0 - child.fraction(child.step) for child in children if child.status in ACTIVE)
    runs = sorted((run for child in children if (run := _ran(child, now)) is not None),
                  key=lambda run: run[1], reverse=True)
    waiting = _Waiting(children)
    stretch_start, done = now, 0.0
    for start, end, work in runs:   # by end, latest first: the stretch is a prefix of this order
        if end < stretch_start and not waiting.through(end, stretch_start):
            break
        stretch_start, done = min(stretch_start, start), done + work
    elapsed = (now - stretch_start).total_seconds()
    at_pace = remaining * elapsed / done if done > 0 and elapsed > 0 else None
    slowest = max((child.own_remaining for child in children
                   if child.status == Status.running and child.own_remaining is not None), default=None)
    known = [value for value in (at_pace, slowest) if value is not None]
    return max(known) if known else None
