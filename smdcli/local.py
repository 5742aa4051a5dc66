"""`smd run`: one spec through the engine in this process, progress bar on stderr."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from tqdm import tqdm

import smdengine
from smdcli.paths import read_object
from smdlab.errors import field_said
from smdlab.options import EXPERIMENT_OPTIONS
from store.models import Status
from store.settings import get_settings


def local_document(kind: str, spec: dict[str, Any], document: dict[str, Any] | None) -> dict[str, Any]:
    """A run's result in the keys of the service's results document (docs/measurements.md), without an id:
    succeeded with the engine's ``document``, else failed (no points); layers {} for kinds without them."""
    status = Status.succeeded if document is not None else Status.failed
    return {"id": None, "kind": kind, "status": status, "progress": 1.0 if document is not None else 0.0, "spec": spec,
            "series": {}, "layers": {}, "theory": {}, "summary": {}, "distributions": {}, **(document or {})}


def run_local(spec_path: Path, output: Path | None, quiet: bool = False, no_limit: bool = False) -> int:
    data = read_object(spec_path, "smd run", "spec")
    if data is None:
        return 2
    # a spec file written for smd submit runs here too (it was "tags: Extra inputs are not permitted")
    if service := [key for key in EXPERIMENT_OPTIONS if key in data]:
        print(f"smd run: note: {', '.join(service)}: the service's options, not used here", file=sys.stderr)
        data = {k: v for k, v in data.items() if k not in EXPERIMENT_OPTIONS}
    try:
        spec = smdengine.parse_spec(data)
    except ValidationError as exc:
        for err in exc.errors():   # the engine's messages name their field first ("kind: expected one of …")
            loc = smdengine.field_path(data, smdengine.error_location(err))   # without the unions' tags
            where, message = ".".join(map(str, loc)), smdengine.error_message(err)
            said = field_said(where, message)
            print(f"smd run: spec error: {said}", file=sys.stderr)
        return 2
    limit = get_settings().max_work
    if spec.work > limit and not no_limit:   # a typo's extra zeros: refused at once, as the service would
        print(f"smd run: refused: this job's work is {spec.work:,} ({smdengine.WORK_UNITS}), "
              f"over the per-job limit {limit:,} (SMD_MAX_WORK, the service's default quota): make it "
              "smaller, or pass --no-limit to run it here anyway", file=sys.stderr)
        return 3
    data_dir = get_settings().data_dir
    if (problem := spec.missing_data(data_dir)) is not None:   # said now, not seconds into the run
        print(f"smd run: {problem['field']}: not available here: {problem['message'].removeprefix('dataset: ')}",
              file=sys.stderr)
        return 2
    for warning in smdengine.spec_warnings(spec):   # even with quiet: they say what the results leave out
        print(f"smd run: warning: {warning['code']}: {warning['message']}", file=sys.stderr)
    # no bar into a file or pipe (its frames are carriage returns): as smd follow and smd study run
    bar = tqdm(total=spec.params.steps, unit="step", file=sys.stderr, disable=quiet or not sys.stderr.isatty(),
               dynamic_ncols=True)

    def on_progress(progress: smdengine.Progress) -> None:
        bar.update(progress.step - bar.n)

    try:
        result = smdengine.run(spec, on_progress=on_progress, data_dir=str(data_dir) if data_dir else None)
    except KeyboardInterrupt:
        bar.close()
        print("smd run: interrupted", file=sys.stderr)
        return 130
    except (RuntimeError, ValueError) as exc:
        bar.close()
        print(f"smd run: failed: {exc}", file=sys.stderr)
        return 1
    bar.close()
    doc = local_document(spec.kind, spec.model_dump(mode="json"), result.to_document())
    document = json.dumps(doc, allow_nan=False)
    if output is None:
        print(document)
    else:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(document)
        print(f"smd run: wrote {output}", file=sys.stderr)
    return 0
