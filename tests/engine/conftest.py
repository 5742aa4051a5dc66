"""``--device cuda`` (tests/conftest.py): every engine run of these tests runs on that device, whatever
the spec's ``device`` field says, so the same theory and resume checks run on the GPU. Runs resolve
their device through ``smdengine._driver.resolve_device`` (the driver and the provenance record),
which is pointed at the chosen device for each test."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def engine_device(request, monkeypatch) -> str:
    device = request.config.getoption("--device")
    if device != "cpu":
        import torch

        from smdengine import _driver

        if not torch.cuda.is_available():
            pytest.fail(f"--device {device}: no CUDA device on this machine")
        monkeypatch.setattr(_driver, "resolve_device", lambda _requested: torch.device(device))
    return device
