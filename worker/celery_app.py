"""The Celery application, configured from the one Settings object.

A message is a doorbell (worker/queue.py): the database says which job runs. Long jobs: late acks,
reject on worker lost, prefetch 1, a task time limit below the Redis visibility timeout (checked
at worker start), soft shutdown. Queues ``cpu`` and ``gpu``; a gpu worker runs one process per GPU
and each process sees only its GPU (CUDA_VISIBLE_DEVICES set after the fork, before any CUDA use).

Embedded default: kombu's filesystem transport (no server). It loses the message of a SIGKILLed
worker, which costs nothing: the job's lease expires and the sweeper rings again.

One app per process: :data:`celery_app`, configured at its first use — by :func:`get_celery` with
the process's settings, or else (e.g. ``celery -A worker.celery_app:celery_app inspect ping``) from
the ``SMD_*`` environment. Importing this module reads no settings and touches no file; the
filesystem broker's folders are made by :func:`get_celery`.
"""
from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES

from store.settings import Settings, get_settings

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


# the filesystem broker skips an unreadable message file instead of dying on it (worker.fsbroker)
TRANSPORT_ALIASES["filesystem"] = "worker.fsbroker:Transport"


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery configuration of ``settings`` (no side effects)."""
    conf: dict[str, Any] = dict(
        broker_url=settings.broker,
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
        conf["broker_transport_options"] = {"data_folder_in": str(folder), "data_folder_out": str(folder),
                                            "control_folder": str(folder / "control"), "store_processed": False,
                                            # kombu's default, 1 s, started each job ~1 s after its submission
                                            "polling_interval": settings.broker_poll_seconds}
    else:
        conf["broker_transport_options"] = {"visibility_timeout": settings.visibility_timeout}
    return conf


def create_celery(settings: Settings) -> Celery:
    """A Celery app configured from ``settings`` (no side effects; the process's own is :func:`get_celery`'s)."""
    app = Celery("smdlab", include=["worker.tasks"])
    app.conf.update(celery_config(settings))
    return app


celery_app = Celery("smdlab", include=["worker.tasks"])
# read at the app's first use, not at import: unless get_celery configured it, from the SMD_* environment
celery_app.add_defaults(lambda: celery_config(get_settings()))
_configured: dict[tuple[str, str], Celery] = {}


def get_celery(settings: Settings) -> Celery:
    """The process's Celery app, configured from ``settings`` at the first call (its filesystem
    broker's folders made then). A process serving several brokers (only tests do) gets an app
    per broker."""
    key = (settings.broker, str(settings.broker_folder))
    if key not in _configured:
        if settings.broker.startswith("filesystem"):
            (settings.broker_folder / "control").mkdir(parents=True, exist_ok=True)
        if _configured:
            _configured[key] = create_celery(settings)
        else:
            celery_app.conf.update(celery_config(settings))
            _configured[key] = celery_app
    return _configured[key]
