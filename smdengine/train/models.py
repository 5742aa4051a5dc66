"""The networks of the ``train`` kind, batched over trials (see layers.py for the layouts).

Each network knows which of its weights are scale-invariant: ``groups`` maps a name to the
parameters whose joint scaling leaves the loss unchanged. A weight followed by a normalization
(or weight-standardized) is a group of its own; in the pre-activation ResNet the weights that
write the residual stream of a stage (stem or downsampling shortcut, and every block's second
conv) scale the stream together and form one group, ``stage<s>.stream``, because only the next
normalization removes that scale. With ``scale_invariant`` the classifier and the normalization
affine parameters are frozen (seed 001 §6.1), so every trainable weight belongs to a group.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from smdengine.train import layers as L
from smdengine.train.shapes import cnn_plan, input_shape_and_classes, resnet_blocks
from smdengine.train.spec import TrainParams


class Net:
    """Parameters (T, ...) by name, the trainable ones, the scale-invariant groups, and buffers."""

    def __init__(self, p: TrainParams, trials: int, device: torch.device, dtype: torch.dtype,
                 gen: torch.Generator):
        self.p, self.trials, self.device, self.dtype, self.gen = p, trials, device, dtype, gen
        self.params: dict[str, torch.Tensor] = {}
        self.trainable: list[str] = []
        self.groups: dict[str, list[str]] = {}
        self.buffers: dict[str, torch.Tensor] = {}
        self.shape, self.classes = input_shape_and_classes(p)

    # -- construction -------------------------------------------------------------------------
    def _param(self, name: str, shape: tuple[int, ...], std: float, trainable: bool = True) -> torch.Tensor:
        t = torch.randn((self.trials, *shape), generator=self.gen, device=self.device, dtype=self.dtype) * std
        return self._add(name, t, trainable)

    def _const(self, name: str, shape: tuple[int, ...], value: float, trainable: bool) -> torch.Tensor:
        return self._add(name, torch.full((self.trials, *shape), value, device=self.device, dtype=self.dtype),
                         trainable)

    def _add(self, name: str, t: torch.Tensor, trainable: bool) -> torch.Tensor:
        t.requires_grad_(trainable)
        self.params[name] = t
        if trainable:
            self.trainable.append(name)
        return t

    def weight(self, name: str, shape: tuple[int, ...], group: str | None = "") -> str:
        """A weight before a normalization, He-initialised; joins ``group`` ('' = its own)."""
        fan_in = math.prod(shape[1:])
        self._param(name, shape, math.sqrt(2.0 / fan_in))
        if group is not None:
            self.groups.setdefault(group or name, []).append(name)
        return name

    def norm(self, name: str, width: int) -> str:
        """Affine parameters (and running statistics for batch norm) of a normalization over ``width``
        features or channels; nothing for weight standardization."""
        if self.p.norm == "weight_standardization":
            return name
        frozen = self.p.scale_invariant
        if not frozen:
            self._const(f"{name}.gamma", (width,), 1.0, True)
            self._const(f"{name}.beta", (width,), 0.0, True)
        if self.p.norm == "batch":
            self.buffers[f"{name}.running_mean"] = torch.zeros(self.trials, width, device=self.device, dtype=self.dtype)
            self.buffers[f"{name}.running_var"] = torch.ones(self.trials, width, device=self.device, dtype=self.dtype)
        return name

    def classifier(self, width: int) -> None:
        trainable = not self.p.scale_invariant
        self._param("classifier.weight", (self.classes, width), 1.0 / math.sqrt(width), trainable)
        self._const("classifier.bias", (self.classes,), 0.0, trainable)

    # -- use ------------------------------------------------------------------------------------
    def w(self, name: str, gain: float = math.sqrt(2.0)) -> torch.Tensor:
        """The weight as the layer uses it (standardized under weight standardization)."""
        w = self.params[name]
        return L.standardize(w, gain) if self.p.norm == "weight_standardization" else w

    def _affine(self, name: str) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        return self.params.get(f"{name}.gamma"), self.params.get(f"{name}.beta")

    def _running(self, name: str) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.p.norm != "batch":
            return None
        return self.buffers[f"{name}.running_mean"], self.buffers[f"{name}.running_var"]

    def dense_norm(self, x: torch.Tensor, name: str, training: bool) -> torch.Tensor:
        if self.p.norm == "weight_standardization":
            return x
        return L.dense_norm(x, self.p.norm, self.p.norm_groups, *self._affine(name), self._running(name), training)

    def image_norm(self, x: torch.Tensor, name: str, training: bool) -> torch.Tensor:
        if self.p.norm == "weight_standardization":
            return x
        return L.image_norm(x, self.p.norm, self.trials, self.p.norm_groups, *self._affine(name),
                            self._running(name), training)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """(T, B, F) → (T, B, classes) through the classifier (never standardized)."""
        return L.linear(features, self.params["classifier.weight"], self.params["classifier.bias"])

    def build(self) -> Net:
        """Create the parameters (in a fixed order: the generator's draws depend on it)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        """x: per-trial inputs (T, B, *input_shape) or shared (B, *input_shape) → logits (T, B, classes)."""
        raise NotImplementedError


class MLP(Net):
    """[linear (no bias) → norm → ReLU] × depth → classifier."""

    def build(self) -> MLP:
        fan_in = math.prod(self.shape)
        for i in range(self.p.depth):
            self.weight(f"layers.{i}.weight", (self.p.width, fan_in if i == 0 else self.p.width))
            self.norm(f"layers.{i}.norm", self.p.width)
        self.classifier(self.p.width)
        return self

    def forward(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        h = x.flatten(x.dim() - len(self.shape))
        for i in range(self.p.depth):
            h = L.linear(h, self.w(f"layers.{i}.weight"))
            h = F.relu(self.dense_norm(h, f"layers.{i}.norm", training))
        return self.logits(h)


class CNN(Net):
    """[conv3×3 (no bias) → norm → ReLU] × depth (channels width·2^min(i,2), stride 2 at layers 1
    and 2) → global average pool → classifier."""

    def build(self) -> CNN:
        for i, (c_in, c_out, _) in enumerate(cnn_plan(self.p)):
            self.weight(f"conv.{i}.weight", (c_out, c_in, 3, 3))
            self.norm(f"conv.{i}.norm", c_out)
        self.classifier(self.p.widths()[-1])
        return self

    def forward(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        h = _fold_input(x, self.trials, len(self.shape))
        for i, (_, _, stride) in enumerate(cnn_plan(self.p)):
            h = L.conv(h, self.w(f"conv.{i}.weight"), stride)
            h = F.relu(self.image_norm(h, f"conv.{i}.norm", training))
        return self.logits(L.unfold_pooled(h, self.trials))


class ResNet(Net):
    """Pre-activation ResNet, depth 6n+2: conv3×3 stem, three stages of n blocks
    (norm → ReLU → conv3×3 → norm → ReLU → conv3×3, plus the shortcut; the first block of stages
    2 and 3 downsamples by 2 with a 1×1 conv on the pre-activated input), final norm → ReLU →
    average pool → classifier."""

    def _stream(self, s: int) -> str:
        # with weight standardization every conv is scale-invariant on its own ('' = own group)
        return "" if self.p.norm == "weight_standardization" else f"stage{s}.stream"

    def build(self) -> ResNet:
        self.weight("stem.weight", (self.p.width, self.shape[0], 3, 3), self._stream(0))
        for s, b, c_in, c_out, stride in resnet_blocks(self.p):
            pre = f"stage{s}.block{b}"
            self.norm(f"{pre}.norm1", c_in)
            self.weight(f"{pre}.conv1.weight", (c_out, c_in, 3, 3))
            self.norm(f"{pre}.norm2", c_out)
            self.weight(f"{pre}.conv2.weight", (c_out, c_out, 3, 3), self._stream(s))
            if stride != 1 or c_in != c_out:
                self.weight(f"{pre}.shortcut.weight", (c_out, c_in, 1, 1), self._stream(s))
        self.norm("final.norm", self.p.widths()[-1])
        self.classifier(self.p.widths()[-1])
        return self

    def forward(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        h = L.conv(_fold_input(x, self.trials, len(self.shape)), self.w("stem.weight"))
        for s, b, _c_in, _c_out, stride in resnet_blocks(self.p):
            pre = f"stage{s}.block{b}"
            a = F.relu(self.image_norm(h, f"{pre}.norm1", training))
            shortcut = (L.conv(a, self.w(f"{pre}.shortcut.weight"), stride)
                        if f"{pre}.shortcut.weight" in self.params else h)
            r = L.conv(a, self.w(f"{pre}.conv1.weight"), stride)
            r = L.conv(F.relu(self.image_norm(r, f"{pre}.norm2", training)), self.w(f"{pre}.conv2.weight"))
            h = shortcut + r
        h = F.relu(self.image_norm(h, "final.norm", training))
        return self.logits(L.unfold_pooled(h, self.trials))


def _fold_input(x: torch.Tensor, trials: int, image_dims: int) -> torch.Tensor:
    """Per-trial (T, B, C, H, W) or shared (B, C, H, W) images → (B, T·C, H, W)."""
    if x.dim() == image_dims + 1:
        return x.repeat(1, trials, 1, 1)
    return L.fold(x)


MODELS: dict[str, Callable[..., Net]] = {"mlp": MLP, "cnn": CNN, "resnet": ResNet}


def build(p: TrainParams, trials: int, device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> Net:
    return MODELS[p.model](p, trials, device, dtype, gen).build()
