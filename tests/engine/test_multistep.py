"""The multi-step nrq kernel and its counter-based noise stream (:mod:`smdengine.nrq._multistep`), run
where Triton can run it: on CUDA (pytest ``--device cuda``, where the engine uses it by default) or on
the CPU under ``TRITON_INTERPRET=1`` (the engine then asked for it with ``Stepper.KERNEL = True``);
skipped where Triton is not installed. The stream's oracle: tests/engine/test_noise_stream.py."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

import smdengine
from smdengine import Checkpoint, CheckpointHooks, IncompatibleCheckpoint
from smdengine.nrq.stepper import Stepper
from tests.engine.checkpointing import assert_same_result, check_resume, interrupted
from tests.engine.test_noise_stream import oracle_radii_and_normals

# ----------------------------------------------------------------------------- the kernel

triton = pytest.importorskip("triton")
from smdengine.nrq import _multistep  # noqa: E402
from smdengine.nrq._fused_step import update  # noqa: E402
from smdengine.nrq.stepper import record_columns  # noqa: E402


@pytest.fixture
def device(engine_device, monkeypatch) -> torch.device:
    if engine_device == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("the Triton kernels run on CUDA (--device cuda) or under TRITON_INTERPRET=1")
        monkeypatch.setattr(Stepper, "KERNEL", True)   # the engine's runs use the kernels on the CPU too
    return torch.device(engine_device)


def keys(device, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    signed = seed - 2**64 if seed >= 2**63 else seed
    return (torch.full((n,), signed, dtype=torch.int64, device=device),
            torch.arange(n, dtype=torch.int32, device=device))


# seeds below and above 2³², and one whose int64 form is negative; p divisible by 8 and not, and p < 8
@pytest.mark.parametrize(("seed", "p"), [(0, 16), (12345, 10), (2**40 + 7, 7), (2**63 + 5, 13), (5, 100)])
def test_the_stream_is_the_oracles(device, seed, p):
    seeds, trials = keys(device, 9, seed)
    got = _multistep.draw(seeds, trials, 1234, p, torch.float32).cpu().double().numpy()
    r, want = oracle_radii_and_normals(seed, np.arange(9), 1234, p)
    # The same words and float32 inputs; float32 functions against float64 ones: a few float32 ulp of r ≤ 6.8
    # (4e-6). On the GPU its approximate functions: sin and cos absolute error ≤ 2⁻²¹·⁴¹ on [−π, π], times r
    # (≤ 2.5e-6); log₂ absolute error ≤ 2⁻²² on [½, 2] (2 ulp below), so −2 ln u is off by δ ≤ 2 ln 2·2⁻²²
    # = 3.3e-7 and r = √(−2 ln u) by ≤ min(δ/2r, √δ): large only where u is within ~10⁻⁴ of 1.
    delta = 2 * math.log(2) * 2.0**-22
    tol = 7e-6 + np.minimum(delta / (2 * np.maximum(r, 1e-30)), math.sqrt(delta))
    assert np.all(np.abs(got - want) <= tol), np.max(np.abs(got - want) - tol)


def test_the_stream_is_standard_normal_and_independent_across_keys(device):
    n, p = 40, 1000   # 4·10⁴ normals (one program per row): the standard error of a mean 0.005, of a variance 0.0071
    seeds, trials = keys(device, n, 7)
    eps = _multistep.draw(seeds, trials, 0, p, torch.float64).cpu()
    assert abs(eps.mean().item()) < 4 * 0.005
    assert abs(eps.var().item() - 1.0) < 4 * 0.0071
    # P(|ε| > 2) = 0.0455, se √(0.0455·0.9545/(4·10⁴)) = 1.04e-3
    assert abs((eps.abs() > 2).double().mean().item() - 0.0455) < 4 * 1.04e-3
    # another step, trial or seed draws other numbers: correlation ~ N(0, 1/√(4·10⁴))
    later = _multistep.draw(seeds, trials, 1, p, torch.float64).cpu()
    other = _multistep.draw(keys(device, n, 8)[0], trials, 0, p, torch.float64).cpu()
    shifted = _multistep.draw(seeds, trials + 1, 0, p, torch.float64).cpu()
    for b in (later, other, shifted):
        assert abs(torch.corrcoef(torch.stack([eps.flatten(), b.flatten()]))[0, 1].item()) < 4 / math.sqrt(n * p)
    # the two Philox calls of a column (counter word 3 = 0 and 1; blocks 0–3 and 4–7, Q = 128 at p = 1000)
    first, second = eps[:, :4 * 128 - 24].flatten(), eps[:, 4 * 128:].flatten()
    assert abs(torch.corrcoef(torch.stack([first, second]))[0, 1].item()) < 4 / math.sqrt(first.numel())


def state(device, n: int, p: int, dtype, momentum: float, seed: int = 0):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(n, p, generator=gen, dtype=dtype, device=device)
    v = 0.1 * torch.randn(n, p, generator=gen, dtype=dtype, device=device) if momentum else None
    a = torch.linspace(1.0, 2.0, p, dtype=dtype, device=device)
    lr = 0.05 + 0.1 * torch.rand(n, 1, generator=gen, dtype=dtype, device=device)   # per-row rates
    wd = torch.full((n, 1), 0.01, dtype=dtype, device=device)
    sigma = torch.full((n, 1), 0.7, dtype=dtype, device=device)
    columns = ((lr, wd, sigma, torch.full((n, 1), momentum, dtype=dtype, device=device)) if momentum
               else (lr, 1.0 - lr * wd, lr * sigma))
    return x, v, a, columns


CASES = [(p, dtype, momentum) for p in (10, 100) for dtype in (torch.float32, torch.float64) for momentum in (0.0, 0.9)]


@pytest.mark.parametrize(("p", "dtype", "momentum"), CASES)
def test_k_updates_in_one_launch_are_k_updates_of_the_single_step_kernel(device, p, dtype, momentum):
    n, k = 7, 4
    x, v, a, columns = state(device, n, p, dtype, momentum)
    seeds, trials = keys(device, n, 99)
    want_x, want_v = x.clone(), None if v is None else v.clone()
    before = want_x.clone()
    for step in range(10, 10 + k):   # the single-step kernel fed the stream's ε
        sq = update(want_x, _multistep.draw(seeds, trials, step, p, dtype), want_v, a, x.new_empty(n, 2), columns)
        if step == 10:
            want_rec = record_columns(before, want_x, sq)
    rec = x.new_empty(n, 5)
    _multistep.advance(x, v, a, seeds, trials, columns, 10, k, rec)
    # the same formulas in another summation order: a few ulp of |X|² ~ p and of the update ~ η
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-14}
    torch.testing.assert_close(x, want_x, **tol)
    torch.testing.assert_close(rec, want_rec, **tol)
    if momentum:
        torch.testing.assert_close(v, want_v, **tol)


@pytest.mark.parametrize(("p", "momentum"), [(10, 0.0), (100, 0.9)])
def test_where_a_launch_starts_and_ends_changes_no_bit(device, p, momentum):
    x, v, a, columns = state(device, 5, p, torch.float32, momentum)
    seeds, trials = keys(device, 5, 3)
    whole_x, whole_v = x.clone(), None if v is None else v.clone()
    _multistep.advance(whole_x, whole_v, a, seeds, trials, columns, 0, 6, None)
    for cut in (1, 4):
        part_x, part_v = x.clone(), None if v is None else v.clone()
        _multistep.advance(part_x, part_v, a, seeds, trials, columns, 0, cut, x.new_empty(5, 5))
        _multistep.advance(part_x, part_v, a, seeds, trials, columns, cut, 6 - cut, None)
        assert torch.equal(part_x, whole_x)
        if momentum:
            assert torch.equal(part_v, whole_v)


@pytest.mark.parametrize("p", [10, 100])
def test_a_row_does_not_depend_on_the_batch(device, p):
    n = 37
    x, v, a, columns = state(device, n, p, torch.float32, 0.9)
    gen = torch.Generator(device=device).manual_seed(4)
    seeds = torch.randint(0, 2**62, (n,), generator=gen, device=device)
    trials = torch.randint(0, 10**6, (n,), generator=gen, device=device, dtype=torch.int32)
    all_x, all_v, all_rec = x.clone(), v.clone(), x.new_empty(n, 5)
    _multistep.advance(all_x, all_v, a, seeds, trials, columns, 5, 3, all_rec)
    for rows in (slice(0, 1), slice(3, 20), slice(30, 37)):   # alone: at offset 0, as a run's own tensor
        part_x, part_v, part_rec = x[rows].clone(), v[rows].clone(), x.new_empty(rows.stop - rows.start, 5)
        _multistep.advance(part_x, part_v, a, seeds[rows].clone(), trials[rows].clone(),
                           tuple(c[rows].clone() for c in columns), 5, 3, part_rec)
        assert torch.equal(part_x, all_x[rows])
        assert torch.equal(part_v, all_v[rows])
        assert torch.equal(part_rec, all_rec[rows])


def test_segment_means_are_each_members_mean_in_an_order_fixed_by_its_size(device):
    gen = torch.Generator(device=device).manual_seed(0)
    table = torch.randn(700, 6, generator=gen, dtype=torch.float64, device=device)
    sizes = [300, 1, 399]
    starts = torch.tensor([0, 300, 301], device=device)
    got = _multistep.segment_means(table, starts, torch.tensor(sizes, device=device))
    for m, (start, size) in enumerate(zip(starts.tolist(), sizes, strict=True)):
        torch.testing.assert_close(got[m], table[start:start + size].mean(dim=0), rtol=1e-13, atol=1e-15)
        alone = _multistep.segment_means(table[start:start + size].clone(), torch.tensor([0], device=device),
                                         torch.tensor([size], device=device))
        assert torch.equal(alone[0], got[m])


# ----------------------------------------------------------------------------- the engine on the kernel


def spec(seed: int = 1, **params) -> dict:
    base = {"dim": 10, "trials": 8, "steps": 37, "record_every": 5, "lr": 0.1, "weight_decay": 0.01,
            "noise_std": 1.0, "dtype": "float32"}
    return {"kind": "nrq", "seed": seed, "device": "cpu", "params": {**base, **params}}


SCHEDULE = [{"step": 12, "lr_factor": 0.1, "weight_decay_factor": 2.0, "rescale": True}]


def test_a_run_names_the_counter_stream_and_records_every_window(device):
    s = spec(lr_schedule=SCHEDULE, momentum=0.9)
    assert smdengine.provenance(s)["noise_stream"] == _multistep.NOISE_STREAM
    result = smdengine.run(s)
    assert result.series["step"] == [*range(0, 37, 5), 37]   # and the state after the last update
    assert all(math.isfinite(v) for v in result.series["au_rms"][:-1]) and math.isnan(result.series["au_rms"][-1])
    assert all(math.isfinite(v) for v in result.series["risk"])


def test_fused_members_are_their_runs_alone(device):
    specs = [spec(1), spec(2, lr=0.2, trials=5), spec(3**30, lr=0.05, weight_decay=0.02, trials=11)]
    fused = smdengine.run_fused(specs)
    for got, s in zip(fused, specs, strict=True):
        assert_same_result(got, smdengine.run(s))


@pytest.mark.parametrize("k", [7, 12, 20])   # mid-window; at the phase start (the rescale once); after it
def test_a_run_resumed_mid_window_is_the_uninterrupted_run(device, k):
    check_resume(spec(lr_schedule=SCHEDULE, momentum=0.9), k)


def test_spans_never_cross_a_record_step_or_a_phase_start(device):
    steps: list[int] = []
    smdengine.run(spec(lr_schedule=SCHEDULE), progress_interval=0.0,
                  checkpoint=CheckpointHooks(save=lambda cp: steps.append(cp.step), interval=0.0))
    assert steps == [5, 10, 12, 15, 20, 25, 30, 35, 37]


def test_a_checkpoint_of_another_noise_stream_is_refused(device, monkeypatch):
    s = spec()
    data, _ = interrupted(s, 5)
    monkeypatch.setattr(Stepper, "KERNEL", False)   # the torch generator's stream, one update per launch
    with pytest.raises(IncompatibleCheckpoint, match="noise stream"):
        smdengine.run(s, checkpoint=CheckpointHooks(resume=Checkpoint.from_bytes(data)))
