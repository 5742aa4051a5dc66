"""Issue acceptance for the train kind (slow): the equilibrium angular update of real networks.

digits with 30% label noise, MLP depth 2 width 256 with batch norm, every weight scale-invariant,
batch 128, 3000 steps, 4 trials (seed 0; the tail RMS pools 4 trials × 1500 steps per layer).
Measured tail au_rms / theory (seeds 0, 1, 2): SGD η=0.5 λ=2e-3: 0.974/0.934, 0.971/0.931,
0.978/0.938; SGDM α=0.9 η=0.05: 0.956/0.907, 0.955/0.902, 0.956/0.904 (layer 0 / layer 1). The
shortfall is not Monte-Carlo error (seeds agree to 0.5%) but the slow drift of the unit-gradient
norm while the net keeps fitting noisy labels: with the norm still shrinking, AU² = 2λη + d ln|w|²/dt.
"""
from __future__ import annotations

import math

import pytest

import smdengine

pytestmark = pytest.mark.slow

ACCEPTANCE = dict(dataset={"name": "digits"}, label_noise=0.3, model="mlp", depth=2, width=256, norm="batch",
                  scale_invariant=True, batch_size=128, lr=0.5, weight_decay=2e-3, steps=3000, record_every=50,
                  trials=4)


@pytest.mark.parametrize("momentum, lr", [(0.0, 0.5), (0.9, 0.05)])
def test_every_layer_reaches_the_equilibrium_angular_update(momentum, lr):
    r = smdengine.run({"kind": "train", "seed": 0, "device": "cpu",
                       "params": {**ACCEPTANCE, "momentum": momentum, "lr": lr}})
    theory = math.sqrt(2 * 2e-3 * lr / (1 + momentum))
    assert r.summary["au_equilibrium"] == pytest.approx(theory)
    layers = r.summary["layers"]
    assert set(layers) == {"layers.0.weight", "layers.1.weight"}
    for name, layer in layers.items():
        assert abs(layer["au_rms"] / theory - 1) <= 0.10, (name, layer["au_rms"], theory)


def test_equal_intrinsic_lr_reaches_the_same_equilibrium():
    """Seed 001's intrinsic LR: (η, λ) = (0.5, 2e-3) and (2.0, 5e-4), ηλ = 1e-3 in both. Measured:
    tail au_rms 0.04354/0.04178 vs 0.0446/0.04369, tail train loss 0.1606 vs 0.1536. (The pair
    (0.125, 8e-3) misses on layer 1 by 10.7%: slower effective LR, further from equilibrium at 3000.)"""
    runs = [smdengine.run({"kind": "train", "seed": 0, "device": "cpu",
                           "params": {**ACCEPTANCE, "lr": lr, "weight_decay": wd}}).summary
            for lr, wd in ((0.5, 2e-3), (2.0, 5e-4))]
    a, b = runs
    assert abs(a["train_loss"] / b["train_loss"] - 1) <= 0.10, (a["train_loss"], b["train_loss"])
    for name in a["layers"]:
        ra, rb = a["layers"][name]["au_rms"], b["layers"][name]["au_rms"]
        assert abs(ra / rb - 1) <= 0.10, (name, ra, rb)
