"""Datasets of the ``train`` kind (smdengine.train.data): the digits split and its standardization,
the synthetic Gaussian mixture (shapes, signal), label noise (count, where it acts, how often it
changes a label), and CIFAR-10 read from tiny files in the real python-pickle format (pixel order,
file order, only the needed files, every error path)."""
from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from smdengine import parse_spec
from smdengine.train.data import Dataset, DatasetUnavailable, load_dataset
from smdengine.train.spec import TrainParams

CPU = torch.device("cpu")


def load(dataset: dict, dtype: torch.dtype = torch.float64, data_dir=None, **params) -> Dataset:
    params.setdefault("batch_size", 8)
    return load_dataset(TrainParams(dataset=dataset, **params), CPU, dtype, data_dir)


def digits_raw() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    bunch = load_digits()
    return bunch.data.astype(np.int64), bunch.target.astype(np.int64)


def sorted_rows(a: np.ndarray) -> np.ndarray:
    return a[np.lexsort(a.T[::-1])]


# ----------------------------------------------------------------------------- digits


def test_digits_are_scikit_learns_read_without_importing_it():
    """The bundled file read directly is load_digits' images and labels, equal; a train run on digits, in a
    fresh interpreter, leaves scikit-learn unimported (its import took 1.2–1.9 s of each job's set-up)."""
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from smdengine.train.data import digits_arrays

    images, labels = digits_arrays()
    bunch = load_digits()
    assert np.array_equal(images, bunch.images) and images.dtype == np.float64
    assert np.array_equal(labels, bunch.target) and labels.dtype == np.int64
    code = ("import sys, smdengine; smdengine.run({'kind': 'train', 'params': {'steps': 2, 'record_every': 1}}); "
            "print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("test_fraction", [0.25, 0.1])
def test_digits_shapes_match_the_spec_sizes(test_fraction):
    params = TrainParams(dataset={"name": "digits", "test_fraction": test_fraction})
    data = load_dataset(params, CPU, torch.float32)
    n_train, n_test = params.dataset.sizes()
    assert n_test == math.ceil(test_fraction * 1797) and n_train + n_test == 1797
    assert data.x_train.shape == (n_train, 1, 8, 8) and data.x_test.shape == (n_test, 1, 8, 8)
    assert data.input_shape == (1, 8, 8) and data.classes == 10
    assert data.x_train.dtype == data.x_test.dtype == torch.float32
    assert data.y_train.shape == (n_train,) and data.y_test.shape == (n_test,)
    assert data.y_train.dtype == data.y_test.dtype == torch.int64
    assert data.noisy.shape == (n_train,) and data.noisy.dtype == torch.bool and not data.noisy.any()
    assert 0 <= int(data.y_train.min()) and int(data.y_train.max()) <= 9


def test_digits_is_a_partition_standardized_with_train_statistics():
    """Undo the standardization (an affine map: the 17 distinct standardized values stand for the
    raw pixel values 0..16), and the train and test (image, label) pairs together are exactly
    scikit-learn's 1797 digits; the map uses the train set's scalar mean and population std."""
    data = load({"name": "digits"})
    levels = torch.unique(data.x_train).numpy()
    assert len(levels) == 17
    lo, scale = levels[0], (levels[-1] - levels[0]) / 16

    def raw(x: torch.Tensor) -> np.ndarray:
        r = (x.numpy().reshape(len(x), 64) - lo) / scale
        assert np.abs(r - np.round(r)).max() < 1e-9
        return np.round(r).astype(np.int64)

    raw_train, raw_test = raw(data.x_train), raw(data.x_test)
    got = np.concatenate([np.column_stack([raw_train, data.y_train.numpy()]),
                          np.column_stack([raw_test, data.y_test.numpy()])])
    pixels, labels = digits_raw()
    np.testing.assert_array_equal(sorted_rows(got), sorted_rows(np.column_stack([pixels, labels])))
    mean, std = raw_train.mean(), raw_train.std()
    np.testing.assert_allclose(data.x_train.numpy().reshape(-1, 64), (raw_train - mean) / std, atol=1e-12)
    np.testing.assert_allclose(data.x_test.numpy().reshape(-1, 64), (raw_test - mean) / std, atol=1e-12)
    assert abs(float(data.x_train.mean())) < 1e-12
    assert float(data.x_train.std(unbiased=False)) == pytest.approx(1.0, abs=1e-12)


def test_digits_split_is_deterministic_and_follows_data_seed():
    a, b = load({"name": "digits"}, data_seed=3), load({"name": "digits"}, data_seed=3)
    for name in ("x_train", "y_train", "x_test", "y_test", "noisy"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    c = load({"name": "digits"}, data_seed=4)
    assert not torch.equal(a.y_test, c.y_test)
    assert not torch.equal(a.x_train, c.x_train)


def test_float32_is_the_float64_data_rounded_once():
    for dataset in ({"name": "digits"}, {"name": "synthetic", "train_samples": 300, "test_samples": 100}):
        d64 = load(dataset, torch.float64, label_noise=0.3)
        d32 = load(dataset, torch.float32, label_noise=0.3)
        assert d32.x_train.dtype == torch.float32 and d64.x_train.dtype == torch.float64
        assert torch.equal(d32.x_train, d64.x_train.float()) and torch.equal(d32.x_test, d64.x_test.float())
        assert torch.equal(d32.y_train, d64.y_train) and torch.equal(d32.noisy, d64.noisy)


def test_non_float_dtype_is_refused():
    with pytest.raises(ValueError, match="dtype: expected a floating-point dtype"):
        load({"name": "digits"}, torch.int64)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_holds_the_same_data():
    params = TrainParams(dataset={"name": "digits"}, label_noise=0.2)
    cpu, gpu = load_dataset(params, CPU, torch.float32), load_dataset(params, torch.device("cuda"), torch.float32)
    for name in ("x_train", "y_train", "x_test", "y_test", "noisy"):
        assert getattr(gpu, name).is_cuda and torch.equal(getattr(gpu, name).cpu(), getattr(cpu, name)), name


# ----------------------------------------------------------------------------- synthetic


def test_synthetic_shapes_standardization_and_determinism():
    dataset = {"name": "synthetic", "input_dim": 7, "classes": 4, "train_samples": 500, "test_samples": 200}
    data = load(dataset, data_seed=5)
    assert data.x_train.shape == (500, 7) and data.x_test.shape == (200, 7) and data.input_shape == (7,)
    assert data.classes == 4 and set(data.y_train.tolist()) <= {0, 1, 2, 3}
    torch.testing.assert_close(data.x_train.mean(0), torch.zeros(7, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(data.x_train.std(0, unbiased=False), torch.ones(7, dtype=torch.float64),
                               atol=1e-12, rtol=0)
    again, other = load(dataset, data_seed=5), load(dataset, data_seed=6)
    assert torch.equal(data.x_train, again.x_train) and torch.equal(data.y_test, again.y_test)
    assert not torch.equal(data.x_train, other.x_train)
    assert not torch.equal(data.x_train[:200], data.x_test)  # test is a fresh sample, not a copy


def test_synthetic_data_carry_signal_only_with_separation():
    """Multinomial logistic regression on 2000 training samples (32 features, 10 classes), scored on
    the 1000 test samples. With class_separation 3 two class means lie ≈ 4.2 noise stds apart on
    average (closer for some random pairs): measured accuracy 0.87 at data_seed 0 (0.82–0.87 over
    seeds 0–2), far above chance; with separation 0 the labels are independent of x and accuracy is
    chance, 0.1 ± 0.01 (binomial SE over 1000 test samples; measured 0.09–0.11)."""
    from sklearn.linear_model import LogisticRegression

    def accuracy(separation: float) -> float:
        data = load({"name": "synthetic", "class_separation": separation})
        model = LogisticRegression(max_iter=500).fit(data.x_train.numpy(), data.y_train.numpy())
        return float(model.score(data.x_test.numpy(), data.y_test.numpy()))

    assert accuracy(3.0) > 0.7
    assert accuracy(0.0) < 0.16


# ----------------------------------------------------------------------------- label noise


@pytest.mark.parametrize("dataset, label_noise", [
    ({"name": "digits"}, 0.2),
    ({"name": "synthetic", "input_dim": 2, "classes": 10, "train_samples": 20_000, "test_samples": 10}, 0.3),
    ({"name": "synthetic", "input_dim": 2, "classes": 2, "train_samples": 20_000, "test_samples": 10}, 0.5),
])
def test_label_noise_replaces_exactly_the_marked_labels(dataset, label_noise):
    """Exactly round(label_noise·n) labels are redrawn uniformly from all classes; only they may
    differ from the clean labels, and each differs with probability 1 − 1/K. The number changed
    among the m = round(label_noise·n) redrawn ones is Binomial(m, 1 − 1/K): the changed fraction
    of the training set must be label_noise·(1 − 1/K) within 5 binomial SEs,
    SE = sqrt(m·p·(1 − p))/n. The data and the test labels are those of the clean dataset."""
    noisy, clean = load(dataset, label_noise=label_noise), load(dataset)
    n, k = len(clean.y_train), clean.classes
    m = round(label_noise * n)
    assert int(noisy.noisy.sum()) == m
    assert torch.equal(noisy.x_train, clean.x_train) and torch.equal(noisy.x_test, clean.x_test)
    assert torch.equal(noisy.y_test, clean.y_test)
    changed = noisy.y_train != clean.y_train
    assert not (changed & ~noisy.noisy).any()
    assert 0 <= int(noisy.y_train.min()) and int(noisy.y_train.max()) < k
    p = 1 - 1 / k
    se = math.sqrt(m * p * (1 - p)) / n
    assert abs(float(changed.double().mean()) - label_noise * p) < 5 * se


def test_label_noise_draws_uniform_labels():
    """The 6000 redrawn labels over 10 classes: Pearson χ² against uniform with 9 degrees of
    freedom stays below 27.9, its 99.9% quantile (a fixed seed, so the check is deterministic)."""
    data = load({"name": "synthetic", "input_dim": 2, "train_samples": 20_000, "test_samples": 10}, label_noise=0.3)
    counts = torch.bincount(data.y_train[data.noisy], minlength=10).double()
    expected = counts.sum() / 10
    assert float(((counts - expected) ** 2 / expected).sum()) < 27.9


def test_label_noise_count_rounds_and_follows_data_seed():
    a = load({"name": "synthetic", "train_samples": 30, "test_samples": 5}, label_noise=0.01)
    assert int(a.noisy.sum()) == round(0.01 * 30) == 0
    b1 = load({"name": "digits"}, label_noise=0.1, data_seed=1)
    b2 = load({"name": "digits"}, label_noise=0.1, data_seed=1)
    b3 = load({"name": "digits"}, label_noise=0.1, data_seed=2)
    assert int(b1.noisy.sum()) == round(0.1 * 1347)
    assert torch.equal(b1.noisy, b2.noisy) and torch.equal(b1.y_train, b2.y_train)
    assert not torch.equal(b1.noisy, b3.noisy)


# ----------------------------------------------------------------------------- cifar10

ROWS_PER_BATCH, TEST_ROWS = 20, 10


def write_batch(path: Path, data: np.ndarray, labels: list[int]) -> None:
    with open(path, "wb") as f:
        pickle.dump({b"batch_label": b"x", b"labels": labels, b"data": data, b"filenames": []}, f)


@pytest.fixture
def cifar(tmp_path) -> tuple[Path, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """<tmp>/cifar-10-batches-py with 5 training batches of 20 rows and a test batch of 10, random
    uint8 pixels; training image 20 (the first of data_batch_2) is pure red (R = 255, G = B = 0).
    Returns the root and the raw rows (n, 3072) and labels of train and test, in file order."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    train = rng.integers(0, 256, size=(5 * ROWS_PER_BATCH, 3072), dtype=np.uint8)
    train[20] = 0
    train[20, :1024] = 255
    train_labels = rng.integers(0, 10, size=5 * ROWS_PER_BATCH)
    for i in range(5):
        rows = slice(i * ROWS_PER_BATCH, (i + 1) * ROWS_PER_BATCH)
        write_batch(folder / f"data_batch_{i + 1}", train[rows], train_labels[rows].tolist())
    test = rng.integers(0, 256, size=(TEST_ROWS, 3072), dtype=np.uint8)
    test_labels = rng.integers(0, 10, size=TEST_ROWS)
    write_batch(folder / "test_batch", test, test_labels.tolist())
    return tmp_path, train, train_labels, test, test_labels


def cifar_spec(train_samples: int = 50, test_samples: int = 10) -> dict:
    return {"name": "cifar10", "train_samples": train_samples, "test_samples": test_samples}


def test_cifar10_reads_the_pickle_format_in_file_order(cifar):
    """50 training images span data_batch_1..3; the result must equal an independent
    reshape(3, 32, 32) of the raw rows, scaled to [0, 1] and standardized per channel with the
    training images' statistics (also for the test set)."""
    root, train, train_labels, test, test_labels = cifar
    data = load(cifar_spec(), data_dir=root)
    assert data.x_train.shape == (50, 3, 32, 32) and data.x_test.shape == (10, 3, 32, 32)
    assert data.input_shape == (3, 32, 32) and data.classes == 10
    np.testing.assert_array_equal(data.y_train.numpy(), train_labels[:50])
    np.testing.assert_array_equal(data.y_test.numpy(), test_labels)
    images = train[:50].reshape(50, 3, 32, 32) / 255.0
    mean, std = images.mean(axis=(0, 2, 3), keepdims=True), images.std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(data.x_train.numpy(), (images - mean) / std, atol=1e-12)
    np.testing.assert_allclose(data.x_test.numpy(), (test.reshape(10, 3, 32, 32) / 255.0 - mean) / std, atol=1e-12)
    torch.testing.assert_close(data.x_train.mean((0, 2, 3)), torch.zeros(3, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(data.x_train.std((0, 2, 3), unbiased=False), torch.ones(3, dtype=torch.float64),
                               atol=1e-12, rtol=0)
    red = data.x_train[20]
    assert float(red[0].min()) == float(data.x_train[:, 0].max())       # the red plane is channel 0, saturated
    assert float(red[1].max()) == float(data.x_train[:, 1].min())       # green and blue are at their minimum
    assert float(red[2].max()) == float(data.x_train[:, 2].min())


def test_cifar10_accepts_the_batches_folder_itself_and_reads_only_needed_files(cifar):
    root, *_ = cifar
    folder = root / "cifar-10-batches-py"
    (folder / "data_batch_4").unlink()
    (folder / "data_batch_5").unlink()
    via_root = load(cifar_spec(), data_dir=str(root))
    via_folder = load(cifar_spec(), data_dir=folder)
    assert torch.equal(via_root.x_train, via_folder.x_train) and torch.equal(via_root.y_test, via_folder.y_test)
    with pytest.raises(DatasetUnavailable, match="data_batch_4 not found"):
        load(cifar_spec(train_samples=70), data_dir=root)


def test_the_submission_check_finds_what_the_run_would_not(cifar, tmp_path):
    """ExperimentSpec.missing_data: None where the run finds its folder and first files, else the run's own
    reason, at params.dataset.name; other datasets never miss anything."""
    root, *_ = cifar
    spec = parse_spec({"kind": "train", "params": {"model": "cnn", "batch_size": 8, "dataset": cifar_spec()}})
    assert spec.missing_data(root) is None and spec.missing_data(root / "cifar-10-batches-py") is None
    problem = spec.missing_data(None)
    assert problem["field"] == "params.dataset.name"
    with pytest.raises(DatasetUnavailable) as info:
        load(cifar_spec())
    assert problem["message"] == str(info.value)
    assert str(tmp_path / "elsewhere" / "cifar-10-batches-py") in spec.missing_data(tmp_path / "elsewhere")["message"]
    (root / "cifar-10-batches-py" / "test_batch").unlink()
    assert spec.missing_data(root)["message"] == f"dataset: cifar10 file {root / 'cifar-10-batches-py' / 'test_batch'} not found"
    digits = parse_spec({"kind": "train", "params": {"dataset": {"name": "digits"}}})
    nrq = parse_spec({"kind": "nrq"})
    assert digits.missing_data(None) is None and nrq.missing_data(None) is None


def test_cifar10_needs_a_data_dir():
    with pytest.raises(DatasetUnavailable, match="SMD_DATA_DIR.*cifar-10-batches-py.*nothing is downloaded"):
        load(cifar_spec())


def test_cifar10_missing_folder_names_the_path(tmp_path):
    with pytest.raises(DatasetUnavailable) as info:
        load(cifar_spec(), data_dir=tmp_path / "elsewhere")
    assert str(tmp_path / "elsewhere" / "cifar-10-batches-py") in str(info.value)


def test_cifar10_missing_test_file_names_the_path(cifar):
    root, *_ = cifar
    (root / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DatasetUnavailable) as info:
        load(cifar_spec(), data_dir=root)
    assert f"{root / 'cifar-10-batches-py' / 'test_batch'} not found" in str(info.value)


@pytest.mark.parametrize("content, problem", [
    (b"not a pickle", "not a readable pickle"),
    (pickle.dumps([1, 2, 3]), "expected a dict, got list"),
    (pickle.dumps({b"data": np.zeros((20, 3072), np.uint8)}), "expected the key b'labels'"),
    (pickle.dumps({b"data": np.zeros((20, 3000), np.uint8), b"labels": [0] * 20}), r"uint8 \(rows, 3072\)"),
    (pickle.dumps({b"data": np.zeros((20, 3072), np.float32), b"labels": [0] * 20}), "got float32"),
    (pickle.dumps({b"data": np.zeros((20, 3072), np.uint8), b"labels": [0] * 19}), "expected 20 labels"),
    (pickle.dumps({b"data": np.zeros((20, 3072), np.uint8), b"labels": [10] * 20}), "labels in 0..9"),
])
def test_cifar10_corrupt_file_names_the_file_and_the_problem(cifar, content, problem):
    root, *_ = cifar
    path = root / "cifar-10-batches-py" / "data_batch_2"
    path.write_bytes(content)
    with pytest.raises(DatasetUnavailable, match=problem) as info:
        load(cifar_spec(), data_dir=root)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("train_samples, test_samples, message", [
    (120, 10, "train_samples: expected at most the 100 images"),
    (50, 11, "test_samples: expected at most the 10 images"),
])
def test_cifar10_asking_for_more_images_than_exist(cifar, train_samples, test_samples, message):
    root, *_ = cifar
    with pytest.raises(ValueError, match=message):
        load(cifar_spec(train_samples, test_samples), data_dir=root)


def test_cifar10_label_noise_spares_the_test_set(cifar):
    root, *_ = cifar
    clean, noisy = load(cifar_spec(), data_dir=root), load(cifar_spec(), data_dir=root, label_noise=0.4)
    assert int(noisy.noisy.sum()) == 20
    assert torch.equal(clean.y_test, noisy.y_test) and torch.equal(clean.x_train, noisy.x_train)
    assert not ((clean.y_train != noisy.y_train) & ~noisy.noisy).any()
