"""What a kind or a model declares, as plain data (torch-free): the names it produces and the plots
drawn from them. The registry (:mod:`smdengine._registry`) derives spec parsing, output names and the
API's plots from these."""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from smdengine._simulator import Simulator

PlotStyle = Literal["line", "histogram", "angles", "layers"]


@dataclass(frozen=True)
class PlotDef:
    """One plot of a result document.

    style ``line``: ``series`` against step, ``theory`` dashed black (a number: a horizontal line),
    ``times`` (scalar theory values that are times) as vertical lines, ``sparse`` series (defined only
    at some steps) at those steps with markers; ``histogram``: the distribution ``series[0]`` beside its
    theory density; ``angles``: the per-trial angles ``series[0]`` against the theory series
    ``lr_time`` and ``tau``; ``layers``: the per-layer metric ``series`` of every layer, one colour per
    layer, ``layer_theory`` (per-layer theory metrics) dashed in the layer's colour. ``theory_labels``: what
    a theory line is, ``(name, words)`` pairs, for its legend where one plot draws several of one kind
    (the sde nrq model's two angular updates). ``xlabel``: the x axis's title where it is not the step (a
    histogram's variable)."""

    title: str
    ylabel: str
    series: tuple[str, ...] = ()
    theory: tuple[str, ...] = ()
    log_y: bool = False
    style: PlotStyle = "line"
    times: tuple[str, ...] = ()
    sparse: tuple[str, ...] = ()
    layer_theory: tuple[str, ...] = ()
    theory_labels: tuple[tuple[str, str], ...] = ()
    xlabel: str | None = None


@dataclass(frozen=True)
class Outputs:
    """The names a simulator produces and its plots.

    metrics: the recorded series (per layer for a kind with ``layers``: flat keys "<layer>/<metric>");
    theory: theory predictions; distributions: histograms with their theory (not aligned on step);
    layer_metrics: for a kind with layers, the metrics recorded per layer, whose tail means are in the
    summary under ``layers`` (not top-level summary values);
    summary: the top-level summary values of its own, beside the metrics' tail means and the scalar theory
    (e.g. toy2d's ``spread_final``): what a search may filter and sort on;
    full_document_plots: the plots are drawn from the whole result document and thin each line
    themselves (sparse evaluation points are not lost to an even downsampling of the steps)."""

    metrics: tuple[str, ...]
    theory: tuple[str, ...] = ()
    distributions: tuple[str, ...] = ()
    plots: Mapping[str, PlotDef] = field(default_factory=dict)
    summary: tuple[str, ...] = ()
    full_document_plots: bool = False
    layer_metrics: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        return ("step", *self.metrics, *self.theory, *self.distributions)


@dataclass(frozen=True)
class Model:
    """One simulator: a kind with a single model, or one model of a kind (``sde``).

    name: the kind, or the value of the kind's model tag; params: its params model (pydantic);
    simulator: ``"module:Class"``, a :class:`~smdengine._simulator.Simulator` imported only when a run
    starts; outputs: its names and plots; continuable: a run does not depend on its step count until it
    ends (no schedule relative to it, no accumulation from a step it sets), so its final checkpoint can
    be resumed with more steps (a continuation, :func:`smdengine.run`)."""

    name: str
    params: type
    simulator: str
    outputs: Outputs
    continuable: bool = False

    def load_simulator(self) -> type[Simulator]:
        module, _, attr = self.simulator.partition(":")
        cls: type[Simulator] = getattr(importlib.import_module(module), attr)
        return cls
