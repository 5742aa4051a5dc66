"""The names of the service's submission options: what a submission carries beside its engine spec, which the
service keeps and the engine never sees. One list for the CLI, the client and the API (whose schemas,
``api.schemas.SubmitOptions`` and ``ExperimentOptions``, are tested to define exactly these)."""
from __future__ import annotations

STUDY_OPTIONS = ("visibility", "priority")   # a study's and a preset run's (POST /v1/studies, /v1/presets/…/run)
EXPERIMENT_OPTIONS = (*STUDY_OPTIONS, "keep_checkpoint", "tags", "note")   # an experiment's (POST /v1/experiments)
