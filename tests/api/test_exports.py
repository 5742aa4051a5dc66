"""CSV and Parquet exports of the result series (SQLite and PostgreSQL, real engine run by the
worker's runner): every column equals the JSON ``/results`` document exactly (floats round-trip),
per-trial series spread over ``name[i]`` columns (CSV) or a ``list<double>`` column (Parquet),
per-layer series as ``<layer>/<metric>``, ``fields``/``since_step`` as for ``/results``, ETags."""
from __future__ import annotations

import csv
import io
import re

import pyarrow as pa
import pyarrow.parquet as pq

from smdrender import tables as exports
from tests.api.test_experiments import submit
from tests.api.test_sde_experiments import sde_spec
from tests.api.test_train_experiments import train_spec
from tests.conftest import small_spec
from worker.runner import execute

NRQ = {"dim": 6, "trials": 16, "steps": 200, "record_every": 20}
TRIAL = re.compile(r"^(.*)\[(\d+)\]$")


def run(client, settings, spec) -> str:
    exp = submit(client, spec)
    assert execute(settings, exp["id"]) == "succeeded"
    return exp["id"]


def results(client, exp_id, **params) -> dict:
    r = client.get(f"/v1/experiments/{exp_id}/results", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def expected_columns(doc: dict) -> dict[str, list]:
    """The table the exports should hold, straight from the JSON document."""
    columns = dict(doc["series"]) or {"step": []}
    for layer, metrics in doc["layers"].items():
        for metric, values in metrics.items():
            columns[f"{layer}/{metric}"] = values
    for name, values in doc["theory"].items():
        if isinstance(values, list):
            columns[name if name not in columns else f"theory:{name}"] = values
    return columns


def get_csv(client, exp_id, **params):
    r = client.get(f"/v1/experiments/{exp_id}/results.csv", params=params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/csv; charset=utf-8"
    assert r.headers["content-disposition"] == f'attachment; filename="{exp_id}.csv"'
    assert r.headers["etag"]
    return r


def csv_columns(text: str) -> tuple[list[str], dict[str, list]]:
    """The header, and the columns parsed back: numbers (step as int), "" → None, and the
    ``name[i]`` columns of a per-trial series joined into one list per row."""
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    assert all(len(row) == len(header) for row in body)

    def value(cell: str, name: str):
        if cell == "":
            return None
        return int(cell) if name == "step" else float(cell)

    columns: dict[str, list] = {}
    trials: dict[str, list[list]] = {}
    for j, name in enumerate(header):
        cells = [value(row[j], name) for row in body]
        match = TRIAL.match(name)
        if match:
            assert int(match.group(2)) == len(trials.setdefault(match.group(1), []))  # in order, from 0
            trials[match.group(1)].append(cells)
            columns.setdefault(match.group(1), None)
        else:
            columns[name] = cells
    for name, per_trial in trials.items():
        columns[name] = [list(point) for point in zip(*per_trial, strict=False)] if per_trial[0] else []
    return header, columns


def json_points(values: list) -> list:
    """A per-trial JSON series as the CSV reads back: a null point is a row of empty cells."""
    width = max((len(v) for v in values if isinstance(v, list)), default=0)
    if not width:
        return values
    return [v if isinstance(v, list) else [None] * width for v in values]


def assert_csv_matches(text: str, doc: dict) -> list[str]:
    header, columns = csv_columns(text)
    expected = {name: json_points(values) for name, values in expected_columns(doc).items()}
    assert list(columns) == list(expected)
    for name, values in expected.items():
        assert columns[name] == values, name                   # exact: floats round-trip
    return header


def get_parquet(client, exp_id, **params) -> pa.Table:
    r = client.get(f"/v1/experiments/{exp_id}/results.parquet", params=params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/vnd.apache.parquet"
    assert r.headers["content-disposition"] == f'attachment; filename="{exp_id}.parquet"'
    assert r.content[:4] == b"PAR1"
    return pq.read_table(io.BytesIO(r.content))


def assert_parquet_matches(table: pa.Table, doc: dict) -> None:
    expected = expected_columns(doc)
    assert table.column_names == list(expected)
    assert table.schema.field("step").type == pa.int64()
    for name, values in expected.items():
        assert table.column(name).to_pylist() == values, name


def test_nrq_exports_equal_the_json_document(client, settings):
    exp_id = run(client, settings, small_spec(**NRQ))
    doc = results(client, exp_id)
    assert len(doc["series"]["step"]) == 11
    theory_lists = [name for name, v in doc["theory"].items() if isinstance(v, list)]
    assert theory_lists, doc["theory"]                          # the test covers theory columns too
    r = get_csv(client, exp_id)
    header = assert_csv_matches(r.text, doc)
    assert header[0] == "step" and set(doc["series"]) <= set(header)
    assert all(name in header or f"theory:{name}" in header for name in theory_lists)
    assert not any(name in header for name, v in doc["theory"].items() if not isinstance(v, list))
    table = get_parquet(client, exp_id)
    assert_parquet_matches(table, doc)
    assert table.num_rows == 11


def test_per_trial_series_are_trial_columns_and_list_columns(client, settings):
    exp_id = run(client, settings, sde_spec("normalized_linear"))
    doc = results(client, exp_id)
    theta = doc["series"]["theta"]
    assert all(isinstance(point, list) and len(point) == 5 for point in theta)
    r = get_csv(client, exp_id)
    header = assert_csv_matches(r.text, doc)
    assert [h for h in header if h.startswith("theta")] == [f"theta[{i}]" for i in range(5)]
    table = get_parquet(client, exp_id)
    assert table.schema.field("theta").type == pa.list_(pa.float64())
    assert_parquet_matches(table, doc)
    # fields and since_step apply to per-trial series too
    later = get_csv(client, exp_id, fields="theta", since_step=doc["series"]["step"][-3])
    header, columns = csv_columns(later.text)
    assert header == ["step"] + [f"theta[{i}]" for i in range(5)]
    assert columns == {"step": doc["series"]["step"][-2:], "theta": theta[-2:]}


def test_train_layer_series_are_layer_metric_columns(client, settings):
    exp_id = run(client, settings, train_spec(steps=30, record_every=10, eval_every=20))
    doc = results(client, exp_id)
    assert set(doc["layers"]) == {"layers.0.weight", "layers.1.weight"}
    assert None in doc["series"]["test_acc"]                    # only at evaluation steps: empty cells
    r = get_csv(client, exp_id)
    header = assert_csv_matches(r.text, doc)
    assert {f"{layer}/{metric}" for layer, metrics in doc["layers"].items() for metric in metrics} <= set(header)
    assert ",," in r.text or ",\r\n" in r.text
    assert_parquet_matches(get_parquet(client, exp_id), doc)
    # a layer name or a bare per-layer metric selects columns as in /results
    sel = results(client, exp_id, fields="au_rms")
    header, _ = csv_columns(get_csv(client, exp_id, fields="au_rms").text)
    assert header == ["step", "layers.0.weight/au_rms", "layers.1.weight/au_rms"]
    assert_csv_matches(get_csv(client, exp_id, fields="au_rms").text, sel)


def test_fields_since_step_etag_and_errors(client, settings):
    exp_id = run(client, settings, small_spec(**NRQ))
    doc = results(client, exp_id)
    steps = doc["series"]["step"]
    # since_step: only the later rows, the same as /results with it
    for fmt in ("csv", "parquet"):
        since = results(client, exp_id, since_step=steps[7])
        if fmt == "csv":
            assert_csv_matches(get_csv(client, exp_id, since_step=steps[7]).text, since)
        else:
            table = get_parquet(client, exp_id, since_step=steps[7])
            assert table.column("step").to_pylist() == steps[8:]
            assert_parquet_matches(table, since)
    # past the end: the header, no rows
    past = get_csv(client, exp_id, since_step=steps[-1])
    assert past.text.splitlines()[0].startswith("step,") and len(past.text.splitlines()) == 1
    assert get_parquet(client, exp_id, since_step=steps[-1]).num_rows == 0
    # fields: step and the named columns only
    name = next(k for k in doc["series"] if k != "step")
    header, columns = csv_columns(get_csv(client, exp_id, fields=name).text)
    assert header == ["step", name] and columns[name] == doc["series"][name]
    assert get_parquet(client, exp_id, fields=name).column_names == ["step", name]
    # unknown field, bad since_step: 422 as JSON
    for fmt in ("csv", "parquet"):
        r = client.get(f"/v1/experiments/{exp_id}/results.{fmt}", params={"fields": f"{name},nonsense"})
        assert r.status_code == 422 and "nonsense" in r.json()["detail"][0]["msg"]
        assert client.get(f"/v1/experiments/{exp_id}/results.{fmt}", params={"since_step": -2}).status_code == 422
    # ETag: 304 with no body while unchanged; the two formats and the options have distinct tags
    tags = set()
    for fmt, params in (("csv", {}), ("parquet", {}), ("csv", {"fields": name}), ("csv", {"since_step": 0})):
        first = client.get(f"/v1/experiments/{exp_id}/results.{fmt}", params=params)
        tag = first.headers["etag"]
        again = client.get(f"/v1/experiments/{exp_id}/results.{fmt}", params=params,
                           headers={"If-None-Match": tag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == tag
        tags.add(tag)
    assert len(tags) == 4
    stale = client.get(f"/v1/experiments/{exp_id}/results.csv", headers={"If-None-Match": '"stale"'})
    assert stale.status_code == 200
    # unknown experiment: 404 as JSON
    for fmt in ("csv", "parquet"):
        r = client.get(f"/v1/experiments/nope/results.{fmt}")
        assert r.status_code == 404 and "nope" in r.json()["detail"]


def test_no_points_yet_is_a_header_or_zero_rows(client, settings):
    exp = submit(client, small_spec(**NRQ))                     # queued: nothing recorded
    r = get_csv(client, exp["id"])
    assert r.text == "step\r\n"
    table = get_parquet(client, exp["id"])
    assert table.num_rows == 0 and table.column_names[0] == "step"
    first = r.headers["etag"]
    assert execute(settings, exp["id"]) == "succeeded"
    assert get_csv(client, exp["id"]).headers["etag"] != first   # new points: a new tag


def test_openapi_documents_the_exports(client):
    paths = client.get("/openapi.json").json()["paths"]
    for fmt, media_type, operation in (("csv", "text/csv", "exportResultsCsv"),
                                       ("parquet", "application/vnd.apache.parquet", "exportResultsParquet")):
        op = paths[f"/v1/experiments/{{experiment_id}}/results.{fmt}"]["get"]
        assert op["operationId"] == operation
        assert set(op["responses"]) == {"200", "304", "401", "404", "422", "503"}   # 503: database unreachable
        assert op["responses"]["200"]["content"] == {media_type: {"schema": {"type": "string", "format": "binary"}}}
        for code in ("401", "404", "422"):
            assert list(op["responses"][code]["content"]) == ["application/json"]
        assert {p["name"] for p in op["parameters"]} == {"experiment_id", "fields", "since_step"}


# the pure functions, on documents built by hand (no database)

DOC = {"series": {"step": [0, 10, 20], "loss": [1.0, None, 0.1 + 0.2], "x": [[1.5, None], None, [2.0, 3.0]]},
       "layers": {"l0": {"au": [0.1, 0.2, 0.3]}},
       "theory": {"loss": [0.5, 0.25, 0.125], "au_eq": 0.7, "band": [1, 2]},
       "summary": {"loss": 0.1}, "distributions": {"h": {"edges": [0, 1]}}}


def test_table_columns_order_collisions_and_padding():
    columns = exports.table_columns(DOC)
    assert list(columns) == ["step", "loss", "x", "l0/au", "theory:loss", "band"]
    assert columns["band"] == [1, 2, None]                      # a short theory list is padded with null
    assert exports.table_columns({"series": {}, "layers": {}, "theory": {"t": []}}) == {"step": [], "t": []}


def test_csv_and_parquet_of_a_hand_made_document():
    text = exports.to_csv(DOC).decode()
    assert text.splitlines() == ["step,loss,x[0],x[1],l0/au,theory:loss,band",
                                 "0,1.0,1.5,,0.1,0.5,1",
                                 "10,,,,0.2,0.25,2",
                                 f"20,{0.1 + 0.2!r},2.0,3.0,0.3,0.125,"]
    assert float(text.splitlines()[3].split(",")[1]) == 0.1 + 0.2
    table = pq.read_table(io.BytesIO(exports.to_parquet(DOC)))
    assert table.schema.field("x").type == pa.list_(pa.float64())
    assert table.schema.field("loss").type == pa.float64() and table.schema.field("band").type == pa.int64()
    assert table.column("x").to_pylist() == [[1.5, None], None, [2.0, 3.0]]
    assert table.column("loss").to_pylist() == [1.0, None, 0.1 + 0.2]
    empty = pq.read_table(io.BytesIO(exports.to_parquet({"series": {}, "layers": {}, "theory": {}})))
    assert empty.column_names == ["step"] and empty.num_rows == 0


def test_a_text_cell_a_spreadsheet_would_run_as_a_formula_is_quoted():
    """An experiment named "=HYPERLINK(…)" must not become a formula in the lab's spreadsheet (CSV injection): a
    text cell that starts as a formula does gets a leading apostrophe; numbers, negative ones too, stay numbers."""
    from smdrender.tables import rows_to_csv

    names = ["=1+2", "+cmd", "-2+3", "@SUM(A1)", "\tx", "run-1", "-0.5", "-inf"]
    text = rows_to_csv(["name", "x"], [{"name": n, "x": -1.5} for n in names]).decode()
    rows = list(csv.reader(io.StringIO(text)))[1:]
    assert [r[0] for r in rows] == ["'=1+2", "'+cmd", "'-2+3", "'@SUM(A1)", "'\tx", "run-1", "-0.5", "-inf"]
    assert {r[1] for r in rows} == {"-1.5"}
