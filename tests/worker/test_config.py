"""Worker configuration: the limit check at start-up, queues and GPU placement (no GPU needed)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from store.settings import Settings
from worker.celery_app import HARD_LIMIT_GRACE, UnsafeLimits, check_limits, create_celery
from worker.queue import queue_for
from worker.tasks import gpu_for_process


def test_worker_refuses_a_time_limit_the_visibility_timeout_does_not_cover(tmp_path):
    env = {**os.environ, "SMD_BROKER_URL": "redis://127.0.0.1:1/0", "SMD_STATE_DIR": str(tmp_path),
           "SMD_TASK_TIME_LIMIT": "3600", "SMD_VISIBILITY_TIMEOUT": "3600"}
    out = subprocess.run([sys.executable, "-m", "smdcli.main", "worker"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert "SMD_VISIBILITY_TIMEOUT: expected more than" in out.stderr and "3660" in out.stderr


def test_limit_check_and_celery_settings():
    ok = Settings(broker_url="redis://r:6379/0", task_time_limit=3600, visibility_timeout=3600 + HARD_LIMIT_GRACE + 1)
    check_limits(ok)
    with pytest.raises(UnsafeLimits):
        check_limits(Settings(broker_url="redis://r:6379/0", task_time_limit=3600, visibility_timeout=3600))
    check_limits(Settings(task_time_limit=3600, visibility_timeout=60))   # filesystem broker: no redelivery timer
    conf = create_celery(ok).conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost and conf.worker_prefetch_multiplier == 1
    assert conf.task_soft_time_limit == 3600 and conf.task_time_limit == 3600 + HARD_LIMIT_GRACE
    assert conf.broker_transport_options["visibility_timeout"] > conf.task_time_limit


def test_queues_and_gpu_placement():
    assert [queue_for(d) for d in ("cuda", "cpu", "auto")] == ["gpu", "cpu", "cpu"]
    assert [gpu_for_process(i, "", 2) for i in range(4)] == ["0", "1", "0", "1"]
    assert [gpu_for_process(i, "2,5", 2) for i in range(3)] == ["2", "5", "2"]
    assert Settings(worker_queues="gpu,cpu").queues == ["gpu", "cpu"]
    with pytest.raises(ValueError):
        Settings(worker_queues="fast")


def test_the_filesystem_broker_is_polled_as_set(tmp_path):
    """`smd serve`'s broker is a folder that an idle worker lists every SMD_BROKER_POLL_SECONDS: kombu's default
    (1 s) started each job ~1 s after its submission. The transport the app opens takes the setting."""
    for poll in (None, 0.5):
        settings = Settings(state_dir=tmp_path / "state", **({} if poll is None else {"broker_poll_seconds": poll}))
        with create_celery(settings).connection_for_read() as connection:
            assert connection.transport.polling_interval == settings.broker_poll_seconds == (poll or 0.1)


def test_each_pool_process_takes_its_share_of_the_cores():
    """torch's default gives every pool process every core; a pool of N takes cores // N threads each (at least
    one), or SMD_WORKER_TORCH_THREADS. Run in a child: set_num_threads is for the whole process."""
    code = ("import os, torch; from store.settings import Settings; from worker.tasks import torch_threads; "
            "cores = len(os.sched_getaffinity(0)); "
            "assert torch_threads(Settings(worker_concurrency=1)) == cores == torch.get_num_threads(); "
            "assert torch_threads(Settings(worker_concurrency=cores * 4)) == 1 == torch.get_num_threads(); "
            "assert torch_threads(Settings(worker_concurrency=1, worker_torch_threads=3)) == 3 == torch.get_num_threads()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"})
    assert out.returncode == 0, out.stderr
    # OMP_NUM_THREADS set by whoever started the worker is kept (the tests' servers run one thread each: overriding
    # it with the cores put the suite at 24 minutes instead of 14)
    kept = ("import torch; from store.settings import Settings; from worker.tasks import torch_threads; "
            "assert torch_threads(Settings(worker_concurrency=1)) == 1 == torch.get_num_threads(); "
            "assert torch_threads(Settings(worker_torch_threads=3)) == 3 == torch.get_num_threads()")
    out = subprocess.run([sys.executable, "-c", kept], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr

