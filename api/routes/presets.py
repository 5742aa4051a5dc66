"""The presets resource: the seeds' figures as named, documented studies with checks
(`smdengine.PRESETS`). List and show them; run one, which submits its study exactly as POST
/v1/studies does (`api.routes.studies.submit`) with the study's ``preset`` and ``preset_size`` set.
The study's checks, and its figure, are then read from the study (/v1/studies/{id},
/v1/studies/{id}/plots/figure.png)."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Response
from pydantic import ValidationError

import smdengine
from api.deps import CurrentUserDep, DbDep, SettingsDep
from api.responses import UNAUTHORIZED, quota_response
from api.routes.studies import _body_errors, stored_spec, submit
from api.schemas import (
    ErrorOut,
    PresetDetailOut,
    PresetOut,
    PresetRun,
    StudyOut,
    StudySubmission,
    ValidationErrorOut,
)
from smdengine import StudyError
from smdrender import presets
from store import queue_stats

router = APIRouter(prefix="/v1/presets", tags=["presets"])

PRESET_ID = Path(max_length=64, description="A preset id (GET /v1/presets lists them).")
NOT_FOUND = {404: {"model": ErrorOut, "description": "No preset with that id; the detail lists the ids."}}


def _preset(preset_id: str) -> Any:
    preset = presets.preset_or_none(preset_id)
    if preset is None:
        raise HTTPException(status_code=404, detail=(
            f"preset {preset_id!r} not found; presets: {', '.join(sorted(smdengine.PRESETS))}"))
    return preset


@router.get("", response_model=list[PresetOut], operation_id="listPresets", responses=UNAUTHORIZED)
def list_presets(user: CurrentUserDep, db: DbDep):
    """Every preset: id, title, seed and figure, what it shows, its kinds, tier, the checks it makes,
    its figure's panels, and for each size the number of runs, the estimated work, whether it needs a
    GPU and its estimated run time on this service's workers."""
    rates = _Rates(db)
    return [_timed(presets.catalog_entry(preset), rates) for preset in smdengine.PRESETS.values()]


@router.get("/{preset_id}", response_model=PresetDetailOut, operation_id="getPreset",
            responses={**UNAUTHORIZED, **NOT_FOUND})
def get_preset(user: CurrentUserDep, db: DbDep, preset_id: Annotated[str, PRESET_ID]):
    """One preset, as listed, plus the study spec each size expands to."""
    return _timed(presets.catalog_entry(_preset(preset_id), details=True), _Rates(db))


# A run's time is a fixed part (start-up, theory, summaries) and a part proportional to its work: the work per
# second of runs far smaller than a preset's runs is mostly the fixed part's, and put a 90 s preset at 6762 s.
# Only runs of at least this fraction of the preset's work per run count.
COMPARABLE_WORK = 0.1


def preset_as_stored(preset_id: str, size: str) -> dict[str, Any]:
    """The spec a study of the preset at ``size`` is stored with when run as it is (no seeds or overrides). Only
    such studies time the preset."""
    return stored_spec(StudySubmission.model_validate(smdengine.preset_study(preset_id, size)))


class _Rates:
    """Work per second of busy time of a queue's workers over their recent succeeded runs of a kind, and model
    for a kind with models, of a comparable size (store.queue_stats.timed_runs; None without such history): the
    runs read once per request, each spec's work computed once."""

    def __init__(self, db: str):
        self.db: str = db
        self.runs: dict[tuple[str, str, bool], list[tuple[int, queue_stats.Run]]] = {}
        self.own: dict[tuple[str, str, str], float | None] = {}   # (preset, size, queue): its own studies' rate

    def preset(self, preset_id: str, size: str, queue: str) -> float | None:
        """Work per second of busy time over the preset's own earlier studies of this size
        (store.queue_stats.preset_runs): fused as its next study will be; None before one succeeded."""
        if (preset_id, size, queue) not in self.own:
            self.own[preset_id, size, queue] = _rate(
                [(work, run) for run in queue_stats.preset_runs(self.db, preset_id, size, queue,
                                                                spec=preset_as_stored(preset_id, size))
                 if (work := _work(run[0])) is not None])
        return self.own[preset_id, size, queue]

    def __call__(self, queue: str, key: str, work_per_run: int, *, in_studies: bool = False) -> float | None:
        """``key``: smdengine.plot_key of the runs, ``<kind>`` or ``<kind>/<model>``; the newest
        DURATION_HISTORY runs of at least COMPARABLE_WORK·``work_per_run`` count; ``in_studies``: studies'
        children only (fused where they could be)."""
        if (queue, key, in_studies) not in self.runs:
            kind, _, model = key.partition("/")
            self.runs[queue, key, in_studies] = [
                (work, run) for run in queue_stats.timed_runs(self.db, queue, kind, model or None, in_studies=in_studies)
                if (work := _work(run[0])) is not None]
        return _rate(_whole_batches([(work, run) for work, run in self.runs[queue, key, in_studies]
                                     if work >= COMPARABLE_WORK * work_per_run], queue_stats.DURATION_HISTORY))


def _whole_batches(runs: list[tuple[int, queue_stats.Run]], n: int) -> list[tuple[int, queue_stats.Run]]:
    """The first ``n`` runs (newest first), and after them those of the same worker that overlap them in time:
    a fused batch cut at the n-th run kept the whole batch's busy time for part of its work (a 64-run batch
    cut at 50 put the rate at 0.78 of its own)."""
    kept = runs[:n]
    earliest: dict[str | None, datetime] = {}
    for _, (_, worker, started, _) in kept:
        earliest[worker] = min(started, earliest.get(worker, started))
    for work, run in runs[n:]:
        _, worker, _, finished = run
        if worker not in earliest or finished <= earliest[worker]:
            break
        kept.append((work, run))
        earliest[worker] = min(run[2], earliest[worker])
    return kept


def _rate(runs: list[tuple[int, queue_stats.Run]]) -> float | None:
    """Work per second of the runs' workers' busy time (store.queue_stats.busy_time); None without either."""
    seconds = queue_stats.busy_time([run for _, run in runs])
    work = sum(w for w, _ in runs)
    return work / seconds if seconds > 0 and work > 0 else None


def _work(spec: dict[str, Any]) -> int | None:
    try:
        return smdengine.parse_spec(spec).work
    except (ValidationError, ValueError):   # a spec this engine no longer reads: left out
        return None


def _timed(entry: dict[str, Any], rates: _Rates) -> dict[str, Any]:
    """Each size's ``estimated_seconds``: its work over the rate of the queue it runs on, on one worker, and
    ``estimated_from``, the runs that rate is from: the preset's own earlier studies of that size, else
    studies' children like its base (same kind and model, of a comparable size; fused as the worker fused
    them, as it will fuse the preset's), else any runs like its base (single runs are slower per unit of work
    than a fused sweep: a preset run in 25 s was put at 33 min from them); None without such history."""
    for name, size in entry["sizes"].items():
        base = size["spec"]["base"] if "spec" in size else smdengine.preset_study(entry["id"], name)["base"]
        queue = "gpu" if size["gpu"] else "cpu"
        found = _rate_of(rates, entry["id"], name, queue, smdengine.plot_key(base["kind"], base),
                         size["work"] // max(1, size["runs"]))
        size["estimated_seconds"] = size["work"] / found[1] if found else None
        size["estimated_from"] = found[0] if found else None
    return entry


def _rate_of(rates: _Rates, preset_id: str, size: str, queue: str, key: str,
             work_per_run: int) -> tuple[str, float] | None:
    """(estimated_from, work per second) from the first of the three sources that has history (_timed)."""
    if rate := rates.preset(preset_id, size, queue):
        return "preset", rate
    if rate := rates(queue, key, work_per_run, in_studies=True):
        return "studies", rate
    if rate := rates(queue, key, work_per_run):
        return "runs", rate
    return None


def _override_loc(loc: tuple | list, overrides: dict[str, Any] | None) -> list[Any]:
    """Where a validation error of the built study lies, in the request: ``["overrides", path]`` for the
    override it comes from, else ``["overrides"]`` for an error in the study's base (the preset's own base is
    valid: its overrides made it invalid), else the study's own location. ``loc`` is the error's location as
    :func:`smdengine.error_location` gives it (a check across fields at the field its message names).

    The error's location reads the path's parts in order with the union tags between them (``base.sde.params.
    norm_map.lr`` for ``params.lr``), or goes on inside the override's value (``...params.lr_schedule.0.lr_factor``
    for ``params.lr_schedule``: the longest such path)."""
    parts = [str(part) for part in loc]
    inside: list[str] = []
    for path in overrides or {}:
        steps = path.split(".")
        if _reads_in_order(parts, steps, to_the_end=True):
            return ["overrides", path]
        if _reads_in_order(parts, steps, to_the_end=False):
            inside.append(path)
    if inside:
        return ["overrides", max(inside, key=lambda path: path.count("."))]
    return ["overrides"] if parts[:1] == ["base"] else list(loc)


def _reads_in_order(parts: list[str], steps: list[str], *, to_the_end: bool) -> bool:
    """``steps`` are elements of ``parts`` in order (skipping tags between them), the last of them ``parts``' last
    element when ``to_the_end``."""
    if not steps:
        return False
    if to_the_end:
        if steps[-1] != parts[-1]:
            return False
        parts, steps = parts[:-1], steps[:-1]
    rest = iter(parts)
    return all(step in rest for step in steps)


def _unprocessable(loc: list[Any], msg: str, kind: str = "value_error") -> HTTPException:
    return HTTPException(status_code=422, detail=[{"loc": ["body", *loc], "msg": msg, "type": kind}])


@router.post("/{preset_id}/run", status_code=202, response_model=StudyOut, operation_id="runPreset",
             responses={400: {"model": ErrorOut, "description": "The body could not be read (not UTF-8 JSON)."},
                        **UNAUTHORIZED, **NOT_FOUND,
                        403: {"model": ErrorOut, "description": "priority high is for admins only."},
                        422: {"description": "An unknown size, seeds its checks cannot use (too few, or "
                                             "repeated), or overrides that make an invalid study: each error "
                                             "names where (body.size, body.seeds, body.overrides.<path>, or a "
                                             "point with its index and axis values, the field and the reason).",
                              "model": ValidationErrorOut},
                        **quota_response("Over a quota, for the study as a whole (as POST "
                                         "/v1/studies); Retry-After says when to retry (none when no wait helps).")},
             openapi_extra={"responses": {"202": {"links": {"GetStudy": {
                 "operationId": "getStudy", "parameters": {"study_id": "$response.body#/id"}}}}}})
def run_preset(run: PresetRun, db: DbDep, settings: SettingsDep, user: CurrentUserDep, response: Response,
               preset_id: Annotated[str, PRESET_ID]):
    """Build the preset's study at a size (with your seeds and overrides) and submit it as POST
    /v1/studies does: every run validated, quotas for the whole study, one transaction, queued.
    Follow it at the Location; its checks and figure come with it."""
    preset = _preset(preset_id)
    if run.size not in preset.sizes:
        raise _unprocessable(["size"], f"size: expected one of {', '.join(preset.sizes)}, got {run.size!r}")
    try:
        spec = smdengine.preset_study(preset.id, run.size, seeds=run.seeds, overrides=run.overrides)
    except StudyError as exc:
        raise HTTPException(status_code=422, detail=_body_errors(exc.errors)) from None
    except (ValueError, KeyError, TypeError, IndexError) as exc:   # an override the study cannot take
        text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        if text.startswith("size"):
            raise _unprocessable(["size"], text) from None
        if text.startswith("seeds: "):   # seeds the preset's checks cannot use (too few, or repeated)
            raise _unprocessable(["seeds"], text) from None
        path = next((p for p in (run.overrides or {}) if p in text), None)
        raise _unprocessable(["overrides", *([path] if path else [])], f"overrides: {text}") from None
    try:
        submission = StudySubmission.model_validate({**spec, "visibility": run.visibility,
                                                     "priority": run.priority})
    except ValidationError as exc:   # an override of an unknown path, the wrong type or out of range
        raise HTTPException(status_code=422, detail=_body_errors(
            [{"loc": _override_loc(smdengine.error_location(e), run.overrides), "msg": smdengine.error_message(e),
              "type": e["type"]}
             for e in exc.errors()])) from None
    study = submit(submission, db, settings, user, preset=preset.id, preset_size=run.size)
    response.headers["Location"] = f"/v1/studies/{study.id}"
    if study.preset is not None and study.checks is None:
        study.checks = presets.pending_checks(preset)
    return study
