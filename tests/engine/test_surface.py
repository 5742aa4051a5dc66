"""The engine's public surface and its registry: the service imports only ``smdengine``'s top level,
the spec and document layer imports no torch, and every kind's and model's declarations (outputs,
plots) are consistent."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import smdengine
from smdengine._registry import REGISTRY, SDE_MODELS

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ("api", "worker", "smdcli", "store")
MODELS = [(kind.name, model) for kind in REGISTRY.values() for model in kind.models]


def test_importing_the_api_imports_no_torch():
    out = subprocess.run([sys.executable, "-c", "import api.main, sys; print('torch' in sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_the_spec_layer_and_the_train_shapes_import_no_torch():
    code = ("import sys, smdengine, smdengine.train.shapes; "
            "smdengine.parse_spec({'kind': 'train', 'params': {'model': 'cnn'}}).work; "
            "smdengine.output_names('sde'); smdengine.plots('sde/nrq'); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


def test_the_train_shapes_module_is_a_leaf():
    """spec.py and models.py both use it; it imports neither (nor torch): no cycle between them."""
    assert imported_modules(ROOT / "smdengine/train/shapes.py") <= {"__future__", "math", "collections.abc", "typing"}
    assert "smdengine.train.models" not in imported_modules(ROOT / "smdengine/train/spec.py")


@pytest.mark.parametrize("package", SERVICE)
def test_the_service_imports_only_the_top_level_of_smdengine(package):
    offenders = [f"{path.relative_to(ROOT)}: {name}" for path in sorted((ROOT / package).rglob("*.py"))
                 for name in imported_modules(path) if name.startswith("smdengine.")]
    assert offenders == []


def test_the_public_names_exist():
    assert all(hasattr(smdengine, name) for name in smdengine.__all__)


@pytest.mark.parametrize(("kind", "model"), MODELS, ids=[m.simulator for _, m in MODELS])
def test_plots_draw_only_declared_names(kind, model):
    outputs = model.outputs
    assert outputs.plots, "every model declares at least one plot"
    for name, plot in outputs.plots.items():
        drawn = plot.series if plot.style != "histogram" else ()
        assert set(drawn) <= set(outputs.metrics), name
        assert set(plot.theory) | set(plot.times) <= set(outputs.theory), name
        assert set(plot.layer_theory) | set(plot.sparse) <= set(outputs.metrics), name
        if plot.style == "histogram":
            assert set(plot.series) <= set(outputs.distributions), name
        if plot.style == "angles":
            assert {"lr_time", "tau"} <= set(outputs.theory), name
    key = smdengine.plot_key(kind, {"kind": kind, "params": {"model": model.name}})
    assert smdengine.plots(key) is outputs.plots


def test_plot_keys():
    assert smdengine.plot_key("nrq", {"params": {}}) == "nrq"
    assert [smdengine.plot_key("sde", {"params": {"model": m.name}}) for m in SDE_MODELS] == [
        "sde/nrq", "sde/normalized_linear", "sde/norm_map", "sde/toy2d"]
    assert smdengine.plots("sde/unknown") == {} and smdengine.plots("sde") == {} and smdengine.plots("nrq/x") == {}
    assert smdengine.full_document_plots("train") and not smdengine.full_document_plots("sde/nrq")


def test_output_names_of_a_kind_cover_its_models():
    names = set(smdengine.output_names("sde"))
    for model in SDE_MODELS:
        assert set(model.outputs.names()) <= names
    with pytest.raises(ValueError, match="kind: expected one of 'nrq', 'sde', 'train'"):
        smdengine.output_names("bogus")



def tiny_spec(kind: str, model: str) -> dict:
    """A quick run of a registered model: the small specs the API tests submit."""
    from tests.api.test_sde_experiments import sde_spec
    from tests.api.test_train_experiments import train_spec
    from tests.conftest import small_spec

    return {"nrq": lambda: small_spec(), "sde": lambda: sde_spec(model), "train": lambda: train_spec()}[kind]()


@pytest.mark.parametrize(("kind", "model"), MODELS, ids=[m.simulator for _, m in MODELS])
def test_every_summary_value_of_a_run_is_declared(kind, model):
    """A search filters and sorts on the declared summary names: a value a run has but its model does not
    declare (in its metrics, scalar theory or Outputs.summary) could not be searched."""
    import re

    summary = smdengine.run(smdengine.parse_spec(tiny_spec(kind, model.name))).to_document()["summary"]
    per_layer = set(model.outputs.layer_metrics)
    own = {*model.outputs.metrics, *model.outputs.theory, *model.outputs.summary} - per_layer
    undeclared = [k for k in summary if k != "layers" and k not in own and not re.fullmatch(smdengine.PHASE_SUMMARY, k)]
    assert undeclared == []
    assert own <= set(smdengine.summary_names(kind))
    # and the other way: a per-layer metric is not offered as a top-level summary value (a filter on it would
    # be accepted and never match), and it is in each layer's summary
    assert per_layer.isdisjoint(summary) and per_layer.isdisjoint(smdengine.summary_names(kind))
    assert all(per_layer <= set(values) for values in summary.get("layers", {}).values())
