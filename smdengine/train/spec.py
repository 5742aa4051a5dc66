"""Spec of the ``train`` kind: a normalized network trained by SGD / SGDM + weight decay, with the
angular update of every scale-invariant weight tracked against its theory."""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from smdengine._declare import Model, Outputs, PlotDef
from smdengine._science import (
    NO_EQUILIBRIUM_AU,
    Phase,
    check_recording,
    check_schedule,
    rate_phases,
    regime_warnings,
    tail_start,
    tail_warnings,
)
from smdengine._spec_base import SpecBase, StrictModel, tagged_union
from smdengine.train import shapes
from smdengine.train.files import cifar10_missing

DIGITS_SAMPLES = 1797          # scikit-learn's bundled 8×8 digits
CIFAR10_TRAIN, CIFAR10_TEST = 50_000, 10_000


class DigitsData(StrictModel):
    """scikit-learn's bundled 8×8 digits (1797 images, 10 classes), split by ``data_seed``."""

    name: Literal["digits"]
    test_fraction: float = Field(0.25, ge=0.05, le=0.5, description="Share of the images held out for testing.")

    def sizes(self) -> tuple[int, int]:
        test = math.ceil(self.test_fraction * DIGITS_SAMPLES)
        return DIGITS_SAMPLES - test, test


class SyntheticData(StrictModel):
    """A Gaussian-mixture classification task generated from ``data_seed``."""

    name: Literal["synthetic"]
    input_dim: int = Field(32, ge=1, le=100_000, description="Features per sample.")
    classes: int = Field(10, ge=2, le=1000, description="Number of classes.")
    train_samples: int = Field(2000, ge=2, le=1_000_000, description="Training examples generated.")
    test_samples: int = Field(1000, ge=1, le=1_000_000, description="Test examples generated.")
    class_separation: float = Field(1.0, ge=0, le=100, description="Norm scale of the class means; noise is N(0, I).")

    def sizes(self) -> tuple[int, int]:
        return self.train_samples, self.test_samples


class Cifar10Data(StrictModel):
    """CIFAR-10 read from ``$SMD_DATA_DIR/cifar-10-batches-py`` (the standard python-pickle format)."""

    name: Literal["cifar10"]
    train_samples: int = Field(CIFAR10_TRAIN, ge=2, le=CIFAR10_TRAIN, description="Use the first n training images.")
    test_samples: int = Field(CIFAR10_TEST, ge=1, le=CIFAR10_TEST, description="Use the first n test images.")

    def sizes(self) -> tuple[int, int]:
        return self.train_samples, self.test_samples


if TYPE_CHECKING:
    DatasetSpec = DigitsData | SyntheticData | Cifar10Data
else:   # the same union, discriminated by name, naming the field and the choices in its error
    DatasetSpec = tagged_union("name", {"digits": DigitsData, "synthetic": SyntheticData, "cifar10": Cifar10Data})


class TrainScheduleEntry(StrictModel):
    """From ``step`` (or the first step of ``epoch``) on, the rates in force are multiplied by the factors."""

    step: int | None = Field(None, ge=1, description="First update that uses the new rates.")
    epoch: int | None = Field(None, ge=1, description="Alternative to step: the epoch whose first update uses them.")
    lr_factor: float = Field(1.0, gt=0, le=1e6, description="Multiplies η from then on.")
    weight_decay_factor: float = Field(1.0, ge=0, le=1e6, description="Multiplies λ from then on (0 switches it off).")
    rescale: bool = Field(False, description="Multiply every scale-invariant weight by "
                                             "(lr_factor/weight_decay_factor)^(1/4) (seed 003 §5.2).")

    @model_validator(mode="after")
    def _one_time(self) -> TrainScheduleEntry:
        if (self.step is None) == (self.epoch is None):
            raise ValueError("schedule: expected exactly one of step or epoch in each entry")
        if self.rescale and self.weight_decay_factor == 0:
            raise ValueError("schedule: rescale needs weight_decay_factor > 0")
        return self


class TrainParams(StrictModel):
    dataset: DatasetSpec = Field(default_factory=lambda: DigitsData.model_validate({"name": "digits"}),
                                 description="What to train on, chosen by its name (digits: bundled).")
    data_seed: int = Field(0, ge=0, le=2**63 - 1, description="Seed of the split, label noise and synthetic data "
                                                             "(shared by all trials).")
    label_noise: float = Field(0.0, ge=0, lt=1, description="Fraction of training labels replaced by random ones.")
    model: Literal["mlp", "cnn", "resnet"] = Field("mlp", description="The network: an MLP, a plain CNN or a ResNet.")
    depth: int = Field(2, ge=1, le=200, description="mlp: hidden layers; cnn: conv layers; resnet: total depth "
                                                   "6n+2 (8, 14, 20, 32, …).")
    width: int = Field(256, ge=1, le=8192, description="mlp: hidden units; cnn, resnet: channels of the first stage.")
    norm: Literal["batch", "group", "layer", "weight_standardization"] = Field(
        "batch", description="The normalization after every weight layer, which makes the weights before it "
                             "scale-invariant.")
    norm_groups: int = Field(8, ge=1, le=1024, description="Groups of group norm (must divide every width).")
    scale_invariant: bool = Field(True, description="Freeze the last layer and the norm affine parameters so that "
                                                    "every trainable weight is scale-invariant (seed 001 §6.1).")
    lr: float = Field(0.1, gt=0, le=100, description="η.")
    momentum: float = Field(0.0, ge=0, lt=1, description="α of heavy-ball SGDM; 0 is plain SGD.")
    weight_decay: float = Field(5e-4, ge=0, le=10, description="λ, applied to every trainable parameter.")
    batch_size: int = Field(128, ge=2, le=65_536, description="Training examples per update.")
    steps: int | None = Field(None, ge=1, le=10_000_000, description="Updates (default 1000 when epochs is unset).")
    epochs: int | None = Field(None, ge=1, le=100_000, description="Alternative to steps: passes over the "
                                                                      "training set (incomplete batches dropped).")
    schedule: list[TrainScheduleEntry] = Field(default_factory=list, max_length=1000, description=(
        "Phases: from each entry's step (or epoch) on, the rates are multiplied by its factors."))
    trials: int = Field(1, ge=1, le=256, description="Independent initialisations and batch orders, trained together.")
    init_scale: float = Field(1.0, ge=1e-4, le=1e4, description="Multiplies the initial scale-invariant weights "
                                                               "(every weight followed by a normalization; the "
                                                               "classifier and affine parameters keep theirs). "
                                                               "With (η·k², λ/k²) a scale k gives the same run "
                                                               "(seed 000 Cor. 3).")
    same_init: bool = Field(False, description="Every trial starts from the same weights (one draw, the one a run with trials = 1 makes); "
                                              "trials then differ only by their batch order.")
    record_every: int = Field(10, ge=1, description="Aggregate the tracked quantities over windows of this many updates.")
    eval_every: int | None = Field(None, ge=1, description="Evaluate on the test set every this many updates "
                                                              "(a multiple of record_every; default 10·record_every).")
    dtype: Literal["float32", "float64"] = Field("float32", description="Floating-point type of the weights.")

    @model_validator(mode="after")
    def _check(self) -> TrainParams:
        n_train, _ = self.dataset.sizes()
        if self.batch_size > n_train:
            raise ValueError(f"batch_size: expected at most the {n_train} training samples, got {self.batch_size}")
        # a validated spec holds both (steps derived from epochs), and must read back as itself
        if self.steps is not None and self.epochs is not None and self.steps != self.epochs * self.steps_per_epoch:
            raise ValueError("steps: expected either steps or epochs, got both")
        if self.epochs is not None:
            self.steps = self.epochs * self.steps_per_epoch
        elif self.steps is None:
            self.steps = 1000
        if self.steps > 10_000_000:
            raise ValueError(f"epochs: expected at most 10 000 000 updates, got {self.steps}")
        if self.model != "mlp" and self.dataset.name == "synthetic":
            raise ValueError(f"model: {self.model} expects an image dataset (digits or cifar10), got synthetic")
        if self.model == "resnet" and (self.depth < 8 or (self.depth - 2) % 6):
            raise ValueError(f"depth: expected 6n+2 (8, 14, 20, 32, …) for resnet, got {self.depth}")
        widths = shapes.widths(self)
        if self.norm == "group" and any(width % self.norm_groups for width in widths):
            raise ValueError(f"norm_groups: expected a divisor of every width {widths}, got {self.norm_groups}")
        check_recording(self.steps, self.record_every, max_points=100_000)
        if self.eval_every is None:
            self.eval_every = min(10 * self.record_every, self.steps // self.record_every * self.record_every)
        if self.eval_every % self.record_every:
            raise ValueError(f"eval_every: expected a multiple of record_every ({self.record_every}), "
                             f"got {self.eval_every}")
        for entry in self.schedule:
            if entry.epoch is not None:
                entry.step, entry.epoch = entry.epoch * self.steps_per_epoch, None
        check_schedule("schedule", self.schedule, self.lr, self.weight_decay, self.steps, lr_max=100,
                       weight_decay_max=10, strict_weight_decay=False, bounds="lr ∈ [1e-12, 100], weight_decay ≤ 10")
        return self

    @property
    def steps_per_epoch(self) -> int:
        return self.dataset.sizes()[0] // self.batch_size

    @property
    def total_steps(self) -> int:
        """``steps`` (set from ``epochs`` by the validator)."""
        assert self.steps is not None
        return self.steps

    def phases(self) -> list[Phase]:
        return rate_phases(self.lr, self.weight_decay, self.schedule)

    def tail_start(self) -> float:
        return tail_start(self.phases(), self.total_steps)

    def tail_warnings(self) -> list[dict[str, Any]]:
        """``sparse_tail`` when the summary's tail holds fewer than two whole windows
        (:func:`smdengine._science.tail_warnings`)."""
        return tail_warnings(self.total_steps, self.record_every, self.tail_start(), windows=True)

    def regime_warnings(self) -> list[dict[str, Any]]:
        """Out-of-regime warnings of each phase's (η, λ, α) (:func:`smdengine._science.phase_regime`):
        ``au_equilibrium`` is omitted when a phase has no equilibrium AU (λη/(1+α) ≥ 1); a phase beyond
        the continuous-time regime (λη/(1−α) > 0.1) keeps it (seed 003's discrete formula) but has no
        predicted time to equilibrium. The per-layer ``norm_theory`` series is measured with the rates in
        force, seed 003 Thm 1/2's discrete |w|⁴ = ηL/(λ(1−α)(2 − λη/(1+α))), and is NaN or inf where that
        has no positive solution (λη/(1+α) ≥ 2)."""
        notes = {"no_equilibrium": "norm_theory has no positive solution there (NaN/inf) and those phases have "
                                   "no equilibrium_steps in the summary",
                 "decay_not_positive": "those phases have no equilibrium_steps in the summary",
                 "continuous_time": "those phases have no equilibrium_steps_predicted in the summary"}
        omits = {**{code: ["au_equilibrium"] for code in NO_EQUILIBRIUM_AU}, "continuous_time": []}
        return regime_warnings(self.phases(), omits, self.momentum, 1.0, "schedule", self.total_steps, notes)


class TrainSpec(SpecBase):
    kind: Literal["train"]
    params: TrainParams = Field(default_factory=lambda: TrainParams.model_validate({}))

    @property
    def work(self) -> int:
        """trials · steps · batch_size · forward multiply-adds per sample ÷ 10⁴."""
        p = self.params
        return p.trials * p.total_steps * p.batch_size * shapes.forward_macs(p) // 10_000

    def missing_data(self, data_dir: str | Path | None) -> dict[str, str] | None:
        if self.params.dataset.name != "cifar10":
            return None    # digits and synthetic are bundled or generated
        problem = cifar10_missing(data_dir)
        return None if problem is None else {"field": "params.dataset.name", "message": problem}


GLOBAL_METRICS = ("train_loss", "train_acc", "test_loss", "test_acc", "lr", "weight_decay")
LAYER_METRICS = ("au_rms", "au_mean", "norm", "unit_grad_sq", "eff_lr", "norm_theory")
"""Per scale-invariant group: series ``"<group>/<metric>"``, under ``layers`` in the result document."""

OUTPUTS = Outputs(
    metrics=GLOBAL_METRICS + LAYER_METRICS,
    theory=("au_equilibrium",),
    summary=("test_loss_final", "test_acc_final", "scale_invariance_max_cos", "train_samples", "noisy_labels"),
    plots={
        "au": PlotDef("Angular update per step (RMS over the window), per layer", "radians", ("au_rms",),
                      ("au_equilibrium",), log_y=True, style="layers"),
        "norm": PlotDef("Weight norm per layer", "|w|", ("norm",), layer_theory=("norm_theory",), log_y=True,
                        style="layers"),
        "loss": PlotDef("Loss", "cross-entropy", ("train_loss", "test_loss"), log_y=True, sparse=("test_loss",)),
        "accuracy": PlotDef("Accuracy", "accuracy", ("train_acc", "test_acc"), sparse=("test_acc",)),
    },
    full_document_plots=True,
    layer_metrics=LAYER_METRICS,
)
MODEL = Model("train", TrainParams, "smdengine.train.simulate:TrainRun", OUTPUTS)
