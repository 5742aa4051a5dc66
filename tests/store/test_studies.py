"""store.studies on SQLite and PostgreSQL: create (all or nothing, quotas over the whole study), claim
order, cancel, settle, remove; compare studies' membership."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from store import jobs, studies
from store.migrate import upgrade_head
from store.models import Attempt, Experiment, SeriesChunk, Study, StudyMember
from store.series import write_points
from store.studies import NewChild
from store.users import create_user
from tests.dbutil import session_scope


def children(n: int, work: int = 10) -> list[NewChild]:
    return [NewChild(index=i, point=i // 2, seed=i % 2, values={"params.lr": 0.1 * (i // 2 + 1)}, kind="nrq",
                     name=f"s #{i}", spec={"kind": "nrq", "seed": i % 2}, total_steps=10, queue="cpu", work=work)
            for i in range(n)]


def make(url: str, n: int = 4, **quota) -> tuple[str, studies.StudyView]:
    upgrade_head(url)
    with session_scope(url) as s:
        owner = create_user(s, "alice").id
    return owner, create(url, owner, n, **quota)


def create(url: str, owner: str, n: int, max_active_jobs: int = 100, max_work: int = 10**9) -> studies.StudyView:
    return studies.create(url, owner_id=owner, name="s", visibility="private", priority=1, spec={"base": {}},
                          axes=["params.lr"], points=(n + 1) // 2, children=children(n),
                          max_active_jobs=max_active_jobs, max_work=max_work, default_retry_seconds=60)


def stored(url: str) -> tuple[int, int]:
    with session_scope(url) as s:
        return (s.scalar(select(func.count()).select_from(Study)),
                s.scalar(select(func.count()).select_from(Experiment)))


def test_create_claim_order_cancel_settle_remove(database_url):
    owner, study = make(database_url)
    assert study.status == "queued" and study.children_count == 4 and study.counts["queued"] == 4
    with session_scope(database_url) as s:
        rows = s.scalars(select(Experiment).where(Experiment.study_id == study.id)).all()
        assert len({r.created_at for r in rows}) == 1 and {r.owner_id for r in rows} == {owner}
    ids = [c.id for c in studies.get_with_children(database_url, study.id).children]
    assert jobs.queue_order(database_url, "cpu") == ids
    first = jobs.claim_next(database_url, ["cpu"], "w", 60)
    assert first.experiment_id == ids[0]
    jobs.finish_claimed(database_url, first, "succeeded")
    second = jobs.claim_next(database_url, ["cpu"], "w", 60)
    assert second.experiment_id == ids[1]
    write_points(database_url, ids[1], 0, {"step": [0, 1], "risk": [0.5, 0.4]})
    assert studies.get(database_url, study.id).status == "running"

    assert not studies.remove(database_url, study.id)              # active children: nothing removed
    cancelled = studies.request_cancel(database_url, study.id)
    assert cancelled.cancel_requested and cancelled.counts == {"queued": 0, "running": 1, "succeeded": 1,
                                                               "failed": 0, "cancelled": 2}
    assert cancelled.finished_at is None and jobs.claim_next(database_url, ["cpu"], "w", 60) is None
    jobs.finish_claimed(database_url, second, "cancelled")
    ended = studies.get(database_url, study.id)
    assert ended.status == "partial" and ended.finished_at is not None and ended.revision > cancelled.revision

    assert studies.remove(database_url, study.id)
    assert stored(database_url) == (0, 0)
    with session_scope(database_url) as s:
        assert s.scalar(select(func.count()).select_from(SeriesChunk)) == 0
        assert s.scalar(select(func.count()).select_from(Attempt)) == 0


@pytest.mark.parametrize("quota, error", [({"max_active_jobs": 5}, studies.StudyQuotaExceeded),
                                          ({"max_work": 39}, studies.WorkQuotaExceeded)])
def test_a_study_over_quota_stores_nothing(database_url, quota, error):
    owner, _ = make(database_url, n=2)                                # 2 active jobs already
    with pytest.raises(error):
        create(database_url, owner, 4, **quota)
    assert stored(database_url) == (1, 2)
    create(database_url, owner, 3, **quota)                          # 2 + 3 ≤ 5; work 30 ≤ 39
    assert stored(database_url) == (2, 5)


def test_derive_status():
    d = studies.derive_status
    assert d({"queued": 3}) == "queued"
    assert d({"queued": 2, "succeeded": 1}) == "running" and d({"running": 1}) == "running"
    assert d({"succeeded": 3}) == "succeeded"
    assert d({"failed": 1, "cancelled": 2}) == "failed"
    assert d({"cancelled": 2}) == "cancelled"
    assert d({"succeeded": 1, "failed": 1}) == "partial"


def test_a_study_shares_the_queue_per_user_not_per_study(database_url):
    """Another user's single job, submitted after a study, is next after the study's first child."""
    _, study = make(database_url)
    with session_scope(database_url) as s:
        bob = create_user(s, "bob").id
        single = jobs.create(s, kind="nrq", name="b", spec={"kind": "nrq"}, total_steps=10, owner_id=bob).id
    ids = [c.id for c in studies.get_with_children(database_url, study.id).children]
    assert jobs.queue_order(database_url, "cpu") == [ids[0], single, *ids[1:]]
    claimed = [jobs.claim_next(database_url, ["cpu"], "w", 60).experiment_id for _ in range(3)]
    assert claimed == [ids[0], single, ids[1]]


def test_save_checks_once_after_the_end_only(database_url):
    """A preset study's checks: null at creation, refused while a child is active, stored by the
    first writer once all have ended (the second gets the first's), the revision bumped once; a
    study that is not from a preset never takes checks."""
    owner, plain = make(database_url, n=2)
    study = studies.create(database_url, owner_id=owner, name="p", visibility="private", priority=1,
                           spec={"base": {}}, axes=["params.lr"], points=1, children=children(2),
                           max_active_jobs=100, max_work=10**9, default_retry_seconds=60, preset="demo",
                           preset_size="quick")
    assert (study.preset, study.preset_size, study.checks) == ("demo", "quick", None)
    first = [{"id": "a", "verdict": "reproduced", "measured": 1.0}]
    assert studies.save_checks(database_url, study.id, first) is None          # children queued
    for _ in range(4):   # both studies' children (plain's first: they were created first)
        claim = jobs.claim_next(database_url, ["cpu"], "w", 60)
        jobs.finish_claimed(database_url, claim, "succeeded")
    ended = studies.get(database_url, study.id)
    assert ended.status == "succeeded" and ended.checks is None
    assert studies.save_checks(database_url, study.id, first) == first
    assert studies.save_checks(database_url, study.id, [{"id": "a", "verdict": "other"}]) == first
    again = studies.get(database_url, study.id)
    assert again.checks == first and again.revision == ended.revision + 1
    assert studies.save_checks(database_url, plain.id, first) is None          # not from a preset
    assert studies.get(database_url, plain.id).checks is None
    assert studies.save_checks(database_url, "nope", first) is None


def test_compare_membership(database_url):
    """A compare study's members: its reads join study_members, in request order, whatever study a
    member belongs to; a member deleted (alone or with its study) is missing and raises the compare
    study's revision; removing the compare study keeps its members."""
    owner, grid = make(database_url, n=2)
    with session_scope(database_url) as s:
        solo = jobs.create(s, kind="nrq", name="solo", spec={"kind": "nrq", "seed": 7}, total_steps=10,
                           owner_id=owner).id
    first, second = [c.id for c in studies.get_with_children(database_url, grid.id).children]
    for _ in range(3):
        jobs.finish_claimed(database_url, jobs.claim_next(database_url, ["cpu"], "w", 60), "succeeded")
    with pytest.raises(studies.MembersRefused) as refused:
        studies.create_compare(database_url, owner_id=owner, everyone=False, name=None, visibility="lab",
                               spec={}, experiment_ids=[solo, "nope"])
    assert (refused.value.unknown, refused.value.private) == ([1], [0])
    study = studies.create_compare(database_url, owner_id=owner, everyone=False, name="c", visibility="private",
                                   spec={"experiments": [solo, second]}, experiment_ids=[solo, second])
    assert (study.kind, study.status, study.children_count, study.members) == ("compare", "succeeded", 2,
                                                                               [solo, second])
    got = studies.get_with_children(database_url, study.id)
    assert [(c.id, c.index, c.seed, c.values["name"]) for c in got.children] == [(solo, 0, 7, "solo"),
                                                                                 (second, 1, 1, "s #1")]
    assert [c.id for c in studies.children(database_url, study.id)] == [solo, second]
    assert [c.id for c in studies.children(database_url, grid.id)] == [first, second]   # still its study's
    listed, total = studies.page(database_url, viewer_id=owner, everyone=False)
    assert total == 2 and {s.id: s.kind for s in listed} == {study.id: "compare", grid.id: "expand"}

    jobs.remove(database_url, solo)
    assert studies.remove(database_url, grid.id)           # takes `second` with it
    gone = studies.get_with_children(database_url, study.id)
    assert gone.missing == [solo, second] and gone.children == [] and gone.revision > got.revision
    assert studies.remove(database_url, study.id)
    assert stored(database_url) == (0, 0)
    with session_scope(database_url) as s:
        assert s.scalar(select(func.count()).select_from(StudyMember)) == 0
