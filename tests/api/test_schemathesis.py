"""Schemathesis against the OpenAPI schema, in process (ASGI, no server): every operation with generated
inputs (valid and invalid), and a stateful submit -> get -> cancel chain that follows the schema's links.
Every check schemathesis enables by default runs: no 5xx, only documented status codes, content types and
headers, bodies that match their schema, valid data accepted, invalid data rejected, 401 without a key, ...

Auth is on and every case carries a real key; a smaller run covers auth off. Experiments the fuzzing user
may read (finished ones of each kind, with results and plots; one queued of its own) are seeded first, and
generated experiment ids and plot names are sometimes swapped for theirs, so that the operations on an
experiment get past their 404. No worker runs: submitted jobs stay queued."""
from __future__ import annotations

import tempfile
from pathlib import Path

import hypothesis
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test
from schemathesis.specs.openapi.checks import positive_data_acceptance
from sqlalchemy import delete, select

from api.main import create_app
from store.migrate import upgrade_head
from store.models import Attempt, Checkpoint, Experiment, SeriesChunk
from store.settings import Settings
from store.users import create_key, create_user
from tests.api.test_sde_experiments import sde_spec
from tests.api.test_train_experiments import train_spec
from tests.conftest import small_spec
from tests.dbutil import session_scope
from worker.runner import execute

pytestmark = pytest.mark.slow   # fuzzing: in make test, not in make test-quick
SEED = 20240531
MAX_EXAMPLES = 45  # per operation and phase: ~47 operations; the module's share of the suite's 15 minutes
MAX_EXAMPLES_AUTH_OFF = 20
STREAM_TIMEOUT = 0.2  # seconds: the event stream of an unfinished experiment otherwise never ends

# Loaded when the module is imported: schemathesis.pytest.from_fixture (a lazily loaded schema) needs a
# pytest internal (Node._nodeid) that pytest 9 no longer has. Loading migrates an empty SQLite database.
_TMP = tempfile.TemporaryDirectory(prefix="smd-schemathesis-")


def _settings(name: str, auth: str) -> Settings:
    folder = Path(_TMP.name) / name
    return Settings(state_dir=folder / "state", database_url=f"sqlite:///{folder / 'smd.sqlite3'}", auth=auth,
                    sweeper=False, max_active_jobs=10**6, events_poll_seconds=0.05, max_study_points=8)


def _schema(settings: Settings, max_examples: int):
    app = create_app(settings)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    schema.config.update(request_timeout=60)
    schema.config.generation.update(max_examples=max_examples, deterministic=True, database="none")
    schema.config.seed = SEED
    return schema


def _with_keys(settings: Settings) -> dict[str, str]:
    upgrade_head(settings.db_url)
    keys = {}
    with session_scope(settings.db_url) as session:
        for name in ("fuzzer", "other"):
            user = create_user(session, name)
            USER_IDS[name] = user.id
            _, keys[name] = create_key(session, user)
    return keys


USER_IDS: dict[str, str] = {}
SETTINGS = _settings("on", "on")
KEYS = _with_keys(SETTINGS)
schema = _schema(SETTINGS, MAX_EXAMPLES)
# stateful scenarios send valid data only: invalid data is the generic run's, and would end most of them at
# their first step
schema.config.phases.stateful.generation.update(modes=[schemathesis.GenerationMode.POSITIVE])


@schema.auth()
class ApiKey:
    """The fuzzing user's key on every case (schemathesis also sends each one without it, and with a wrong one,
    expecting 401)."""

    def get(self, case, context):
        return KEYS["fuzzer"]

    def set(self, case, key, context):
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {key}"}


SETTINGS_OFF = _settings("off", "off")
upgrade_head(SETTINGS_OFF.db_url)
schema_auth_off = _schema(SETTINGS_OFF, MAX_EXAMPLES_AUTH_OFF)

SEEDED: list[str] = []  # experiment ids, filled by the `seeded` fixture before any case is generated
SEEDED_STUDIES: list[str] = []
PLOT_NAMES = ["au", "norm", "risk", "f_histogram", "loss", "accuracy"]


@schema.hook
def flatmap_path_parameters(context, path_parameters):
    """Now and then a seeded experiment (and a real plot name) or study instead of the generated ones."""
    if path_parameters and "study_id" in path_parameters and SEEDED_STUDIES:
        study = st.fixed_dictionaries({**{k: st.just(v) for k, v in path_parameters.items()},
                                       "study_id": st.sampled_from(SEEDED_STUDIES)})
        return st.one_of(st.just(path_parameters), study, study, study)
    if not path_parameters or "experiment_id" not in path_parameters or not SEEDED:
        return st.just(path_parameters)
    real = {"experiment_id": st.sampled_from(SEEDED)}
    if "name" in path_parameters:
        real["name"] = st.sampled_from(PLOT_NAMES) | st.just(path_parameters["name"])
    seeded_ = st.fixed_dictionaries({**{k: st.just(v) for k, v in path_parameters.items()}, **real})
    return st.one_of(st.just(path_parameters), seeded_, seeded_, seeded_)


@pytest.fixture(scope="module", autouse=True)
def seeded():
    """Finished experiments of each kind that "other" shares with the lab (readable, not changeable by the
    fuzzing user), a private one of theirs (a 404 for it), and a queued one of the fuzzing user's own; a
    finished lab study of "other" and a queued study of the fuzzing user's; a lab compare study of "other"
    over its finished experiments of every kind."""
    client = TestClient(create_app(SETTINGS))  # no lifespan: the database is migrated already
    other, fuzzer = ({"Authorization": f"Bearer {KEYS[name]}"} for name in ("other", "fuzzer"))
    train = train_spec(steps=20, eval_every=10)
    for spec, headers, run in [({**small_spec(), "visibility": "lab"}, other, True),
                               ({**sde_spec("nrq"), "visibility": "lab"}, other, True),
                               ({**train, "visibility": "lab"}, other, True),
                               (small_spec(), other, False),
                               (small_spec(), fuzzer, False)]:
        r = client.post("/v1/experiments", json=spec, headers=headers)
        assert r.status_code == 202, r.text
        SEEDED.append(r.json()["id"])
        if run:
            assert execute(SETTINGS, SEEDED[-1]) == "succeeded"
    # a finished lab-visible study of "other" (2 children) and a queued one of the fuzzing user's own
    study = {"base": small_spec(trials=4, steps=40), "grid": {"params.lr": [0.05, 0.1]}}
    for extra, headers, run in [({"visibility": "lab"}, other, True), ({}, fuzzer, False)]:
        r = client.post("/v1/studies", json={**study, **extra}, headers=headers)
        assert r.status_code == 202, r.text
        SEEDED_STUDIES.append(r.json()["id"])
        for child in client.get(f"/v1/studies/{SEEDED_STUDIES[-1]}", headers=headers).json()["children"]:
            if run:
                assert execute(SETTINGS, child["id"]) == "succeeded"
    r = client.post("/v1/studies", json={"experiments": SEEDED[:3], "visibility": "lab"}, headers=other)
    assert r.status_code == 202, r.text
    SEEDED_STUDIES.append(r.json()["id"])
    yield
    SEEDED.clear()
    SEEDED_STUDIES.clear()


def bound_stream(case) -> None:
    """An event stream runs until its experiment ends (never, here: no worker runs); cut it short with a
    small valid `timeout`, unless the generated one is shorter or is not a number (a 422 comes at once)."""
    if case.operation.path.endswith("/events"):
        timeout = (case.query or {}).get("timeout")
        if timeout is None or (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
                               and timeout > STREAM_TIMEOUT):
            case.query = {**(case.query or {}), "timeout": STREAM_TIMEOUT}


BOUNDS = {"less_than_equal": ("le", lambda value, bound: value > bound),
          "less_than": ("lt", lambda value, bound: value >= bound),
          "greater_than_equal": ("ge", lambda value, bound: value < bound),
          "greater_than": ("gt", lambda value, bound: value <= bound)}


STUDY_ERRORS = {"unknown_path", "bad_path", "too_many_points", "too_many_errors", "unknown_experiment",
                "private_experiment"}


def rightly_refused(error: dict) -> bool:
    """Whether a 422 error refuses data that the schema allows, or does not really allow:

    - a rule that the JSON schema cannot state, checked in code: a spec's cross-field rules (eig_low <
      eig_high, steps or epochs, dt = 1/k, rates in force, ...) and names in `fields` that the experiment does
      not have (they depend on its kind, model and layers). Each is a `value_error` naming the rule (for
      `fields`, with the available names);
    - a number really out of its documented bound: schemathesis compares integers with bounds as floats, so
      it takes 2**63 - 1 + 192 for a valid seed (2**63 - 1 is no float);
    - a study that does not expand: an axis path the base spec does not have, a child spec that its kind's
      model refuses (the error names the point), or more children than SMD_MAX_STUDY_POINTS;
    - a compare study of ids that are no experiment the user may see, or of a private one in a lab study;
    - text with a NUL character (U+0000) anywhere in the request: JSON schema strings allow it, but PostgreSQL
      cannot store it (api/edges.py, NoNul)."""
    if error.get("type") in ("value_error", "string_nul") or error.get("type") in STUDY_ERRORS or "point" in error:
        return True
    key, outside = BOUNDS.get(error.get("type"), (None, None))
    bound, value = (error.get("ctx") or {}).get(key), error.get("input")
    return (key is not None and isinstance(value, int) and isinstance(bound, int) and not isinstance(value, bool)
            and outside(value, bound))


def valid_data_refused_rightly(response) -> bool:
    if response.status_code != 422:
        return False
    errors = response.json().get("detail")
    if not (errors and isinstance(errors, list) and all(isinstance(e, dict) for e in errors)):
        return False
    # a union (a study axis: a list of values, or a span) reports every member it tried, each at the union's
    # location plus the member's name: when one member refuses the data rightly, the others' refusals follow
    unions = {tuple(e.get("loc", ()))[:-1] for e in errors if rightly_refused(e)}
    return all(rightly_refused(e) or tuple(e.get("loc", ()))[:-1] in unions for e in errors)


def validate(case, response, **kwargs) -> None:
    """Every check, except that some 422s for schema-valid data are right (see rightly_refused)."""
    excluded = [positive_data_acceptance] if valid_data_refused_rightly(response) else []
    case.validate_response(response, excluded_checks=excluded, **kwargs)


def call_and_validate(case) -> None:
    bound_stream(case)
    validate(case, case.call())


@schema.parametrize()
def test_api(case):
    call_and_validate(case)


@schema_auth_off.parametrize()
def test_api_auth_off(case):
    call_and_validate(case)


CHAIN = ("POST /v1/experiments", "GET /v1/experiments/{experiment_id}", "POST /v1/experiments/{experiment_id}/cancel")


def test_stateful_submit_get_cancel():
    """Scenarios over the links of the schema (submit -> get, results, cancel, ...), every check on every
    step; at least one of them submits a job, reads it and cancels it."""
    calls: list[list[tuple[str, int, str]]] = []

    # the operations on one experiment, which the links join (the generic run covers every operation)
    lifecycle = schema.include(operation_id=["submitExperiment", "getExperiment", "getResults", "listAttempts",
                                             "cancelExperiment", "deleteExperiment"])

    class Workflow(lifecycle.as_state_machine()):
        def setup(self):
            # Each scenario starts from the same state (the seeded experiments of "other"), so that the same
            # steps meet the same responses: Hypothesis checks that replayed steps draw alike.
            with session_scope(SETTINGS.db_url) as session:
                mine = select(Experiment.id).where(Experiment.owner_id == USER_IDS["fuzzer"])
                for table in (SeriesChunk, Attempt, Checkpoint):
                    session.execute(delete(table).where(table.experiment_id.in_(mine)))
                session.execute(delete(Experiment).where(Experiment.owner_id == USER_IDS["fuzzer"]))
            calls.append([])

        def get_call_kwargs(self, case):
            # the auth provider (ApiKey) does not reach state machines' cases
            return {"headers": {"Authorization": f"Bearer {KEYS['fuzzer']}"}}

        def after_call(self, response, case):
            super().after_call(response, case)  # recorded for the stateful checks (use after free, ...)
            experiment_id = (case.path_parameters or {}).get("experiment_id")
            if experiment_id is None and response.status_code == 202:
                experiment_id = response.json()["id"]
            calls[-1].append((case.operation.label, response.status_code, experiment_id))

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            validate(case, response, additional_checks=additional_checks, transport_kwargs=kwargs or None,
                     recorder=self.recorder)

    run_state_machine_as_test(Workflow, settings=hypothesis.settings(
        max_examples=80, stateful_step_count=8, derandomize=True, database=None, deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck), phases=[hypothesis.Phase.generate]))

    def chained(scenario) -> bool:
        done = {}
        for label, status, experiment_id in scenario:
            step = CHAIN.index(label) if label in CHAIN else None
            if step is not None and status < 300 and (step == 0 or done.get(experiment_id) == step - 1):
                done[experiment_id] = step
        return 2 in done.values()

    assert any(chained(scenario) for scenario in calls), [[(label, status) for label, status, _ in scenario]
                                                          for scenario in calls if scenario]
