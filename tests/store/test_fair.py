"""Fair share in store.jobs.claim_next / queue_order, on SQLite and PostgreSQL."""
from __future__ import annotations

from store import jobs, users
from store.migrate import upgrade_head
from store.models import PRIORITIES
from tests.dbutil import session_scope


def setup(url: str, plan: list[tuple[str, str]]) -> dict[str, str]:
    """Users (created on first use) submit jobs in the order of ``plan`` [(user, label)];
    returns {experiment id: label}. A label ending in '!' is a high-priority job."""
    upgrade_head(url)
    labels = {}
    with session_scope(url) as session:
        owners = {}
        for name, label in plan:
            if name not in owners:
                owners[name] = users.create_user(session, name).id
            priority = PRIORITIES["high"] if label.endswith("!") else PRIORITIES["normal"]
            exp = jobs.create(session, kind="nrq", name=label, spec={}, total_steps=1, owner_id=owners[name],
                              priority=priority)
            labels[exp.id] = label
    return labels


def run_one(url: str) -> str:
    """One worker: claim the next job and finish it."""
    with session_scope(url) as session:
        claim = jobs.claim_next(session, ["cpu"], "w", 60)
        jobs.finish_claimed(session, claim, "succeeded")
        return claim.experiment_id


def test_one_worker_takes_users_round_robin(database_url):
    plan = [("a", f"a{i}") for i in range(1, 6)] + [("b", "b1"), ("c", "c1"), ("c", "c2")]
    labels = setup(database_url, plan)
    with session_scope(database_url) as session:
        predicted = [labels[i] for i in jobs.queue_order(session, "cpu")]
    started = [labels[run_one(database_url)] for _ in plan]
    assert started == ["a1", "b1", "c1", "a2", "c2", "a3", "a4", "a5"]
    assert predicted == started


def test_priority_orders_only_a_users_own_jobs(database_url):
    labels = setup(database_url, [("a", "a1"), ("a", "a2"), ("a", "a3!"), ("b", "b1")])
    assert [labels[run_one(database_url)] for _ in range(4)] == ["a3!", "b1", "a1", "a2"]


def test_fewest_running_first_with_several_workers(database_url):
    labels = setup(database_url, [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("b", "b2")])
    with session_scope(database_url) as session:
        held = [jobs.claim_next(session, ["cpu"], f"w{i}", 60) for i in range(3)]  # three busy workers
    assert [labels[c.experiment_id] for c in held] == ["a1", "b1", "a2"]
    with session_scope(database_url) as session:  # a has 2 running, b 1: b's next job goes first
        assert labels[jobs.queue_order(session, "cpu")[0]] == "b2"
        jobs.finish_claimed(session, held[0], "succeeded")
    with session_scope(database_url) as session:  # a 1 running, b 1; a was served last (a2): b2
        assert labels[jobs.claim_next(session, ["cpu"], "w0", 60).experiment_id] == "b2"
        assert labels[jobs.claim_next(session, ["cpu"], "w3", 60).experiment_id] == "a3"


def test_a_job_of_another_queue_or_cancelled_is_not_taken(database_url):
    labels = setup(database_url, [("a", "a1"), ("b", "b1")])
    ids = {label: i for i, label in labels.items()}
    with session_scope(database_url) as session:
        jobs.request_cancel(session, ids["a1"])
    assert labels[run_one(database_url)] == "b1"
    with session_scope(database_url) as session:
        assert jobs.claim_next(session, ["cpu"], "w", 60) is None and jobs.queue_order(session, "cpu") == []


def test_queue_order_survives_a_claim_between_its_reads(database_url, monkeypatch):
    """queue_order reads the claimable jobs, then the owners' fair-share state. A worker that claimed
    a job between two such reads once made it raise KeyError (a 500 of GET /v1/queue, seen in the
    fairness integration test); here a real claim follows queue_order's first read, whatever reads come next."""
    labels = setup(database_url, [("a", "a1"), ("b", "b1")])
    claimed = []
    with session_scope(database_url) as session:
        execute = session.execute

        def execute_then_claim(*args, **kwargs):
            result = execute(*args, **kwargs)
            if not claimed:
                claimed.append(run_one(database_url))   # another session: a worker takes a1
            return result

        monkeypatch.setattr(session, "execute", execute_then_claim)
        order = [labels[i] for i in jobs.queue_order(session, "cpu")]
    assert [labels[i] for i in claimed] == ["a1"]
    # what was claimable when it was read; a was served (a1 started) and b never was, so b goes first
    assert order == ["b1", "a1"]
