// Studies: the list, and a study's page: its children in a table sortable by any column, overlay /
// heatmap / scatter charts with the axes and metric chosen in the page, and its checks with verdicts.

import { api, download, follow, imageUrl } from "./api.js";
import { drawHeatmap, drawOverlay, drawParallel, drawScatter } from "./studycharts.js";
import {
  countdown, errorBox, fmtDuration, fmtNumber, fmtTime, fmtValue, h, keyedChildren, progressBar, refill, setProgress,
  statusBadge, TERMINAL,
} from "./util.js";

const STUDY_DONE = new Set(["succeeded", "failed", "cancelled", "partial"]);

// a running study's estimated finish: the server's seconds to it, less those since it was read (readAt and now,
// performance.now() milliseconds: the page's own clock, whatever the server's); "" when it has none
export function etaText(s, readAt = 0, now = readAt) {
  return s.status === "running" && s.eta_seconds != null ? `ETA ${fmtDuration(countdown(s.eta_seconds, readAt, now))}` : "";
}

export function renderList(main) {
  const body = h("tbody");
  const message = h("div");
  main.append(h("div.page-head", h("h1", "Studies"), h("a.button#new-study", { href: "#/studies/new" }, "New study")),
    message, h("div.scroll", h("table.list#studies-table", h("thead", h("tr", h("th", "name"),
    h("th", "status"), h("th", "progress"), h("th", "runs"), h("th", "preset"), h("th", "created"))), body)));
  let timer;
  async function load() {
    try {
      const page = await api("/v1/studies?limit=100");
      // a row is rebuilt only when what it shows changes, its progress and ETA updated in place: a link rebuilt
      // under the pointer at each refresh lost the click
      keyedChildren(body, page.items, (s) => s.id,
        (s) => [s.name, s.status, s.points, s.children_count, s.preset, s.preset_size, s.created_at],
        (s) => h("tr", { dataset: { id: s.id } },
          h("td", h("a", { href: `#/studies/${s.id}` }, s.name || s.id.slice(0, 12))), h("td", statusBadge(s.status)),
          h("td", progressBar(s.progress), h("div.muted.eta")),
          h("td", s.points === s.children_count ? `${s.children_count}` : `${s.points} points → ${s.children_count}`),
          h("td", s.preset ? h("a", { href: `#/presets?preset=${encodeURIComponent(s.preset)}` }, `${s.preset} (${s.preset_size})`) : ""),
          h("td", fmtTime(s.created_at))),
        (tr, s) => {
          setProgress(tr.querySelector(".progress"), s.progress);
          const eta = tr.querySelector(".eta");
          eta.textContent = etaText(s);
          eta.hidden = !eta.textContent;
        });
      if (!page.items.length) body.append(h("tr", h("td.muted", { colSpan: 6 }, "No studies yet.")));
      if (page.items.some((s) => !STUDY_DONE.has(s.status))) timer = setTimeout(load, 3000);
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  }
  load();
  return () => clearTimeout(timer);
}

export function verdictBadge(verdict) {
  return h(`span.badge.verdict-${verdict}`, { dataset: { verdict } }, verdict.replace("_", " "));
}

export function checksTable(checks) {
  if (!checks?.length) return h("p.muted", "No checks (yet).");
  return h("div.scroll", h("table.list.checks", h("tr", h("th", "claim"), h("th", "predicted"), h("th", "measured"),
    h("th", { title: "measured / predicted − 1" }, "rel. error"), h("th", "tolerance"), h("th", "verdict")),
  checks.map((c) => h("tr", h("td", c.claim, c.note ? h("details.muted", h("summary", "note"), c.note) : ""),
    h("td", fmtValue(c.predicted)), h("td", fmtValue(c.measured)), h("td.rel-error", relativeError(c)),
    h("td", fmtValue(c.tolerance), c.tolerance_rule ? h("details.muted", h("summary", "rule"), c.tolerance_rule) : ""),
    h("td", verdictBadge(c.verdict))))));
}

// measured / predicted − 1, as a signed percentage, where both are numbers and the prediction is not 0.
function relativeError(check) {
  const { measured: m, predicted: p } = check;
  if (typeof m !== "number" || typeof p !== "number" || p === 0) return "";
  const r = m / p - 1;
  return `${r >= 0 ? "+" : ""}${(100 * r).toPrecision(Math.abs(r) < 0.01 ? 2 : 3)}%`;
}

export function renderStudy(main, [id]) {
  const base = `/v1/studies/${id}`;
  // Built once and updated in place at each reload (after events, while the study runs): a button, link, select
  // or input rebuilt under the pointer lost the click, or the text being typed.
  const title = h("h1");
  const about = h("div.muted");
  const bar = progressBar(0);
  const counts = h("span.muted");
  // the server's estimate as of this update (a progress flush brings the next), counting down between them
  const etaShown = h("span#study-eta.muted");
  const figure = h("div");
  const head = h("div", title, about, h("div.status-line", bar, counts, etaShown), figure);
  const actions = h("div.toolbar#study-actions");
  const message = h("div");
  const checks = h("section.card", h("h3", "Checks"));
  const chartCard = h("section.card#study-chart");
  const tableCard = h("section.card");
  main.append(message, head, actions, checks, chartCard, tableCard);
  let study = null;
  let table = null;
  let options = null;
  let sortBy = { column: "index", descending: false };
  // the chart: its type, metric, x (scatter, heatmap), y (heatmap), time axis (overlay), colour-by, seeds
  // (overlay: mean ± SE or each) and the heatmap's theory view (beside, or measured/theory)
  const choice = { type: "overlay", metric: null, x: null, y: null, time: "step", by: "point", seeds: "mean",
    view: "side", log: true };
  const chosen = new Set();   // what the user picked; the rest follows the study as results arrive
  let stop = () => {};
  let drawing = 0;   // the latest chart request: an older answer is dropped

  let loads = 0;   // the latest load: an older one that answers later is dropped
  let readAt = 0;   // when the study shown was asked for (performance.now()): its ETA counts down from then
  async function load() {
    const mine = ++loads;
    let answer;
    const asked = performance.now();
    try {   // the study first: a table read after it is at least as new, so an ended study's table is final
      const read = await api(base);
      answer = [read, ...await Promise.all([api(`${base}/table`), api(`${base}/charts`)])];
    } catch (error) {
      if (mine === loads) message.replaceChildren(errorBox(error));
      return;
    }
    if (mine !== loads) return;
    [study, table, options] = answer;
    readAt = asked;
    message.replaceChildren();
    drawHead();
    drawActions();
    checks.hidden = !study.preset;   // only a preset's study has checks
    refill(checks, study.checks ?? table.checks, () => [h("h3", "Checks"), checksTable(study.checks ?? table.checks)]);
    drawTable();
    drawChartControls();
  }

  function drawHead() {
    const s = study;
    refill(title, [s.name, s.status], () => [s.name || s.id, " ", statusBadge(s.status)]);
    refill(about, [s.kind, s.children_count, s.missing?.length, s.points, s.axes, s.preset, s.preset_size], () => [
      s.kind === "compare" ? `compares ${s.children_count} experiments`
        + (s.missing?.length ? ` (${s.missing.length} since deleted)` : "")
        : `${plural(s.points, "point")} × ${plural(Math.round(s.children_count / Math.max(1, s.points)), "seed")} = ${
          plural(s.children_count, "run")} · axes: ${s.axes.join(", ")}`,
      s.preset ? ` · preset ${s.preset} (${s.preset_size})` : ""]);
    setProgress(bar, s.progress);
    counts.textContent = Object.entries(s.counts).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(" · ");
    etaShown.textContent = etaText(s, readAt, performance.now());
    refill(figure, [s.preset, STUDY_DONE.has(s.status)], () => {
      if (!s.preset) return "";
      const card = h("section.card", h("h3", "Figure"));
      if (STUDY_DONE.has(s.status)) {
        const img = h("img.figure", { alt: `figure of ${s.preset}` });
        const link = h("a", { href: "#", title: "open at full size" }, img);
        imageUrl(`${base}/plots/figure.png?checks=false`).then((url) => { img.src = url; link.href = url; link.target = "_blank"; })
          .catch((e) => img.replaceWith(errorBox(e)));
        card.append(link);
      } else {
        card.append(h("p.muted", "The figure is drawn when every run has ended."));
      }
      return card;
    });
  }

  function drawActions() {
    const done = STUDY_DONE.has(study.status);
    const failed = (error) => message.replaceChildren(errorBox(error));
    refill(actions, [study.kind, done], () => [
      study.kind !== "compare" && !done ? h("button#study-cancel", { type: "button", onclick: async () => {
        const open = (study.counts?.queued ?? 0) + (study.counts?.running ?? 0);   // not those that ended
        if (!window.confirm(`Cancel the ${open} ${open === 1 ? "run" : "runs"} of this study that have not ended?`)) return;
        try { await api(`${base}/cancel`, { method: "POST" }); await load(); } catch (e) { failed(e); }
      } }, "Cancel study") : "",
      h("button#study-delete", { type: "button", onclick: async () => {
        if (!window.confirm("Delete this study and its runs? This cannot be undone.")) return;
        try { await api(base, { method: "DELETE" }); stop(); window.location.hash = "#/studies"; } catch (e) { failed(e); }
      } }, "Delete study"),
      h("button#study-csv", { type: "button", onclick: () => download(`${base}/table.csv`, `study-${id}.csv`).catch(failed) },
        "Table as CSV"),
      h("button#study-parquet", { type: "button", onclick: () => download(`${base}/table.parquet`, `study-${id}.parquet`)
        .catch(failed) }, "Table as Parquet")]);
  }

  function drawChartControls() {
    const compared = study.kind === "compare";
    const series = options.series_metrics;
    const summary = options.summary_metrics;
    const axes = options.axes;
    const varying = options.varying;
    // x and y: numeric axes and derived values (options.axes); an axis of text or objects (a dataset, a noise
    // name) varies and names points, but no chart can place it: the first draw was a 422 under the wrong labels
    const studyAxes = axes.filter((a) => study.axes.includes(a));
    const placed = varying.filter((a) => axes.includes(a));
    const types = [...(series.length ? ["overlay"] : []), ...(summary.length && !compared && axes.length ? ["scatter"] : []),
      // a heatmap over two of the study's axes (a derived value that varies with x would leave most cells empty)
      ...(summary.length && !compared && studyAxes.length >= 2 ? ["heatmap"] : []),
      ...(summary.length && !compared && study.axes.length >= 3 ? ["parallel"] : [])];
    // by default: a heatmap of two varying axes, a scatter of one, an overlay while nothing is summarized
    const preferred = types.find((t) => t === (placed.length >= 2 ? "heatmap" : "scatter")) ?? types[0];
    if (!chosen.has("type") || !types.includes(choice.type)) choice.type = preferred;
    const metrics = choice.type === "overlay" ? series : summary;
    if (!chosen.has("metric") || !metrics.includes(choice.metric)) choice.metric = defaultMetric(metrics, new Set(table.derived ?? []));
    if (!chosen.has("x") || !axes.includes(choice.x)) choice.x = placed[0] ?? studyAxes[0] ?? axes[0];
    if (!chosen.has("y") || !axes.includes(choice.y) || choice.y === choice.x) {
      choice.y = placed.find((a) => a !== choice.x) ?? studyAxes.find((a) => a !== choice.x) ?? axes.find((a) => a !== choice.x);
    }
    const colourBy = ["point", ...studyAxes];
    // by default an overlay gives each point its colour, a scatter colours by the other varying axis
    if (!chosen.has("by")) choice.by = choice.type === "scatter" ? placed.find((a) => a !== choice.x) ?? "point" : "point";
    if (!colourBy.includes(choice.by)) choice.by = "point";
    const pick = (name, values, labels = {}) => h("label", `${LABELS[name] ?? name} `, h("select", { name: `chart-${name}`,
      onchange: (e) => { choice[name] = e.target.value; chosen.add(name); drawChartControls(); } },
    values.map((v) => h("option", { value: v, selected: v === choice[name] }, labels[v] ?? v))));
    if (!types.length) {
      const queued = study.status === "queued";
      refill(chartCard, ["empty", queued], () => [h("h3", "Chart"), h("p.muted#study-plot-empty",
        queued ? "Queued: the charts start when the first run records." : "No data to chart yet.")]);
      return;
    }
    const caption = (compared && CAPTIONS[`compared ${choice.type}`]) || CAPTIONS[choice.type];
    // the controls and the chart's div are rebuilt when a choice, or what can be chosen, changed; a reload that
    // changed neither redraws the chart in its div (Plotly.react) and leaves an open select alone
    refill(chartCard, [types, metrics, choice, options.overlay_x, axes, studyAxes, compared, caption], () => {
      const controls = [pick("type", types), pick("metric", metrics)];
      if (choice.type === "overlay") {
        // a compared experiment is one run: no seeds to average
        controls.push(pick("time", options.overlay_x),
          ...(compared ? [] : [pick("seeds", ["mean", "all"], { mean: "mean ± SE", all: "each seed" })]),
          pick("log", ["true", "false"], { true: "log", false: "linear" }));
      }
      if (choice.type !== "overlay" && choice.type !== "parallel") controls.push(pick("x", axes));
      if (choice.type === "heatmap") controls.push(pick("y", axes.filter((a) => a !== choice.x && (studyAxes.includes(a) || a === choice.y))),
        pick("view", ["side", "ratio"], { side: "theory beside", ratio: "measured / theory" }));
      if ((choice.type === "overlay" || choice.type === "scatter") && !compared) controls.push(pick("by", colourBy));
      return [h("h3", "Chart"), h("div.toolbar", controls), h("div.chart#study-plot", { dataset: { type: choice.type } }),
        h("p.muted.caption", caption)];
    });
    drawChart();
  }

  async function drawChart() {
    const div = chartCard.querySelector("#study-plot");
    const ticket = ++drawing;
    // drawn again in place, the div shows the last draw until this one lands: data-status says which study
    // state the chart drawn is of (its data asked for after the study read as that), as data-type says its type
    const status = study.status;
    div.querySelector(":scope > .error-box")?.remove();   // the last draw's, which had purged the chart (below)
    const failed = (error) => {
      if (ticket !== drawing) return;
      window.Plotly?.purge(div);   // the next draw in this div starts anew, as in a new one
      delete div.dataset.status;
      div.replaceChildren(errorBox(error));
    };
    if (choice.type === "parallel") {   // the points' means, from the table grouped by point
      const grouped = await api(`${base}/table?group=point`).catch(failed);
      if (grouped && ticket === drawing) {
        await drawParallel(div, grouped.rows, study.axes, choice.metric);
        if (ticket === drawing) div.dataset.status = status;   // (a draw waits for Plotly's script on first load)
      }
      return;
    }
    const query = { metric: choice.metric };
    if (choice.type === "overlay") query.x = choice.time;
    else query.x = choice.x;
    if (choice.type === "heatmap") query.y = choice.y;
    if (choice.type === "scatter" && choice.by !== "point" && choice.by !== choice.x) query.by = choice.by;   // by = x: one curve
    let data;
    try {
      data = await api(`${base}/charts/${choice.type}?${new URLSearchParams(query)}`);
    } catch (error) {
      failed(error);
      return;
    }
    if (ticket !== drawing) return;
    div.dataset.theory = data.theory ?? "";
    const varying = study.kind === "compare" ? [] : options.varying;
    if (choice.type === "overlay") {
      if (study.kind === "compare") {   // members are named, not placed on axes
        [...data.lines, ...(data.not_recorded ?? [])].forEach((line) => {
          const row = table.rows.find((r) => r.experiment_id === line.experiment_id);
          line.values = { member: row?.name || line.values?.name || line.experiment_id.slice(0, 8) };
        });
      }
      await drawOverlay(div, data, { by: choice.by, seeds: choice.seeds, log: choice.log !== "false" && choice.log !== false,
        varying: study.kind === "compare" ? ["member"] : varying });
    } else if (choice.type === "scatter") {
      await drawScatter(div, data, { by: choice.by, varying });
    } else {
      await drawHeatmap(div, data, { mode: choice.view });
    }
    if (ticket === drawing) div.dataset.status = status;
  }

  // The children table: sort by any column, choose the columns shown, filter rows ("risk<0.05 params.lr>=0.1").
  // A comparison starts on the columns whose values differ between its runs.
  let hiddenColumns = null;
  let rowFilter = "";
  // built once: the live reloads update the title, the chooser's count, the header and the rows that changed, and
  // leave the filter being typed, the open chooser and the links in place
  const tableTitle = h("h3", "Children");
  const chooserSummary = h("summary", "columns");
  const columnList = h("div.column-list");
  const filterInput = h("input#row-filter", { type: "search", size: 40,
    placeholder: "risk<0.05 params.lr>=0.1", title: "space-separated: column<op>value (op < <= > >= = !=), or the "
      + "API's summary.<name>[.op]=value and param.<spec path>[.op]=value",
    onchange: (e) => { rowFilter = e.target.value.trim(); drawTable(); } });
  const filterError = h("span.field-error");
  const tableHead = h("thead");
  const tableBody = h("tbody");
  const tableTools = h("div.toolbar", { hidden: true }, h("details#column-chooser", chooserSummary, columnList),
    h("label", "filter ", filterInput), filterError);
  const tableScroll = h("div.scroll", { hidden: true }, h("table.list.sortable#children-table", tableHead, tableBody));
  tableCard.append(tableTitle, tableTools, tableScroll);   // the heading alone until the first table
  function drawTable() {
    const all = table.columns.filter((c) => c !== "experiment_id");
    if (hiddenColumns === null) {
      const same = (c) => new Set(table.rows.map((r) => JSON.stringify(r[c] ?? null))).size <= 1;
      const keep = new Set(["index", "status", "name"]);
      hiddenColumns = new Set(all.filter((c) => !keep.has(c) && (study.kind === "compare" || c === "warnings") && same(c)));
    }
    const columns = all.filter((c) => !hiddenColumns.has(c));
    let rows = [...table.rows].sort((a, b) => compare(a[sortBy.column], b[sortBy.column]) * (sortBy.descending ? -1 : 1));
    let refusal = "";   // the filter's error, said beside it
    try { rows = rows.filter(rowMatcher(rowFilter)); } catch (error) { refusal = error.message; }
    refill(tableHead, [columns, sortBy], () => h("tr", columns.map((c) => h("th", { dataset: { column: c }, onclick: () => {
      sortBy = { column: c, descending: sortBy.column === c ? !sortBy.descending : false };
      drawTable();
    } }, c, sortBy.column === c ? (sortBy.descending ? " ▼" : " ▲") : ""))));
    const cell = (r, c) => {
      if (c === "index") return h("a", { href: `#/experiments/${r.experiment_id}` }, r[c]);
      if (c === "status") return statusBadge(r[c]);
      // a warning's code, its message on hover and on the child's page: messages (~240 characters) made each row
      // of a short study's table a column of words
      if (c === "warnings" && r[c]) return h("span.warning-codes", { title: r[c] },
        r[c].split(" | ").map((w) => w.split(":")[0]).join(", "));
      // a compare study's member (its axis "experiment"): a link to it, not a bare 32-character id
      if (c === "experiment" && typeof r[c] === "string") return h("a", { href: `#/experiments/${r[c]}` }, r[c].slice(0, 12));
      return r[c] !== null && typeof r[c] === "object" ? h("code.small", JSON.stringify(r[c])) : fmtNumber(r[c]);
    };
    tableTools.hidden = tableScroll.hidden = false;
    // a row is built once, and its cells kept by column, each rebuilt when its value changes: a row rebuilt as its
    // child's status moved, or its summary's columns came in, lost a click on its index link
    keyedChildren(tableBody, rows, (r) => `${r.index}:${r.experiment_id}`, () => null, () => h("tr"),
      (tr, r) => keyedChildren(tr, columns, (c) => c, (c) => r[c] ?? null, (c) => h("td", cell(r, c))));
    // the chooser's boxes keep their own state (hiddenColumns follows them): rebuilt only for other columns
    refill(columnList, all, () => all.map((c) => h("label", h("input", { type: "checkbox", name: "column", value: c,
      checked: !hiddenColumns.has(c), onchange: (e) => {
        if (e.target.checked) hiddenColumns.delete(c); else hiddenColumns.add(c);
        drawTable();
      } }), ` ${c}`)));
    chooserSummary.textContent = `columns (${columns.length} of ${all.length})`;
    tableTitle.textContent = `Children (${rows.length}${rows.length !== table.rows.length ? ` of ${table.rows.length}` : ""})`;
    filterError.textContent = refusal;
    filterError.hidden = !refusal;
  }

  // at most one reload per 800 ms, the first 800 ms after an event: postponing it at every event (a debounce)
  // never reloaded while children kept flushing progress more often than that
  let timer = null;
  let left = false;
  load().then(() => {
    if (!left && study && !STUDY_DONE.has(study.status)) {
      // none once the page shows the study ended: its state then is final, and a redraw would only flicker
      const reload = () => { timer = null; if (!STUDY_DONE.has(study?.status)) load(); };
      stop = follow(`${base}/events`, base, () => { if (!STUDY_DONE.has(study?.status)) timer ??= setTimeout(reload, 800); },
        (s) => STUDY_DONE.has(s.status) || TERMINAL.has(s.status));
    }
  });
  // the ETA counts down between updates (a study of long children may flush progress once a minute)
  const ticking = setInterval(() => {
    if (study) etaShown.textContent = etaText(study, readAt, performance.now());
  }, 1000);
  return () => { left = true; stop(); clearTimeout(timer); clearInterval(ticking); };
}

const LABELS = { by: "colour by", time: "x", log: "y", view: "theory" };
const CAPTIONS = {
  "compared overlay": "Each compared experiment in its colour, its theory dashed in the same colour.",
  overlay: "Each point in its colour: the mean over its seeds with a band of ± one standard error (or each seed), "
    + "its theory dashed in the same colour.",
  scatter: "Each point: the mean over its seeds ± one standard error (filled), its theory (open circle); dashed: the "
    + "theory along x, one curve for each setting of the other axes where their theory differs (named in the legend).",
  parallel: "One line per point (the mean over its seeds), an axis per study axis and the metric last, coloured by it.",
  heatmap: "Cells: the mean over seeds (± standard error). Theory beside on the same colour scale (blank: no theory "
    + "there), or measured / theory. Dotted: cells of equal ηλ.",
};

// The metric a chart starts on: a measured one the seed figures are about, else the first measured one;
// a derived input (ηλ, η/λ: the table's `derived`) only while nothing is measured yet.
const MEASURED_FIRST = /^(risk|au_rms|train_loss|norm_sq|norm|spread)$/;

function defaultMetric(metrics, derived) {
  const measured = metrics.filter((m) => !derived.has(m));
  return measured.find((m) => MEASURED_FIRST.test(m)) ?? measured[0] ?? metrics[0];
}

function compare(a, b) {
  if (a === b) return 0;
  if (a === null || a === undefined || a === "") return 1;
  if (b === null || b === undefined || b === "") return -1;
  return typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b));
}

// A row predicate from "col<op>value …" terms, or the API's own filters (summary.<name>[.op]=value,
// param.<spec path>[.op]=value; op eq ne lt le gt ge), all of which must hold; throws naming a term it
// cannot read.
const API_OPS = { eq: "=", ne: "!=", lt: "<", le: "<=", gt: ">", ge: ">=" };

function rowMatcher(text) {
  const terms = text.split(/\s+/).filter(Boolean).map((term) => {
    const api = /^(summary|param)\.(.+?)(?:\.(eq|ne|lt|le|gt|ge))?=(.+)$/.exec(term);
    const m = api ? [term, api[2], API_OPS[api[3] ?? "eq"], api[4]]   // the table's column: risk, params.lr
      : /^([^<>=!]+)(<=|>=|!=|<|>|=)(.+)$/.exec(term);
    if (!m) throw new Error(`filter: expected column<op>value (op < <= > >= = !=) or summary.<name>.lt=value, got "${term}"`);
    const [, column, op, raw] = m;
    const value = Number.isFinite(Number(raw)) ? Number(raw) : raw;
    return { column, op, value };
  });
  const holds = { "<": (a, b) => a < b, "<=": (a, b) => a <= b, ">": (a, b) => a > b, ">=": (a, b) => a >= b,
    "=": (a, b) => a === b || String(a) === String(b), "!=": (a, b) => !(a === b || String(a) === String(b)) };
  return (row) => terms.every(({ column, op, value }) => row[column] !== undefined && row[column] !== null
    && holds[op](row[column], value));
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}
