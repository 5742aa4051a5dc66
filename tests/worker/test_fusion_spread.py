"""Fused batches sized to the idle capacity a worker can see (store.workers, worker.runner._claim_fusable),
and children resumed after a lost batch fusing again; on SQLite and PostgreSQL with the real engine. The
real-process version (two `smd worker`s splitting a study, one killed): tests/integration/test_fusion_spread.py."""
from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

import smdengine
from store import jobs, studies, workers
from store.migrate import upgrade_head
from store.models import Experiment, Status, utcnow
from store.series import read_series
from store.studies import NewChild
from store.users import create_user
from tests.conftest import small_spec
from tests.dbutil import session_scope
from worker import presence
from worker.runner import execute_next

LRS = [0.05 + 0.01 * i for i in range(16)]


def study(settings, n: int, steps: int = 200) -> list[str]:
    """A study of n children (one point each) that can run fused; their ids in study order."""
    upgrade_head(settings.db_url)
    with session_scope(settings.db_url) as s:
        owner = create_user(s, "alice").id
    children = []
    for i in range(n):
        spec = smdengine.parse_spec(small_spec(steps=steps, record_every=20, lr=LRS[i])).model_dump(mode="json")
        children.append(NewChild(index=i, point=i, seed=3, values={"params.lr": LRS[i]}, kind="nrq", name=f"#{i}",
                                 spec=spec, total_steps=steps, queue="cpu", work=1))
    made = studies.create(settings.db_url, owner_id=owner, name="spread", visibility="private", priority=1,
                          spec={"base": {}}, axes=["params.lr"], points=n, children=children, max_active_jobs=100,
                          max_work=10**9, default_retry_seconds=60)
    with session_scope(settings.db_url) as s:
        return list(s.scalars(select(Experiment.id).where(Experiment.study_id == made.id)
                              .order_by(Experiment.study_index)))


def statuses(settings, ids: list[str]) -> list[str]:
    with session_scope(settings.db_url) as s:
        return [s.get(Experiment, i).status for i in ids]


@pytest.fixture
def registered(settings, monkeypatch):
    """This process registered as a worker process (as every pool process of `smd worker` is)."""
    upgrade_head(settings.db_url)
    me = presence.Presence(settings, "here")
    monkeypatch.setattr(presence, "_current", me)
    me.mark_busy(False)
    yield me
    me.stop()


def test_two_idle_processes_split_a_study_and_a_busy_one_leaves_the_rest(settings, registered):
    ids = study(settings, 16)
    live = presence.live_seconds(settings)
    with session_scope(settings.db_url) as s:
        study_id = s.get(Experiment, ids[0]).study_id
    workers.beat(settings.db_url, "elsewhere/1", "cpu", busy=False)   # another idle process
    workers.beat(settings.db_url, "gpu-box/1", "gpu", busy=False)     # idle, but not serving cpu: not counted
    assert workers.sharing(settings.db_url, "cpu", registered.id, live, study_id) == 2
    assert execute_next(settings, ["cpu"], worker="here") == "succeeded"
    # ⌈16 ÷ 2⌉: this process ran half of the study as one batch; the rest waits for the other
    assert statuses(settings, ids) == [Status.succeeded] * 8 + [Status.queued] * 8
    # the other one running this study's children (it took its share) still counts; busy elsewhere, not
    workers.beat(settings.db_url, "elsewhere/1", "cpu", busy=True, study_id=study_id)
    assert workers.sharing(settings.db_url, "cpu", registered.id, live, study_id) == 2
    workers.beat(settings.db_url, "elsewhere/1", "cpu", busy=True, study_id=None)
    assert workers.sharing(settings.db_url, "cpu", registered.id, live, study_id) == 1
    assert execute_next(settings, ["cpu"], worker="here") == "succeeded"
    assert statuses(settings, ids) == [Status.succeeded] * 16
    with session_scope(settings.db_url) as s:   # marked idle again after its batch
        assert {w: busy for w, busy, _ in workers.live(s, "cpu", live)}[registered.id] is False


def test_a_dead_process_is_not_idle_capacity(settings, registered):
    ids = study(settings, 6)
    workers.beat(settings.db_url, "gone/1", "cpu", busy=False)
    with session_scope(settings.db_url) as s:   # last seen longer ago than a lease: it died
        from store.models import WorkerProcess
        s.execute(update(WorkerProcess).where(WorkerProcess.id == "gone/1")
                  .values(seen_at=utcnow() - timedelta(seconds=10 * settings.lease_seconds)))
    assert workers.sharing(settings.db_url, "cpu", registered.id, presence.live_seconds(settings), None) == 1
    assert execute_next(settings, ["cpu"], worker="here") == "succeeded"
    assert statuses(settings, ids) == [Status.succeeded] * 6
    assert workers.forget_stale(settings.db_url, presence.live_seconds(settings)) == 1


def test_a_worker_known_lost_leaves_no_capacity_behind(settings, registered):
    """`smd serve` restarting its worker sweeps with the lost worker's name: its processes' rows go with its
    leases. Counted live until they went stale, one of them busy with the study halved the batch that resumed
    its children (a batch of 4 of 8 with one worker process)."""
    from worker.sweeper import sweep

    ids = study(settings, 6)
    with session_scope(settings.db_url) as s:
        study_id = s.get(Experiment, ids[0]).study_id
    workers.beat(settings.db_url, "embedded@box/41", "cpu", busy=True, study_id=study_id)   # died with its batch
    workers.beat(settings.db_url, "embedded@box-2/7", "cpu", busy=False)   # another worker's name: stays
    live = presence.live_seconds(settings)
    assert workers.sharing(settings.db_url, "cpu", registered.id, live, study_id) == 3
    sweep(settings, lost_worker="embedded@box")
    assert workers.sharing(settings.db_url, "cpu", registered.id, live, study_id) == 2
    with session_scope(settings.db_url) as s:
        assert sorted(w for w, _, _ in workers.live(s, "cpu", live)) == sorted(["embedded@box-2/7", registered.id])


def test_children_of_a_lost_batch_resume_fused_and_equal_their_runs_alone(settings):
    """Four children that a lost batch checkpointed at one step are claimed by one worker as one batch
    again (one execute_next runs all four), resume from that step, and end bit for bit equal to runs
    that were never interrupted."""
    steps = 400
    ids = study(settings, 4, steps)

    class Stop(Exception):
        pass

    def save(store):
        def hook(c):
            store.append(c)
            if c.step >= 160:
                raise Stop
        return hook

    with session_scope(settings.db_url) as s:   # the lost batch: one attempt each, a checkpoint at step 160
        for i, experiment_id in enumerate(ids):
            kept: list = []
            try:
                smdengine.run(s.get(Experiment, experiment_id).spec, progress_interval=0.0,
                              checkpoint=smdengine.CheckpointHooks(save=save(kept), interval=0.0))
            except Stop:
                pass
            c = jobs.claim_next(s, [], "lost-host", 60, experiment_id)
            jobs.save_checkpoint(s, c, kept[-1].step, kept[-1].n_points, kept[-1].to_bytes())
            assert kept[-1].step == 160, i
        s.execute(update(Experiment).where(Experiment.id.in_(ids))
                  .values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    with session_scope(settings.db_url) as s:
        assert sorted(jobs.expire_leases(s, 3)) == sorted(ids)
    assert execute_next(settings, ["cpu"], worker="w2") == "succeeded"
    assert statuses(settings, ids) == [Status.succeeded] * 4        # one claim ran all four: fused again
    with session_scope(settings.db_url) as s:
        for experiment_id in ids:
            run = s.get(Experiment, experiment_id)
            second = jobs.attempts(s, experiment_id)[1]
            assert run.attempts == 2 and second.resumed_from_step == 160
            alone = smdengine.json_safe(smdengine.run(run.spec).to_document())   # NaN (the final row) as null
            served = smdengine.json_safe(read_series(s, experiment_id))
            assert served == {k: v for k, v in alone["series"].items() if k in served} and len(served) > 3
            assert run.summary == alone["summary"]


def test_a_batch_stopped_while_checkpointing_leaves_its_members_at_one_step(settings, registered, monkeypatch):
    """A fused batch's checkpoints are one transaction (worker.runner._BatchCheckpoints,
    jobs.save_checkpoints): a worker killed between two members' writes of its second checkpoint
    leaves all four at the first one, so they resume as one batch."""
    ids = study(settings, 4, steps=4000)
    # a checkpoint at every progress event, and a progress event at (nearly) every record step: two rounds of
    # checkpoints come before the run ends however fast the machine (at 0.2 s apart, a fast one had only one)
    settings = settings.model_copy(update={"checkpoint_seconds": 1e-9, "flush_seconds": 1e-3})

    class Killed(BaseException):   # as a SIGKILL: nothing of the worker's handles it
        pass

    writes = []
    write_one = jobs.save_checkpoint

    def save_checkpoint(session, claim, step, n_points, data):
        writes.append(step)
        if len(writes) == 6:      # the second member's write of the second checkpoint
            raise Killed
        write_one(session, claim, step, n_points, data)

    monkeypatch.setattr(jobs, "save_checkpoint", save_checkpoint)
    with pytest.raises(Killed):
        execute_next(settings, ["cpu"], worker="here")
    with session_scope(settings.db_url) as s:
        steps = [jobs.load_checkpoint(s, i).step for i in ids]
    assert writes[0] < writes[5] and steps == [writes[0]] * 4, (writes, steps)


def test_a_member_whose_lease_is_gone_writes_no_checkpoint_of_the_batch(settings):
    ids = study(settings, 2)
    with session_scope(settings.db_url) as s:
        a, b = (jobs.claim_next(s, [], "host/1", 60, i) for i in ids)
        s.execute(update(Experiment).where(Experiment.id == b.experiment_id).values(lease_owner="another/1"))
    with pytest.raises(jobs.LeaseLost, match=b.experiment_id):
        jobs.save_checkpoints(settings.db_url, [(a, 20, 2, b"a"), (b, 20, 2, b"b")])
    with session_scope(settings.db_url) as s:
        assert jobs.load_checkpoint(s, a.experiment_id) is None
    jobs.save_checkpoints(settings.db_url, [(a, 20, 2, b"a")])
    with session_scope(settings.db_url) as s:
        assert jobs.load_checkpoint(s, a.experiment_id).data == b"a"
