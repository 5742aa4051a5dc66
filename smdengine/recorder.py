"""The recording loop every simulator shares: buffer recorded rows on the device, hand them out as
progress events at most every ``progress_interval`` seconds, poll for cancellation there, and take
checkpoints there when due.

Checkpointing protocol for a simulator: build the Recorder with the run's hooks; if
:attr:`Recorder.resumed` is set, load its ``state`` into the run and start the loop at
``resumed.step``; set :attr:`Recorder.snapshot` to a function of the step reached (updates done)
returning the state dict (CPU copies:
:func:`smdengine.runtime.saved`), or None when the run is not at a point it can resume from.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from smdengine.runtime import Cancelled, Checkpoint, CheckpointHooks, Progress, ProgressCallback, StopCheck


class Recorder:
    """Collects the series of one run.

    ``record(step, row)`` takes a dict name → tensor: a 0-d tensor is one number per point (a mean
    over trials), a 1-d tensor a list per point (one value per recorded trial). Rows stay on the
    device until an event, so recording does not synchronise with an accelerator every point.
    """

    def __init__(self, names: Sequence[str], total_steps: int, on_progress: ProgressCallback | None,
                 should_stop: StopCheck | None, progress_interval: float,
                 checkpoint: CheckpointHooks | None = None):
        self.names = tuple(names)
        self.total_steps = total_steps
        self.on_progress, self.should_stop, self.interval = on_progress, should_stop, progress_interval
        self.series: dict[str, list] = {"step": [], **{m: [] for m in self.names}}
        self._steps: list = []
        self._rows: dict[str, list[torch.Tensor]] = {m: [] for m in self.names}
        self._last_emit = time.monotonic()
        self.hooks = checkpoint
        self.snapshot: Callable[[int], dict[str, Any] | None] | None = None
        self._last_checkpoint = time.monotonic()
        self.resumed: Checkpoint | None = checkpoint.resume if checkpoint is not None else None
        if self.resumed is not None:
            missing = set(self.series) - set(self.resumed.series)
            if missing:
                raise ValueError(f"checkpoint: expected series {sorted(self.series)}, got none for {sorted(missing)}")
            self.series = {k: list(self.resumed.series[k]) for k in self.series}

    def record(self, step, row: dict[str, torch.Tensor]) -> None:
        self._steps.append(step)
        for name in self.names:
            self._rows[name].append(row[name])

    def tick(self, step) -> None:
        """Call after each update with the time reached; emits and checks for a stop when due."""
        if time.monotonic() - self._last_emit >= self.interval:
            self.flush(step)
            self._last_emit = time.monotonic()
            if self.should_stop is not None and self.should_stop():
                raise Cancelled(step)
            self._maybe_checkpoint(step)

    def _maybe_checkpoint(self, step) -> None:
        hooks = self.hooks
        if hooks is None or hooks.save is None or self.snapshot is None:
            return
        if time.monotonic() - self._last_checkpoint < hooks.interval:
            return
        state = self.snapshot(int(step))
        if state is None:  # not at a resumable point: try again at the next event
            return
        hooks.save(Checkpoint(step=int(step), n_points=len(self.series["step"]), state=state,
                              series={k: list(v) for k, v in self.series.items()},
                              fingerprint=hooks.fingerprint))
        self._last_checkpoint = time.monotonic()

    def flush(self, step) -> None:
        """Move the buffered rows into :attr:`series` and report them as one progress event."""
        points: dict[str, list] = {"step": self._steps}
        for name in self.names:
            rows = self._rows[name]
            points[name] = torch.stack(rows).tolist() if rows else []
        for key, values in points.items():
            self.series[key].extend(values)
        self._steps, self._rows = [], {m: [] for m in self.names}
        if self.on_progress is not None:
            self.on_progress(Progress(step=step, total_steps=self.total_steps, points=points))


def tail_means(series: dict[str, list], theory: dict, start: float) -> dict[str, float]:
    """Means over recorded steps ≥ start (the last recorded point when none is) of every scalar
    series and theory series."""
    steps = series["step"]
    idx = [i for i, n in enumerate(steps) if n >= start] or [len(steps) - 1]
    out = {}
    for key, values in list(series.items()) + list(theory.items()):
        if key == "step" or not isinstance(values, list) or not values or isinstance(values[0], list):
            continue
        out[key] = math.fsum(values[i] for i in idx) / len(idx)
    return out
