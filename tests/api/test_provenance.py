"""Provenance (issue 20): every attempt records the engine version, the code's git commit, torch's and
NumPy's versions, the device (with its model name) and the dtype; results carry it, and say so when a
resumed run's attempts ran other code."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy
import torch

import smdengine
from api.provenance import provenance_of
from store.models import Attempt
from tests.conftest import small_spec
from worker.runner import execute_next

ROOT = Path(__file__).resolve().parents[2]




def expected_commit() -> str | None:
    if not (ROOT / ".git").exists():
        return None
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD", "--"]).returncode == 1
    return head + "+dirty" if dirty else head


def test_an_attempt_records_what_ran_it_and_results_carry_it(env):
    client, settings = env
    r = client.post("/v1/experiments", json=small_spec(trials=8, steps=100, dtype="float32"))
    assert r.status_code == 202, r.text
    assert execute_next(settings, ["cpu"]) == "succeeded"
    experiment_id = r.json()["id"]
    (attempt,) = client.get(f"/v1/experiments/{experiment_id}/attempts").json()
    facts = attempt["provenance"]
    assert facts["engine_version"] == smdengine.engine_version() != "unknown"
    assert facts["torch"] == torch.__version__ and facts["numpy"] == numpy.__version__
    assert facts["device"] == "cpu" and facts["device_name"] and facts["dtype"] == "float32"
    assert facts["git_commit"] == expected_commit()
    doc = client.get(f"/v1/experiments/{experiment_id}/results").json()
    assert doc["provenance"]["note"] is None
    assert doc["provenance"]["attempts"] == [{"number": 1, "outcome": "succeeded", "resumed_from_step": None,
                                              **facts}]


def test_a_run_resumed_by_other_code_says_so():
    first = {"engine_version": "0.1.0", "git_commit": "aaa", "torch": "2.13.0", "device": "cuda",
             "device_name": "NVIDIA H100", "dtype": "float32"}
    same = Attempt(number=2, outcome="succeeded", resumed_from_step=4000, provenance=dict(first))
    assert provenance_of([Attempt(number=1, outcome="lost", provenance=first), same])["note"] is None
    other = Attempt(number=2, outcome="succeeded", resumed_from_step=4000,
                    provenance={**first, "engine_version": "0.2.0", "device": "cpu"})
    got = provenance_of([Attempt(number=1, outcome="lost", provenance=first), other])
    assert got["note"] == ("attempt 2 (resumed from step 4000) ran other code than attempt 1: "
                           "engine_version 0.1.0 → 0.2.0, device cuda → cpu")
    assert [a["engine_version"] for a in got["attempts"]] == ["0.1.0", "0.2.0"]
    # attempts stored before provenance was recorded: listed, never compared
    old = provenance_of([Attempt(number=1, outcome="lost", provenance=None), other])
    assert old["note"] is None and old["attempts"][0] == {"number": 1, "outcome": "lost", "resumed_from_step": None}
