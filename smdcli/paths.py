"""What the commands read from their arguments. Argument types for ``-o`` (a path the command can write,
checked when the arguments are read, so that a long run never ends in a traceback that loses its results)
and for ids (argparse then exits 2 with the reason); a JSON object from a file or stdin."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


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


def resource_id(text: str) -> str:
    """An experiment's, study's or preset's id: letters, digits, '-' and '_' (:func:`smdlab.client.valid_id`;
    '../experiments/X' as a study id cancelled that experiment)."""
    from smdlab.client import valid_id
    from smdlab.errors import SMDError

    try:
        return valid_id(text, "the")
    except SMDError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("the id: ")) from None


def read_object(path: Path | str, prog: str, what: str) -> dict[str, Any] | None:
    """The JSON object in file ``path`` (``-``: stdin); None, with ``prog: cannot read the WHAT 'path': why`` on
    stderr, when it cannot be read, is not UTF-8 or JSON, or is not an object."""
    try:
        data = json.loads(sys.stdin.read() if str(path) == "-" else Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        print(f"{prog}: cannot read the {what} {str(path)!r}: {exc}", file=sys.stderr)
        return None
    if not isinstance(data, dict):
        print(f"{prog}: the {what} {str(path)!r}: expected a JSON object, got {type(data).__name__}", file=sys.stderr)
        return None
    return data


def count(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun that agrees with it: "1 child", "2 children", "1 seed", "4 seeds"."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"
