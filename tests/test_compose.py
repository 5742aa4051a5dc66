"""docker-compose.yml is valid Compose and wires the SMD Lab stack as the design says (it is
validated here, never run: no Docker engine in CI).

The Compose Specification's JSON schema is read from ``../shared/compose-spec.json`` beside the
checkout (it is not copied into the project); where it is absent the schema check is skipped,
except in CI (the ``CI`` environment variable set), where a missing schema fails the test.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from store.settings import Settings

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
        if "CI" in os.environ:
            pytest.fail(f"Compose Specification schema not found at {COMPOSE_SCHEMA}: CI must provide it")
        pytest.skip(f"Compose Specification schema not found at {COMPOSE_SCHEMA}; "
                    "schema validation skipped")
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    cls = _validator_class(schema)
    cls.check_schema(schema)
    errors = sorted(cls(schema).iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)


APP_SERVICES = ("migrate", "api", "worker")


def test_services_present(compose):
    assert {"migrate", "api", "worker", "redis", "postgres"} <= set(compose["services"])


def _env(service: dict) -> dict:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return env


def _settings(service: dict) -> Settings:
    """The Settings a service's environment makes (the SMD_ prefix stripped, as pydantic-settings does)."""
    return Settings(**{k.removeprefix("SMD_").lower(): v for k, v in _env(service).items()})


def _seconds(duration) -> float:
    """A Compose duration ("90s", "1m30s", "1h") or a number of seconds."""
    if isinstance(duration, (int, float)):
        return float(duration)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def test_every_smd_variable_is_a_setting():
    named = set(re.findall(r"\bSMD_[A-Z0-9_]*[A-Z0-9]", COMPOSE_FILE.read_text()))
    assert {"SMD_DATABASE_URL", "SMD_BROKER_URL", "SMD_LEASE_SECONDS"} <= named
    fields = {f"SMD_{name.upper()}" for name in Settings.model_fields}
    assert not named - fields, f"not settings of store.settings.Settings: {sorted(named - fields)}"


@pytest.mark.parametrize("name,command", [("migrate", ["smd", "migrate"]), ("api", ["smd", "api"]),
                                          ("worker", ["smd", "worker"])])
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
    _settings(svc)  # every value is valid for its field


def test_services_share_one_environment(compose):
    """The job-system settings (leases, limits) must agree between the API's sweeper and the worker."""
    envs = [_env(compose["services"][name]) for name in APP_SERVICES]
    shared = set.intersection(*(set(env) for env in envs))
    assert {"SMD_DATABASE_URL", "SMD_BROKER_URL", "SMD_LEASE_SECONDS", "SMD_TASK_TIME_LIMIT",
            "SMD_VISIBILITY_TIMEOUT", "SMD_SOFT_SHUTDOWN_SECONDS"} <= shared
    for key in shared:
        assert len({str(env[key]) for env in envs}) == 1, key


def test_image_names(compose):
    services = compose["services"]
    assert {services[name].get("image") for name in APP_SERVICES} == {"smdlab:latest"}
    assert services["redis"]["image"].startswith("redis:")
    assert services["postgres"]["image"].startswith("postgres:")


@pytest.mark.parametrize("name", ["api", "worker"])
def test_app_dependencies(compose, name):
    deps = compose["services"][name]["depends_on"]
    assert deps["migrate"]["condition"] == "service_completed_successfully"
    for dep in ("postgres", "redis"):
        assert deps[dep]["condition"] == "service_healthy"


def test_migrate_is_one_shot(compose):
    migrate = compose["services"]["migrate"]
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert str(migrate.get("restart", "no")) in ("no", "False")


def test_api_port(compose):
    ports = [str(p) for p in compose["services"]["api"]["ports"]]
    assert any(p.endswith(":8000") or p == "8000" for p in ports)
    assert str(_env(compose["services"]["api"])["SMD_PORT"]) == "8000"
    assert _env(compose["services"]["api"])["SMD_HOST"] == "0.0.0.0"


def test_worker_gpu_reservation(compose):
    worker = compose["services"]["worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert any(
        d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) and d.get("count") == "all"
        for d in devices
    )
    settings = _settings(worker)
    assert settings.queues == ["gpu", "cpu"]
    assert settings.worker_concurrency >= 1


def test_worker_stops_gracefully(compose):
    worker = compose["services"]["worker"]
    settings = _settings(worker)
    # SIGTERM (Docker's default) is the warm shutdown that checkpoints running jobs and hands them back
    assert worker.get("stop_signal", "SIGTERM") == "SIGTERM"
    assert _seconds(worker["stop_grace_period"]) > settings.soft_shutdown_seconds + 10


@pytest.mark.parametrize("name", APP_SERVICES)
def test_visibility_timeout_covers_the_task_time_limit(compose, name):
    settings = _settings(compose["services"][name])
    assert settings.visibility_timeout > settings.task_time_limit + 60
    # the sweeper looks several times per lease, so an expired lease is noticed soon after it expires
    assert settings.lease_seconds > 3 * settings.sweep_seconds


@pytest.mark.parametrize("name", ["api", "worker", "redis", "postgres"])
def test_healthchecks(compose, name):
    test = compose["services"][name]["healthcheck"]["test"]
    assert test and test[0] in ("CMD", "CMD-SHELL")


def test_api_healthcheck_uses_readyz(compose):
    assert any("/readyz" in part for part in compose["services"]["api"]["healthcheck"]["test"])


def test_redis_persists(compose):
    redis = compose["services"]["redis"]
    cmd = redis["command"]
    cmd = cmd.split() if isinstance(cmd, str) else cmd
    assert cmd[0] == "redis-server"
    assert cmd[cmd.index("--appendonly") + 1] == "yes"
    assert cmd[cmd.index("--appendfsync") + 1] == "everysec"
    assert any(str(v).endswith(":/data") for v in redis["volumes"])


@pytest.mark.parametrize("name", ["redis", "postgres"])
def test_named_volumes_declared(compose, name):
    declared = set(compose.get("volumes") or {})
    for volume in compose["services"][name]["volumes"]:
        source = str(volume).split(":", 1)[0]
        assert source in declared, f"{name}: volume {source} is not declared"


def test_workers_scale_and_the_api_has_replicas(compose):
    """`--scale cpu-worker=N` works (no fixed name or port: each container is a worker of its own host name),
    and the API runs several processes on its port."""
    cpu = compose["services"]["cpu-worker"]
    assert "container_name" not in cpu and "ports" not in cpu and cpu["command"] == ["smd", "worker"]
    assert _settings(cpu).queues == ["cpu"] and _settings(cpu).worker_name is None
    assert "container_name" not in compose["services"]["worker"]
    assert _settings(compose["services"]["api"]).api_workers > 1
