"""`smd presets` against a real `smd serve` (embedded SQLite and filesystem broker, auth on, keys made
with `smd keys create`): the catalog from the service, a preset run followed to its end with its checks
printed, the same checks as `smd presets run --local` on the same runs, the figure served; and the
error paths (unknown preset or size: exit 2; over quota: exit 3)."""
from __future__ import annotations

import json

import httpx
import pytest

from tests.integration.procs import serve_for_alice_and_bob, smd

pytestmark = pytest.mark.integration

PRESET = "nrq-equilibrium-tradeoff"
TINY = ["--set", "params.steps=1500", "--set", "params.trials=32", "--set", "params.record_every=50"]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """(env as alice, env as bob (a small work quota), base URL, state folder)."""
    with serve_for_alice_and_bob(tmp_path_factory.mktemp("serve")) as service:
        yield service


def test_catalog_from_the_service(service):
    alice, _, _, _ = service
    listed = smd(alice, "presets", "list", "--remote", "--json")
    assert listed.returncode == 0, listed.stderr
    local = smd(alice, "presets", "list", "--json")
    remote = json.loads(listed.stdout)
    # the service adds each size's estimated run time on its workers (none yet: nothing has run there)
    for entry in remote:
        for size in entry["sizes"].values():
            assert size.pop("estimated_seconds") is None and size.pop("estimated_from") is None
    assert remote == json.loads(local.stdout)
    shown = smd(alice, "presets", "show", PRESET, "--remote")
    assert shown.returncode == 0 and "nrq-equilibrium-tradeoff (quick)" in shown.stdout, shown.stderr
    missing = smd(alice, "presets", "show", "nope", "--remote")
    assert missing.returncode == 2 and PRESET in missing.stderr


def test_a_preset_through_the_service_gives_the_local_checks(service, tmp_path):
    alice, _, base, state = service
    ran = smd(alice, "presets", "run", PRESET, "--seeds", "0", "1", *TINY, "--follow", "--quiet")
    assert ran.returncode == 0, (ran.stderr, (state / "serve.log").read_text()[-3000:])
    study_id = ran.stdout.splitlines()[0].strip()
    assert "succeeded" in ran.stderr
    headers = {"Authorization": f"Bearer {alice['SMD_KEY']}"}
    served = httpx.get(f"{base}/v1/studies/{study_id}", headers=headers, timeout=60).json()
    assert served["preset"] == PRESET and served["preset_size"] == "quick"
    checks = served["checks"]
    assert checks and all(c["verdict"] in ("reproduced", "not_reproduced", "inconclusive") for c in checks)
    for check in checks:   # the verdict table printed after --follow
        assert check["id"] in ran.stdout and check["claim"] in ran.stdout

    local = smd(alice, "presets", "run", PRESET, "--local", "-o", str(tmp_path / "local"), "--seeds", "0", "1",
                *TINY, "-j", "2", "--quiet")
    assert local.returncode == 0, local.stderr
    assert json.loads((tmp_path / "local" / "checks.json").read_text())["checks"] == checks   # the same numbers

    figure = httpx.get(f"{base}/v1/studies/{study_id}/plots/figure.png", headers=headers, timeout=60)
    assert figure.status_code == 200 and figure.content[:8] == b"\x89PNG\r\n\x1a\n"


def test_remote_errors(service):
    alice, bob, _, _ = service
    unknown = smd(alice, "presets", "run", "nope")
    assert unknown.returncode == 2 and PRESET in unknown.stderr
    size = smd(alice, "presets", "run", PRESET, "--size", "huge")
    assert size.returncode == 2 and "quick" in size.stderr
    override = smd(alice, "presets", "run", PRESET, "--set", "params.lrr=1")
    assert override.returncode == 2 and "overrides.params.lrr" in override.stderr
    seeds = smd(alice, "presets", "run", "toy2d-chaos", "--seeds", "0")   # its checks need 2: nothing submitted
    assert seeds.returncode == 2 and "seeds: expected at least 2 seeds for preset toy2d-chaos" in seeds.stderr
    over = smd(bob, "presets", "run", PRESET)
    assert over.returncode == 3 and "work" in over.stderr, over.stderr
