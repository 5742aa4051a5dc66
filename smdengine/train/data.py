"""Datasets of the ``train`` kind: scikit-learn's 8×8 digits, a synthetic Gaussian mixture and
CIFAR-10 (python-pickle format, read from disk; nothing is downloaded), with label noise.

Everything random (the digits split, the synthetic samples, the label noise) is drawn on the CPU
from numpy generators seeded by ``params.data_seed``, in float64 / int64, and only then cast to the
requested dtype and moved to the device: one ``data_seed`` gives the same data on every call,
device and dtype (float32 data are the float64 data rounded once). Two independent streams are
derived from the seed, so turning label noise on or off never changes the images or the split:

    stream 0: digits split / synthetic means, labels and samples,
    stream 1: label noise.

Inputs are standardized with statistics of the *training* set only (population std, ddof = 0):
digits with one scalar mean/std over all pixels (one channel), synthetic per feature, CIFAR-10 per
channel. A statistic with zero spread (a constant feature) is only centred (std taken as 1).
"""
from __future__ import annotations

import gzip
import importlib.util
import math
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from smdengine.train.files import CIFAR10_TEST_FILE, CIFAR10_TRAIN_FILES, DatasetUnavailable, cifar10_folder
from smdengine.train.shapes import INPUT

if TYPE_CHECKING:
    from smdengine.train.spec import TrainParams

(CIFAR10_SHAPE, CIFAR10_CLASSES), (DIGITS_SHAPE, DIGITS_CLASSES) = INPUT["cifar10"], INPUT["digits"]
_CHUNK = 4096                   # rows standardized at a time (bounds the float64 working copy)


@dataclass
class Dataset:
    """One dataset, ready for training.

    x_train: (n_train, *input_shape), the requested dtype and device, standardized with train statistics.
    y_train: (n_train,) int64, the training labels *after* label noise.
    x_test:  (n_test, *input_shape), standardized with the same (train) statistics.
    y_test:  (n_test,) int64, clean labels (label noise never touches the test set).
    classes: number of classes; labels lie in [0, classes).
    noisy:   (n_train,) bool, True where label noise replaced the training label (the new label
             may equal the old one).
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: int
    noisy: torch.Tensor

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input: (1, 8, 8) digits, (input_dim,) synthetic, (3, 32, 32) cifar10."""
        return tuple(self.x_train.shape[1:])


def load_dataset(params: TrainParams, device: torch.device, dtype: torch.dtype,
                 data_dir: str | os.PathLike | None = None) -> Dataset:
    """The dataset of ``params.dataset`` with ``params.label_noise`` applied, split / generated
    from ``params.data_seed``. ``data_dir`` is only needed for cifar10 (the folder holding
    ``cifar-10-batches-py/``, or that folder itself)."""
    if not dtype.is_floating_point:
        raise ValueError(f"dtype: expected a floating-point dtype, got {dtype}")
    spec = params.dataset
    if spec.name == "digits":
        raw = _digits(spec, params.data_seed)
    elif spec.name == "synthetic":
        raw = _synthetic(spec, params.data_seed)
    else:   # cifar10, the one other name of the spec's union
        raw = _cifar10(spec, data_dir)
    assert (len(raw.x_train), len(raw.x_test)) == spec.sizes(), "dataset: sizes disagree with the spec"

    y_train, noisy = _label_noise(raw.y_train, raw.classes, params.label_noise, params.data_seed)
    return Dataset(x_train=_standardize(raw.x_train, raw.mean, raw.std, dtype).to(device),
                   y_train=torch.from_numpy(y_train).to(device),
                   x_test=_standardize(raw.x_test, raw.mean, raw.std, dtype).to(device),
                   y_test=torch.from_numpy(raw.y_test).to(device),
                   classes=raw.classes,
                   noisy=torch.from_numpy(noisy).to(device))


@dataclass
class _Raw:
    """A dataset before standardization, as numpy arrays on the CPU.

    x_train: (n_train, *input_shape), x_test: (n_test, *input_shape), any real dtype, raw units;
    y_train, y_test: int64 clean labels; mean, std: float64 train statistics, broadcastable
    against one input."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    classes: int


# ----------------------------------------------------------------------------- shared helpers


def _rng(data_seed: int, stream: int) -> np.random.Generator:
    """The numpy generator of one stream (0 data, 1 label noise) of ``data_seed``."""
    return np.random.default_rng(np.random.SeedSequence([data_seed, stream]))


def _standardize(raw: np.ndarray, mean: np.ndarray, std: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """(raw − mean) / std as a CPU tensor of ``dtype``, computed in float64 a chunk of rows at a
    time (so no float64 copy of a whole dataset is made) and rounded once to ``dtype``.

    raw: (n, *shape), any real dtype; mean, std: float64, broadcastable against one chunk.
    A zero std is replaced by 1 (the feature is only centred)."""
    std = np.where(std > 0, std, 1.0)
    out = torch.empty(raw.shape, dtype=dtype)
    for start in range(0, len(raw), _CHUNK):
        chunk = (raw[start:start + _CHUNK].astype(np.float64) - mean) / std
        out[start:start + _CHUNK] = torch.from_numpy(chunk)
    return out


def _label_noise(y: np.ndarray, classes: int, fraction: float, data_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Replace exactly round(fraction · n) labels, at indices drawn without replacement, by labels
    drawn uniformly from all ``classes`` (so a replaced label keeps its old value with probability
    1/classes; the expected share of *changed* labels is fraction · (1 − 1/classes)).

    y: (n,) int64 clean labels. Returns the new labels (n,) int64 and the mask (n,) bool of the
    replaced indices."""
    n = len(y)
    rng = _rng(data_seed, 1)
    chosen = rng.choice(n, size=round(fraction * n), replace=False)
    y = y.copy()
    y[chosen] = rng.integers(0, classes, size=len(chosen), dtype=np.int64)
    noisy = np.zeros(n, dtype=bool)
    noisy[chosen] = True
    return y, noisy


# ----------------------------------------------------------------------------- digits


def _digits(spec, data_seed: int) -> _Raw:
    """scikit-learn's 1797 8×8 digits (pixel values 0..16). A permutation from ``data_seed``: its
    first ceil(test_fraction · 1797) indices are the test set, the rest (in permutation order) the
    training set. One scalar mean/std over all training pixels."""
    images, labels = digits_arrays()
    n_test = math.ceil(spec.test_fraction * len(images))
    perm = _rng(data_seed, 0).permutation(len(images))
    test, train = perm[:n_test], perm[n_test:]
    raw_train = images[train].reshape(-1, *DIGITS_SHAPE)         # (n_train, 1, 8, 8)
    raw_test = images[test].reshape(-1, *DIGITS_SHAPE)
    return _Raw(raw_train, labels[train], raw_test, labels[test],
                mean=np.asarray(raw_train.mean()), std=np.asarray(raw_train.std()), classes=DIGITS_CLASSES)


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The digits' images (1797, 8, 8) float64 and labels (1797,) int64, read from the file scikit-learn bundles
    (sklearn/datasets/data/digits.csv.gz: 64 pixels and the label per line), as its ``load_digits`` reads it,
    without importing scikit-learn: that import took 1.2–1.9 s of every train job's set-up, the file 0.02 s."""
    package = importlib.util.find_spec("sklearn")   # found, not imported
    if package is None or not package.submodule_search_locations:
        raise RuntimeError("dataset digits: scikit-learn (which bundles it) is not installed")
    path = Path(package.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    try:
        with gzip.open(path) as f:
            table = np.loadtxt(f, delimiter=",")
    except OSError:   # not where scikit-learn has kept it: its own reader, slower, knows
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return np.asarray(bunch.images, dtype=np.float64), np.asarray(bunch.target, dtype=np.int64)
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)


# ----------------------------------------------------------------------------- synthetic


def _synthetic(spec, data_seed: int) -> _Raw:
    """A Gaussian mixture in d = input_dim dimensions with K = classes components:

        μ_k = class_separation · m_k / √d,   m_k ~ N(0, I_d)   (so |μ_k| ≈ class_separation),
        y ~ uniform on {0, …, K−1},   x = μ_y + ε,   ε ~ N(0, I_d).

    Two means lie ≈ √2 · class_separation apart, in units of the noise std. Train and test are
    independent samples of the same mixture (train first, then test, from one stream). Standardized
    per feature with train statistics."""
    d, k = spec.input_dim, spec.classes
    rng = _rng(data_seed, 0)
    means = spec.class_separation / math.sqrt(d) * rng.standard_normal((k, d))

    def sample(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, k, size=n, dtype=np.int64)
        return means[y] + rng.standard_normal((n, d)), y

    raw_train, y_train = sample(spec.train_samples)
    raw_test, y_test = sample(spec.test_samples)
    return _Raw(raw_train, y_train, raw_test, y_test,
                mean=raw_train.mean(axis=0), std=raw_train.std(axis=0), classes=k)


# ----------------------------------------------------------------------------- cifar10


def _cifar10(spec, data_dir) -> _Raw:
    """The first train_samples training images (data_batch_1, 2, … in file order, reading only the
    files needed) and the first test_samples test images, as (n, 3, 32, 32). Pixels are scaled to
    [0, 1] and standardized per channel with train statistics (the result is the same as
    standardizing the raw 0..255 values, which is what is computed)."""
    folder = cifar10_folder(data_dir)
    raw_train, y_train = _read_rows(folder, CIFAR10_TRAIN_FILES, spec.train_samples, "train_samples")
    raw_test, y_test = _read_rows(folder, (CIFAR10_TEST_FILE,), spec.test_samples, "test_samples")
    raw_train = raw_train.reshape(-1, *CIFAR10_SHAPE)             # row-major: 1024 R, 1024 G, 1024 B
    raw_test = raw_test.reshape(-1, *CIFAR10_SHAPE)
    # per-channel mean and population std, computed exactly from 256-bin histograms (no float copy of the images)
    values, means, stds = np.arange(256, dtype=np.float64), [], []
    for c in range(raw_train.shape[1]):
        counts = np.bincount(raw_train[:, c].ravel(), minlength=256).astype(np.float64)
        mean = counts @ values / counts.sum()
        means.append(mean)
        stds.append(math.sqrt(counts @ (values - mean) ** 2 / counts.sum()))
    return _Raw(raw_train, y_train, raw_test, y_test, mean=np.array(means)[:, None, None],
                std=np.array(stds)[:, None, None], classes=CIFAR10_CLASSES)


def _read_rows(folder: Path, names: tuple[str, ...], n: int, field: str) -> tuple[np.ndarray, np.ndarray]:
    """The first n rows of the batch files ``names``, read in order until n rows are collected.
    Returns data (n, 3072) uint8 and labels (n,) int64."""
    data, labels, found = [], [], 0
    for name in names:
        if found >= n:
            break
        rows, row_labels = _read_batch(folder / name)
        take = min(n - found, len(rows))
        data.append(rows[:take])
        labels.append(row_labels[:take])
        found += take
    if found < n:
        raise ValueError(f"{field}: expected at most the {found} images in {', '.join(names)} of {folder}, got {n}")
    return np.concatenate(data), np.concatenate(labels)


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 pickle: a dict with b"data", uint8 (rows, 3072), and b"labels", rows ints 0..9."""
    if not path.is_file():
        raise DatasetUnavailable(f"dataset: cifar10 file {path} not found")
    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
    except Exception as e:  # any unpickling failure means the file is unusable
        raise DatasetUnavailable(f"dataset: cifar10 file {path} is not a readable pickle "
                                 f"({type(e).__name__}: {e})") from e
    if not isinstance(batch, dict):
        raise DatasetUnavailable(f"dataset: cifar10 file {path}: expected a dict, got {type(batch).__name__}")
    for key in (b"data", b"labels"):
        if key not in batch:
            raise DatasetUnavailable(f"dataset: cifar10 file {path}: expected the key {key!r}, "
                                     f"got keys {sorted(map(repr, batch))}")
    data = np.asarray(batch[b"data"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != math.prod(CIFAR10_SHAPE):
        raise DatasetUnavailable(f"dataset: cifar10 file {path}: expected data of uint8 (rows, 3072), "
                                 f"got {data.dtype} {data.shape}")
    try:
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (TypeError, ValueError) as e:
        raise DatasetUnavailable(f"dataset: cifar10 file {path}: expected integer labels ({e})") from e
    if labels.shape != (len(data),):
        raise DatasetUnavailable(f"dataset: cifar10 file {path}: expected {len(data)} labels, got shape {labels.shape}")
    if len(labels) and (labels.min() < 0 or labels.max() >= CIFAR10_CLASSES):
        raise DatasetUnavailable(f"dataset: cifar10 file {path}: expected labels in 0..9, "
                                 f"got {labels.min()}..{labels.max()}")
    return data, labels
