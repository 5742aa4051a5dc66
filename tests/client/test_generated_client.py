"""Clients no one here writes (issue 20): openapi-python-client generates a client from a real `smd serve`'s
/openapi.json with no warnings but those about binary content types (PNG, SVG, Parquet, which it does
not support), and the generated client submits an nrq experiment, polls it and reads its results.

Every error response is documented as JSON with its model (ErrorOut; ValidationErrorOut for every 422, the
service's own 422s as FastAPI's), also where the 200 is CSV or Parquet, so that the generated client parses
it: a 422 of a submission, a study (naming the point), a preset run and a rerun comes back as
ValidationErrorOut whose items name the field."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.conftest import small_spec
from tests.integration.procs import serve_for_alice_and_bob

pytestmark = pytest.mark.integration
BINARY = re.compile(r"Unsupported content_type (image/png|image/svg\+xml|application/vnd\.apache\.parquet)")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """(the generated package's parent folder, alice's env with SMD_URL and SMD_KEY, the generator's output)."""
    tmp = tmp_path_factory.mktemp("generated")
    with serve_for_alice_and_bob(tmp / "serve") as (alice, _, base, _):
        (tmp / "openapi.json").write_bytes(httpx.get(f"{base}/openapi.json").content)
        tool = shutil.which("openapi-python-client", path=str(Path(sys.executable).parent))
        assert tool, "openapi-python-client is in the test extra"
        out = tmp / "out"
        out.mkdir()
        done = subprocess.run([tool, "generate", "--path", str(tmp / "openapi.json"), "--meta", "none"],
                              cwd=out, capture_output=True, text=True, timeout=300,
                              env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"})
        assert done.returncode == 0, done.stdout + done.stderr
        yield out, alice, done.stdout + done.stderr


def test_the_document_generates_a_client_with_no_warning_but_binary_types(generated):
    _, _, output = generated
    # each warning is "WARNING parsing <endpoint>", a blank line, then its reason
    reasons = re.findall(r"WARNING parsing [^\n]*\n\n([^\n]*)", output)
    assert reasons, output   # the binary responses are always reported: the parse below is the right one
    assert [r for r in reasons if not BINARY.search(r)] == []
    for failure in ("Unable to", "Invalid property", "duplicate models", "will not be generated"):
        assert failure not in output, output[max(0, output.index(failure) - 500):][:1500]


@contextmanager
def generated_package(out: Path) -> Iterator[None]:
    """The generated package importable as smd_lab_client inside the block, forgotten after it."""
    sys.path.insert(0, str(out))
    try:
        yield
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.startswith("smd_lab_client")]:
            del sys.modules[name]


def test_the_generated_client_submits_polls_and_reads(generated):
    out, alice, _ = generated
    with generated_package(out):
        from smd_lab_client import AuthenticatedClient
        from smd_lab_client.api.experiments import get_experiment, get_results, submit_experiment
        from smd_lab_client.models import NRQSubmission

        client = AuthenticatedClient(base_url=alice["SMD_URL"], token=alice["SMD_KEY"])
        spec = small_spec(trials=8, steps=200, record_every=20)
        submitted = submit_experiment.sync(client=client, body=NRQSubmission.from_dict(spec))
        assert submitted.status == "queued" and submitted.spec["params"]["steps"] == 200, submitted
        deadline = time.monotonic() + 60
        while (state := get_experiment.sync(submitted.id, client=client)).status != "succeeded":
            assert state.status in ("queued", "running") and time.monotonic() < deadline, state
            time.sleep(0.2)
        doc = get_results.sync(submitted.id, client=client)
        series = doc.series.to_dict()
        assert series["step"] == [*range(0, 200, 20), 200] and len(series["risk"]) == 11   # and the last state
        assert doc.summary.to_dict()["au_rms"] > 0


ERROR_MODELS = {"#/components/schemas/ErrorOut", "#/components/schemas/ValidationErrorOut",
                "#/components/schemas/HealthOut", "#/components/schemas/ReadyOut"}


def test_every_error_is_documented_as_json_with_its_model(generated):
    """Each 4xx/5xx of every operation is application/json with a model (every 422 ValidationErrorOut), the errors
    of the CSV and Parquet exports included; only /metrics answers its 503 as text, as Prometheus reads it. Every
    operation with parameters or a body documents its 422. In the generated client, no error is left unparsed."""
    out, _, _ = generated
    paths = json.loads((out.parent / "openapi.json").read_text())["paths"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            responses = operation["responses"]
            if operation.get("parameters") or operation.get("requestBody"):
                assert "422" in responses, (method, path)
            for code, response in responses.items():
                if code[0] not in "45" or path == "/metrics":
                    continue
                content = response.get("content", {})
                assert list(content) == ["application/json"], (method, path, code, content)
                ref = content["application/json"]["schema"].get("$ref")
                assert ref in ERROR_MODELS, (method, path, code, ref)
                if code == "422":
                    assert ref == "#/components/schemas/ValidationErrorOut", (method, path)
    assert paths["/metrics"]["get"]["responses"]["503"]["content"] == {"text/plain": {}}
    for module in (out / "smd_lab_client" / "api").rglob("*.py"):
        source = module.read_text()
        assert not re.search(r"response_[45]\d\d = cast\(Any, None\)", source), module   # an error left unparsed
        for parse in re.findall(r"response_422 = (\w+)\.from_dict", source):
            assert parse == "ValidationErrorOut", module
    parquet = [w for w in re.findall(r"WARNING parsing ([^\n]*)", generated[2]) if "parquet" in w]
    assert sorted(parquet) == sorted(set(parquet)), parquet   # only the 200 of each is Parquet, never an error


def test_the_generated_client_parses_a_422_naming_the_field(generated):
    out, alice, _ = generated
    with generated_package(out):
        from smd_lab_client import AuthenticatedClient
        from smd_lab_client.api.experiments import get_experiment, rerun_experiment, submit_experiment
        from smd_lab_client.api.presets import run_preset
        from smd_lab_client.api.studies import submit_study
        from smd_lab_client.models import (
            NRQSubmission,
            PresetRun,
            RerunIn,
            StudySubmission,
            ValidationErrorItem,
            ValidationErrorOut,
        )

        client = AuthenticatedClient(base_url=alice["SMD_URL"], token=alice["SMD_KEY"])

        def refused(response) -> list[ValidationErrorItem]:
            assert response.status_code == 422, response.content
            assert isinstance(response.parsed, ValidationErrorOut), response.content
            errors = response.parsed.detail
            assert errors and all(isinstance(e, ValidationErrorItem) and e.msg and e.type_ for e in errors), errors
            return errors

        # a submission: the field, its constraint and the value refused
        [error] = refused(submit_experiment.sync_detailed(client=client,
                                                          body=NRQSubmission.from_dict(small_spec(lr=-1))))
        assert error.loc[0] == "body" and error.loc[-2:] == ["params", "lr"] and error.type_ == "greater_than"
        assert error.input_ == -1 and error.ctx.to_dict() == {"gt": 0}

        # a study: the point (its index and axis values) and the field
        study = {"base": small_spec(), "points": [{"params.lr": 0.1}, {"params.lr": -1}]}
        [error] = refused(submit_study.sync_detailed(client=client, body=StudySubmission.from_dict(study)))
        assert error.loc == ["body", "point", 1, "params", "lr"] and error.type_ == "greater_than"
        assert error.point.index == 1 and error.point.values.to_dict() == {"params.lr": -1}

        # a preset run: an unknown size, and an override of no field
        [error] = refused(run_preset.sync_detailed("nrq-equilibrium-tradeoff", client=client,
                                                   body=PresetRun(size="huge")))
        assert error.loc == ["body", "size"] and "huge" in error.msg
        errors = refused(run_preset.sync_detailed("nrq-equilibrium-tradeoff", client=client,
                                                  body=PresetRun.from_dict({"overrides": {"params.lrr": 0.1}})))
        assert ["body", "overrides", "params.lrr"] in [e.loc for e in errors], errors

        # a rerun: the override that makes the spec invalid
        submitted = submit_experiment.sync(client=client, body=NRQSubmission.from_dict(small_spec(steps=20,
                                                                                                  record_every=10)))
        [error] = refused(rerun_experiment.sync_detailed(submitted.id, client=client,
                                                         body=RerunIn.from_dict({"overrides": {"params.lr": -1}})))
        assert error.loc == ["body", "overrides", "params.lr"] and error.type_ == "greater_than"
        deadline = time.monotonic() + 60   # let it end: the server then stops with no job running
        while get_experiment.sync(submitted.id, client=client).status in ("queued", "running"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
