"""Clients no one here writes (issue 20): openapi-python-client generates a client from a real `smd serve`'s
/openapi.json with no warnings but those about binary content types (PNG, SVG, Parquet, which it does
not support), and the generated client submits an nrq experiment, polls it and reads its results."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
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


def test_the_generated_client_submits_polls_and_reads(generated):
    out, alice, _ = generated
    sys.path.insert(0, str(out))
    try:
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
        assert series["step"] == list(range(0, 200, 20)) and len(series["risk"]) == 10
        assert doc.summary.to_dict()["au_rms"] > 0
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.startswith("smd_lab_client")]:
            del sys.modules[name]
