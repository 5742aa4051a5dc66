"""Estimated starts of queued jobs (store.queue_stats.estimate_starts): slots free as their running jobs
should end (at their pace once it has settled, else at the mean duration), queued jobs take the earliest
free slot, and an estimate stays put while time passes (it moved with the clock before: 10 s in 8 s)."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from store.queue_stats import estimate_starts, running_end

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ends(starts: list[datetime], mean: float = 30.0, now: datetime = T0) -> list[datetime]:
    """Running jobs that have not made a step yet: they end at the mean duration."""
    return [running_end(t, None, 0, 0, 100, mean, now) for t in starts]


def test_queued_jobs_take_the_earliest_free_slot():
    running = ends([T0, T0 + timedelta(seconds=10)])   # two slots busy, mean 30 s: free at 30 and 40 s
    starts = estimate_starts(4, running, slots=2, mean_seconds=30.0, now=T0 + timedelta(seconds=5))
    assert [(s - T0).total_seconds() for s in starts] == [30, 40, 60, 70]


def test_an_estimate_does_not_move_with_the_clock_while_its_predecessors_run_their_time():
    running = ends([T0])
    first = estimate_starts(3, running, slots=1, mean_seconds=30.0, now=T0 + timedelta(seconds=2))
    later = estimate_starts(3, running, slots=1, mean_seconds=30.0, now=T0 + timedelta(seconds=10))
    assert first == later == [T0 + timedelta(seconds=s) for s in (30, 60, 90)]


def test_an_overdue_job_frees_its_slot_now_and_idle_slots_are_free_now():
    now = T0 + timedelta(seconds=100)   # the running job is 70 s past the mean: its slot frees now
    assert estimate_starts(2, ends([T0]), slots=2, mean_seconds=30.0, now=now) == [now, now]
    assert estimate_starts(1, [], slots=1, mean_seconds=None, now=now) == [None]


def test_a_running_job_ends_at_its_own_pace_once_it_has_settled():
    """A job ten times the mean's length held its slot past the mean: the queue behind it was told "now"."""
    now = T0 + timedelta(seconds=100)
    # 200 of 1000 steps in 100 s: 400 s to go, however short the mean
    assert running_end(T0, T0, 200, 0, 1000, 30.0, now) == now + timedelta(seconds=400)
    # resumed at step 500 100 s ago, 100 steps since: 400 s to go (its whole progress, 0.6, said 67 s)
    assert running_end(T0, T0, 600, 500, 1000, 30.0, now) == now + timedelta(seconds=400)
    # its set-up took 50 s, its first report at step 0: 200 steps in the 50 s since, 800 to go: 200 s (from its
    # start, 200 steps in 100 s, it said 400 s)
    assert running_end(T0, T0 + timedelta(seconds=50), 200, 0, 1000, 30.0, now) == now + timedelta(seconds=200)
    # 5 % into its attempt: its pace may be far off, the mean rules (from its start)
    assert running_end(T0, T0, 50, 0, 1000, 30.0, now) == T0 + timedelta(seconds=30)
    # no report yet (its set-up): the mean
    assert running_end(T0, None, 0, 0, 1000, 30.0, now) == T0 + timedelta(seconds=30)


def test_busy_time_counts_a_fused_batch_or_parallel_processes_once_per_worker():
    from store.queue_stats import busy_seconds

    at = lambda s: T0 + timedelta(seconds=s)  # noqa: E731
    # w1: a fused batch of three children (overlapping 0–10 s), then a run 20–25 s; w2: 0–4 s
    spans = {"w1": [(at(0), at(10)), (at(1), at(9)), (at(0), at(10)), (at(20), at(25))], "w2": [(at(0), at(4))]}
    assert busy_seconds(spans) == 10 + 5 + 4


def test_a_rate_is_taken_over_a_kinds_runs_that_took_a_second_or_more(database_url):
    """A preset's estimated time is its work over this rate: a kind's work units are its own (a train preset
    was timed by nrq runs), and a tiny run is mostly its start (a 36 s preset was estimated at 6543 s)."""
    from sqlalchemy import update

    from store import jobs
    from store.models import Experiment, Status
    from store.queue_stats import MIN_TIMED_SECONDS, busy_time, timed_runs
    from tests.dbutil import session_scope

    def finished(kind: str, seconds: float, worker: str, model: str | None = None) -> None:
        spec = {"kind": kind, "ran": seconds, "params": {"model": model}}
        with session_scope(database_url) as session:
            row = jobs.create(session, kind=kind, name=None, spec=spec, total_steps=1)
            session.execute(update(Experiment).where(Experiment.id == row.id).values(
                status=Status.succeeded, worker=worker, started_at=T0, finished_at=T0 + timedelta(seconds=seconds)))

    finished("nrq", 3.0, "w1")
    finished("train", 5.0, "w1")
    finished("sde", 2.0, "w1", model="toy2d")
    finished("sde", 4.0, "w2", model="norm_map")
    for _ in range(3):   # the newest runs are short: the rate still finds the timed ones behind them
        finished("nrq", MIN_TIMED_SECONDS / 2, "w2")   # mostly start-up: left out
    def ran(*args) -> tuple[list[float], float]:
        runs = timed_runs(database_url, "cpu", *args)
        return [spec["ran"] for spec, *_ in runs], busy_time(runs)

    assert ran("nrq") == ([3.0], 3.0)
    assert ran("train") == ([5.0], 5.0)
    assert ran("sde", "norm_map") == ([4.0], 4.0)   # a model's work units are its own
    assert timed_runs(database_url, "gpu", "nrq") == []


def test_studies_rates_leave_out_studies_that_ran_unfused(database_url):
    """A preset's "studies" estimate is timed by studies' children, which a worker fuses as it will the preset's;
    a study submitted with "fuse": false ran child by child, slower per unit of work (an 8-child one moved a
    preset's estimate from 345 to 591 s)."""
    from sqlalchemy import select, update

    from store import jobs
    from store.models import Experiment, Status, Study, User
    from store.queue_stats import timed_runs
    from tests.conftest import make_users
    from tests.dbutil import session_scope

    make_users(database_url)
    with session_scope(database_url) as session:
        owner = session.scalar(select(User.id).where(User.name == "alice"))
        studies = {}
        for fuse in (True, False, None):
            spec = {"base": {}, **({"fuse": fuse} if fuse is not None else {})}
            study = Study(owner_id=owner, name=None, visibility="private", priority=0, spec=spec, axes=[], children=1,
                          points=1, cancel_requested=False, created_at=T0, revision=0)
            session.add(study)
            session.flush()
            studies[fuse] = study.id
        for fuse, study_id in studies.items():
            row = jobs.create(session, kind="nrq", name=None, spec={"kind": "nrq", "fuse": fuse}, total_steps=1)
            session.execute(update(Experiment).where(Experiment.id == row.id).values(
                status=Status.succeeded, worker="w", started_at=T0, finished_at=T0 + timedelta(seconds=3),
                study_id=study_id))
    fused = [spec["fuse"] for spec, *_ in timed_runs(database_url, "cpu", "nrq", in_studies=True)]
    assert sorted(fused, key=str) == [None, True]   # the default fuses; "fuse": false is left out
    # before the scan's limit: the newest run (the unfused study's) does not take the one place
    with session_scope(database_url) as session:
        session.execute(update(Experiment).where(Experiment.study_id == studies[False])
                        .values(finished_at=T0 + timedelta(seconds=9)))
    assert [spec["fuse"] for spec, *_ in timed_runs(database_url, "cpu", "nrq", scan=1, in_studies=True)] in ([None], [True])
    assert len(timed_runs(database_url, "cpu", "nrq")) == 3   # any runs: all of them
