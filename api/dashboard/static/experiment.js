// One experiment: spec, status, attempts, progress with ETA, interactive charts (theory dashed),
// live while it runs (one event stream carrying the state and the new points; without a stream,
// polling for the state and the points after the last one shown: since_step), cancel, downloads.

import { api, download, follow } from "./api.js";
import { Chart, MAX_POINTS } from "./charts.js";
import {
  errorBox, fmtDuration, fmtNumber, fmtTime, h, progressBar, refill, secondsLeft, setProgress, statusBadge, TERMINAL,
} from "./util.js";

const REDRAW_MS = 1000; // at most one results request per second while running

export function render(main, [id]) {
  const base = `/v1/experiments/${id}`;
  const head = h("div.exp-head");
  const charts = h("div.charts#charts");
  const side = h("div.side");
  const message = h("div");
  main.append(message, head, h("div.exp-body", charts, side));
  let experiment = null;
  let doc = null;          // the result document shown: downsampled to ≤ 2·MAX_POINTS, grown by deltas
  let chartList = [];
  let stop = () => {};
  let fetching = false;
  let pending = false;
  let redrawTimer = null;

  async function start() {
    let plots;
    const firstResults = api(`${base}/results?max_points=${MAX_POINTS}`); // in flight beside the others
    firstResults.catch(() => {}); // its error is the experiment's, reported below
    try {
      [experiment, plots] = await Promise.all([api(base), api(`${base}/plots`)]);
    } catch (error) {
      main.replaceChildren(errorBox(error));
      return;
    }
    chartList = plots.map((plot) => new Chart(plot, loadWindow));
    charts.replaceChildren(...chartList.map((c) => c.element));
    drawHead();
    drawSide();
    await refreshResults(true, firstResults);
    // The results were asked for beside the row: a job that ended in between needs its final document.
    if (TERMINAL.has(experiment.status) && !TERMINAL.has(doc?.status)) await refreshResults(true);
    if (!TERMINAL.has(experiment.status)) {
      // Asked again at each reconnection, so a resumed stream starts after the last point shown.
      const events = () => `${base}/events?points=true&since_step=${doc?.series?.step?.at(-1) ?? -1}`;
      stop = follow(events, base, onState, (s) => TERMINAL.has(s.status), { onEvent: onPoints });
    }
  }

  // New points from the stream: appended (and drawn at most once per REDRAW_MS); when the shown
  // document has grown past twice a screen's worth, the whole document again, downsampled.
  function onPoints(_type, delta) {
    if (!doc) return;
    // A whole document is on its way: merged into the old one, these points would be lost when it
    // lands; ask for the points after it instead, once it has.
    if (fetching) { pending = true; return; }
    const last = doc.series?.step?.at(-1) ?? -1;
    const steps = delta.series.step || [];
    const from = steps.findIndex((s) => s > last);   // a resumed stream may repeat points
    if (from < 0) return;
    doc = merge(doc, from === 0 ? delta : sliceDelta(delta, from));
    if (doc.series.step.length > 2 * MAX_POINTS) { refreshResults(true); return; }
    if (!redrawTimer) redrawTimer = setTimeout(redraw, REDRAW_MS);
  }

  function redraw() {
    clearTimeout(redrawTimer);
    redrawTimer = null;
    if (TERMINAL.has(doc?.status) && !doc.series?.step?.length) { showNothingRecorded(); return; }
    for (const chart of chartList) if (!chart.zoomed) chart.draw(doc);
  }

  // A run that ended before its first record: one line instead of a "no data" card per plot, and no
  // downloads of empty tables and blank images.
  let nothingRecorded = false;
  function showNothingRecorded() {
    if (nothingRecorded) return;
    nothingRecorded = true;
    chartList = [];
    const how = doc.status === "cancelled" ? "was cancelled" : doc.status === "failed" ? "failed" : "ended";
    charts.replaceChildren(h("section.card#nothing-recorded", h("p.muted",
      `No points were recorded: the run ${how} before its first record, so there is nothing to chart.`)));
    drawSide();
  }

  function onState(state, streamed) {
    const statusChanged = state.status !== experiment.status || state.attempts !== experiment.attempts;
    experiment = { ...experiment, ...state };
    drawHead();
    if (statusChanged) {   // the event carries the state only: the worker, times and attempts come with the row
      api(base).then((row) => {   // read after the event: as new as it, or newer
        experiment = row;
        drawHead();
        drawSide();
      }).catch(() => drawSide());
    }
    // From the stream the points come as events; only the final document is fetched. Polling
    // fetches the points after the last one shown.
    if (!streamed || TERMINAL.has(state.status)) refreshResults(TERMINAL.has(state.status));
  }

  // While running, fetch only the points after the last one shown; at the end (or when the document
  // grew past twice a screen's worth) the whole document again, downsampled.
  async function refreshResults(whole, prefetched) {
    if (fetching) { pending = true; return; }
    fetching = true;
    try {
      const last = doc?.series?.step?.at(-1);
      if (whole || last === undefined || doc.series.step.length > 2 * MAX_POINTS) {
        doc = await (prefetched ?? api(`${base}/results?max_points=${MAX_POINTS}`));
      } else {
        const delta = await api(`${base}/results?since_step=${last}&max_points=${MAX_POINTS}`);
        doc = merge(doc, delta);
      }
      redraw();
      drawSummary();
    } catch (error) {
      message.replaceChildren(errorBox(error));
    } finally {
      fetching = false;
      if (pending) { pending = false; setTimeout(() => refreshResults(TERMINAL.has(experiment.status)), REDRAW_MS); }
    }
  }

  async function loadWindow(since, until) {
    if (since === null) return doc;
    const query = new URLSearchParams({ max_points: String(MAX_POINTS), until_step: String(until) });
    if (since >= 0) query.set("since_step", String(since));
    return api(`${base}/results?${query}`);
  }

  let shown = null;   // the experiment state the head shows, and when the page read it (its ETA counts from then)
  let readAt = 0;
  function etaText() {
    const left = secondsLeft(experiment, readAt, performance.now());
    return left === null ? "" : `ETA ${fmtDuration(left)}`;
  }

  // The head is built once and updated in place: redrawn whole at every progress event, its buttons with it, it
  // lost a click that straddled a redraw (Cancel, "Sweep from here").
  const title = h("h1");
  const about = h("div.muted");
  const bar = progressBar(0, "");
  const eta = h("span#eta.muted");
  const notices = h("div");
  const cancelButton = h("button#cancel.danger", { type: "button", onclick: cancel });
  const toolbar = h("div.toolbar", h("a.button", { href: `#/new?from=${id}` }, "Duplicate and edit"),
    h("a.button#sweep-from-here", { href: `#/studies/new?from=${id}` }, "Sweep from here"), cancelButton);
  function drawHead() {
    const e = experiment;
    if (e !== shown) { shown = e; readAt = performance.now(); }   // every new state is a new object
    if (!head.firstChild) head.append(title, about, h("div.status-line", bar, eta), notices, toolbar);   // once loaded
    refill(title, [e.name, e.status], () => [e.name || e.id, " ", statusBadge(e.status)]);
    const model = e.spec?.params?.model;
    refill(about, [e.kind, model, e.study_id], () => [`${e.kind}${model ? " / " + model : ""} · ${e.id}`,
      e.study_id ? [" · child of ", h("a", { href: `#/studies/${e.study_id}` }, "its study")] : ""]);
    setProgress(bar, e.progress, `${e.step} / ${e.total_steps} steps`);
    eta.textContent = etaText();
    refill(notices, [e.error, e.warnings], () => [e.error ? h("div.error-box", e.error) : "",
      (e.warnings || []).map((w) => h("div.warning-box", `${w.code}: ${w.message}`))]);
    cancelButton.hidden = TERMINAL.has(e.status);
    cancelButton.disabled = Boolean(e.cancel_requested);
    refill(cancelButton, e.cancel_requested, () => (e.cancel_requested ? "Cancelling…" : "Cancel"));
  }

  async function cancel() {
    // one click stopped a long run (a study asks first, too); its partial series are kept either way
    const running = experiment.status === "running";
    const said = running ? `Cancel this running run at step ${experiment.step ?? 0} of ${experiment.total_steps ?? "?"}? `
      + "Its points so far are kept; it cannot be resumed." : `Cancel this ${experiment.status} run? It will not start.`;
    if (!window.confirm(said)) return;
    try {
      experiment = { ...experiment, ...(await api(`${base}/cancel`, { method: "POST" })) };
      drawHead();
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  }

  const summaryBox = h("div");

  function drawSummary() {
    const rows = Object.entries(doc?.summary || {}).filter(([, v]) => typeof v === "number");
    // a network's per-layer values (summary.layers: {layer: {metric: value}})
    const layers = Object.entries(doc?.summary?.layers ?? {});
    const metrics = [...new Set(layers.flatMap(([, m]) => Object.keys(m ?? {})))];
    const cell = (v) => (typeof v === "number" ? fmtNumber(v) : v === null || v === undefined ? "—" : String(v));
    summaryBox.replaceChildren(rows.length ? h("table.kv", rows.map(([k, v]) => h("tr", h("th", k),
      h("td", fmtNumber(v))))) : h("p.muted", NO_SUMMARY[experiment.status] ?? "No summary yet."),
    // a row per value and a column per layer: a network's few layers fit the side's width, where a column per
    // value (eight of them) showed three, cut mid-word
    layers.length ? h("div.scroll", h("table.list.compact#summary-layers", h("tr", h("th", "per layer"),
      // a long name ("layers.0.weight") may wrap after its dots
      layers.map(([name]) => h("th", { title: name }, name.replaceAll(".", ".\u200b")))),
    metrics.map((k) => h("tr", h("th", k), layers.map(([, m]) => h("td", cell(m?.[k]))))))) : "");
  }

  // Tags and note, shown and edited in place (PATCH; the owner or an admin: a 403 is shown here).
  // One card for the page's life: a redraw of the side (e.g. on a status change) keeps an edit open.
  const notes = h("section.card#notes");
  let editingNotes = false;

  function showNotes() {
    const e = experiment;
    editingNotes = false;
    notes.replaceChildren(h("h3", "Tags & note"),
      h("div.tags", (e.tags || []).length ? e.tags.map((t) => h("a.tag", { href: `#/experiments?tag=${encodeURIComponent(t)}` }, t))
        : h("span.muted", "No tags.")),
      e.note ? h("p.note", e.note) : "",
      h("button.small#edit-notes", { type: "button", onclick: editNotes }, "Edit"));
  }

  function editNotes() {
    const e = experiment;
    editingNotes = true;
    const tags = h("input#tags-input", { type: "text", value: (e.tags || []).join(" "), placeholder: "tags, separated by spaces or commas" });
    const note = h("textarea#note-input", { rows: 3, placeholder: "note" });
    note.value = e.note || "";
    const errors = h("div");
    const save = async () => {
      try {
        experiment = await api(base, { method: "PATCH",
          body: { tags: tags.value.split(/[\s,]+/).filter(Boolean), note: note.value.trim() || null } });
        showNotes();
        drawHead();
      } catch (error) {
        errors.replaceChildren(errorBox(error));
      }
    };
    notes.replaceChildren(h("h3", "Tags & note"), tags, note, errors,
      h("div.toolbar", h("button.small#save-notes", { type: "button", onclick: save }, "Save"),
        h("button.small", { type: "button", onclick: showNotes }, "Cancel")));
  }

  async function drawSide() {
    const e = experiment;
    const name = e.name || e.id;
    const files = nothingRecorded ? [["JSON", "results", "json"]]   // the tables would be empty
      : [["JSON", "results", "json"], ["CSV", "results.csv", "csv"], ["Parquet", "results.parquet", "parquet"]];
    if (!editingNotes) showNotes();
    side.replaceChildren(
      h("section.card", h("h3", "Summary"), summaryBox),
      h("section.card", h("h3", "Downloads"), h("div.downloads",
        files.map(([label, path, ext]) => h("button.small", { type: "button",
          onclick: () => download(`${base}/${path}`, `${name}.${ext}`) }, label)),
        chartList.map((c) => [
          h("button.small", { type: "button", onclick: () => download(`${base}/plots/${c.plot.name}.png`,
            `${name}-${c.plot.name}.png`) }, `${c.plot.name}.png`),
          h("button.small", { type: "button", onclick: () => download(`${base}/plots/${c.plot.name}.svg`,
            `${name}-${c.plot.name}.svg`) }, `${c.plot.name}.svg`)]))),
      notes,
      h("section.card", h("h3", "Details"), h("table.kv",
        [["owner", e.owner], ["visibility", e.visibility], ["priority", e.priority], ["queue", e.queue],
          ["worker", e.worker], ["created", fmtTime(e.created_at)],
          // its current attempt's: after a requeue or a continue, not the creation
          ...(e.queued_at && e.queued_at !== e.created_at ? [["queued again", fmtTime(e.queued_at)]] : []),
          ["started", fmtTime(e.started_at)],
          ["finished", fmtTime(e.finished_at)]].map(([k, v]) => h("tr", h("th", k), h("td", v ?? ""))))),
      h("section.card", h("h3", "Spec"), h("pre.spec", JSON.stringify(e.spec, null, 2))),
      h("section.card#attempts", h("h3", "Attempts"), h("p.muted", "…")));
    drawSummary();
    try {
      const attempts = await api(`${base}/attempts`);
      side.querySelector("#attempts").replaceChildren(h("h3", `Attempts (${attempts.length})`),
        attempts.length ? h("table.list.compact", h("tr", h("th", "#"), h("th", "worker"), h("th", "started"),
          h("th", "outcome")),
        attempts.map((a) => h("tr", h("td", a.number), h("td", a.worker.split("/")[0]), h("td", fmtTime(a.started_at)),
          h("td", a.outcome || "running",
            a.resumed_from_step !== null ? ` (resumed at step ${a.resumed_from_step})` : ""))))
          : h("p.muted", "Not started yet."));
    } catch (error) {
      side.querySelector("#attempts").append(errorBox(error));
    }
  }

  start();
  // the ETA counts down between progress events (a long job may write its progress rarely)
  const ticking = setInterval(() => { if (experiment) eta.textContent = etaText(); }, 1000);
  return () => { stop(); clearTimeout(redrawTimer); clearInterval(ticking); };
}

// Append the delta document (points after the last step shown) to the document shown.
function merge(doc, delta) {
  if (!delta.series.step?.length) return { ...doc, status: delta.status, summary: delta.summary,
    distributions: delta.distributions };
  const cat = (a, b) => (Array.isArray(a) && Array.isArray(b) ? a.concat(b) : b ?? a);
  const series = { ...doc.series };
  for (const [k, v] of Object.entries(delta.series)) series[k] = cat(series[k] || [], v);
  const theory = { ...doc.theory };
  for (const [k, v] of Object.entries(delta.theory)) theory[k] = cat(theory[k], v);
  const layers = { ...doc.layers };
  for (const [layer, metrics] of Object.entries(delta.layers || {})) {
    layers[layer] = { ...(layers[layer] || {}) };
    for (const [m, v] of Object.entries(metrics)) layers[layer][m] = cat(layers[layer][m] || [], v);
  }
  return { ...doc, ...delta, series, theory, layers };
}

// The points of a delta from index `from` on (series, per-layer series and per-step theory).
function sliceDelta(delta, from) {
  const n = delta.series.step.length;
  const cut = (v) => (Array.isArray(v) && v.length === n ? v.slice(from) : v);
  const map = (o, f) => Object.fromEntries(Object.entries(o || {}).map(([k, v]) => [k, f(v)]));
  return { ...delta, series: map(delta.series, cut), theory: map(delta.theory, cut),
    layers: map(delta.layers, (metrics) => map(metrics, cut)) };
}

// Why a run has no summary, by its status (a summary is made when a run ends well).
const NO_SUMMARY = {
  cancelled: "Cancelled: no summary (a summary is made when a run ends); its series up to the stop are in the charts.",
  failed: "Failed: no summary; the error is above.",
  queued: "Queued: no summary yet.",
};
