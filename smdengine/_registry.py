"""The one registry of kinds and models, from which everything else is derived: spec parsing (the
``kind``- and ``model``-tagged unions and their error names), output names, theory and distribution
names, and the plots the API draws.

Adding an ``sde`` model is one new file in ``smdengine/sde/`` (its params class, :class:`Outputs` with
its plots, its :class:`~smdengine._simulator.Simulator` and a ``MODEL`` line naming them) plus one line
in :data:`SDE_MODELS`. Adding a kind is one new subpackage (a torch-free ``spec.py`` with its spec
class and ``MODEL``, and the simulator module) plus one line in :data:`REGISTRY`. This module, and
so spec parsing, imports no torch: simulators are named by ``"module:Class"`` and imported when a run
starts (:meth:`Model.load_simulator`).
"""
from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, TypeAdapter

from smdengine._declare import Model, PlotDef
from smdengine._spec_base import SpecBase, tagged_union
from smdengine.nrq.spec import MODEL as NRQ_MODEL
from smdengine.nrq.spec import NRQSpec
from smdengine.sde._common import SDEModelParams
from smdengine.train.spec import MODEL as TRAIN_MODEL
from smdengine.train.spec import TrainSpec

# One line per sde model: the module ``smdengine/sde/<name>.py`` that declares its ``MODEL``.
SDE_MODELS: tuple[Model, ...] = tuple(import_module(f"smdengine.sde.{name}").MODEL for name in (
    "nrq",
    "normalized_linear",
    "norm_map",
    "toy2d",
))

if TYPE_CHECKING:
    SDEParams = SDEModelParams   # what every model's params provide; a simulator narrows with params_of
else:   # the union of the models' params, discriminated by ``model``
    SDEParams = tagged_union("model", {m.name: m.params for m in SDE_MODELS})


class SDESpec(SpecBase):
    kind: Literal["sde"]
    params: SDEParams

    @property
    def work(self) -> int:
        return self.params.work


@dataclass(frozen=True)
class Kind:
    """A kind: its spec class (the envelope + its params) and its models; ``tag`` names the params
    field that selects the model (None: the kind is one model, named after it)."""

    name: str
    spec: type[SpecBase]
    models: tuple[Model, ...]
    tag: str | None = None

    def model(self, name: str) -> Model:
        for m in self.models:
            if m.name == name:
                return m
        raise ValueError(f"{self.tag}: expected one of {', '.join(repr(m.name) for m in self.models)}, got {name!r}")


REGISTRY: dict[str, Kind] = {k.name: k for k in (
    Kind("nrq", NRQSpec, (NRQ_MODEL,)),
    Kind("sde", SDESpec, SDE_MODELS, tag="model"),
    Kind("train", TrainSpec, (TRAIN_MODEL,)),
)}

SPECS: dict[str, type[SpecBase]] = {name: kind.spec for name, kind in REGISTRY.items()}   # the spec model of each kind
KINDS = tuple(SPECS)
ExperimentSpec = tagged_union("kind", SPECS)
AnySpec = NRQSpec | SDESpec | TrainSpec   # the static type of a parsed spec (a new kind adds its class)
_SPEC_CLASSES = tuple(SPECS.values())
_adapter: TypeAdapter[Any] = TypeAdapter(ExperimentSpec)


def parse_spec(data: Any) -> AnySpec:
    """Validate a JSON-like spec; raises ``pydantic.ValidationError`` naming field and reason."""
    if isinstance(data, _SPEC_CLASSES):
        return cast(AnySpec, data)   # every registered spec class is a member of AnySpec
    parsed: AnySpec = _adapter.validate_python(data)
    return parsed


def load_simulators() -> None:
    """Import every registered simulator's module (torch with them), running nothing. A worker
    that forks its job processes calls this before the fork, so each inherits the imports instead of paying
    them at its first job (seconds). Nothing is computed, so no CUDA context or thread pool exists to be
    forked: the children stay free to pick their GPU and start their own threads."""
    for kind in REGISTRY.values():
        for model in kind.models:
            model.load_simulator()


def spec_json_schema() -> dict[str, Any]:
    return _adapter.json_schema()


def model_of(spec: AnySpec) -> Model:
    """The registered model that runs a validated spec."""
    kind = REGISTRY[spec.kind]
    return kind.model(getattr(spec.params, kind.tag)) if kind.tag else kind.models[0]


def spec_paths(kind: str | None = None) -> set[str]:
    """Every dotted path of a stored spec of ``kind`` (of any kind: None), list entries as ``*``
    (``params.lr_schedule.*.step``): what a search may filter on (``param.<path>``)."""
    out: set[str] = set()

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in model.model_fields.items():
            out.add(prefix + name)
            for sub, nested in _nested(info.annotation):
                walk(sub, f"{prefix}{name}.{nested}")

    for name, entry in REGISTRY.items():
        if kind is None or name == kind:
            walk(entry.spec, "")
            for m in entry.models:
                walk(m.params, "params.")
    return out


def summary_names(kind: str | None = None) -> tuple[str, ...]:
    """The top-level summary values a run of ``kind`` (any: None) can have: its metrics' tail means (those
    recorded per layer are under ``layers``, not top-level), scalar theory and the values its model declares in ``Outputs.summary`` (their names); the per-phase
    ``equilibrium_steps[_predicted]_phase<i>`` are matched by :data:`PHASE_SUMMARY`."""
    names: dict[str, None] = {}
    for name, entry in REGISTRY.items():
        if kind is None or name == kind:
            for m in entry.models:
                metrics = [name for name in m.outputs.metrics if name not in m.outputs.layer_metrics]
                names.update(dict.fromkeys((*metrics, *m.outputs.theory, *m.outputs.summary)))
    return tuple(names)


def layer_metric_names(kind: str) -> tuple[str, ...]:
    """The metrics a run of ``kind`` records per layer (their summaries are under ``layers``, not top-level)."""
    return tuple(dict.fromkeys(name for m in _kind(kind).models for name in m.outputs.layer_metrics))


PHASE_SUMMARY = r"equilibrium_steps(_predicted)?_phase[0-9]{1,4}"


def _nested(annotation: Any) -> list[tuple[type[BaseModel], str]]:
    """The models inside a field's annotation, each with the path step into it ("" or "*." for lists)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _nested(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, "")]
    if origin in (list, tuple):
        return [(m, "*." + step) for arg in typing.get_args(annotation) for m, step in _nested(arg)]
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        return [pair for arg in typing.get_args(annotation) for pair in _nested(arg)]
    return []


def continuable(spec: AnySpec | dict[str, Any]) -> bool:
    """Whether a finished run of this spec can be continued with more steps (its model's ``continuable``)."""
    return model_of(parse_spec(spec)).continuable


def spec_warnings(spec: AnySpec | dict[str, Any]) -> list[dict[str, Any]]:
    """The warnings of a spec, ``[{"code", "message", "omits"}]`` (empty when there is nothing to say). Where
    its rates leave the regime the theory describes, ``code`` names the condition, ``message`` the phases and
    rates, and ``omits`` the theory names that do not apply there, which :func:`smdengine.run` and
    :func:`smdengine.predict` leave out of the theory (so no line is drawn and no summary value made):
    declared per kind and model by its params' ``regime_warnings()``, the conditions derived in
    :func:`smdengine._science.phase_regime`. Then ``sparse_tail`` (omits nothing) when the summary's tail holds
    fewer than two records (its params' ``tail_warnings()``, :func:`smdengine._science.tail_warnings`), and on
    ``nrq`` and the sde nrq model ``unsettled_tail`` (omits nothing) when the tail's mean AU is predicted more than ±10% off its
    equilibrium (:func:`smdengine.nrq.predict.tail_au_ratio`).
    Torch- and SciPy-free (nrq's prediction uses numpy); raises ``pydantic.ValidationError`` on a bad spec."""
    params = parse_spec(spec).params
    declared = [*params.regime_warnings(), *params.tail_warnings()]
    return [dict(w, omits=list(w["omits"])) for w in declared]


def omitted_theory(spec: AnySpec | dict[str, Any]) -> frozenset[str]:
    """Every theory name a spec's warnings omit (:func:`spec_warnings`)."""
    return frozenset(name for w in spec_warnings(spec) for name in w["omits"])


def _kind(name: str) -> Kind:
    if name not in REGISTRY:
        raise ValueError(f"kind: expected one of {', '.join(map(repr, KINDS))}, got {name!r}")
    return REGISTRY[name]


def output_names(spec: AnySpec | dict[str, Any] | str) -> tuple[str, ...]:
    """Every series, theory and distribution name a run of this spec can produce. A bare kind
    string gives the names over all of that kind's models."""
    models = _kind(spec).models if isinstance(spec, str) else (model_of(parse_spec(spec)),)
    names: dict[str, None] = {}
    for m in models:
        names.update(dict.fromkeys(m.outputs.names()))
    return tuple(names)


def series_names(spec: AnySpec | dict[str, Any]) -> tuple[str, ...]:
    """The measured series a run of this spec records, "step" aside: what can be drawn against time (neither
    its theory nor its distributions, such as a histogram, which are not aligned on step)."""
    return model_of(parse_spec(spec)).outputs.metrics


def plot_key(kind: str, spec: Mapping[str, Any] | None) -> str:
    """The key of a stored spec's plots: the kind, or ``"<kind>/<model>"`` for a kind with models
    (read from the raw spec: a stored spec is not re-validated)."""
    entry = REGISTRY.get(kind)
    if entry is None or entry.tag is None:
        return kind
    return f"{kind}/{((spec or {}).get('params') or {}).get(entry.tag)}"


def _model_by_key(key: str) -> Model | None:
    kind, _, name = key.partition("/")
    entry = REGISTRY.get(kind)
    if entry is None or bool(entry.tag) != bool(name):
        return None
    return next((m for m in entry.models if m.name == (name or kind)), None)


def plots(key: str) -> Mapping[str, PlotDef]:
    """The plots declared for a plot key (none for an unknown key)."""
    model = _model_by_key(key)
    return model.outputs.plots if model is not None else {}


def full_document_plots(key: str) -> bool:
    """Whether the plots of a key are drawn from the whole result document (they thin themselves)."""
    model = _model_by_key(key)
    return model is not None and model.outputs.full_document_plots
