"""One Settings object, read from ``SMD_*`` environment variables by the API, worker and Alembic."""
from __future__ import annotations

import ipaddress
import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SMD_", extra="ignore")

    host: str = Field(default="127.0.0.1", description="Address the API binds to.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port the API listens on.")
    api_workers: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, le=256,
                             description="Processes serving the API (`smd api`, `smd serve`), sharing its port; "
                                         "default: the machine's cores. They keep no state of their own: any of them "
                                         "answers any request the same.")
    state_dir: Path = Field(default=Path(".smd"), description="Where the embedded default keeps its database and broker.")
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default: SQLite file in state_dir.")
    broker_url: str | None = Field(default=None, description="Celery broker URL; default: filesystem broker in state_dir.")
    auth: Literal["on", "off"] = Field(default="on", description="API keys required (Authorization: Bearer). off: every "
                                                         "request acts as the admin user 'local'; allowed only "
                                                         "when host is a loopback address.")
    max_work: int = Field(default=20_000_000_000, ge=1, description="Per-user quota: largest job, in trials·steps·dim "
                                                            "(train: its equivalent); `smd users quota` overrides "
                                                            "it per user.")
    max_active_jobs: int = Field(default=200, ge=1, description="Per-user quota: queued + running jobs; `smd users quota` "
                                                       "overrides it per user.")
    max_study_points: int = Field(default=1000, ge=1, description="Largest study: children (points × seeds) "
                                                                  "of one POST /v1/studies.")
    max_body_bytes: int = Field(default=2**21, ge=1024, description="Largest request body, in bytes (a 413 beyond it): "
                                                                 "a 1000-point study with its points listed is well under 1 MB.")
    quota_retry_seconds: int = Field(default=60, ge=1, le=86400, description="Retry-After of a 429 when no better "
                                                                    "estimate exists (e.g. none of the user's "
                                                                    "jobs has progressed yet).")
    events_poll_seconds: float = Field(default=0.5, gt=0, le=60, description="How often an event stream "
                                                                     "(/v1/experiments/{id}/events) looks for changes.")
    events_keepalive_seconds: float = Field(default=15.0, gt=0, le=300, description="Idle event streams send a comment "
                                                                            "line this often (keeps proxies open).")
    data_dir: Path | None = Field(default=None, description="Datasets that are not bundled (train kind): "
                                                       "cifar10 is read from data_dir/cifar-10-batches-py.")
    flush_seconds: float = Field(default=2.0, gt=0, description="How often a worker writes progress and partial series "
                                                        "and reads the cancel flag.")
    checkpoint_seconds: float = Field(default=30.0, gt=0, description="How often a running job saves a checkpoint "
                                                             "to resume from after a lost worker.")
    max_attempts: int = Field(default=3, ge=1, le=100, description="Attempts of a job lost with their worker (lease "
                                                          "expired while the database answered) before the job "
                                                          "is failed; attempts interrupted by a database outage "
                                                          "or given back at shutdown do not count.")
    lease_seconds: float = Field(default=60.0, gt=0, description="A running job's lease; its worker renews it every "
                                                        "third of this. An expired lease means a lost worker, "
                                                        "unless the database was unreachable (see max_attempts).")
    db_retry_seconds: float = Field(default=30.0, ge=0, le=3600, description="How long a unit of work (one transaction) is "
                                                                   "retried, with backoff, while the database cannot "
                                                                   "be reached (connection refused, lost or cut), "
                                                                   "before the error is raised (store/retry.py).")
    db_request_retry_seconds: float = Field(default=2.0, ge=0, le=60, description="The same for the work of an API request: "
                                                                         "after this the API answers 503 with "
                                                                         "Retry-After instead of holding the client.")
    worker_db_wait_seconds: float = Field(default=600.0, ge=0, description="How long a worker whose job has ended waits for "
                                                                  "an unreachable database to write the outcome "
                                                                  "(at least SMD_LEASE_SECONDS). Running jobs keep "
                                                                  "computing through an outage of any length and "
                                                                  "write when the database is back; past this wait "
                                                                  "the attempt is given up and the job resumes from "
                                                                  "its checkpoint without the attempt counting.")
    sweep_seconds: float = Field(default=5.0, gt=0, description="How often the sweeper (in the API process) requeues "
                                                       "jobs with expired leases and re-sends lost queue messages.")
    sweeper: bool = Field(default=True, description="Run the sweeper in this API process.")
    task_time_limit: int = Field(default=7 * 86400, ge=60, description="Longest run of one attempt, in seconds "
                                                              "(soft limit; the hard limit is 60 s later).")
    visibility_timeout: int = Field(default=8 * 86400, ge=60, description="Redis broker: seconds before an unacknowledged "
                                                                 "message is redelivered; must exceed "
                                                                 "task_time_limit + 60 (checked at worker start).")
    soft_shutdown_seconds: float = Field(default=30.0, ge=0, description="Cold shutdown (SIGQUIT) of a worker: how long "
                                                                "running jobs may go on before they are cut off "
                                                                "(SIGTERM instead hands them back at once, "
                                                                "after a last checkpoint).")
    broker_poll_seconds: float = Field(default=0.1, gt=0, le=10, description="Filesystem broker (`smd serve`): how often "
                                       "an idle worker lists the broker's folder for a new job.")
    worker_queues: str = Field(default="cpu", pattern=r"^(cpu|gpu)(,(cpu|gpu))?$",
                               description="Queues `smd worker` consumes: cpu, gpu or gpu,cpu.")
    worker_concurrency: int = Field(default=1, ge=1, description="Worker processes started by `smd worker` "
                                                        "(on a gpu worker: one per GPU).")
    worker_torch_threads: int = Field(default=0, ge=0, le=1024, description="CPU threads of each worker process's "
                                      "torch; 0: OMP_NUM_THREADS where it is set, else the CPU cores over "
                                      "worker_concurrency (at least 1), so that the pool's processes do not each take "
                                      "every core.")
    worker_gpus: str = Field(default="", pattern=r"^(\d+(,\d+)*)?$",
                             description="GPU indices a gpu worker spreads its processes over (e.g. 0,1); "
                                         "default 0..worker_concurrency-1.")
    worker_preload: bool = Field(default=True, description="Import the simulators (torch) in `smd worker`'s main "
                                 "process before it forks its job processes, so that none pays seconds of imports at "
                                 "its first job; off: each job process imports them then.")
    worker_name: str | None = Field(default=None, description="Name of this worker in leases (default: host name).")
    fuse_max: int = Field(default=64, ge=1, le=4096, description="Most children of a study a worker claims and runs "
                                                               "as one batched run when they differ only in rates, "
                                                               "scales and seeds (results are identical to separate "
                                                               "runs); 1 runs every child alone.")
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING, ERROR or CRITICAL (any case).")

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in LOG_LEVELS:
            raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
        return value.upper()

    @property
    def loopback(self) -> bool:
        """Whether the API binds only to this machine."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def db_url(self) -> str:
        return self.database_url or _embedded_url(self.state_dir, os.getcwd())

    @property
    def broker(self) -> str:
        return self.broker_url or "filesystem://"

    @property
    def queues(self) -> list[str]:
        return self.worker_queues.split(",")

    @property
    def broker_folder(self) -> Path:
        """Message folder of the filesystem broker (used only when the broker is ``filesystem://``)."""
        return (self.state_dir / "broker").resolve()


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"   # of every smd process's log lines


@lru_cache(maxsize=64)
def _embedded_url(state_dir: Path, cwd: str) -> str:
    """The embedded database's URL (an absolute path: resolving it on every request cost a few per cent of a
    dashboard poll's CPU)."""
    return f"sqlite:///{(Path(cwd) / state_dir / 'smd.sqlite3').resolve()}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
