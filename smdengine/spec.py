"""Experiment specs: the common envelope and the union over kinds.

``{"kind": "nrq", "name": "optional label", "seed": 0, "device": "auto", "params": {...}}``
Each kind's params live beside its simulator (``smdengine/<kind>/spec.py``).
"""
from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from smdengine.nrq.spec import NRQSpec
from smdengine.sde.spec import SDESpec
from smdengine.spec_base import tagged_union
from smdengine.train.spec import TrainSpec

SPECS = {"nrq": NRQSpec, "sde": SDESpec, "train": TrainSpec}   # the spec model of each kind
KINDS = tuple(SPECS)
ExperimentSpec = tagged_union("kind", SPECS)
_adapter: TypeAdapter = TypeAdapter(ExperimentSpec)


def parse_spec(data: Any) -> NRQSpec | SDESpec | TrainSpec:
    """Validate a JSON-like spec; raises ``pydantic.ValidationError`` naming field and reason."""
    if isinstance(data, (NRQSpec, SDESpec, TrainSpec)):
        return data
    return _adapter.validate_python(data)


def spec_json_schema() -> dict:
    return _adapter.json_schema()
