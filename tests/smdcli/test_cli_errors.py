"""What `smd` says, and exits with, when a command cannot be done as asked: a clean line on stderr naming
the cause and the README's exit status, never a traceback, and nothing sent or run first. In this process
(no server: each case is refused before any request), but for the broken pipe, which needs a real one."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from smdcli.main import main
from tests.smdcli.test_admin import smd_here  # noqa: F401  (a fixture)

# no service listens here: a command that sent a request would fail with "cannot reach", exit 1
NOWHERE = {"SMD_URL": "http://127.0.0.1:9", "SMD_KEY": "smd_0123456789ab_key"}


@pytest.mark.parametrize("args, status, words", [
    (["run", "spec.json", "-o", "/nonexistent/x.json"], 2, "no folder '/nonexistent' to write it in"),
    (["results", "0" * 32, "-o", "/nonexistent/x.json"], 2, "no folder '/nonexistent'"),
    (["study", "table", "0" * 32, "-o", "/"], 2, "is a folder: expected a file path"),
    (["study", "run", "study.json", "-o", "/etc/hostname"], 2, "is a file: expected a folder"),
    (["status", ""], 2, "argument id: expected letters, digits, '-' or '_', got ''"),
    (["study", "status", "a/b"], 2, "expected letters, digits, '-' or '_', got 'a/b'"),
    # under /v1/studies/ this path cancelled an experiment
    (["study", "cancel", "../experiments/" + "0" * 32], 2, "got '../experiments/"),
    (["status", "?x"], 2, "got '?x'"),
    (["presets", "run", "nrq-equilibrium-tradeoff", "-o", "out"], 2, "-o is for a --local run only"),
    (["presets", "run", "nrq-equilibrium-tradeoff", "--local", "-o", "out", "--follow"], 2,
     "--follow is for a run on the service (without --local) only"),
])
def test_an_unusable_argument_is_refused_before_anything_runs(smd_here, tmp_path, monkeypatch, args,  # noqa: F811
                                                              status, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.json").write_text(json.dumps({"kind": "nrq", "params": {"steps": 10**7}}))   # never run
    done = smd_here(NOWHERE, *args)
    assert done.returncode == status and words in done.stderr, done.stderr
    assert "cannot reach" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["run"], ["submit"], ["study", "run"], ["study", "submit"]])
def test_a_file_that_is_not_utf8_is_refused_without_a_traceback(smd_here, tmp_path, command):  # noqa: F811
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe")
    args = [*command, str(tmp_path / "bin.json"), *(["-o", str(tmp_path / "out")] if command == ["study", "run"] else [])]
    done = smd_here(NOWHERE, *args)
    assert done.returncode == 2 and "cannot read the" in done.stderr and "can't decode" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "cannot reach" not in done.stderr


@pytest.mark.parametrize("text, words", [
    ('{"kind": "nrq", "params": {"lr": NaN}}', "the spec: params.lr: expected a finite number"),
    ("[1, 2]", "expected a JSON object, got list"),
])
def test_a_spec_no_request_can_carry_exits_2_before_any_request(smd_here, tmp_path, text, words):  # noqa: F811
    (tmp_path / "spec.json").write_text(text)
    done = smd_here(NOWHERE, "submit", str(tmp_path / "spec.json"))
    assert done.returncode == 2 and words in done.stderr, done.stderr
    rerun = smd_here(NOWHERE, "rerun", "0" * 32, "--set", "params.lr=Infinity")
    assert rerun.returncode == 2 and "--set: params.lr: expected a finite number" in rerun.stderr, rerun.stderr


@pytest.mark.parametrize("env, words", [
    ({"SMD_PORT": "abc"}, "smd: SMD_PORT: Input should be a valid integer"),
    ({"SMD_LOG_LEVEL": "loud"}, "smd: SMD_LOG_LEVEL: expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got 'loud'"),
])
def test_a_setting_the_service_refuses_is_named(smd_here, env, words):  # noqa: F811
    done = smd_here({**NOWHERE, **env}, "ls")
    assert done.returncode == 2 and done.stderr.startswith(words), done.stderr


def test_a_key_that_is_no_key_is_refused_without_printing_it(smd_here):  # noqa: F811
    secret = "smd_0123456789ab_Sec" + "ret\n"
    done = smd_here({**NOWHERE, "SMD_KEY": secret}, "ls")
    assert done.returncode == 1 and "SMD_KEY: expected an API key" in done.stderr, done.stderr
    assert "Secret" not in done.stderr


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    """`smd presets list --json | head -1`: the rest of the output has nowhere to go; no traceback."""
    done = subprocess.run(f"{sys.executable} -m smdcli.main presets list --json | head -c 10",
                          shell=True, capture_output=True, text=True, timeout=120)
    assert done.stdout == "[\n  {\n    \"i"[:10] and "Traceback" not in done.stderr, done.stderr


def test_an_unreachable_service_is_said_at_once(smd_here):  # noqa: F811
    """Nothing listens at SMD_URL: said at once, not after 7.5 s of silent retries (those are for a service
    that has answered and goes away: tests/client/test_transport.py)."""
    started = time.monotonic()
    done = smd_here(NOWHERE, "ls")
    assert done.returncode == 1 and done.stderr.startswith("smd ls: cannot reach http://127.0.0.1:9: ConnectError: "), \
        done.stderr
    assert "(is the service running, and SMD_URL its address?)" in done.stderr
    assert time.monotonic() - started < 3, "the CLI retried a service that never answered"


def test_an_unreachable_tracking_server_is_said_at_once(smd_here):  # noqa: F811
    """MLflow's client retries for minutes before it gives up: the export asks once, first."""
    done = smd_here(NOWHERE, "export", "mlflow", "0" * 32, "--tracking-uri", "http://127.0.0.1:9")
    assert done.returncode == 1 and "cannot reach the tracking server http://127.0.0.1:9" in done.stderr, done.stderr


@pytest.mark.parametrize("spec, said", [
    ({"kind": "nope"}, "smd run: spec error: kind: expected one of 'nrq', 'sde', 'train', got 'nope'\n"),   # not "at : kind: kind"
    ({"kind": "nrq", "params": {"lr": -1}}, "smd run: spec error: params.lr: Input should be greater than 0\n"),
    ({"kind": "train", "params": {"dataset": {"name": "digits"}, "batch_size": 5000}},   # not "params.batch_size:
     "smd run: spec error: params.batch_size: expected at most the 1347 training samples, got 5000\n"),  # batch_size:"
])
def test_smd_run_names_each_refused_field_once(smd_here, tmp_path, spec, said):  # noqa: F811
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = smd_here(NOWHERE, "run", str(tmp_path / "spec.json"))
    assert done.returncode == 2 and done.stderr == said, done.stderr


def test_smd_run_refuses_a_job_over_the_work_limit_unless_told(smd_here, tmp_path):  # noqa: F811
    """A typo's extra zeros (10⁷ trials × 10⁸ steps) ran for minutes at 4 GB before it was killed; the service
    refuses the same spec with a 429. Over SMD_MAX_WORK it is refused at once (exit status 3, nothing written)
    unless --no-limit says to run it anyway."""
    (tmp_path / "spec.json").write_text(json.dumps({"kind": "nrq", "params": {"trials": 8, "steps": 50, "record_every": 10}}))
    out = tmp_path / "out.json"
    done = smd_here({**NOWHERE, "SMD_MAX_WORK": "3999"}, "run", str(tmp_path / "spec.json"), "-o", str(out))
    assert done.returncode == 3 and "work is 4,000 " in done.stderr and "over the per-job limit 3,999 " in done.stderr
    assert "SMD_MAX_WORK" in done.stderr and "--no-limit" in done.stderr and not out.exists(), done.stderr
    done = smd_here({**NOWHERE, "SMD_MAX_WORK": "3999"}, "run", str(tmp_path / "spec.json"), "-o", str(out),
                    "--no-limit", "--quiet")
    assert done.returncode == 0 and json.loads(out.read_text())["status"] == "succeeded", done.stderr
    # the keys of the service's results document (docs/measurements.md): progress and layers were missing
    document = json.loads(out.read_text())
    assert set(document) == {"id", "kind", "status", "progress", "spec", "series", "layers", "theory", "summary",
                             "distributions"}
    assert document["progress"] == 1.0 and document["layers"] == {} and document["id"] is None
    done = smd_here({**NOWHERE, "SMD_MAX_WORK": "4000"}, "run", str(tmp_path / "spec.json"), "-o", str(out), "--quiet")
    assert done.returncode == 0, done.stderr   # at the limit: run


def test_smd_study_and_presets_run_refuse_a_study_over_the_limits_unless_told(smd_here, tmp_path):  # noqa: F811
    """The local study commands hold to smd run's guard and the service's study limits: its children's work
    together over SMD_MAX_WORK, or more children than SMD_MAX_STUDY_POINTS, is refused at once (exit status 3,
    nothing run or written) unless --no-limit says to run it anyway. A 2000-child study ran to the end, and two
    children of 10¹² work each started, where `smd study submit` refused both."""
    base = {"kind": "nrq", "params": {"trials": 8, "steps": 50, "record_every": 10}}   # work 4,000 a child
    (tmp_path / "study.json").write_text(json.dumps({"base": base, "grid": {"params.lr": [0.1, 0.2]}}))
    out = tmp_path / "out"
    done = smd_here({**NOWHERE, "SMD_MAX_WORK": "7999"}, "study", "run", str(tmp_path / "study.json"), "-o", str(out))
    assert done.returncode == 3 and "its 2 children need 8,000 work together" in done.stderr, done.stderr
    assert "over the limit 7,999 (SMD_MAX_WORK" in done.stderr and "--no-limit" in done.stderr
    assert not (out / "children").exists()
    done = smd_here({**NOWHERE, "SMD_MAX_STUDY_POINTS": "1"}, "study", "run", str(tmp_path / "study.json"), "-o", str(out))
    assert done.returncode == 3 and "2 children (points × seeds), over the service's limit of 1 " in done.stderr
    assert "SMD_MAX_STUDY_POINTS" in done.stderr and not (out / "children").exists(), done.stderr
    done = smd_here({**NOWHERE, "SMD_MAX_STUDY_POINTS": "1", "SMD_MAX_WORK": "7999"}, "study", "run",
                    str(tmp_path / "study.json"), "-o", str(out), "--no-limit", "--quiet")
    assert done.returncode == 0 and "2 children (2 points × 1 seed), 1 process" in done.stderr, done.stderr
    done = smd_here({**NOWHERE, "SMD_MAX_WORK": "1000", "SMD_MAX_STUDY_POINTS": "1000"}, "presets", "run",
                    "nrq-equilibrium-tradeoff", "--local",
                    "-o", str(tmp_path / "preset"))
    assert done.returncode == 3 and "SMD_MAX_WORK" in done.stderr and not (tmp_path / "preset").exists(), done.stderr
    done = smd_here(NOWHERE, "presets", "run", "nrq-equilibrium-tradeoff", "--no-limit")
    assert done.returncode == 2 and "--no-limit is for a --local run only" in done.stderr, done.stderr


def test_a_refused_field_is_named_once_in_the_clients_words():
    """The service's messages often start with their field ("kind: …", or "record_every: …" at
    params.record_every): the client and smd said "kind: kind: expected one of …"."""
    from smdcli.service import error_line
    from smdlab.errors import message_of

    detail = [{"loc": ["body", "kind"], "field": "kind", "msg": "kind: expected one of 'nrq', 'sde', 'train', got 'x'"},
              {"loc": ["body", "nrq", "params", "record_every"], "field": "params.record_every",
               "msg": "record_every: expected ≤ steps (100), got 1000"},
              {"loc": ["body", "nrq", "params", "lr"], "field": "params.lr", "msg": "Input should be greater than 0"}]
    assert message_of(422, detail) == ("HTTP 422: kind: expected one of 'nrq', 'sde', 'train', got 'x'; "
                                       "params.record_every: expected ≤ steps (100), got 1000; "
                                       "params.lr: Input should be greater than 0")
    assert error_line(["point", 1, "params", "lr"], "lr: expected > 0", {"index": 1, "values": {"params.lr": -1}}) \
        == "point 1, params.lr: expected > 0 (at params.lr=-1)"


def test_smd_run_and_study_run_say_at_once_that_the_data_is_not_here(smd_here, tmp_path):  # noqa: F811
    """A cifar10 spec without CIFAR-10 under SMD_DATA_DIR: exit 2 and the reason before anything runs, where
    smd run failed (exit 1) with the engine's exception class and a study failed child by child."""
    spec = {"kind": "train", "params": {"model": "cnn", "depth": 2, "width": 4, "steps": 10, "record_every": 5,
                                        "batch_size": 8,
                                        "dataset": {"name": "cifar10", "train_samples": 20, "test_samples": 10}}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    here = {**NOWHERE, "SMD_DATA_DIR": str(tmp_path / "data")}
    done = smd_here(here, "run", str(tmp_path / "spec.json"), "-o", str(tmp_path / "out.json"))
    assert done.returncode == 2 and done.stderr.startswith("smd run: params.dataset.name: not available here: "), done.stderr
    assert str(tmp_path / "data" / "cifar-10-batches-py") in done.stderr and "DatasetUnavailable" not in done.stderr
    study = {"base": {**spec, "params": {**spec["params"], "dataset": {"name": "digits"}}},
             "grid": {"params.dataset": [{"name": "digits"}, spec["params"]["dataset"]]}}
    (tmp_path / "study.json").write_text(json.dumps(study))
    done = smd_here(here, "study", "run", str(tmp_path / "study.json"), "-o", str(tmp_path / "out"))
    assert done.returncode == 2 and "point 1, params.dataset.name: not available here: " in done.stderr, done.stderr
    assert "point 0" not in done.stderr and not (tmp_path / "out" / "children").exists()


def test_version_and_the_server_commands_help_say_their_settings(capsys):
    """`smd --version` names the engine (what provenance records); serve/api/worker --help said only -h, where a
    first `smd ls` then met auth it had not been told about."""
    import smdengine

    for args in (["--version"], ["serve", "--help"], ["worker", "--help"]):
        with pytest.raises(SystemExit) as done:
            main(args)
        assert done.value.code == 0
        out = capsys.readouterr().out
        if args == ["--version"]:
            assert out.startswith("smd ") and f"(engine {smdengine.engine_version()})" in out, out
        else:
            assert "SMD_DATABASE_URL" in out and "SMD_AUTH=off" in out and "smd keys create" in out, out


def test_smd_run_takes_a_spec_written_for_smd_submit(smd_here, tmp_path):  # noqa: F811
    """A spec file with the service's options (tags, note, visibility) ran on the service and was refused here
    ("tags: Extra inputs are not permitted"): they are said to be unused, and the spec runs."""
    spec = {"kind": "nrq", "tags": ["a"], "note": "n", "visibility": "lab",
            "params": {"trials": 4, "steps": 20, "record_every": 10}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = smd_here(NOWHERE, "run", str(tmp_path / "spec.json"), "-o", str(tmp_path / "out.json"), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "smd run: note: visibility, tags, note: the service's options, not used here" in done.stderr
    assert json.loads((tmp_path / "out.json").read_text())["status"] == "succeeded"
    from smdlab import Client

    with pytest.raises(TypeError, match="submit: unknown option colour: expected name, visibility"):
        Client("http://127.0.0.1:9").submit({"kind": "nrq"}, colour="red")   # refused before any request
