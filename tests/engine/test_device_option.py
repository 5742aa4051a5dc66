"""The ``--device`` option of the test suite (tests/conftest.py, tests/engine/conftest.py), checked on a
machine without CUDA by running pytest in a subprocess: a ``cpu_stream`` test is skipped on another
device, and any other engine test fails at once, naming the missing device, instead of quietly running
on the CPU."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
TOY = "tests/engine/test_sde_toy2d.py"


def pytest_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rsE", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present: --device cuda would run")
def test_device_cuda_skips_cpu_stream_tests_and_refuses_to_run_without_cuda():
    """One pytest run of two tests (each pytest start costs seconds): the cpu_stream one is skipped, the
    other errors, and the run fails. That the first passes on the CPU, the main suite shows."""
    run = pytest_run(f"{TOY}::test_gd_update_matches_a_literal_implementation", f"{TOY}::test_flow_closed_form_by_hand",
                     "--device", "cuda")
    assert run.returncode != 0, run.stdout + run.stderr
    assert "1 skipped" in run.stdout and "depends on the CPU generator's draws, not cuda's" in run.stdout, run.stdout
    assert "--device cuda: no CUDA device on this machine" in run.stdout, run.stdout
    assert "passed" not in run.stdout, run.stdout   # neither ran on the CPU instead
