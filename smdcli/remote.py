"""The remote CLI: experiments on the service, through :class:`smdlab.Client` (SMD_URL, SMD_KEY).

    smd submit SPEC.json [--follow] [--name N] [--keep-checkpoint]   prints the new id
    smd status ID                    one experiment: status, progress, error
    smd follow ID [--quiet]          a progress bar until it ends
    smd results ID [-o FILE] [--csv] the result document (JSON), or the series as CSV
    smd cancel ID
    smd ls [--status S] [--kind K] [--tag T ...] [--name TEXT] [--limit N]
    smd rerun ID --set params.lr=0.2 [--set seed=4 ...] [--keep-checkpoint] [--follow]
    smd continue ID --steps N [--follow]   N more steps of a succeeded run that kept its checkpoint

Exit status: 0 done (``follow``: the experiment succeeded), 1 an HTTP or connection error (``follow``:
it failed), 2 a rejected spec or override (422; ``follow``: it was cancelled), 3 over a quota (429).
``smd run`` stays the local, service-free path.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from smdcli.paths import output_file, read_object, resource_id

FOLLOW_EXIT = {"succeeded": 0, "failed": 1, "cancelled": 2}
COMMANDS = ("submit", "status", "follow", "results", "cancel", "ls", "rerun", "continue")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    submit = sub.add_parser("submit", help="submit a spec to the service (SMD_URL); prints its id")
    submit.add_argument("spec", type=Path, help="experiment spec (JSON file, or - for stdin)")
    submit.add_argument("--name", help="the experiment's name")
    submit.add_argument("--visibility", choices=["private", "lab"])
    submit.add_argument("--priority", choices=["low", "normal", "high"], help="default normal; high: admins")
    submit.add_argument("--keep-checkpoint", action="store_true", help="keep the final state (to continue it)")
    submit.add_argument("--tag", dest="tags", action="append", metavar="TAG",
                        help="repeatable: tags to find it by (smd ls --tag); added to the spec file's")
    submit.add_argument("--note", help="a free-text note (replaces the spec file's)")
    _follow_flags(submit)
    status = sub.add_parser("status", help="an experiment's status and progress")
    status.add_argument("id", type=resource_id)
    follow = sub.add_parser("follow", help="a progress bar until the experiment ends (exit 0/1/2)")
    follow.add_argument("id", type=resource_id)
    follow.add_argument("--quiet", action="store_true", help="no progress bar")
    results = sub.add_parser("results", help="an experiment's result document (or its series as CSV)")
    results.add_argument("id", type=resource_id)
    results.add_argument("-o", "--output", type=output_file, help="file to write (default: stdout)")
    results.add_argument("--csv", action="store_true", help="the series as CSV, one row per recorded step")
    cancel = sub.add_parser("cancel", help="cancel an experiment")
    cancel.add_argument("id", type=resource_id)
    ls = sub.add_parser("ls", help="list experiments, newest first")
    ls.add_argument("--status", help="queued, running, succeeded, failed or cancelled")
    ls.add_argument("--kind", help="nrq, sde or train")
    ls.add_argument("--tag", action="append", help="repeatable: all of them")
    ls.add_argument("--name", help="name contains (any case)")
    ls.add_argument("--limit", type=_positive, default=20, help="at most this many rows (default 20)")
    rerun = sub.add_parser("rerun", help="a new experiment from one's spec with --set overrides")
    rerun.add_argument("id", type=resource_id)
    rerun.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                       help="dotted path = value (JSON, or text), e.g. params.lr=0.2; repeatable")
    rerun.add_argument("--name")
    rerun.add_argument("--visibility", choices=["private", "lab"])
    rerun.add_argument("--priority", choices=["low", "normal", "high"], help="default normal; high: admins")
    rerun.add_argument("--keep-checkpoint", action="store_true", help="keep the final state (to continue it)")
    _follow_flags(rerun)
    extend = sub.add_parser("continue", help="run a succeeded experiment further (submitted with --keep-checkpoint)")
    extend.add_argument("id", type=resource_id)
    extend.add_argument("--steps", type=int, required=True, help="how many more steps")
    _follow_flags(extend)


def _follow_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--follow", action="store_true", help="then follow it until it ends (exit 0/1/2)")
    parser.add_argument("--quiet", action="store_true", help="with --follow: no progress bar")


def main(args: argparse.Namespace) -> int:
    from smdcli.service import call

    return call(f"smd {args.command}", lambda client: _run(client, args))


def _run(client: Any, args: argparse.Namespace) -> int:
    from smdcli.service import refuse_non_finite

    command = args.command
    if command == "submit":
        spec = read_object(args.spec, "smd submit", "spec")   # refused before any request
        if spec is None:
            return 2
        refuse_non_finite("smd submit", spec, "the spec")
        options = {k: v for k, v in (("name", args.name), ("visibility", args.visibility),
                                     ("priority", args.priority)) if v is not None}
        if args.keep_checkpoint:
            options["keep_checkpoint"] = True
        if args.tags:
            given = spec.get("tags") if isinstance(spec.get("tags"), list) else []
            options["tags"] = list(dict.fromkeys([*given, *args.tags]))
        if args.note is not None:
            options["note"] = args.note
        experiment = client.submit(spec, **options)
        print(experiment.id)
        _warn("smd submit", experiment.data)
        return follow(experiment, args.quiet) if args.follow else 0
    if command == "rerun":
        overrides = dict(_assignment(item) for item in args.set)
        refuse_non_finite("smd rerun", overrides, "--set")
        experiment = client.experiment(args.id).rerun(
            overrides, name=args.name, visibility=args.visibility, priority=args.priority,
            keep_checkpoint=args.keep_checkpoint or None)
        print(experiment.id)
        _warn("smd rerun", experiment.data)
        return follow(experiment, args.quiet) if args.follow else 0
    if command == "continue":
        experiment = client.experiment(args.id).continue_(args.steps)
        data = experiment.data
        print(f"{experiment.id} {data['status']}: {data['total_steps']} steps in all", file=sys.stderr)
        _warn("smd continue", data)   # the longer run's warnings (the service recomputes them)
        return follow(experiment, args.quiet) if args.follow else 0
    experiment_id = getattr(args, "id", None)
    if command == "status":
        data = client.experiment(experiment_id).data
        print(f"{data['id']}  {data.get('name') or ''}  {data['kind']}  {data['status']}  "
              f"{100 * data['progress']:.0f}% (step {data['step']}/{data['total_steps']})")
        if data.get("eta"):
            print(eta_text(_seconds_between(data["progressed_at"], data["eta"])))
        if data.get("error"):
            print(f"error: {data['error']}")
        return 0
    if command == "follow":
        return follow(client.experiment(experiment_id), args.quiet)
    if command == "results":
        if args.csv:
            body = client.http.request("GET", f"/v1/experiments/{experiment_id}/results.csv").content
        else:
            body = (json.dumps(client.experiment(experiment_id).results(), indent=1) + "\n").encode()
        if args.output is not None:
            args.output.write_bytes(body)
            print(f"smd results: wrote {args.output}", file=sys.stderr)   # as smd run -o and smd study table -o
        else:
            sys.stdout.buffer.write(body)
        return 0
    if command == "cancel":
        experiment = client.experiment(experiment_id)
        if experiment.data["status"] == "cancelled":   # asked twice: done, not an error (scripts retry)
            print(f"{experiment_id} cancelled (already)")
            return 0
        data = experiment.cancel().data
        asked = " (cancel requested: the worker stops it shortly)" if data.get("cancel_requested") and \
            data["status"] == "running" else ""
        print(f"{experiment_id} {data['status']}{asked}")
        return 0
    if command == "ls":
        rows = []
        for experiment in client.experiments(status=args.status, kind=args.kind, tag=args.tag, name=args.name,
                                             limit=args.limit):
            d = experiment.data
            rows.append((d["id"], (d.get("name") or "")[:30], d["kind"], d["status"], f"{100 * d['progress']:.0f}%",
                         str(d.get("created_at", ""))[:19]))
        header = ("ID", "NAME", "KIND", "STATUS", "PROGRESS", "CREATED")
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        return 0
    raise AssertionError(command)


def eta_text(seconds: float | None) -> str:
    """"eta 14:05:09 (in 0:02:31)" for an estimate of the service's seconds to go, the time on this host's clock
    (only an interval crosses hosts: the service's times are on its database's clock); "eta —" without one."""
    if seconds is None:
        return "eta —"
    left = max(0, round(seconds))
    when = datetime.now().astimezone() + timedelta(seconds=left)
    return f"eta {when.strftime('%H:%M:%S')} (in {left // 3600}:{left // 60 % 60:02d}:{left % 60:02d})"


def _seconds_between(earlier: str, later: str) -> float:
    """Seconds from one of the service's times (RFC 3339) to another."""
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


def follow(experiment: Any, quiet: bool = False) -> int:
    """Follow until it ends; 0 succeeded, 1 failed, 2 cancelled (its status, and error, on stderr)."""
    experiment.wait(progress=not quiet and sys.stderr.isatty())
    data = experiment.data
    print(f"{experiment.id} {data['status']}" + (f": {data['error']}" if data.get("error") else ""), file=sys.stderr)
    return FOLLOW_EXIT[data["status"]]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {text!r}")
    return value


def _warn(prog: str, data: dict[str, Any]) -> None:
    """The spec's warnings (what its results leave out, a sparse or unsettled summary tail), as smd run says them;
    and that no
    worker serves its queue now (a cuda job where no GPU worker runs waited without a word)."""
    for warning in data.get("warnings") or []:
        print(f"{prog}: warning: {warning.get('code')}: {warning.get('message')}", file=sys.stderr)
    if data.get("queue_processes") == 0:
        print(f"{prog}: warning: no worker serves the {data.get('queue')} queue now (one still starting has not said "
              f"so yet): the job waits until one starts (smd worker with SMD_WORKER_QUEUES={data.get('queue')}; "
              "GET /v1/queue)", file=sys.stderr)


def _assignment(item: str) -> tuple[str, Any]:
    path, sep, text = item.partition("=")
    if not sep or not path:
        print(f"smd rerun: --set: expected PATH=VALUE, got {item!r}", file=sys.stderr)
        raise SystemExit(2)   # a usage error, as argparse's own
    try:
        return path, json.loads(text)
    except ValueError:
        return path, text
