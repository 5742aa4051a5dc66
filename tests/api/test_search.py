"""Tags, notes and search (issue 20), on SQLite and PostgreSQL: tags and a note on submit and by PATCH
(owner or admin), and GET /v1/experiments filtered by tag, by any spec parameter and by summary values,
sorted by a summary value across cursor pages, with include=summary; the same filters on the runs table
/v1/experiments.csv; unknown paths and names are 422s naming the query parameter."""
from __future__ import annotations

import csv
import io

from tests.api.test_studies import run_all
from tests.conftest import auth, small_spec

LRS = (0.05, 0.1, 0.2)


def submit(client, lr: float, tags: list[str], **extra) -> str:
    r = client.post("/v1/experiments", json={**small_spec(lr=lr, trials=8, steps=100, record_every=10),
                                             "tags": tags, **extra})
    assert r.status_code == 202, r.text
    assert r.json()["tags"] == sorted(set(tags))   # a set: sorted
    return r.json()["id"]


def ids(client, **params) -> list[str]:
    r = client.get("/v1/experiments", params=params)
    assert r.status_code == 200, r.text
    return [item["id"] for item in r.json()["items"]]


def test_filters_order_include_and_the_runs_table(env):
    client, settings = env
    made = {lr: submit(client, lr, ["grid", f"lr{lr}"] + (["best"] if lr == 0.1 else []),
                       note="first pass" if lr == 0.05 else None) for lr in LRS}
    other = client.post("/v1/experiments", json=small_spec(trials=8, steps=100, dtype="float32",
                                                            weight_decay=0.05)).json()["id"]
    run_all(settings)
    newest_first = [other, made[0.2], made[0.1], made[0.05]]
    assert ids(client) == newest_first
    assert ids(client, tag="grid") == newest_first[1:]
    assert ids(client, tag=["grid", "best"]) == [made[0.1]]
    assert ids(client, **{"param.params.lr": 0.1}) == [other, made[0.1]]        # the default lr is 0.1
    assert ids(client, **{"param.params.lr.gt": 0.1}) == [made[0.2]]
    assert ids(client, **{"param.params.dtype": "float32"}) == [other]
    assert ids(client, **{"param.params.weight_decay.ne": 0.01}) == [other]
    assert ids(client, **{"param.kind": "nrq", "param.seed": 3}) == newest_first

    page = client.get("/v1/experiments", params={"include": "summary"}).json()["items"]
    au = {item["id"]: item["summary"]["au_rms"] for item in page}
    assert client.get("/v1/experiments").json()["items"][0]["summary"] is None   # only when asked
    middle = sorted(au.values())[1]
    assert set(ids(client, **{"summary.au_rms.le": middle})) == {i for i, v in au.items() if v <= middle}
    by_au = sorted(au, key=au.get, reverse=True)
    # sorted by a summary value, two per page: the cursors follow the order
    got, params = [], {"order_by": "-summary.au_rms", "limit": 2}
    while True:
        body = client.get("/v1/experiments", params=params).json()
        got += [item["id"] for item in body["items"]]
        if not body["next_cursor"]:
            break
        params = {**params, "cursor": body["next_cursor"]}
    assert got == by_au and body["total"] == 4
    assert ids(client, order_by="summary.au_rms", tag="grid") == [i for i in reversed(by_au) if i != other]

    table = client.get("/v1/experiments.csv", params={"tag": "grid"})
    assert table.status_code == 200 and table.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(table.text)))
    header = table.text.splitlines()[0].split(",")
    assert header[:6] == ["id", "name", "tags", "kind", "status", "created_at"]
    assert [r["id"] for r in rows] == newest_first[1:]
    assert [float(r["params.lr"]) for r in rows] == [0.2, 0.1, 0.05]
    assert float(rows[0]["summary.au_rms"]) == au[made[0.2]] and rows[1]["tags"] == "best grid lr0.1"
    assert client.get(f"/v1/experiments/{made[0.05]}").json()["note"] == "first pass"


def test_unknown_paths_and_names_are_422_naming_the_parameter(env):
    client, _ = env
    for params, key, reason in (
            ({"param.params.learning_rate": 0.1, "kind": "nrq"}, "param.params.learning_rate", "nrq specs; nearest: "),
            ({"param.params.lr_schedule.0.step": 3, "kind": "train"}, "param.params.lr_schedule.0.step",
             "not a field of train specs"),
            ({"summary.nope.lt": 1}, "summary.nope.lt", "not a summary value"),
            ({"summary.au_rms.lt": "abc"}, "summary.au_rms.lt", "expected a number"),
            ({"order_by": "au_rms"}, "order_by", "summary.<name>"),
            ({"order_by": "-summary.accuracy", "kind": "nrq"}, "order_by", "not a summary value of nrq")):
        for path in ("/v1/experiments", "/v1/experiments.csv"):
            r = client.get(path, params=params)
            assert r.status_code == 422, (params, r.text)
            (error,) = r.json()["detail"]
            assert error["loc"] == ["query", key] and reason in error["msg"], error
    assert client.get("/v1/experiments", params={"param.params.lr_schedule.0.step": 3}).status_code == 200
    assert client.post("/v1/experiments", json={**small_spec(), "tags": ["no spaces"]}).status_code == 422


def test_the_owner_edits_name_tags_and_note(lab):
    client, keys, _ = lab
    alice, bob, root = auth(keys.alice), auth(keys.bob), auth(keys.root)
    r = client.post("/v1/experiments", json={**small_spec(), "tags": ["a"], "visibility": "lab"}, headers=alice)
    experiment_id = r.json()["id"]
    before = client.get(f"/v1/experiments/{experiment_id}", headers=alice).headers["etag"]
    r = client.patch(f"/v1/experiments/{experiment_id}", json={"tags": ["b", "c"], "note": "keep"}, headers=alice)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tags"] == ["b", "c"] and body["note"] == "keep"
    assert client.get(f"/v1/experiments/{experiment_id}", headers=alice).headers["etag"] != before   # pollers see it
    assert client.get("/v1/experiments", params={"tag": "a"}, headers=alice).json()["items"] == []
    assert client.patch(f"/v1/experiments/{experiment_id}", json={"note": "mine now"}, headers=bob).status_code == 403
    r = client.patch(f"/v1/experiments/{experiment_id}", json={"name": "renamed", "note": None}, headers=root)
    assert r.status_code == 200 and r.json()["name"] == "renamed" and r.json()["note"] is None
    assert r.json()["tags"] == ["b", "c"]                                   # not given: unchanged
    bad = client.patch(f"/v1/experiments/{experiment_id}", json={"tags": ["x" * 65]}, headers=alice)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:2] == ["body", "tags"]

