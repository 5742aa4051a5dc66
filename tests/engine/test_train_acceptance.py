"""Issue acceptance for the train kind (slow): the equilibrium angular update of real networks.

digits with 30% label noise, MLP depth 2 width 256 with batch norm, every weight scale-invariant,
batch 128, 3000 steps, 4 trials (seed 0; the tail RMS pools 4 trials × 1500 steps per layer).
Measured tail au_rms / theory (seeds 0, 1, 2; batch norm's statistics in two passes): SGD η=0.5
λ=2e-3: 0.973/0.935, 0.976/0.936, 0.976/0.935; SGDM α=0.9 η=0.05: 0.975/0.928, 0.970/0.922,
0.979/0.930 (layer 0 / layer 1). The shortfall is not Monte-Carlo error but the slow drift of the
unit-gradient norm while the net keeps fitting noisy labels: with the norm still shrinking, AU² = 2λη +
d ln|w|²/dt. The SGDM run is chaotic in its second half: a change at the rounding level moves its tail
ratios by ~2% (with torch.var_mean's statistics seed 0 gave 0.956/0.907, and 0.940/0.889 with the norm's
ε at 1.0001e-5 instead of 1e-5), so its layer 1 lies within that spread of the 10% bound.
"""
from __future__ import annotations

import functools
import math

import pytest

import smdengine

pytestmark = pytest.mark.slow

ACCEPTANCE = dict(dataset={"name": "digits"}, label_noise=0.3, model="mlp", depth=2, width=256, norm="batch",
                  scale_invariant=True, batch_size=128, lr=0.5, weight_decay=2e-3, steps=3000, record_every=50,
                  trials=4)


@functools.cache
def acceptance_summary(momentum: float, lr: float, weight_decay: float) -> dict:
    """The summary of one acceptance run; the (0, 0.5, 2e-3) run serves both tests below (run once)."""
    return smdengine.run({"kind": "train", "seed": 0, "device": "cpu", "params": {
        **ACCEPTANCE, "momentum": momentum, "lr": lr, "weight_decay": weight_decay}}).summary


@pytest.mark.parametrize("momentum, lr", [(0.0, 0.5), (0.9, 0.05)])
def test_every_layer_reaches_the_equilibrium_angular_update(momentum, lr):
    summary = acceptance_summary(momentum, lr, 2e-3)
    theory = math.sqrt(2 * 2e-3 * lr / (1 + momentum))
    assert summary["au_equilibrium"] == pytest.approx(theory)
    layers = summary["layers"]
    assert set(layers) == {"layers.0.weight", "layers.1.weight"}
    for name, layer in layers.items():
        assert abs(layer["au_rms"] / theory - 1) <= 0.10, (name, layer["au_rms"], theory)


def test_equal_intrinsic_lr_reaches_the_same_equilibrium():
    """Seed 001's intrinsic LR: (η, λ) = (0.5, 2e-3) and (2.0, 5e-4), ηλ = 1e-3 in both. Measured:
    tail au_rms 0.04353/0.04182 vs 0.04442/0.04354, tail train loss 0.1607 vs 0.1525. (The pair
    (0.125, 8e-3) misses on layer 1 by 10.7%: slower effective LR, further from equilibrium at 3000.)"""
    runs = [acceptance_summary(0.0, lr, wd) for lr, wd in ((0.5, 2e-3), (2.0, 5e-4))]
    a, b = runs
    assert abs(a["train_loss"] / b["train_loss"] - 1) <= 0.10, (a["train_loss"], b["train_loss"])
    for name in a["layers"]:
        ra, rb = a["layers"][name]["au_rms"], b["layers"][name]["au_rms"]
        assert abs(ra / rb - 1) <= 0.10, (name, ra, rb)


# LR ÷10 at mid-run (acceptance 2) in the noise-dominated regime the equilibrium theory assumes: a
# stationary unit-gradient norm L = |∇L|²|w|². 20 000 synthetic samples with 30% label noise cannot be
# memorised by one BN layer of width 32, so L stays put across the decay (2.72 before, 2.64 at the end).
# In the digits MLP of acceptance 1 (and in depth 2 / width 128 here) L rises about 6x after the decay,
# which moves the norm equilibrium: the AU then overshoots old/√10 by 20-27% for ~2000 steps before it
# settles, even with rescale. λη = 5e-3 so that the new equilibrium (relaxation time 1/(4λη') = 500
# steps) is reached well within the 6000 steps after the decay.
DECAY = dict(dataset={"name": "synthetic", "input_dim": 32, "classes": 10, "train_samples": 20000,
                      "test_samples": 1000},
             label_noise=0.3, model="mlp", depth=1, width=32, norm="batch", scale_invariant=True, batch_size=128,
             lr=0.5, weight_decay=1e-2, steps=8000, record_every=50, trials=4)


@pytest.mark.parametrize("rescale", [False, True])
def test_lr_decay_angular_update(rescale):
    """Measured (seeds 0, 1, 2; AU / old equilibrium √(2λη) = 0.1): before the decay 1.0005/1.0/1.0006.
    Without rescale: first window after it 0.101/0.1017/0.101, tail 0.3164/0.3162/0.3164 (1/√10 = 0.3162).
    With rescale: first window 0.312/0.314/0.312, every window after the decay in [0.311, 0.319].
    Seeds agree to 0.3%; windows scatter by ±1.7%: the 5% / 2% bounds below leave room for both."""
    r = smdengine.run({"kind": "train", "seed": 0, "device": "cpu", "params": {
        **DECAY, "schedule": [{"step": 2000, "lr_factor": 0.1, "rescale": rescale}]}}).to_document()
    old = math.sqrt(2 * DECAY["lr"] * DECAY["weight_decay"])
    new = old / math.sqrt(10)
    step = r["series"]["step"]
    at = step.index(2000)                     # the first window recorded at the new rate
    assert r["theory"]["au_equilibrium"][at - 1] == pytest.approx(old)
    assert r["theory"]["au_equilibrium"][at] == pytest.approx(new)
    au = r["layers"]["layers.0.weight"]["au_rms"][:-1]   # the windows (none after the final state: null)
    before = sum(au[at - 10:at]) / 10
    assert abs(before / old - 1) <= 0.05, before
    tail = sum(au[-20:]) / 20
    assert abs(tail / new - 1) <= 0.02, tail
    if rescale:       # at the new equilibrium from the first recorded point on
        assert all(abs(a / new - 1) <= 0.05 for a in au[at:]), [round(a / new, 3) for a in au[at:]]
    else:             # a tenth of the old equilibrium, then relaxing up to it
        assert abs(au[at] / (old / 10) - 1) <= 0.05, au[at]
        assert au[at + 10] < au[at + 20] < tail * 1.02
