"""The dashboard in a real Chromium (Debian package, driven by Playwright) against a real `smd serve`:
a job submitted through the generated form, followed live to its end; the server's 422 shown next to
the fields it names; a study's heatmap and sortable table; compare; every page without console
errors (with a screenshot of each, into test-artifacts/screenshots); and with auth on, the key prompt."""
from __future__ import annotations

import json
import math
import re
import time

import httpx
import pytest

from tests.browser.conftest import screenshot
from tests.integration.procs import serve_for_alice_and_bob

pytestmark = pytest.mark.integration

# the job followed live: ~6 s on an idle 2-core machine (~0.3 ms an update at 1000 trials), flushed every 0.3 s
# (SMD_FLUSH_SECONDS), the chart redrawn at most once a second (experiment.js REDRAW_MS): about five sizes of
# the chart while it runs, of which the test needs two
LIVE = {"steps": 20_000, "trials": 1000, "record_every": 20}
SMALL = {"steps": 2000, "trials": 200, "record_every": 50}
TINY = {"steps": 600, "trials": 64, "record_every": 30}   # the charts' studies: 20 records a run, seconds in all
COLUMN = """column => {   // a column of the children table, top to bottom, as shown
    const index = [...document.querySelectorAll('#children-table th')].findIndex(th => th.dataset.column === column);
    return [...document.querySelectorAll('#children-table tbody tr')].map(r => r.children[index].textContent); }"""
EXPECTED_4XX = re.compile(r"Failed to load resource: the server responded with a status of 4\d\d")
TICKS = "selector => [...document.querySelectorAll(selector)].map(t => t.textContent)"
# live pages update in place: HOLD keeps the nodes a selector finds; STILL_HELD says, for each, whether the page
# still shows that very node (a node rebuilt under the pointer loses the click that straddles the rebuild)
HOLD = "selector => { window.held = [...document.querySelectorAll(selector)]; return window.held.length; }"
STILL_HELD = "() => window.held.map(node => node.isConnected)"
BARE_DIGIT = re.compile(r"^[2-9]$")   # a log axis's digit between decades, labelled alone: read as a value
# a log axis's ticks as plain numbers (0.5, 0.02, 1e-5), as the cells and the PNGs write them: not 5×10⁻¹ beside 10⁻¹
PLAIN_NUMBER = re.compile(r"^\d+(\.\d+)?(e[−-]?\d+)?$")


def submit(base: str, spec: dict) -> str:
    response = httpx.post(f"{base}/v1/experiments", json=spec, timeout=30)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def wait_ended(base: str, path: str, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = httpx.get(f"{base}{path}", timeout=30).json()
        if body["status"] in ("succeeded", "failed", "cancelled", "partial"):
            return body
        time.sleep(0.3)
    raise AssertionError(f"{path} still {body['status']} after {timeout} s")


@pytest.fixture(scope="module")
def grid_study(service) -> str:
    """A finished 3 × 2 study over lr × weight_decay (one seed)."""
    response = httpx.post(f"{service}/v1/studies", timeout=30, json={
        "name": "lr × wd grid", "base": {"kind": "nrq", "params": SMALL},
        "grid": {"params.lr": [0.05, 0.1, 0.2], "params.weight_decay": [0.005, 0.01]}, "seeds": [0]})
    assert response.status_code == 202, response.text
    study_id = response.json()["id"]
    assert wait_ended(service, f"/v1/studies/{study_id}")["status"] == "succeeded"
    return study_id


def test_a_job_submitted_through_the_form_is_followed_live_to_its_end(service, page):
    blocker = submit(service, {"kind": "nrq", "name": "blocker", "params": {"steps": 8000, "trials": 1000}})
    page.goto(f"{service}/#/new")           # while the one embedded worker runs the blocker, the form's job waits
    page.fill('[name="name"]', "from the form")
    for field, value in LIVE.items():
        page.fill(f'[name="params.{field}"]', str(value))
    page.evaluate("window.notReloaded = true")
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.click("#submit")
    page.wait_for_url(re.compile(r"#/experiments/[0-9a-f]{32}$"))
    experiment_id = page.url.rsplit("/", 1)[1]
    assert experiment_id != blocker

    statuses: list[str] = []
    grown: set[int] = set()   # risk-chart point counts seen while running
    etas: set[str] = set()    # and the head's ETA texts
    expected = math.ceil(LIVE["steps"] / LIVE["record_every"]) + 1   # records at steps 0, R, 2R, … < steps, and steps
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        state = page.evaluate("""() => ({
            status: document.querySelector('.exp-head .badge')?.dataset.status,
            points: document.getElementById('chart-risk')?.data?.[0]?.x?.length ?? 0,
            eta: document.getElementById('eta')?.textContent ?? '',
            notReloaded: window.notReloaded === true})""")
        assert state["notReloaded"], "the page was reloaded"
        if state["status"] and (not statuses or statuses[-1] != state["status"]):
            statuses.append(state["status"])
        if state["status"] == "running" and state["points"]:
            if not grown:
                screenshot(page, "experiment-running")
                page.evaluate(HOLD, ".exp-head a, .exp-head button")
            grown.add(state["points"])
            etas.add(state["eta"])
        if state["status"] == "succeeded" and state["points"] == expected:
            break
        time.sleep(0.05)
    assert statuses == ["queued", "running", "succeeded"], statuses
    assert len(grown) >= 2 and max(grown) < expected, f"the chart did not grow while running: {sorted(grown)}"
    assert any(eta.startswith("ETA ") for eta in etas), etas   # once it had a pace
    # the head was updated in place: its links and buttons are those of the first running state (each progress
    # event had redrawn them, and a click that straddled a redraw was lost); Cancel is hidden once it ended
    assert page.evaluate(STILL_HELD) == [True, True, True], "the head's links or buttons were rebuilt"
    assert page.locator("#cancel").is_hidden() and page.locator("#sweep-from-here").is_visible()

    served = httpx.get(f"{service}/v1/experiments/{experiment_id}/results", timeout=30).json()
    assert len(served["series"]["step"]) == expected
    traces = page.evaluate("""() => document.getElementById('chart-risk').data.map(t => ({
        name: t.name, points: t.x.length, dash: t.line?.dash ?? null}))""")
    assert traces[0] == {"name": "risk", "points": expected, "dash": None}
    steps = page.evaluate("document.getElementById('chart-risk').data[0].x")
    assert steps == sorted(set(steps)), "points repeated or out of order"
    # one connection carried the live points: the event stream with points, no since_step polls
    mine = [url for url in requested if f"/v1/experiments/{experiment_id}/" in url]
    assert any("/events?points=true&since_step=" in url for url in mine), mine
    assert not any("since_step" in url and "/results" in url for url in mine), mine
    theory = [t for t in traces if t["dash"] == "dash"]
    assert [t["name"] for t in theory] == ["risk_stationary (theory)"] and theory[0]["points"] == expected
    assert page.console.errors == []
    screenshot(page, "experiment-finished")
    # the ETA is the server's (eta, from the last progress write at progressed_at: 8 s then) less the seconds since
    # the page read it, on the page's own clock (3 s here), whatever the browser's date; none without a pace
    left = page.evaluate("""async () => (await import('/ui/util.js')).secondsLeft({status: 'running',
        eta: '2020-01-01T00:00:18.000000Z', progressed_at: '2020-01-01T00:00:10.000000Z'}, 1000, 4000)""")
    assert left == 5
    assert page.evaluate("""async () => (await import('/ui/util.js')).secondsLeft({status: 'running', eta: null,
        progressed_at: '2020-01-01T00:00:10.000000Z'}, 0, 0)""") is None


def test_the_servers_422_is_shown_next_to_the_fields_it_names(service, page):
    before = httpx.get(f"{service}/v1/experiments", timeout=30).json()["total"]
    page.goto(f"{service}/#/new")
    page.fill('[name="params.lr"]', "-1")
    page.fill('[name="params.steps"]', "lots")
    page.click("#submit")
    lr_error = page.locator('.field-error[data-error-for="params.lr"]')
    lr_error.wait_for()
    page.wait_for_function("document.querySelector('.field-error[data-error-for=\"params.lr\"]').textContent !== ''")
    assert lr_error.inner_text() == "Input should be greater than 0"   # pydantic's message, as the API sent it
    assert "valid integer" in page.locator('.field-error[data-error-for="params.steps"]').inner_text()
    assert page.locator('.field-error[data-error-for="params.dim"]').inner_text() == ""
    # the first field marked is brought into view and focused, ready to edit
    assert page.evaluate("document.activeElement?.closest('.has-error') !== null")
    screenshot(page, "new-experiment-errors")
    # a check over two fields is reported at params; its message names the field it is shown beside
    page.fill('[name="params.lr"]', "")
    page.fill('[name="params.steps"]', "")
    page.fill('[name="params.eig_low"]', "3")
    page.click("#submit")
    page.wait_for_function("document.querySelector('.field-error[data-error-for=\"params.eig_low\"]')"
                           "?.textContent.includes('expected both or neither')")
    screenshot(page, "new-experiment-two-field-error")
    # an entry inside a JSON field: the message says which entry and key
    page.fill('[name="params.eig_low"]', "")
    page.fill('[name="params.lr_schedule"]', '[{"step": -5, "lr_factor": 0.1}]')
    page.click("#submit")
    page.wait_for_function("document.querySelector('.field-error[data-error-for=\"params.lr_schedule\"]')"
                           "?.textContent.startsWith('0.step: ')")
    # a JSON field that does not parse is marked, brought into view and focused as the server's errors are
    # (it was said only in the box on top of a long form, out of view at the Submit button)
    page.fill('[name="params.lr_schedule"]', '[{"step": 5,')
    page.click("#submit")
    page.wait_for_function("document.querySelector('.field-error[data-error-for=\"params.lr_schedule\"]')"
                           "?.textContent.startsWith('not valid JSON')")
    assert page.evaluate("document.activeElement?.name") == "params.lr_schedule"
    assert "see the fields marked" in page.locator(".error-box").first.inner_text()
    page.fill('[name="params.lr_schedule"]', "")
    # a model of a kind: the 422 names ["body", "sde", "params", "normalized_linear", "lr"], shown at params.lr
    page.select_option('[name="kind"]', "sde")
    page.select_option('[name="params.model"]', "normalized_linear")
    page.fill('[name="params.lr"]', "0")
    page.click("#submit")
    page.wait_for_function("document.querySelector('.field-error[data-error-for=\"params.lr\"]')?.textContent !== ''")
    assert page.locator('.field-error[data-error-for="params.lr"]').inner_text() == "Input should be greater than 0"
    assert httpx.get(f"{service}/v1/experiments", timeout=30).json()["total"] == before   # nothing was submitted
    assert [e for e in page.console.errors if not EXPECTED_4XX.search(e)] == []


def test_a_study_page_shows_its_heatmap_and_sorts_its_table(service, page, grid_study):
    table = httpx.get(f"{service}/v1/studies/{grid_study}/table", timeout=30).json()
    page.goto(f"{service}/#/studies/{grid_study}")
    page.wait_for_function("document.getElementById('study-plot')?.data?.[0]?.type === 'heatmap'")
    heatmap = page.evaluate("(() => { const t = document.getElementById('study-plot').data[0]; "
                            "return {x: t.x, y: t.y, z: t.z}; })()")
    metric = page.locator('select[name="chart-metric"]').input_value()
    # the chart starts on a measured metric, not on an input derived from the spec (ηλ, η/λ)
    assert "intrinsic_lr" in table["derived"] and metric not in table["derived"] and metric in ("risk", "au_rms")
    assert heatmap["x"] == ["0.05", "0.1", "0.2"] and heatmap["y"] == ["0.005", "0.01"]
    for row in table["rows"]:   # one seed: each cell is that child's summary value
        cell = heatmap["z"][[0.005, 0.01].index(row["params.weight_decay"])][[0.05, 0.1, 0.2].index(row["params.lr"])]
        assert cell == pytest.approx(row[metric], rel=1e-12)

    header = page.locator('#children-table th[data-column="params.lr"]')
    header.click()
    lrs = [float(v) for v in page.evaluate(COLUMN, "params.lr")]
    assert lrs == sorted(lrs) and lrs[0] < lrs[-1]
    header.click()
    lrs = [float(v) for v in page.evaluate(COLUMN, "params.lr")]
    assert lrs == sorted(lrs, reverse=True)
    # its iso-ηλ lines are white over the cells; their legend entry sits on a background they show on
    iso = page.evaluate("document.getElementById('study-plot').data.find(t => t.meta === 'iso')?.line.color")
    legend = page.evaluate("document.getElementById('study-plot').layout.legend.bgcolor")
    assert iso.startswith("rgba(255,255,255") and legend not in (None, "#fff", "#ffffff", "white")
    screenshot(page, "study-heatmap")
    assert page.console.errors == []


PLOT = "document.getElementById('study-plot')?.data"


def chart(page, kind: str) -> list[dict]:
    """Choose a chart type and return its traces once drawn (type, name, meta, colour, axes, sizes)."""
    page.locator('select[name="chart-type"]').select_option(kind)
    page.wait_for_function(f"document.getElementById('study-plot')?.dataset.type === '{kind}' && {PLOT}?.length > 0")
    return page.evaluate(f"""{PLOT}.map(t => ({{type: t.type, name: t.name, meta: t.meta || null, group: t.legendgroup || null,
        colour: (t.line && t.line.color) || (t.marker && t.marker.color) || null, xaxis: t.xaxis || 'x',
        text: t.text || null, texttemplate: t.texttemplate || null, se: t.error_y ? t.error_y.array : null,
        x: t.x, y: t.y, z: t.z || null}}))""")


def test_a_study_page_shows_theory_grouped_seeds_and_colour_live_and_after(service, page):
    """lr × momentum with 2 seeds: opened while it runs; one request per chart (none per child), no 4xx/5xx."""
    requests, failures = [], []
    page.on("request", lambda r: requests.append(r.url.replace(service, "")))
    page.on("response", lambda r: failures.append((r.status, r.url)) if r.status >= 400 else None)
    response = httpx.post(f"{service}/v1/studies", timeout=30, json={
        "name": "lr × momentum", "base": {"kind": "nrq", "params": TINY},
        "grid": {"params.lr": [0.05, 0.1], "params.momentum": [0.0, 0.5]}, "seeds": [0, 1]})
    assert response.status_code == 202, response.text
    study_id = response.json()["id"]
    page.goto(f"{service}/#/studies/{study_id}")
    page.locator("#study-actions #study-delete").wait_for()
    screenshot(page, "study-running")
    wait_ended(service, f"/v1/studies/{study_id}")
    # once summaries exist, a study of two varying axes opens on its heatmap; it follows the study's events
    # (the chart drawn of the ended study: redrawn in place, its div shows the last draw until the next lands)
    page.wait_for_function(f"{PLOT}?.[0]?.type === 'heatmap' && document.getElementById('study-plot').dataset.status "
                           "=== 'succeeded'")
    table = httpx.get(f"{service}/v1/studies/{study_id}/table", params={"group": "point"}, timeout=30).json()["rows"]

    heat = chart(page, "heatmap")
    measured, theory = heat[0], next(t for t in heat if t["xaxis"] == "x2")
    assert measured["texttemplate"] == "%{text}" and measured["text"][0][0].startswith(f"{measured['z'][0][0]:.4g}"[:4])
    metric = page.locator('select[name="chart-metric"]').input_value()
    for row in table:   # cells: the means over seeds; the theory panel: risk_stationary
        j, i = [0.0, 0.5].index(row["params.momentum"]), [0.05, 0.1].index(row["params.lr"])
        assert measured["z"][j][i] == pytest.approx(row[metric], rel=1e-12)
    assert metric == "risk" and theory["z"][0][0] == pytest.approx(table[0]["risk_stationary"], rel=1e-12)
    screenshot(page, "study-heatmap-theory")

    scatter = chart(page, "scatter")
    assert page.locator('select[name="chart-by"]').input_value() == "params.momentum"
    points = [t for t in scatter if t["meta"] == "measured"]
    assert len(points) == 2 and len({t["colour"] for t in points}) == 2   # coloured by momentum
    assert all(t["se"] and len(t["se"]) == 2 and all(s > 0 for s in t["se"]) for t in points)   # ± SE over 2 seeds
    curves = [t for t in scatter if t["meta"] == "theory" and t["type"] == "scatter" and "(theory: " in (t["name"] or "")]
    assert sorted(t["name"] for t in curves) == ["risk_stationary (theory: momentum=0)",
                                                 "risk_stationary (theory: momentum=0.5)"]   # one per momentum
    for curve in curves:   # in the colour of its points
        momentum = curve["name"].rsplit("=", 1)[1].rstrip(")")
        assert curve["colour"] == next(t["colour"] for t in points if t["group"] == f"momentum={momentum}")
    assert any(t["meta"] == "theory" and t["group"] == "momentum=0" for t in scatter)   # open markers per point
    screenshot(page, "study-scatter")

    overlay = chart(page, "overlay")
    lines = [t for t in overlay if t["meta"] == "measured"]
    assert len(lines) == 4 and len({t["colour"] for t in lines}) == 4   # one colour per point, seeds as one mean
    assert all("(mean of 2 seeds)" in t["name"] and "lr=" in t["name"] and "momentum=" in t["name"] for t in lines)
    dashed = [t for t in overlay if t["meta"] == "theory"]
    assert len(dashed) == 4   # risk_stationary for every point (with momentum: the SGD form at η/(1−α))
    for t in dashed:
        assert t["colour"] == next(m["colour"] for m in lines if m["group"] == t["group"])
    assert sum(t["meta"] == "band" for t in overlay) == 4
    page.locator('select[name="chart-seeds"]').select_option("all")
    page.wait_for_function(f"{PLOT}?.filter(t => t.meta === 'measured').length === 8")
    screenshot(page, "study-overlay")
    ticks = page.evaluate(TICKS, "#study-plot .ytick text")   # log y: no bare digits between the decades
    assert len(ticks) >= 2 and not any(BARE_DIGIT.match(t) for t in ticks), ticks
    assert all(PLAIN_NUMBER.match(t) for t in ticks), ticks

    with page.expect_download() as download:
        page.locator("#study-csv").click()
    with open(download.value.path(), encoding="utf-8") as f:
        assert len(f.read().strip().splitlines()) == 1 + 8
    page.set_viewport_size({"width": 420, "height": 900})
    page.wait_for_timeout(500)
    assert page.evaluate("document.documentElement.scrollWidth") <= 420   # tables scroll inside their card
    screenshot(page, "study-420px")

    assert not [u for u in requests if u.startswith("/v1/experiments")]   # nothing per child
    loads = sum(u.startswith(f"/v1/studies/{study_id}/table") for u in requests)
    charts = sum(u.startswith(f"/v1/studies/{study_id}/charts/") for u in requests)
    assert charts <= loads + 4, (charts, loads)   # one chart request per load and per change of the chart
    assert failures == [] and page.console.errors == []


def test_a_study_table_shows_warnings_by_code_with_the_message_on_hover(service, page):
    """A point out of the small-ηλ regime (ηλ = 0.2 > 0.1: continuous_time) beside one in it: the warnings
    column appears (it is hidden when every row has the same warnings), each warned row shows the code alone
    and the whole message in its title; the row in regime shows none."""
    response = httpx.post(f"{service}/v1/studies", timeout=30, json={
        "name": "regime", "base": {"kind": "nrq", "params": {**TINY, "weight_decay": 0.01}},
        "points": [{"params.lr": 1.0}, {"params.lr": 20.0}], "seeds": [0]})   # τ = 25 steps: settled
    assert response.status_code == 202, response.text
    study_id = response.json()["id"]
    wait_ended(service, f"/v1/studies/{study_id}")
    rows = httpx.get(f"{service}/v1/studies/{study_id}/table", timeout=30).json()["rows"]
    messages = {row["params.lr"]: row["warnings"] for row in rows}
    assert not messages[1.0] and messages[20.0].startswith("continuous_time: "), messages
    page.goto(f"{service}/#/studies/{study_id}")
    page.wait_for_function("document.querySelectorAll('#children-table tbody tr').length === 2")
    shown = dict(zip(page.evaluate(COLUMN, "params.lr"), page.evaluate(COLUMN, "warnings"), strict=True))
    assert shown == {"1": "", "20": "continuous_time"}, shown
    assert page.locator("#children-table .warning-codes").get_attribute("title") == messages[20.0]
    screenshot(page, "study-warnings")
    assert page.console.errors == []


def test_a_study_is_made_cancelled_and_deleted_in_the_page(service, page):
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{service}/#/new")   # an experiment's page offers "sweep from here"
    experiment_id = submit(service, {"kind": "nrq", "name": "sweep base", "params": SMALL})
    page.goto(f"{service}/#/experiments/{experiment_id}")
    page.locator("#sweep-from-here").click()
    page.wait_for_url(re.compile(r"#/studies/new\?from="))
    page.wait_for_function("document.getElementById('study-plan')?.dataset.runs === '12'")   # 3 lr × 2 wd × 2 seeds
    assert '"trials": 200' in page.locator("#study-base").input_value()
    screenshot(page, "new-study")
    # an axis of spectra, its values a JSON list of lists (split at commas, a list could not be given); the
    # stored spec's eig_low/eig_high (their defaults) give way to it on the server (REPLACED_DEFAULTS)
    page.locator("#add-axis").click()
    spectrum = page.locator(".axis-row").nth(2)
    spectrum.locator('[name="axis-path"]').fill("params.eigenvalues")
    spectrum.locator('[name="axis-values"]').fill(json.dumps([[1] + [2] * 9, [1] + [4] * 9]))   # dim 10
    page.wait_for_function("document.getElementById('study-plan')?.dataset.runs === '24'")
    spectrum.locator('[name="axis-values"]').fill("[[1, 2], [1, 4]")   # not JSON: said beside the axis
    page.wait_for_function("document.querySelectorAll('.axis-row')[2]?.querySelector('.axis-error')?.textContent"
                           ".includes('not valid JSON')")
    spectrum.locator('button[title="remove this axis"]').click()
    page.wait_for_function("document.getElementById('study-plan')?.dataset.runs === '12'")
    page.locator('.axis-row [name="axis-path"]').first.fill("params.lrr")   # the server's 422 next to that axis
    page.wait_for_function("document.querySelector('.axis-row .axis-error')?.textContent.includes('nearest valid paths')")
    assert page.locator("#study-submit").is_disabled()
    assert "cannot run" in page.locator("#study-plan").inner_text()   # the plan strip says why it is empty
    page.locator('.axis-row [name="axis-path"]').first.fill("params.record_every")   # lr values: no integers
    page.wait_for_function("document.querySelector('.axis-row .axis-error')?.textContent.includes('at points 0, 1')")
    said = page.locator(".axis-row .axis-error").first.text_content()
    assert said.count("Input should be a valid integer") == 1 and "Value error" not in said, said   # said once
    page.locator('.axis-row [name="axis-path"]').first.fill("params.lr")
    page.locator('.axis-row [name="axis-path"]').nth(1).fill("params.lr")   # one path twice: said, not merged
    page.wait_for_function("document.querySelectorAll('.axis-row .axis-error')[1]?.textContent === "
                           "'params.lr: already axis 1: give its values there'")
    assert "cannot run" in page.locator("#study-plan").inner_text()
    page.locator('.axis-row [name="axis-path"]').nth(1).fill("params.weight_decay")
    # the page's own checks say every mistake at once, each beside its field: an axis's span and the seeds
    values = page.locator('.axis-row [name="axis-values"]').first
    values.fill("0.025, 0.1, x")
    page.fill("#study-seeds", "0, -1")
    page.wait_for_function("document.querySelector('.field-error[data-error-for=\"seeds\"]')?.textContent !== '' && "
                           "document.querySelector('.axis-row .axis-error')?.textContent.includes('logspace')")
    assert page.locator(".has-error").count() == 2
    assert "cannot run" in page.locator("#study-plan").inner_text()
    screenshot(page, "new-study-page-errors")
    values.fill("0.025, 0.1, 3")
    page.fill("#study-base", '{"kind": "nrq", "params": {"steps": 20000, "trials": 2000, "record_every": 20}}')
    page.fill("#study-seeds", "0")
    page.wait_for_function("document.getElementById('study-plan')?.dataset.runs === '6'")
    page.locator("#study-submit").click()
    page.wait_for_url(re.compile(r"#/studies/[0-9a-f]{32}$"))
    study_id = page.url.rsplit("/", 1)[1]
    study = httpx.get(f"{service}/v1/studies/{study_id}", timeout=30).json()
    assert study["children_count"] == 6 and study["axes"] == ["params.lr", "params.weight_decay"]
    # once its children have reported progress, the head shows the server's estimated finish
    page.wait_for_function("document.getElementById('study-eta')?.textContent.startsWith('ETA ')", timeout=60_000)
    assert httpx.get(f"{service}/v1/studies/{study_id}", timeout=30).json()["eta_seconds"] > 0
    screenshot(page, "study-eta")
    # the reloads after its events update the page in place: a row filter being typed keeps its text and the
    # focus, the buttons and the children's links stay the same nodes (each reload had rebuilt them)
    # (the rows' links are held below, through their children's ends)
    held = page.evaluate(HOLD, "#study-actions button, #row-filter, #column-chooser")
    assert held == 4 + 1 + 1
    page.locator("#row-filter").press_sequentially("risk<")
    reloaded_after = page.evaluate("document.querySelector('.status-line .progress').title")
    page.wait_for_function("was => document.querySelector('.status-line .progress').title !== was", arg=reloaded_after)
    assert page.evaluate(STILL_HELD) == [True] * held, "the study page rebuilt its buttons, links or filter"
    assert page.evaluate("[document.activeElement.id, document.getElementById('row-filter').value]") == [
        "row-filter", "risk<"]
    page.locator("#row-filter").fill("")
    # its chart is redrawn in place as the study runs, and a zoom stays (each reload had reset it)
    plot = "document.getElementById('study-plot')"
    page.wait_for_function(f"{plot}?.data?.[0]?.x?.length > 2")
    page.evaluate(f"Plotly.relayout({plot}, {{'xaxis.range': [0, 100]}})")
    points = page.evaluate(f"{plot}.data[0].x.length")
    page.wait_for_function(f"n => {plot}.data[0].x.length > n", arg=points)   # redrawn with new points
    assert page.evaluate(f"{plot}._fullLayout.xaxis.range") == [0, 100]
    # between two updates it counts down on the page's clock: 90 s, read 30 s ago, is 60 s; it stops at 0
    texts = page.evaluate("""async () => { const {etaText} = await import('/ui/studies.js');
        const s = {status: 'running', eta_seconds: 90};
        return [etaText(s, 1000, 31000), etaText(s, 0, 200000), etaText({...s, status: 'succeeded'}, 0, 5000)]; }""")
    assert texts == ["ETA 1 min 0 s", "ETA 0.0 s", ""]
    page.goto(f"{service}/#/studies")   # the list shows it under the progress bar
    page.wait_for_function(f"document.querySelector('#studies-table tr[data-id=\"{study_id}\"] .eta')"
                           "?.textContent.startsWith('ETA ')")
    screenshot(page, "studies-eta")
    page.goto(f"{service}/#/experiments")   # and the experiments list, its running children's
    page.wait_for_function("document.querySelector('#experiments-table tr[data-status=\"running\"] .eta')"
                           "?.textContent.startsWith('ETA ')")
    screenshot(page, "experiments-eta")
    # refreshed every 2 s while jobs run, the list keeps its rows' links and boxes (it had rebuilt every row)
    running = "#experiments-table tr[data-status=\"running\"]"
    assert page.evaluate(HOLD, f"{running} a, {running} input") >= 2
    shown_at = page.evaluate(f"document.querySelector('{running} .progress').title")
    page.wait_for_function(f"was => document.querySelector('{running} .progress')?.title !== was", arg=shown_at)
    assert all(page.evaluate(STILL_HELD)), "the list rebuilt a running row's link or box"
    page.goto(f"{service}/#/studies/{study_id}")
    # a child's row keeps its link while the child's status moves and its summary's columns come in (a row was
    # rebuilt at each such change, and a click on its link straddling it was lost)
    statuses = "[...document.querySelectorAll('#children-table tbody .badge')].map(b => b.dataset.status)"
    page.wait_for_function(f"{statuses}.length === 6")
    assert page.evaluate(HOLD, "#children-table tbody a") == 6
    assert not page.evaluate(f"{statuses}.every(s => ['succeeded', 'failed', 'cancelled'].includes(s))")   # to come
    page.locator("#study-cancel").click()
    assert wait_ended(service, f"/v1/studies/{study_id}", timeout=60)["status"] in ("cancelled", "partial")
    page.wait_for_function(f"{statuses}.every(s => ['succeeded', 'failed', 'cancelled'].includes(s))")
    assert all(page.evaluate(STILL_HELD)), "the study page rebuilt its children's rows"
    page.locator("#study-delete").click()
    page.wait_for_url(re.compile(r"#/studies$"))
    assert httpx.get(f"{service}/v1/studies/{study_id}", timeout=30).status_code == 404
    assert [e for e in page.console.errors if not EXPECTED_4XX.search(e)] == []


def test_runs_tables_choose_columns_filter_and_sort_and_three_axes_draw_parallel_coordinates(service, page):
    response = httpx.post(f"{service}/v1/studies", timeout=30, json={
        "name": "three axes", "base": {"kind": "nrq", "params": TINY}, "seeds": [0],
        "grid": {"params.lr": [0.05, 0.1], "params.weight_decay": [0.005, 0.01], "params.momentum": [0.0, 0.5]}})
    assert response.status_code == 202, response.text
    study_id = response.json()["id"]
    wait_ended(service, f"/v1/studies/{study_id}")
    table = httpx.get(f"{service}/v1/studies/{study_id}/table", timeout=30).json()["rows"]
    page.goto(f"{service}/#/studies/{study_id}")
    page.wait_for_function(f"{PLOT}?.length > 0")
    parallel = chart(page, "parallel")
    assert parallel[0]["type"] == "parcoords"
    dims = page.evaluate(f"{PLOT}[0].dimensions.map(d => d.label)")
    assert dims == ["lr", "weight_decay", "momentum", page.locator('select[name="chart-metric"]').input_value()]
    page.fill("#row-filter", "risk<0.07 param.params.momentum.eq=0.5")   # the children table, filtered in the page
    page.locator("#row-filter").press("Enter")
    want = sorted(r["index"] for r in table if r["risk"] < 0.07 and r["params.momentum"] == 0.5)
    page.wait_for_function(f"document.querySelectorAll('#children-table tbody tr').length === {len(want)}")
    assert sorted(int(i) for i in page.evaluate(COLUMN, "index")) == want
    page.locator("#column-chooser summary").click()
    page.locator('#column-chooser input[value="loss"]').uncheck()
    page.wait_for_function("!document.querySelector('#children-table th[data-column=\"loss\"]')")
    screenshot(page, "study-parallel-and-table")

    # the experiments list: the API's filters, chosen columns, sorted by a summary value on the server
    page.goto(f"{service}/#/experiments?name=three%20axes&columns=params.lr,summary.au_rms"
              "&order_by=-summary.au_rms&where=param.params.momentum.eq%3D0.5")
    page.wait_for_function("document.querySelectorAll('#experiments-table tbody tr[data-id]').length === 4")
    index = page.evaluate("[...document.querySelectorAll('#experiments-table th')].findIndex(th => "
                          "th.dataset.column === 'summary.au_rms')")
    shown = page.evaluate(f"[...document.querySelectorAll('#experiments-table tbody tr')].map(r => "
                          f"Number(r.children[{index}].textContent))")
    expected = sorted((r["au_rms"] for r in table if r["params.momentum"] == 0.5), reverse=True)
    assert shown == pytest.approx(expected, rel=1e-3)   # as shown: 4 significant digits
    screenshot(page, "experiments-columns")
    assert page.console.errors == []

    # a where term the list cannot use is said, and the rows of the last good filter are not kept under it
    for term, said in (("momentum", 'expected key=value terms (e.g. summary.au_rms.lt=0.02), got "momentum"'),
                       ("params.momentum=0.5", "did you mean param.params.momentum?")):   # the server's 422
        page.fill("#where", term)
        page.wait_for_function("said => document.querySelector('.error-box')?.textContent.includes(said)", arg=said)
        assert page.locator("#experiments-table tbody tr[data-id]").count() == 0
    screenshot(page, "experiments-filter-refused")
    assert [e for e in page.console.errors if not EXPECTED_4XX.search(e)] == []


def test_compare_overlays_the_selected_experiments(service, page):
    ids = [submit(service, {"kind": "nrq", "name": f"compare lr {lr}", "params": {**SMALL, "lr": lr}})
           for lr in (0.05, 0.2)]
    for experiment_id in ids:
        wait_ended(service, f"/v1/experiments/{experiment_id}")
    page.goto(f"{service}/#/experiments")
    page.fill('input[name="name"]', "compare lr")      # the name filter, then both rows selected
    page.wait_for_function("document.querySelectorAll('#experiments-table tbody tr[data-id]').length === 2")
    for experiment_id in ids:
        page.check(f'#experiments-table tr[data-id="{experiment_id}"] input[type=checkbox]')
    page.click("#compare")
    page.wait_for_url(re.compile(r"#/studies/[0-9a-f]{32}$"))
    measured = "document.getElementById('study-plot')?.data?.filter(t => t.meta === 'measured')"
    page.wait_for_function(f"{measured}?.length === 2")
    traces = page.evaluate(f"{measured}.map(t => ({{name: t.name, points: t.x.length}}))")
    expected = math.ceil(SMALL["steps"] / SMALL["record_every"]) + 1   # the records and the final row
    assert sorted(traces, key=lambda t: t["name"]) == [{"name": "compare lr 0.05", "points": expected},
                                                      {"name": "compare lr 0.2", "points": expected}]
    study_url = page.url
    study = httpx.get(f"{service}/v1/studies/{study_url.rsplit('/', 1)[1]}", timeout=30).json()
    assert study["kind"] == "compare" and [c["id"] for c in study["children"]] == ids   # nothing was rerun
    screenshot(page, "compare")
    # a name typed and a row followed within the filter's debounce (300 ms): the list's pending filter used
    # to rewrite the next page's address to the list's (a reload then showed the list)
    page.goto(f"{service}/#/experiments")
    link = f'#experiments-table a[href="#/experiments/{ids[0]}"]'
    page.locator(link).wait_for()
    page.fill('input[name="name"]', "compare lr 0.05")
    page.click(link)
    page.wait_for_timeout(800)
    assert page.url.endswith(f"#/experiments/{ids[0]}"), page.url
    assert page.console.errors == []


def test_tags_filter_the_list_and_are_edited_with_the_note_in_the_page(service, page):
    tagged = submit(service, {"kind": "nrq", "name": "tagged run", "tags": ["sweep-a", "keep"], "params": SMALL})
    other = submit(service, {"kind": "nrq", "name": "other run", "tags": ["sweep-b"], "params": SMALL})
    rows = "[...document.querySelectorAll('#experiments-table tbody tr[data-id]')].map(r => r.dataset.id)"
    page.goto(f"{service}/#/experiments?tag=sweep-a")                # a tag link's address
    page.wait_for_function(f"{rows}.length === 1")
    assert page.evaluate(rows) == [tagged]
    assert page.locator(f'tr[data-id="{tagged}"] td.tags .tag').all_inner_texts() == ["keep", "sweep-a"]
    page.fill('input[name="tag"]', "")
    page.wait_for_function(f"{rows}.includes('{other}')")
    page.locator(f'tr[data-id="{other}"] td.tags .tag').click()        # a tag chip filters by it
    page.wait_for_function(f"JSON.stringify({rows}) === JSON.stringify(['{other}'])")
    assert page.url.endswith("#/?tag=sweep-b")                       # the filter is in the address,
    page.goto(f"{service}/#/experiments/{other}")
    page.locator("#edit-notes").wait_for()                            # the experiment's page is shown,
    page.go_back()                                                    # and Back finds the filter again
    page.wait_for_function(f"JSON.stringify({rows}) === JSON.stringify(['{other}'])")
    assert page.locator('input[name="tag"]').input_value() == "sweep-b"

    page.goto(f"{service}/#/experiments/{tagged}")
    page.locator("#edit-notes").click()
    page.fill("#tags-input", "keep, final")   # commas, as the new-experiment form takes them
    page.fill("#note-input", "lr too high; rerun at 0.05")
    page.locator("#save-notes").click()
    page.wait_for_function("document.querySelector('#notes .note')?.textContent === 'lr too high; rerun at 0.05'")
    wait_ended(service, f"/v1/experiments/{tagged}")                  # the page ends with the final summary
    page.wait_for_function("document.querySelector('.side .card').innerText.includes('au_rms')")
    stored = httpx.get(f"{service}/v1/experiments/{tagged}", timeout=30).json()
    assert stored["tags"] == ["final", "keep"] and stored["note"] == "lr too high; rerun at 0.05"
    assert page.locator("#notes .tag").all_inner_texts() == ["final", "keep"]
    page.locator("#edit-notes").click()
    page.fill("#tags-input", "no/slashes")                           # the server's 422 is shown in the card
    page.locator("#save-notes").click()
    page.locator("#notes .error-box").wait_for()
    assert "tags" in page.locator("#notes .error-box").inner_text()
    screenshot(page, "experiment-tags")
    assert [e for e in page.console.errors if not EXPECTED_4XX.search(e)] == []


def presets_refresh_in_place(service: str, page) -> None:
    """While a preset study runs the presets page refreshes every 3 s, in place: the other cards keep their
    buttons, lists of checks and figures, and fetch no figure again (each refresh had rebuilt every card)."""
    running = httpx.post(f"{service}/v1/presets/nrq-momentum-risk/run", timeout=30, json={
        "size": "quick", "seeds": [0], "overrides": {"params.steps": 400_000, "params.record_every": 100_000}})
    assert running.status_code == 202, running.text
    try:
        held_through_refreshes(service, page)
    finally:   # the module's one worker is left idle for the next test (its busy flag clears after the lease's end)
        study_id = running.json()["id"]
        httpx.post(f"{service}/v1/studies/{study_id}/cancel", timeout=30).raise_for_status()
        wait_ended(service, f"/v1/studies/{study_id}")
        deadline = time.monotonic() + 30
        while any(q["busy_processes"] for q in httpx.get(f"{service}/v1/queue", timeout=30).json()["queues"].values()):
            assert time.monotonic() < deadline, "the worker stayed busy after the preset study was cancelled"
            time.sleep(0.2)


def held_through_refreshes(service: str, page) -> None:
    """The presets page, reloaded while a preset study runs: what it shows held through two refreshes."""
    figures: list[str] = []

    def asked(request) -> None:
        if "figure.png" in request.url:
            figures.append(request.url)
    page.on("request", asked)
    with page.expect_response(lambda response: "/v1/studies?limit=" in response.url):
        page.reload()
    page.locator('article.preset[data-preset="nrq-momentum-risk"] .progress').wait_for()
    page.wait_for_function("document.querySelector('article.preset img.figure')?.naturalWidth > 0")
    held = page.evaluate(HOLD, 'article.preset:not([data-preset="nrq-momentum-risk"]) :is(button, details, '
                               'img.figure)')
    others = len(httpx.get(f"{service}/v1/presets", timeout=30).json()) - 1
    fetched = len(figures)
    for _ in range(2):
        with page.expect_response(lambda response: "/v1/studies?limit=" in response.url):
            pass
    assert held >= 2 * others + 1 and all(page.evaluate(STILL_HELD)), "the presets page rebuilt its cards"
    assert len(figures) == fetched >= 1, figures   # the finished preset's figure, fetched once
    page.remove_listener("request", asked)


def test_every_page_renders_without_console_errors(service, page, grid_study):
    # everything submitted first, then awaited: the service's worker takes each as the last ends (one wait
    # after another left it idle between them, a broker poll each)
    experiment_id = submit(service, {"kind": "nrq", "name": "shown", "params": SMALL})
    # a rate so large that the numbers break: it succeeds, its records non-finite from some step on
    broken = submit(service, {"kind": "nrq", "name": "diverging", "params": {
        "lr": 1000, "weight_decay": 0.9, "steps": 200, "trials": 16, "record_every": 10}})
    # a points study whose first axis holds lists: no chart can place it, and the page opened on a 422 x
    listed = httpx.post(f"{service}/v1/studies", timeout=30, json={"name": "listed axis", "base": {
        "kind": "nrq", "params": {**TINY, "dim": 3, "eig_low": None, "eig_high": None}}, "points": [
        {"params.eigenvalues": [1.0, 1.5, 2.0], "params.lr": 0.05}, {"params.eigenvalues": [1.0, 2.0, 4.0], "params.lr": 0.1}]})
    assert listed.status_code == 202, listed.text
    continuous = submit(service, {"kind": "sde", "name": "two theories", "params": {
        "model": "nrq", "steps": 200, "trials": 16, "record_every": 10}})   # au: au_theory and au_equilibrium
    # record_every = steps: one record, at step 0 (warned: sparse_tail); its points drawn as markers
    lone = submit(service, {"kind": "nrq", "name": "one record", "params": {"steps": 200, "trials": 16,
                                                                          "record_every": 200}})
    trained = submit(service, {"kind": "train", "name": "per layer", "params": {"steps": 20, "record_every": 10}})
    # a run that fails before its first record (the service's CIFAR-10 files are not pickles)
    unrecorded = submit(service, {"kind": "train", "name": "unreadable data", "params": {"dataset": {"name": "cifar10"},
                                                                                     "steps": 10}})
    preset = httpx.post(f"{service}/v1/presets/nrq-equilibrium-tradeoff/run", timeout=30, json={
        "size": "quick", "seeds": [0, 1], "overrides": {"params.steps": 1500, "params.trials": 32,
                                                          "params.record_every": 50}})
    assert preset.status_code == 202, preset.text
    for experiment in (experiment_id, continuous, lone):
        wait_ended(service, f"/v1/experiments/{experiment}")
    since = wait_ended(service, f"/v1/experiments/{broken}")["summary"]["nonfinite_from_step"]
    assert since > 0
    layers = wait_ended(service, f"/v1/experiments/{trained}")["summary"]["layers"]
    assert wait_ended(service, f"/v1/experiments/{unrecorded}")["status"] == "failed"
    for study in (listed, preset):
        wait_ended(service, f"/v1/studies/{study.json()['id']}")

    pages = {
        "experiments": ("#/experiments", "#experiments-table tbody tr[data-id]"),
        "experiment": (f"#/experiments/{experiment_id}", "#chart-risk .main-svg"),
        "broken-experiment": (f"#/experiments/{broken}", "#chart-risk .annotation-text"),
        "new-experiment": ("#/new", '[name="params.lr"]'),
        "duplicate-and-edit": (f"#/new?from={experiment_id}", '[name="params.lr"]'),
        "studies": ("#/studies", "#studies-table tbody tr[data-id]"),
        "study": (f"#/studies/{grid_study}", "#study-plot .main-svg"),
        "listed-axis-study": (f"#/studies/{listed.json()['id']}", "#study-plot .main-svg"),
        "train-experiment": (f"#/experiments/{trained}", "#summary-layers"),
        "sde-experiment": (f"#/experiments/{continuous}", "#chart-au .main-svg"),
        "one-record-experiment": (f"#/experiments/{lone}", "#chart-au .main-svg"),
        "failed-experiment": (f"#/experiments/{unrecorded}", "#nothing-recorded"),
        "presets": ("#/presets", 'article.preset[data-preset="nrq-equilibrium-tradeoff"] img.figure[src]'),
        "queue": ("#/queue", "#queues td"),
    }
    for name, (fragment, ready) in pages.items():
        page.goto(f"{service}/{fragment}")
        page.locator(ready).first.wait_for()
        if name == "duplicate-and-edit":   # the form starts from the experiment's spec
            assert page.locator('[name="name"]').input_value() == "shown"
            assert page.locator('[name="params.steps"]').input_value() == str(SMALL["steps"])
        if name == "experiment":   # a log axis labels decades (and 1, 2, 5 written out), no bare digits between
            ticks = page.evaluate(TICKS, "#chart-risk .ytick text")
            assert len(ticks) >= 2 and not any(BARE_DIGIT.match(t) for t in ticks), ticks
            assert all(PLAIN_NUMBER.match(t) for t in ticks), ticks
        if name == "broken-experiment":   # the line stops where the numbers broke, and the chart says so
            assert page.locator("#chart-risk .annotation-text").text_content() == f"non-finite from step {since}"
            assert page.locator("#chart-risk .annotation-text").count() == 1
            # its spec's warning (ηλ ≥ 2: no equilibrium) shown as text (an array given to replaceChildren had
            # shown "[object HTMLDivElement]")
            assert page.locator(".exp-head .warning-box").first.inner_text().startswith("no_equilibrium: ")
            assert "[object" not in page.locator(".exp-head").inner_text()
        if name == "listed-axis-study":   # a scatter along the one axis it can place
            assert page.locator('select[name="chart-x"]').input_value() == "params.lr"
            assert page.locator('#study-plot').get_attribute("data-type") == "scatter"
        if name == "train-experiment":   # each layer's summary values, as the README lists them
            # a column per layer, a row per value (a column per value overflowed the side, cut mid-word)
            metrics = list(dict.fromkeys(m for values in layers.values() for m in values))
            assert page.locator("#summary-layers tr").count() == 1 + len(metrics)
            headers = page.locator("#summary-layers tr").first.locator("th").all_inner_texts()[1:]
            assert [t.replace("\u200b", "").replace("\n", "") for t in headers] == list(layers), headers
            row = page.locator("#summary-layers tr").nth(1 + metrics.index("au_rms"))
            assert row.locator("th").inner_text() == "au_rms"
            first = next(iter(layers))
            assert row.locator("td").first.inner_text() != "—" and layers[first]["au_rms"] is not None
            table = page.evaluate("(() => { const t = document.getElementById('summary-layers'); "
                                  "return [t.scrollWidth, t.parentElement.clientWidth]; })()")
            assert table[0] <= table[1], table   # no sideways scrolling at 1400 px
        if name == "sde-experiment":   # two black theory lines on one chart, told apart by their dashes
            dashes = page.evaluate("document.getElementById('chart-au')._fullData"
                                   ".filter(t => t.meta === 'theory').map(t => [t.name, t.line.dash])")
            assert len(dashes) == 2 and dashes[0][1] != dashes[1][1], dashes
            assert [n.split(" ")[:3] for n, _ in dashes] == [["au", "(theory", "along"],
                                                             ["au_equilibrium", "(theory", "at"]], dashes   # what each is
        if name == "one-record-experiment":   # the lone point shows (a line through it alone draws nothing)
            assert page.locator(".exp-head .warning-box").first.inner_text().startswith("sparse_tail: ")
            modes = page.evaluate("document.getElementById('chart-au').data"
                                  ".filter(t => t.meta !== 'theory').map(t => [t.name, t.mode, t.x.length])")
            assert modes == [["au_rms", "lines+markers", 1], ["au_mean", "lines+markers", 1]], modes
        if name == "studies":   # a preset study links to its preset's card, not the top of a long gallery
            page.locator('#studies-table a[href="#/presets?preset=nrq-equilibrium-tradeoff"]').first.click()
            page.locator('article.preset.target[data-preset="nrq-equilibrium-tradeoff"]').wait_for()
            page.goto(f"{service}/{fragment}")
            page.locator(ready).first.wait_for()
        if name == "failed-experiment":   # one line for the charts, and no empty tables or blank images offered
            assert page.locator(".chart").count() == 0
            assert page.locator(".downloads button").all_inner_texts() == ["JSON"]
            assert "failed before its first record" in page.locator("#nothing-recorded").inner_text()
        if name == "queue":   # nothing queued or running: zeros, not blanks; the service's worker is up, idle
            cells = page.locator("#queues tr").nth(1).locator("td").all_inner_texts()
            busy, up = (int(n) for n in cells[3].split(" / "))
            assert cells[:3] == ["cpu", "0", "0"] and busy == 0 and up >= 1, cells
        if name == "presets":
            page.wait_for_function("document.querySelector('article.preset img.figure')?.naturalWidth > 0")
            assert page.locator("article.preset").count() == len(httpx.get(f"{service}/v1/presets").json())
            assert page.locator('article.preset[data-preset="nrq-equilibrium-tradeoff"] .badge[data-verdict]').count() > 0
        page.wait_for_timeout(300)
        screenshot(page, name)
        assert page.console.errors == [], (name, page.console.errors)
        if name == "presets":
            presets_refresh_in_place(service, page)
    page.set_viewport_size({"width": 420, "height": 900})   # every page usable on a small screen
    for name, (fragment, ready) in {**pages, "new-study": ("#/studies/new", "#study-plan[data-runs]")}.items():
        page.goto(f"{service}/{fragment}")
        page.locator(ready).first.wait_for()
        page.wait_for_timeout(300)
        # no sideways scrolling of the page: tables scroll inside their card, the header wraps
        assert page.evaluate("document.documentElement.scrollWidth") <= 420, name
        if name == "study":   # its heatmap's theory under the measured cells, not beside them
            page.wait_for_function("document.getElementById('study-plot')?.data?.[0]?.type === 'heatmap'")
            layout = page.evaluate("(() => { const l = document.getElementById('study-plot').layout; "
                                   "return [l.yaxis.domain, l.yaxis2?.domain, l.xaxis2?.matches]; })()")
            assert layout == [[0.58, 1], [0, 0.42], "x"], layout
        screenshot(page, f"{name}-420px")
    # the queue with a job of yours listed: its table scrolls in its card too (the page had scrolled sideways)
    waiting = submit(service, {"kind": "nrq", "name": "a long one on the queue page",
                               "params": {**SMALL, "steps": 5_000_000, "record_every": 100_000}})
    page.goto(f"{service}/#/queue")
    page.locator(f'#my-jobs a[href="#/experiments/{waiting}"]').wait_for()
    # refreshed every 3 s, in place (it rebuilt its links): held through one refresh, drawn before the next's answer
    assert page.evaluate(HOLD, f'#my-jobs a[href="#/experiments/{waiting}"]') == 1
    for _ in range(2):
        with page.expect_response(lambda response: response.url.endswith("/v1/queue")):
            pass
    assert all(page.evaluate(STILL_HELD)), "the queue page rebuilt its jobs' links"
    assert page.evaluate("document.documentElement.scrollWidth") <= 420
    screenshot(page, "queue-with-a-job-420px")
    # cancelled from its page, which asks first (one click had stopped a long run): dismissed, nothing happens
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.goto(f"{service}/#/experiments/{waiting}")
    page.click("#cancel")
    page.wait_for_timeout(500)
    assert len(asked) == 1 and asked[0].startswith("Cancel this "), asked
    assert "points so far are kept" in asked[0] or asked[0].endswith("It will not start."), asked   # running or queued
    assert httpx.get(f"{service}/v1/experiments/{waiting}", timeout=30).json()["cancel_requested"] is False
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#cancel")
    assert wait_ended(service, f"/v1/experiments/{waiting}")["status"] == "cancelled"
    assert page.console.errors == [], page.console.errors


def test_with_auth_on_a_wrong_key_brings_the_prompt_back(tmp_path, page):
    with serve_for_alice_and_bob(tmp_path, bob=False) as (alice, _, base, _):
        urls: list[str] = []
        authorizations: list[str] = []
        page.on("request", lambda r: (urls.append(r.url), authorizations.append(r.headers.get("authorization", "")))
                if "/v1/" in r.url else None)
        page.goto(f"{base}/#/experiments")
        dialog = page.locator("#key-dialog")
        page.wait_for_function("document.getElementById('key-dialog').open")
        page.fill("#key-input", "smd_not-a-key")
        page.click("#key-dialog button[type=submit]")
        page.wait_for_function("document.getElementById('key-dialog').open "
                               "&& document.getElementById('key-reason').textContent !== ''")
        assert "key" in page.locator("#key-reason").inner_text().lower()   # the server's 401 message
        screenshot(page, "auth-prompt-again")
        page.fill("#key-input", alice["SMD_KEY"])
        page.click("#key-dialog button[type=submit]")
        page.locator("#experiments-table").wait_for()
        assert not dialog.evaluate("d => d.open")
        assert f"Bearer {alice['SMD_KEY']}" in authorizations
        assert not any(alice["SMD_KEY"] in url or "smd_not-a-key" in url for url in urls)   # never in a URL
        page.reload()   # kept in sessionStorage: asked once per tab
        page.locator("#experiments-table tbody tr").first.wait_for()
        assert not dialog.evaluate("d => d.open")
    assert [e for e in page.console.errors if not EXPECTED_4XX.search(e)] == []
