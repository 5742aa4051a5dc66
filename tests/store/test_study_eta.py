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


def ended(start: float, end: float, *, queued: float = 0.0, status: str = "succeeded", step: int = 100,
          start_step: int = 0, total: int = 100, kind: str = "nrq") -> ChildTimes:
    return ChildTimes(status=status, kind=kind, step=step, total_steps=total, start_step=start_step,
                      queued_at=at(queued), started_at=at(start), finished_at=at(end))


def running(start: float, step: int, *, queued: float = 0.0, start_step: int = 0, own: float | None = None,
            total: int = 100, kind: str = "nrq") -> ChildTimes:
    return ChildTimes(status="running", kind=kind, step=step, total_steps=total, start_step=start_step,
                      queued_at=at(queued), started_at=at(start), finished_at=None, own_remaining=own)


def queued(*, since: float = 0.0, started: float | None = None, step: int = 0, total: int = 100) -> ChildTimes:
    return ChildTimes(status="queued", kind="nrq", step=step, total_steps=total, start_step=0, queued_at=at(since),
                      started_at=None if started is None else at(started), finished_at=None)


def test_a_study_waiting_its_turn_keeps_its_whole_pace():
    """One worker shared with another user: each 100 s child waits 10 s behind a foreign job. At 270 s,
    2.5 children are done in 270 s and 1.5 are left: 1.5 × 270 / 2.5 = 162 s. The gaps are crossed
    because the later children were queued through them."""
    children = [ended(0, 100), ended(110, 210), running(220, 50, own=50.0), queued()]
    assert eta_seconds(children, at(270)) == pytest.approx(1.5 * 270 / 2.5)


def test_a_first_wave_is_paced_by_its_own_children_not_their_set_up():
    """Two workers, six children of 30 s set-up and 100 s of steps. At 40 s the first two are 10% done, 90 s
    left at their pace: then two more waves of 130 s, 350 s in all, as it will be. The stretch's pace (0.2
    children in 40 s) would say 1160 s."""
    children = [running(0, 10, own=90.0), running(0, 10, own=90.0), *[queued() for _ in range(4)]]
    assert eta_seconds(children, at(40)) == pytest.approx(90 + 2 * (40 + 90))


def test_a_compare_study_is_paced_by_its_current_runs_not_its_old_members():
    """Two members ended a day ago; the third started 60 s ago and is half done: 60 s left. Paced from the
    first member's start, as before, the study said ~0.2 days."""
    day = 86400.0
    children = [ended(0, 100), ended(50, 150), running(day - 60, 50, queued=day - 70, own=60.0)]
    assert eta_seconds(children, at(day)) == pytest.approx(60.0)


def test_continued_children_keep_the_pace_of_their_continuation():
    """A study ended an hour ago; six of its seven children were continued at 3600 s from step 100 to 200 and run on
    two workers, 30 s of set-up and 100 s of steps each, a worker claiming its next child 1 s after the last.
    At 3900 s four have ended and two are 10% into their steps: the gaps of 1 s are crossed (the children
    queued at 3600 s waited through them), and the stretch is [3600, 3900]: its pace 2.1 units in 300 s,
    0.9 left. A child's first run, an hour before, is not part of it."""
    children = [ended(0, 100), *[ended(3600 + 131 * wave, 3730 + 131 * wave, queued=3600, step=200, start_step=100,
                                       total=200) for wave in (0, 1) for _ in range(2)],
                *[running(3862, 110, queued=3600, start_step=100, own=90.0, total=200) for _ in range(2)]]
    done = 4 * 0.5 + 2 * 0.05
    assert eta_seconds(children, at(3900)) == pytest.approx(2 * 0.45 * 300 / done)


def test_a_failed_child_leaves_no_work_and_a_queued_one_a_whole_child():
    """Two workers: a child failed at step 20 after 20 s, another is half done after 100 s, one is queued.
    Done 0.2 + 0.5 in 100 s; left 0.5 + 1: 1.5 × 100 / 0.7 s (the failed child's 0.8 is not left to do)."""
    children = [ended(0, 20, status="failed", step=20), running(0, 50, own=100.0), queued()]
    assert eta_seconds(children, at(100)) == pytest.approx(1.5 * 100 / 0.7)


def test_no_sooner_than_its_slowest_running_child():
    """Two workers ran 3 children in 100 s each; the last, alone, needs 400 s more at its own pace, where the
    study's pace says 0.5 × 250 / 3.5 ≈ 36 s."""
    children = [ended(0, 100), ended(0, 100), ended(100, 200), running(200, 50, own=400.0)]
    assert eta_seconds(children, at(250)) == pytest.approx(400.0)
    faster = [*children[:3], running(200, 50, own=10.0)]
    assert eta_seconds(faster, at(250)) == pytest.approx(0.5 * 250 / 3.5)


def test_nothing_done_yet_says_nothing():
    assert eta_seconds([running(0, 0), queued()], at(30)) is None     # no pace of its own yet
    assert eta_seconds([queued(), queued()], at(30)) is None
    assert eta_seconds([ended(0, 10)], at(30)) is None      # nothing left


def test_children_of_different_lengths_are_paced_by_their_steps():
    """One worker, a sweep over steps: a 1000-step child took 10 s; a 10 000-step one is at step 2000 after 20 s
    (80 s left at its own pace); another 1000-step child waits. 3000 steps in 30 s, 9000 left: 90 s, as it
    will be (80 s, then 10 s). Counted in children, 1.2 done and 1.8 left said 45 s, raised to the 80 s of the
    running child alone."""
    children = [ended(0, 10, step=1000, total=1000), running(10, 2000, own=80.0, total=10_000),
                queued(total=1000)]
    assert eta_seconds(children, at(30)) == pytest.approx(90.0)


def test_a_compare_study_of_several_kinds_counts_each_member_as_one_unit():
    """A train member of 100 steps ended after 100 s; an nrq member of 10 000 steps is 10% done 10 s later (90 s
    left at its own pace), and a second train member waits. Their steps do not add up: 1.1 members done in
    110 s, 1.9 left: 190 s (as steps, 1100 done and 9100 left would say 910 s)."""
    children = [ended(0, 100, kind="train"), running(100, 1000, own=90.0, total=10_000),
                ChildTimes(status="queued", kind="train", step=0, total_steps=100, start_step=0, queued_at=at(0),
                           started_at=None, finished_at=None)]
    assert eta_seconds(children, at(110)) == pytest.approx(1.9 * 110 / 1.1)


def test_a_child_asked_to_cancel_leaves_no_work():
    """Two workers: one child ended (100 s), one is half done, one is stopping at step 50 after a cancel.
    Done 1 + 0.5 + 0.5 in 200 s; left only the working child's 0.5: 0.5 × 200 / 2 = 50 s (counting the
    stopping child's half, 100 s). A study whose every active child is stopping has none."""
    stopping = ChildTimes(status="running", kind="nrq", step=50, total_steps=100, start_step=0, queued_at=at(0),
                          started_at=at(100), finished_at=None, own_remaining=100.0, stopping=True)
    assert eta_seconds([ended(0, 100), running(100, 50, own=50.0), stopping], at(200)) == pytest.approx(50.0)
    assert eta_seconds([ended(0, 100), stopping], at(200)) is None


def test_a_requeued_childs_old_attempt_covers_no_time():
    """A child whose worker died is queued again at 500 s (its old started_at kept; it will restart from its
    checkpoint at step 30): it does not stretch the pace back to its old start, nor cross the gap before 500 s.
    With no run of the stretch ended, the estimate is the running child's 100 s left, then the queued child's
    70 steps at the running child's 2 s a step (its whole run, 200 s for 100 steps, has no set-up): 100 + 140 s."""
    children = [ended(0, 100), queued(since=500, started=0, step=30), running(1000, 50, queued=990, own=100.0)]
    assert eta_seconds(children, at(1100)) == pytest.approx(100 + 70 * 2)


def test_a_first_wave_gives_the_longest_queued_child_the_worker_that_frees_first():
    """Two workers, two 100-step children 10% done after 40 s (1 s a step, 90 s left: 30 s of set-up); queued,
    children of 1000, 100 and 100 steps. The 1000-step one starts at 90 s and takes 30 + 1000 s; the other
    worker runs the two short ones (130 s each) meanwhile: 1120 s. As waves of the longest whole run (130 s),
    it said 90 + 2 × 130 = 350 s."""
    children = [running(0, 10, own=90.0), running(0, 10, own=90.0), queued(total=1000), queued(), queued()]
    assert eta_seconds(children, at(40)) == pytest.approx(90 + 30 + 1000)


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
        s.execute(update(Experiment).where(Experiment.id == ids[2])   # half done, 50 s since its first report
                  .values(step=5, queued_at=now - timedelta(seconds=70), started_at=now - timedelta(seconds=60),
                          pace_started_at=now - timedelta(seconds=50), pace_start_step=0))
    study = studies.create_compare(database_url, owner_id=owner, everyone=False, name="c", visibility="private",
                                   spec={"experiments": ids}, experiment_ids=ids)
    assert study.status == "running"
    # half of the third member in ~50 s of steps (plus the seconds this test takes): ~50 s left at its own pace,
    # where a day-old start would give ~0.2 days
    assert 45 <= study.eta_seconds <= 110, study.eta_seconds
    assert studies.get(database_url, study.id, eta=False).eta_seconds is None   # the events' poll: not computed
    expand = studies.get(database_url, grid.id)
    assert expand.eta_seconds == pytest.approx(study.eta_seconds, rel=0.05)
    # cancelled, it runs until its worker stops the running child: no ETA meanwhile
    stopping = studies.request_cancel(database_url, grid.id)
    assert stopping.status == "running" and stopping.eta_seconds is None


def test_through_the_store_a_requeued_child_restarts_from_its_checkpoint_or_from_0(database_url):
    """Two 10-step children: one took 100 s; the other was at step 6 when its worker gave it back, and has waited
    since. Paced at 0.1 step/s, it has 10 steps to go without a checkpoint (100 s, not the 40 s of its last step)
    and 5 from a checkpoint at step 5 (50 s)."""
    owner, grid = make(database_url, n=2)
    first, second = (c.id for c in studies.get_with_children(database_url, grid.id).children)
    jobs.finish_claimed(database_url, jobs.claim_next(database_url, ["cpu"], "w", 60, first), "succeeded")

    def give_back(checkpoint_step: int | None) -> float:
        claim = jobs.claim_next(database_url, ["cpu"], "w", 60, second)
        jobs.record_progress(database_url, claim, 6, 10)
        if checkpoint_step is not None:
            jobs.save_checkpoint(database_url, claim, checkpoint_step, 1, b"state")
        jobs.release(database_url, claim)
        with session_scope(database_url) as s:
            now = clock.now(s)
            s.execute(update(Experiment).where(Experiment.id == first).values(
                step=10, started_at=now - timedelta(seconds=100), finished_at=now - timedelta(seconds=50)))
            s.execute(update(Experiment).where(Experiment.id == second).values(queued_at=now - timedelta(seconds=60)))
        view = studies.get(database_url, grid.id)
        assert view.status == "running" and view.counts["queued"] == 1
        return view.eta_seconds

    # the seconds this test takes between setting the times and reading them: well under 1%
    assert give_back(None) == pytest.approx(100.0, rel=0.01)
    assert give_back(5) == pytest.approx(50.0, rel=0.01)
