"""The service's submission options are written once, in smdlab.options, for the CLI and the client (neither
imports the API): the API's schemas define exactly those fields."""
from __future__ import annotations

from api.schemas import SERVICE_FIELDS, ExperimentOptions, PresetRun, StudySubmission, SubmitOptions
from smdengine import SPECS, StudySpec
from smdlab.client import Client
from smdlab.options import EXPERIMENT_OPTIONS, STUDY_OPTIONS


def test_the_schemas_define_the_listed_options():
    assert set(SubmitOptions.model_fields) == set(STUDY_OPTIONS)
    assert set(ExperimentOptions.model_fields) == set(EXPERIMENT_OPTIONS) == SERVICE_FIELDS
    # a study submission's fields beyond the engine's are the study options; a preset run's include them
    assert set(StudySubmission.model_fields) - set(StudySpec.model_fields) == set(STUDY_OPTIONS)
    assert set(STUDY_OPTIONS) <= set(PresetRun.model_fields)


def test_the_clients_options_are_the_experiments_and_its_name():
    assert set(Client.SUBMIT_OPTIONS) == set(EXPERIMENT_OPTIONS) | {"name"}
    for spec in SPECS.values():
        assert "name" in spec.model_fields and not set(EXPERIMENT_OPTIONS) & set(spec.model_fields)
