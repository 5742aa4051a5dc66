"""`smd` — serve the API (+ embedded worker), run a worker, or run one spec locally.

    smd serve                 API + one worker process, embedded defaults (SQLite, filesystem broker)
    smd api                   the API only
    smd worker                a Celery worker only
    smd run SPEC.json -o RESULT.json   run a spec with the engine here, no service
    smd submit SPEC.json [--follow] | status ID | follow ID | results ID [-o F] [--csv] | cancel ID
        | ls [--status S] [--tag T] | rerun ID --set PATH=VALUE [--follow]
                              experiments on the service (SMD_URL, default http://127.0.0.1:8000; SMD_KEY)
    smd study run STUDY.json -o DIR [-j N] [--no-limit]   run a study here (children, tables, plots in DIR), no service
    smd study submit STUDY.json [--follow] | status ID | table ID [--group point] [--json | --csv] | cancel ID
                              a study on the service (SMD_URL, default http://127.0.0.1:8000; SMD_KEY)
    smd presets list | show ID | run ID [--size quick] [--seeds ...] [--set PATH=VALUE ...] [--follow]
    smd presets run ID --local -o DIR [-j N] [--no-limit]   a seed's figure as a study with checks (service, or here)
    smd export mlflow ID... | --study SID --tracking-uri URI [--experiment NAME]   runs into MLflow
    smd migrate               apply database migrations
    smd users create NAME [--admin] | list | quota NAME --max-active-jobs N --max-work N
    smd keys create NAME [--label L] | list [NAME] | revoke KEY_ID
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:   # Ctrl-C where a command does not say more itself (e.g. while starting)
        print("smd: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise   # another pipe (a socket, a child's): a real error
        # `smd presets list | head`: our reader left; end quietly (Python's advice), no second error at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _version() -> str:
    """The installed package's version and the engine's (what a result's provenance names)."""
    from importlib.metadata import PackageNotFoundError, version

    from smdengine import engine_version

    try:
        package = version("smdlab")
    except PackageNotFoundError:
        package = "not installed"
    return f"{package} (engine {engine_version()})"


class _VersionAction(argparse.Action):
    """``--version``, computed when asked: the engine's version imports the engine (~0.4 s of CPU), which
    most commands (submit, status, follow…) never need."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the package's and the engine's versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: object, values: object,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog} {_version()}")   # on stdout, as argparse's own version action
        parser.exit()


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll reports an error on the writing end)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="smd", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from smdcli.paths import output_file

    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)
    settings_said = ("Settings are SMD_* environment variables (README, Configuration; every one with its default: "
                     "store/settings.py). Auth is on unless SMD_AUTH=off (make run sets it off): give each user a key "
                     "with `smd users create NAME` and `smd keys create NAME`.")
    sub.add_parser("serve", help="API + an embedded worker process (SMD_* settings)", description=(
        "The API on SMD_HOST:SMD_PORT (127.0.0.1:8000) and a worker process, on SMD_DATABASE_URL (default: SQLite "
        "under SMD_STATE_DIR, ./.smd) with a filesystem broker unless SMD_BROKER_URL is set. " + settings_said))
    sub.add_parser("api", help="the API server only", description=(
        "The API on SMD_HOST:SMD_PORT with SMD_API_WORKERS processes, against SMD_DATABASE_URL and SMD_BROKER_URL; "
        "workers run elsewhere (smd worker). " + settings_said))
    sub.add_parser("worker", help="a Celery worker only", description=(
        "A worker taking jobs from SMD_WORKER_QUEUES (default cpu; gpu,cpu on a GPU host) with SMD_WORKER_CONCURRENCY "
        "processes, against SMD_DATABASE_URL and SMD_BROKER_URL; cifar10 runs read SMD_DATA_DIR. " + settings_said))
    sub.add_parser("migrate", help="alembic upgrade head", description="Apply the database migrations to "
                                                                         "SMD_DATABASE_URL (serve, api and worker "
                                                                         "also do at their start).")
    run = sub.add_parser("run", help="run one spec locally with the engine")
    run.add_argument("spec", type=Path, help="experiment spec (JSON file, or - for stdin)")
    run.add_argument("-o", "--output", type=output_file, help="result document path (default: stdout)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--no-limit", action="store_true",
                     help="run a job over the per-job work limit (SMD_MAX_WORK) too; without it such a job is refused "
                          "(exit status 3)")
    from smdcli import admin, export, presets, remote, study

    admin.add_parsers(sub)
    export.add_parsers(sub)
    remote.add_parsers(sub)
    study.add_parsers(sub)
    presets.add_parsers(sub)
    args = parser.parse_args(argv)

    from pydantic import ValidationError

    from store.settings import LOG_FORMAT, get_settings

    try:
        settings = get_settings()
    except ValidationError as exc:   # an SMD_* variable the settings refuse: named, not a traceback
        for error in exc.errors():
            name = "SMD_" + "_".join(map(str, error["loc"])).upper()
            msg = str(error["msg"]).removeprefix("Value error, ")
            print(f"smd: {name}: {msg}" + ("" if "got " in msg else f" (got {error.get('input')!r})"), file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, format=LOG_FORMAT)
    logging.getLogger("httpx").setLevel(logging.WARNING)   # not a line per request on a command's stderr
    if args.command == "run":
        from smdcli.local import run_local

        return run_local(args.spec, args.output, quiet=args.quiet, no_limit=args.no_limit)
    if args.command == "study":
        data_dir = settings.data_dir
        return study.main(args, data_dir=str(data_dir) if data_dir else None)
    if args.command == "presets":
        data_dir = settings.data_dir
        return presets.main(args, data_dir=str(data_dir) if data_dir else None)
    if args.command == "export":
        return export.main(args)
    if args.command in remote.COMMANDS:
        return remote.main(args)
    if args.command in ("users", "keys"):
        from smdcli.admin_commands import run as run_admin

        return run_admin(args, settings)
    if args.command == "migrate":
        from store.migrate import upgrade_head

        upgrade_head(settings.db_url)
        return 0
    if args.command == "worker":
        from smdcli.serve import run_worker

        return run_worker(settings)
    if args.command == "api":
        from smdcli.serve import run_api

        return run_api(settings)
    from smdcli.serve import serve

    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
