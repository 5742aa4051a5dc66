"""Shared helpers of the checkpoint tests: interrupt a run at its k-th checkpoint, resume it, and
compare with an uninterrupted run exactly (NaN equal to NaN)."""
from __future__ import annotations

from collections.abc import Callable

import pytest

import smdengine
from smdengine import Checkpoint, CheckpointHooks
from smdengine._runtime import identical


class Interrupt(Exception):
    pass


same = identical   # exact equality, NaN equal to NaN (smdengine._runtime.identical)


def assert_same_result(got, want) -> None:
    assert same(got.series, want.series)
    assert same(got.theory, want.theory)
    assert same(got.summary, want.summary)
    assert same(got.distributions, want.distributions)


def merged(events) -> dict[str, list]:
    out: dict[str, list] = {}
    for e in events:
        for k, v in e.points.items():
            out.setdefault(k, []).extend(v)
    return out


def spans_updates(s: dict) -> bool:
    """Whether a run of ``s`` here makes several updates per step of the driver (the nrq kind's multi-step
    kernel, on CUDA with Triton): its checkpoints then fall at span ends, up to the next record step."""
    if s.get("kind") != "nrq":
        return False
    from smdengine import _driver
    from smdengine.nrq.stepper import NUMPY_STREAM, TORCH_STREAM, noise_stream

    params = s.get("params", {})
    device = _driver.resolve_device(s.get("device", "cpu")).type
    return noise_stream(device, params.get("dtype", "float64"), params.get("dim", 10)) not in (TORCH_STREAM,
                                                                                               NUMPY_STREAM)


def interrupted(s: dict, k: int, resume: Checkpoint | None = None,
                run: Callable = smdengine.run) -> tuple[bytes, list]:
    """Run with a checkpoint due at every progress event (from ``resume`` when given); stop at the first
    at update k or later (the k-th after ``resume`` where every update is a step of the driver) and
    return it as bytes (only that one is serialised: the others would only cost time)."""
    steps: list[int] = []
    saved: list[bytes] = []
    events: list = []
    first = resume.step if resume is not None else 0

    def save(cp: Checkpoint) -> None:
        steps.append(cp.step)
        if cp.step >= first + k:
            saved.append(cp.to_bytes())
            raise Interrupt

    with pytest.raises(Interrupt):
        run(s, on_progress=events.append, progress_interval=0.0,
            checkpoint=CheckpointHooks(save=save, interval=0.0, resume=resume))
    if spans_updates(s):   # resumable after every span: increasing, none past a record step
        every = s["params"].get("record_every", 1)
        assert steps == sorted(set(steps)) and steps[0] > first
        assert all((b - 1) // every == a // every for a, b in zip([first, *steps[:-1]], steps, strict=True))
    else:
        assert steps == list(range(first + 1, first + k + 1))   # resumable after every update
    return saved[-1], events


def resumed(s: dict, data: bytes, run: Callable = smdengine.run):
    cp = Checkpoint.from_bytes(data)
    events: list = []
    result = run(s, on_progress=events.append, checkpoint=CheckpointHooks(resume=cp))
    return cp, result, events


def check_resume(s: dict, k: int, want=None, run: Callable = smdengine.run, label_lag: int = 0):
    """Interrupt at update k, resume, and compare with ``want`` (default: an uninterrupted run).
    label_lag: how far before the checkpoint a point recorded after it may be labelled (windows
    labelled by their first step)."""
    want = run(s) if want is None else want
    data, before = interrupted(s, k, run=run)
    cp, got, after = resumed(s, data, run=run)
    assert cp.step == k or (spans_updates(s) and cp.step > k)
    k = cp.step
    assert_same_result(got, want)
    # the interrupted run delivered exactly the checkpoint's points; the resumed one exactly the rest
    assert same(merged(before), cp.series)
    rest = merged(after)
    assert cp.n_points + len(rest["step"]) == len(want.series["step"])
    assert same(rest, {key: values[cp.n_points:] for key, values in want.series.items()})
    assert all(step >= k - label_lag for step in rest["step"])
    return want
