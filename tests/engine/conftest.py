"""``--device cuda`` (tests/conftest.py): every engine run of these tests runs on that device, whatever
the spec's ``device`` field says, so the same theory and resume checks run on the GPU. Runs resolve
their device through ``smdengine._driver.resolve_device`` (the driver and the provenance record),
which is pointed at the chosen device for this package's tests — set up before any module-scoped
fixture (a function-scoped patch came after them, so their runs stayed on the CPU: seen on the first GPU
run) and undone after the package, so the other test packages run as they would without the option."""
from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="package")
def engine_device(request) -> Iterator[str]:
    device = request.config.getoption("--device")
    if device == "cpu":
        yield device
        return
    import torch

    from smdengine import _driver

    if not torch.cuda.is_available():
        pytest.fail(f"--device {device}: no CUDA device on this machine")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_driver, "resolve_device", lambda _requested: torch.device(device))
        yield device
