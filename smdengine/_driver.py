"""The one run loop of every simulator, :func:`run` (as torchsde writes ``integrate`` once and each
method only ``step``): resolve device and dtype, seed the generator, build the simulator, resume from
a checkpoint, then step, record, emit progress, poll for cancellation and take checkpoints, and at the
end flush, predict (less the theory names the spec's out-of-regime warnings omit:
:func:`smdengine._registry.spec_warnings`) and summarise. The simulator protocol is :mod:`smdengine._simulator`.

Checkpoint contract, enforced here: a resume is refused unless its fingerprint matches this spec and
device type (:class:`IncompatibleCheckpoint`) and it holds every series of the run (``ValueError``); a
checkpoint is taken only right after a progress event (so the points it holds were delivered), at most
every ``CheckpointHooks.interval`` seconds, between two updates, from ``Simulator.state()``; a resumed
run calls ``Simulator.load_state`` once before its first update and delivers only the points after it.

torch is imported when a run starts, not with this module.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from smdengine._registry import model_of, omitted_theory, parse_spec
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
from smdengine._simulator import Context

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
    hooks = checkpoint if checkpoint is not None else CheckpointHooks()
    hooks.fingerprint = fingerprint(spec.model_dump_json(), device.type)
    resumed, save = hooks.resume, hooks.save
    if resumed is not None and resumed.fingerprint != hooks.fingerprint:
        raise IncompatibleCheckpoint("checkpoint: expected one made by this spec on this device type, "
                                     "got one from another run")
    dtype = getattr(torch, spec.params.dtype)   # float64 or float32
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    ctx = Context(device, dtype, gen, data_dir, checkpointing=save is not None)
    sim = model_of(spec).load_simulator()(spec, ctx, **options)
    total, every, names = sim.total_steps, sim.record_every, tuple(sim.names)
    # the series; rows (name → 0-d tensor: one number per point, a mean over trials; 1-d: a list per
    # point) are buffered on the device until an event, so that recording does not synchronise with an
    # accelerator every point
    series: dict[str, list] = {"step": [], **{m: [] for m in names}}
    buffered: dict[str, list] = {k: [] for k in series}
    start = 0
    if resumed is not None:
        missing = set(series) - set(resumed.series)
        if missing:
            raise ValueError(f"checkpoint: expected series {sorted(series)}, got none for {sorted(missing)}")
        series = {k: list(resumed.series[k]) for k in series}
        sim.load_state(resumed.state, resumed.step)
        start = resumed.step

    def flush(step: int) -> None:
        """Move the buffered rows into ``series`` and report them as one progress event."""
        points = {k: rows if k == "step" else torch.stack(rows).tolist() if rows else []
                  for k, rows in buffered.items()}
        for key, values in points.items():
            series[key].extend(values)
            buffered[key] = []
        if on_progress is not None:
            on_progress(Progress(step=step, total_steps=total, points=points))

    step, clock = sim.step, time.monotonic
    last_emit = last_save = clock()
    for n in range(start, total):
        row = step(n, n % every == 0)
        if row is not None:
            buffered["step"].append(n - n % every)
            for name in names:
                buffered[name].append(row[name])
        if clock() - last_emit >= progress_interval:
            done = n + 1
            flush(done)
            last_emit = clock()
            if should_stop is not None and should_stop():
                raise Cancelled(done)
            if save is not None and clock() - last_save >= hooks.interval:
                save(Checkpoint(step=done, n_points=len(series["step"]), state=sim.state(),
                                series={k: list(v) for k, v in series.items()}, fingerprint=hooks.fingerprint))
                last_save = clock()
    flush(total)
    theory = _in_regime(sim.theory(), spec)
    return RunResult(series=series, theory=theory, summary=sim.summarize(series, theory),
                     distributions=sim.distributions())


def predict(spec: AnySpec | dict[str, Any]) -> dict[str, Any]:
    """Theory predictions for a spec, aligned on the steps the run will record (no simulation); the
    names its out-of-regime warnings omit are absent (:func:`smdengine.spec_warnings`)."""
    spec = parse_spec(spec)
    return _in_regime(model_of(spec).load_simulator().predict(spec), spec)


def _in_regime(theory: dict[str, Any], spec: AnySpec) -> dict[str, Any]:
    """``theory`` without the names the spec's out-of-regime warnings omit."""
    omitted = omitted_theory(spec)
    return {k: v for k, v in theory.items() if k not in omitted} if omitted else theory
