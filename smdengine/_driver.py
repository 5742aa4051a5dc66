"""The one run loop of every simulator, :func:`run` (as torchsde writes ``integrate`` once and each
method only ``step``): resolve device and dtype, seed the generator, build the simulator, resume from
a checkpoint, then step, record, emit progress, poll for cancellation and take checkpoints, and at the
end flush, predict and summarise. The simulator protocol is :mod:`smdengine._simulator`.

Checkpoint contract, enforced here: a resume is refused unless its fingerprint matches this spec and
device type (:class:`IncompatibleCheckpoint`) and it holds every series of the run (``ValueError``); a
checkpoint is taken only right after a progress event (so the points it holds were delivered), at most
every ``CheckpointHooks.interval`` seconds, between two updates, from ``Simulator.state()``; a resumed
run calls ``Simulator.load_state`` once before its first update and delivers only the points after it.

torch is imported when a run starts, not with this module.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from smdengine._registry import model_of, parse_spec
from smdengine._runtime import (
    Cancelled,
    Checkpoint,
    CheckpointHooks,
    IncompatibleCheckpoint,
    Progress,
    ProgressCallback,
    RunResult,
    StopCheck,
    fingerprint,
)
from smdengine._simulator import Context, Row

if TYPE_CHECKING:
    import torch

    from smdengine._registry import AnySpec


def resolve_device(device: str) -> torch.device:
    """``"auto"`` → cuda when available, else cpu; ``"cuda"`` fails fast when there is none."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: expected a CUDA device, got none available on this worker")
    return torch.device(device)


class _Recorder:
    """The series of one run. Rows (name → 0-d tensor: one number per point, a mean over trials; 1-d:
    a list per point) stay on the device until an event, so recording does not synchronise with an
    accelerator every point."""

    def __init__(self, names: Sequence[str], total_steps: int, on_progress: ProgressCallback | None,
                 resumed: Checkpoint | None):
        self.names = tuple(names)
        self.total_steps = total_steps
        self.on_progress = on_progress
        self.series: dict[str, list] = {"step": [], **{m: [] for m in self.names}}
        self._steps: list[int] = []
        self._rows: dict[str, list[torch.Tensor]] = {m: [] for m in self.names}
        if resumed is not None:
            missing = set(self.series) - set(resumed.series)
            if missing:
                raise ValueError(f"checkpoint: expected series {sorted(self.series)}, got none for {sorted(missing)}")
            self.series = {k: list(resumed.series[k]) for k in self.series}

    def record(self, step: int, row: Row) -> None:
        self._steps.append(step)
        for name in self.names:
            self._rows[name].append(row[name])

    def flush(self, step: int) -> None:
        """Move the buffered rows into :attr:`series` and report them as one progress event."""
        import torch

        points: dict[str, list] = {"step": self._steps}
        for name in self.names:
            rows = self._rows[name]
            points[name] = torch.stack(rows).tolist() if rows else []
        for key, values in points.items():
            self.series[key].extend(values)
        self._steps, self._rows = [], {m: [] for m in self.names}
        if self.on_progress is not None:
            self.on_progress(Progress(step=step, total_steps=self.total_steps, points=points))


def run(spec: AnySpec | dict[str, Any], *, on_progress: ProgressCallback | None = None,
        should_stop: StopCheck | None = None, progress_interval: float = 0.5,
        data_dir: str | None = None, checkpoint: CheckpointHooks | None = None, **options: Any) -> RunResult:
    """Run one experiment to completion.

    on_progress: called with a :class:`Progress` at most every ``progress_interval`` seconds and
    once at the end, carrying the points recorded since the previous call.
    should_stop: polled after each progress event; when it returns true the run raises
    :class:`Cancelled` (all points so far were already delivered).
    data_dir: where datasets that are not bundled live (``train`` kind, cifar10); the service
    passes ``SMD_DATA_DIR``.
    checkpoint: ``save`` receives a :class:`Checkpoint` every ``interval`` seconds (after a progress
    event); with ``resume`` the run continues from that checkpoint and its progress events carry only
    the points after it. Raises :class:`IncompatibleCheckpoint` when ``resume`` was made by another
    spec, device type or format.
    options: go to the simulator's constructor (e.g. the train kind's ``track=False``, for a bench).
    """
    import torch

    spec = parse_spec(spec)
    device = resolve_device(spec.device)
    resumed: Checkpoint | None = None
    if checkpoint is not None:
        checkpoint.fingerprint = fingerprint(spec.model_dump_json(), device.type)
        resumed = checkpoint.resume
        if resumed is not None and resumed.fingerprint != checkpoint.fingerprint:
            raise IncompatibleCheckpoint("checkpoint: expected one made by this spec on this device type, "
                                         "got one from another run")
    dtype = getattr(torch, spec.params.dtype)   # float64 or float32
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    ctx = Context(device, dtype, gen, data_dir, checkpointing=checkpoint is not None and checkpoint.save is not None)
    sim = model_of(spec).load_simulator()(spec, ctx, **options)
    total, every = sim.total_steps, sim.record_every
    recorder = _Recorder(sim.names, total, on_progress, resumed)
    start = 0
    if resumed is not None:
        sim.load_state(resumed.state, resumed.step)
        start = resumed.step
    save = checkpoint.save if checkpoint is not None else None
    save_interval = checkpoint.interval if checkpoint is not None else 0.0
    mark = checkpoint.fingerprint if checkpoint is not None else ""
    step, record, clock = sim.step, recorder.record, time.monotonic
    last_emit = last_save = clock()
    for n in range(start, total):
        row = step(n, n % every == 0)
        if row is not None:
            record(n - n % every, row)
        if clock() - last_emit >= progress_interval:
            done = n + 1
            recorder.flush(done)
            last_emit = clock()
            if should_stop is not None and should_stop():
                raise Cancelled(done)
            if save is not None and clock() - last_save >= save_interval:
                save(Checkpoint(step=done, n_points=len(recorder.series["step"]), state=sim.state(),
                                series={k: list(v) for k, v in recorder.series.items()}, fingerprint=mark))
                last_save = clock()
    recorder.flush(total)
    theory = sim.theory()
    return RunResult(series=recorder.series, theory=theory, summary=sim.summarize(recorder.series, theory),
                     distributions=sim.distributions())


def predict(spec: AnySpec | dict[str, Any]) -> dict[str, Any]:
    """Theory predictions for a spec, aligned on the steps the run will record (no simulation)."""
    spec = parse_spec(spec)
    return model_of(spec).load_simulator().predict(spec)
