"""The embedded broker: kombu's filesystem transport, made to skip a message file it cannot read.

A full disk leaves 0-byte or torn message files behind (the writer got no space); kombu's own channel
raises on such a file at every fetch, and the Celery consumer dies and restarts in a loop (8 times in 40 s
where it was seen). A doorbell carries no data (the database is the record of truth, and the sweeper
rings again for every queued job), so an unreadable one is logged and dropped, and the next file is read.
Installed as the ``filesystem://`` transport by worker.celery_app."""
from __future__ import annotations

import logging

from kombu.exceptions import ChannelError
from kombu.transport import filesystem

log = logging.getLogger(__name__)


class Channel(filesystem.Channel):
    def _get(self, queue):
        while True:   # each failed try has consumed its file: the loop ends with a message or Empty
            try:
                return super()._get(queue)
            except (ValueError, ChannelError) as exc:   # JSON of an empty or torn file; a file gone unreadable
                log.warning("broker: skipped an unreadable message on queue %s (%s); the sweeper rings again for "
                            "any job still queued", queue, exc)


class Transport(filesystem.Transport):
    Channel = Channel
