"""`smd presets`: the seeds' figures as named studies with checks (`smdengine.PRESETS`).

    smd presets list [--remote] [--json]
    smd presets show ID [--remote] [--json]
    smd presets run ID [--size quick] [--seeds 0 1] [--set PATH=VALUE ...] [--follow] [--quiet]
                       [--visibility private|lab] [--priority low|normal]
    smd presets run ID --local -o DIR [--size quick] [--seeds ...] [--set ...] [-j N] [--quiet]

`list` and `show` read this installation's engine, or the service's catalog with ``--remote``.
`run` submits the preset's study to the service (``SMD_URL``, ``SMD_KEY``, as `smd study submit`),
prints its id, and with ``--follow`` shows its progress and then its checks. `run --local` runs the
study here with no service (as `smd study run`: children, tables and plots in DIR), then evaluates
the checks on the results and writes ``checks.json`` and ``figure.png`` into DIR and prints the
verdicts. ``--set path=value`` overrides a value of the base run, by its path in an experiment spec (the
value read as JSON when it parses, else as a string), e.g. ``--set params.steps=2000``.

Exit status: 0 done (whatever the verdicts), 1 a failed run or an HTTP/connection error, 2 bad input
(an unknown preset or size, a rejected override: 404/422), 3 over quota (429); ``--follow`` ends
with 0 succeeded, 1 failed or partial, 2 cancelled.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from smdcli import study as studycli
from smdcli.paths import output_dir


def add_parsers(sub: argparse._SubParsersAction) -> None:
    presets = sub.add_parser("presets", help="the seeds' figures as studies with checks: list, show, run")
    cmds = presets.add_subparsers(dest="presets_command", required=True)
    listing = cmds.add_parser("list", help="every preset: id, tier, seed figure, title, sizes")
    listing.add_argument("--remote", action="store_true", help="the service's catalog (SMD_URL) instead of this engine's")
    listing.add_argument("--json", action="store_true", help="print the catalog as JSON")
    show = cmds.add_parser("show", help="one preset: description, checks, sizes and the study each expands to")
    show.add_argument("id")
    show.add_argument("--remote", action="store_true", help="the service's catalog (SMD_URL) instead of this engine's")
    show.add_argument("--json", action="store_true", help="print the preset as JSON")
    run = cmds.add_parser("run", help="run a preset on the service, or here with --local")
    run.add_argument("id")
    run.add_argument("--size", default="quick", help="a size of the preset (default quick)")
    run.add_argument("--seeds", type=int, nargs="+", help="replace the preset's seeds")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                     help="override a value of the base run by its spec path, e.g. params.steps=2000 (repeatable); "
                          "VALUE is read as JSON if it parses")
    run.add_argument("--follow", action="store_true", help="(service) show its progress until it ends, then its checks")
    run.add_argument("--visibility", choices=["private", "lab"], help="(service) default private")
    run.add_argument("--priority", choices=["low", "normal", "high"], help="(service) default normal; high: admins")
    run.add_argument("--local", action="store_true", help="run here with the engine, no service (needs -o)")
    run.add_argument("-o", "--output", type=output_dir, help="(--local) directory for the runs, tables, checks.json, figure.png")
    run.add_argument("-j", "--jobs", type=int, default=1, help="(--local) worker processes (default 1)")
    run.add_argument("--no-limit", action="store_true", help="(--local) run it over the service's limits too "
                                                             "(SMD_MAX_STUDY_POINTS, SMD_MAX_WORK); refused without it")
    run.add_argument("--quiet", action="store_true", help="no progress bar")


def main(args: argparse.Namespace, data_dir: str | None = None) -> int:
    command = args.presets_command
    if command == "run":
        try:
            overrides = parse_overrides(args.overrides)
        except ValueError as exc:
            print(f"smd presets: {exc}", file=sys.stderr)
            return 2
        from smdcli.service import refuse_non_finite

        refuse_non_finite("smd presets", overrides, "--set")
        # a flag of the other mode was silently dropped: -o without --local submitted the whole preset
        wrong = ([f for f, given in (("-o", args.output), ("-j", args.jobs != 1), ("--no-limit", args.no_limit))
                  if given] if not args.local else
                 [f for f, given in (("--follow", args.follow), ("--visibility", args.visibility),
                                     ("--priority", args.priority)) if given])
        if wrong:
            mode = "a run on the service (without --local)" if args.local else "a --local run"
            print(f"smd presets: run: {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} for {mode} only",
                  file=sys.stderr)
            return 2
        if args.local:
            if args.output is None:
                print("smd presets: run --local needs -o DIR", file=sys.stderr)
                return 2
            return run_local(args.id, args.size, args.seeds, overrides, args.output, jobs=args.jobs,
                             quiet=args.quiet, data_dir=data_dir, no_limit=args.no_limit)
    if command in ("list", "show") and not args.remote:
        return list_local(args.json) if command == "list" else show_local(args.id, args.json)
    from smdcli.service import call

    def remote(client: Any) -> int:
        if command == "list":
            return print_list(client.presets(), args.json)
        if command == "show":
            return print_show(client.preset(args.id), args.json)
        return run_remote(client, args, overrides)

    return call("smd presets", remote, not_found=2)


def parse_overrides(items: list[str]) -> dict[str, Any] | None:
    """``["a.b=1", "c=x"]`` → ``{"a.b": 1, "c": "x"}`` (JSON values where they parse)."""
    out: dict[str, Any] = {}
    for item in items:
        path, sep, raw = item.partition("=")
        if not sep or not path.strip():
            raise ValueError(f"--set {item!r}: expected PATH=VALUE")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[path.strip()] = value
    return out or None


# ---------------------------------------------------------------------------- catalog


def _catalog(preset_id: str | None = None) -> Any:
    import smdengine
    from smdrender import presets

    if preset_id is None:
        return [presets.catalog_entry(p) for p in smdengine.PRESETS.values()]
    preset = smdengine.PRESETS.get(preset_id)
    return None if preset is None else presets.catalog_entry(preset, details=True)


def _unknown(preset_id: str) -> int:
    import smdengine

    print(f"smd presets: no preset {preset_id!r}; presets: {', '.join(sorted(smdengine.PRESETS))}", file=sys.stderr)
    return 2


def list_local(as_json: bool) -> int:
    return print_list(_catalog(), as_json)


def show_local(preset_id: str, as_json: bool) -> int:
    entry = _catalog(preset_id)
    return _unknown(preset_id) if entry is None else print_show(entry, as_json)


def _sizes_text(sizes: dict[str, Any]) -> str:
    return "; ".join(f"{name}: {s['runs']} runs, work {s['work']:.3g}" + (", GPU" if s.get("gpu") else "")
                     for name, s in sizes.items())


def print_list(entries: list[dict[str, Any]], as_json: bool) -> int:
    if as_json:
        print(json.dumps(entries, indent=2))
        return 0
    width = max([len(e["id"]) for e in entries] + [2])
    # the figure without its parenthesis (smd presets show ID gives it whole): cut at 18 characters it read
    # "004 App. E (text;" and "000 Thm 2 (no figu"
    figures = [f"{e['seed']} {str(e['figure']).split(' (')[0]}" for e in entries]
    column = max([len(f) for f in figures] + [len("seed figure")])
    print(f"{'id':<{width}}  tier  {'seed figure':<{column}}  title")
    for e, figure in zip(entries, figures, strict=True):
        flag = " (exploratory)" if e.get("exploratory") else ""
        print(f"{e['id']:<{width}}  {e['tier']:>4}  {figure:<{column}}  {e['title']}{flag}")
        print(f"{'':<{width}}        {_sizes_text(e['sizes'])}")
    return 0


def print_show(entry: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print(json.dumps(entry, indent=2))
        return 0
    lines = [f"{entry['id']}: {entry['title']}", f"  seed {entry['seed']}, {entry['figure']}; kinds "
             f"{', '.join(entry['kinds'])}; tier {entry['tier']}" + (" (exploratory)" if entry["exploratory"] else ""),
             "", f"  {entry['description']}", ""]
    if entry.get("min_seeds") is not None:   # (a service older than the seeds rule does not say)
        most = entry.get("max_seeds")
        lines += [f"  seeds: at least {entry['min_seeds']} distinct" + (f", at most {most}" if most else "")
                  + " (what its checks can use; --seeds replaces a size's)", ""]
    lines += ["  checks:"]
    lines += [f"    {c['id']}: {c['claim']}" for c in entry["checks"]]
    lines += ["", "  sizes:"]
    for name, size in entry["sizes"].items():
        lines.append(f"    {name}: {size['runs']} runs, work {size['work']}" + (", needs a GPU" if size["gpu"] else ""))
        if "spec" in size:
            lines += ["      " + line for line in json.dumps(size["spec"], indent=2).splitlines()]
    print("\n".join(lines))
    return 0


def print_checks(checks: list[dict[str, Any]] | None, out: Any = None) -> None:
    """The verdict table: one row per check (verdict, id, predicted, measured ± tolerance), the claim
    and note under it."""
    from smdrender.presets import value_text

    out = out or sys.stdout
    if not checks:
        print("no checks", file=out)
        return
    width = max(len(str(c.get("id"))) for c in checks)
    print(f"{'verdict':<14}  {'check':<{width}}  {'predicted':>12}  measured ± tolerance", file=out)
    for c in checks:
        print(f"{str(c.get('verdict')):<14}  {str(c.get('id')):<{width}}  {value_text(c.get('predicted')):>12}  "
              f"{value_text(c.get('measured'))} ± {value_text(c.get('tolerance'))}", file=out)
        print(f"{'':<14}  {c.get('claim')}", file=out)
        if c.get("note"):
            print(f"{'':<14}  note: {c['note']}", file=out)


# ---------------------------------------------------------------------------- run


def run_remote(client: Any, args: argparse.Namespace, overrides: dict[str, Any] | None) -> int:
    body: dict[str, Any] = {"size": args.size}
    if args.seeds:
        body["seeds"] = args.seeds
    if overrides:
        body["overrides"] = overrides
    for key in ("visibility", "priority"):
        if getattr(args, key):
            body[key] = getattr(args, key)
    study = client.run_preset(args.id, **body).data
    print(study["id"])
    print(f"smd presets: submitted {args.id} ({args.size}) as study {study['id']}: "
          f"{studycli._child_count(study)} runs, {study.get('status')}", file=sys.stderr)
    if not args.follow:
        return 0
    status = studycli.follow(client, study["id"], quiet=args.quiet)
    if status != 130:
        print_checks(client.get_study(study["id"]).data.get("checks"))
    return status


def run_local(preset_id: str, size: str, seeds: list[int] | None, overrides: dict[str, Any] | None, out_dir: Path,
              jobs: int = 1, quiet: bool = False, data_dir: str | None = None, no_limit: bool = False) -> int:
    """Build the preset's study, run it here (`smd study run`), evaluate its checks on the results;
    write checks.json and figure.png into ``out_dir`` and print the verdicts."""
    import smdengine
    from smdrender import presets

    preset = smdengine.PRESETS.get(preset_id)
    if preset is None:
        return _unknown(preset_id)
    try:
        spec = smdengine.preset_study(preset_id, size, seeds=seeds, overrides=overrides)
    except smdengine.StudyError as exc:
        studycli.print_errors(exc.errors)
        return 2
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        print(f"smd presets: {preset_id}: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(out_dir)
    run = studycli.run_study(spec, out_dir, jobs=jobs, quiet=quiet, data_dir=data_dir, no_limit=no_limit)
    if run.study is None:
        return run.status
    checks = smdengine.json_safe(smdengine.evaluate_checks(
        preset_id, studycli.child_records(run.children, run.docs), run.docs))
    (out_dir / "checks.json").write_text(json.dumps({"preset": preset_id, "size": size, "checks": checks},
                                                    indent=2, allow_nan=False) + "\n", encoding="utf-8")
    children = [presets.figure_child(c.index, c.point, c.seed, c.values, doc)
                for c, doc in zip(run.children, run.docs, strict=True)]
    (out_dir / "figure.png").write_bytes(presets.render_figure(preset, children, checks, "png", size))
    print_checks(checks)
    print(f"smd presets: wrote {out_dir / 'checks.json'} and {out_dir / 'figure.png'}", file=sys.stderr)
    return run.status
