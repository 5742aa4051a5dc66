"""Times are written one way everywhere (store.clock.utc_iso): RFC 3339 in UTC with a Z and six fractional digits,
also on a whole second, where Python's isoformat (and pydantic's) drop the fraction and "…:58Z" sorts after
"…:58.080000Z": a client sorting or comparing the strings would get the order wrong."""
from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timedelta

from sqlalchemy import update

from api.routes.events import _FIELDS, _state
from store import jobs
from store.clock import utc_iso
from store.models import Experiment
from tests.conftest import small_spec
from tests.dbutil import session_scope
from worker.runner import execute_next

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
WHOLE = datetime(2026, 11, 28, 11, 3, 58)   # naive UTC, as SQLite returns it


def test_utc_iso_writes_six_digits_on_a_whole_second():
    assert utc_iso(WHOLE) == "2026-11-28T11:03:58.000000Z"
    assert utc_iso(WHOLE.replace(microsecond=80_000)) == "2026-11-28T11:03:58.080000Z"
    assert utc_iso(WHOLE) < utc_iso(WHOLE.replace(microsecond=80_000))     # strings in time order
    assert utc_iso(None) is None
    state = _state({"status": "running", "step": 0, "total_steps": 10, "pace_start_step": 0, "started_at": WHOLE,
                    "pace_started_at": None, "progressed_at": None, "finished_at": None, "updated_at": WHOLE,
                    "cancel_requested": 0})
    assert state["started_at"] == state["updated_at"] == "2026-11-28T11:03:58.000000Z"   # the event stream's
    assert state["eta"] is None   # no pace yet


def test_every_time_of_an_experiment_and_a_study_has_six_fractional_digits(env):
    client, settings = env
    experiment_id = client.post("/v1/experiments", json=small_spec(trials=8, steps=100)).json()["id"]
    assert execute_next(settings, ["cpu"]) == "succeeded"
    study = client.post("/v1/studies", json={"name": "times", "base": small_spec(trials=8, steps=100),
                                             "grid": {"params.lr": [0.1]}, "seeds": [1]}).json()
    assert execute_next(settings, ["cpu"]) == "succeeded"
    with session_scope(settings.db_url) as s:   # every time of the jobs on a whole second
        s.execute(update(Experiment).values(created_at=WHOLE, started_at=WHOLE, finished_at=WHOLE, updated_at=WHOLE))
    doc = client.get(f"/v1/experiments/{experiment_id}").json()
    times = [doc[k] for k in ("created_at", "started_at", "finished_at", "updated_at")]
    assert doc["pace_started_at"] is not None and TIME.match(doc["pace_started_at"])
    (attempt,) = client.get(f"/v1/experiments/{experiment_id}/attempts").json()
    times += [attempt["started_at"], attempt["ended_at"]]
    listed = client.get("/v1/experiments").json()["items"]
    times += [e[k] for e in listed for k in ("created_at", "started_at", "finished_at", "updated_at")]
    body = client.get(f"/v1/studies/{study['id']}").json()
    times += [body["created_at"], body["started_at"], body["finished_at"]]
    rows = list(csv.DictReader(io.StringIO(client.get("/v1/experiments.csv").text)))
    times += [row["created_at"] for row in rows]
    assert len(times) == 6 + 4 * 2 + 3 + 2 and all(TIME.match(t) for t in times), times
    assert doc["created_at"] == body["started_at"] == "2026-11-28T11:03:58.000000Z"
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert schema["ExperimentOut"]["properties"]["created_at"] == {"type": "string", "format": "date-time",
                                                                   "title": "Created At"}


def test_a_running_experiments_eta_is_its_last_write_plus_the_time_left_at_its_pace(env):
    """50 steps in the 10 s since its first report (step 10), written at 11:04:08: 940 steps left, 188 s, so
    11:07:16, on the database's clock, in the row, the list and the event stream alike. An edit of its tags
    later does not move it (an edit moves updated_at, from which the ETA had been paced); none once a cancel is
    asked, nor once it ended."""
    client, settings = env
    experiment_id = client.post("/v1/experiments", json=small_spec(trials=8, steps=1000)).json()["id"]
    assert client.get(f"/v1/experiments/{experiment_id}").json()["eta"] is None   # queued
    claim = jobs.claim_next(settings.db_url, ["cpu"], "w", 60)
    jobs.record_progress(settings.db_url, claim, 10, 1000)
    assert client.get(f"/v1/experiments/{experiment_id}").json()["eta"] is None   # one report: no pace yet
    jobs.record_progress(settings.db_url, claim, 60, 1000)
    with session_scope(settings.db_url) as s:
        s.execute(update(Experiment).where(Experiment.id == experiment_id).values(
            pace_started_at=WHOLE, pace_start_step=10, step=60, progressed_at=WHOLE + timedelta(seconds=10),
            revision=Experiment.revision + 1))
    expected = "2026-11-28T11:07:16.000000Z"   # 940 steps at 5 steps/s: 188 s after 11:04:08
    assert client.get(f"/v1/experiments/{experiment_id}").json()["eta"] == expected
    assert client.get("/v1/experiments").json()["items"][0]["eta"] == expected
    assert _state(jobs.read_fields(settings.db_url, experiment_id, _FIELDS))["eta"] == expected
    edited = client.patch(f"/v1/experiments/{experiment_id}", json={"tags": ["late"]}).json()
    assert edited["updated_at"] > edited["progressed_at"] and edited["eta"] == expected
    cancelling = client.post(f"/v1/experiments/{experiment_id}/cancel").json()
    assert cancelling["status"] == "running" and cancelling["cancel_requested"] and cancelling["eta"] is None
    assert _state(jobs.read_fields(settings.db_url, experiment_id, _FIELDS))["eta"] is None
    jobs.finish_claimed(settings.db_url, claim, "cancelled")
    assert client.get(f"/v1/experiments/{experiment_id}").json()["eta"] is None
