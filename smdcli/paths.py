"""Argument types for ``-o``: a path the command can write, checked when the arguments are read, so that a
long run never ends in a traceback that loses its results (argparse then exits 2 with the reason)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path


def output_file(text: str) -> Path:
    """A file to create or replace: not a folder, in an existing folder this user may write in."""
    path = Path(text)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: expected a file path")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: no folder {str(folder)!r} to write it in")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text!r}: not writable by this user")
    return path


def output_dir(text: str) -> Path:
    """A folder to write into (made if missing): not a file; its nearest existing folder writable."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file: expected a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: {str(existing)!r} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r}: {str(existing)!r} is not writable by this user")
    return path
