// Studies: the list, and a study's page: its children in a table sortable by any column, overlay /
// heatmap / scatter charts with the axes and metric chosen in the page, and its checks with verdicts.

import { api, follow, imageUrl } from "./api.js";
import { overlay, plotly } from "./charts.js";
import { errorBox, fmtNumber, fmtTime, h, progressBar, statusBadge, TERMINAL } from "./util.js";

const STUDY_DONE = new Set(["succeeded", "failed", "cancelled", "partial"]);
const OVERLAY_MAX = 24; // children drawn in an overlay

export function renderList(main) {
  const body = h("tbody");
  const message = h("div");
  main.append(h("h1", "Studies"), message, h("table.list#studies-table", h("thead", h("tr", h("th", "name"),
    h("th", "status"), h("th", "progress"), h("th", "points × seeds"), h("th", "preset"), h("th", "created"))), body));
  let timer;
  async function load() {
    try {
      const page = await api("/v1/studies?limit=100");
      body.replaceChildren(...page.items.map((s) => h("tr", { dataset: { id: s.id } },
        h("td", h("a", { href: `#/studies/${s.id}` }, s.name || s.id.slice(0, 12))), h("td", statusBadge(s.status)),
        h("td", progressBar(s.progress)), h("td", `${s.points} → ${s.children_count} runs`),
        h("td", s.preset ? h("a", { href: `#/presets` }, `${s.preset} (${s.preset_size})`) : ""),
        h("td", fmtTime(s.created_at)))));
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
  return h("table.list.checks", h("tr", h("th", "claim"), h("th", "predicted"), h("th", "measured"),
    h("th", "tolerance"), h("th", "verdict")),
  checks.map((c) => h("tr", h("td", c.claim, c.note ? h("details.muted", h("summary", "note"), c.note) : ""),
    h("td", show(c.predicted)), h("td", show(c.measured)),
    h("td", show(c.tolerance), c.tolerance_rule ? h("details.muted", h("summary", "rule"), c.tolerance_rule) : ""),
    h("td", verdictBadge(c.verdict)))));
}

function show(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return fmtNumber(value);
  return JSON.stringify(value, (k, v) => (typeof v === "number" ? Number(fmtNumber(v)) : v));
}

export function renderStudy(main, [id]) {
  const base = `/v1/studies/${id}`;
  const head = h("div");
  const message = h("div");
  const checks = h("section.card", h("h3", "Checks"));
  const chartCard = h("section.card#study-chart");
  const tableCard = h("section.card", h("h3", "Children"));
  main.append(message, head, checks, chartCard, tableCard);
  let study = null;
  let table = null;
  let sortBy = { column: "index", descending: false };
  const choice = { type: "heatmap", x: null, y: null, metric: null };
  const chosen = new Set();   // what the user picked; the rest follows the table as results arrive
  let stop = () => {};

  async function load() {
    try {
      [study, table] = await Promise.all([api(base), api(`${base}/table`)]);
    } catch (error) {
      message.replaceChildren(errorBox(error));
      return;
    }
    drawHead();
    checks.hidden = !study.preset;   // only a preset's study has checks
    checks.replaceChildren(h("h3", "Checks"), checksTable(study.checks ?? table.checks));
    drawTable();
    drawChartControls();
  }

  function drawHead() {
    const s = study;
    head.replaceChildren(h("h1", s.name || s.id, " ", statusBadge(s.status)),
      h("div.muted", s.kind === "compare" ? `compares ${s.children_count} experiments`
        + (s.missing?.length ? ` (${s.missing.length} since deleted)` : "")
        : `${s.points} points × seeds = ${s.children_count} runs · axes: ${s.axes.join(", ")}`,
        s.preset ? ` · preset ${s.preset} (${s.preset_size})` : ""),
      h("div.status-line", progressBar(s.progress), h("span.muted", Object.entries(s.counts)
        .filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(" · "))),
      s.preset ? h("section.card", h("h3", "Figure"), h("img.figure", { alt: `figure of ${s.preset}`,
        dataset: { src: `${base}/plots/figure.png` } })) : "");
    const img = head.querySelector("img.figure");
    if (img && STUDY_DONE.has(s.status)) {
      imageUrl(img.dataset.src).then((url) => { img.src = url; }).catch((e) => img.replaceWith(errorBox(e)));
    }
  }

  function numericColumns() {
    return table.columns.filter((c) => table.rows.some((r) => typeof r[c] === "number")
      && !["index", "point", "seed"].includes(c));
  }

  function drawChartControls() {
    const compared = study.kind === "compare";   // existing experiments grouped: their series overlaid
    const axes = compared ? [] : study.axes.filter((a) => table.columns.includes(a));
    const metrics = numericColumns().filter((c) => !axes.includes(c));
    if (compared && choice.type === "heatmap") choice.type = "overlay";
    if (!chosen.has("x") || !choice.x) choice.x = axes[0] ?? metrics[0];
    if (!chosen.has("y") || !choice.y) choice.y = axes[1] ?? axes[0];
    if (choice.y === choice.x) choice.y = axes.find((a) => a !== choice.x) ?? choice.y;   // a heatmap needs two
    if (!chosen.has("metric") || !metrics.includes(choice.metric)) {
      choice.metric = defaultMetric(metrics, new Set(table.derived ?? []));
    }
    const pick = (name, values) => h("label", `${name} `, h("select", { name: `chart-${name}`,
      onchange: (e) => { choice[name] = e.target.value; chosen.add(name); drawChartControls(); } },
    values.map((v) => h("option", { value: v, selected: v === choice[name] }, v))));
    const types = compared ? ["overlay", "scatter"] : axes.length >= 2 ? ["heatmap", "scatter", "overlay"]
      : ["scatter", "overlay"];
    if (!types.includes(choice.type)) choice.type = types[0];
    chartCard.replaceChildren(h("h3", "Chart"),
      h("div.toolbar", pick("type", types), choice.type !== "overlay" ? pick("x", [...axes, ...metrics]) : "",
        choice.type === "heatmap" ? pick("y", axes.filter((a) => a !== choice.x)) : "", pick("metric", metrics)),
      h("div.chart#study-plot", { dataset: { type: choice.type } }));
    drawChart();
  }

  async function drawChart() {
    const div = chartCard.querySelector("#study-plot");
    const type = choice.type;
    if (div.dataset.type !== type) { div.dataset.type = type; return drawChartControls(); }
    if (type === "overlay") {
      // a succeeded child without the column is another kind's (in a comparison): it has no such series
      const ids = table.rows.filter((r) => r.status !== "queued" && (r.status !== "succeeded" || choice.metric in r))
        .slice(0, OVERLAY_MAX);
      const docs = await Promise.all(ids.map((r) => api(`/v1/experiments/${r.experiment_id}/results?` +
        `max_points=500&fields=${encodeURIComponent(choice.metric)}`).catch(() => null)));
      const shown = docs.map((d, i) => [d, ids[i]]).filter(([d]) => d);
      overlay(div, shown.map(([d]) => d), choice.metric, { log: true,
        labels: shown.map(([, r]) => (study.kind === "compare" ? r.name || r.experiment_id.slice(0, 8)
          : study.axes.map((a) => `${a.split(".").pop()}=${fmtNumber(r[a])}`).join(" ") + ` s${r.seed}`)) });
      return;
    }
    const points = meanByPoint(table.rows, choice.metric);
    if (type === "heatmap") {
      const xs = unique(points.map((p) => p.row[choice.x]));
      const ys = unique(points.map((p) => p.row[choice.y]));
      const z = ys.map((y) => xs.map((x) => points.find((p) => p.row[choice.x] === x && p.row[choice.y] === y)?.mean ?? null));
      plotly(div, [{ type: "heatmap", x: xs.map(String), y: ys.map(String), z, colorscale: "Viridis",
        colorbar: { title: { text: choice.metric } }, hovertemplate: `${choice.x} %{x}<br>${choice.y} %{y}<br>${choice.metric} %{z}<extra></extra>` }],
      { xaxis: { title: { text: choice.x }, type: "category" }, yaxis: { title: { text: choice.y }, type: "category" } });
    } else {
      plotly(div, [{ type: "scatter", mode: "markers", x: table.rows.map((r) => r[choice.x]),
        y: table.rows.map((r) => r[choice.metric]), text: table.rows.map((r) => `seed ${r.seed}`),
        marker: { size: 8, color: "#1f77b4" } }],
      { xaxis: { title: { text: choice.x } }, yaxis: { title: { text: choice.metric } } });
    }
  }

  function drawTable() {
    const rows = [...table.rows].sort((a, b) => compare(a[sortBy.column], b[sortBy.column]) * (sortBy.descending ? -1 : 1));
    const columns = table.columns.filter((c) => c !== "experiment_id");
    const header = columns.map((c) => h("th", { dataset: { column: c }, onclick: () => {
      sortBy = { column: c, descending: sortBy.column === c ? !sortBy.descending : false };
      drawTable();
    } }, c, sortBy.column === c ? (sortBy.descending ? " ▼" : " ▲") : ""));
    const cell = (r, c) => {
      if (c === "index") return h("a", { href: `#/experiments/${r.experiment_id}` }, r[c]);
      if (c === "status") return statusBadge(r[c]);
      return r[c] !== null && typeof r[c] === "object" ? h("code.small", JSON.stringify(r[c])) : fmtNumber(r[c]);
    };
    const body = rows.map((r) => h("tr", columns.map((c) => h("td", cell(r, c)))));
    tableCard.replaceChildren(h("h3", `Children (${rows.length})`),
      h("div.scroll", h("table.list.sortable#children-table", h("thead", h("tr", header)), h("tbody", body))));
  }

  load().then(() => {
    if (study && !STUDY_DONE.has(study.status)) {
      let timer = null;
      stop = follow(`${base}/events`, base, () => { clearTimeout(timer); timer = setTimeout(load, 800); },
        (s) => STUDY_DONE.has(s.status) || TERMINAL.has(s.status));
    }
  });
  return () => stop();
}

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

function unique(values) {
  return [...new Set(values)].sort(compare);
}

// The metric's mean over the seeds of each point.
function meanByPoint(rows, metric) {
  const byPoint = new Map();
  for (const row of rows) {
    if (typeof row[metric] !== "number") continue;
    const entry = byPoint.get(row.point) ?? { row, sum: 0, n: 0 };
    entry.sum += row[metric];
    entry.n += 1;
    byPoint.set(row.point, entry);
  }
  return [...byPoint.values()].map((e) => ({ row: e.row, mean: e.sum / e.n }));
}
