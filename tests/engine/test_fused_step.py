"""The Triton update (:mod:`smdengine.nrq._fused_step`), run where Triton can run it: on CUDA (pytest
``--device cuda``) or on the CPU under ``TRITON_INTERPRET=1``; skipped where Triton is not installed
(it is not a dependency: CI has no GPU). It agrees with the torch update to rounding, and a row's result
does not depend on how many rows are updated with it — what makes a fused member its run alone on a GPU
(tests/engine/test_fused.py checks that end to end)."""
from __future__ import annotations

import os

import pytest
import torch

from smdengine.nrq.stepper import Stepper

pytest.importorskip("triton")
from smdengine.nrq._fused_step import update  # noqa: E402

CASES = [(p, dtype, momentum) for p in (10, 100, 1000, 3000) for dtype in (torch.float32, torch.float64)
         for momentum in (0.0, 0.9)]   # p = 3000: two chunks of the tile


@pytest.fixture
def device(engine_device) -> torch.device:
    if engine_device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton update runs on CUDA (--device cuda) or under TRITON_INTERPRET=1")
    return torch.device(engine_device)


def stepper(x: torch.Tensor, momentum: float, kernel: bool) -> Stepper:
    a = torch.linspace(1.0, 2.0, x.shape[1], dtype=x.dtype, device=x.device)
    gen = torch.Generator(device=x.device).manual_seed(1)
    saved, Stepper.KERNEL = Stepper.KERNEL, kernel
    try:
        st = Stepper(x.clone(), a, [0.7], [momentum], [gen], [x.shape[0]])
    finally:
        Stepper.KERNEL = saved
    assert (st.kernel is not None) == kernel
    st.numpy_gens = None   # both draw from the torch generator
    st.rates = [(0.1, 0.01)]
    st.set_rates()
    if st.v is not None:
        st.v.copy_(0.1 * torch.randn(x.shape, generator=torch.Generator(device=x.device).manual_seed(5),
                                     dtype=x.dtype, device=x.device))
    return st


@pytest.mark.parametrize(("p", "dtype", "momentum"), CASES)
def test_agrees_with_the_torch_update(device, p, dtype, momentum):
    x = torch.randn(37, p, generator=torch.Generator(device=device).manual_seed(0), dtype=dtype, device=device)
    kernel, torch_ops = stepper(x, momentum, True), stepper(x, momentum, False)
    for _ in range(3):
        got, want = kernel.step(), torch_ops.step()
        # |X|² ~ p and the update ~ η: the two differ by the summation order alone, a few ulp of each
        tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-14}
        torch.testing.assert_close(got, want, **tol)
        torch.testing.assert_close(kernel.x, torch_ops.x, **tol)
        if momentum:
            torch.testing.assert_close(kernel.v, torch_ops.v, **tol)


@pytest.mark.parametrize(("p", "dtype", "momentum"), CASES)
def test_a_row_does_not_depend_on_the_other_rows(device, p, dtype, momentum):
    gen = torch.Generator(device=device).manual_seed(2)
    x, eps, v = (torch.randn(103, p, generator=gen, dtype=dtype, device=device) for _ in range(3))
    a = torch.linspace(1.0, 2.0, p, dtype=dtype, device=device)
    columns = tuple(torch.rand(103, 1, generator=gen, dtype=dtype, device=device) * 0.1 for _ in range(4))
    if not momentum:
        columns = columns[:3]
    all_x, all_v = x.clone(), v.clone() if momentum else None
    all_sq = update(all_x, eps, all_v, a, x.new_empty(103, 2), columns)
    for rows in (slice(0, 1), slice(32, 64), slice(96, 103)):   # alone: at offset 0, as a run's own tensor
        part_x, part_v = x[rows].clone(), v[rows].clone() if momentum else None
        part_sq = update(part_x, eps[rows].clone(), part_v, a, x.new_empty(part_x.shape[0], 2),
                         tuple(c[rows].clone() for c in columns))
        assert torch.equal(part_sq, all_sq[rows])
        assert torch.equal(part_x, all_x[rows])
        if momentum:
            assert torch.equal(part_v, all_v[rows])
