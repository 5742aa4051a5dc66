"""An attempt's provenance: the engine's facts (``smdengine.provenance``: versions, device, dtype) plus the
code's git commit, so that every result says which code produced it."""
from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import smdengine

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@cache
def git_commit() -> str | None:
    """SMD_GIT_COMMIT when set (an image built without .git), else ``git rev-parse HEAD`` of the checkout
    this code runs from, with "+dirty" when tracked files differ from it; None when neither is known."""
    given = os.environ.get("SMD_GIT_COMMIT")
    if given:
        return given
    if not (PROJECT_ROOT / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(PROJECT_ROOT), "diff", "--quiet", "HEAD", "--"],
                               capture_output=True, timeout=5).returncode == 1
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head or None


def attempt_provenance(spec: Any) -> dict[str, Any]:
    return {**smdengine.provenance(spec), "git_commit": git_commit()}


def warm() -> None:
    """Compute the slow, cached facts (the git commit: two subprocesses; the engine version: a scan of the
    installed distributions) once per process, before a claim: not between a claim and its attempt's
    start, where clients would see the job running at step 0 for that long."""
    git_commit()
    smdengine.engine_version()
    # the simulators (and torch) that fuse_key loads right after a claim, while the new lease runs: a cold
    # import there took seconds on a loaded host and lapsed 3 s leases before their attempts started
    for spec in ({"kind": "nrq"}, {"kind": "sde", "params": {"model": "nrq"}}, {"kind": "train"}):
        smdengine.fuse_key(spec)
