"""Processes whose wall clock is off, as on a host without NTP: libfaketime (Debian's `faketime` package,
installed by scripts/ensure-faketime.sh) preloaded with a skew such as "-10m".

Only the wall clock moves: monotonic timers (lease renewal, retry deadlines) stay true, as on a real host, and
so do timed waits on them (libfaketime's "monotonic fix", on by default with this glibc, stretches or skips the
GIL's and threading's timed waits: a lease thread then starves) and files' times (faked ones make Python
recompile every module whose .pyc names the source's time). Python's time.sleep needs faketime_sleep.c
preloaded first (why: in that file), compiled here with the C compiler.
"""
from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO

FAKE_WALL_CLOCK_ONLY = {"FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_FORCE_MONOTONIC_FIX": "0", "NO_FAKE_STAT": "1"}


class ClockUnavailable(RuntimeError):
    """A clock cannot be set off here; the message says why."""


def _library() -> str:
    found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1")
    if not found:
        done = subprocess.run([str(REPO / "scripts" / "ensure-faketime.sh")], capture_output=True, text=True,
                              timeout=600)
        found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
        if not found:
            raise ClockUnavailable("libfaketime is not installed and scripts/ensure-faketime.sh could not install "
                                   f"it: {(done.stderr or done.stdout).strip()[-600:]}")
    return found[0]


def _sleep_fix(folder: Path) -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ClockUnavailable("no C compiler (cc) for tests/integration/faketime_sleep.c")
    out = folder / "faketime_sleep.so"
    if not out.exists():
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(out),
                               str(Path(__file__).with_name("faketime_sleep.c")), "-ldl"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise ClockUnavailable(f"tests/integration/faketime_sleep.c does not compile: {done.stderr[-600:]}")
    return str(out)


def wall_clock_off(skew: str, folder: Path) -> dict[str, str]:
    """The environment variables that run a process with its wall clock ``skew`` off ("+10m", "-7m");
    ``folder`` keeps the compiled sleep fix. Raises :class:`ClockUnavailable`."""
    return {"LD_PRELOAD": f"{_sleep_fix(folder)}:{_library()}", "FAKETIME": skew, **FAKE_WALL_CLOCK_ONLY}
