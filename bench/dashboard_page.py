"""The dashboard's experiment page on a long run: page weight and time to first chart.

Starts `smd serve` (embedded SQLite, auth off) on a free port, runs an nrq job recording every step
(200 000 points by default), then in the Debian Chromium (scripts/ensure-chromium.sh) driven by
Playwright measures, over --repeats cold loads (a new browser context each: empty cache):

- page weight: HTML + JS + CSS transferred for the experiment page (compressed bytes on the wire,
  from the Resource Timing entries), and the same uncompressed;
- time to first chart: navigation start → the risk chart drawn with its points;
- zoom refine: a 1 000-step window asked for at full resolution (until_step/since_step) and redrawn;
- baseline, in the same browser: the whole document (no max_points) fetched and drawn by Plotly,
  which is what a chart without downsampling would do. The ratio baseline / dashboard is printed.

    .venv/bin/python bench/dashboard_page.py [--points 200000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_service(state: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SMD_")}
    env.update(SMD_PORT=str(port), SMD_STATE_DIR=str(state), SMD_AUTH="off")
    proc = subprocess.Popen([sys.executable, "-m", "smdcli.main", "serve"], env=env, start_new_session=True,
                            stdout=(state / "serve.log").open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.3)
    raise SystemExit(f"smd serve did not start: {(state / 'serve.log').read_text()[-3000:]}")


def run_job(base: str, points: int) -> str:
    spec = {"kind": "nrq", "name": f"{points} points", "params": {"steps": points, "record_every": 1, "trials": 10}}
    experiment_id = httpx.post(f"{base}/v1/experiments", json=spec, timeout=30).json()["id"]
    while (state := httpx.get(f"{base}/v1/experiments/{experiment_id}", timeout=30).json())["status"] != "succeeded":
        if state["status"] in ("failed", "cancelled"):
            raise SystemExit(f"the job {state['status']}: {state.get('error')}")
        time.sleep(1)
    return experiment_id


WEIGHT = """() => {
    const entries = [performance.getEntriesByType('navigation')[0], ...performance.getEntriesByType('resource')];
    const page = entries.filter(e => e.entryType === 'navigation' || /\\.(js|css)$/.test(new URL(e.name).pathname));
    return {wire: page.reduce((s, e) => s + e.transferSize, 0), raw: page.reduce((s, e) => s + e.decodedBodySize, 0),
            files: page.length};
}"""

BASELINE = """async (id) => {
    const t0 = performance.now();
    const doc = await (await fetch(`/v1/experiments/${id}/results`)).json();
    const t1 = performance.now();
    const div = document.createElement('div'); div.style.width = '900px'; document.body.append(div);
    await Plotly.newPlot(div, [{x: doc.series.step, y: doc.series.risk, type: 'scatter', mode: 'lines'}]);
    return {fetch: t1 - t0, total: performance.now() - t0, points: doc.series.step.length};
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("SMD_CHROMIUM") or shutil.which("chromium")
    if not chromium:
        raise SystemExit("no chromium: run scripts/ensure-chromium.sh")
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = start_service(Path(tmp))
        try:
            experiment_id = run_job(base, args.points)
            first_chart, zooms, baselines, weights = [], [], [], []
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                for _ in range(args.repeats):
                    context = browser.new_context(viewport={"width": 1400, "height": 1000})
                    page = context.new_page()
                    page.goto(f"{base}/#/experiments/{experiment_id}")
                    page.wait_for_function("document.getElementById('chart-risk')?.data?.[0]?.x?.length > 0")
                    first_chart.append(page.evaluate("performance.now()"))
                    shown = page.evaluate("document.getElementById('chart-risk').data[0].x.length")
                    weights.append(page.evaluate(WEIGHT))
                    page.evaluate("""() => { window.t0 = performance.now();
                        Plotly.relayout('chart-risk', {'xaxis.range': [100000, 101000]}); }""")
                    page.wait_for_function("(() => { const x = document.getElementById('chart-risk').data[0].x;"
                                           " return x[0] >= 99999 && x.length > 900; })()")
                    zooms.append(page.evaluate("performance.now() - window.t0"))
                    baselines.append(page.evaluate(BASELINE, experiment_id))
                    context.close()
                browser.close()
        finally:
            proc.terminate()
            proc.wait(30)
    med = statistics.median
    weight = weights[-1]
    print(f"experiment page, {args.points} recorded points, {args.repeats} cold loads (median):")
    print(f"  page weight: {weight['wire'] / 1e6:.2f} MB transferred (gzip), {weight['raw'] / 1e6:.2f} MB "
          f"uncompressed, {weight['files']} files (HTML, JS modules, CSS, Plotly.js)")
    print(f"  time to first chart: {med(first_chart):.0f} ms (navigation start → risk chart drawn, "
          f"{shown} points shown)")
    print(f"  zoom refine (1 000-step window at full resolution): {med(zooms):.0f} ms")
    full = med(b["total"] for b in baselines)
    print(f"  baseline, the whole document drawn without max_points: {full:.0f} ms for "
          f"{baselines[0]['points']} points (fetch {med(b['fetch'] for b in baselines):.0f} ms)")
    print(f"  ratio baseline / dashboard first chart: {full / med(first_chart):.1f}x")


if __name__ == "__main__":
    main()
