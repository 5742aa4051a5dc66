"""Enqueueing, for the API: called only after the experiment's row is committed."""
from __future__ import annotations

from celery import Celery

from store.settings import Settings
from worker.celery_app import QUEUE, RUN_TASK, create_celery

_apps: dict[tuple[str, str], Celery] = {}


def enqueue(settings: Settings, experiment_id: str) -> None:
    key = (settings.broker, str(settings.broker_folder))
    if key not in _apps:
        _apps[key] = create_celery(settings)
    _apps[key].send_task(RUN_TASK, args=[experiment_id], queue=QUEUE)
