"""Leases, attempts, checkpoints and migrations on SQLite and PostgreSQL (store.jobs)."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from alembic import command
from sqlalchemy import inspect, text, update

from store import jobs
from store.db import get_engine
from store.migrate import alembic_config, upgrade_head
from store.models import Experiment, utcnow
from store.series import read_series, truncate_points, write_points
from tests.dbutil import session_scope


def make(url: str, queue: str = "cpu") -> str:
    upgrade_head(url)
    with session_scope(url) as s:
        return jobs.create(s, kind="nrq", name="x", spec={"kind": "nrq"}, total_steps=10, queue=queue).id


def claim(url, queues=("cpu",), worker="w1", lease=60.0):
    with session_scope(url) as s:
        return jobs.claim_next(s, list(queues), worker, lease)


def expire(url, experiment_id):
    with session_scope(url) as s:
        s.execute(update(Experiment).where(Experiment.id == experiment_id)
                  .values(lease_expires_at=utcnow() - timedelta(seconds=1)))


def row(url, experiment_id) -> Experiment:
    with session_scope(url) as s:
        return s.get(Experiment, experiment_id)


def test_alembic_round_trip(empty_database_url):
    """upgrade → downgrade to base → upgrade, on both databases."""
    cfg = alembic_config(empty_database_url)
    command.upgrade(cfg, "head")
    command.downgrade(cfg, "base")
    assert not {"experiments", "attempts", "checkpoints", "users", "api_keys"} & set(inspect(get_engine(empty_database_url)).get_table_names())
    command.upgrade(cfg, "head")
    get_engine(empty_database_url).dispose()
    tables = set(inspect(get_engine(empty_database_url)).get_table_names())
    assert {"experiments", "series_chunks", "attempts", "checkpoints", "users", "api_keys"} <= tables
    cols = {c["name"] for c in inspect(get_engine(empty_database_url)).get_columns("experiments")}
    assert {"queue", "lease_owner", "lease_expires_at", "owner_id", "visibility", "priority", "revision",
            "warnings"} <= cols
    command.downgrade(cfg, "0006")   # 0007 alone: experiments.warnings goes, and comes back
    get_engine(empty_database_url).dispose()
    assert "warnings" not in {c["name"] for c in inspect(get_engine(empty_database_url)).get_columns("experiments")}
    command.upgrade(cfg, "head")
    command.downgrade(cfg, "0007")   # 0008 alone: study_members and studies.kind go; older studies read as expand
    get_engine(empty_database_url).dispose()
    assert "study_members" not in inspect(get_engine(empty_database_url)).get_table_names()
    with get_engine(empty_database_url).begin() as conn:
        conn.execute(text("INSERT INTO studies (id, spec, axes, children, points, created_at) "
                          "VALUES ('s0', '{}', '[]', 0, 0, CURRENT_TIMESTAMP)"))
    command.upgrade(cfg, "head")
    get_engine(empty_database_url).dispose()
    with get_engine(empty_database_url).begin() as conn:
        assert conn.execute(text("SELECT kind FROM studies WHERE id = 's0'")).scalar() == "expand"
        conn.execute(text("DELETE FROM studies"))
    assert "study_members" in inspect(get_engine(empty_database_url)).get_table_names()
    make(empty_database_url)  # and the schema works
    warned = [{"code": "no_equilibrium", "message": "m", "omits": ["kappa"]}]
    with session_scope(empty_database_url) as s:
        stored = jobs.create(s, kind="nrq", name="w", spec={"kind": "nrq"}, total_steps=10, warnings=warned).id
    assert row(empty_database_url, stored).warnings == warned


def test_names_stored_with_control_characters_are_cleaned_by_0013(empty_database_url):
    """The engine refuses a name with a control character, and re-reads stored specs: a job stored before with
    one (a script's trailing newline) would fail once the worker read it. 0013 writes such characters as spaces,
    in the row, its spec and a study's base."""
    import smdengine

    cfg = alembic_config(empty_database_url)
    command.upgrade(cfg, "0012")
    spec = {"kind": "nrq", "name": "run\n", "params": {"trials": 4, "steps": 20, "record_every": 10}}
    bad, fine = "e-bad", "e-fine"
    with get_engine(empty_database_url).begin() as conn:   # rows as 0012 has them (not head's models)
        for experiment_id, name, stored in ((bad, "a\u001b[31mb\t", spec), (fine, "fine", {**spec, "name": "fine"})):
            conn.execute(text(
                "INSERT INTO experiments (id, kind, name, status, spec, progress, step, total_steps, cancel_requested, "
                "attempts, queue, created_at, updated_at, visibility, priority, revision, keep_checkpoint) VALUES "
                "(:id, 'nrq', :name, 'queued', :spec, 0, 0, 20, :no, 0, 'cpu', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, "
                "'private', 1, 0, :no)"), {"id": experiment_id, "name": name, "spec": json.dumps(stored), "no": False})
        conn.execute(text("INSERT INTO studies (id, name, spec, axes, children, points, created_at, kind) VALUES "
                          "('s0', 'grid\n', :spec, '[]', 0, 0, CURRENT_TIMESTAMP, 'expand')"),
                     {"spec": json.dumps({"name": "grid\n", "base": spec})})
    command.upgrade(cfg, "head")
    get_engine(empty_database_url).dispose()
    with get_engine(empty_database_url).begin() as conn:
        rows = {r[0]: (r[1], json.loads(r[2]) if isinstance(r[2], str) else r[2])
                for r in conn.execute(text("SELECT id, name, spec FROM experiments"))}
        study = conn.execute(text("SELECT name, spec FROM studies")).one()
    assert rows[bad][0] == "a [31mb" and rows[bad][1]["name"] == "run"
    assert rows[fine] == ("fine", {**spec, "name": "fine"})   # untouched
    study_spec = json.loads(study[1]) if isinstance(study[1], str) else study[1]
    assert study[0] == "grid" and study_spec["name"] == "grid" and study_spec["base"]["name"] == "run"
    smdengine.parse_spec(rows[bad][1])   # the engine reads it again


def test_names_stored_with_bidirectional_controls_are_cleaned_by_0016(empty_database_url):
    """As 0013 for control characters: the engine now refuses a name with a bidirectional control and re-reads
    stored specs, so 0016 removes them from a stored name, in the row and its spec (a study's base too)."""
    import smdengine

    cfg = alembic_config(empty_database_url)
    command.upgrade(cfg, "0015")
    spec = {"kind": "nrq", "name": "run-\u202egpj.exe", "params": {"trials": 4, "steps": 20, "record_every": 10}}
    with get_engine(empty_database_url).begin() as conn:
        for experiment_id, stored in (("e-bidi", spec), ("e-fine", {**spec, "name": "fine"})):
            conn.execute(text(
                "INSERT INTO experiments (id, kind, name, status, spec, progress, step, total_steps, cancel_requested, "
                "attempts, queue, created_at, updated_at, visibility, priority, revision, keep_checkpoint, start_step) "
                "VALUES (:id, 'nrq', :name, 'queued', :spec, 0, 0, 20, :no, 0, 'cpu', CURRENT_TIMESTAMP, "
                "CURRENT_TIMESTAMP, 'private', 1, 0, :no, 0)"),
                {"id": experiment_id, "name": stored["name"], "spec": json.dumps(stored), "no": False})
            conn.execute(text("INSERT INTO checkpoints (experiment_id, attempt, step, n_points, data, created_at) "
                              "VALUES (:id, 1, 5, 1, :data, CURRENT_TIMESTAMP)"), {"id": experiment_id, "data": b"x"})
        conn.execute(text("INSERT INTO studies (id, name, spec, axes, children, points, created_at, kind) VALUES "
                          "('s0', '\u2067grid\u2069', :spec, '[]', 0, 0, CURRENT_TIMESTAMP, 'expand')"),
                     {"spec": json.dumps({"name": "\u2067grid\u2069", "base": spec})})
    command.upgrade(cfg, "head")
    get_engine(empty_database_url).dispose()
    with get_engine(empty_database_url).begin() as conn:
        name, stored = conn.execute(text("SELECT name, spec FROM experiments WHERE id = 'e-bidi'")).one()
        # the renamed job's checkpoint is dropped (its fingerprint hashed the old name), the other's kept
        assert conn.execute(text("SELECT experiment_id FROM checkpoints")).scalars().all() == ["e-fine"]
        study = conn.execute(text("SELECT name, spec FROM studies")).one()
    stored = json.loads(stored) if isinstance(stored, str) else stored
    study_spec = json.loads(study[1]) if isinstance(study[1], str) else study[1]
    assert name == stored["name"] == "run-gpj.exe" and stored["params"] == spec["params"]
    assert study[0] == study_spec["name"] == "grid" and study_spec["base"]["name"] == "run-gpj.exe"
    smdengine.parse_spec(stored)   # the engine reads it again


def test_checkpoints_of_ended_jobs_are_dropped_by_0015(empty_database_url):
    """A lost worker's job that the sweeper ended (cancelled, or failed at its attempts cap) kept its checkpoint
    for good; a running job's and a kept final one (succeeded, to continue from) stay."""
    cfg = alembic_config(empty_database_url)
    command.upgrade(cfg, "0014")
    with get_engine(empty_database_url).begin() as conn:
        for experiment_id, status in (("e-cancelled", "cancelled"), ("e-failed", "failed"), ("e-running", "running"),
                                      ("e-kept", "succeeded")):
            conn.execute(text(
                "INSERT INTO experiments (id, kind, status, spec, progress, step, total_steps, cancel_requested, "
                "attempts, queue, created_at, updated_at, visibility, priority, revision, keep_checkpoint) VALUES "
                "(:id, 'nrq', :status, '{}', 0, 0, 20, :no, 1, 'cpu', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, "
                "'private', 1, 0, :no)"), {"id": experiment_id, "status": status, "no": False})
            conn.execute(text("INSERT INTO checkpoints (experiment_id, attempt, step, n_points, data, created_at) "
                              "VALUES (:id, 1, 5, 1, :data, CURRENT_TIMESTAMP)"), {"id": experiment_id, "data": b"x"})
    command.upgrade(cfg, "head")
    get_engine(empty_database_url).dispose()
    with get_engine(empty_database_url).begin() as conn:
        left = sorted(r[0] for r in conn.execute(text("SELECT experiment_id FROM checkpoints")))
    assert left == ["e-kept", "e-running"]


def test_claim_takes_oldest_of_its_queues_exclusively(database_url):
    first, gpu, second = make(database_url), make(database_url, "gpu"), make(database_url)
    a = claim(database_url)
    b = claim(database_url, worker="w2")
    assert (a.experiment_id, b.experiment_id) == (first, second) and a.attempt == b.attempt == 1
    assert claim(database_url) is None                   # cpu queue empty; the gpu job is not taken
    assert claim(database_url, ("gpu", "cpu")).experiment_id == gpu
    assert row(database_url, first).lease_owner == a.owner and a.owner.startswith("w1/")
    with session_scope(database_url) as s:
        assert [t.number for t in jobs.attempts(s, first)] == [1]


def test_cancelled_queued_job_is_never_claimed(database_url):
    exp = make(database_url)
    with session_scope(database_url) as s:
        jobs.request_cancel(s, exp)
    assert claim(database_url) is None
    assert row(database_url, exp).status == "cancelled"


def test_a_lease_renewal_is_no_change_a_client_sees(database_url):
    """Documents are kept by revision (store.kept, api.rendered): what a renewal writes must not be in
    them. It moves the lease's expiry only, not the revision or updated_at; progress moves both."""
    exp = make(database_url)
    a = claim(database_url)
    before = row(database_url, exp)
    jobs.renew(database_url, a, 120)
    renewed = row(database_url, exp)
    assert renewed.lease_expires_at > before.lease_expires_at
    assert (renewed.revision, renewed.updated_at) == (before.revision, before.updated_at)
    jobs.record_progress(database_url, a, 5, 10)
    moved = row(database_url, exp)
    assert moved.revision > before.revision and moved.updated_at >= before.updated_at


def test_writes_need_the_lease(database_url):
    exp = make(database_url)
    a = claim(database_url)
    with session_scope(database_url) as s:
        jobs.renew(s, a, 60)
        assert jobs.record_progress(s, a, 5, 10) is False
    expire(database_url, exp)
    with session_scope(database_url) as s:
        assert jobs.expire_leases(s, max_attempts=3) == [exp]
    b = claim(database_url, worker="w2")
    assert b.experiment_id == exp and b.attempt == 2
    for write in (lambda s: jobs.renew(s, a, 60), lambda s: jobs.record_progress(s, a, 6, 10),
                  lambda s: jobs.save_checkpoint(s, a, 6, 1, b"x"),
                  lambda s: jobs.finish_claimed(s, a, "succeeded")):
        with pytest.raises(jobs.LeaseLost):
            with session_scope(database_url) as s:
                write(s)
    with session_scope(database_url) as s:
        jobs.finish_claimed(s, b, "succeeded", summary={"ok": 1})
        assert [(t.number, t.outcome) for t in jobs.attempts(s, exp)] == [(1, "lost"), (2, "succeeded")]
    done = row(database_url, exp)
    assert done.status == "succeeded" and done.lease_owner is None and done.summary == {"ok": 1}


def test_attempts_cap_fails_with_reason(database_url):
    exp = make(database_url)
    for attempt in (1, 2, 3):
        c = claim(database_url, worker=f"w{attempt}")
        assert c.attempt == attempt
        expire(database_url, exp)
        with session_scope(database_url) as s:
            requeued = jobs.expire_leases(s, max_attempts=3)
        assert requeued == ([exp] if attempt < 3 else [])
    failed = row(database_url, exp)
    assert failed.status == "failed" and failed.attempts == 3
    assert "lost during each of its 3 attempts" in failed.error and "w3" in failed.error
    assert claim(database_url) is None


def test_live_lease_is_kept_and_lost_worker_expired_by_name(database_url):
    exp = make(database_url)
    claim(database_url, worker="embedded@h")
    with session_scope(database_url) as s:
        assert jobs.expire_leases(s, 3) == []                      # lease still valid
        assert jobs.expire_leases(s, 3, owner_prefix="embedded@") == []  # a prefix of the name is not the name
        assert jobs.expire_leases(s, 3, owner_prefix="embedded@h") == [exp]
    assert row(database_url, exp).status == "queued"


def checkpointed_and_lost(url: str, *, cancel: bool = False) -> str:
    """A job claimed, checkpointed (and flagged for cancel), whose worker's lease then lapsed."""
    exp = make(url)
    c = claim(url)
    with session_scope(url) as s:
        jobs.save_checkpoint(s, c, 5, 1, b"state")
        if cancel:
            jobs.request_cancel(s, exp)
    expire(url, exp)
    return exp


def test_cancel_of_running_job_with_lost_worker_ends_cancelled(database_url):
    """Its checkpoint goes with it (nothing resumes an ended job; it stayed in the database for good), as
    when a lost worker's job fails for its attempts cap, or a requeued one is cancelled while queued."""
    cancelled = checkpointed_and_lost(database_url, cancel=True)
    with session_scope(database_url) as s:
        assert jobs.expire_leases(s, 3) == []
    capped = checkpointed_and_lost(database_url)
    with session_scope(database_url) as s:
        assert jobs.expire_leases(s, 1) == []
    queued = checkpointed_and_lost(database_url)
    with session_scope(database_url) as s:
        assert jobs.expire_leases(s, 3) == [queued]
        jobs.request_cancel(s, queued)
    assert [row(database_url, e).status for e in (cancelled, capped, queued)] == ["cancelled", "failed", "cancelled"]
    with session_scope(database_url) as s:
        assert all(jobs.load_checkpoint(s, e) is None for e in (cancelled, capped, queued))


@pytest.mark.parametrize("give_back", [jobs.release, jobs.interrupt])
def test_a_job_cancelled_before_its_worker_gave_it_back_ends_cancelled(database_url, give_back):
    """Cancel, then the worker's shutdown (or outage) gives the job back before its next progress write saw
    the cancel: it stayed queued with a cancel requested, which nothing claims, for good."""
    from store.models import Attempt

    exp = make(database_url)
    c = claim(database_url)
    with session_scope(database_url) as s:
        jobs.save_checkpoint(s, c, 5, 1, b"state")
        jobs.request_cancel(s, exp)
    assert row(database_url, exp).status == "running"
    with session_scope(database_url) as s:
        give_back(s, c)
    ended = row(database_url, exp)
    assert (ended.status, ended.cancel_requested, ended.lease_owner) == ("cancelled", True, None)
    assert ended.finished_at is not None
    with session_scope(database_url) as s:
        assert [a.outcome for a in s.query(Attempt).filter_by(experiment_id=exp)] == ["cancelled"]
        assert jobs.load_checkpoint(s, exp) is None
    # without a cancel the job goes back to the queue, as before
    other = make(database_url)
    c = claim(database_url)
    with session_scope(database_url) as s:
        give_back(s, c)
    assert row(database_url, other).status == "queued"


def test_checkpoint_replaced_and_dropped_at_the_end(database_url):
    exp = make(database_url)
    c = claim(database_url)
    with session_scope(database_url) as s:
        jobs.save_checkpoint(s, c, 10, 2, b"one")
    with session_scope(database_url) as s:
        jobs.save_checkpoint(s, c, 20, 4, b"two")
    with session_scope(database_url) as s:
        stored = jobs.load_checkpoint(s, exp)
        assert (stored.step, stored.n_points, stored.data, stored.attempt) == (20, 4, b"two", 1)
        jobs.finish_claimed(s, c, "succeeded")
    with session_scope(database_url) as s:
        assert jobs.load_checkpoint(s, exp) is None


def test_truncate_points_cuts_inside_a_chunk(database_url):
    exp = make(database_url)
    with session_scope(database_url) as s:
        write_points(s, exp, 0, {"step": [0, 1, 2], "risk": [0.0, 0.1, 0.2]})
        write_points(s, exp, 3, {"step": [3, 4], "risk": [0.3, 0.4]})
    with session_scope(database_url) as s:
        truncate_points(s, exp, 2)
    with session_scope(database_url) as s:
        assert read_series(s, exp) == {"step": [0, 1], "risk": [0.0, 0.1]}
        write_points(s, exp, 2, {"step": [2, 3], "risk": [0.2, 0.3]})
    with session_scope(database_url) as s:
        assert read_series(s, exp) == {"step": [0, 1, 2, 3], "risk": [0.0, 0.1, 0.2, 0.3]}


def test_an_attempt_shows_the_step_it_starts_from(database_url):
    """A claim shows no pace yet (start_step = step); its start sets step, progress and start_step to the
    checkpoint's step it resumes from, or to 0 from scratch: the last attempt's last flush is no longer shown.
    Its pace starts at its first progress report, set-up done: (step − pace_start_step) / (now −
    pace_started_at), the first report's time and step, which later reports leave as they are."""
    exp = make(database_url)   # 10 steps
    first = claim(database_url)
    jobs.begin_attempt(database_url, first, theory={})
    assert jobs.get(database_url, exp).pace_started_at is None      # no report yet: no pace
    jobs.record_progress(database_url, first, 3, 10)
    paced = jobs.get(database_url, exp)
    assert paced.pace_start_step == 3 and paced.pace_started_at is not None
    jobs.record_progress(database_url, first, 7, 10)
    now = jobs.get(database_url, exp)
    assert (now.pace_start_step, now.pace_started_at) == (3, paced.pace_started_at)   # the first report's
    expire(database_url, exp)
    with session_scope(database_url) as s:
        assert jobs.expire_leases(s, 5) == [exp]
    assert jobs.get(database_url, exp).pace_started_at is None     # requeued: no pace until it runs again
    second = claim(database_url)
    now = jobs.get(database_url, exp)
    assert (now.step, now.start_step, now.progress) == (7, 7, 0.7)   # claimed: no pace until it starts
    assert now.pace_started_at is None and now.pace_start_step == 7
    revision = now.revision
    jobs.begin_attempt(database_url, second, theory={}, resume_points={"step": [0, 2, 4]}, resume_step=4)
    now = jobs.get(database_url, exp)
    assert (now.step, now.start_step, now.progress) == (4, 4, 0.4) and now.revision > revision
    assert (now.pace_started_at, now.pace_start_step) == (None, 4)
    jobs.record_progress(database_url, second, 6, 10)
    assert jobs.get(database_url, exp).pace_start_step == 6
    expire(database_url, exp)
    with session_scope(database_url) as s:
        assert jobs.expire_leases(s, 5) == [exp]
    third = claim(database_url)
    jobs.begin_attempt(database_url, third, theory={})   # its checkpoint could not be used: from scratch
    now = jobs.get(database_url, exp)
    assert (now.step, now.start_step, now.progress) == (0, 0, 0.0)
    with session_scope(database_url) as s:
        assert [a.resumed_from_step for a in jobs.attempts(s, exp)] == [None, 4, None]


def test_outputs_are_read_again_when_the_revision_changes(database_url):
    """jobs.outputs keeps the theory read at a revision: the theory stored at the start of an attempt
    and at the end bumps it, so a caller with the current row never gets an older theory."""
    exp = make(database_url)
    c = claim(database_url)
    assert jobs.outputs(database_url, exp, jobs.get(database_url, exp).revision) == ({}, {})
    jobs.begin_attempt(database_url, c, theory={"risk_theory": [1.0, 2.0]})
    revision = jobs.get(database_url, exp).revision
    assert jobs.outputs(database_url, exp, revision) == ({"risk_theory": [1.0, 2.0]}, {})
    with session_scope(database_url) as s:  # behind the store's back: the same revision is served from memory
        s.execute(update(Experiment).where(Experiment.id == exp).values(theory={"risk_theory": [9.0]}))
    assert jobs.outputs(database_url, exp, revision)[0] == {"risk_theory": [1.0, 2.0]}
    assert jobs.outputs(database_url, exp)[0] == {"risk_theory": [9.0]}  # no revision: always read
    jobs.finish_claimed(database_url, c, "succeeded", theory={"risk_theory": [3.0]}, distributions={"f": [1]})
    assert jobs.outputs(database_url, exp, jobs.get(database_url, exp).revision) == ({"risk_theory": [3.0]},
                                                                                   {"f": [1]})


ELAPSED, DEFAULT = 10.0, 5   # seconds a test job has run; the server's default Retry-After


@pytest.mark.parametrize("step, start_step, expected", [
    # below SETTLED_PROGRESS the pace (ELAPSED · 980/20 = 490 s at 2 %) may be far off: the default
    (int(jobs.SETTLED_PROGRESS * 1000) // 5, 0, DEFAULT),
    # settled: the pace itself, ELAPSED · (1000 − 500)/500 = 10 s
    (500, 0, ELAPSED * (1000 - 500) / 500),
    # its first report at step 500 (resumed or continued there, or past its set-up): 100 steps in ELAPSED, 400
    # to go (its whole progress, 0.6, gave 6.7 s)
    (600, 500, ELAPSED * (1000 - 600) / (600 - 500))])
def test_retry_after_trusts_a_pace_only_once_it_has_settled(database_url, step, start_step, expected):
    """Retry-After of an over-quota owner: the time their running job should still take at its current
    attempt's pace (elapsed × steps left / steps done since its first progress report, at pace_start_step),
    but not more than the default while that attempt is below SETTLED_PROGRESS (a 1 s job seen at 2 % after
    0.5 s would give 24 s)."""
    from store import users

    experiment_id = make(database_url)
    with session_scope(database_url) as s:
        owner = users.create_user(s, "alice").id
        s.execute(update(Experiment).where(Experiment.id == experiment_id).values(
            owner_id=owner, status="running", step=step, pace_start_step=start_step, total_steps=1000,
            progress=step / 1000, started_at=utcnow() - timedelta(seconds=3 * ELAPSED),   # its set-up: not paced
            pace_started_at=utcnow() - timedelta(seconds=ELAPSED)))
    # rounded down to whole seconds; the statements after started_at add at most a second to the elapsed time
    assert expected - 1 <= jobs.retry_after(database_url, owner, DEFAULT) <= expected
    assert jobs.retry_after(database_url, "nobody", DEFAULT) == DEFAULT


def test_queued_at_is_filled_by_0018_from_what_rows_say(empty_database_url):
    """0018 adds experiments.queued_at (when the current attempt was queued: store.study_eta) and fills it for rows
    stored before: created_at on a first attempt, updated_at (the requeue's) for a job queued again, else
    started_at."""
    cfg = alembic_config(empty_database_url)
    command.upgrade(cfg, "0017")
    rows = {"e-new": ("queued", 0, None), "e-ran": ("succeeded", 1, "2026-01-03 00:00:00"),
            "e-requeued": ("queued", 2, "2026-01-03 00:00:00"), "e-retried": ("running", 3, "2026-01-04 00:00:00")}
    with get_engine(empty_database_url).begin() as conn:   # rows as 0017 has them
        for experiment_id, (status, attempts, started) in rows.items():
            conn.execute(text(
                "INSERT INTO experiments (id, kind, status, spec, progress, step, total_steps, cancel_requested, "
                "attempts, queue, created_at, updated_at, started_at, visibility, priority, revision, "
                "keep_checkpoint, start_step, pace_start_step) VALUES (:id, 'nrq', :status, '{}', 0, 0, 20, :no, "
                ":attempts, 'cpu', '2026-01-01 00:00:00', '2026-01-02 00:00:00', :started, 'private', 1, 0, :no, 0, 0)"),
                {"id": experiment_id, "status": status, "attempts": attempts, "started": started, "no": False})
    command.upgrade(cfg, "head")
    get_engine(empty_database_url).dispose()
    with get_engine(empty_database_url).begin() as conn:
        queued = {r[0]: str(r[1])[:10] for r in conn.execute(text("SELECT id, queued_at FROM experiments"))}
    assert queued == {"e-new": "2026-01-01", "e-ran": "2026-01-01", "e-requeued": "2026-01-02",
                      "e-retried": "2026-01-04"}


def test_progressed_at_is_filled_by_0019_where_an_attempt_reported(empty_database_url):
    """0019 adds experiments.progressed_at (when the step was last written: store.jobs.estimated_finish): updated_at
    for a row whose attempt has a pace (it reported), null for one that has not."""
    cfg = alembic_config(empty_database_url)
    command.upgrade(cfg, "0018")
    with get_engine(empty_database_url).begin() as conn:   # rows as 0018 has them
        for experiment_id, paced in (("e-paced", "2026-01-01 00:00:05"), ("e-unpaced", None)):
            conn.execute(text(
                "INSERT INTO experiments (id, kind, status, spec, progress, step, total_steps, cancel_requested, "
                "attempts, queue, created_at, updated_at, started_at, pace_started_at, visibility, priority, revision, "
                "keep_checkpoint, start_step, pace_start_step) VALUES (:id, 'nrq', 'running', '{}', 0, 0, 20, :no, 1, "
                "'cpu', '2026-01-01 00:00:00', '2026-01-02 00:00:00', '2026-01-01 00:00:00', :paced, 'private', 1, 0, "
                ":no, 0, 0)"), {"id": experiment_id, "paced": paced, "no": False})
    command.upgrade(cfg, "head")
    get_engine(empty_database_url).dispose()
    with get_engine(empty_database_url).begin() as conn:
        written = {r[0]: r[1] and str(r[1])[:10] for r in conn.execute(text("SELECT id, progressed_at FROM experiments"))}
    assert written == {"e-paced": "2026-01-02", "e-unpaced": None}
