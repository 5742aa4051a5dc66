"""Request and response models. A submission is an smdengine spec plus the service's own options
(visibility, priority), which the engine never sees."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import InitErrorDetails, PydanticCustomError

from smdengine import SPECS, WORK_UNITS, ExperimentSpec, Label, StudySpec, printable, tagged_union
from smdlab.options import EXPERIMENT_OPTIONS
from store.clock import as_utc, utc_iso
from store.jobs import estimated_finish
from store.models import Status

Visibility = Literal["private", "lab"]
Priority = Literal["low", "normal", "high"]
# A stored time (SQLite returns naive UTC ones) written as store.clock.utc_iso does: "…:58.000000Z", never "…:58Z"
UtcTime = Annotated[datetime, AfterValidator(as_utc), PlainSerializer(utc_iso, return_type=str, when_used="json"),
                    WithJsonSchema({"type": "string", "format": "date-time"})]


class SubmitOptions(BaseModel):
    visibility: Visibility = Field("private", description="private: only you (and admins) see it; lab: every "
                                                          "user can read it (only you and admins can cancel or "
                                                          "delete it).")
    priority: Priority = Field("normal", description="Orders your own queued jobs (high: admins only). Between "
                                                     "users, workers take jobs round-robin.")


Tag = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
TAGS_DESCRIPTION = "Short labels (1–64 of A–Z a–z 0–9 _ . : -), at most 20; the list filter tag= matches them."
Tags = Annotated[list[Tag], Field(max_length=20, description=TAGS_DESCRIPTION)]
Note = Annotated[str, Field(max_length=10_000, description="Free text (at most 10 000 characters; no control "
                                                          "character but newlines and tabs, no bidirectional override or "
                                                          "isolate)."),
                 AfterValidator(lambda text, info: printable(text, info, keep="\n\r\t"))]


class ExperimentOptions(SubmitOptions):
    tags: Tags = Field(default_factory=list)
    note: Note | None = None
    keep_checkpoint: bool = Field(False, description="Keep the final checkpoint when it succeeds, so that "
                                                     "POST /v1/experiments/{id}/continue can extend it with more "
                                                     "steps (kinds whose runs do not depend on their length: nrq). "
                                                     "It takes the size of the state (trials × dim numbers).")


SERVICE_FIELDS = set(EXPERIMENT_OPTIONS)   # the fields above (tests/api/test_options.py)
Submission = tagged_union("kind", {
    kind: create_model(f"{spec.__name__.removesuffix('Spec')}Submission", __base__=(spec, ExperimentOptions),
                       __doc__=spec.__doc__)
    for kind, spec in SPECS.items()})


class ExperimentPatch(BaseModel):
    """What the owner may change after submitting: any of name, tags (replaced) and note; null clears one."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"tags": ["baseline", "fig2"],
                                                                               "note": "the reference run"}]})

    name: Label | None = Field(None, description="The experiment's name (its spec keeps the name it was submitted "
                                                 "with); null clears it.")
    tags: Tags | None = None
    note: Note | None = None


class RerunIn(ExperimentOptions):
    """A rerun: the experiment's spec with ``overrides`` by dotted path, as a new experiment of yours."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"overrides": {"params.lr": 0.2,
                                                                                              "seed": 4}}]})

    overrides: dict[str, Any] = Field(default_factory=dict, description="Dotted path → value, e.g. "
                                      "{\"params.lr\": 0.2}; list indices allowed (params.lr_schedule.0.step).")
    name: Label | None = Field(None, description="The new experiment's name (default: this experiment's, as PATCH "
                                                 "left it).")


class ContinueIn(BaseModel):
    """How many more steps a succeeded experiment runs (it resumes from its kept final checkpoint)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(..., ge=1, le=100_000_000, description="Updates to add to params.steps.")


class ErrorOut(BaseModel):
    """The body of every error but a 422 (400, 401, 403, 404, 409, 429, 503): one sentence saying what went wrong."""

    detail: str = Field(..., description="What went wrong.")


class ErrorPoint(BaseModel):
    """The study point an error belongs to: its index in expansion order and its axis values."""

    index: int = Field(..., description="The point's index (0-based, in expansion order).")
    values: dict[str, Any] = Field(..., description="Its axis values, by dotted path.")


class ValidationErrorItem(BaseModel):
    """One reason a request was refused, as FastAPI and pydantic word it: where (``loc``), why (``msg``) and a
    machine-readable ``type``; other keys may come with it."""

    loc: list[str | int] = Field(..., description=(
        "Where: the request part (body, query, path, header) and the path to the field, e.g. [\"query\", "
        "\"kind\"] or [\"body\", \"nrq\", \"params\", \"lr\"] (a union's tag may come before the field); a study's "
        "[\"body\", \"point\", i, ...field] or [\"body\", \"axis\", path]."))
    field: str | SkipJsonSchema[None] = Field(None, description=(
        "An error of the request's schema in its body: the field as the request wrote it, dotted, without the "
        "union tags of loc (absent for the errors the service finds in a study's points, axes or overrides): \"params.lr\" for "
        "[\"body\", \"sde\", \"params\", \"normalized_linear\", \"lr\"], \"params.lr_schedule.0.step\"."))
    msg: str = Field(..., description="Why, in words (for an unknown name: the nearest valid ones).")
    type: str = Field(..., description="The kind of error: pydantic's (greater_than, missing, extra_forbidden, ...) "
                                       "or the service's (value_error, unknown_path, bad_path, too_many_points, "
                                       "unknown_experiment, ...).")
    input: Any = Field(None, description="The value refused, where it is known.")
    # absent rather than null where there is none: SkipJsonSchema keeps null out of the schema
    ctx: dict[str, Any] | SkipJsonSchema[None] = Field(None, description="The constraint, e.g. {\"gt\": 0}.")
    point: ErrorPoint | SkipJsonSchema[None] = Field(None, description="A study's error at a point: that point.")


class ValidationErrorOut(BaseModel):
    """The body of every 422: each error with its location, message and type (FastAPI's HTTPValidationError,
    with a study point where there is one)."""

    detail: list[ValidationErrorItem] = Field(..., description="The errors, each naming where and why.")


class WarningOut(BaseModel):
    """A condition of the spec worth knowing before its results are read (smdengine.spec_warnings): its rates leave
    the regime the theory describes (the experiment runs as asked, without the theory lines that do not apply
    there), its summary's tail holds fewer than two records, or (nrq) its tail is predicted off the equilibrium."""

    code: Literal["no_equilibrium", "decay_not_positive", "continuous_time", "sparse_tail", "unsettled_tail"] = Field(
        ..., description="no_equilibrium: λη/(1+α) ≥ 2 (ηλ·dt for an Euler–Maruyama step), the weight norm has no "
                         "equilibrium; decay_not_positive: λη/(1+α) ≥ 1, the decay factor 1 − λη (1 + α − λη) is not "
                         "positive, each update reverses the weight; continuous_time: λη/(1−α) > 0.1, beyond the "
                         "small-ηλ regime of the continuous-time closed forms; sparse_tail: record_every leaves fewer "
                         "than two records (on train, whole windows) in the summary's tail (the last half of the final "
                         "phase), so its tail summaries are one record's values (omits nothing); unsettled_tail (nrq, sde nrq): the "
                         "tail's mean angular update is predicted more than ±10% off its equilibrium, |X| still "
                         "relaxing to its equilibrium norm, so the tail means are not equilibrium values (omits "
                         "nothing).")
    message: str = Field(..., description="The phases and rates concerned, the condition, and what is omitted; for "
                                          "sparse_tail the records concerned and a bound under which any record_every puts two there; for "
                                          "unsettled_tail the predicted ratio and the steps that settle it.")
    omits: list[str] = Field(..., description="Theory names left out of the results (no dashed line, no summary value).")


WARNINGS_DESCRIPTION = ("Warnings of its spec, set at submission: empty when every rate is in the regime the theory "
                        "describes, the summary's tail holds two records or more and (nrq) its angular update is predicted "
                        "at equilibrium there. The experiment runs as asked; the "
                        "theory names each warning omits are absent from its results.")


def _no_warnings(value: Any) -> Any:
    return [] if value is None else value   # rows stored before warnings existed


ETA_DESCRIPTION = ("Estimated finish while running, on the service's clock: its last progress write "
                   "(progressed_at) plus the steps then left at the attempt's pace since its first report (its "
                   "set-up not counted). Null before the attempt has reported twice, and once a cancel is asked. "
                   "eta − progressed_at is the time left at that write: a client on another clock counts down "
                   "from it (it overstates by the write's age, under one flush interval while steps are quick).")


class ExperimentOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: str
    name: str | None
    status: Status
    progress: float = Field(..., description="Fraction of the steps done, 0 to 1.")
    step: int = Field(..., description="Updates done so far.")
    total_steps: int
    error: str | None = Field(None, description="Why the job failed, when it did.")
    cancel_requested: bool
    attempts: int = Field(..., description="Times a worker started it (a resumed job counts again).")
    queue: str = Field(..., description="cpu or gpu (from the spec's device).")
    worker: str | None = Field(None, description="The worker that ran it last.")
    owner: str | None = Field(None, validation_alias=AliasChoices("owner_name", "owner"),
                                 description="Name of the user who submitted it.")
    visibility: Visibility
    priority: Priority = Field(..., validation_alias=AliasChoices("priority_name", "priority"))
    keep_checkpoint: bool = Field(False, description="Its final checkpoint is kept when it succeeds (continuable).")
    created_at: UtcTime
    queued_at: UtcTime | None = Field(None, description="When its current (last) attempt was queued: its creation, "
                                                         "a requeue after a lost or handed-back attempt, or a "
                                                         "continue.")
    started_at: UtcTime | None = Field(..., description="When its current (last) attempt started: a resumed or "
                                                          "continued job's restart (every attempt: …/attempts).")
    start_step: int = Field(0, description="The step that attempt started from (its checkpoint's; 0 from scratch).")
    pace_started_at: UtcTime | None = Field(None, description="When that attempt first reported progress, its set-up "
                                                             "(data, model, theory, checkpoint) done; null before.")
    pace_start_step: int = Field(0, description="The step of that first report: the attempt's pace is (step − "
                                                "pace_start_step) / (now − pace_started_at).")
    progressed_at: UtcTime | None = Field(None, description="When that attempt last wrote its step (a progress "
                                                           "report, every SMD_FLUSH_SECONDS while it runs); null "
                                                           "before its first.")
    eta: UtcTime | None = Field(None, description=ETA_DESCRIPTION)
    finished_at: UtcTime | None
    updated_at: UtcTime = Field(..., description="The last change a client sees (status, progress, error, attempt, cancel flag, name, tags or note); lease renewals do not move it.")
    spec: dict[str, Any]
    study_id: str | None = Field(None, description="The study this experiment is a child of, if any.")
    warnings: list[WarningOut] = Field(default_factory=list, description=WARNINGS_DESCRIPTION)
    tags: list[str] = Field(default_factory=list, description=TAGS_DESCRIPTION)
    note: str | None = None
    summary: dict[str, Any] | None = Field(None, description="Its summary once it succeeded (in lists: only with "
                                                             "include=summary).")
    queue_processes: int | None = Field(None, description="In the answer to a submission (submit, rerun, continue): "
                                                          "the worker processes serving its queue that are up now; 0: "
                                                          "it waits until one starts (a cuda job where no GPU worker "
                                                          "runs). Null elsewhere: GET /v1/queue gives it live.")

    _warnings = field_validator("warnings", mode="before")(_no_warnings)

    @model_validator(mode="after")
    def _estimate(self) -> ExperimentOut:
        self.eta = estimated_finish(self.status, self.cancel_requested, self.pace_started_at, self.step,
                                    self.pace_start_step, self.total_steps, self.progressed_at)
        return self


PROVENANCE_DESCRIPTION = ("What ran it: engine_version, git_commit (null when unknown; +dirty for local changes), "
                          "torch, numpy, python, device (cpu|cuda), device_name (e.g. the GPU model), dtype, triton (its "
                          "version on CUDA where the nrq update can run as a Triton kernel, else null), noise_stream (an nrq "
                          "run's noise generator: the counter-based Philox stream on CUDA with Triton, NumPy's "
                          "for float64 on the CPU, else torch's; null for other kinds). Null "
                          "for attempts stored before provenance was recorded.")


class ProvenanceOut(BaseModel):
    """Each attempt's provenance, and a note when a resumed run's attempts ran other code or another device."""

    attempts: list[dict[str, Any]] = Field(..., description="One per attempt: number, outcome, resumed_from_step "
                                                            "and its provenance. " + PROVENANCE_DESCRIPTION)
    note: str | None = Field(None, description="Set when attempts differ in engine_version, git_commit, torch, "
                                               "device or dtype, e.g. a run resumed by a worker with another engine.")


class AttemptOut(BaseModel):
    """One start of a job by a worker."""

    model_config = ConfigDict(from_attributes=True)

    number: int
    worker: str = Field(..., description="<worker name>/<lease token>.")
    started_at: UtcTime
    ended_at: UtcTime | None
    outcome: Literal["succeeded", "failed", "cancelled", "lost", "interrupted", "released"] | None = Field(
        None, description="Null while running; lost: its worker vanished (lease expired); interrupted: its "
                          "lease expired while the database was unreachable (does not count toward "
                          "SMD_MAX_ATTEMPTS); released: its worker shut down and gave it back.")
    resumed_from_step: int | None = Field(None, description="The checkpoint step it resumed from, if any.")
    provenance: dict[str, Any] | None = Field(None, description=PROVENANCE_DESCRIPTION)


class ExperimentPage(BaseModel):
    items: list[ExperimentOut]
    total: int = Field(..., description="Experiments matching the filters, over all pages.")
    limit: int
    next_cursor: str | None = Field(None, description="Pass as ?cursor= for the next page (also in the Link "
                                                         "header, rel=next); null on the last page.")


Number = int | float | None


class Histogram(BaseModel):
    """A density over bins, beside the theory's density averaged over the same bins."""

    bin_edges: list[float]
    density: list[Number]
    density_theory: list[Number] | None = Field(None, description="Null where the theory does not apply.")
    samples: int = Field(..., description="Values counted.")


LayerSummary = dict[str, Number]


class ResultDocument(BaseModel):
    """Design §3: series aligned on ``step`` (a point is a number, a mean over trials, or a list
    with one value per recorded trial); per-layer series (``train`` kind) on the same steps;
    theory as numbers or series on the same steps; distributions (histograms, when the run is
    finished) are not aligned on ``step``."""

    id: str
    kind: str
    status: Status
    progress: float
    spec: dict[str, Any]
    series: dict[str, list[Number | list[Number]]] = Field(
        ..., description="Global series by name, aligned on the ``step`` series (always present once a point is "
                         "recorded). A point is null where the quantity is undefined or not measured at that step "
                         "(e.g. the ``train`` kind's ``test_loss``/``test_acc`` between evaluations).")
    layers: dict[str, dict[str, list[Number]]] = Field(
        default_factory=dict,
        description="Per-layer series (``train`` kind: one entry per scale-invariant weight, e.g. "
                    "``layers.0.weight``), ``{layer: {metric: [...]}}`` with metrics ``au_rms``, ``au_mean``, "
                    "``norm``, ``unit_grad_sq``, ``eff_lr``, ``norm_theory``, aligned on ``series.step``. "
                    "Stored flat as ``<layer>/<metric>``; empty for kinds without layers.")
    theory: dict[str, list[Number] | Number] = Field(
        ..., description="Theory predictions: a number, or a series aligned on ``series.step``.")
    summary: dict[str, Number | dict[str, LayerSummary]] = Field(
        ..., description="Numbers by name (e.g. means over the tail of the run); for the ``train`` kind also "
                         "``layers``: ``{layer: {au_rms, au_mean, norm, unit_grad_sq, eff_lr, norm_theory, "
                         "au_equilibrium, equilibrium_step}}`` (``equilibrium_step`` null when never reached). "
                         "``nrq`` and ``train``: per schedule phase i with weight decay, "
                         "``equilibrium_steps_phase<i>``, the updates from the phase's start until the angular "
                         "update (every layer's, for train) stays within ±10% of √(2λη/(1+α)) (smoothed over a "
                         "quarter of the relaxation time (1−α)/(4λη); null when it never does), and from phase 1 "
                         "on ``equilibrium_steps_predicted_phase<i>`` = ⌈ln k·(1−α)/(4λη)⌉, k the factor by which "
                         "the phase divides the equilibrium |w|⁴ (the lr decay factor; 1 with rescale).")
    distributions: dict[str, Histogram] = Field(default_factory=dict)
    provenance: ProvenanceOut | None = Field(None, description="What ran each attempt (absent from study tables).")


class HealthOut(BaseModel):
    status: Literal["ok", "degraded"]
    database: str
    broker: str
    version: str


class ReadyOut(BaseModel):
    status: Literal["ready", "unavailable"] = Field(..., description="ready when both the database and the "
                                                                     "broker answer.")
    database: str = Field(..., description="ok, or error: <class>: <text>.")
    broker: str = Field(..., description="ok, or error: <class>: <text>.")


class StudySubmission(StudySpec, SubmitOptions):
    """A study (README: Studies): a base experiment spec expanded over parameter axes into child experiments
    (grid row-major in the order written × zip × seeds, or an explicit list of points). Every child is
    validated before anything is stored. visibility and priority apply to every child."""

    base: ExperimentSpec = Field(..., description="An experiment spec: every child starts from it.")  # type: ignore[assignment]


class StudyPlan(BaseModel):
    """What a study would run (POST /v1/study-plans): nothing stored, nothing queued."""

    runs: int = Field(..., description="Children: points × seeds.")
    points: int
    seeds: int
    work: int = Field(..., description=f"Their work together ({WORK_UNITS}), what the work quota "
                                       "counts.")
    max_work: int | None = Field(None, description="Your work limit (null: none).")
    warnings: list[WarningOut] = Field(default_factory=list, description="Each warning code its points raise, "
                                                                         "once (the first point's message).")


MIN_COMPARE, MAX_COMPARE = 2, 200
ExperimentId = Annotated[str, StringConstraints(min_length=1, max_length=64)]
COMPARE_EXAMPLE = {"experiments": ["3f2a9c0d8e7b4a61b5c2d9e8f7a6b5c4", "9e8d7c6b5a4f43e2a1b0c9d8e7f6a5b4"],
                   "name": "lr 0.05 vs 0.1", "visibility": "private"}


class CompareStudySubmission(BaseModel):
    """A compare study: existing experiments (yours or lab-visible ones; any for admins) grouped as they
    are, nothing rerun, nothing queued and no quota charged, so that the study's reads (status, table,
    overlay, events) compare them. Chosen by the ``experiments`` field (a body without ``base``).

    Each member is a point of the one axis ``experiment``, its values ``{"experiment": id, "name": its
    name or id}`` (the table's columns and the overlay's legend). Members may be of different kinds
    and from other studies (each stays where it is): the table's columns are the union of the members'
    summary and theory names (a member's row lacks those it has none of: an empty CSV cell, a Parquet
    null), and the overlay draws a metric for the members that record it. Status, counts and progress come from the members; cancel is a 409 (cancel
    the experiments themselves); delete removes the study only, never its members; a member deleted
    later leaves the table and plots and is listed in ``missing``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [COMPARE_EXAMPLE]})

    experiments: list[ExperimentId] = Field(
        ..., description=f"{MIN_COMPARE} to {MAX_COMPARE} distinct experiment ids, in the order the table and "
                         "the overlay list them. Each must be one you may see; for a lab-visible study each must "
                         "be lab-visible.",
        json_schema_extra={"minItems": MIN_COMPARE, "maxItems": MAX_COMPARE, "uniqueItems": True})
    name: Label | None = Field(None, description="Free-form label of the study.")
    visibility: Visibility = Field("private", description="private: only you (and admins) see it; lab: every "
                                                          "user can read it (only you and admins can delete it).")

    @field_validator("experiments")
    @classmethod
    def _distinct(cls, ids: list[str]) -> list[str]:
        if not MIN_COMPARE <= len(ids) <= MAX_COMPARE:
            raise PydanticCustomError("experiment_count", "expected {low} to {high} distinct experiment ids, "
                                      "got {given}", {"low": MIN_COMPARE, "high": MAX_COMPARE, "given": len(ids)})
        first: dict[str, int] = {}
        twice = []
        for i, experiment_id in enumerate(ids):
            if experiment_id in first:
                twice.append(InitErrorDetails(type=PydanticCustomError(
                    "duplicate_experiment", "experiment {id} is listed twice (at {first} and {at}): list each "
                    "experiment once", {"id": experiment_id, "first": first[experiment_id], "at": i}),
                    loc=(i,), input=experiment_id))
            first.setdefault(experiment_id, i)
        if twice:   # one error per repeat, at its index (the field's location is prefixed by pydantic)
            raise ValidationError.from_exception_data("experiments", twice)
        return ids


def _study_request(value: Any) -> StudySubmission | CompareStudySubmission:
    """A compare study when the body has ``experiments`` and no ``base``; else the grid/points study, validated
    (and its errors located) exactly as before compare studies existed (from_attributes, as FastAPI validates
    a body model)."""
    if isinstance(value, dict) and "experiments" in value and "base" not in value:
        return CompareStudySubmission.model_validate(value, from_attributes=True)
    return StudySubmission.model_validate(value, from_attributes=True)


StudyRequest = Annotated[StudySubmission | CompareStudySubmission, PlainValidator(
    _study_request, json_schema_input_type=StudySubmission | CompareStudySubmission)]


StudyStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "partial"]


class StudyChildOut(BaseModel):
    """One child experiment of a study (a normal experiment: /v1/experiments/{id})."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    index: int = Field(..., description="Its place in expansion order (a compare study's member: its position "
                                         "in the request).")
    point: int = Field(..., description="Index of its combination of axis values (a member: its position).")
    seed: int
    values: dict[str, Any] = Field(..., description="Its axis values, by dotted path (a compare study's member: "
                                                    "{\"experiment\": id, \"name\": its name or id}).")
    status: Status
    progress: float
    warnings: list[WarningOut] = Field(default_factory=list, description=WARNINGS_DESCRIPTION)

    _warnings = field_validator("warnings", mode="before")(_no_warnings)


Verdict = Literal["reproduced", "not_reproduced", "inconclusive", "finding", "pending", "error"]


class CheckOut(BaseModel):
    """One check of a preset study: a claim of the seed, what theory predicts, what the children
    measured, the tolerance (from the measurement's Monte-Carlo error) and the verdict."""

    model_config = ConfigDict(extra="allow")

    id: str
    claim: str = Field(..., description="The claim in one sentence, with its seed reference.")
    predicted: Any = Field(None, description="Derived from theory by the engine (null while pending).")
    measured: Any = Field(None, description="From the children's results (null while pending).")
    tolerance: Any = Field(None, description="From the Monte-Carlo error of the measurement.")
    tolerance_rule: str | None = Field(None, description="How the tolerance was computed (standard error over "
                                                         "trials or seeds, × how many).")
    verdict: Verdict = Field(..., description=(
        "reproduced | not_reproduced | inconclusive (the tolerance is wider than the effect tested) | finding "
        "(the claim does not hold on this model at this size, for a cause the preset's diagnostic checks show; "
        "docs/presets.md explains each); pending "
        "while a child is queued or running; error when the engine could not evaluate it (the note says why; "
        "not stored, so a later read tries again)."))
    note: str | None = None


class StudyOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: Literal["expand", "compare"] = Field("expand", description=(
        "expand: a base spec expanded into child experiments, run for it; compare: existing experiments "
        "grouped as they are (its children are its members; see CompareStudySubmission)."))
    name: str | None
    owner: str | None = Field(None, validation_alias=AliasChoices("owner_name", "owner"),
                              description="Name of the user who submitted it.")
    visibility: Visibility
    priority: Priority = Field(..., validation_alias=AliasChoices("priority_name", "priority"))
    status: StudyStatus = Field(..., description=(
        "From its children: queued (all queued), running (some started, not all ended), succeeded (all), "
        "failed (all ended, none succeeded, some failed), cancelled (all ended, none succeeded or failed), "
        "partial (all ended, some succeeded and some not)."))
    counts: dict[Status, int] = Field(..., description="Children by status.")
    children_count: int = Field(..., description="Children (points × seeds); a compare study's members that "
                                                 "still exist.")
    points: int = Field(..., description="Combinations of axis values (a compare study: one per member).")
    axes: list[str] = Field(..., description="The axis paths, in expansion order (a compare study: "
                                             "[\"experiment\"]).")
    progress: float = Field(..., description="Fraction of the study's work done, 0 to 1: its children's steps done "
                                             "over their steps (a sweep over steps is not half done when its short "
                                             "children are), or, when they are of several kinds (a compare study), "
                                             "the mean of their progress. Work is counted as the ETA counts it; a failed "
                                             "or cancelled child's steps not done stay in the whole, so a partial "
                                             "study ends below 1.")
    started_at: UtcTime | None = Field(None, description="When its first child started.")
    eta: UtcTime | None = Field(None, description="Estimated finish while running: the steps its active "
                                                   "children have left (none for a child asked to cancel) at "
                                                   "the pace of its current stretch of running (steps done "
                                                   "since then over the time), and no "
                                                   "sooner than its slowest running child at that child's own "
                                                   "pace; before a run of that stretch has ended, the running "
                                                   "children's own pace, then the queued children, longest "
                                                   "first, each on the worker that frees first, at the running "
                                                   "children's set-up and time per step. Null otherwise, and "
                                                   "before a running child "
                                                   "has reported progress twice.")
    eta_seconds: float | None = Field(None, description="Seconds until the estimated finish, as of this answer: "
                                                         "a client counts down from it on its own clock (eta is "
                                                         "on the service's, which the client's may be off).")
    created_at: UtcTime
    finished_at: UtcTime | None = Field(None, description="When its last child ended.")
    cancel_requested: bool
    spec: dict[str, Any] = Field(..., description="The study as submitted (without visibility and priority).")
    children: list[StudyChildOut] | None = Field(None, description="Every child, in expansion order "
                                                                   "(null in lists); a compare study's members "
                                                                   "that still exist, in request order.")
    missing: list[str] = Field(default_factory=list, description="A compare study's members deleted since it was "
                                                                 "made (no longer in its table or plots); empty "
                                                                 "otherwise.")
    preset: str | None = Field(None, description="The preset it was made from (/v1/presets/{id}), or null.")
    preset_size: str | None = Field(None, description="The preset's size it ran at (quick, paper).")
    checks: list[CheckOut] | None = Field(None, description=(
        "A preset study's checks (null for other studies, and in lists): verdict pending while a child is "
        "queued or running; evaluated by the engine from the children's results on the first read after the "
        "last one ended, stored, and served as stored from then on."))


class StudyPage(BaseModel):
    items: list[StudyOut]
    total: int = Field(..., description="Studies you may see, over all pages.")
    limit: int
    next_cursor: str | None = Field(None, description="Pass as ?cursor= for the next page (also in the Link "
                                                         "header, rel=next); null on the last page.")


class StudyTable(BaseModel):
    """The study's table: one row per child (or per point with group=point)."""

    columns: list[str]
    rows: list[dict[str, Any]]
    derived: list[str] = Field(default_factory=list, description="The columns derived from each child's spec "
                                                                 "(ηλ, η/λ, …): inputs, not measurements.")
    checks: list[CheckOut] | None = Field(None, description="A preset study's checks, as GET /v1/studies/{id} "
                                                            "shows them (null for other studies).")


class PresetCheckOut(BaseModel):
    id: str
    claim: str = Field(..., description="The claim in one sentence, with its seed reference.")


class PresetSizeOut(BaseModel):
    runs: int = Field(..., description="Children (runs) of the study this size expands to.")
    work: int = Field(..., description="Estimated work, summed over the runs (as the work quota counts it).")
    gpu: bool = Field(..., description="Whether this size needs a GPU worker (device cuda).")
    estimated_seconds: float | None = Field(None, description="Its work over the work per second of busy time "
                                                              "of this service's workers of that type (cpu or "
                                                              "gpu) in earlier runs (estimated_from says which); "
                                                              "null without such history.")
    estimated_from: Literal["preset", "studies", "runs"] | None = Field(
        None, description="The runs that timed it: 'preset', this preset's own latest studies of this size whose "
                          "every run succeeded; else 'studies', recent studies' runs like its base (same kind, and "
                          "model for sde; at least a tenth of its runs' work and a second long), fused as a "
                          "worker fuses a preset's; else 'runs', any such runs (single runs are slower per unit "
                          "of work than a fused sweep, so this one tends to be high); null: no estimate.")


class PresetSizeDetailOut(PresetSizeOut):
    spec: dict[str, Any] = Field(..., description="The study spec this size expands to (POST /v1/studies "
                                                  "accepts it as it is).")


class PresetPanelOut(BaseModel):
    title: str
    metric: str
    x: str
    log_y: bool
    points: list[int] | None = Field(None, description="The study points drawn (null: all).")


class PresetOut(BaseModel):
    """A preset: a named, documented study of a seed's figure, with the checks it makes."""

    id: str
    title: str
    seed: str = Field(..., description="The seed paper (000 … 004).")
    figure: str = Field(..., description="The seed's figure or table it reproduces.")
    description: str = Field(..., description="What it shows, in one paragraph.")
    kinds: list[str] = Field(..., description="The experiment kinds its runs use.")
    tier: int = Field(..., description="1: exact theory, decisive on a CPU; 2: network-level, on digits; "
                                       "3: exploratory.")
    exploratory: bool = Field(..., description="Its checks may be inconclusive (the description says why).")
    min_seeds: int = Field(..., description="The fewest distinct seeds a run may have: those its checks can use "
                                            "(2 where a standard error is over seeds). Fewer is a 422.")
    max_seeds: int | None = Field(None, description="The most distinct seeds a run may have (null: no limit).")
    checks: list[PresetCheckOut]
    panels: list[PresetPanelOut] = Field(..., description="The panels of its figure (plots/figure.png).")
    sizes: dict[str, PresetSizeOut] = Field(..., description="For each size (quick, paper): runs, estimated "
                                                             "work and whether it needs a GPU.")


class PresetDetailOut(PresetOut):
    sizes: dict[str, PresetSizeDetailOut] = Field(..., description=(  # type: ignore[assignment]
        "For each size: runs, estimated work, whether it needs a GPU, and the study spec it expands to."))


class PresetRun(SubmitOptions):
    """Run a preset: its study at a size, with other seeds or overrides if given, submitted as POST
    /v1/studies submits one (same validation, quotas and queueing)."""

    model_config = ConfigDict(extra="forbid")   # a misspelt option is refused, not ignored

    size: str = Field("quick", max_length=32, description="A size of the preset (GET /v1/presets/{id}).")
    seeds: list[int] | None = Field(None, min_length=1, max_length=1000,
                                    description="Replace the preset's seeds (each run once per seed).")
    overrides: dict[str, Any] | None = Field(None, description=(
        "{dotted path: value} set on the base run of the study the size expands to (paths as in a study "
        "axis, e.g. params.steps); every child is validated as any study point is. A path the preset varies "
        "across its points (or one inside or above it) is refused with a 422."))
