"""The worker's main process imports the simulators before its pool forks (worker.tasks, Celery's
``worker_init``), so that a pool process starts its first job without seconds of imports."""
from __future__ import annotations

import subprocess
import sys
import textwrap

# In a fresh interpreter (this one has torch imported already): what worker_init does, then a fork as the
# prefork pool makes one, and in the child a first job.
SCRIPT = textwrap.dedent("""
    import os, sys
    import worker.tasks   # registers the worker's signal handlers, as the worker's start imports it
    import smdengine
    from celery import signals
    from smdengine._registry import REGISTRY

    assert "torch" not in sys.modules, "importing the worker must not import torch (the API imports it too)"
    signals.worker_init.send(sender=None)
    modules = {m.simulator.partition(":")[0] for kind in REGISTRY.values() for m in kind.models}
    missing = sorted(m for m in modules | {"torch"} if m not in sys.modules)
    assert not missing, f"not imported by worker_init: {missing}"

    loaded = set(sys.modules)
    pid = os.fork()
    if pid == 0:
        spec = smdengine.parse_spec({"kind": "nrq", "seed": 0,
                                     "params": {"dim": 10, "trials": 16, "steps": 200, "record_every": 20}})
        smdengine.run(spec)
        imported = sorted(set(sys.modules) - loaded)
        print("imported by the first job:", imported, flush=True)
        os._exit(0 if not imported else 3)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
""")


def test_a_forked_pool_process_runs_its_first_job_without_importing():
    # a timeout, not a hang: a fork after a thread pool was started could deadlock the child's first job
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
