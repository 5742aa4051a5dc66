"""Fused sweeps through the service (issue 19 point 3): a worker that claims a study's child also claims
the never-started siblings that can share its batch (equal smdengine.fuse_key) and runs them as one
batched run; each child's stored series, summary and theory are bit for bit those of its run alone, and
each has its own attempt and outcome. A child cancelled mid-batch ends cancelled; the others go on."""
from __future__ import annotations

import threading
import time

from fastapi.testclient import TestClient

import smdengine
from api.main import create_app
from tests.api.test_studies import make_settings, run_all, submit
from tests.conftest import small_spec
from worker.runner import execute_next


def statuses(client, study_id: str) -> dict[str, str]:
    return {c["id"]: c["status"] for c in client.get(f"/v1/studies/{study_id}").json()["children"]}


def assert_as_alone(client, experiment_id: str) -> None:
    """The stored result equals the engine's run of the stored spec, exactly."""
    exp = client.get(f"/v1/experiments/{experiment_id}").json()
    stored = client.get(f"/v1/experiments/{experiment_id}/results").json()
    alone = smdengine.run(exp["spec"]).to_document()
    assert stored["series"] == alone["series"]
    assert stored["summary"] == alone["summary"] and stored["theory"] == alone["theory"]
    attempts = client.get(f"/v1/experiments/{experiment_id}/attempts").json()
    assert [a["outcome"] for a in attempts] == ["succeeded"]


def test_a_worker_runs_the_siblings_that_share_a_batch_together(env):
    client, settings = env
    base = small_spec(trials=16, steps=200, record_every=20)
    # lr × weight_decay × seeds differ within a batch; dim is a shape: two batches of 8
    study = submit(client, {"base": base, "seeds": [1, 2],
                            "grid": {"params.dim": [10, 12], "params.lr": [0.05, 0.1],
                                     "params.weight_decay": [0.01, 0.02]}})
    children = client.get(f"/v1/studies/{study['id']}").json()["children"]
    assert execute_next(settings, ["cpu"]) == "succeeded"
    after_one = statuses(client, study["id"])
    by_dim = {dim: [c["id"] for c in children if c["values"]["params.dim"] == dim] for dim in (10, 12)}
    assert {after_one[i] for i in by_dim[10]} == {"succeeded"}     # one claim ran its whole batch
    assert {after_one[i] for i in by_dim[12]} == {"queued"}        # another shape waits for its own
    run_all(settings)
    assert set(statuses(client, study["id"]).values()) == {"succeeded"}
    for child in children:
        assert_as_alone(client, child["id"])


def test_a_child_cancelled_mid_batch_ends_cancelled_and_the_others_finish(tmp_path):
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        base = small_spec(trials=4, dim=4, steps=40_000, record_every=1000)   # ~1–2 s as a batch of 4
        study = submit(client, {"base": base, "seeds": [1, 2], "grid": {"params.lr": [0.05, 0.1]}})
        ids = [c["id"] for c in client.get(f"/v1/studies/{study['id']}").json()["children"]]
        outcome: dict[str, str] = {}
        worker = threading.Thread(target=lambda: outcome.setdefault("status", execute_next(settings, ["cpu"])))
        worker.start()
        deadline = time.monotonic() + 30
        while client.get(f"/v1/experiments/{ids[1]}").json()["step"] == 0:
            assert time.monotonic() < deadline and worker.is_alive(), "the batch never reported progress"
            time.sleep(0.05)
        assert set(statuses(client, study["id"]).values()) == {"running"}   # all four claimed together
        assert client.post(f"/v1/experiments/{ids[1]}/cancel").status_code == 202
        worker.join(timeout=60)
        final = statuses(client, study["id"])
        assert final[ids[1]] == "cancelled"
        assert [final[i] for i in (ids[0], ids[2], ids[3])] == ["succeeded"] * 3
        assert_as_alone(client, ids[2])


def test_a_study_can_forbid_fusion(tmp_path):
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        study = submit(client, {"base": small_spec(trials=8, steps=100, record_every=20), "fuse": False,
                                "grid": {"params.lr": [0.05, 0.1, 0.2]}})
        assert execute_next(settings, ["cpu"]) == "succeeded"
        assert sorted(statuses(client, study["id"]).values()) == ["queued", "queued", "succeeded"]
