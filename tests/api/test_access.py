"""Users, keys, ownership and visibility, quotas, ETags, incremental results and cursor pages
(issue 6 acceptance 1, 3 and 4), on SQLite and PostgreSQL."""
from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from api.main import UnsafeAuth, create_app
from store import users
from store.models import Experiment
from store.settings import Settings
from tests.conftest import auth, make_users, small_spec
from tests.dbutil import session_scope
from worker.runner import execute


def submit(client, key, **extra) -> dict:
    r = client.post("/v1/experiments", json={**small_spec(), **extra}, headers=auth(key))
    assert r.status_code == 202, r.text
    return r.json()


def test_missing_wrong_revoked_and_query_keys_are_401(lab, database_url):
    client, keys, _ = lab
    for headers in ({}, auth("smd_000000000000_" + "x" * 43), auth(keys.alice[:-1] + "?"), {"Authorization": "Basic eA=="},
                    auth("nonsense")):
        r = client.get("/v1/experiments", headers=headers)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer", (headers, r.text)
    assert client.get("/v1/experiments", headers=auth(keys.alice)).status_code == 200
    # a key in the query string is refused even when it is valid, and even with a good header
    for params in ({"api_key": keys.alice}, {"kind": keys.alice}):
        r = client.get("/v1/experiments", params=params, headers=auth(keys.alice))
        assert r.status_code == 401 and "query string" in r.json()["detail"]
    with session_scope(database_url) as session:
        users.revoke_key(session, keys.alice.split("_")[1])
    r = client.get("/v1/experiments", headers=auth(keys.alice))
    assert r.status_code == 401 and "revoked" in r.json()["detail"]
    assert client.get("/healthz").status_code == 200   # probes stay open


def test_private_lab_and_admin_access(lab, settings):
    """Acceptance 1: bob cannot see, read results of, cancel or delete alice's private experiment
    (404); he can read her lab experiment but not cancel or delete it (403); root can do all."""
    client, keys, settings = lab
    private = submit(client, keys.alice)
    shared = submit(client, keys.alice, visibility="lab")
    assert private["owner"] == "alice" and private["visibility"] == "private" and shared["visibility"] == "lab"
    base = "/v1/experiments/"
    for method, path in (("get", ""), ("get", "/results"), ("get", "/attempts"), ("get", "/plots/risk.png"),
                         ("post", "/cancel"), ("delete", "")):
        r = client.request(method.upper(), base + private["id"] + path, headers=auth(keys.bob))
        assert r.status_code == 404 and private["id"] in r.json()["detail"], (method, path, r.text)
    assert client.get(base + shared["id"], headers=auth(keys.bob)).json()["owner"] == "alice"
    assert client.get(base + shared["id"] + "/results", headers=auth(keys.bob)).status_code == 200
    for method, path in (("post", "/cancel"), ("delete", "")):
        r = client.request(method.upper(), base + shared["id"] + path, headers=auth(keys.bob))
        assert r.status_code == 403 and "owner or an admin" in r.json()["detail"]
    listed = {e["id"] for e in client.get("/v1/experiments", headers=auth(keys.bob)).json()["items"]}
    assert listed == {shared["id"]}
    everything = client.get("/v1/experiments", headers=auth(keys.root)).json()
    assert everything["total"] == 2
    assert client.get("/v1/experiments", params={"owner": "alice"}, headers=auth(keys.bob)).json()["total"] == 1
    # the admin reads, cancels and deletes
    assert client.get(base + private["id"] + "/results", headers=auth(keys.root)).status_code == 200
    assert client.post(base + private["id"] + "/cancel", headers=auth(keys.root)).json()["status"] == "cancelled"
    assert client.delete(base + private["id"], headers=auth(keys.root)).status_code == 204
    assert client.get(base + private["id"], headers=auth(keys.alice)).status_code == 404
    # the owner deletes only what has ended
    r = client.delete(base + shared["id"], headers=auth(keys.alice))
    assert r.status_code == 409 and "cancel it first" in r.json()["detail"]
    assert execute(settings, shared["id"], "w") == "succeeded"
    assert client.delete(base + shared["id"], headers=auth(keys.alice)).status_code == 204
    assert client.get("/v1/experiments", headers=auth(keys.root)).json()["total"] == 0


def test_high_priority_is_for_admins(lab):
    client, keys, _ = lab
    r = client.post("/v1/experiments", json={**small_spec(), "priority": "high"}, headers=auth(keys.alice))
    assert r.status_code == 403 and "admins only" in r.json()["detail"]
    assert submit(client, keys.root, priority="high")["priority"] == "high"
    assert submit(client, keys.alice, priority="low")["priority"] == "low"
    r = client.post("/v1/experiments", json={**small_spec(), "visibility": "world"}, headers=auth(keys.alice))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "visibility"


def test_active_jobs_quota_is_429_and_creates_nothing(tmp_path, database_url):
    """Acceptance 3: over a quota → 429 with Retry-After naming the limit; nothing was created."""
    settings = Settings(state_dir=tmp_path / "state", database_url=database_url, auth="on", max_active_jobs=3)
    keys = make_users(database_url, max_active_jobs=2)   # alice's override; bob keeps the default 3
    with TestClient(create_app(settings)) as client:
        first = [submit(client, keys.alice)["id"] for _ in range(2)]
        r = client.post("/v1/experiments", json=small_spec(), headers=auth(keys.alice))
        assert r.status_code == 429, r.text
        assert int(r.headers["Retry-After"]) >= 1 and r.headers["SMD-Quota"] == "active_jobs"
        assert "at most 2 queued + running jobs for alice" in r.json()["detail"]
        assert client.get("/v1/experiments", headers=auth(keys.alice)).json()["total"] == 2
        for _ in range(3):
            submit(client, keys.bob)
        assert client.post("/v1/experiments", json=small_spec(), headers=auth(keys.bob)).status_code == 429
        # a finished job frees its slot
        assert execute(settings, first[0], "w") == "succeeded"
        submit(client, keys.alice)
        # the work quota is per user too
        r = client.post("/v1/experiments", json=small_spec(trials=10**6, steps=10**6), headers=auth(keys.root))
        assert r.status_code == 429 and "work per job" in r.json()["detail"] and "Retry-After" not in r.headers


def test_concurrent_submissions_never_exceed_the_quota(tmp_path, database_url):
    """The quota check and the insert are one step: 12 parallel submissions against a quota of 5
    leave exactly 5 jobs (the others 429, none a 500)."""
    settings = Settings(state_dir=tmp_path / "state", database_url=database_url, auth="on", max_active_jobs=5)
    keys = make_users(database_url)
    codes = []
    with TestClient(create_app(settings)) as client:
        def one():
            codes.append(client.post("/v1/experiments", json=small_spec(), headers=auth(keys.bob)).status_code)
        threads = [threading.Thread(target=one) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(codes) == [202] * 5 + [429] * 7
        assert client.get("/v1/experiments", headers=auth(keys.bob)).json()["total"] == 5


def test_etag_304_and_since_step_on_a_running_job(client, settings):
    """Acceptance 4: an unchanged running job's results answer 304 to If-None-Match; after new
    points, 200 with a new tag; since_step returns only the new points."""
    from store import jobs
    from store.series import write_points

    exp = client.post("/v1/experiments", json=small_spec()).json()
    with session_scope(settings.db_url) as session:
        claim = jobs.claim_next(session, ["cpu"], "w", 60)
        jobs.record_progress(session, claim, 40, 400)
        write_points(session, exp["id"], 0, {"step": [0, 20, 40], "risk": [3.0, 2.0, 1.5]})
    url = f"/v1/experiments/{exp['id']}/results"
    first = client.get(url)
    tag = first.headers["ETag"]
    assert first.status_code == 200 and first.json()["series"]["step"] == [0, 20, 40]
    again = client.get(url, headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == tag
    assert client.get(url, headers={"If-None-Match": f'"other", W/{tag}'}).status_code == 304
    status_tag = client.get(f"/v1/experiments/{exp['id']}").headers["ETag"]
    assert client.get(f"/v1/experiments/{exp['id']}", headers={"If-None-Match": status_tag}).status_code == 304
    # the worker writes two more points
    with session_scope(settings.db_url) as session:
        jobs.record_progress(session, claim, 80, 400)
        write_points(session, exp["id"], 3, {"step": [60, 80], "risk": [1.2, 1.1]})
    fresh = client.get(url, headers={"If-None-Match": tag})
    assert fresh.status_code == 200 and fresh.headers["ETag"] != tag
    assert fresh.json()["series"]["step"] == [0, 20, 40, 60, 80]
    assert client.get(f"/v1/experiments/{exp['id']}", headers={"If-None-Match": status_tag}).status_code == 200
    new = client.get(url, params={"since_step": 40}).json()
    assert new["series"] == {"step": [60, 80], "risk": [1.2, 1.1]}
    assert client.get(url, params={"since_step": 80}).json()["series"] == {"step": [], "risk": []}
    # the tag depends on the representation: another query is another tag
    assert client.get(url, params={"since_step": 40}).headers["ETag"] != fresh.headers["ETag"]
    # a cancel request changes the status tag even without new points
    tag = client.get(f"/v1/experiments/{exp['id']}").headers["ETag"]
    client.post(f"/v1/experiments/{exp['id']}/cancel")
    assert client.get(f"/v1/experiments/{exp['id']}", headers={"If-None-Match": tag}).status_code == 200


def test_since_step_cuts_theory_series_of_a_finished_run(client, settings):
    exp = client.post("/v1/experiments", json=small_spec()).json()
    assert execute(settings, exp["id"], "w") == "succeeded"
    url = f"/v1/experiments/{exp['id']}/results"
    full, part = client.get(url).json(), client.get(url, params={"since_step": 200}).json()
    cut = full["series"]["step"].index(200) + 1
    assert part["series"]["step"] == full["series"]["step"][cut:] and part["series"]["step"][0] > 200
    for name, values in full["theory"].items():
        assert part["theory"][name] == (values[cut:] if isinstance(values, list) else values), name
    assert client.get(url, params={"since_step": -1}).json()["series"] == full["series"]


def test_since_step_reads_the_tail_of_a_long_series(client, settings):
    """since_step decompresses only the last chunks (store.series.read_series_after): the series
    and theory series come out cut exactly as from the whole document."""
    from store import jobs
    from store.series import write_points

    exp = client.post("/v1/experiments", json=small_spec()).json()
    steps = list(range(0, 400, 20))
    with session_scope(settings.db_url) as session:
        claim = jobs.claim_next(session, ["cpu"], "w", 60)
        jobs.begin_attempt(session, claim, theory={"kappa": [s / 2 for s in steps], "risk_stationary": 0.5})
        jobs.record_progress(session, claim, 380, 400)
        for i in range(0, len(steps), 3):  # chunks of 3 points, as a worker's flushes write them
            write_points(session, exp["id"], i, {"step": steps[i:i + 3], "risk": [s / 10 for s in steps[i:i + 3]]})
    url = f"/v1/experiments/{exp['id']}/results"
    full = client.get(url).json()
    assert full["series"]["step"] == steps and full["theory"]["kappa"] == [s / 2 for s in steps]
    for since in (-1, 0, 50, 60, 200, 370, 380, 1000):
        part = client.get(url, params={"since_step": since}).json()
        cut = sum(1 for s in steps if s <= since)
        assert part["series"] == {k: v[cut:] for k, v in full["series"].items()}, since
        assert part["theory"] == {"kappa": full["theory"]["kappa"][cut:], "risk_stationary": 0.5}, since


def test_cursor_pages_with_link_header(client):
    ids = [client.post("/v1/experiments", json={**small_spec(), "seed": i}).json()["id"] for i in range(7)]
    seen, url, params = [], "/v1/experiments", {"limit": 3}
    while True:
        r = client.get(url, params=params)
        page = r.json()
        assert page["total"] == 7 and len(page["items"]) <= 3
        seen += [e["id"] for e in page["items"]]
        if page["next_cursor"] is None:
            assert "Link" not in r.headers
            break
        link = r.headers["Link"]
        assert link.endswith('>; rel="next"') and f"cursor={page['next_cursor']}" in link and "limit=3" in link
        url, params = link[1:link.index(">")].replace("http://testserver", ""), None
    assert seen == ids[::-1]
    r = client.get("/v1/experiments", params={"cursor": "not-a-cursor"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "cursor"]


def test_auth_off_only_on_loopback(tmp_path):
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        create_app(Settings(state_dir=tmp_path, auth="off", host=host))
    for host in ("0.0.0.0", "10.1.2.3", "::", "lab.example.org"):
        with pytest.raises(UnsafeAuth, match="loopback"):
            create_app(Settings(state_dir=tmp_path, auth="off", host=host))
    create_app(Settings(state_dir=tmp_path, auth="on", host="0.0.0.0"))


def test_auth_off_jobs_belong_to_the_local_admin(client, settings):
    exp = client.post("/v1/experiments", json=small_spec()).json()
    assert exp["owner"] == "local"
    with session_scope(settings.db_url) as session:
        assert session.get(Experiment, exp["id"]).owner.role == "admin"
