"""`smd run`: one spec through the engine in this process, progress bar on stderr."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import ValidationError
from tqdm import tqdm

import smdengine
from smdcli.paths import read_object
from store.models import Status
from store.settings import get_settings


def run_local(spec_path: Path, output: Path | None, quiet: bool = False) -> int:
    data = read_object(spec_path, "smd run", "spec")
    if data is None:
        return 2
    try:
        spec = smdengine.parse_spec(data)
    except ValidationError as exc:
        for err in exc.errors():   # the engine's messages name their field first ("kind: expected one of …")
            loc = smdengine.field_path(data, smdengine.error_location(err))   # without the unions' tags
            where, message = ".".join(map(str, loc)), smdengine.error_message(err)
            said = message if not where or message.startswith(f"{where}: ") else f"{where}: {message}"
            print(f"smd run: spec error: {said}", file=sys.stderr)
        return 2
    for warning in smdengine.spec_warnings(spec):   # even with quiet: they say what the results leave out
        print(f"smd run: warning: {warning['code']}: {warning['message']}", file=sys.stderr)
    # no bar into a file or pipe (its frames are carriage returns): as smd follow and smd study run
    bar = tqdm(total=spec.params.steps, unit="step", file=sys.stderr, disable=quiet or not sys.stderr.isatty(),
               dynamic_ncols=True)

    def on_progress(progress: smdengine.Progress) -> None:
        bar.update(progress.step - bar.n)

    try:
        data_dir = get_settings().data_dir
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
    doc = {"id": None, "kind": spec.kind, "status": Status.succeeded, "spec": spec.model_dump(mode="json"),
           **result.to_document()}
    document = json.dumps(doc, allow_nan=False)
    if output is None:
        print(document)
    else:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(document)
        print(f"smd run: wrote {output}", file=sys.stderr)
    return 0
