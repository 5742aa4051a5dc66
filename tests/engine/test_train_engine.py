"""The train kind: spec rules, batched networks, scale invariance, the optimizer and the AU tracker."""
from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

import smdengine
from smdengine._driver import run as integrate
from smdengine.train import models, shapes
from smdengine.train import simulate as train_sim
from smdengine.train.data import DatasetUnavailable, load_dataset
from smdengine.train.optimizer import SGD
from smdengine.train.spec import LAYER_METRICS, TrainParams
from smdengine.train.tracker import Tracker
from tests.engine.test_train_data import cifar  # noqa: F401  (fixture: tiny CIFAR-10 pickle files)


def spec(seed: int = 0, **params) -> dict:
    base = dict(dataset={"name": "digits"}, depth=1, width=16, batch_size=32, steps=40, record_every=10,
                lr=0.5, weight_decay=1e-3)
    base.update(params)
    return {"kind": "train", "seed": seed, "device": "cpu", "params": base}


# -- spec -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("params, message", [
    (dict(steps=10, epochs=1), "either steps or epochs"),
    (dict(batch_size=2000), "batch_size: expected at most the 1347"),
    (dict(eval_every=15), "eval_every: expected a multiple of record_every"),
    (dict(model="resnet", depth=10), "depth: expected 6n+2"),
    (dict(norm="group", norm_groups=3), "norm_groups"),
    (dict(model="cnn", dataset={"name": "synthetic"}), "expects an image dataset"),
    (dict(dataset={"name": "mnist"}), "name: expected one of"),
    (dict(schedule=[{"step": 50, "lr_factor": 0.1}]), "schedule: expected strictly increasing"),
    (dict(schedule=[{"lr_factor": 0.1}]), "exactly one of step or epoch"),
    (dict(label_noise=1.0), "label_noise"),
])
def test_spec_rejects_with_the_field_and_reason(params, message):
    with pytest.raises(ValidationError) as err:
        smdengine.parse_spec(spec(**params))
    assert message in str(err.value)


def test_epochs_and_epoch_schedules_become_steps():
    p = smdengine.parse_spec(spec(steps=None, epochs=3, batch_size=100,
                                  schedule=[{"epoch": 2, "lr_factor": 0.1}])).params
    assert p.steps_per_epoch == 1347 // 100 and p.steps == 3 * 13
    assert p.schedule[0].step == 26 and p.eval_every == 30   # 10·record_every, capped to the last window
    assert smdengine.parse_spec(spec()).work > 0


# -- networks -------------------------------------------------------------------------------------

ARCHS = [("mlp", 2, 16, "digits"), ("cnn", 3, 8, "digits"), ("resnet", 8, 8, "digits")]
NORMS = ["batch", "group", "layer", "weight_standardization"]


def build(model, depth, width, norm, trials=2, scale_invariant=True, dtype=torch.float64, seed=0):
    p = TrainParams(model=model, depth=depth, width=width, norm=norm, norm_groups=4, batch_size=16,
                    scale_invariant=scale_invariant, dtype="float64")
    gen = torch.Generator().manual_seed(seed)
    return p, models.build(p, trials, torch.device("cpu"), dtype, gen)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("model, depth, width, dataset", ARCHS)
def test_every_group_is_scale_invariant_and_every_trainable_weight_is_in_one(model, depth, width, dataset, norm):
    p, net = build(model, depth, width, norm)
    data = load_dataset(p, torch.device("cpu"), torch.float64)
    # not exactly 0: the norms' ε = 1e-5 under the variance breaks invariance at that order
    cos = train_sim.check_scale_invariance(net, data, 16, torch.Generator().manual_seed(1), 1e-4)
    assert cos < 1e-4
    grouped = {m for ms in net.groups.values() for m in ms}
    assert grouped == set(net.trainable)
    # scaling a group leaves the (evaluation-mode-free, training-mode) logits unchanged
    x = data.x_train[:16].expand(2, *data.x_train[:16].shape)
    before = net.forward(x, training=True).detach()
    with torch.no_grad():
        for m in next(iter(net.groups.values())):
            net.params[m].mul_(3.7)
    assert torch.allclose(net.forward(x, training=True), before, atol=1e-4, rtol=1e-4)


def test_the_check_catches_a_weight_that_is_not_scale_invariant():
    p, net = build("mlp", 1, 16, "batch", scale_invariant=False)
    net.groups["classifier.weight"] = ["classifier.weight"]
    data = load_dataset(p, torch.device("cpu"), torch.float64)
    with pytest.raises(RuntimeError, match="scale invariance: expected .* classifier.weight"):
        train_sim.check_scale_invariance(net, data, 16, torch.Generator().manual_seed(1), 1e-4)


def test_without_scale_invariance_the_classifier_and_affines_train():
    _, net = build("mlp", 1, 16, "batch", scale_invariant=False)
    assert {"classifier.weight", "classifier.bias", "layers.0.norm.gamma"} <= set(net.trainable)
    _, frozen = build("mlp", 1, 16, "batch")
    assert frozen.trainable == ["layers.0.weight"]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("model, depth, width, dataset", ARCHS)
def test_trials_never_mix(model, depth, width, dataset, norm):
    """Changing trial 1's inputs or weights leaves trial 0's outputs unchanged (batch statistics too)."""
    p, net = build(model, depth, width, norm, trials=3)
    data = load_dataset(p, torch.device("cpu"), torch.float64)
    x = torch.stack([data.x_train[:8], data.x_train[8:16], data.x_train[16:24]])
    out = net.forward(x, training=True).detach()
    x2 = x.clone()
    x2[1] = torch.randn_like(x2[1])
    with torch.no_grad():
        for name in net.trainable:
            net.params[name][2].mul_(-1.3)
    out2 = net.forward(x2, training=True).detach()
    assert torch.equal(out[0], out2[0])
    assert not torch.allclose(out[1], out2[1]) and not torch.allclose(out[2], out2[2])


def test_forward_macs_counts_the_mlp():
    p = TrainParams(depth=2, width=256)
    assert shapes.forward_macs(p) == 64 * 256 + 256 * 256 + 256 * 10


# -- optimizer and tracker ------------------------------------------------------------------------

@pytest.fixture
def four_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(4)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("split", [False, True], ids=["one-gemm", "rows-split-per-thread"])
@pytest.mark.parametrize("cached", [True, False], ids=["views-made-once", "views-per-step"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_tracker_angles_and_unit_gradient_match_a_direct_computation(momentum, cached, split, monkeypatch, request):
    if not cached:   # a window longer than SLOT_CACHE takes its buffer views step by step
        monkeypatch.setattr("smdengine.train.tracker.SLOT_CACHE", 0)
    if split:        # 4 threads: the 40-element rows are cut in 4 pieces, the 6-element ones are not (6 % 4 ≠ 0)
        monkeypatch.setattr("smdengine.train.optimizer.SPLIT_MIN", 1)
        request.getfixturevalue("four_threads")
    torch.manual_seed(0)
    trials, lr, wd = 3, 0.3, 0.01
    ws = [torch.randn(trials, 5, 8, dtype=torch.float64), torch.randn(trials, 4, dtype=torch.float64),
          torch.randn(trials, 6, dtype=torch.float64)]
    opt = SGD(ws, momentum, tracked=[0, 2])
    assert [partial is not None for *_, partial in opt.gram_operands] == [split, False]
    # group 0 = param 0, group 1 = param 2
    tracker = Tracker(["a", "b"], [0, 1], trials, 4, momentum, opt.rows, torch.float64, torch.device("cpu"))
    assert (tracker.slots is not None) == cached
    angles, units, vel, after = {0: [], 2: []}, {0: [], 2: []}, {0: 0.0, 2: 0.0}, {}
    for _ in range(4):
        grads = [torch.randn_like(w) for w in opt.params]
        for i in (0, 2):
            w = opt.params[i].detach().flatten(1).clone()
            g = grads[i].flatten(1)
            vel[i] = momentum * vel[i] + g + wd * w
            w2 = w - lr * vel[i]
            cos = (w * w2).sum(1) / (w.norm(dim=1) * w2.norm(dim=1))
            angles[i].append(torch.arccos(cos.clamp(-1, 1)))
            units[i].append(g.square().sum(1) * w.square().sum(1))
            after[i] = w2
        opt.step(grads, lr, wd, tracker.slot(lr, wd, opt.next_velocity_row()))
        for i in (0, 2):   # the tracked storage moves the weights by the same rule
            assert torch.allclose(opt.params[i].detach().flatten(1), after[i], rtol=1e-12, atol=1e-12)
    out = tracker.reduce(lr, wd)
    for i, name in ((0, "a"), (2, "b")):
        a = torch.stack(angles[i])
        assert out[name]["au_rms"].item() == pytest.approx(a.square().mean().sqrt().item(), rel=1e-9)
        assert out[name]["au_mean"].item() == pytest.approx(a.mean().item(), rel=1e-9)
        assert out[name]["unit_grad_sq"].item() == pytest.approx(torch.stack(units[i]).mean().item(), rel=1e-9)


def test_untracked_parameters_follow_the_same_rule():
    w = torch.randn(2, 3, dtype=torch.float64)
    g = torch.randn(2, 3, dtype=torch.float64)
    opt = SGD([w.clone().requires_grad_()], 0.5, tracked=[])
    opt.step([g], 0.1, 0.01)
    opt.step([g], 0.1, 0.01)
    v1 = g + 0.01 * w
    w1 = w - 0.1 * v1
    v2 = 0.5 * v1 + g + 0.01 * w1
    assert torch.allclose(opt.params[0].detach(), w1 - 0.1 * v2)


# -- runs -----------------------------------------------------------------------------------------

def test_run_records_global_and_layer_series_and_is_reproducible():
    a = smdengine.run(spec(trials=2, eval_every=20))
    b = smdengine.run(spec(trials=2, eval_every=20))
    c = smdengine.run(spec(seed=1, trials=2, eval_every=20))
    doc = a.to_document()
    assert doc == b.to_document() and doc != c.to_document()
    assert doc["series"]["step"] == [0, 10, 20, 30, 40]   # four windows, then the state after the last update
    assert set(doc["layers"]) == {"layers.0.weight"}
    assert set(doc["layers"]["layers.0.weight"]) == set(LAYER_METRICS)
    assert [v is None for v in doc["series"]["test_acc"]] == [False, True, False, True, False]
    assert len(doc["theory"]["au_equilibrium"]) == 5
    final = {k: v[-1] for k, v in doc["layers"]["layers.0.weight"].items()}
    assert final["au_rms"] is None and final["unit_grad_sq"] is None and doc["series"]["train_loss"][-1] is None
    # η/|w|² of the two trials averaged, against η over the mean |w| squared: equal when the trials agree, ≥ (Jensen)
    assert final["norm"] > 0 and final["eff_lr"] >= 0.5 / final["norm"] ** 2 * (1 - 1e-12)
    assert final["eff_lr"] == pytest.approx(0.5 / final["norm"] ** 2, rel=0.1)
    assert doc["series"]["test_acc"][-1] == pytest.approx(doc["summary"]["test_acc_final"], rel=1e-12)
    assert doc["summary"]["layers"]["layers.0.weight"]["au_rms"] > 0
    assert doc["summary"]["scale_invariance_max_cos"] < 1e-3
    assert set(smdengine.output_names("train")) >= {"train_loss", "au_rms", "au_equilibrium"}


def test_track_false_trains_identically_without_layer_series():
    a = smdengine.run(spec())
    b = integrate(spec(), track=False)
    assert a.series["train_loss"][:-1] == b.series["train_loss"][:-1]   # the final row's is NaN (no window)
    assert not b.to_document().get("layers")


def test_rescale_multiplies_the_weights_at_the_schedule_step():
    s = spec(steps=40, record_every=1, lr=0.2, weight_decay=0.0,
             schedule=[{"step": 20, "lr_factor": 1 / 16, "rescale": True}])
    r = smdengine.run(s)
    norm = r.series["layers.0.weight/norm"]
    # window n holds |w| at step n (record_every = 1); with λ = 0 the norm only grows, slowly
    assert norm[20] / norm[19] == pytest.approx((1 / 16) ** 0.25, rel=0.02)
    assert r.series["lr"][19] == 0.2 and r.series["lr"][20] == pytest.approx(0.2 / 16)


def test_momentum_and_float32_run():
    r = smdengine.run(spec(momentum=0.9, lr=0.05, dtype="float32", model="cnn", depth=2, width=4, norm="group",
                           norm_groups=2))
    assert all(math.isfinite(v) for v in r.series["conv.0.weight/au_rms"][:-1])


def test_cancellation_stops_between_windows():
    calls = []
    with pytest.raises(smdengine.Cancelled) as stop:
        smdengine.run(spec(steps=400), on_progress=calls.append, should_stop=lambda: True, progress_interval=0.0)
    # the first poll (after update 1) stops the run; what was recorded was delivered first
    assert stop.value.step == 1 and len(calls) == 1 and calls[0].step == 1


def test_cifar10_through_the_engine(cifar):  # noqa: F811
    folder = cifar[0]
    s = spec(dataset={"name": "cifar10", "train_samples": 50, "test_samples": 10}, model="cnn", depth=2,
             width=4, batch_size=10, steps=6, record_every=3)
    r = smdengine.run(s, data_dir=str(folder))
    assert r.summary["train_samples"] == 50 and r.series["step"] == [0, 3, 6]
    with pytest.raises(DatasetUnavailable, match="SMD_DATA_DIR"):
        smdengine.run(s)


def test_a_validated_spec_reads_back_as_itself():
    """What the service stores (the validated spec, dumped) must parse to the same spec: with epochs, the
    dump holds the derived steps as well, and schedule entries given by epoch hold their step."""
    spec = smdengine.parse_spec({"kind": "train", "params": {"epochs": 2, "batch_size": 64,
                                                             "schedule": [{"epoch": 1, "lr_factor": 0.5}]}})
    dumped = spec.model_dump(mode="json")
    assert dumped["params"]["steps"] == 2 * spec.params.steps_per_epoch and dumped["params"]["epochs"] == 2
    assert smdengine.parse_spec(dumped) == spec
