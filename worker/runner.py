"""Running one job: claim the row, run the engine, write progress, partial series and results."""
from __future__ import annotations

import logging
import time
import traceback
from typing import Any

from sqlalchemy import update

import smdengine
from smdengine.runtime import json_safe
from store import jobs
from store.db import session_scope
from store.models import Experiment, utcnow
from store.series import write_points
from store.settings import Settings

log = logging.getLogger(__name__)


def execute(settings: Settings, experiment_id: str, worker: str = "local") -> str:
    """Run the job if it can be claimed; returns its final status ("skipped" if not claimed)."""
    url = settings.db_url
    with session_scope(url) as session:
        if not jobs.claim(session, experiment_id, worker):
            log.info("experiment %s is not queued; message dropped", experiment_id)
            return "skipped"
        spec_data = session.get(Experiment, experiment_id).spec
    # A re-run starts from scratch; writing from index 0 replaces any earlier partial series.
    writer = _SeriesWriter(url, experiment_id, settings.flush_seconds)
    try:
        spec = smdengine.parse_spec(spec_data)
        with session_scope(url) as session:
            session.execute(update(Experiment).where(Experiment.id == experiment_id)
                            .values(theory=json_safe(smdengine.predict(spec))))
        result = smdengine.run(spec, on_progress=writer.on_progress, should_stop=writer.should_stop,
                               progress_interval=min(0.5, settings.flush_seconds),
                               data_dir=str(settings.data_dir) if settings.data_dir else None)
        writer.flush()
    except smdengine.Cancelled:
        _flush_quietly(writer)
        return _finish(url, experiment_id, "cancelled")
    except Exception as exc:  # the job failed: record why, never retry a deterministic error
        log.exception("experiment %s failed", experiment_id)
        _flush_quietly(writer)
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return _finish(url, experiment_id, "failed", error=detail)
    doc = result.to_document()
    return _finish(url, experiment_id, "succeeded", summary=doc["summary"], theory=doc["theory"],
                   distributions=doc["distributions"])


def _flush_quietly(writer: "_SeriesWriter") -> None:
    try:
        writer.flush()
    except Exception:  # the job's end must still be recorded
        log.exception("could not write the last points of experiment %s", writer.id)


def _finish(url: str, experiment_id: str, status: str, **values: Any) -> str:
    with session_scope(url) as session:
        jobs.finish(session, experiment_id, status, **values)
    log.info("experiment %s %s", experiment_id, status)
    return status


class _SeriesWriter:
    """Buffers engine progress and writes it to SQL at most every ``flush_seconds``; reads the
    cancel flag at each write."""

    def __init__(self, url: str, experiment_id: str, flush_seconds: float):
        self.url, self.id, self.flush_seconds = url, experiment_id, flush_seconds
        self.index = 0                    # points stored so far
        self.buffer: dict[str, list] = {}
        self.step = 0
        self.total = 0
        self.cancel = False
        self.last_flush = time.monotonic()

    def on_progress(self, progress: smdengine.Progress) -> None:
        for key, values in progress.points.items():
            self.buffer.setdefault(key, []).extend(values)
        self.step, self.total = progress.step, progress.total_steps
        if time.monotonic() - self.last_flush >= self.flush_seconds:
            self.flush()

    def should_stop(self) -> bool:
        return self.cancel

    def flush(self) -> None:
        n = len(self.buffer.get("step", []))
        with session_scope(self.url) as session:
            if n:
                write_points(session, self.id, self.index, self.buffer)
            values: dict[str, Any] = {"step": self.step, "updated_at": utcnow()}
            if self.total:
                values["progress"] = self.step / self.total
            session.execute(update(Experiment).where(Experiment.id == self.id).values(**values))
            row = session.get(Experiment, self.id)
            self.cancel = bool(row.cancel_requested)
        self.index += n
        self.buffer = {}
        self.last_flush = time.monotonic()
