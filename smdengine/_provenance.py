"""What produced a run: the engine's version, torch's and NumPy's, the device (with its model name) and
the dtype — the engine's part of an attempt's provenance (the service adds the code's git commit and
the worker). Torch is imported when called."""
from __future__ import annotations

import platform
from functools import cache
from importlib import metadata
from typing import Any


@cache
def engine_version() -> str:
    """The installed project's version (the engine ships in it), or "unknown" outside an install."""
    try:
        return metadata.version("smdlab")
    except metadata.PackageNotFoundError:
        return "unknown"


@cache
def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance(spec: Any) -> dict[str, Any]:
    """{engine_version, torch, numpy, python, device, device_name, dtype, triton, noise_stream} of running ``spec``
    here (``device: auto`` resolved as :func:`smdengine.run` resolves it). ``triton``: its version where
    a CUDA run's nrq update can be the Triton kernel (:mod:`smdengine.nrq._fused_step`), whose results
    differ from the torch ops' in the last bits; else None. ``noise_stream``: which generator an nrq run's
    noise comes from (None for other kinds)."""
    import numpy
    import torch

    from smdengine._driver import resolve_device
    from smdengine._registry import parse_spec

    spec = parse_spec(spec)
    device = resolve_device(spec.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    return {"engine_version": engine_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "python": platform.python_version(), "device": device.type, "device_name": name,
            "dtype": spec.params.dtype, "triton": _triton_version() if device.type == "cuda" else None,
            "noise_stream": _noise_stream(spec, device.type)}


def _noise_stream(spec: Any, device: str) -> str | None:
    """The ``nrq`` kind's noise stream (:func:`smdengine.nrq.stepper.noise_stream`); None for other kinds
    (they draw from the torch generator of the device)."""
    if spec.kind != "nrq":
        return None
    from smdengine.nrq.stepper import noise_stream
    return noise_stream(device, spec.params.dtype, spec.params.dim)


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return str(triton.__version__)
