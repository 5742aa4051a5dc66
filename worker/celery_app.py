"""The Celery application, configured from the one Settings object.

Embedded default: kombu's filesystem transport (no server). It loses a message whose worker is
SIGKILLed, which is why the database, not the broker, is the record of truth: `smd serve`
re-enqueues every job the database says is unfinished when it (re)starts a worker.
"""
from __future__ import annotations

from celery import Celery

from store.settings import Settings, get_settings

QUEUES = ("cpu", "gpu")
RUN_NEXT_TASK = "smd.run_next"


def create_celery(settings: Settings) -> Celery:
    app = Celery("smdlab", broker=settings.broker, include=["worker.tasks"])
    app.conf.update(
        task_ignore_result=True,          # results live in SQL
        task_acks_late=True,              # a message is acknowledged only after its job ended
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,     # long jobs: never hold a second one hostage
        task_default_queue="cpu",
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    if settings.broker.startswith("filesystem"):
        folder = settings.broker_folder
        (folder / "control").mkdir(parents=True, exist_ok=True)
        app.conf.broker_transport_options = {"data_folder_in": str(folder), "data_folder_out": str(folder),
                                             "control_folder": str(folder / "control"),
                                             "store_processed": False}
    return app


celery_app = create_celery(get_settings())
