"""Checkpoint/resume of the train kind: a run resumed from any update gives exactly the result of an
uninterrupted one, and its progress events carry exactly the points after the checkpoint."""
from __future__ import annotations

import pytest

import smdengine
from smdengine import Checkpoint, CheckpointHooks
from smdengine._driver import run as integrate
from tests.engine.checkpointing import assert_same_result, interrupted, merged, resumed
from tests.engine.checkpointing import check_resume as shared_check_resume


def spec(**params) -> dict:
    # 1347 // 32 = 42 updates per epoch: the runs cross an epoch boundary; schedule change at 30
    base = dict(dataset={"name": "digits"}, model="mlp", depth=1, width=16, norm="batch", batch_size=32,
                steps=60, record_every=5, eval_every=10, trials=2, lr=0.5, weight_decay=1e-2,
                schedule=[{"step": 30, "lr_factor": 0.25, "weight_decay_factor": 4.0, "rescale": True}])
    base.update(params)
    return {"kind": "train", "seed": 3, "device": "cpu", "params": base}


def check_resume(s: dict, k: int, run=smdengine.run):
    return shared_check_resume(s, k, run=run, label_lag=s["params"]["record_every"] - 1)


# steps: mid-window before the schedule change, at the window/phase start 30 (its rescale must be
# applied once, by the resumed run), just after it, mid-window after it across the epoch boundary
@pytest.mark.parametrize("k", [7, 30, 31, 43])
def test_sgd_batch_norm_resumes_exactly(k):
    check_resume(spec(), k)


@pytest.mark.parametrize("k", [12, 37])
def test_sgdm_with_trainable_affines_and_classifier_resumes_exactly(k):
    # scale_invariant=False: untracked parameters (classifier, norm affines) with their own velocities
    check_resume(spec(momentum=0.9, lr=0.05, scale_invariant=False), k)


def test_cnn_group_norm_momentum_resumes_exactly():
    check_resume(spec(model="cnn", depth=2, width=4, norm="group", norm_groups=2, momentum=0.9, lr=0.05,
                      steps=30, schedule=[{"step": 15, "lr_factor": 0.5, "rescale": True}]), 17)


def test_untracked_run_resumes_exactly():
    def run(s, **kw):
        return integrate(s, track=False, **kw)

    check_resume(spec(momentum=0.5), 33, run=run)


def test_a_resumed_run_checkpoints_and_resumes_again():
    s = spec(momentum=0.9, lr=0.05)
    want = smdengine.run(s)
    first, _ = interrupted(s, 13)
    second, _ = interrupted(s, 20, resume=Checkpoint.from_bytes(first))    # 20 updates more: at 33
    cp, got, _ = resumed(s, second)
    assert cp.step == 33
    assert_same_result(got, want)


def test_a_checkpoint_at_the_last_update_resumes_to_the_same_result():
    s = spec(steps=20, schedule=[])
    want = smdengine.run(s)
    data, _ = interrupted(s, 20)
    cp, got, after = resumed(s, data)
    assert cp.step == 20 and cp.n_points == 4
    assert_same_result(got, want)
    assert merged(after)["step"] == [20]   # only the final row: the state it resumed from


def test_checkpoints_happen_mid_window_with_long_windows():
    """With windows longer than the updates between events, checkpoints are still taken (any update)."""
    s = spec(steps=40, record_every=20, eval_every=20, schedule=[])
    steps: list[int] = []
    smdengine.run(s, progress_interval=0.0,
                  checkpoint=CheckpointHooks(save=lambda cp: steps.append(cp.step), interval=0.0))
    assert steps == list(range(1, 41))
