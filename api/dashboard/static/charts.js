// Interactive charts of result documents (Plotly.js from the plotly wheel), drawn from the plot
// definitions the API declares (GET /v1/experiments/{id}/plots): theory dashed, hover values, zoom
// (which asks the API for that window at full resolution), and a log/linear toggle.

import { h } from "./util.js";

// Plotly.js (4.8 MB) loads beside the pages' first API requests instead of before them.
const plotlyLoaded = new Promise((resolve, reject) => {
  const script = Object.assign(document.createElement("script"), { src: "/ui/plotly.min.js", async: true });
  script.onload = () => resolve(window.Plotly);
  script.onerror = () => reject(new Error("could not load /ui/plotly.min.js"));
  document.head.append(script);
});

export const MAX_POINTS = 2000; // about a screen's width of points per chart
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
  "#7f7f7f", "#bcbd22"];
const CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

function finite(v) { return typeof v === "number" && Number.isFinite(v); }

// Log axes: Plotly labels the digits between decades with bare small numbers ("2", "5", or every one of 2…9),
// which read as values. Asked for at most about three ticks, it shows decades where the span holds several,
// the 1, 2 and 5 of each decade between one and two decades ("complete"), and plain numbers under a decade;
// being Plotly's own choice, it follows zooming. Every tick is written as the cells and the PNGs write numbers
// (0.5, 0.02, 1e-5): in powers it mixed 1, 5×10⁻¹, 2×10⁻¹ and 10⁻¹ (its decades in a smaller type) on one axis.
export const LOG_TICKS = { nticks: 3, minorloglabels: "complete", tickformat: ".3~g" };

const FEW_POINTS = 2;   // as smdrender.plots.FEW_POINTS
const few = (y) => y.filter((v) => v !== null).length <= FEW_POINTS;
const lineMode = (y) => (few(y) ? "lines+markers" : "lines");

function lineTraces(plot, doc) {
  const steps = doc.series.step || [];
  const traces = [];
  plot.series.forEach((name, i) => {
    const y = doc.series[name];
    if (!y) return;
    // a line through a lone point draws nothing (record_every near steps): such series get markers too
    const sparse = plot.sparse.includes(name) || few(y);
    let x = steps, ys = y;
    if (sparse) {
      const keep = y.map((v, j) => (v === null ? -1 : j)).filter((j) => j >= 0);
      x = keep.map((j) => steps[j]);
      ys = keep.map((j) => y[j]);
    }
    traces.push({ x, y: ys, name, type: "scatter", mode: sparse ? "lines+markers" : "lines",
      line: { color: COLORS[i % COLORS.length], width: 1.6 } });
  });
  plot.theory.filter((name) => doc.theory[name] !== undefined && doc.theory[name] !== null).forEach((name, k) => {
    const t = doc.theory[name];
    const [x, y] = Array.isArray(t) ? [steps, t] : [[steps[0] ?? 0, steps[steps.length - 1] ?? 1], [t, t]];
    traces.push({ x, y, name: theoryName(plot, name), type: "scatter", mode: "lines",
      line: { color: "black", dash: theoryDash(k), width: 1.4 }, meta: "theory" });
  });
  const shapes = plot.times.filter((name) => finite(doc.theory[name])).map((name) => ({
    type: "line", xref: "x", yref: "paper", x0: doc.theory[name], x1: doc.theory[name], y0: 0, y1: 1,
    line: { color: "gray", dash: "dot", width: 1 } }));
  return { traces, shapes };
}

// A chart's global theory lines, black, told apart by their dashes in the PNG's order (smdrender.plots): two
// black dashed lines (au_theory, au_equilibrium) looked alike.
const THEORY_DASHES = ["dash", "dot", "dashdot"];
function theoryDash(k) {
  return THEORY_DASHES[k % THEORY_DASHES.length];
}

// A theory line's legend entry: the quantity it predicts, then "(theory…)" with a detail, as smdrender.labels.
// theory_label writes the PNG's: norm_sq_theory is "norm_sq (theory)", not "norm_sq_theory (theory)".
export function theoryLabel(name, detail = "") {
  return `${name.replace(/_theory$/, "") || name} (theory${detail})`;
}

// With what it is where the engine says (the plot's theory_labels, as in the PNG): the sde nrq model's two
// angular updates were "au_theory (theory)" and "au_equilibrium (theory)".
function theoryName(plot, name) {
  const words = plot.theory_labels?.[name];
  return theoryLabel(name, words ? ` ${words}` : "");
}

function layerTraces(plot, doc) {
  const steps = doc.series.step || [];
  const traces = [];
  const legended = new Set();   // the theory names given their one legend entry
  Object.entries(doc.layers || {}).forEach(([layer, metrics], i) => {
    const color = COLORS[i % COLORS.length];
    for (const name of plot.series) {
      if (metrics[name]) traces.push({ x: steps, y: metrics[name], name: `${layer}`, legendgroup: layer,
        type: "scatter", mode: lineMode(metrics[name]), line: { color, width: 1.4 } });
    }
    for (const name of plot.layer_theory) {
      // one legend entry says what the dashed lines are; each stays in its layer's group
      if (!metrics[name]) continue;
      traces.push({ x: steps, y: metrics[name], name: theoryLabel(name, ", dashed"), legendgroup: layer,
        showlegend: !legended.has(name), hovertemplate: `${layer} ${name}: %{y}<extra></extra>`, type: "scatter",
        mode: lineMode(metrics[name]), line: { color, dash: "dash", width: 1.2 }, meta: "theory" });
      legended.add(name);
    }
  });
  plot.theory.filter((name) => Array.isArray(doc.theory[name])).forEach((name, k) => {
    traces.push({ x: steps, y: doc.theory[name], name: theoryName(plot, name), type: "scatter", mode: "lines",
      line: { color: "black", dash: theoryDash(k) }, meta: "theory" });
  });
  return { traces, shapes: [] };
}

function histogramTraces(plot, doc) {
  const hist = doc.distributions?.[plot.series[0]];
  if (!hist) return { traces: [], shapes: [] };
  const edges = hist.bin_edges;
  const centers = edges.slice(0, -1).map((e, i) => (e + edges[i + 1]) / 2);
  const widths = edges.slice(0, -1).map((e, i) => edges[i + 1] - e);
  const traces = [{ x: centers, y: hist.density, width: widths, type: "bar", name: `${plot.series[0]} (measured)`,
    marker: { color: "rgba(31,119,180,0.55)" } }];
  if (hist.density_theory) traces.push({ x: centers, y: hist.density_theory, type: "scatter", mode: "lines",
    name: "density (theory)", line: { color: "black", dash: "dash" }, meta: "theory" });
  return { traces, shapes: [] };
}

function angleTraces(plot, doc) {
  // per-trial angles (a list per record) against the theory time ηt; at most 12 trials drawn
  const angles = doc.series[plot.series[0]] || [];
  const time = doc.theory.lr_time || doc.series.step || [];
  const trials = Math.min(12, angles[0]?.length || 0);
  const traces = [];
  for (let k = 0; k < trials; k++) {
    traces.push({ x: time, y: angles.map((row) => row[k]), type: "scatter", mode: "lines", showlegend: false,
      line: { color: COLORS[k % COLORS.length], width: 1 } });
  }
  return { traces, shapes: [], xtitle: doc.theory.lr_time ? "ηt" : "step" };
}

const STYLES = { line: lineTraces, layers: layerTraces, histogram: histogramTraces, angles: angleTraces };

// A chart card for one plot of an experiment. `loadWindow(x0, x1)` returns a result document of that
// step window (or of everything when both are null), at most MAX_POINTS long.
export class Chart {
  constructor(plot, loadWindow) {
    this.plot = plot;
    this.loadWindow = loadWindow;
    this.log = plot.log_y;
    this.zoomed = false;
    this.div = h(`div.chart#chart-${plot.name}`, { dataset: { plot: plot.name } });
    this.toggle = h("button.small", { type: "button", onclick: () => this.setLog(!this.log) },
      this.log ? "linear y" : "log y");
    this.element = h("section.card.chart-card", h("div.chart-head", h("h3", plot.title), this.toggle), this.div);
  }

  layout(shapes, xtitle) {
    const xLabel = xtitle || this.plot.xlabel || (this.plot.style === "histogram" ? this.plot.series[0] : "step");
    return {
      margin: { l: 60, r: 10, t: 10, b: 45 }, height: 320, hovermode: "closest", shapes,
      xaxis: { title: { text: xLabel }, autorange: !this.zoomed, range: this.zoomed ? this.range : undefined },
      yaxis: { title: { text: this.plot.ylabel }, type: this.log ? "log" : "linear", exponentformat: "power",
        ...(this.log ? LOG_TICKS : {}) },
      legend: { orientation: "h", y: -0.25 }, uirevision: this.plot.name,
    };
  }

  async draw(doc) {
    this.doc = doc;
    await plotlyLoaded;
    if (this.doc !== doc) return;   // a newer document arrived meanwhile
    const { traces, shapes, xtitle } = STYLES[this.plot.style](this.plot, doc);
    const layout = this.layout(shapes, xtitle);
    if (!this.zoomed && !traces.some((t) => t.meta !== "theory" && t.x?.length)) {   // nothing measured: no empty axes
      const ended = ["succeeded", "failed", "cancelled"].includes(doc.status);
      Object.assign(layout, { xaxis: { visible: false }, yaxis: { visible: false }, annotations: [{
        text: ended ? "no data" : doc.status === "queued" ? "queued: no data yet" : "no data yet", showarrow: false,
        xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { color: "#888", size: 14 } }] });
    } else if (this.plot.style === "line" || this.plot.style === "layers") {
      this.brokenNote(layout, traces, doc);
    }
    window.Plotly.react(this.div, traces, layout, CONFIG);
    if (!this.listening) {
      this.listening = true;
      this.div.on("plotly_relayout", (event) => this.relayout(event));
    }
  }

  // A run whose numbers broke (a diverging rate) ends with non-finite records: say so where a line stops or none
  // shows (once it ended: a running train job's evaluation series is empty until its first evaluation).
  brokenNote(layout, traces, doc) {
    const since = doc.summary?.nonfinite_from_step;
    const ended = ["succeeded", "failed", "cancelled"].includes(doc.status);
    const finite = traces.some((t) => t.meta !== "theory" && (t.y ?? []).some((v) => typeof v === "number" && Number.isFinite(v)));
    if (typeof since !== "number" && (finite || !ended)) return;
    const text = finite ? `non-finite from step ${since}`
      : `no finite value recorded${typeof since === "number" ? ` (non-finite from step ${since})` : ""}`;
    layout.annotations = [{ text, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: finite ? 0.98 : 0.5,
      font: { color: finite ? "#c0392b" : "#555", size: finite ? 12 : 14 }, bgcolor: "white", name: "broken" }];
  }

  setLog(log) {
    this.log = log;
    this.toggle.textContent = log ? "linear y" : "log y";
    // nticks 0: Plotly's own count again on a linear axis
    window.Plotly.relayout(this.div, { "yaxis.type": log ? "log" : "linear", "yaxis.autorange": true,
      "yaxis.nticks": log ? LOG_TICKS.nticks : 0, "yaxis.tickformat": log ? LOG_TICKS.tickformat : "",
      "yaxis.minorloglabels": LOG_TICKS.minorloglabels });
  }

  // Zooming on steps asks the API for the window at full resolution; a reset shows everything again.
  async relayout(event) {
    if (this.plot.style !== "line" && this.plot.style !== "layers") return;
    // a drag gives xaxis.range[0] and [1]; a call (or a client) may give xaxis.range
    const range = event["xaxis.range"] ?? (event["xaxis.range[0]"] !== undefined
      ? [event["xaxis.range[0]"], event["xaxis.range[1]"]] : null);
    if (event["xaxis.autorange"]) {
      this.zoomed = false;
      this.draw(await this.loadWindow(null, null));
    } else if (range) {
      this.zoomed = true;
      this.range = range;
      const doc = await this.loadWindow(Math.floor(this.range[0]) - 1, Math.ceil(this.range[1]));
      this.draw(doc);
    }
  }
}

export async function plotly(div, traces, layout) {
  await plotlyLoaded;
  window.Plotly.react(div, traces, { margin: { l: 70, r: 10, t: 10, b: 50 }, height: 400, ...layout }, CONFIG);
}
