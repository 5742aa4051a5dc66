"""Validation of ``nrq`` specs through :func:`smdengine.parse_spec`.

Every bad spec must raise ``pydantic.ValidationError`` and name the offending field, either in the
error's location or at the start of its message (model-level checks report ``params`` as the
location and ``"<field>: expected …"`` as the message).
"""
from __future__ import annotations

import json

import pydantic
import pytest

import smdengine
from smdengine.nrq.spec import NRQParams, NRQSpec


def nrq(**params) -> dict:
    return {"kind": "nrq", "params": params}


def assert_rejected(data: dict, field: str) -> pydantic.ValidationError:
    with pytest.raises(pydantic.ValidationError) as info:
        smdengine.parse_spec(data)
    errors = info.value.errors()
    named = [e for e in errors
             if field in [str(part) for part in e["loc"]] or f"{field}:" in e["msg"] or f"{field}/" in e["msg"]]
    assert named, f"no error names {field!r}: {errors}"
    assert field in str(info.value)
    return info.value


@pytest.mark.parametrize("data, field", [
    (nrq(lr=-0.1), "lr"),
    (nrq(lr=0.0), "lr"),
    (nrq(weight_decay=-0.01), "weight_decay"),
    (nrq(noise_std=0.0), "noise_std"),
    (nrq(init_std=-1.0), "init_std"),
    (nrq(dim=1), "dim"),
    (nrq(dim=0), "dim"),
    (nrq(momentum=1.0), "momentum"),
    (nrq(momentum=1.5), "momentum"),
    (nrq(momentum=-0.1), "momentum"),
    (nrq(trials=0), "trials"),
    (nrq(steps=0), "steps"),
    (nrq(record_every=0), "record_every"),
    (nrq(steps=100, record_every=101), "record_every"),
    (nrq(dtype="float16"), "dtype"),
    (nrq(lr="fast"), "lr"),
])
def test_bad_scalar_params(data, field):
    assert_rejected(data, field)


@pytest.mark.parametrize("low, high", [(2.0, 1.0), (1.0, 1.0)])
def test_two_level_spectrum_needs_low_below_high(low, high):
    assert_rejected(nrq(eig_low=low, eig_high=high), "eig_low")


def test_two_level_spectrum_needs_both_levels():
    assert_rejected(nrq(eig_low=0.5), "eig_low")
    assert_rejected(nrq(eig_high=3.0), "eig_high")


@pytest.mark.parametrize("first, second", [(2.0, 1.0), (1.0, 1.0)])
def test_eigenvalues_need_a1_below_a2(first, second):
    assert_rejected(nrq(dim=4, eigenvalues=[first, second, 3.0, 4.0]), "eigenvalues")


@pytest.mark.parametrize("eigenvalues", [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0, 5.0], []])
def test_eigenvalues_of_wrong_length(eigenvalues):
    err = assert_rejected(nrq(dim=4, eigenvalues=eigenvalues), "eigenvalues")
    assert "4" in str(err)  # the expected length is stated


def test_eigenvalues_default_dim_checked_too():
    assert_rejected(nrq(eigenvalues=[1.0, 2.0]), "eigenvalues")  # dim defaults to 10


@pytest.mark.parametrize("eigenvalues", [
    [1.0, 3.0, 2.0, 4.0],                   # a_2 ≤ … ≤ a_p violated
    [-1.0, 2.0, 2.0, 2.0],                  # negative
    [1.0, 2.0, float("nan"), 2.0],          # not a number
    [1.0, 2.0, 2.0, float("inf")],          # not finite
])
def test_eigenvalues_bad_values(eigenvalues):
    assert_rejected(nrq(dim=4, eigenvalues=eigenvalues), "eigenvalues")


def test_eigenvalues_and_levels_are_exclusive():
    assert_rejected(nrq(dim=3, eigenvalues=[1.0, 2.0, 2.0], eig_low=1.0, eig_high=2.0), "eigenvalues")


@pytest.mark.parametrize("data, field", [
    (nrq(colour="red"), "colour"),                                  # unknown param
    ({"kind": "nrq", "params": {}, "priority": 3}, "priority"),     # unknown envelope field
    (nrq(lr_schedule=[{"step": 10, "lr_factor": 0.1, "warmup": 5}]), "warmup"),  # unknown in an entry
])
def test_unknown_fields_are_errors(data, field):
    err = assert_rejected(data, field)
    assert any(e["type"] == "extra_forbidden" for e in err.errors())


@pytest.mark.parametrize("schedule", [
    [{"step": 500, "lr_factor": 0.1}, {"step": 500, "lr_factor": 0.1}],    # repeated step
    [{"step": 600, "lr_factor": 0.1}, {"step": 500, "lr_factor": 0.1}],    # decreasing
    [{"step": 1000, "lr_factor": 0.1}],                                    # step == steps
    [{"step": 5000, "lr_factor": 0.1}],                                    # step > steps
])
def test_bad_schedule_steps(schedule):
    assert_rejected(nrq(steps=1000, lr_schedule=schedule), "lr_schedule")


@pytest.mark.parametrize("entry, field", [
    ({"step": 0, "lr_factor": 0.1}, "step"),
    ({"step": 10, "lr_factor": 0.0}, "lr_factor"),
    ({"step": 10, "lr_factor": -0.1}, "lr_factor"),
    ({"step": 10}, "lr_factor"),
    ({"step": 10, "lr_factor": 0.1, "weight_decay_factor": -0.1}, "weight_decay_factor"),
    ({"step": 10, "lr_factor": 0.1, "weight_decay_factor": 0.0, "rescale": True}, "rescale"),
])
def test_bad_schedule_entries(entry, field):
    err = assert_rejected(nrq(steps=1000, lr_schedule=[entry]), field)
    assert any("lr_schedule" in [str(p) for p in e["loc"]] for e in err.errors())


@pytest.mark.parametrize("data, field", [
    ({"kind": "mlp", "params": {}}, "kind"),
    ({"kind": "NRQ"}, "kind"),
    ({"params": {}}, "kind"),
    ({"kind": "nrq", "seed": -1}, "seed"),
    ({"kind": "nrq", "device": "tpu"}, "device"),
    ({"kind": "nrq", "name": "x" * 201}, "name"),
])
def test_bad_envelope(data, field):
    assert_rejected(data, field)


def test_defaults_parse_to_the_reference_problem():
    spec = smdengine.parse_spec({"kind": "nrq"})
    assert isinstance(spec, NRQSpec)
    assert spec.seed == 0 and spec.device == "auto" and spec.name is None
    p = spec.params
    assert (p.dim, p.eig_low, p.eig_high, p.noise_std, p.lr, p.weight_decay, p.momentum) == \
        (10, 1.0, 2.0, 1.0, 0.1, 0.01, 0.0)
    assert (p.trials, p.steps, p.record_every, p.dtype, p.lr_schedule) == (1000, 10_000, 100, "float64", [])
    assert p.spectrum() == [1.0] + [2.0] * 9
    assert p.two_level() == (1.0, 2.0)
    assert spec.work == 1000 * 10_000 * 10
    assert smdengine.parse_spec({"kind": "nrq", "params": {}}) == spec


def test_good_specs_parse():
    spec = smdengine.parse_spec({
        "kind": "nrq", "name": "decay", "seed": 7, "device": "cpu",
        "params": {"dim": 4, "eigenvalues": [0.5, 1.0, 1.5, 3.0], "momentum": 0.9, "dtype": "float32",
                   "steps": 1000, "record_every": 10,
                   "lr_schedule": [{"step": 300, "lr_factor": 0.1, "rescale": True},
                                   {"step": 600, "lr_factor": 0.5, "weight_decay_factor": 2.0}]},
    })
    p = spec.params
    assert p.two_level() is None and p.spectrum() == [0.5, 1.0, 1.5, 3.0]
    assert [e.step for e in p.lr_schedule] == [300, 600]
    assert p.lr_schedule[0].rescale and not p.lr_schedule[1].rescale
    assert p.lr_schedule[1].weight_decay_factor == 2.0
    # weight_decay = 0 and momentum just below 1 are allowed (boundaries of the ranges)
    smdengine.parse_spec(nrq(weight_decay=0.0, momentum=0.999))
    # a schedule may switch weight decay off (without rescale); it stays off for later entries
    off = smdengine.parse_spec(nrq(steps=1000, lr_schedule=[
        {"step": 300, "lr_factor": 1.0, "weight_decay_factor": 0.0}, {"step": 600, "lr_factor": 0.5}])).params
    assert [(ph.lr, ph.weight_decay) for ph in off.phases()] == [(0.1, 0.01), (0.1, 0.0), (0.05, 0.0)]
    # an explicit spectrum that is two-level is recognised as such
    assert smdengine.parse_spec(nrq(dim=3, eigenvalues=[1.0, 2.0, 2.0])).params.two_level() == (1.0, 2.0)


def test_parse_spec_round_trips_and_accepts_a_spec():
    spec = smdengine.parse_spec(nrq(dim=5, lr=0.05, lr_schedule=[{"step": 10, "lr_factor": 0.1}]))
    assert smdengine.parse_spec(spec) is spec
    again = smdengine.parse_spec(json.loads(spec.model_dump_json()))
    assert again == spec


def test_json_schema_describes_the_params():
    schema = smdengine.spec_json_schema()
    text = json.dumps(schema)
    for field in ("lr", "weight_decay", "momentum", "eig_low", "eigenvalues", "lr_schedule", "rescale", "kind"):
        assert f'"{field}"' in text
    assert NRQParams.model_fields["lr"].description


@pytest.mark.parametrize("field, value", [("lr", True), ("dim", "10"), ("dim", 2.5), ("trials", False)])
def test_booleans_and_strings_are_not_numbers(field, value):
    """Lax pydantic would run "lr": true with lr 1.0 and take "10" for 10."""
    with pytest.raises(pydantic.ValidationError) as err:
        smdengine.parse_spec(nrq(**{field: value}))
    assert err.value.errors()[0]["loc"][-1] == field


def test_integral_floats_are_integers():
    """JSON Schema counts 3.0 as an integer; so does the spec (seed and nested params alike)."""
    spec = smdengine.parse_spec({**nrq(dim=10.0, trials=8.0, steps=100, record_every=10), "seed": 3.0})
    assert (spec.seed, spec.params.dim, spec.params.trials) == (3, 10, 8) and isinstance(spec.params.dim, int)
    assert smdengine.parse_spec(nrq(lr=1)).params.lr == 1.0   # an integer is still a float
