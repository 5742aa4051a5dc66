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
            ({"summary.au_rms.gt": 0, "kind": "train"}, "summary.au_rms.gt", "recorded per layer, under summary.layers"),
            ({"order_by": "au_rms"}, "order_by", "summary.<name>"),
            ({"order_by": "-summary.accuracy", "kind": "nrq"}, "order_by", "not a summary value of nrq"),
            # a parameter the list does not take was ignored, and the whole list looked filtered by it
            ({"params.lr": 0.1}, "params.lr", "did you mean param.params.lr?"),
            ({"stauts": "queued"}, "stauts", "nearest: status"),
            # a mistyped operator after a value's path is said so (it was "'params.lr.xx' is not a field")
            ({"param.params.lr.xx": 1}, "param.params.lr.xx", "'xx' is not an operator: expected one of eq, ne"),
            ({"param.params.lr_schedule.0.step.gx": 1}, "param.params.lr_schedule.0.step.gx", "'gx' is not an operator"),
            ({"summary.au_rms.lx": 1}, "summary.au_rms.lx", "'lx' is not an operator"),
            # after an object's path it is a field that is not there
            ({"param.params.dataset.nam": "digits"}, "param.params.dataset.nam", "nearest: params.dataset.name")):
        for path in ("/v1/experiments", "/v1/experiments.csv"):
            r = client.get(path, params=params)
            assert r.status_code == 422, (params, r.text)
            (error,) = r.json()["detail"]
            assert error["loc"] == ["query", key] and reason in error["msg"], error
    assert client.get("/v1/experiments", params={"param.params.lr_schedule.0.step": 3}).status_code == 200
    step = client.get("/v1/experiments", params={"summary.step.gt": 0, "kind": "nrq"}).json()["detail"][0]["msg"]
    assert "not a summary value of nrq runs" in step and "per layer" not in step   # a series, not per layer
    assert client.post("/v1/experiments", json={**small_spec(), "tags": ["no spaces"]}).status_code == 422


def test_the_owner_edits_name_tags_and_note(lab):
    client, keys, _ = lab
    alice, bob, root = auth(keys.alice), auth(keys.bob), auth(keys.root)
    r = client.post("/v1/experiments", json={**small_spec(), "name": "first", "tags": ["a"], "visibility": "lab"},
                    headers=alice)
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
    # the runs table shows the current name, not the one the spec was submitted with; times as in JSON
    (row,) = csv.DictReader(io.StringIO(client.get("/v1/experiments.csv", headers=alice).text))
    assert row["name"] == "renamed" and row["tags"] == "b c"
    assert row["created_at"] == r.json()["created_at"] and row["created_at"].endswith("Z")
    # a body that changes nothing keeps the ETag (pollers download nothing); null tags clear them, as [] does
    same = client.get(f"/v1/experiments/{experiment_id}", headers=alice).headers["etag"]
    for unchanged in ({}, {"name": "renamed"}, {"tags": ["c", "b", "c"]}):
        assert client.patch(f"/v1/experiments/{experiment_id}", json=unchanged, headers=alice).status_code == 200
        assert client.get(f"/v1/experiments/{experiment_id}", headers=alice).headers["etag"] == same, unchanged
    r = client.patch(f"/v1/experiments/{experiment_id}", json={"tags": None}, headers=alice)
    assert r.status_code == 200 and r.json()["tags"] == []
    assert client.get(f"/v1/experiments/{experiment_id}", headers=alice).headers["etag"] != same



def test_values_compare_only_with_values_of_their_type(env):
    """A number never matches text, a list or an absent value: on SQLite the text "float32" used to read
    as 0, and on PostgreSQL the cast failed the whole query with a 500."""
    client, _ = env
    made = submit(client, 0.1, ["t"], name="123")
    nothing: list[str] = []
    assert ids(client, **{"param.params.dtype": 0}) == nothing
    assert ids(client, **{"param.params.dtype.lt": 1}) == nothing
    assert ids(client, **{"param.params.dtype.ne": 0}) == [made]      # float64 is not the number 0
    assert ids(client, **{"param.params.dtype": "float64"}) == [made]
    assert ids(client, **{"param.name": 123}) == [made]               # the name is the text "123"
    assert ids(client, **{"param.name.gt": 100}) == nothing           # ... not a number
    assert ids(client, **{"param.params.lr": "fast"}) == nothing
    assert ids(client, **{"summary.au_rms.lt": 1}) == nothing         # not run: no summary
    assert ids(client, **{"param.params.lr_schedule.0.step": 0}) == nothing   # no schedule entries
    # a JSON true is a boolean, not the number 1 (SQLite's json_extract gives it as 1)
    from tests.api.test_train_experiments import train_spec
    trained = client.post("/v1/experiments", json=train_spec(scale_invariant=True)).json()["id"]
    assert ids(client, **{"param.params.scale_invariant": "true"}) == [trained]
    assert ids(client, **{"param.params.scale_invariant": 1}) == nothing
    assert ids(client, **{"param.params.scale_invariant.ge": 0}) == nothing
    r = client.get("/v1/experiments", params={"param.params.lr_schedule": 1})
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["loc"] == ["query", "param.params.lr_schedule"] and "list or an object" in error["msg"], error
    assert "param.params.lr_schedule.0." in error["msg"]


def walk(client, **params) -> list[str]:
    got, params = [], {**params}
    while True:
        body = client.get("/v1/experiments", params=params).json()
        got += [item["id"] for item in body["items"]]
        if not body["next_cursor"]:
            return got
        params["cursor"] = body["next_cursor"]


def test_sorted_pages_hold_their_place_while_rows_come_and_go(env):
    """Cursors of a sorted list carry the sort value: deleting a row already seen does not skip one,
    ties (same spec and seed: the same au_rms) keep the (created_at, id) order, and rows without the
    value come last, paged by the same cursors."""
    client, settings = env
    made = [submit(client, lr, []) for lr in (0.05, 0.1, 0.1, 0.2)]    # the two 0.1s tie
    run_all(settings)
    pending = [submit(client, 0.1, []), submit(client, 0.1, [])]       # never run: no summary
    au = {item["id"]: item["summary"]["au_rms"]
          for item in client.get("/v1/experiments", params={"include": "summary"}).json()["items"] if item["summary"]}
    assert au[made[1]] == au[made[2]]
    expected = sorted(made, key=lambda i: (-au[i], made.index(i) * -1)) + pending[::-1]
    for limit in (1, 2, 4):
        assert walk(client, order_by="-summary.au_rms", limit=limit) == expected, limit
    ascending = sorted(made, key=lambda i: (au[i], -made.index(i))) + pending[::-1]
    assert walk(client, order_by="summary.au_rms", limit=1) == ascending

    first = client.get("/v1/experiments", params={"order_by": "-summary.au_rms", "limit": 2}).json()
    assert [item["id"] for item in first["items"]] == expected[:2]
    assert client.delete(f"/v1/experiments/{expected[0]}").status_code == 204
    rest = walk(client, order_by="-summary.au_rms", limit=2, cursor=first["next_cursor"])
    assert rest == expected[2:]                                        # an offset would have skipped one

    for cursor, reason in ((first["next_cursor"].split("~")[1], "same order"), ("v1e999~1.ab", "finite")):
        r = client.get("/v1/experiments", params={"order_by": "-summary.au_rms", "cursor": cursor})
        assert r.status_code == 422 and reason in r.json()["detail"][0]["msg"], r.text
    r = client.get("/v1/experiments", params={"cursor": first["next_cursor"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "cursor"]


def test_a_term_without_an_equals_sign_is_422_naming_it(env):
    # read as an empty value it was ignored (an unknown name) or matched nothing (a filter), unsaid
    client, _ = env
    for path in ("/v1/experiments", "/v1/experiments.csv"):
        r = client.get(f"{path}?kind=nrq&foo&param.params.lr&summary.au_rms.lt=0.02")
        assert r.status_code == 422, r.text
        assert [(e["loc"], "has no '='" in e["msg"]) for e in r.json()["detail"]] == [(["query", "foo"], True)]
        r = client.get(f"{path}?kind=nrq&param.params.lr&summary.au_rms.lt=0.02")   # a filter's value left off
        error = r.json()["detail"][0]
        assert r.status_code == 422 and error["loc"] == ["query", "param.params.lr"] and "has no '='" in error["msg"]
    assert client.get("/v1/experiments?param.params.lr=0.1&tag=").status_code == 200   # an empty value is a value
