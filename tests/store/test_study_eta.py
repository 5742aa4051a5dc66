"""store.study_eta: a study's estimated finish from its children's times (pure), and through store.studies
on SQLite and PostgreSQL for a compare study whose members ran long ago."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from store import clock, jobs, studies
from store.models import Experiment
from store.study_eta import ChildTimes, eta_seconds
from tests.dbutil import session_scope
from tests.store.test_studies import make

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ended(start: float, end: float, *, created: float = 0.0, status: str = "succeeded", step: int = 100,
          start_step: int = 0, attempts: int = 1) -> ChildTimes:
    return ChildTimes(status=status, step=step, total_steps=100, start_step=start_step, created_at=at(created),
                      started_at=at(start), finished_at=at(end), attempts=attempts)


def running(start: float, step: int, *, created: float = 0.0, start_step: int = 0, attempts: int = 1,
            own: float | None = None) -> ChildTimes:
    return ChildTimes(status="running", step=step, total_steps=100, start_step=start_step, created_at=at(created),
                      started_at=at(start), finished_at=None, attempts=attempts, own_remaining=own)


def queued(*, created: float = 0.0, attempts: int = 0, started: float | None = None, step: int = 0) -> ChildTimes:
    return ChildTimes(status="queued", step=step, total_steps=100, start_step=0, created_at=at(created),
                      started_at=None if started is None else at(started), finished_at=None, attempts=attempts)


def test_a_study_waiting_its_turn_keeps_its_whole_pace():
    """One worker shared with another user: each 100 s child waits 10 s behind a foreign job. At 270 s,
    2.5 children are done in 270 s and 1.5 are left: 1.5 × 270 / 2.5 = 162 s. The gaps are crossed
    because the later children were waiting for their first run through them."""
    children = [ended(0, 100), ended(110, 210), running(220, 50), queued()]
    assert eta_seconds(children, at(270)) == pytest.approx(1.5 * 270 / 2.5)


def test_a_compare_study_is_paced_by_its_current_runs_not_its_old_members():
    """Two members ended a day ago; the third started 60 s ago and is half done: 60 s left. Paced from the
    first member's start, as before, the study said ~0.2 days."""
    day = 86400.0
    children = [ended(0, 100), ended(50, 150), running(day - 60, 50, created=day - 70)]
    assert eta_seconds(children, at(day)) == pytest.approx(60.0)


def test_a_continued_child_is_paced_from_its_continuation():
    """A study ended an hour ago; one child was continued from step 100 to 200 and is at 150 after 50 s:
    a quarter of a child in 50 s, a quarter left. Its first run (attempt 1) is not this stretch's pace."""
    first = ended(0, 100, step=100)
    continued = ChildTimes(status="running", step=150, total_steps=200, start_step=100, created_at=at(0),
                           started_at=at(3650), finished_at=None, attempts=2)
    assert eta_seconds([first, continued], at(3700)) == pytest.approx(50.0)


def test_a_failed_child_leaves_no_work_and_a_queued_one_a_whole_child():
    """Two workers: a child failed at step 20 after 20 s, another is half done after 100 s, one is queued.
    Done 0.2 + 0.5 in 100 s; left 0.5 + 1: 1.5 × 100 / 0.7 s (the failed child's 0.8 is not left to do)."""
    children = [ended(0, 20, status="failed", step=20), running(0, 50), queued()]
    assert eta_seconds(children, at(100)) == pytest.approx(1.5 * 100 / 0.7)


def test_no_sooner_than_its_slowest_running_child():
    """Two workers ran 3 children in 100 s each; the last, alone, needs 400 s more at its own pace, where the
    study's pace says 0.5 × 250 / 3.5 ≈ 36 s."""
    children = [ended(0, 100), ended(0, 100), ended(100, 200), running(200, 50, own=400.0)]
    assert eta_seconds(children, at(250)) == pytest.approx(400.0)
    faster = [*children[:3], running(200, 50, own=10.0)]
    assert eta_seconds(faster, at(250)) == pytest.approx(0.5 * 250 / 3.5)


def test_nothing_done_yet_says_nothing():
    assert eta_seconds([running(0, 0), queued()], at(30)) is None
    assert eta_seconds([queued(), queued()], at(30)) is None
    assert eta_seconds([ended(0, 10)], at(30)) is None      # nothing left


def test_a_requeued_childs_old_attempt_covers_no_time():
    """A child whose worker died is queued again (attempts 1, its old started_at kept): it leaves a whole
    child to do, does not stretch the pace back to its old start, and does not cross the gap before it."""
    children = [ended(0, 100), queued(attempts=1, started=0, step=30), running(1000, 50, created=990)]
    assert eta_seconds(children, at(1100)) == pytest.approx((0.7 + 0.5) * 100 / 0.5)


def test_through_the_store_a_compare_study_uses_its_current_stretch(database_url):
    """store.studies on both databases: members that ended a day before the running one do not set the pace."""
    owner, grid = make(database_url, n=3)
    ids = [c.id for c in studies.get_with_children(database_url, grid.id).children]
    for _ in range(2):
        jobs.finish_claimed(database_url, jobs.claim_next(database_url, ["cpu"], "w", 60), "succeeded")
    jobs.claim_next(database_url, ["cpu"], "w", 60)
    with session_scope(database_url) as s:
        now = clock.now(s)
        old = now - timedelta(days=1)
        for member in ids[:2]:
            s.execute(update(Experiment).where(Experiment.id == member)
                      .values(step=10, created_at=old, started_at=old, finished_at=old + timedelta(seconds=100)))
        s.execute(update(Experiment).where(Experiment.id == ids[2])
                  .values(step=5, created_at=now - timedelta(seconds=70), started_at=now - timedelta(seconds=60)))
    study = studies.create_compare(database_url, owner_id=owner, everyone=False, name="c", visibility="private",
                                   spec={"experiments": ids}, experiment_ids=ids)
    assert study.status == "running"
    # half of the third member in ~60 s (plus the seconds this test takes): ~60 s left, where a day-old
    # start would give ~0.2 days
    assert 55 <= study.eta_seconds <= 120, study.eta_seconds
    expand = studies.get(database_url, grid.id)
    assert expand.eta_seconds == pytest.approx(study.eta_seconds, rel=0.05)
