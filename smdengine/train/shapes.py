"""Shapes of the ``train`` kind's networks, as plain numbers: input shape and classes, layer widths,
the conv plans, and the forward multiply-adds that size a job. A leaf module: it imports neither the
spec (which uses it to validate widths and count work) nor the models (which build from it), nor torch.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

INPUT: dict[str, tuple[tuple[int, ...], int]] = {"digits": ((1, 8, 8), 10), "cifar10": ((3, 32, 32), 10)}


Architecture = Any   # a TrainParams: its model, depth, width and dataset fix the shapes


def input_shape_and_classes(p: Architecture) -> tuple[tuple[int, ...], int]:
    if p.dataset.name == "synthetic":
        return (p.dataset.input_dim,), p.dataset.classes
    return INPUT[p.dataset.name]


def widths(p: Architecture) -> list[int]:
    """Widths of the normalized layers (hidden units or channels), in order."""
    if p.model == "mlp":
        return [p.width] * p.depth
    if p.model == "cnn":
        return [p.width * 2 ** min(i, 2) for i in range(p.depth)]
    return [p.width * 2 ** s for s in range(3)]


def cnn_plan(p: Architecture) -> list[tuple[int, int, int]]:
    """(in channels, out channels, stride) per conv layer of the CNN (stride 2 at layers 1 and 2)."""
    plan, c_in = [], input_shape_and_classes(p)[0][0]
    for i, c_out in enumerate(widths(p)):
        plan.append((c_in, c_out, 2 if i in (1, 2) else 1))
        c_in = c_out
    return plan


def resnet_blocks(p: Architecture) -> Iterator[tuple[int, int, int, int, int]]:
    """(stage, block, in channels, out channels, stride) of every block of the pre-activation ResNet."""
    n = (p.depth - 2) // 6
    c_in = p.width
    for s, c_out in enumerate(widths(p)):
        for b in range(n):
            stride = 2 if s > 0 and b == 0 else 1
            yield s, b, c_in, c_out, stride
            c_in = c_out


def forward_macs(p: Architecture) -> int:
    """Forward multiply-adds per sample of one trial."""
    shape, classes = input_shape_and_classes(p)
    last = widths(p)[-1]
    if p.model == "mlp":
        d, w = p.depth, p.width
        return math.prod(shape) * w + (d - 1) * w * w + w * classes
    if p.model == "cnn":
        total, (_, hgt, wid) = 0, shape
        for c_in, c_out, stride in cnn_plan(p):
            hgt, wid = -(-hgt // stride), -(-wid // stride)
            total += c_in * c_out * 9 * hgt * wid
        return total + last * classes
    _, hgt, wid = shape
    total = shape[0] * p.width * 9 * hgt * wid
    for _, _, c_in, c_out, stride in resnet_blocks(p):
        hgt, wid = -(-hgt // stride), -(-wid // stride)
        total += (c_in * c_out * 9 + c_out * c_out * 9 + (c_in * c_out if stride != 1 or c_in != c_out else 0)) * hgt * wid
    return total + last * classes
