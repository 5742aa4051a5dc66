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

import torch
import torch.nn.functional as F

from smdengine.train import layers as L
from smdengine.train.shapes import cnn_plan, input_shape_and_classes, resnet_blocks, widths
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
    def _param(self, name: str, shape: tuple[int, ...], trainable: bool, std: float = 0.0,
               value: float = 0.0, scale: float = 1.0) -> None:
        """A (T, *shape) parameter: N(0, std²) draws times ``scale``, or ``value`` everywhere when std is
        0. With ``same_init`` one (1, *shape) draw is copied to every trial."""
        size = (self.trials, *shape)
        if std:
            same = self.p.same_init and self.trials > 1
            t = torch.randn((1, *shape) if same else size, generator=self.gen, device=self.device,
                            dtype=self.dtype) * std
            if scale != 1.0:
                t.mul_(scale)
            if same:
                t = t.expand(size).clone()
        else:
            t = torch.full(size, value, device=self.device, dtype=self.dtype)
        self.params[name] = t.requires_grad_(trainable)
        if trainable:
            self.trainable.append(name)

    def weight(self, name: str, shape: tuple[int, ...], group: str = "") -> None:
        """A weight before a normalization, He-initialised times ``init_scale``; joins ``group`` ('' = its own)."""
        self._param(name, shape, True, std=math.sqrt(2.0 / math.prod(shape[1:])), scale=self.p.init_scale)
        self.groups.setdefault(group or name, []).append(name)

    def norm(self, name: str, width: int) -> None:
        """Affine parameters (and running statistics for batch norm) of a normalization over ``width``
        features or channels; nothing for weight standardization."""
        if self.p.norm == "weight_standardization":
            return
        if not self.p.scale_invariant:
            self._param(f"{name}.gamma", (width,), True, value=1.0)
            self._param(f"{name}.beta", (width,), True)
        if self.p.norm == "batch":
            self.buffers[f"{name}.running_mean"] = torch.zeros(self.trials, width, device=self.device, dtype=self.dtype)
            self.buffers[f"{name}.running_var"] = torch.ones(self.trials, width, device=self.device, dtype=self.dtype)

    def classifier(self, width: int) -> None:
        trainable = not self.p.scale_invariant
        self._param("classifier.weight", (self.classes, width), trainable, std=1.0 / math.sqrt(width))
        self._param("classifier.bias", (self.classes,), trainable)

    # -- use ------------------------------------------------------------------------------------
    def w(self, name: str, gain: float = math.sqrt(2.0)) -> torch.Tensor:
        """The weight as the layer uses it (standardized under weight standardization)."""
        w = self.params[name]
        return L.standardize(w, gain) if self.p.norm == "weight_standardization" else w

    def normalize(self, x: torch.Tensor, name: str, training: bool) -> torch.Tensor:
        """``x`` through the normalization ``name``, dense (T, B, F) or image (B, T·C, H, W) layout."""
        p = self.p
        if p.norm == "weight_standardization":
            return x
        affine = self.params.get(f"{name}.gamma"), self.params.get(f"{name}.beta")
        running = None
        if p.norm == "batch":
            running = self.buffers[f"{name}.running_mean"], self.buffers[f"{name}.running_var"]
        if x.dim() == 3:
            return L.dense_norm(x, p.norm, p.norm_groups, *affine, running, training)
        return L.image_norm(x, p.norm, self.trials, p.norm_groups, *affine, running, training)

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
            h = F.relu(self.normalize(h, f"layers.{i}.norm", training))
        return self.logits(h)


class CNN(Net):
    """[conv3×3 (no bias) → norm → ReLU] × depth (channels width·2^min(i,2), stride 2 at layers 1
    and 2) → global average pool → classifier."""

    def build(self) -> CNN:
        for i, (c_in, c_out, _) in enumerate(cnn_plan(self.p)):
            self.weight(f"conv.{i}.weight", (c_out, c_in, 3, 3))
            self.norm(f"conv.{i}.norm", c_out)
        self.classifier(widths(self.p)[-1])
        return self

    def forward(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        h = L.fold(x, self.trials)
        for i, (_, _, stride) in enumerate(cnn_plan(self.p)):
            h = L.conv(h, self.w(f"conv.{i}.weight"), stride)
            h = F.relu(self.normalize(h, f"conv.{i}.norm", training))
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
        self.norm("final.norm", widths(self.p)[-1])
        self.classifier(widths(self.p)[-1])
        return self

    def forward(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        h = L.conv(L.fold(x, self.trials), self.w("stem.weight"))
        for s, b, _c_in, _c_out, stride in resnet_blocks(self.p):
            pre = f"stage{s}.block{b}"
            a = F.relu(self.normalize(h, f"{pre}.norm1", training))
            shortcut = (L.conv(a, self.w(f"{pre}.shortcut.weight"), stride)
                        if f"{pre}.shortcut.weight" in self.params else h)
            r = L.conv(a, self.w(f"{pre}.conv1.weight"), stride)
            r = L.conv(F.relu(self.normalize(r, f"{pre}.norm2", training)), self.w(f"{pre}.conv2.weight"))
            h = shortcut + r
        h = F.relu(self.normalize(h, "final.norm", training))
        return self.logits(L.unfold_pooled(h, self.trials))


def build(p: TrainParams, trials: int, device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> Net:
    model: type[Net] = {"mlp": MLP, "cnn": CNN, "resnet": ResNet}[p.model]
    return model(p, trials, device, dtype, gen).build()
