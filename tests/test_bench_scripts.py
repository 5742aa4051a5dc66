"""Every benchmark script imports against the current engine (its module level binds the engine
names it calls, e.g. ``smdengine.run``), without running: a renamed or removed entry point fails here
rather than in the next `make bench`."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_imports(script, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)   # guarded by __name__: defines, does not run
    assert callable(getattr(module, "main", None)), f"{script.name}: expected a main() entry point"
