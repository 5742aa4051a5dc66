"""Fused sweeps (issue 19 point 3): specs that differ only in rates, scales and seeds run as one batched
run (smdengine.run_fused), and each member's result is bit for bit the result of running it alone —
series, theory, summary, the progress events it receives and the checkpoints it is given (a member
resumed alone from a fused checkpoint finishes exactly like its uninterrupted run)."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

import smdengine
from smdengine import Checkpoint, CheckpointHooks
from tests.conftest import small_spec
from tests.engine.checkpointing import assert_same_result, merged, same


@pytest.fixture(autouse=True)
def _bit_identity_needs_the_kernel_on_a_gpu(engine_device):
    if engine_device != "cpu" and importlib.util.find_spec("triton") is None:
        pytest.skip("on a GPU a fused member equals its run alone only with the Triton update "
                    "(torch's matmul there sums a row differently for another number of rows)")


SCHEDULE = [{"step": 100, "lr_factor": 0.1, "weight_decay_factor": 1.0}]


def spec(seed: int = 3, schedule_factor: float = 0.1, **params) -> dict:
    s = small_spec(**{"steps": 240, "record_every": 10, "trials": 32, **params})
    s["seed"] = seed
    s["params"].setdefault("lr_schedule", [{**SCHEDULE[0], "lr_factor": schedule_factor}])
    return s


# lr × weight_decay × seeds, noise and init scales, schedule factors and trial counts all differ
SGD_MEMBERS = [
    spec(seed=1, lr=0.1, weight_decay=0.01),
    spec(seed=2, lr=0.3, weight_decay=0.01, noise_std=0.5),
    spec(seed=3, lr=0.1, weight_decay=0.05, init_std=3.0, schedule_factor=0.5),
    spec(seed=4, lr=0.3, weight_decay=0.05, trials=7),
]
SGDM_MEMBERS = [spec(seed=5, momentum=0.9, lr=0.05), spec(seed=6, momentum=0.5, weight_decay=0.02)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("members", [SGD_MEMBERS, SGDM_MEMBERS], ids=["sgd", "sgdm"])
def test_each_member_is_its_run_alone(members, dtype):
    specs = [{**s, "params": {**s["params"], "dtype": dtype}} for s in members]
    events: list[list] = [[] for _ in specs]
    fused = smdengine.run_fused(specs, on_progress=[e.append for e in events], progress_interval=0.0)
    for s, got, got_events in zip(specs, fused, events, strict=True):
        alone_events: list = []
        alone = smdengine.run(s, on_progress=alone_events.append, progress_interval=0.0)
        assert got is not None
        assert_same_result(got, alone)
        assert same(merged(got_events), merged(alone_events))
    # and the members really differ (a fused run that copied one member everywhere would fail here)
    assert len({r.summary["au_rms"] for r in fused if r is not None}) == len(specs)


def test_a_member_resumes_alone_from_a_fused_checkpoint():
    taken: list[list[Checkpoint]] = [[] for _ in SGDM_MEMBERS]
    hooks = [CheckpointHooks(save=cps.append, interval=0.0) for cps in taken]
    smdengine.run_fused(SGDM_MEMBERS, checkpoints=hooks, progress_interval=0.0)
    for s, cps in zip(SGDM_MEMBERS, taken, strict=True):
        mid = Checkpoint.from_bytes(cps[len(cps) // 2].to_bytes())
        assert 0 < mid.step < s["params"]["steps"]
        resumed = smdengine.run(s, checkpoint=CheckpointHooks(resume=mid))
        assert_same_result(resumed, smdengine.run(s))


def test_a_fused_run_resumes_from_its_members_checkpoints():
    taken: list[list[Checkpoint]] = [[] for _ in SGD_MEMBERS]
    smdengine.run_fused(SGD_MEMBERS, checkpoints=[CheckpointHooks(save=cps.append, interval=0.0) for cps in taken],
                        progress_interval=0.0)
    k = len(taken[0]) // 3
    hooks = [CheckpointHooks(resume=cps[k]) for cps in taken]
    for got, s in zip(smdengine.run_fused(SGD_MEMBERS, checkpoints=hooks), SGD_MEMBERS, strict=True):
        assert got is not None
        assert_same_result(got, smdengine.run(s))


def test_a_stopped_member_leaves_the_others_untouched():
    stops = [None, lambda: True, None, None]
    fused = smdengine.run_fused(SGD_MEMBERS, should_stop=stops, progress_interval=0.0)
    assert fused[1] is None
    for c in (0, 2, 3):
        got = fused[c]
        assert got is not None
        assert_same_result(got, smdengine.run(SGD_MEMBERS[c]))
    with pytest.raises(smdengine.Cancelled):
        smdengine.run_fused(SGD_MEMBERS[:2], should_stop=[lambda: True] * 2, progress_interval=0.0)


def test_the_theory_runs_beside_the_updates_and_its_error_surfaces(monkeypatch):
    """A fused run computes its members' theory on a thread of its own while the updates go on (a run alone,
    in line); an error in it ends the run with that error once the updates are done, as it did when the
    theory came last. (When the thread starts to run against the updates is the scheduler's: not asserted.)"""
    import threading

    from smdengine.nrq.simulate import NRQRun

    seen: list[str] = []   # the thread each theory ran on
    updates = [0]
    theories, step_members = NRQRun.member_theories, NRQRun.step_members

    def counted(self, n, record):
        updates[0] += 1
        return step_members(self, n, record)

    def watched(self, members):
        seen.append(threading.current_thread().name)
        return theories(self, members)

    monkeypatch.setattr(NRQRun, "step_members", counted)
    monkeypatch.setattr(NRQRun, "member_theories", watched)
    smdengine.run_fused(SGD_MEMBERS[:2])
    every_call = updates[0]
    smdengine.run(SGD_MEMBERS[0])
    assert len(seen) == 2   # the fused run's theory came from its thread, not computed again in line
    assert seen[0] == "smd-theory" and seen[1] == threading.current_thread().name

    def failing(self, members):
        raise ValueError("kappa: expected > 0, got 0")

    monkeypatch.setattr(NRQRun, "member_theories", failing)
    updates[0] = 0
    with pytest.raises(ValueError, match="kappa"):
        smdengine.run_fused(SGD_MEMBERS[:2])
    assert updates[0] == every_call   # raised at the end, after every update


def test_a_fused_run_works_at_interpreter_exit():
    """A fused run from an atexit handler (where an executor refuses new work) still gets its theory, and
    the same as its run alone: a thread of its own, or in line where none can start."""
    import subprocess
    import sys

    script = ("import atexit, torch, smdengine\n"
              "from tests.engine.test_fused import SGD_MEMBERS\n"
              "def at_exit():\n"
              "    fused = smdengine.run_fused(SGD_MEMBERS[:2])\n"
              "    print('identical', fused[0].identical_to(smdengine.run(SGD_MEMBERS[0])))\n"
              "atexit.register(at_exit)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "identical True", done.stderr[-2000:]


def test_where_no_thread_can_start_the_theory_is_computed_in_line(monkeypatch):
    """Where a thread cannot start (Python refuses new threads late in its shutdown), the fused run computes
    its members' theory after the updates instead, and each member is still its run alone."""
    from smdengine import _driver

    def refused(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(_driver.threading.Thread, "start", refused)
    fused = smdengine.run_fused(SGD_MEMBERS[:2])
    for got, alone in zip(fused, SGD_MEMBERS[:2], strict=True):
        assert got is not None
        assert_same_result(got, smdengine.run(alone))


def test_fuse_key_groups_only_what_can_share_a_batch():
    key = smdengine.fuse_key
    assert len({key(s) for s in SGD_MEMBERS}) == 1
    assert key(SGD_MEMBERS[0]) != key(SGDM_MEMBERS[0])                 # SGD and SGDM: two code paths
    assert key(spec(dim=12)) != key(spec())                             # another shape
    assert key(spec(record_every=20)) != key(spec())
    assert key(spec(eig_high=3.0)) != key(spec())                       # another spectrum
    other_step = spec()
    other_step["params"]["lr_schedule"] = [{**SCHEDULE[0], "step": 120}]
    assert key(other_step) != key(spec())                               # phases start elsewhere
    assert key({"kind": "sde", "seed": 0, "params": {"model": "nrq", "steps": 10, "record_every": 1}}) is None
    with pytest.raises(ValueError, match="fuse_key"):
        smdengine.run_fused([spec(), spec(dim=12)])


def test_identical_is_bit_for_bit():
    """The comparison every identity claim rests on (fused, resumed, bench): NaN equals NaN at the same
    place, −0.0 is not 0.0, and a difference in any part of a result is seen."""
    from smdengine._runtime import RunResult, identical

    nan = float("nan")
    assert identical({"a": [1.0, nan], "b": ([2, 3],)}, {"a": [1.0, float("nan")], "b": ([2, 3],)})
    assert not identical([nan], [0.0]) and not identical([0.0], [nan])
    assert not identical([-0.0], [0.0]) and not identical([1], [1.0]) and not identical([1.0], [1.0, 2.0])
    run = smdengine.run(spec(seed=1))
    twin = RunResult(series=run.series, theory={**run.theory}, summary=run.summary,
                     distributions=run.distributions)
    assert twin.identical_to(run)
    last = run.theory["au_equilibrium"][-1]
    twin.theory["au_equilibrium"] = [*run.theory["au_equilibrium"][:-1], math.nextafter(last, math.inf)]   # one ulp
    assert not twin.identical_to(run)


@pytest.mark.parametrize("block_elements", [2**15, 700])   # 700: many blocks, cut differently in the batch
def test_batched_theory_is_each_members_alone(monkeypatch, block_elements):
    """The theory of a fused run's members, computed in one batch (predict_physics_many), is bit for bit each
    member's alone, for members the engine tests above do not reach: trial counts under and over the 1024
    nodes (the latter grouped), as many nodes with equal weights and with unequal ones, weight decay switched
    off by the schedule or never on, a rescale, many record steps, and blocks cut differently in the batch
    than alone."""
    import numpy as np

    from smdengine._registry import parse_spec
    from smdengine._runtime import identical
    from smdengine.nrq import predict

    monkeypatch.setattr(predict, "BLOCK_ELEMENTS", block_elements)
    schedule = [{"step": 300, "lr_factor": 0.5, "weight_decay_factor": 0.0},
                {"step": 700, "lr_factor": 0.1, "weight_decay_factor": 1.0, "rescale": True}]
    # 48 trials: 48 nodes of equal weights, as many as the law's (unequal) of a member without realized norms,
    # rows of one array; 1024 and 2048: 1024 nodes like 3001's grouped ones
    rates = [(0.1, 0.01, 1.0, 7), (0.3, 0.05, 0.5, 1000), (0.05, 0.0, 2.0, 3001), (0.2, 0.02, 1.0, 1000),
             (0.1, 0.02, 1.0, 1024), (0.1, 0.01, 1.0, 2048), (0.1, 0.01, 1.0, 48), (0.2, 0.01, 1.0, 48)]
    specs = []
    for i, (lr, wd, sigma, trials) in enumerate(rates):
        entries = [{**e, "weight_decay_factor": 1.0} for e in schedule] if wd == 0 else schedule
        specs.append(parse_spec(spec(seed=i, lr=lr, weight_decay=wd, noise_std=sigma, trials=trials, steps=1000,
                                     record_every=3, lr_schedule=entries)))
    params = [s.params for s in specs]
    norms = [np.random.default_rng(i).chisquare(10, p.trials) * 2.0 for i, p in enumerate(params)]
    norms[-1] = None   # the law of |X₀|² before a run: 48 nodes
    batch = predict.predict_physics_many(params, [0.0] * len(params), norms)
    for c, p in enumerate(params):
        assert identical(batch[c], predict.predict_physics_many([p], [0.0], [norms[c]])[0])
    assert len({repr(t["norm_sq_theory"]) for t in batch}) == len(params)   # the members differ
    # a wrong spec mix is refused rather than computed on the first member's steps
    other = parse_spec(spec(dim=12)).params
    with pytest.raises(ValueError, match="params"):
        predict.predict_physics_many([params[0], other], [0.0, 0.0], [None, None])
