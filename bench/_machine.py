"""What every benchmark prints about the machine it ran on (imported by the bench/*.py scripts,
which run with bench/ on sys.path)."""
from __future__ import annotations

import os


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, or "n/a" where the OS has none."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"
