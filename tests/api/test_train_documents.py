"""Result documents and plots of the ``train`` kind (SQLite and PostgreSQL): per-layer series,
stored flat as ``"<layer>/<metric>"``, are served as ``layers: {layer: {metric: [...]}}`` beside the
global ``series``; field selection and downsampling cover them; the nested per-layer summary
survives the response model; the train plots render.

Rows and points are written straight into the database (as the worker would), so these tests do
not need the engine's ``train`` module."""
from __future__ import annotations

import math

import pytest

from smdengine import layer_key
from smdrender import plots
from smdrender.downsample import downsample_indices
from store import jobs
from store.series import write_points
from tests.api.test_experiments import submit
from tests.conftest import small_spec
from tests.dbutil import session_scope
from worker.runner import execute

LAYERS = ("layers.0.weight", "layers.1.weight")
METRICS = ("au_rms", "au_mean", "norm", "unit_grad_sq", "eff_lr", "norm_theory")
GLOBALS = ("train_loss", "train_acc", "test_loss", "test_acc", "lr", "weight_decay")
RECORD_EVERY, EVAL_EVERY, N = 10, 50, 30          # steps 0, 10, …, 290; evaluations every 5th record
LR, WD = 0.1, 5e-4
AU_EQ = math.sqrt(2 * LR * WD)
TRAIN_SPEC = {"kind": "train", "seed": 0, "device": "auto",
              "params": {"dataset": {"name": "digits"}, "model": "mlp", "depth": 2, "width": 16, "lr": LR,
                         "weight_decay": WD, "batch_size": 32, "steps": N * RECORD_EVERY,
                         "record_every": RECORD_EVERY, "eval_every": EVAL_EVERY}}
LAYER_SUMMARY = {"au_rms": 0.0101, "au_mean": 0.0099, "norm": 3.2, "unit_grad_sq": 0.5, "eff_lr": 0.01,
                 "norm_theory": 3.1, "au_equilibrium": AU_EQ}
SUMMARY = {"train_loss": 0.12, "train_acc": 0.97, "test_loss": 0.2, "test_acc": 0.95, "lr": LR, "weight_decay": WD,
           "layers": {LAYERS[0]: {**LAYER_SUMMARY, "equilibrium_step": 120},
                      LAYERS[1]: {**LAYER_SUMMARY, "equilibrium_step": None}}}


def layer_value(layer: int, metric: int, k: int) -> float:
    """A distinct positive value for (layer, metric, record index): alignment is checkable."""
    return (layer + 1) + (metric + 1) / 10 + k / 1000


def global_value(name: str, k: int):
    if name.startswith("test_") and (k * RECORD_EVERY) % EVAL_EVERY:
        return None                                     # only at evaluation steps
    return {"train_loss": 2.3 / (1 + k), "train_acc": 0.1 + 0.85 * k / N, "test_loss": 2.4 / (1 + k),
            "test_acc": 0.1 + 0.8 * k / N, "lr": LR, "weight_decay": WD}[name]


def make_train(settings, *, status="succeeded", stored=N, layers=LAYERS) -> str:
    """A train row with ``stored`` of its N records written in two flushes (as the worker's progress
    flushes do) and the theory of the whole run (as the worker stores it when it claims the job)."""
    with session_scope(settings.db_url) as s:
        exp = jobs.create(s, kind="train", name="train-doc", spec=TRAIN_SPEC, total_steps=N * RECORD_EVERY)
        exp.status = status
        exp.theory = {"au_equilibrium": [AU_EQ] * N} if status != "queued" else None
        exp.summary = SUMMARY if status == "succeeded" else None
        if stored:
            half = max(stored // 2, 1)
            write_points(s, exp.id, 0, points(0, half, layers))
            write_points(s, exp.id, half, points(half, stored, layers))
        return exp.id


def points(start: int, stop: int, layers=LAYERS) -> dict[str, list]:
    """Flat points for records [start, stop), as the worker stores them."""
    ks = range(start, stop)
    out: dict[str, list] = {"step": [k * RECORD_EVERY for k in ks]}
    for name in GLOBALS:
        out[name] = [global_value(name, k) for k in ks]
    for i, layer in enumerate(layers):
        for j, metric in enumerate(METRICS):
            out[layer_key(layer, metric)] = [layer_value(i, j, k) for k in ks]
    return out


@pytest.fixture
def contract_names(monkeypatch):
    """``output_names`` as the train contract has it (global names, theory, bare per-layer metric
    names), whether or not the engine's train module is there yet."""
    import api.results

    real = api.results.output_names

    def names(spec):
        if spec == "train" or (isinstance(spec, dict) and spec.get("kind") == "train"):
            return ("step", *GLOBALS, *METRICS, "au_equilibrium")
        return real(spec)

    monkeypatch.setattr(api.results, "output_names", names)


def results(client, exp_id, **params):
    r = client.get(f"/v1/experiments/{exp_id}/results", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_train_document_splits_global_and_layer_series(client, settings):
    exp_id = make_train(settings)
    doc = results(client, exp_id)
    assert doc["kind"] == "train" and doc["status"] == "succeeded"
    assert set(doc["series"]) == {"step", *GLOBALS}            # no "<layer>/<metric>" key left in series
    assert doc["series"]["step"] == [k * RECORD_EVERY for k in range(N)]
    assert list(doc["layers"]) == list(LAYERS)
    for i, layer in enumerate(LAYERS):
        assert list(doc["layers"][layer]) == list(METRICS)
        for j, metric in enumerate(METRICS):
            assert doc["layers"][layer][metric] == pytest.approx([layer_value(i, j, k) for k in range(N)])
    # test_* are null between evaluations, numbers at every eval_every steps
    tests = doc["series"]["test_loss"]
    assert [k for k, v in enumerate(tests) if v is not None] == list(range(0, N, EVAL_EVERY // RECORD_EVERY))
    assert doc["theory"] == {"au_equilibrium": pytest.approx([AU_EQ] * N)}
    assert doc["summary"] == SUMMARY                           # nested per-layer summary survives the model
    assert doc["summary"]["layers"][LAYERS[0]]["equilibrium_step"] == 120
    assert isinstance(doc["summary"]["layers"][LAYERS[0]]["equilibrium_step"], int)


def test_train_fields_select_layer_metrics(client, settings):
    exp_id = make_train(settings)
    url = f"/v1/experiments/{exp_id}/results"

    bare = results(client, exp_id, fields="au_rms")            # a per-layer metric: in every layer
    assert set(bare["series"]) == {"step"} and bare["theory"] == {}
    assert {layer: set(m) for layer, m in bare["layers"].items()} == {layer: {"au_rms"} for layer in LAYERS}

    full = results(client, exp_id, fields=f"{LAYERS[1]}/norm,train_loss,au_equilibrium")
    assert full["layers"] == {LAYERS[1]: {"norm": pytest.approx([layer_value(1, 2, k) for k in range(N)])}}
    assert set(full["series"]) == {"step", "train_loss"} and set(full["theory"]) == {"au_equilibrium"}

    whole = results(client, exp_id, fields=LAYERS[0])         # a layer name: all of its metrics
    assert list(whole["layers"]) == [LAYERS[0]] and list(whole["layers"][LAYERS[0]]) == list(METRICS)
    assert set(whole["series"]) == {"step"}

    mixed = results(client, exp_id, fields=f"eff_lr,{LAYERS[0]}")
    assert set(mixed["layers"][LAYERS[0]]) == set(METRICS) and set(mixed["layers"][LAYERS[1]]) == {"eff_lr"}

    for bad in ("nonsense", f"{LAYERS[0]}/nonsense", "layers.9.weight/au_rms", "layers.9.weight"):
        r = client.get(url, params={"fields": f"train_loss,{bad}"})
        assert r.status_code == 422, (bad, r.text)
        (err,) = r.json()["detail"]
        assert err["loc"] == ["query", "fields"] and f"unknown field(s) {bad};" in err["msg"]
        available = err["msg"].split("available: ", 1)[1]
        for name in (*LAYERS, *METRICS, *GLOBALS, "au_equilibrium"):
            assert name in available, (name, available)


def test_train_max_points_downsamples_layers_like_series(client, settings):
    exp_id = make_train(settings)
    doc = results(client, exp_id, max_points=7)
    keep = downsample_indices(N, 7)
    assert doc["series"]["step"] == [k * RECORD_EVERY for k in keep]
    assert doc["series"]["step"][0] == 0 and doc["series"]["step"][-1] == (N - 1) * RECORD_EVERY
    for i, layer in enumerate(LAYERS):
        for j, metric in enumerate(METRICS):
            assert doc["layers"][layer][metric] == pytest.approx([layer_value(i, j, k) for k in keep])
    assert len(doc["theory"]["au_equilibrium"]) == len(keep)
    sel = results(client, exp_id, max_points=3, fields=f"{LAYERS[1]}/au_mean")
    assert sel["layers"] == {LAYERS[1]: {"au_mean": pytest.approx([layer_value(1, 1, k) for k in (0, 14, 29)])}}


def test_train_partial_results_stay_aligned_on_step(client, settings, contract_names):
    exp_id = make_train(settings, status="running", stored=13)  # theory already covers the whole run
    doc = results(client, exp_id)
    assert doc["status"] == "running" and len(doc["series"]["step"]) == 13
    assert all(len(v) == 13 for v in doc["series"].values())
    assert all(len(v) == 13 for metrics in doc["layers"].values() for v in metrics.values())
    assert len(doc["theory"]["au_equilibrium"]) == 13 and doc["summary"] == {}
    thin = results(client, exp_id, max_points=4)
    assert all(len(v) == 4 for metrics in thin["layers"].values() for v in metrics.values())

    queued = make_train(settings, status="queued", stored=0)
    doc = results(client, queued)
    assert doc["series"] == {} and doc["layers"] == {} and doc["summary"] == {}
    # layer names are unknown before the first points: a full key is accepted, a bare layer name is not
    sel = results(client, queued, fields=f"{LAYERS[0]}/au_rms,au_rms,train_loss")
    assert sel["layers"] == {} and sel["series"] == {}
    for bad in (LAYERS[0], f"{LAYERS[0]}/bogus"):
        assert client.get(f"/v1/experiments/{queued}/results", params={"fields": bad}).status_code == 422


def test_field_check_survives_a_failing_output_names(client, settings, monkeypatch):
    """When the engine cannot name a kind's outputs (module missing or broken), the known names are
    what is stored: a 422 for unknown names, never a 500."""
    import api.results

    def broken(_spec):
        raise ModuleNotFoundError("No module named 'smdengine.train.simulate'")

    monkeypatch.setattr(api.results, "output_names", broken)
    exp_id = make_train(settings)
    assert set(results(client, exp_id, fields="train_loss,au_rms")["series"]) == {"step", "train_loss"}
    r = client.get(f"/v1/experiments/{exp_id}/results", params={"fields": "bogus"})
    assert r.status_code == 422 and "au_rms" in r.text


def test_other_kinds_carry_empty_layers(client, settings):
    exp = submit(client, small_spec(steps=100, record_every=10))
    assert results(client, exp["id"])["layers"] == {}           # queued
    assert execute(settings, exp["id"]) == "succeeded"
    doc = results(client, exp["id"])
    assert doc["layers"] == {} and "au_rms" in doc["series"] and len(doc["series"]["step"]) == 11
    sel = results(client, exp["id"], fields="au_rms", max_points=3)   # nrq's au_rms is a global series
    assert set(sel["series"]) == {"step", "au_rms"} and len(sel["series"]["au_rms"]) == 3 and sel["layers"] == {}


def test_result_document_schema_describes_layers(client, settings):
    from jsonschema import Draft202012Validator

    schema = client.get("/openapi.json").json()["components"]["schemas"]["ResultDocument"]
    props = schema["properties"]
    assert "layers" in props and "<layer>/<metric>" in props["layers"]["description"]
    assert "equilibrium_step" in props["summary"]["description"]
    Draft202012Validator.check_schema(schema)
    from api.schemas import ResultDocument

    doc = results(client, make_train(settings))
    Draft202012Validator(ResultDocument.model_json_schema()).validate(doc)


TRAIN_PLOTS = ["accuracy", "au", "loss", "norm"]


@pytest.mark.parametrize("name", TRAIN_PLOTS)
def test_train_plots_render(client, settings, name):
    exp_id = make_train(settings)
    for fmt, media, magic in (("png", "image/png", b"\x89PNG\r\n\x1a\n"), ("svg", "image/svg+xml", b"<svg")):
        r = client.get(f"/v1/experiments/{exp_id}/plots/{name}.{fmt}")
        assert r.status_code == 200, (name, fmt, r.text[:200])
        assert r.headers["content-type"].startswith(media) and magic in r.content[:400]
        assert len(r.content) > 5000, (name, fmt, len(r.content))
        if fmt == "svg" and name in ("au", "norm"):
            assert b"stroke-dasharray" in r.content                 # theory dashed
            assert LAYERS[0].encode() in r.content                   # a legend names the layers


def test_train_unknown_plot_is_404_listing_the_train_plots(client, settings):
    exp_id = make_train(settings)
    r = client.get(f"/v1/experiments/{exp_id}/plots/risk.png")
    assert r.status_code == 404 and "available: accuracy, au, loss, norm" in r.json()["detail"]
    assert plots.plot_key("train", TRAIN_SPEC) == "train" and plots.available("train") == TRAIN_PLOTS


def test_train_plots_many_layers_and_queued(client, settings):
    deep = tuple(f"stage{s}.block{b}.conv{c}.weight" for s in (1, 2, 3) for b in (0, 1) for c in (1, 2))
    exp_id = make_train(settings, layers=deep)                  # 12 layers: colour bar instead of a legend
    for name in ("au", "norm"):
        r = client.get(f"/v1/experiments/{exp_id}/plots/{name}.svg")
        assert r.status_code == 200 and deep[0].encode() not in r.content and b"12 layers" in r.content
    queued = make_train(settings, status="queued", stored=0)
    for name in TRAIN_PLOTS:
        assert client.get(f"/v1/experiments/{queued}/plots/{name}.png").status_code == 200


def test_thinning_keeps_evaluation_points_and_alignment():
    n = 10_000
    steps = list(range(0, 10 * n, 10))
    sparse = [float(k) if k % 7 == 0 else None for k in range(n)]
    doc = {"id": "x" * 32, "status": "running", "spec": {}, "series": {"step": steps, "train_loss": [1.0] * n,
                                                                         "test_loss": sparse},
           "layers": {"a.weight": {"au_rms": [0.1] * n}}, "theory": {"au_equilibrium": [0.05] * n, "c": 1.0}}
    thin = plots._thinned(doc, max_points=100)
    m = len(thin["series"]["step"])
    assert m < n and all(len(v) == m for v in thin["series"].values())
    assert len(thin["layers"]["a.weight"]["au_rms"]) == m and len(thin["theory"]["au_equilibrium"]) == m
    assert thin["theory"]["c"] == 1.0 and thin["series"]["step"][0] == 0 and thin["series"]["step"][-1] == steps[-1]
    kept = [v for v in thin["series"]["test_loss"] if v is not None]
    assert 90 <= len(kept) <= 100 and kept[0] == 0.0                  # thinned among the defined points only
    assert plots._thinned(doc, max_points=n) is doc
    image = plots.render("train", "loss", doc, "png")
    assert image[:8] == b"\x89PNG\r\n\x1a\n"
