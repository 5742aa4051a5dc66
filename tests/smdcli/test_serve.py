"""`smd serve`'s embedded worker process."""
from __future__ import annotations

import os
import subprocess
import sys

from smdcli.serve import WORKER_NICENESS, _worker_child


def test_embedded_worker_runs_at_a_lower_cpu_priority():
    """The worker child is started nicer than the API, so that a running job does not delay the
    API's answers on a busy machine (bench/dashboard_load.py)."""
    out = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], preexec_fn=_worker_child,
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == min(19, os.nice(0) + WORKER_NICENESS)
