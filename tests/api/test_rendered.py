"""Polled documents are built once per tag and process (api/rendered.py), and never served stale: on SQLite
and PostgreSQL, in-process, with the real runner."""
from __future__ import annotations

import json

import pytest

from api import rendered
from api.schemas import ExperimentOut
from store import jobs
from tests.api.test_experiments import submit
from tests.conftest import small_spec
from worker.runner import execute


def test_a_polled_document_is_built_once_per_tag_and_never_stale(client, settings, monkeypatch):
    monkeypatch.setattr(rendered, "_bodies", rendered.Bodies())   # this test's own, whatever ran before
    built: list[str] = []
    serialize = rendered.serialize
    monkeypatch.setattr(rendered, "serialize", lambda model, content: built.append(model.__name__)
                        or serialize(model, content))
    exp = submit(client, small_spec())
    assert execute(settings, exp["id"]) == "succeeded"
    url = f"/v1/experiments/{exp['id']}"

    first = client.get(url)
    again = client.get(url)
    assert again.content == first.content and again.headers["etag"] == first.headers["etag"]
    assert built == ["ExperimentOut"]   # the second is the kept body's bytes, not built again
    # the bytes FastAPI would send for the route's response_model
    row = jobs.get(settings.db_url, exp["id"])
    assert first.json() == json.loads(ExperimentOut.model_validate(row, from_attributes=True).model_dump_json())

    # a change bumps the revision: a new tag, a new body, the old one never served for it
    assert client.patch(url, json={"name": "renamed"}).status_code == 200
    renamed = client.get(url)
    assert renamed.headers["etag"] != first.headers["etag"] and renamed.json()["name"] == "renamed"
    assert client.get(url, headers={"If-None-Match": first.headers["etag"]}).json()["name"] == "renamed"

    assert built == ["ExperimentOut"] * 2

    params = {"since_step": 200, "max_points": 2000}
    chunk = client.get(f"{url}/results", params=params)
    assert chunk.status_code == 200 and chunk.json()["series"]["step"][0] == 220
    same = client.get(f"{url}/results", params=params)
    assert same.content == chunk.content and built.count("ResultDocument") == 1
    assert client.get(f"{url}/results", params=params, headers={"If-None-Match": chunk.headers["etag"]}).status_code == 304
    other = client.get(f"{url}/results", params={"since_step": 300, "max_points": 2000}).json()
    assert other["series"]["step"][0] == 320 and built.count("ResultDocument") == 2

    # a 422 keeps nothing
    kept = rendered._bodies.size[0]
    bad = client.get(f"{url}/results", params={"fields": "nope"})
    assert bad.status_code == 422 and "nope" in bad.text and rendered._bodies.size[0] == kept
    assert client.get(f"{url}/results", params={"fields": "nope"}).status_code == 422


def test_bodies_keep_within_their_byte_budget_least_recently_used_first():
    bodies = rendered.Bodies(max_bytes=100, max_body=40, max_bodies=10)
    bodies.put("a", b"x" * 40)
    bodies.put("b", b"y" * 40)
    assert bodies.get("a") == b"x" * 40          # a is now the most recently used
    bodies.put("c", b"z" * 40)                   # 120 bytes > 100: b goes
    assert bodies.get("b") is None and bodies.get("a") is not None and bodies.get("c") is not None
    assert bodies.size == (2, 80)
    bodies.put("big", b"w" * 41)                 # over max_body: never kept
    assert bodies.get("big") is None and bodies.size == (2, 80)
    for i in range(12):
        bodies.put(str(i), b"v")
    assert bodies.size[0] == 10
    with pytest.raises(ValueError, match="max_body ≤ max_bytes"):
        rendered.Bodies(max_bytes=10, max_body=20)
