"""docker-compose.yml is valid Compose and wires the SMD Lab stack as the design says.

The Compose Specification's JSON schema is read from ``../shared/compose-spec.json`` beside the
checkout (it is not copied into the project); where it is absent the schema check is skipped.
"""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
COMPOSE_SCHEMA = REPO.parent / "shared" / "compose-spec.json"


@pytest.fixture(scope="module")
def compose() -> dict:
    with COMPOSE_FILE.open() as fh:
        doc = yaml.safe_load(fh)
    assert isinstance(doc, dict)
    return doc


def _validator_class(schema: dict):
    uri = str(schema.get("$schema", ""))
    for marker, cls in (
        ("draft-04", jsonschema.Draft4Validator),
        ("draft-06", jsonschema.Draft6Validator),
        ("draft-07", jsonschema.Draft7Validator),
        ("2019-09", jsonschema.Draft201909Validator),
        ("2020-12", jsonschema.Draft202012Validator),
    ):
        if marker in uri:
            return cls
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)


def test_compose_matches_compose_spec_schema(compose):
    if not COMPOSE_SCHEMA.is_file():
        pytest.skip(f"Compose Specification schema not found at {COMPOSE_SCHEMA}; "
                    "schema validation skipped")
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    cls = _validator_class(schema)
    cls.check_schema(schema)
    errors = sorted(cls(schema).iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)


def test_services_present(compose):
    assert {"api", "worker", "redis", "postgres"} <= set(compose["services"])


def _env(service: dict) -> dict:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return env


@pytest.mark.parametrize("name,command", [("api", ["smd", "api"]), ("worker", ["smd", "worker"])])
def test_app_services(compose, name, command):
    svc = compose["services"][name]
    assert "build" in svc
    cmd = svc["command"]
    assert (cmd.split() if isinstance(cmd, str) else cmd) == command
    env = _env(svc)
    assert env, f"{name} has no environment"
    bad = [k for k in env if not k.startswith("SMD_")]
    assert not bad, f"{name}: non-SMD_ settings {bad}"
    assert env["SMD_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert "@postgres:5432/" in env["SMD_DATABASE_URL"]
    assert env["SMD_BROKER_URL"].startswith("redis://redis:6379")
    deps = svc["depends_on"]
    for dep in ("postgres", "redis"):
        assert deps[dep]["condition"] == "service_healthy"


def test_api_port(compose):
    ports = [str(p) for p in compose["services"]["api"]["ports"]]
    assert any(p.endswith(":8000") or p == "8000" for p in ports)
    assert str(_env(compose["services"]["api"])["SMD_PORT"]) == "8000"


def test_worker_gpu_reservation(compose):
    devices = compose["services"]["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(
        d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) and d.get("count") == "all"
        for d in devices
    )


@pytest.mark.parametrize("name", ["redis", "postgres"])
def test_backing_services_have_healthchecks(compose, name):
    assert compose["services"][name]["healthcheck"]["test"]


def test_postgres_has_volume(compose):
    assert compose["services"]["postgres"]["volumes"]
