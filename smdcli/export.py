"""`smd export mlflow`: copy experiments from the service into an MLflow tracking server, one MLflow run
per experiment, so that a team already living in MLflow's UI can compare them beside its own runs.

    smd export mlflow ID [ID ...] [--study SID] [--tracking-uri URI] [--experiment NAME] [--force]

Each experiment (read over HTTP from SMD_URL with SMD_KEY) becomes a run named after it, with
  params   ← the flattened spec (``params.lr``, ``seed``, ``params.lr_schedule.0.step`` …)
  metrics  ← every series with its step (per layer as ``<layer>/<metric>``), every theory series or
             number as ``theory/<name>`` (numbers at step 0), every summary number as ``summary/<name>``
  tags     ← ``smd.id``, ``smd.kind``, ``smd.status``, ``smd.owner``, ``smd.name``, ``smd.tags``,
             ``smd.url`` and the provenance of its last attempt (``smd.provenance.<fact>``)
  artifacts← ``plots/<name>.png`` for every plot of its kind, and ``results.json`` (the document).
An experiment already exported to that MLflow experiment (a run tagged with its ``smd.id``) is skipped
unless --force. Null points (a metric not measured at that step) are left out. ``mlflow`` is an
optional extra: ``pip install 'smdlab[mlflow]'``.

Prints one line per experiment on stdout: ``<id>\t<MLflow run id>\texported`` (or ``already exported``).
Exit status: 0 every experiment exported (or skipped), 1 an HTTP or MLflow error, 2 bad arguments.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MAX_PARAM_VALUE = 6000     # MLflow's limit on a param value (characters)
BATCH_METRICS = 1000       # MLflow's limits per log_batch call
BATCH_PARAMS = 100
BATCH_TAGS = 100


def add_parsers(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="copy experiments to another tool (MLflow)")
    targets = export.add_subparsers(dest="export_target", required=True)
    mlflow = targets.add_parser("mlflow", help="one MLflow run per experiment: params, metrics, tags, plots")
    mlflow.add_argument("ids", nargs="*", help="experiment ids")
    mlflow.add_argument("--study", help="every child (or member) of this study")
    mlflow.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"),
                        help="MLflow tracking server (default: MLFLOW_TRACKING_URI)")
    mlflow.add_argument("--experiment", default="smdlab", help="MLflow experiment name (created if missing)")
    mlflow.add_argument("--force", action="store_true", help="export again what was exported already")


def main(args: argparse.Namespace) -> int:
    if not args.ids and not args.study:
        print("smd export mlflow: expected experiment ids or --study", file=sys.stderr)
        return 2
    if not args.tracking_uri:
        print("smd export mlflow: expected --tracking-uri (or MLFLOW_TRACKING_URI)", file=sys.stderr)
        return 2
    try:
        import mlflow  # noqa: F401
    except ImportError:
        print("smd export mlflow: mlflow is not installed (pip install 'smdlab[mlflow]')", file=sys.stderr)
        return 2
    unreachable = _unreachable(args.tracking_uri)
    if unreachable:   # MLflow's own client retries for minutes before it says so
        print(f"smd export mlflow: cannot reach the tracking server {args.tracking_uri}: {unreachable}", file=sys.stderr)
        return 1
    from smdcli.service import call

    return call("smd export mlflow", lambda client: export_all(client, args))


def _unreachable(tracking_uri: str) -> str | None:
    """Why nothing accepts a connection at an http(s) tracking server's address, else None (MLflow's client
    then speaks to it; the service is reached only through smdlab.Client)."""
    import re
    import socket

    address = re.match(r"(https?)://(?:[^@/]*@)?(\[[^\]]+\]|[^:/?#]+)(?::(\d+))?", tracking_uri)
    if address is None:
        return None   # a local store (a path, sqlite:///...): MLflow opens it itself
    scheme, host, port = address.groups()
    try:
        with socket.create_connection((host.strip("[]"), int(port) if port else 443 if scheme == "https" else 80),
                                      timeout=10):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def export_all(client: Any, args: argparse.Namespace) -> int:
    """Each experiment (or the study's children, in index order) as an MLflow run; one line per
    experiment on stdout. The service's errors go up to :func:`smdcli.service.call`."""
    from smdlab import SMDError

    ids = list(args.ids)
    if args.study:
        ids += [c["id"] for c in sorted(client.get_study(args.study).data["children"], key=lambda c: c["index"])]
    try:
        # MLflow prints "View run … at …" on stdout: to stderr, so that stdout stays one line per experiment
        with contextlib.redirect_stdout(sys.stderr):
            exporter = MlflowExporter(args.tracking_uri, args.experiment)
        for experiment_id in ids:
            with contextlib.redirect_stdout(sys.stderr):
                run_id, fresh = exporter.export(client, experiment_id, force=args.force)
            print(f"{experiment_id}\t{run_id}\t{'exported' if fresh else 'already exported (--force to redo)'}")
    except SMDError:
        raise
    except Exception as exc:   # MLflow's own errors (MlflowException, its REST client's)
        print(f"smd export mlflow: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


class MlflowExporter:
    def __init__(self, tracking_uri: str, experiment: str):
        from mlflow import MlflowClient

        self.mlflow = MlflowClient(tracking_uri=tracking_uri)
        found = self.mlflow.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found is not None else self.mlflow.create_experiment(experiment)

    def export(self, client: Any, experiment_id: str, force: bool = False) -> tuple[str, bool]:
        """(MLflow run id, whether it was written now)."""
        existing = self.mlflow.search_runs([self.experiment_id], filter_string=f"tags.`smd.id` = '{experiment_id}'",
                                           max_results=1)
        if existing and not force:
            return existing[0].info.run_id, False
        experiment = client.http.json("GET", f"/v1/experiments/{experiment_id}")
        doc = client.http.json("GET", f"/v1/experiments/{experiment_id}/results")
        plots = client.http.json("GET", f"/v1/experiments/{experiment_id}/plots")
        run = self.mlflow.create_run(self.experiment_id, run_name=experiment.get("name") or experiment_id,
                                     tags=run_tags(experiment, doc, client.url))
        run_id = run.info.run_id
        from mlflow.entities import Metric, Param, RunTag

        params = [Param(k[:250], v) for k, v in flat_params(experiment["spec"])]
        for chunk in _chunks(params, BATCH_PARAMS):
            self.mlflow.log_batch(run_id, params=chunk)
        stamp = int(time.time() * 1000)
        metrics = [Metric(key, value, stamp, step) for key, step, value in metric_points(doc)]
        for chunk in _chunks(metrics, BATCH_METRICS):
            self.mlflow.log_batch(run_id, metrics=chunk)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "plots"
            folder.mkdir()
            for plot in plots:
                png = client.http.request("GET", f"/v1/experiments/{experiment_id}/plots/{plot['name']}.png").content
                (folder / f"{plot['name']}.png").write_bytes(png)
            if plots:
                self.mlflow.log_artifacts(run_id, str(folder), artifact_path="plots")
            (Path(tmp) / "results.json").write_text(json.dumps(doc))
            self.mlflow.log_artifact(run_id, str(Path(tmp) / "results.json"))
        status = {"succeeded": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}.get(experiment["status"])
        if status is None:   # still queued or running: exported as far as it got
            self.mlflow.log_batch(run_id, tags=[RunTag("smd.partial", "true")])
            status = "FINISHED"
        self.mlflow.set_terminated(run_id, status)
        return run_id, True


def run_tags(experiment: dict[str, Any], doc: dict[str, Any], url: str) -> dict[str, str]:
    owner = experiment.get("owner")
    tags = {"smd.id": experiment["id"], "smd.kind": experiment["kind"], "smd.status": experiment["status"],
            "smd.owner": owner if isinstance(owner, str) else json.dumps(owner), "smd.name": experiment.get("name") or "",
            "smd.url": f"{url}/v1/experiments/{experiment['id']}", "smd.tags": ",".join(experiment.get("tags") or [])}
    if experiment.get("study_id"):
        tags["smd.study_id"] = experiment["study_id"]
    attempts = (doc.get("provenance") or {}).get("attempts") or []
    if attempts:
        for key, value in attempts[-1].items():
            if key not in ("number", "outcome", "resumed_from_step") and value is not None:
                tags[f"smd.provenance.{key}"] = str(value)
    return tags


def flat_params(spec: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, value as text) of every leaf of the spec; lists of numbers stay one value."""
    if isinstance(spec, dict):
        for key, value in spec.items():
            yield from flat_params(value, f"{prefix}{key}.")
    elif isinstance(spec, list) and any(isinstance(v, (dict, list)) for v in spec):
        for i, value in enumerate(spec):
            yield from flat_params(value, f"{prefix}{i}.")
    else:
        yield prefix[:-1], json.dumps(spec)[:MAX_PARAM_VALUE] if not isinstance(spec, str) else spec[:MAX_PARAM_VALUE]


def metric_points(doc: dict[str, Any]) -> Iterator[tuple[str, int, float]]:
    """(key, step, value) of every number in the document's series, layers, theory and summary."""
    steps = doc["series"].get("step", [])

    def points(key: str, values: list[Any]) -> Iterator[tuple[str, int, float]]:
        for step, value in zip(steps, values, strict=False):
            if _number(value):
                yield key, int(step), float(value)

    for name, values in doc["series"].items():
        if name != "step":
            yield from points(name, values)
    for layer, metrics in doc.get("layers", {}).items():
        for name, values in metrics.items():
            yield from points(f"{layer}/{name}", values)
    for name, value in doc.get("theory", {}).items():
        if isinstance(value, list):
            yield from points(f"theory/{name}", value)
        elif _number(value):
            yield f"theory/{name}", 0, float(value)
    for name, value in doc.get("summary", {}).items():
        if _number(value):
            yield f"summary/{name}", 0, float(value)


def _number(value: Any) -> bool:
    """A number MLflow can store (lists, per-trial points and nulls are left out)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
