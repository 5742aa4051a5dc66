"""The Celery application, configured from the one Settings object.

A message is a doorbell (worker/queue.py): the database says which job runs. Long jobs: late acks,
reject on worker lost, prefetch 1, a task time limit below the Redis visibility timeout (checked
at worker start), soft shutdown. Queues ``cpu`` and ``gpu``; a gpu worker runs one process per GPU
and each process sees only its GPU (CUDA_VISIBLE_DEVICES set after the fork, before any CUDA use).

Embedded default: kombu's filesystem transport (no server). It loses the message of a SIGKILLed
worker, which costs nothing: the job's lease expires and the sweeper rings again.
"""
from __future__ import annotations

from celery import Celery

from store.settings import Settings, get_settings

QUEUES = ("cpu", "gpu")
RUN_NEXT_TASK = "smd.run_next"
HARD_LIMIT_GRACE = 60


class UnsafeLimits(ValueError):
    """The broker could redeliver a running job's message while it still runs."""


def check_limits(settings: Settings) -> None:
    """Refuse a task time limit that the Redis visibility timeout does not cover."""
    hard = settings.task_time_limit + HARD_LIMIT_GRACE
    if settings.broker.startswith("redis") and settings.visibility_timeout <= hard:
        raise UnsafeLimits(
            f"SMD_VISIBILITY_TIMEOUT: expected more than the hard task time limit "
            f"(SMD_TASK_TIME_LIMIT + {HARD_LIMIT_GRACE} = {hard} s), got {settings.visibility_timeout} s: "
            f"Redis would hand a running job's message to a second worker")


def create_celery(settings: Settings) -> Celery:
    app = Celery("smdlab", broker=settings.broker, include=["worker.tasks"])
    app.conf.update(
        task_ignore_result=True,          # results live in SQL
        task_acks_late=True,              # a message is acknowledged only after its job ended
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,     # long jobs: never hold a second one hostage
        task_default_queue="cpu",
        task_soft_time_limit=settings.task_time_limit,
        task_time_limit=settings.task_time_limit + HARD_LIMIT_GRACE,
        worker_soft_shutdown_timeout=settings.soft_shutdown_seconds,
        worker_enable_soft_shutdown_on_idle=False,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,   # a restarted Redis is waited for, not fatal
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
    )
    if settings.broker.startswith("filesystem"):
        folder = settings.broker_folder
        (folder / "control").mkdir(parents=True, exist_ok=True)
        app.conf.broker_transport_options = {"data_folder_in": str(folder), "data_folder_out": str(folder),
                                             "control_folder": str(folder / "control"),
                                             "store_processed": False}
    else:
        app.conf.broker_transport_options = {"visibility_timeout": settings.visibility_timeout}
    return app


celery_app = create_celery(get_settings())
