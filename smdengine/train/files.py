"""Where the ``train`` kind's on-disk datasets live, checked without reading them: a leaf module that
imports neither torch nor numpy, so that a service can refuse a spec whose data it does not have
before queueing it (:meth:`smdengine.ExperimentSpec.missing_data`), where the run would fail seconds in.
"""
from __future__ import annotations

from pathlib import Path

CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_FILE = "test_batch"


class DatasetUnavailable(RuntimeError):
    """The data files are absent or unreadable (a deployment problem, not a bad spec)."""


def cifar10_folder(data_dir: str | Path | None) -> Path:
    """``<data_dir>/cifar-10-batches-py``, or ``data_dir`` itself when it holds the batch files."""
    if data_dir is None:
        raise DatasetUnavailable("dataset: cifar10 needs a data directory: set SMD_DATA_DIR to a folder containing "
                                 f"{CIFAR10_FOLDER}/ (the python version of CIFAR-10); nothing is downloaded")
    root = Path(data_dir)
    nested = root / CIFAR10_FOLDER
    if nested.is_dir():
        return nested
    if (root.name == CIFAR10_FOLDER and root.is_dir()) or (root / CIFAR10_TRAIN_FILES[0]).is_file():
        return root
    raise DatasetUnavailable(f"dataset: cifar10 expected the folder {nested} (the python version of CIFAR-10), "
                             "not found; nothing is downloaded")


def cifar10_missing(data_dir: str | Path | None) -> str | None:
    """Why CIFAR-10 cannot be read from ``data_dir`` (no folder, or no first training or test batch), or
    None. The files are not opened: how many training batches a run reads depends on their sizes, and
    a corrupt file is still found by the run."""
    try:
        folder = cifar10_folder(data_dir)
    except DatasetUnavailable as e:
        return str(e)
    for name in (CIFAR10_TRAIN_FILES[0], CIFAR10_TEST_FILE):
        if not (folder / name).is_file():
            return f"dataset: cifar10 file {folder / name} not found"
    return None
