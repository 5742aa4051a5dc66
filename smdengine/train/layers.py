"""Layers batched over trials: every parameter has a leading trial dimension T.

Two activation layouts:
- dense  (T, B, F): linear layers are batched matmuls, normalization over B (batch) or F (layer, group);
- image  (B, T·C, H, W): trials folded into channels (trial-major), a convolution is one grouped
  conv with ``groups=T`` and batch/group/layer norm are ``F.batch_norm``/``F.group_norm`` with the
  channel/group counts multiplied by T, so statistics never mix trials.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

EPS = 1e-5
WS_EPS = 1e-10      # weight standardization: keep ŵ exactly invariant to the scale of w
RUNNING_MOMENTUM = 0.1


def var_mean(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The biased variance and the mean of ``x`` along ``dim`` (kept). On the CPU in two passes, the mean and
    then the mean of the centred squares: as accurate as ``torch.var_mean``'s Welford update, which runs
    several times slower there, forward and backward (bench/README.md, "train_overhead.py"). Elsewhere
    ``torch.var_mean``: one kernel where the two passes launch four, and a GPU's small steps are bound by
    launches (not measured on a GPU yet)."""
    if x.device.type != "cpu":
        return torch.var_mean(x, dim=dim, unbiased=False, keepdim=True)
    mean = x.mean(dim=dim, keepdim=True)
    centred = x - mean
    return (centred * centred).mean(dim=dim, keepdim=True), mean


def standardize(w: torch.Tensor, gain: float) -> torch.Tensor:
    """Weight standardization of (T, O, *fan_in): each output row to mean 0 and norm ``gain``
    (= std·√fan_in), which makes the layer invariant to the scale (and shift) of w."""
    flat = w.flatten(2)
    var, mean = var_mean(flat, 2)
    scale = gain / math.sqrt(flat.shape[2])
    return ((flat - mean) * (torch.rsqrt(var + WS_EPS) * scale)).view_as(w)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x (T, B, I) or shared (B, I), w (T, O, I), b (T, O) → (T, B, O)."""
    out = torch.matmul(x, w.transpose(1, 2))
    return out if b is None else out + b.unsqueeze(1)


def dense_norm(x: torch.Tensor, kind: str, groups: int, gamma: torch.Tensor | None,
               beta: torch.Tensor | None, running: tuple[torch.Tensor, torch.Tensor] | None,
               training: bool) -> torch.Tensor:
    """Normalize (T, B, F). batch: over B with running statistics (T, F) for evaluation; layer: over F;
    group: over F/groups features. gamma, beta (T, F) or None (fixed at 1, 0)."""
    if kind == "batch":
        assert running is not None, "batch norm keeps running statistics"
        if training:
            var, mean = var_mean(x, 1)
            with torch.no_grad():
                n = x.shape[1]
                running[0].lerp_(mean.squeeze(1), RUNNING_MOMENTUM)
                running[1].lerp_(var.squeeze(1) * (n / max(n - 1, 1)), RUNNING_MOMENTUM)
        else:
            mean, var = running[0].unsqueeze(1), running[1].unsqueeze(1)
        y = (x - mean) * torch.rsqrt(var + EPS)
    elif kind == "layer":
        var, mean = var_mean(x, 2)
        y = (x - mean) * torch.rsqrt(var + EPS)
    else:
        t, b, f = x.shape
        g = x.view(t, b, groups, f // groups)
        var, mean = var_mean(g, 3)
        y = ((g - mean) * torch.rsqrt(var + EPS)).view(t, b, f)
    if gamma is not None:
        assert beta is not None, "gamma and beta come together"
        y = torch.addcmul(beta.unsqueeze(1), y, gamma.unsqueeze(1))
    return y


def conv(x: torch.Tensor, w: torch.Tensor, stride: int = 1) -> torch.Tensor:
    """x (B, T·C, H, W), w (T, O, C, k, k) → (B, T·O, H', W'); padding k//2."""
    t, o, c, k, _ = w.shape
    return F.conv2d(x, w.reshape(t * o, c, k, k), stride=stride, padding=k // 2, groups=t)


def image_norm(x: torch.Tensor, kind: str, trials: int, groups: int, gamma: torch.Tensor | None,
               beta: torch.Tensor | None, running: tuple[torch.Tensor, torch.Tensor] | None,
               training: bool) -> torch.Tensor:
    """Normalize (B, T·C, H, W) per trial. batch: per channel over (B, H, W); layer: per sample over
    (C, H, W); group: per sample over C/groups channels and (H, W). gamma, beta (T, C) or None."""
    weight = gamma.reshape(-1) if gamma is not None else None
    bias = beta.reshape(-1) if beta is not None else None
    if kind == "batch":
        assert running is not None, "batch norm keeps running statistics"
        return F.batch_norm(x, running[0].view(-1), running[1].view(-1), weight, bias, training,
                            RUNNING_MOMENTUM, EPS)
    return F.group_norm(x, trials * (groups if kind == "group" else 1), weight, bias, EPS)


def fold(x: torch.Tensor, trials: int) -> torch.Tensor:
    """Per-trial (T, B, C, H, W) or shared (B, C, H, W) images → (B, T·C, H, W)."""
    if x.dim() == 4:
        return x.repeat(1, trials, 1, 1)
    t, b, c, h, w = x.shape
    return x.transpose(0, 1).reshape(b, t * c, h, w)


def unfold_pooled(x: torch.Tensor, trials: int) -> torch.Tensor:
    """(B, T·C, H, W) → global average pool → (T, B, C)."""
    b = x.shape[0]
    return x.mean(dim=(2, 3)).view(b, trials, -1).transpose(0, 1)
