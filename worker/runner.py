"""Running jobs: claim one under a lease, run the engine (resuming from its checkpoint), and write
progress, partial series, checkpoints and the outcome — each write a store function conditioned on
the lease (raising LeaseLost), each its own transaction: no session is held here.

A database outage is not the job's fault (store/retry.py has the policy). While the database cannot
be reached the engine keeps computing: progress and points stay buffered and are written, still
under the lease, when it answers again; a checkpoint that cannot be stored is skipped; the lease
keeper retries about every second. An ended job's last points and outcome wait for the database
(up to ``max(SMD_WORKER_DB_WAIT_SECONDS, SMD_LEASE_SECONDS)``). Only past that wait is the attempt
given up ("interrupted": nothing is written, its lease lapses during the outage and the sweeper
ends it ``interrupted``, which does not count toward SMD_MAX_ATTEMPTS). A job is never failed
because of the database. A lease truly lost (another worker holds it) still stops the run
(``LeaseLost``).

How long each store call may wait for the database is set here with ``store.retry.patience``: 0
(one try) for the writes that can be buffered or redone later (progress and points, checkpoints,
lease renewals); the ended job's wait for its start, last points and outcome (:func:`_patiently`);
SMD_DB_RETRY_SECONDS for the claim.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc

import smdengine
from smdengine import json_safe
from store import jobs, retry, workers
from store.models import QUEUES, Status
from store.settings import Settings
from worker import presence, provenance
from worker.provenance import attempt_provenance

log = logging.getLogger(__name__)
T = TypeVar("T")

# Set when this worker process is asked to stop: the running job is given back to the queue at its
# next progress event (it resumes elsewhere from its last checkpoint) instead of being cut off.
shutting_down = threading.Event()
running = threading.Event()   # a job is being run in this process


class _Released(Exception):
    pass


class _Interrupted(Exception):
    """The database stayed unreachable longer than this worker waits: give the attempt up."""


def _wait_seconds(settings: Settings) -> float:
    """How long an ended job's last writes wait for the database: at least a lease, so that its
    lease has lapsed within the outage by the time the attempt is given up."""
    return max(settings.worker_db_wait_seconds, settings.lease_seconds)


def _patiently(seconds: float, store_fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``store_fn(*args, **kwargs)`` (a store unit of work), retried for ``seconds`` while the
    database is unreachable; :class:`_Interrupted` if it stays so."""
    try:
        with retry.patience(seconds):
            return store_fn(*args, **kwargs)
    except Exception as exc:
        if retry.is_transient(exc):
            raise _Interrupted(str(exc)) from exc
        raise


def execute_next(settings: Settings, queues: list[str], worker: str = "local",
                 experiment_id: str | None = None) -> str:
    """Claim the oldest queued job of ``queues`` (or that job) and run it; returns its final
    status, "idle" when there was nothing to claim, "lost" when the lease was lost meanwhile,
    "interrupted" when a database outage outlasted the worker's wait, "unavailable" when the
    database could not be reached to claim."""
    provenance.warm()   # once per process: not between a claim and its attempt's start
    try:
        with retry.patience(settings.db_retry_seconds):
            claim = jobs.claim_next(settings.db_url, queues, worker, settings.lease_seconds, experiment_id)
    except Exception as exc:
        if not retry.is_transient(exc):
            raise
        log.warning("could not claim a job (database unreachable); it stays queued and the sweeper rings again")
        return "unavailable"
    if claim is None:
        return "idle"
    me = presence.current()
    try:
        # a study's child: _claim_fusable marks this process busy with its study before sizing the batch (busy
        # without the study would, for a moment, make a claimer of a sibling count it out of the study's share)
        group = _claim_fusable(settings, claim, worker) if experiment_id is None else []
        if me is not None and not me.busy:
            me.mark_busy(True)
        if group:
            return run_fused(settings, [claim, *group])[0]
        return run_claimed(settings, claim)
    finally:
        if me is not None:
            me.mark_busy(False)


def execute(settings: Settings, experiment_id: str, worker: str = "local") -> str:
    """Run one given job if it is queued ("skipped" if not)."""
    status = execute_next(settings, list(QUEUES), worker, experiment_id)
    return "skipped" if status == "idle" else status


def run_claimed(settings: Settings, claim: jobs.Claim) -> str:
    url, experiment_id = settings.db_url, claim.experiment_id
    log.info("experiment %s: attempt %d by %s", experiment_id, claim.attempt, claim.owner)
    lease = _LeaseKeeper(url, claim, settings.lease_seconds)
    lease.start()
    writer = _SeriesWriter(url, claim, settings.flush_seconds, lease, _wait_seconds(settings))
    running.set()
    try:
        return _run(settings, claim, writer)
    except jobs.LeaseLost:
        log.warning("experiment %s: lease lost (another worker owns it now); stopped", experiment_id)
        return "lost"
    except _Released:
        try:
            _patiently(settings.db_retry_seconds, jobs.release, url, claim)
        except _Interrupted:
            log.warning("experiment %s: could not give it back (database unreachable); its lease will lapse "
                        "and it resumes elsewhere", experiment_id)
            return "released"
        log.warning("experiment %s: given back to the queue (worker shutting down)", experiment_id)
        return "released"
    except _Interrupted as exc:
        log.warning("experiment %s: attempt %d given up: the database stayed unreachable for %g s (%s); the job "
                    "resumes from its last checkpoint in a new attempt, and this one does not count",
                    experiment_id, claim.attempt, writer.wait, _short(exc))
        _give_back_interrupted(settings, [claim])
        return "interrupted"
    finally:
        running.clear()
        lease.stop()


def _run(settings: Settings, claim: jobs.Claim, writer: _SeriesWriter) -> str:
    url, wait = settings.db_url, writer.wait
    stored = _patiently(wait, jobs.load_run, url, claim)
    try:
        spec = smdengine.parse_spec(stored.spec)
        resume = _usable_checkpoint(stored.checkpoint, claim)
        writer.start(resume, theory=json_safe(smdengine.predict(spec)), provenance=attempt_provenance(spec))
        hooks = smdengine.CheckpointHooks(save=writer.save_checkpoint, interval=settings.checkpoint_seconds,
                                          resume=resume, final=stored.keep_checkpoint)
        writer.hooks = hooks
        result = smdengine.run(spec, on_progress=writer.on_progress, should_stop=writer.should_stop,
                               progress_interval=min(0.5, settings.flush_seconds), checkpoint=hooks,
                               data_dir=str(settings.data_dir) if settings.data_dir else None)
        writer.flush(wait=True)
    except (jobs.LeaseLost, _Released, _Interrupted):
        raise
    except smdengine.Cancelled:
        _flush_quietly(writer)
        return _finish(url, claim, Status.cancelled, wait)
    except smdengine.IncompatibleCheckpoint as exc:  # e.g. the job moved from a GPU to a CPU worker
        log.warning("experiment %s: %s; starting from scratch", claim.experiment_id, exc)
        _patiently(wait, jobs.forget_checkpoint, url, claim)
        return _run(settings, claim, writer)
    except Exception as exc:  # the job failed: record why, never retry a deterministic error
        if retry.is_transient(exc):  # the database, not the job: never a reason to fail it
            raise _Interrupted(str(exc)) from exc
        log.exception("experiment %s failed", claim.experiment_id)
        _flush_quietly(writer)
        return _finish(url, claim, Status.failed, wait, error=error_text(exc))
    doc = result.to_document()
    return _finish(url, claim, Status.succeeded, wait, summary=doc["summary"], theory=doc["theory"],
                   distributions=doc["distributions"])


def _give_back_interrupted(settings: Settings, claims: list[jobs.Claim]) -> None:
    """Requeue attempts given up for an outage at once, their attempts ``interrupted`` (uncounted), where
    the database takes that small write (a full disk often does); where it cannot, each lease lapses and
    the sweeper requeues the job, as interrupted if it saw the outage."""
    for claim in claims:
        try:
            with retry.patience(min(1.0, settings.db_retry_seconds)):
                jobs.interrupt(settings.db_url, claim)
        except Exception as exc:
            if not retry.is_transient(exc):
                raise


def _short(exc: BaseException) -> str:
    """One line of an error (a database error's text carries its SQL and parameters: not for a log line)."""
    cause = exc.__cause__ if isinstance(exc, _Interrupted) and exc.__cause__ is not None else exc
    return error_text(cause).splitlines()[0][:300]


def error_text(exc: BaseException) -> str:
    """A failed job's error for its owner: the exception's message; for a database error only the
    driver's one line (SQLAlchemy's text carries the SQL and its parameters, other users' data among
    them, and is no help to the owner of a job)."""
    if isinstance(exc, sa_exc.StatementError):
        orig = exc.orig if exc.orig is not None else exc
        lines = str(orig).strip().splitlines()
        return f"database error: {type(orig).__name__}" + (f": {lines[0][:300]}" if lines else "")
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _claim_fusable(settings: Settings, claim: jobs.Claim, worker: str) -> list[jobs.Claim]:
    """Claim siblings of a study's child that can run in one batch with it: equal ``smdengine.fuse_key``
    and the same checkpoint step (none, or the step a fused batch checkpointed together before it was
    lost: resumed children fuse again). The batch is this process's share of the study: ⌈the study's
    open children ÷ the processes sharing them⌉ (this one, the idle ones and those already running its
    children: store.workers.sharing), at most SMD_FUSE_MAX, so that two idle workers split a study
    instead of one taking it all. Best effort: a database error claims none."""
    if settings.fuse_max < 2:
        return []
    url = settings.db_url
    try:
        with retry.patience(0):
            fusable = jobs.fusion_candidates(url, claim, 4 * settings.fuse_max)
            if not fusable.candidates:
                return []
            key = smdengine.fuse_key(jobs.load_run(url, claim).spec)
            if key is None:
                return []
            me = presence.current()
            if me is not None:
                me.mark_busy(True, fusable.study_id)
            shares = workers.sharing(url, fusable.queue, me.id if me else None, presence.live_seconds(settings),
                                     fusable.study_id)
            size = min(settings.fuse_max, -(-fusable.open // shares))
            group: list[jobs.Claim] = []
            for candidate_id, spec in fusable.candidates:
                if len(group) + 1 >= size:
                    break
                if smdengine.fuse_key(spec) != key:
                    continue
                sibling = jobs.claim_next(url, [], worker, settings.lease_seconds, candidate_id)
                if sibling is not None:
                    group.append(sibling)
            if group:
                log.info("study %s: %d open children shared by %d worker process(es): a batch of %d",
                         fusable.study_id, fusable.open, shares, len(group) + 1)
            return group
    except Exception as exc:
        if not retry.is_transient(exc):
            raise
        return []   # the siblings stay queued; their own doorbells claim them


def run_fused(settings: Settings, claims: list[jobs.Claim]) -> list[str]:
    """Run claimed jobs of equal ``smdengine.fuse_key`` as one batched run (``smdengine.run_fused``):
    each with its own lease, writer, checkpoints and outcome, exactly as :func:`run_claimed` would
    write them alone. A member cancelled, or whose lease is lost, leaves the batch and the others go
    on. If the batch fails, each member is run again alone (resuming from its checkpoint), so that a
    member's failure is its own. Returns each member's final status."""
    url = settings.db_url
    log.info("experiments %s: %d runs fused into one batch", ", ".join(c.experiment_id for c in claims), len(claims))
    leases = [_LeaseKeeper(url, c, settings.lease_seconds) for c in claims]
    writers = [_SeriesWriter(url, c, settings.flush_seconds, lease, _wait_seconds(settings))
               for c, lease in zip(claims, leases, strict=True)]
    for lease in leases:
        lease.start()
    running.set()
    ended: list[str | None] = [None] * len(claims)
    try:
        return _run_fused(settings, claims, writers, ended)
    except _Released:
        for c, claim in enumerate(claims):
            if ended[c] is None:
                try:
                    _patiently(settings.db_retry_seconds, jobs.release, url, claim)
                except (_Interrupted, jobs.LeaseLost):
                    pass
        log.warning("experiments %s: given back to the queue (worker shutting down)",
                    ", ".join(c.experiment_id for c in claims))
        return [e or "released" for e in ended]
    except _Interrupted as exc:
        log.warning("fused batch of %d: given up, the database stayed unreachable (%s); each job resumes from its "
                    "last checkpoint in a new attempt, and this one does not count", len(claims), _short(exc))
        _give_back_interrupted(settings, [c for c, e in zip(claims, ended, strict=True) if e is None])
        return [e or "interrupted" for e in ended]
    finally:
        running.clear()
        for lease in leases:
            lease.stop()


def _run_fused(settings: Settings, claims: list[jobs.Claim], writers: list[_SeriesWriter],
               ended: list[str | None]) -> list[str]:
    url, wait = settings.db_url, writers[0].wait
    stored = [_patiently(wait, jobs.load_run, url, c) for c in claims]
    specs = [smdengine.parse_spec(s.spec) for s in stored]
    # siblings were chosen with checkpoints at one step (store.jobs.fusion_candidates); one that cannot be
    # used here (another device's) starts from scratch, and a batch resumes only from one step: else alone
    resumes = [_usable_checkpoint(s.checkpoint, c) for s, c in zip(stored, claims, strict=True)]
    if len({None if r is None else r.step for r in resumes}) > 1:
        log.warning("fused batch of %d: its checkpoints are not at one step; each member runs alone", len(claims))
        return _each_alone(settings, claims, writers, ended)
    hooks = []
    together = _BatchCheckpoints(url, writers, ended)
    for c, (writer, spec) in enumerate(zip(writers, specs, strict=True)):
        writer.start(resumes[c], theory=json_safe(smdengine.predict(spec)), provenance=attempt_provenance(spec))
        writer.hooks = smdengine.CheckpointHooks(save=_member_call(c, writer, ended, together.saver(c)),
                                                 interval=settings.checkpoint_seconds, resume=resumes[c],
                                                 final=stored[c].keep_checkpoint)
        hooks.append(writer.hooks)

    def stop_check(c: int) -> Callable[[], bool]:
        writer = writers[c]

        def should_stop() -> bool:
            if ended[c] is not None:
                return True
            try:
                if not writer.should_stop():
                    return False
            except jobs.LeaseLost:
                log.warning("experiment %s: lease lost (another worker owns it now); it leaves the batch",
                            claims[c].experiment_id)
                ended[c] = "lost"
                return True
            _flush_quietly(writer)
            ended[c] = _finish(url, claims[c], Status.cancelled, wait)
            return True
        return should_stop

    try:
        results = smdengine.run_fused(specs, on_progress=[_member_call(c, w, ended, w.on_progress) for c, w in enumerate(writers)],
                                      should_stop=[stop_check(c) for c in range(len(claims))],
                                      progress_interval=min(0.5, settings.flush_seconds), checkpoints=hooks,
                                      data_dir=str(settings.data_dir) if settings.data_dir else None)
    except smdengine.Cancelled:
        return [e or Status.cancelled for e in ended]
    except (jobs.LeaseLost, _Released, _Interrupted):
        raise
    except Exception as exc:
        if retry.is_transient(exc):
            raise _Interrupted(str(exc)) from exc
        log.exception("fused batch of %d failed; running each member alone", len(claims))
        return _each_alone(settings, claims, writers, ended)
    for c, (claim, writer, result) in enumerate(zip(claims, writers, results, strict=True)):
        if ended[c] is not None or result is None:
            continue
        try:
            writer.flush(wait=True)
            doc = result.to_document()
            ended[c] = _finish(url, claim, Status.succeeded, wait, summary=doc["summary"], theory=doc["theory"],
                               distributions=doc["distributions"])
        except jobs.LeaseLost:
            ended[c] = "lost"
    return [e or "lost" for e in ended]


def _each_alone(settings: Settings, claims: list[jobs.Claim], writers: list[_SeriesWriter],
                ended: list[str | None]) -> list[str]:
    """Run every member that has not ended alone, one after another (each resuming from its own checkpoint)."""
    for c, (claim, writer) in enumerate(zip(claims, writers, strict=True)):
        if ended[c] is None:
            try:
                ended[c] = _run(settings, claim, writer)
            except jobs.LeaseLost:
                ended[c] = "lost"
    return [e or "lost" for e in ended]


class _BatchCheckpoints:
    """The checkpoints of a fused batch, stored together. The engine hands every member's checkpoint at
    one step, member after member; each member's series is flushed as its checkpoint arrives, and when
    every member still in the batch has handed one at that step, all are written in one transaction
    (``jobs.save_checkpoints``). So a batch killed while checkpointing leaves its members at one step,
    and they are claimed again as one batch. A member that cannot flush (the database is unreachable)
    leaves that step unwritten for all: the next checkpoint will do."""

    def __init__(self, url: str, writers: list[_SeriesWriter], ended: list[str | None]):
        self.url, self.writers, self.ended = url, writers, ended
        self.step: int | None = None
        self.staged: dict[int, smdengine.Checkpoint] = {}

    def saver(self, c: int) -> Callable[[smdengine.Checkpoint], None]:
        def save(checkpoint: smdengine.Checkpoint) -> None:
            if checkpoint.step != self.step:
                self.step, self.staged = checkpoint.step, {}
            if not self.writers[c].flush():   # the stored series must reach the checkpoint's n_points
                return
            self.staged[c] = checkpoint
            self._write_when_complete()
        return save

    def _write_when_complete(self) -> None:
        while True:
            members = [c for c, e in enumerate(self.ended) if e is None]
            if any(c not in self.staged for c in members):
                return
            saves = [(self.writers[c].claim, self.staged[c].step, self.staged[c].n_points, self.staged[c].to_bytes())
                     for c in members]
            try:
                with retry.patience(0):
                    jobs.save_checkpoints(self.url, saves)
            except jobs.LeaseLost as exc:   # that member leaves the batch; the others' checkpoints are written
                c = next((c for c in members if self.writers[c].claim.experiment_id == exc.args[0]), None)
                if c is None:
                    raise
                log.warning("experiment %s: lease lost (another worker owns it now); it leaves the batch",
                            exc.args[0])
                self.ended[c] = "lost"
                continue
            except Exception as exc:
                if not retry.is_transient(exc):
                    raise
                for c in members:
                    self.writers[c]._unreachable()
            self.staged = {}
            return


def _member_call(index: int, writer: _SeriesWriter, ended: list[str | None],
                 fn: Callable[[Any], None]) -> Callable[[Any], None]:
    """``fn`` of member ``index`` of a fused batch: nothing once the member has ended, and a lost lease
    ends that member only."""

    def call(arg: Any) -> None:
        if ended[index] is not None:
            return
        try:
            fn(arg)
        except jobs.LeaseLost:
            log.warning("experiment %s: lease lost (another worker owns it now); it leaves the batch",
                        writer.claim.experiment_id)
            ended[index] = "lost"
    return call


def _usable_checkpoint(saved: tuple[bytes, int] | None, claim: jobs.Claim) -> smdengine.Checkpoint | None:
    if saved is None:
        return None
    try:
        checkpoint = smdengine.Checkpoint.from_bytes(saved[0])
    except smdengine.IncompatibleCheckpoint as exc:
        log.warning("experiment %s: %s; starting from scratch", claim.experiment_id, exc)
        return None
    log.info("experiment %s: resuming from step %d", claim.experiment_id, checkpoint.step)
    return checkpoint


def _flush_quietly(writer: _SeriesWriter) -> None:
    try:
        writer.flush(wait=True)
    except (jobs.LeaseLost, _Interrupted):
        raise
    except Exception:  # the job's end must still be recorded
        log.exception("could not write the last points of experiment %s", writer.claim.experiment_id)


def _finish(url: str, claim: jobs.Claim, status: str, wait: float, **values: Any) -> str:
    """Write the outcome, waiting up to ``wait`` s for an unreachable database. The store re-runs
    the whole unit after a transient error (store.retry), and a re-run that finds the lease gone
    may follow a first try whose COMMIT went through unseen (the connection broke after it was
    sent): if this attempt's row already has this outcome, it is ours (only this claim writes it)."""
    try:
        _patiently(wait, jobs.finish_claimed, url, claim, status, **values)
    except jobs.LeaseLost:
        if _recorded_outcome(url, claim, wait) != status:
            raise
        log.info("experiment %s: outcome %s was already written (its commit's answer was lost)",
                 claim.experiment_id, status)
    log.info("experiment %s %s", claim.experiment_id, status)
    return status


def _recorded_outcome(url: str, claim: jobs.Claim, wait: float) -> str | None:
    attempts = _patiently(wait, jobs.attempts, url, claim.experiment_id)
    return next((a.outcome for a in attempts if a.number == claim.attempt), None)


class _LeaseKeeper:
    """Renews the lease every third of its length from a thread, so that a long engine step or a
    slow write never lets it lapse while the job is alive. While the database cannot be reached it
    tries about every second (one try each, no waiting in the retry policy), so that it renews as
    soon as the database is back, before the sweeper would expire the lease (worker/sweeper.py)."""

    def __init__(self, url: str, claim: jobs.Claim, lease_seconds: float):
        self.url, self.claim, self.lease_seconds = url, claim, lease_seconds
        self.lost = False
        self.failing_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{claim.experiment_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        every, retry_every = self.lease_seconds / 3, min(1.0, self.lease_seconds / 6)
        wait = every
        while not self._stop.wait(wait):
            try:
                with retry.patience(0):
                    jobs.renew(self.url, self.claim, self.lease_seconds)
            except jobs.LeaseLost:
                self.lost = True
                return
            except Exception as exc:
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                    if retry.is_transient(exc):
                        log.warning("experiment %s: cannot renew the lease (database unreachable); retrying every "
                                    "%g s, the job goes on", self.claim.experiment_id, retry_every)
                    else:
                        log.exception("could not renew the lease of %s", self.claim.experiment_id)
                wait = retry_every
                continue
            if self.failing_since is not None:
                log.warning("experiment %s: lease renewed after %.1f s without the database",
                            self.claim.experiment_id, time.monotonic() - self.failing_since)
                self.failing_since = None
            wait = every


class _SeriesWriter:
    """Buffers engine progress and writes it to SQL at most every ``flush_seconds``, reading the
    cancel flag at each write; saves checkpoints after writing every point they hold. While the
    database cannot be reached, points stay buffered (the next flush writes them all, from the
    same index: idempotent) and checkpoints are skipped."""

    def __init__(self, url: str, claim: jobs.Claim, flush_seconds: float, lease: _LeaseKeeper, wait: float):
        self.url, self.claim, self.flush_seconds, self.lease = url, claim, flush_seconds, lease
        self.wait = wait                  # how long the last writes of an ended job wait for the database
        self.index = 0                    # points stored so far
        self.buffer: dict[str, list] = {}
        self.step = 0
        self.total = 0
        self.cancel = False
        self.last_flush = time.monotonic()
        self.hooks: smdengine.CheckpointHooks | None = None
        self.release_requested = False
        self.unreachable_since: float | None = None

    def start(self, resume: smdengine.Checkpoint | None, theory: dict[str, Any],
              provenance: dict[str, Any] | None = None) -> None:
        """The stored series becomes the checkpoint's points (none without one), and the theory is
        stored, in one transaction that waits for the database; this attempt writes the rest."""
        self.index = resume.n_points if resume is not None else 0
        self.step = resume.step if resume is not None else 0
        self.buffer = {}   # a run starting again (a fused batch's member rerun alone) drops what it had
        _patiently(self.wait, jobs.begin_attempt, self.url, self.claim, theory=theory,
                   resume_points=resume.series if resume is not None else None,
                   resume_step=resume.step if resume is not None else None, provenance=provenance)

    def on_progress(self, progress: smdengine.Progress) -> None:
        for key, values in progress.points.items():
            self.buffer.setdefault(key, []).extend(values)
        self.step, self.total = progress.step, progress.total_steps
        if time.monotonic() - self.last_flush >= self.flush_seconds:
            self.flush()

    def should_stop(self) -> bool:
        if self.lease.lost:
            raise jobs.LeaseLost(self.claim.experiment_id)
        if shutting_down.is_set():
            if self.release_requested:  # the recorder took the last checkpoint after the previous poll
                raise _Released()
            self.release_requested = True
            if self.hooks is not None:
                self.hooks.interval = 0.0
        return self.cancel

    def save_checkpoint(self, checkpoint: smdengine.Checkpoint) -> None:
        if not self.flush():  # the stored series must reach the checkpoint's n_points
            return            # the database is unreachable: the next checkpoint will do
        data = checkpoint.to_bytes()
        try:
            with retry.patience(0):
                jobs.save_checkpoint(self.url, self.claim, checkpoint.step, checkpoint.n_points, data)
        except Exception as exc:
            if not retry.is_transient(exc):
                raise
            self._unreachable()

    def flush(self, *, wait: bool = False) -> bool:
        """Write the buffered progress and points under the lease, in one transaction
        (``jobs.record_progress``: progress first, so a lost lease fails before any point is
        written). While the database is unreachable they stay buffered and False is returned (one
        try, the engine goes on); with ``wait`` (the job has ended) it retries for ``self.wait`` s,
        then raises _Interrupted."""
        n = len(self.buffer.get("step", []))
        points = self.buffer if n else None
        try:
            if wait:
                self.cancel = _patiently(self.wait, jobs.record_progress, self.url, self.claim, self.step,
                                         self.total, points=points, start_index=self.index)
            else:
                with retry.patience(0):
                    self.cancel = jobs.record_progress(self.url, self.claim, self.step, self.total,
                                                       points=points, start_index=self.index)
        except Exception as exc:
            if wait or not retry.is_transient(exc):
                raise
            self._unreachable()
            self.last_flush = time.monotonic()
            return False
        if self.unreachable_since is not None:
            log.warning("experiment %s: database reachable again after %.1f s; buffered points written",
                        self.claim.experiment_id, time.monotonic() - self.unreachable_since)
            self.unreachable_since = None
        self.index += n
        self.buffer = {}
        self.last_flush = time.monotonic()
        return True

    def _unreachable(self) -> None:
        if self.unreachable_since is None:
            self.unreachable_since = time.monotonic()
            log.warning("experiment %s: database unreachable; the job goes on, its progress and points are kept "
                        "in memory until it answers", self.claim.experiment_id)
