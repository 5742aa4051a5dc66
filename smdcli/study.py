"""`smd study`: run a study here without the service (`run`), or drive the service's studies over HTTP
(`submit`, `status`, `table`, `cancel`).

    smd study run STUDY.json -o DIR [-j N] [--quiet] [--no-limit]
    smd study submit STUDY.json [--follow] [--visibility private|lab] [--priority low|normal|high]
    smd study status ID
    smd study table ID [--group point] [--json | --csv] [-o FILE]
    smd study cancel ID

`run` writes to DIR: ``children/<index>.json`` (result documents, as ``smd run -o`` writes them),
``table.json`` ({"columns", "rows"}: one row per child), ``table.csv``, ``table_by_point.csv`` (mean and
standard error over seeds), and the plots: ``overlay_<metric>.png`` for every metric with a theory,
``heatmap_<metric>.png`` over the first two numeric axes (when there are two), and
``scatter_<metric>_intrinsic_lr.png`` when ηλ varies. Each child is seeded by its own spec, so the
results do not depend on N. Exit status: 0 all children succeeded, 1 one failed, 2 a bad study (or its data not
here), 3 over the service's limits (SMD_MAX_STUDY_POINTS, SMD_MAX_WORK) without --no-limit.

The remote commands talk to ``SMD_URL`` (default http://127.0.0.1:8000) with ``SMD_KEY`` as bearer
key, through :class:`smdlab.Client` (:mod:`smdcli.service`).
Exit status: 0 done, 1 an HTTP or connection error, 2 a rejected study (422), 3 over quota (429);
``--follow`` ends with 0 succeeded, 1 failed or partial, 2 cancelled.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing.managers import SyncManager
from pathlib import Path
from typing import Any

from tqdm import tqdm

from smdcli.paths import count, output_dir, output_file, read_object, resource_id
from smdcli.remote import eta_text
from smdlab.options import STUDY_OPTIONS
from store.settings import get_settings

END_STATUSES = {"succeeded": 0, "failed": 1, "partial": 1, "cancelled": 2}
OVERLAY_MAX_CHILDREN = 200                   # most lines drawn on one overlay


def add_parsers(sub: argparse._SubParsersAction) -> None:
    study = sub.add_parser("study", help="studies: run one locally, or submit/status/table/cancel on the service")
    cmds = study.add_subparsers(dest="study_command", required=True)
    run = cmds.add_parser("run", help="run a study here with the engine, no service")
    run.add_argument("study", type=Path, help="study spec (JSON file, or - for stdin)")
    run.add_argument("-o", "--output", type=output_dir, required=True, help="directory for children, tables and plots")
    run.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default 1: in this process)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--no-limit", action="store_true",
                     help="run a study over the service's limits too (SMD_MAX_STUDY_POINTS children, SMD_MAX_WORK "
                          "work in all); without it such a study is refused (exit 3), as the service would refuse it")
    submit = cmds.add_parser("submit", help="POST the study to the service; prints its id")
    submit.add_argument("study", type=Path, help="study spec (JSON file, or - for stdin)")
    submit.add_argument("--follow", action="store_true", help="then show its progress until it ends")
    submit.add_argument("--visibility", choices=["private", "lab"], help="overrides the file's")
    submit.add_argument("--priority", choices=["low", "normal", "high"], help="overrides the file's (high: admins)")
    submit.add_argument("--quiet", action="store_true", help="with --follow: no progress bar")
    status = cmds.add_parser("status", help="a study's status, counts, progress and ETA")
    status.add_argument("id", type=resource_id)
    status.add_argument("--json", action="store_true", help="print the service's JSON")
    status.add_argument("--follow", action="store_true", help="show its progress until it ends")
    status.add_argument("--quiet", action="store_true", help="with --follow: no progress bar")
    table = cmds.add_parser("table", help="a study's table: aligned text, or the service's JSON (--json) or CSV (--csv)")
    table.add_argument("id", type=resource_id)
    table.add_argument("--group", choices=["point"], help="one row per point: mean and standard error over seeds")
    form = table.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="the service's JSON (columns, rows, checks) instead of text")
    form.add_argument("--csv", action="store_true", help="CSV instead of text")
    table.add_argument("-o", "--output", type=output_file, help="file to write (default: stdout)")
    cancel = cmds.add_parser("cancel", help="cancel every unfinished child of a study")
    cancel.add_argument("id", type=resource_id)


def main(args: argparse.Namespace, data_dir: str | None = None) -> int:
    if args.study_command == "run":
        return run_local(args.study, args.output, jobs=args.jobs, quiet=args.quiet, data_dir=data_dir,
                         no_limit=args.no_limit)
    from smdcli.service import call

    def remote(client: Any) -> int:
        if args.study_command == "submit":
            return submit(client, args)
        if args.study_command == "status":
            if args.follow:
                return follow(client, args.id, quiet=args.quiet)
            return show_status(client, args.id, raw=args.json)
        if args.study_command == "table":
            return table(client, args.id, group=args.group, as_csv=args.csv, output=args.output, as_json=args.json)
        return cancel(client, args.id)

    return call("smd study", remote)


# ============================================================================ smd study run


def read_study(path: Path) -> dict[str, Any] | None:
    """A study file (or - for stdin) as a JSON object; None, with the reason on stderr, when it is not one."""
    data = read_object(path, "smd study", "study")
    if data is None:
        return None
    from smdcli.service import non_finite

    where = non_finite(data)
    if where is not None:
        print(f"smd study: {path}: {where}: expected a finite number, got NaN or Infinity", file=sys.stderr)
        return None
    return data


def run_local(path: Path, out_dir: Path, jobs: int = 1, quiet: bool = False, data_dir: str | None = None,
              no_limit: bool = False) -> int:
    """Expand, run every child (``jobs`` processes), write the documents, tables and plots."""
    data = read_study(path)
    if data is None:
        return 2
    return run_study(data, out_dir, jobs=jobs, quiet=quiet, data_dir=data_dir, no_limit=no_limit).status


@dataclass
class LocalRun:
    """What :func:`run_study` did: its exit status, and (unless the study was refused) the study,
    its children in expansion order and their result documents (as written to children/)."""

    status: int
    study: Any = None
    children: list[Any] = field(default_factory=list)
    docs: list[dict[str, Any]] = field(default_factory=list)


def run_study(data: dict[str, Any], out_dir: Path, jobs: int = 1, quiet: bool = False,
              data_dir: str | None = None, no_limit: bool = False) -> LocalRun:
    """`smd study run` on a study given as a dict (`smd presets run --local` builds one): status 2
    and nothing run for a bad study, 3 for one over the service's limits (unless ``no_limit``), else 0, or 1
    when a child failed."""
    from pydantic import ValidationError

    import smdengine

    if jobs < 1:
        print("smd study: -j: expected at least 1", file=sys.stderr)
        return LocalRun(2)
    settings = get_settings()
    try:
        study = smdengine.StudySpec.model_validate({k: v for k, v in data.items() if k not in STUDY_OPTIONS})
        # the service's limit, checked before 10⁶ children are built
        children = smdengine.expand_study(study, max_children=None if no_limit else settings.max_study_points)
    except ValidationError as exc:
        print_errors([{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()])
        return LocalRun(2)
    except smdengine.StudyError as exc:
        if exc.errors[0].get("type") == "too_many_points":
            print(f"smd study: refused: {count(study.size(), 'child', 'children')} (points × seeds), over the "
                  f"service's limit of {settings.max_study_points:,} (SMD_MAX_STUDY_POINTS): make it smaller, or pass "
                  "--no-limit to run it here anyway", file=sys.stderr)
            return LocalRun(3)
        print_errors(exc.errors)
        return LocalRun(2)
    work = sum(c.spec.work for c in children)
    if work > settings.max_work and not no_limit:   # a typo's extra zeros: refused at once, as smd run and the service
        print(f"smd study: refused: its {count(len(children), 'child', 'children')} need {work:,} work together "
              f"({smdengine.WORK_UNITS}), over the limit {settings.max_work:,} "
              "(SMD_MAX_WORK, the service's default quota): make it smaller, or pass --no-limit to run it here anyway",
              file=sys.stderr)
        return LocalRun(3)
    missing = {c.point: (c, problem) for c in children if (problem := c.spec.missing_data(data_dir)) is not None}
    if missing:   # said now (after the limits, as smd run), not child by child seconds into the run
        print_errors([{"loc": ["point", point, *problem["field"].split(".")], "point": {"index": point, "values": c.values},
                       "msg": f"not available here: {problem['message'].removeprefix('dataset: ')}"}
                      for point, (c, problem) in sorted(missing.items())], "its data is not here")
        return LocalRun(2)
    out_dir = Path(out_dir)
    (out_dir / "children").mkdir(parents=True, exist_ok=True)
    points, seeds = len({c.point for c in children}), len({c.seed for c in children})
    print(f"smd study: {count(len(children), 'child', 'children')} ({count(points, 'point')} × {count(seeds, 'seed')}), "
          f"{count(jobs, 'process', 'processes')}", file=sys.stderr)
    bar = study_bar(quiet, f"0/{len(children)} children ended", " [{elapsed}<{remaining}]")
    specs = [(c.index, c.spec.model_dump(mode="json")) for c in children]
    try:
        results = _run_children(specs, jobs, bar, data_dir, fuse=study.fuse,
                                steps={c.index: c.spec.params.steps for c in children})
    except KeyboardInterrupt:
        bar.close()
        print("smd study: interrupted", file=sys.stderr)
        return LocalRun(130)
    bar.close()
    from smdcli.local import local_document

    docs: list[dict[str, Any]] = []
    for child in children:
        spec = child.spec.model_dump(mode="json")
        document, error = results[child.index]
        doc = local_document(child.spec.kind, spec, document if error is None else None)
        if error is not None:
            doc["error"] = error
            print(f"smd study: child {child.index} (point {child.point} {_point_text(child.values)}, "
                  f"seed {child.seed}) failed: {error}", file=sys.stderr)
        (out_dir / "children" / f"{child.index}.json").write_text(json.dumps(doc, allow_nan=False), encoding="utf-8")
        docs.append(doc)
    failed = write_outputs(out_dir, study, children, docs)
    print(f"smd study: wrote {out_dir} ({len(children) - failed} succeeded, {failed} failed)", file=sys.stderr)
    return LocalRun(1 if failed else 0, study, list(children), docs)


def print_errors(errors: list[dict[str, Any]], heading: str = "the study is not valid") -> None:
    from smdcli.service import error_line

    print(f"smd study: {heading}:", file=sys.stderr)
    for e in errors:
        print(f"  {error_line(list(e.get('loc', [])), str(e.get('msg')), e.get('point'))}", file=sys.stderr)


def _point_text(values: dict[str, Any]) -> str:
    from smdlab.errors import values_text

    return values_text(values)


Unit = list[tuple[int, dict]]   # children run together: one, or a fused batch


def batches(specs: Unit, jobs: int, fuse: bool) -> list[Unit]:
    """The children as units of work: those of equal ``smdengine.fuse_key`` together (a fused batch,
    whose results are bit for bit those of each child alone), each such group cut into ``jobs`` parts
    so that every process gets a share; the others alone. In the order of their first child."""
    import smdengine

    groups: dict[str, Unit] = {}
    units: list[Unit] = []
    for index, spec in specs:
        key = smdengine.fuse_key(spec) if fuse else None
        if key is None:
            units.append([(index, spec)])
        elif key in groups:
            groups[key].append((index, spec))
        else:
            groups[key] = [(index, spec)]
            units.append(groups[key])
    out: list[Unit] = []
    for unit in units:
        parts = min(jobs, len(unit))
        size = -(-len(unit) // parts)
        out.extend(unit[i:i + size] for i in range(0, len(unit), size))
    return out


def study_bar(quiet: bool, desc: str, times: str = "") -> tqdm:
    """A study's bar on stderr, on a terminal only: its progress in % of its steps (as the service counts it: a
    child of 10× the steps weighs 10×), then ``desc`` (its children ended; in desc: tqdm writes a postfix after
    ", ") and ``times`` (tqdm's fields, e.g. " [{elapsed}<{remaining}]"). Its n is set to the %, not updated."""
    return tqdm(total=100, desc=desc, file=sys.stderr, dynamic_ncols=True, disable=quiet or not sys.stderr.isatty(),
                bar_format="{percentage:3.0f}%|{bar}| {desc}" + times)


def study_progress(steps: dict[int, int], fraction: dict[int, float], succeeded: Iterable[int]) -> float:
    """The fraction of a study's steps done, 0 to 1, as the service counts it: each child's ``steps`` (by
    index), all of them once it succeeded, else its last reported ``fraction`` (a failed child's steps not done
    stay in the total: a study with a failure ends under 1)."""
    whole = set(succeeded)
    total = sum(steps.values())
    done = sum(n * (1.0 if i in whole else min(1.0, fraction.get(i, 0.0))) for i, n in steps.items())
    return done / total if total else 1.0


def _run_children(specs: Unit, jobs: int, bar: tqdm, data_dir: str | None, fuse: bool,
                  steps: dict[int, int]) -> dict[int, tuple[dict | None, str | None]]:
    """{index: (document, error)} for every child; the bar (total 100) shows the % of the children's ``steps``
    (by index) done (:func:`study_progress`) and the children ended."""
    done: dict[int, tuple[dict | None, str | None]] = {}
    fraction: dict[int, float] = {}
    units = batches(specs, jobs, fuse)

    def show() -> None:
        bar.n = min(100.0, 100 * study_progress(steps, fraction, (i for i, (_, error) in done.items() if error is None)))
        bar.set_description_str(f"{len(done)}/{len(specs)} children ended", refresh=False)
        bar.refresh()

    if jobs == 1:
        for unit in units:
            def on_progress(index: int, value: float) -> None:
                fraction[index] = value
                show()
            done.update(run_unit(unit, data_dir, on_progress))
            show()
        return done
    context = multiprocessing.get_context("spawn")
    # Ctrl-C reaches every process of the terminal's group: the manager (the progress queue) lives on until the
    # pool is down, and each worker ends at once and quietly (_init_worker); the queue's end had made each
    # worker print a traceback after "interrupted"
    manager = SyncManager(ctx=context)
    manager.start(initializer=signal.signal, initargs=(signal.SIGINT, signal.SIG_IGN))
    with manager:
        queue = manager.Queue()
        with ProcessPoolExecutor(max_workers=min(jobs, len(specs)), mp_context=context,
                                 initializer=_init_worker) as pool:
            futures: dict[Future, Unit] = {pool.submit(_unit_in_worker, unit, data_dir, queue): unit
                                           for unit in units}
            pending = set(futures)
            try:
                while pending:
                    finished, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                    for future in finished:
                        try:
                            done.update(future.result())
                        except Exception as exc:   # a worker that died (BrokenProcessPool, …): its children failed
                            done.update({i: (None, f"{type(exc).__name__}: {exc}") for i, _ in futures[future]})
                    while not queue.empty():
                        index, value = queue.get_nowait()
                        fraction[index] = value
                    show()
            except KeyboardInterrupt:   # start no other child
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    return done


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, _interrupted_worker)


def _interrupted_worker(signum: int, frame: Any) -> None:
    os._exit(130)   # Ctrl-C: its unit's results are dropped with the run; the parent says "interrupted"


def _unit_in_worker(unit: Unit, data_dir: str | None, queue: Any) -> dict[int, tuple[dict | None, str | None]]:
    last: dict[int, float] = {}

    def on_progress(index: int, value: float) -> None:
        now = time.monotonic()
        if now - last.get(index, 0.0) > 0.2 or value >= 1.0:
            last[index] = now
            queue.put((index, value))

    return run_unit(unit, data_dir, on_progress)


def run_unit(unit: Unit, data_dir: str | None, on_progress: Any) -> dict[int, tuple[dict | None, str | None]]:
    """{index: (document, error)} of a unit of :func:`batches`, ``on_progress(index, fraction)``. A fused
    batch that fails runs again child by child, so that a child's failure is its own."""
    import smdengine

    if len(unit) > 1:
        callbacks = [lambda progress, i=index: on_progress(i, progress.fraction) for index, _ in unit]
        try:
            results = smdengine.run_fused([spec for _, spec in unit], on_progress=callbacks, data_dir=data_dir)
            return {index: (result.to_document(), None) for (index, _), result in zip(unit, results, strict=True)
                    if result is not None}
        except (RuntimeError, ValueError, ArithmeticError, MemoryError):
            pass
    return {index: run_child(spec, data_dir, lambda progress, i=index: on_progress(i, progress.fraction))
            for index, spec in unit}


def run_child(spec: dict, data_dir: str | None, on_progress: Any = None) -> tuple[dict | None, str | None]:
    """(result document without id/kind/status/spec, None), or (None, the error) when the run fails."""
    import smdengine

    try:
        return smdengine.run(spec, on_progress=on_progress, data_dir=data_dir).to_document(), None
    except (RuntimeError, ValueError, ArithmeticError, MemoryError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------------------- tables and plots


def child_records(children: list[Any], docs: list[dict[str, Any]]) -> list[Any]:
    """The engine's ChildRecord of each child, from its result document."""
    import smdengine

    return [smdengine.ChildRecord(index=c.index, point=c.point, values=c.values, seed=c.seed,
                                  status=doc["status"], spec=doc["spec"], summary=doc.get("summary"),
                                  theory=doc.get("theory"), experiment_id=None)
            for c, doc in zip(children, docs, strict=True)]


def write_outputs(out_dir: Path, study: Any, children: list[Any], docs: list[dict[str, Any]]) -> int:
    """Write the tables and plots of the children's documents; returns how many children failed."""
    import smdengine

    rows = smdengine.study_table(child_records(children, docs))
    columns = smdengine.table_columns(rows)
    (out_dir / "table.json").write_text(json.dumps({"columns": columns, "rows": rows}, allow_nan=False),
                                        encoding="utf-8")
    (out_dir / "table.csv").write_bytes(_csv(rows))
    axes = study.axes()
    grouped = smdengine.group_by_point(rows, axes)
    (out_dir / "table_by_point.csv").write_bytes(_csv(grouped))
    write_plots(out_dir, study, children, docs, rows, grouped)
    return sum(doc["status"] != "succeeded" for doc in docs)


def _csv(rows: list[dict[str, Any]]) -> bytes:
    """The table as the service's ``table.csv`` writes it (smdrender.tables.rows_to_csv)."""
    import smdengine
    from smdrender.tables import rows_to_csv

    return rows_to_csv(smdengine.table_columns(rows), rows)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def write_plots(out_dir: Path, study: Any, children: list[Any], docs: list[dict[str, Any]],
                rows: list[dict[str, Any]], grouped: list[dict[str, Any]]) -> list[Path]:
    """overlay_<metric>.png for every metric with a theory; heatmap_<metric>.png over the first two
    numeric axes; scatter_<metric>_intrinsic_lr.png when ηλ varies."""
    import smdengine
    from smdrender import labels, study_plots

    ok = [(c, d) for c, d in zip(children, docs, strict=True) if d["status"] == "succeeded"]
    if not ok:
        return []
    kind, spec0 = ok[0][1]["kind"], ok[0][1]["spec"]
    metrics = {m: smdengine.theory_of(kind, spec0, m) for m in ok[0][1].get("series", {}) if m != "step"}
    metrics = {m: t for m, t in metrics.items() if t is not None}
    several_seeds = len({c.seed for c in children}) > 1
    written = []

    def save(name: str, data: bytes) -> None:
        (out_dir / name).write_bytes(data)
        written.append(out_dir / name)

    for metric, theory in metrics.items():
        lines = []
        for child, doc in ok[:OVERLAY_MAX_CHILDREN]:
            steps = doc["series"].get("step", [])
            y = doc["series"].get(metric) or []
            t = doc.get("theory", {}).get(theory)
            curve = t if isinstance(t, list) else ([t] * len(steps) if _number(t) else None)
            label = labels.point_label(child.values) or f"child {child.index}"
            lines.append({"label": label + (f", seed {child.seed}" if several_seeds else ""),
                          "x": steps, "y": y, "theory": curve})
        save(f"overlay_{metric}.png", study_plots.overlay(lines, metric, "step", "png"))
    pair = heatmap_axes(study, grouped)
    if pair:
        for metric, theory in metrics.items():
            save(f"heatmap_{metric}.png", study_plots.heatmap(grouped, pair[0], pair[1], metric, theory, "png",
                                                                    study_axes=study.axes()))
    if len({r.get("intrinsic_lr") for r in grouped if _number(r.get("intrinsic_lr"))}) > 1:
        xs = [r["intrinsic_lr"] for r in grouped if _number(r.get("intrinsic_lr"))]
        grid = smdengine.curve_grid(min(xs), max(xs))
        # one candidate curve per combination of the axes a curve along ηλ holds fixed, kept where they differ
        # (as the service's scatter: api.routes.studies.scatter_curves)
        fixed = smdengine.curve_axes(list(dict.fromkeys(k for child, _ in ok for k in child.values)), "intrinsic_lr")
        points: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        for child, doc in ok:
            points.setdefault(repr([child.values.get(a) for a in fixed]),
                              ({a: child.values.get(a) for a in fixed}, doc["spec"]))
        every = [values for values, _ in points.values()]
        for metric, theory in metrics.items():
            found = smdengine.theory_curves([(key, spec) for key, (_, spec) in points.items()], "intrinsic_lr",
                                            metric, grid)
            curves = [(labels.curve_label([points[k][0] for k in keys], fixed, every), curve_xs, ys)
                      for keys, curve_xs, ys in found]
            save(f"scatter_{metric}_intrinsic_lr.png",
                 study_plots.scatter(grouped, "intrinsic_lr", metric, theory, curves, "png"))
    return written


def heatmap_axes(study: Any, grouped: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The first two numeric axes that vary independently: the grid's (a zip counts as its first
    axis), or a points study's whose values fill a grid (points that move two axes together, e.g. momentum
    with init_std, drew a mostly empty diagonal); None when there are no such two."""
    if study.points is not None:
        candidates = study.axes()
    else:
        candidates = [*study.grid, *list(study.zip)[:1]]
    numeric = [a for a in candidates
               if grouped and all(_number(r.get(a)) for r in grouped) and len({r.get(a) for r in grouped}) > 1]
    if study.points is None:
        return (numeric[0], numeric[1]) if len(numeric) >= 2 else None
    for i, x in enumerate(numeric):
        for y in numeric[i + 1:]:
            cells = {(r.get(x), r.get(y)) for r in grouped}
            if len(cells) == len({c[0] for c in cells}) * len({c[1] for c in cells}):
                return x, y
    return None


# ============================================================================ the service over HTTP


def submit(client: Any, args: argparse.Namespace) -> int:
    body = read_study(args.study)
    if body is None:
        return 2
    for key in STUDY_OPTIONS:
        if getattr(args, key):
            body[key] = getattr(args, key)
    study = client.http.json("POST", "/v1/studies", json=body)
    print(study["id"])
    print(f"smd study: submitted {study['id']}: {_child_count(study)} children, {study.get('status')}",
          file=sys.stderr)
    if args.follow:
        return follow(client, study["id"], quiet=args.quiet)
    return 0


def _child_count(study: dict[str, Any]) -> int:
    return int(study.get("children_count") or 0)


def _ended(study: dict[str, Any]) -> int:
    counts = study.get("counts") or {}
    return sum(int(counts.get(s, 0) or 0) for s in ("succeeded", "failed", "cancelled"))


def show_status(client: Any, study_id: str, raw: bool = False) -> int:
    study = client.get_study(study_id).data
    if raw:
        print(json.dumps(study, indent=2))
        return 0
    counts = ", ".join(f"{k} {v}" for k, v in (study.get("counts") or {}).items() if v)
    progress = study.get("progress")
    lines = [f"{study.get('id')}  {study.get('name') or ''}".rstrip(),
             f"  status    {study.get('status')}" + ("  (cancel requested)" if study.get("cancel_requested") else ""),
             f"  children  {_child_count(study)}" + (f": {counts}" if counts else ""),
             f"  progress  {100 * progress:.1f}%" if _number(progress) else "  progress  —",
             f"  {eta_text(study.get('eta_seconds'))}" if study.get("status") in ("queued", "running") else
             f"  finished  {study.get('finished_at') or '—'}",
             f"  owner     {study.get('owner')}, {study.get('visibility')}, priority {study.get('priority')}",
             f"  axes      {', '.join(study.get('axes') or [])}"]
    print("\n".join(lines))
    return 0


def follow(client: Any, study_id: str, quiet: bool = False, interval: float = 1.0) -> int:
    """Poll the study (If-None-Match) every ``interval`` seconds with a bar over its children until it
    ends, riding out an outage of the service (said once); the exit status of its final status."""
    etag: str | None = None
    study: dict[str, Any] = {}
    bar: tqdm | None = None
    try:
        while True:
            response = client.http.outlast("GET", f"/v1/studies/{study_id}", deadline=None,   # rides out a restart
                                           headers={"If-None-Match": etag} if etag else None)
            if response.status_code != 304:
                etag = response.headers.get("etag")
                study = response.json()
                total = _child_count(study) or 1
                if bar is None:   # its ETA is the service's, said in desc
                    bar = study_bar(quiet, "")
                progress = study.get("progress")
                bar.n = min(100.0, 100 * progress if _number(progress) else 100 * _ended(study) / total)
                bar.set_description_str(f"{_ended(study)}/{total} children ended, {study.get('status')}, "
                                        f"{eta_text(study.get('eta_seconds'))}", refresh=False)
                bar.refresh()
            if study.get("status") in END_STATUSES:
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        print(f"smd study: stopped following {study_id} (the study goes on)", file=sys.stderr)
        return 130
    if bar is not None:
        bar.close()
    counts = ", ".join(f"{k} {v}" for k, v in (study.get("counts") or {}).items() if v)
    print(f"smd study: {study_id} {study.get('status')} ({counts})", file=sys.stderr)
    return END_STATUSES[study["status"]]


def table(client: Any, study_id: str, group: str | None = None, as_csv: bool = False,
          output: Path | None = None, as_json: bool = False) -> int:
    path = f"/v1/studies/{study_id}/table" + (".csv" if as_csv else "")
    body = client.http.request("GET", path, params={"group": group} if group else None).content
    if as_json:
        body = (json.dumps(json.loads(body), indent=2) + "\n").encode("utf-8")
    elif not as_csv:
        served = json.loads(body)
        body = text_table(served["columns"], served["rows"]).encode("utf-8")
    if output is None:
        sys.stdout.buffer.write(body)
        sys.stdout.flush()
    else:
        Path(output).write_bytes(body)
        print(f"smd study: wrote {output}", file=sys.stderr)
    return 0


def text_table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    """The table aligned for a terminal: a header of the columns, numbers to 4 significant digits, "—" where a
    child has no value (still running, failed, or not of that kind), warnings by their codes in the last column;
    the experiment ids and the warnings' messages left to --json and --csv."""
    # the warnings by their codes, last (their messages, ~240 characters each, made 557-character lines)
    shown = [c for c in columns if c not in ("experiment_id", "warnings")] + (["warnings"] if "warnings" in columns
                                                                               else [])

    from smdrender.labels import legend_value

    def cell(value: Any, column: str) -> str:   # as legends write values: floats to 4 digits, lists as JSON
        if column == "warnings" and isinstance(value, str):
            return ",".join(w.split(":", 1)[0] for w in value.split(" | ") if w) or "—"
        return "—" if value is None else legend_value(value)

    cells = [shown, *[[cell(row.get(c), c) for c in shown] for row in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(shown))]
    return "".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() + "\n" for line in cells)


def cancel(client: Any, study_id: str) -> int:
    if client.get_study(study_id).data.get("cancel_requested"):   # asked twice: done, not an error
        print(f"smd study: {study_id} cancel requested (already)", file=sys.stderr)
        return 0
    study = client.http.json("POST", f"/v1/studies/{study_id}/cancel")
    status = study.get("status") if isinstance(study, dict) else None
    print(f"smd study: cancel requested for {study_id}" + (f" ({status})" if status else ""), file=sys.stderr)
    return 0
