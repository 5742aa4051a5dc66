"""The broker side of the job system, for the API and the sweeper.

A message is a doorbell, not a job: ``smd.run_next(queue)`` tells a worker "a job is waiting on
this queue" and the worker claims the next one from the database (store.jobs.claim_next). So a
lost message costs nothing that the sweeper's re-ring does not repair, and a duplicate one finds
nothing to claim and is dropped.
"""
from __future__ import annotations

from store.models import QUEUES
from store.settings import Settings
from worker.celery_app import RUN_NEXT_TASK, get_celery


def queue_for(device: str) -> str:
    """The queue a spec's device is routed to: cuda → gpu; cpu and auto → cpu (gpu workers consume
    both, so an auto job lands on a GPU when a gpu worker takes it)."""
    return "gpu" if device.startswith("cuda") else "cpu"


def ring(settings: Settings, queue: str, times: int = 1) -> None:
    """Send ``times`` doorbells on ``queue`` (call only after the job rows are committed)."""
    app = get_celery(settings)
    for _ in range(times):
        app.send_task(RUN_NEXT_TASK, args=[queue], queue=queue)


def queue_depths(settings: Settings) -> dict[str, int]:
    """Messages waiting in each queue (not counting those a worker holds); raises when the broker
    is unreachable."""
    app = get_celery(settings)
    depths = {}
    # socket timeouts: a Redis that accepts connections but never answers must not hang the caller
    options = {} if settings.broker.startswith("filesystem") else {"socket_timeout": 2, "socket_connect_timeout": 2}
    with app.connection_for_write(transport_options=options) as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
        channel = conn.default_channel
        for queue in QUEUES:
            _, count, _ = channel.queue_declare(queue=queue, durable=True, auto_delete=False)
            depths[queue] = int(count)
    return depths


def broker_ping(settings: Settings) -> None:
    """Raise when the broker cannot be reached."""
    queue_depths(settings)
