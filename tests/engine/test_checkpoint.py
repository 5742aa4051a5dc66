"""Checkpoint/resume of the ``nrq`` kind and the four ``sde`` models: a run resumed from a checkpoint
gives exactly the result of an uninterrupted one (series, theory, summary, distributions), and its
progress events carry exactly the points after the checkpoint. Checkpoints from another spec or
unreadable bytes are refused."""
from __future__ import annotations

import functools
import json

import pytest

import smdengine
from smdengine import Checkpoint, CheckpointHooks, IncompatibleCheckpoint
from smdengine._registry import REGISTRY
from smdengine._simulator import Simulator
from smdengine.sde import norm_map
from tests.conftest import small_spec
from tests.engine.checkpointing import assert_same_result, interrupted, resumed
from tests.engine.checkpointing import check_resume as shared_check_resume

# ----------------------------------------------------------------------------- specs


def nrq(**params) -> dict:
    return small_spec(**{"trials": 16, "steps": 300, **params})


def sde(model: str, seed: int = 3, **params) -> dict:
    return {"kind": "sde", "seed": seed, "device": "cpu", "params": dict(model=model, **params)}


def sde_nrq(**params) -> dict:
    base = dict(dim=10, eig_low=1.0, eig_high=2.0, noise_std=1.0, lr=0.1, weight_decay=0.01, trials=16,
                steps=200, record_every=10, f_bins=10)
    base.update(params)
    return sde("nrq", **base)


def normalized_linear(**params) -> dict:
    base = dict(trials=16, steps=200, record_every=20, record_trials=8)
    base.update(params)
    return sde("normalized_linear", **base)


NOISY = dict(noise="uniform", noise_half_width=3.0, sine_amplitude=1.0, sine_period=300.0)


def norm_map_spec(**params) -> dict:
    # trials 64: chunks of 256 steps; the SGDM map uses the matmul stepper up to MM_MAX_TRIALS
    base = dict(trials=64, steps=1000, record_every=10, unit_grad_sq=NOISY)
    base.update(params)
    return sde("norm_map", **base)


COLUMNS_TRIALS = norm_map.MM_MAX_TRIALS + 36    # 100 trials: the columns stepper, chunks of 163 steps


def toy2d(**params) -> dict:
    base = dict(center=(0.05, 0.5), trials=50, steps=60, record_every=2)
    base.update(params)
    return sde("toy2d", **base)


# ----------------------------------------------------------------------------- helpers


@functools.cache
def _uninterrupted(spec_json: str):
    return smdengine.run(json.loads(spec_json))


def uninterrupted(s: dict):
    """The result of an uninterrupted run (computed once per spec)."""
    return _uninterrupted(json.dumps(s, sort_keys=True))


def check_resume(s: dict, k: int) -> None:
    shared_check_resume(s, k, want=uninterrupted(s))


# ----------------------------------------------------------------------------- the nrq kind

NRQ_SCHEDULE = [{"step": 150, "lr_factor": 0.1, "weight_decay_factor": 2.0, "rescale": True}]


# mid-run before the schedule change; at the phase start 150 (its rescale must be applied once, by
# the resumed run); just after it; mid-run after it
@pytest.mark.parametrize("k", [77, 150, 151, 233])
def test_nrq_sgdm_with_a_rescaling_schedule_resumes_exactly(k):
    check_resume(nrq(momentum=0.9, lr_schedule=NRQ_SCHEDULE), k)


def test_nrq_sgd_resumes_exactly():
    check_resume(nrq(), 123)


# ----------------------------------------------------------------------------- sde: nrq


# before the tail, and in the tail (whose f histogram counts must carry over)
@pytest.mark.parametrize("k", [64, 155])
@pytest.mark.parametrize("dt", [1.0, 0.25])
def test_sde_nrq_resumes_exactly_with_its_histogram(dt, k):
    check_resume(sde_nrq(dt=dt), k)


def test_sde_nrq_with_a_rescaling_schedule_resumes_exactly_across_the_phase_change():
    s = sde_nrq(dt=0.5, lr_schedule=[{"step": 100, "lr_factor": 0.5, "rescale": True}])
    for k in (100, 101, 170):
        check_resume(s, k)


# ----------------------------------------------------------------------------- sde: normalized_linear


@pytest.mark.parametrize("params", [dict(integrator="sgd"), dict(integrator="sde", dt=0.5)], ids=["sgd", "sde"])
def test_normalized_linear_resumes_exactly(params):
    check_resume(normalized_linear(**params), 93)


# ----------------------------------------------------------------------------- sde: norm_map


# chunks of 256 steps (trials 64): at a chunk boundary, and mid-chunk after an odd and an even
# number of its rows (the SGDM matmul stepper swaps two buffers every step), and at the last step
@pytest.mark.parametrize("k", [256, 300, 301, 1000])
@pytest.mark.parametrize("momentum", [0.0, 0.9], ids=["sgd", "sgdm_matmul"])
def test_norm_map_resumes_exactly(momentum, k):
    check_resume(norm_map_spec(momentum=momentum), k)


# chunks of 163 steps (100 trials): the columns stepper swaps q with a spare column every step
@pytest.mark.parametrize("k", [163, 200, 201])
def test_norm_map_sgdm_columns_resumes_exactly(k):
    check_resume(norm_map_spec(momentum=0.9, trials=COLUMNS_TRIALS, steps=600), k)


def test_norm_map_without_noise_resumes_exactly():
    check_resume(norm_map_spec(momentum=0.5, unit_grad_sq=dict(mean=10.0, sine_amplitude=2.0, sine_period=90.0)),
                 417)


@pytest.mark.parametrize("trials", [64, COLUMNS_TRIALS], ids=["matmul", "columns"])
def test_norm_map_resumed_mid_chunk_checkpoints_and_resumes_again(trials):
    """The second checkpoint is taken in the partial chunk the resumed run started with."""
    s = norm_map_spec(momentum=0.9, trials=trials, steps=600)
    want = uninterrupted(s)
    first, _ = interrupted(s, 301)
    second, _ = interrupted(s, 20, resume=Checkpoint.from_bytes(first))   # 20 steps more: at 321
    cp, got, _ = resumed(s, second)
    assert cp.step == 321
    assert_same_result(got, want)


def test_norm_map_checkpoints_at_every_step_not_only_at_chunk_boundaries():
    s = norm_map_spec(steps=600)
    steps: list[int] = []
    smdengine.run(s, progress_interval=0.0,
                  checkpoint=CheckpointHooks(save=lambda cp: steps.append(cp.step), interval=0.0))
    assert steps == list(range(1, 601))


# ----------------------------------------------------------------------------- sde: toy2d


@pytest.mark.parametrize("params", [dict(integrator="gd"), dict(integrator="flow", dt=0.1)], ids=["gd", "flow"])
def test_toy2d_resumes_exactly(params):
    check_resume(toy2d(**params), 25)


# ----------------------------------------------------------------------------- refusals and contract


@pytest.mark.parametrize("make", [nrq, sde_nrq, normalized_linear, norm_map_spec, toy2d],
                         ids=["nrq", "sde_nrq", "normalized_linear", "norm_map", "toy2d"])
def test_a_checkpoint_of_another_spec_is_refused(make):
    data, _ = interrupted(make(), 5)
    other = make()
    other["seed"] = 4
    with pytest.raises(IncompatibleCheckpoint):
        smdengine.run(other, checkpoint=CheckpointHooks(resume=Checkpoint.from_bytes(data)))


@pytest.mark.parametrize("data", [b"", b"not a checkpoint", bytes(range(256))])
def test_unreadable_bytes_are_refused(data):
    with pytest.raises(IncompatibleCheckpoint):
        Checkpoint.from_bytes(data)


MODELS = [model for kind in REGISTRY.values() for model in kind.models]


@pytest.mark.parametrize("model", MODELS, ids=[m.simulator for m in MODELS])
def test_every_registered_simulator_implements_the_checkpoint_contract(model):
    """The contract (smdengine._simulator) is enforced by the one driver loop; every registered
    simulator is a Simulator with state() and load_state() implemented."""
    cls = model.load_simulator()
    assert issubclass(cls, Simulator) and not cls.__abstractmethods__
