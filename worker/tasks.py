"""Celery tasks: thin wrappers over :mod:`worker.runner`."""
from __future__ import annotations

import socket

from store.settings import get_settings
from worker.celery_app import RUN_TASK, celery_app
from worker.runner import execute


@celery_app.task(name=RUN_TASK)
def run_experiment(experiment_id: str) -> str:
    """Run one experiment by id; its outcome is written to the database."""
    return execute(get_settings(), experiment_id, worker=f"{socket.gethostname()}:{run_experiment.request.hostname}")
