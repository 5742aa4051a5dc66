"""Continuing a finished run (issue 20): a run saves its final state (CheckpointHooks.final), and the same
spec with more steps resumes from it; for a continuable simulator (nrq) the result is exactly that of one
run of the total length — series, theory, summary. Others, and checkpoints past the new end, are refused."""
from __future__ import annotations

import pytest

import smdengine
from smdengine import Checkpoint, CheckpointHooks, IncompatibleCheckpoint
from tests.conftest import small_spec
from tests.engine.checkpointing import assert_same_result


def with_steps(spec: dict, steps: int) -> dict:
    return {**spec, "params": {**spec["params"], "steps": steps}}


def final_checkpoint(spec: dict) -> Checkpoint:
    kept: list[Checkpoint] = []
    smdengine.run(spec, checkpoint=CheckpointHooks(save=kept.append, interval=1e9, final=True))
    assert kept[-1].step == spec["params"]["steps"]
    return Checkpoint.from_bytes(kept[-1].to_bytes())


@pytest.mark.parametrize("params", [dict(), dict(momentum=0.9, dtype="float32"),
                                    dict(lr_schedule=[{"step": 150, "lr_factor": 0.2}])], ids=["sgd", "sgdm", "schedule"])
def test_a_continued_run_is_one_run_of_the_total_length(params):
    first = small_spec(trials=16, steps=300, record_every=20, **params)
    total = with_steps(first, 700)
    continued = smdengine.run(total, checkpoint=CheckpointHooks(resume=final_checkpoint(first)))
    assert_same_result(continued, smdengine.run(total))
    # and twice over: 300 → 500 → 700
    kept: list[Checkpoint] = []
    smdengine.run(with_steps(first, 500), checkpoint=CheckpointHooks(resume=final_checkpoint(first), save=kept.append,
                                                                      interval=1e9, final=True))
    assert_same_result(smdengine.run(total, checkpoint=CheckpointHooks(resume=kept[-1])), smdengine.run(total))


def test_only_a_continuable_run_continues_and_never_backwards():
    first = small_spec(trials=8, steps=300, record_every=20)
    with pytest.raises(IncompatibleCheckpoint, match="at most 200 steps"):
        smdengine.run(with_steps(first, 200), checkpoint=CheckpointHooks(resume=final_checkpoint(first)))
    other = small_spec(trials=8, steps=600, record_every=20, lr=0.2)   # not only the step count differs
    with pytest.raises(IncompatibleCheckpoint):
        smdengine.run(other, checkpoint=CheckpointHooks(resume=final_checkpoint(first)))
    sde = {"kind": "sde", "seed": 1, "device": "cpu",
           "params": {"model": "nrq", "trials": 8, "steps": 100, "record_every": 10, "f_bins": 10}}
    with pytest.raises(IncompatibleCheckpoint):   # its histogram starts at a tail the step count sets
        smdengine.run(with_steps(sde, 200), checkpoint=CheckpointHooks(resume=final_checkpoint(sde)))
