"""The one run loop of every simulator, :func:`run` (as torchsde writes ``integrate`` once and each
method only ``step``): resolve device and dtype, seed the generator, build the simulator, resume from
a checkpoint, then step, record, emit progress, poll for cancellation and take checkpoints, and at the
end record the final state (every series ends at ``steps``), flush, predict (less the theory names the
spec's out-of-regime warnings omit: :func:`smdengine._registry.spec_warnings`) and summarise. A fused run
(:func:`run_fused`) of a simulator whose theory needs only what its constructor built
(``Simulator.THEORY_AT_START``) computes its members' theory on a thread beside the loop. The simulator
protocol is :mod:`smdengine._simulator`.

Checkpoint contract, enforced here: a resume is refused unless its fingerprint matches this spec and
device type (:class:`IncompatibleCheckpoint`) — or, for a ``continuable`` model (``_declare.Model``), its lineage does
(the same spec but for its step count, which the resuming run may raise: a continuation) — and it holds
every series of the run (``ValueError``); a
checkpoint is taken only right after a progress event (so the points it holds were delivered), at most
every ``CheckpointHooks.interval`` seconds, between two updates, from ``Simulator.state()``; a resumed
run calls ``Simulator.load_state`` once before its first update and delivers only the points after it.

torch is imported when a run starts, not with this module.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
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
from smdengine._science import nonfinite_from
from smdengine._simulator import Context, Row, RowTable

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
    result = _integrate([spec], [on_progress], [should_stop], [checkpoint], progress_interval, data_dir, options)[0]
    assert result is not None   # a run of one member that stops raises Cancelled
    return result


def run_fused(specs: Sequence[AnySpec | dict[str, Any]], *,
              on_progress: Sequence[ProgressCallback | None] | None = None,
              should_stop: Sequence[StopCheck | None] | None = None, progress_interval: float = 0.5,
              data_dir: str | None = None,
              checkpoints: Sequence[CheckpointHooks | None] | None = None) -> list[RunResult | None]:
    """Run several experiments of equal :func:`fuse_key` as one batched run (a fused sweep). Member c
    gets ``on_progress[c]``, ``should_stop[c]`` and ``checkpoints[c]`` as :func:`run` would, and
    its result, points and checkpoints are bit for bit those of ``run(specs[c])`` on the same
    device. A member whose ``should_stop`` returns true gets no more events and None as its result
    (the others go on); when every member has stopped, :class:`Cancelled` is raised. Resuming needs
    every member's checkpoint, all at the same step."""
    n = len(specs)
    return _integrate(specs, list(on_progress or [None] * n), list(should_stop or [None] * n),
                      list(checkpoints or [None] * n), progress_interval, data_dir, {})


def fuse_key(spec: AnySpec | dict[str, Any]) -> str | None:
    """Specs with the same key, not None, can run together through :func:`run_fused`: they differ
    only in rates or scales (and seed). None: this spec always runs alone."""
    spec = parse_spec(spec)
    return model_of(spec).load_simulator().fuse_key(spec)


def _integrate(raw_specs: Sequence[AnySpec | dict[str, Any]], on_progress: list[ProgressCallback | None],
               should_stop: list[StopCheck | None], checkpoints: list[CheckpointHooks | None],
               progress_interval: float, data_dir: str | None, options: dict[str, Any]) -> list[RunResult | None]:
    """The loop of :func:`run` and :func:`run_fused`; one member is a plain run."""
    import torch

    specs = [parse_spec(s) for s in raw_specs]
    if not specs or not len(specs) == len(on_progress) == len(should_stop) == len(checkpoints):
        raise ValueError("run_fused: expected one callback, stop check and checkpoint hook per spec")
    fused = len(specs) > 1
    if fused:
        keys = {model_of(s).load_simulator().fuse_key(s) for s in specs}
        if None in keys or len(keys) > 1:
            raise ValueError("specs: expected specs that differ only in rates, scales and seeds (equal fuse_key), "
                             "got others")
    device = resolve_device(specs[0].device)
    hooks = [h if h is not None else CheckpointHooks() for h in checkpoints]
    simulator = model_of(specs[0]).load_simulator()
    for spec, h in zip(specs, hooks, strict=True):
        if h.save is None and h.resume is None:
            continue   # no checkpoint to make or match: a fused sweep's members skip two JSON dumps each
        h.fingerprint = fingerprint(spec.model_dump_json(), device.type)
        h.lineage = fingerprint(spec.model_dump_json(exclude={"params": {"steps"}}), device.type)
        resume = h.resume
        if resume is not None and resume.fingerprint != h.fingerprint and not (
                model_of(spec).continuable and resume.lineage == h.lineage):
            raise IncompatibleCheckpoint("checkpoint: expected one made by this spec on this device type, "
                                         "got one from another run")
    resumed = [h.resume for h in hooks]
    if len({r.step if r is not None else None for r in resumed}) > 1:
        raise ValueError("checkpoints: expected every member to resume from the same step, or none")
    dtype = getattr(torch, specs[0].params.dtype)   # float64 or float32
    ctxs = [Context(device, dtype, torch.Generator(device=device).manual_seed(spec.seed), data_dir,
                    checkpointing=h.save is not None) for spec, h in zip(specs, hooks, strict=True)]
    sim = simulator.fuse(list(specs), ctxs) if fused else simulator(specs[0], ctxs[0], **options)
    total, every, names = sim.total_steps, sim.record_every, tuple(sim.names)
    members = range(len(specs))
    # the series; rows (name → 0-d tensor: one number per point, a mean over trials; 1-d: a list per
    # point) are buffered on the device until an event, so that recording does not synchronise with an
    # accelerator every point
    series: list[dict[str, list]] = [{"step": [], **{m: [] for m in names}} for _ in members]
    buffered: list[dict[str, list]] = [{k: [] for k in s} for s in series]
    start = 0
    for c, checkpoint in enumerate(resumed):
        if checkpoint is not None:
            if checkpoint.step > total:
                raise IncompatibleCheckpoint(f"checkpoint: expected one at most {total} steps in, got {checkpoint.step}")
            missing = set(series[c]) - set(checkpoint.series)
            if missing:
                raise ValueError(f"checkpoint: expected series {sorted(series[c])}, got none for {sorted(missing)}")
            series[c] = {k: list(checkpoint.series[k]) for k in series[c]}
            sim.member_load_state(c, checkpoint.state, checkpoint.step)
            start = checkpoint.step
    live = list(members)   # members not stopped
    tables: list[tuple[int, RowTable]] = []   # buffered record steps whose rows came as one table

    def take(label: int, rows: list[Row] | RowTable) -> None:
        """Buffer the rows of record step ``label`` (a list of rows or one table; never both in a run)."""
        table = isinstance(rows, RowTable)
        if (table and any(buffered[c]["step"] for c in live)) or (not table and tables):   # one flush's order
            raise RuntimeError("rows: expected a RowTable at every record step and at the end, or at none")
        if isinstance(rows, RowTable):
            tables.append((label, rows))
            return
        for c in live:
            row, buffer = rows[c], buffered[c]
            buffer["step"].append(label)
            for name in names:
                buffer[name].append(row[name])

    def flush(step: int) -> None:
        """Move the buffered rows into the series and report them as one progress event per member."""
        from_tables = _table_points(tables, live, names) if tables else None
        tables.clear()
        for c in live:
            if from_tables is not None:
                points = from_tables[c]
            else:
                points = {k: rows if k == "step" else torch.stack(rows).tolist() if rows else []
                          for k, rows in buffered[c].items()}
                buffered[c] = {k: [] for k in buffered[c]}
            for key, values in points.items():
                series[c][key].extend(values)
            report = on_progress[c]
            if report is not None:
                report(Progress(step=step, total_steps=total, points=points))

    def _checkpoint(c: int, done: int, points: dict[str, list] | None = None) -> Checkpoint:
        points = series[c] if points is None else points
        return Checkpoint(step=done, n_points=len(points["step"]), state=sim.member_state(c),
                          series={k: list(v) for k, v in points.items()}, fingerprint=hooks[c].fingerprint,
                          lineage=hooks[c].lineage)

    def theories(chosen: list[int]) -> list[dict[str, Any]]:
        """The theory of each of ``chosen``, less the names its spec's out-of-regime warnings omit."""
        return [_in_regime(own, specs[c]) for c, own in zip(chosen, sim.member_theories(chosen), strict=True)]

    # a fused sweep's theory (every member's: milliseconds) beside the loop, where it would otherwise follow the
    # last update: on an accelerator the host only launches work. One run's is a fraction of a millisecond,
    # less than the thread costs it (bench/README.md, "Seventh round"). It is held from then on (every member's,
    # also one that stops), where it used to exist only at the end.
    early = _beside(theories, list(members)) if fused and sim.THEORY_AT_START else None
    step, span, clock = sim.step_members, sim.span, time.monotonic
    last_emit = last_save = clock()
    n = start
    while n < total:
        done = n + span(n)   # a span never crosses a record step (Simulator.span)
        rows = step(n, n % every == 0)
        if rows is not None:
            take(n - n % every, rows)
        n = done
        if clock() - last_emit >= progress_interval:
            flush(done)
            last_emit = clock()
            live = [c for c in live if not ((stop := should_stop[c]) is not None and stop())]
            if not live:
                raise Cancelled(done)
            saving = [c for c in live if hooks[c].save is not None]
            if saving and clock() - last_save >= min(hooks[c].interval for c in saving):
                for c in saving:
                    save = hooks[c].save
                    assert save is not None
                    save(_checkpoint(c, done))
                last_save = clock()
    finals = sim.final_members()   # the state after the last update: every series ends at `total`
    for got in [finals.names] if isinstance(finals, RowTable) else [list(finals[c]) for c in live]:
        if set(got) != set(names):
            raise RuntimeError(f"final row: expected the names {sorted(names)}, got {sorted(got)}")
    take(total, finals)
    flush(total)
    # what precedes the final row: a continuation's checkpoint (its longer run records a regular row at
    # `total`, or none), and what summaries average (Simulator.final_row)
    regular = {c: {k: v[:-1] for k, v in series[c].items()} for c in live}
    for c in live:   # the state after the last update, to continue from (CheckpointHooks.final)
        save = hooks[c].save
        if hooks[c].final and save is not None:
            save(_checkpoint(c, total, regular[c]))
    results: list[RunResult | None] = [None] * len(specs)
    computed = None if early is None else early.result()   # every member's
    for c, theory in zip(live, theories(live) if computed is None else [computed[c] for c in live], strict=True):
        points = len(series[c]["step"])
        aligned = {k: v[:-1] if isinstance(v, list) and len(v) == points else v for k, v in theory.items()}
        summary = {**sim.member_summary(c, regular[c], aligned), **nonfinite_from(regular[c], sim.FINITE)}
        results[c] = RunResult(series=series[c], theory=theory, summary=summary,
                               distributions=sim.member_distributions(c))
    return results


def _beside(fn: Callable[[list[int]], list[dict[str, Any]]],
            members: list[int]) -> Future[list[dict[str, Any]]] | None:
    """``fn(members)`` on a thread of its own; its result, or its exception, comes with ``.result()``. None
    where no thread can start (a run during the interpreter's shutdown): the caller computes it in line. A
    daemon thread: a run that stops first leaves it to finish alone, its result unread, and it never holds
    up the interpreter's exit."""
    future: Future[list[dict[str, Any]]] = Future()

    def work() -> None:
        try:
            future.set_result(fn(members))
        except BaseException as exc:   # noqa: BLE001 — handed to the caller, raised by .result()
            future.set_exception(exc)

    try:
        threading.Thread(target=work, name="smd-theory", daemon=True).start()
    except RuntimeError:   # "can't create new thread at interpreter shutdown"
        return None
    return future


def _table_points(tables: list[tuple[int, RowTable]], live: list[int],
                  names: Sequence[str]) -> dict[int, dict[str, list]]:
    """Each live member's points of the buffered tables: one stack and one copy to the host for all of them."""
    import torch

    first = tables[0][1].names
    for _, table in tables:
        if table.names != first or set(first) != set(names):
            raise RuntimeError(f"rows: expected the names {sorted(names)}, got {sorted(table.names)}")
    values = torch.stack([table.values for _, table in tables], dim=2).tolist()   # [member][column][record]
    labels = [label for label, _ in tables]
    column = {name: k for k, name in enumerate(first)}
    return {c: {"step": list(labels), **{name: values[c][column[name]] for name in names}} for c in live}


def predict(spec: AnySpec | dict[str, Any]) -> dict[str, Any]:
    """Theory predictions for a spec, aligned on the steps the run will record (no simulation); the
    names its out-of-regime warnings omit are absent (:func:`smdengine.spec_warnings`)."""
    spec = parse_spec(spec)
    return _in_regime(model_of(spec).load_simulator().predict(spec), spec)


def _in_regime(theory: dict[str, Any], spec: AnySpec) -> dict[str, Any]:
    """``theory`` without the names the spec's out-of-regime warnings omit."""
    omitted = omitted_theory(spec)
    return {k: v for k, v in theory.items() if k not in omitted} if omitted else theory
