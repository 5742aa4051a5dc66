"""The CLI draws and tabulates with `smdrender` and talks to the service with `smdlab`: `smd study run`
(tables and plots) and `smd presets list` run without ever importing the `api` package, and no CLI
module carries an HTTP client of its own."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.smdcli.test_study_local import GRID

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """
import json, pathlib, sys
from smdcli.main import main
folder = pathlib.Path(sys.argv[1])
codes = [main(["study", "run", str(folder / "study.json"), "-o", str(folder / "out"), "--quiet"]),
         main(["presets", "list", "--json"])]
print(json.dumps({"codes": codes, "api": sorted(m for m in sys.modules if m == "api" or m.startswith("api.")),
                  "smdrender": "smdrender.study_plots" in sys.modules,
                  "pngs": sorted(p.name for p in (folder / "out").glob("*.png"))}), file=sys.stderr)
"""


def test_cli_draws_without_the_api_package(tmp_path):
    study = {**GRID, "base": {**GRID["base"], "params": {**GRID["base"]["params"], "trials": 8, "steps": 60}},
             "seeds": [0]}
    (tmp_path / "study.json").write_text(json.dumps(study))
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path)], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["codes"] == [0, 0]
    assert report["api"] == []
    assert report["smdrender"] and any(name.startswith("heatmap_") for name in report["pngs"]), report


def test_no_cli_module_carries_its_own_http_client():
    for path in sorted((REPO / "smdcli").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "urllib" not in text and "import httpx" not in text, f"{path.name}: use smdlab.Client"
        assert not any(line.startswith(("from api", "import api")) for line in text.splitlines()), path.name


STARTUP = """
import json, sys
from smdcli.main import main
code = main(["status", "abc"])   # SMD_URL: a closed port, refused at once
remote = {name: name in sys.modules for name in ("sqlalchemy", "alembic", "matplotlib", "torch", "smdengine", "numpy")}
import api.main
print(json.dumps({"code": code, "remote": remote, "api_matplotlib": "matplotlib" in sys.modules}), file=sys.stderr)
"""


def test_a_remote_command_and_the_api_start_without_what_they_do_not_use():
    """What each start-up imports is paid by every `smd` command and every service start: a remote command
    loads no store (SQLAlchemy, Alembic: ~0.4 s of its ~0.8 s), no matplotlib, no torch, and no engine nor
    NumPy (`--version` names the engine's version only when asked: ~0.4 s of every command); the API app loads
    matplotlib with its first plot only (~0.4 s of every start)."""
    done = subprocess.run([sys.executable, "-c", STARTUP], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "SMD_URL": "http://127.0.0.1:9", "HOME": str(REPO)})
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report == {"code": 1, "remote": dict.fromkeys(("sqlalchemy", "alembic", "matplotlib", "torch", "smdengine",
                                                          "numpy"), False),
                      "api_matplotlib": False}, done.stderr
