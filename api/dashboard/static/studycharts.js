// A study's charts drawn from /v1/studies/{id}/charts/… (one request per chart): the overlay (seeds
// grouped as a mean with a standard-error band, or each seed; each point's theory dashed in its colour),
// the scatter (mean ± standard error per point, theory per point hollow and as curves along x) and the
// heatmap (cell values, the theory beside it on one colour scale or measured/theory as a ratio, iso-ηλ
// lines). Colours: one per point, or by an axis (a continuous scale for a numeric one), never repeating.

import { LOG_TICKS, plotly as plotlyAnew, theoryLabel } from "./charts.js";
import { fmtNumber, fmtValue } from "./util.js";

// A study's chart is drawn again in its div at each reload while the study runs (Plotly.react); a constant
// uirevision keeps what the user did to it (zoom, pan, traces hidden from the legend) across those redraws, each
// trace known by its uid (by position, a trace hidden would pass to the next when a seed's band came in before
// it). A change of the chart's choices (type, metric, axes) draws it in a new div, from scratch.
const plotly = (div, traces, layout) => plotlyAnew(div, traces, { uirevision: "kept", ...layout });

const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

// The short name of an axis: its last path component (params.weight_decay → weight_decay).
export function shortName(axis) {
  return axis.split(".").pop();
}

// A point's legend name from the axes that vary; a point that names its runs (the axis "name") by that name
// alone, which stands for its other values (as the server's PNG legends: smdrender.labels.point_label).
export function pointName(values, varying) {
  if (varying.length === 1 && varying[0] === "member") return String(values.member);   // a compared experiment
  if (varying.includes("name") && values.name) return String(values.name);
  const named = varying.filter((a) => a in values);
  return named.length ? named.map((a) => `${shortName(a)}=${fmtValue(values[a])}`).join(" ") : "the point";
}

function numeric(values) {
  return values.length > 0 && values.every((v) => typeof v === "number" && Number.isFinite(v));
}

// Colour of each key: distinct hues (golden angle) for categories; Viridis over the sorted values for a
// numeric axis (on a log scale when the values are positive and span more than a decade).
export function colourScale(keys, { categorical = false } = {}) {
  const distinct = [...new Map(keys.map((k) => [JSON.stringify(k), k])).values()];
  const colours = new Map();
  if (!categorical && numeric(distinct) && distinct.length > 1) {
    const positive = distinct.every((v) => v > 0);
    const lo = Math.min(...distinct), hi = Math.max(...distinct);
    const log = positive && hi / lo > 10;
    const t = (v) => (log ? Math.log(v / lo) / Math.log(hi / lo) : (v - lo) / (hi - lo));
    for (const v of distinct) colours.set(JSON.stringify(v), viridis(0.9 * t(v)));
    return { colour: (k) => colours.get(JSON.stringify(k)), continuous: true, lo, hi, log };
  }
  distinct.forEach((k, i) => colours.set(JSON.stringify(k), `hsl(${Math.round((i * 137.508) % 360)}, 65%, 42%)`));
  return { colour: (k) => colours.get(JSON.stringify(k)), continuous: false };
}

function viridis(t) {
  const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const c = VIRIDIS[i].map((a, k) => Math.round(a + f * (VIRIDIS[i + 1][k] - a)));
  return `rgb(${c.join(",")})`;
}

function withAlpha(colour, alpha) {
  if (colour.startsWith("rgb(")) return colour.replace("rgb(", "rgba(").replace(")", `,${alpha})`);
  return colour.replace("hsl(", "hsla(").replace(")", `, ${alpha})`);
}

// What a point is coloured by: its own index ("point"), or the value of an axis.
function keyOf(item, by) {
  return by === "point" ? item.point : item.values?.[by] ?? null;
}

const X_TITLES = { step: "step", lr_time: "ηt (Σ learning rate)", tau: "τ(t)", intrinsic_time: "t·ηλ (intrinsic time)" };

export async function drawOverlay(div, data, { by = "point", seeds = "mean", varying = [], log = true } = {}) {
  const points = new Map();
  for (const line of data.lines) {
    const entry = points.get(line.point) ?? { point: line.point, values: line.values, lines: [] };
    entry.lines.push(line);
    points.set(line.point, entry);
  }
  const groups = [...points.values()].sort((a, b) => a.point - b.point);
  const scale = colourScale(groups.map((g) => keyOf(g, by)), { categorical: by === "point" });
  const traces = [];
  for (const g of groups) {
    const colour = scale.colour(keyOf(g, by));
    const name = pointName(g.values, varying);
    const group = `point-${g.point}`;
    if (seeds === "all" || g.lines.length === 1) {
      g.lines.forEach((line, i) => traces.push({ uid: `${group}:${line.experiment_id}`,
        x: line.x, y: line.y, type: "scatter", mode: "lines",
        // one legend entry stands for the point's every seed (it named only the first: "(seed 0)")
        name: g.lines.length > 1 ? `${name} (each of ${g.lines.length} seeds)` : name, legendgroup: group,
        showlegend: i === 0, line: { color: colour, width: 1.3 }, meta: "measured",
        hovertemplate: `${name} seed ${line.seed}${line.status && line.status !== "succeeded" ? ` (${line.status})` : ""}`
          + "<br>%{x}: %{y}<extra></extra>" }));
    } else {
      const { x, mean, se } = meanBand(g.lines);
      traces.push({ uid: `${group}:band`, x: [...x, ...[...x].reverse()], y: [...mean.map((m, i) => m + se[i]), ...mean.map((m, i) => m - se[i]).reverse()],
        type: "scatter", mode: "lines", fill: "toself", fillcolor: withAlpha(colour, 0.18), line: { width: 0 },
        hoverinfo: "skip", showlegend: false, legendgroup: group, meta: "band" });
      traces.push({ uid: `${group}:mean`, x, y: mean, type: "scatter", mode: "lines",
        name: `${name} (mean of ${g.lines.length} seeds)`,
        legendgroup: group, line: { color: colour, width: 1.6 }, meta: "measured",
        hovertemplate: `${name}<br>%{x}: %{y} (mean)<extra></extra>` });
    }
    const theory = meanTheory(g.lines);
    if (theory) traces.push({ uid: `${group}:theory`, x: g.lines[0].x, y: theory, type: "scatter", mode: "lines",
      name: `${name} theory`,
      legendgroup: group, showlegend: false, line: { color: colour, dash: "dash", width: 1.2 }, meta: "theory",
      hovertemplate: `${name} ${data.theory}<br>%{x}: %{y}<extra></extra>` });
  }
  if (groups.some((g) => meanTheory(g.lines))) traces.push({ uid: "theory-key", x: [null], y: [null], type: "scatter",
    mode: "lines",
    name: theoryLabel(data.theory, ", dashed in the point's colour"), line: { color: "#555", dash: "dash" } });
  // a compare study may mix kinds: say who is not drawn, and why, rather than leave them out silently
  const absent = data.not_recorded ?? [];
  const annotations = absent.length ? [{ text: `not drawn (no ${data.metric} series in their kind): ${
    absent.map((a) => pointName(a.values, varying)).join(", ")}`, x: 0, xanchor: "left", y: 1.0, yanchor: "bottom",
  xref: "paper", yref: "paper", showarrow: false, font: { color: "#a15c00", size: 12 }, name: "not-recorded" }] : [];
  const empty = !traces.length;
  if (empty && !absent.length) annotations.push({ text: "no data yet", showarrow: false, xref: "paper", yref: "paper",
    x: 0.5, y: 0.5, font: { color: "#888", size: 14 } });
  await plotly(div, traces, { height: 420, xaxis: { title: { text: X_TITLES[data.x] ?? data.x }, visible: !empty },
    yaxis: { title: { text: data.metric }, type: log ? "log" : "linear", exponentformat: "power", ...(log ? LOG_TICKS : {}),
      visible: !empty },
    legend: { orientation: "h", y: -0.22 }, hovermode: "closest", annotations });
}

// The mean over a point's seeds at each recorded x (their records share the steps) and its standard error.
function meanBand(lines) {
  const n = Math.min(...lines.map((l) => l.y.length));
  const x = lines[0].x.slice(0, n), mean = [], se = [];
  for (let i = 0; i < n; i++) {
    const ys = lines.map((l) => l.y[i]).filter((v) => typeof v === "number");
    const m = ys.reduce((a, b) => a + b, 0) / ys.length;
    mean.push(ys.length ? m : null);
    se.push(ys.length > 1 ? Math.sqrt(ys.reduce((a, b) => a + (b - m) ** 2, 0) / (ys.length - 1) / ys.length) : 0);
  }
  return { x, mean, se };
}

function meanTheory(lines) {
  const with_ = lines.filter((l) => Array.isArray(l.theory));
  if (!with_.length) return null;
  const n = Math.min(...with_.map((l) => l.theory.length));
  return Array.from({ length: n }, (_, i) => {
    const v = with_.map((l) => l.theory[i]).filter((t) => typeof t === "number");
    return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
  });
}

export async function drawScatter(div, data, { by = "point", varying = [] } = {}) {
  const scale = colourScale(data.points.map((p) => keyOf(p, by)), { categorical: by === "point" });
  const traces = [];
  const groups = new Map();
  // a line joins the points of one setting of every other varying axis (coloured by the colour-by axis): joined
  // by colour alone, a third axis's points zig-zagged into a trend that is not there
  const others = by === "point" ? [] : varying.filter((a) => a !== by && a !== data.x);
  for (const p of data.points) {
    const key = JSON.stringify([keyOf(p, by), ...others.map((a) => p.values?.[a] ?? null)]);
    (groups.get(key) ?? groups.set(key, []).get(key)).push(p);
  }
  for (const members of groups.values()) {
    members.sort((a, b) => a.x - b.x);
    const key = keyOf(members[0], by);
    const colour = scale.colour(key);
    const label = by === "point" ? pointName(members[0].values, varying)
      : [`${shortName(by)}=${fmtValue(key)}`, ...others.map((a) => `${shortName(a)}=${fmtValue(members[0].values?.[a])}`)].join(", ");
    traces.push({ uid: `${label}:measured`, x: members.map((p) => p.x), y: members.map((p) => p.mean), type: "scatter",
      mode: by === "point" ? "markers" : "markers+lines", name: label, legendgroup: label,
      error_y: { type: "data", array: members.map((p) => p.se ?? 0), visible: true, color: colour, thickness: 1.2 },
      marker: { color: colour, size: 9 }, line: { color: colour, width: 1 }, meta: "measured",
      text: members.map((p) => `${pointName(p.values, varying)} · n=${p.n}`),
      hovertemplate: `%{text}<br>${data.x} %{x}<br>${data.metric} %{y} ± %{error_y.array}<extra></extra>` });
    if (data.theory) traces.push({ uid: `${label}:theory`, x: members.map((p) => p.x), y: members.map((p) => p.theory),
      type: "scatter",
      mode: "markers", name: `${label} theory`, legendgroup: label, showlegend: false, meta: "theory",
      marker: { symbol: "circle-open", size: 12, color: colour, line: { width: 1.6 } },
      hovertemplate: `${data.theory} %{y}<extra></extra>` });
  }
  // one curve per combination of the axes it holds fixed (the server merges those that agree): coloured by the
  // colour-by value its points share, dashed differently where several share a colour, named by what it serves
  const dashes = ["dash", "dot", "dashdot", "longdash", "longdashdot"];
  const sharing = new Map();
  data.curves.filter((curve) => curve.y.some((v) => typeof v === "number")).forEach((curve, k) => {
    const colour = by !== "point" && curve.by !== null ? scale.colour(curve.by) ?? "#333" : "#333";
    const nth = sharing.get(colour) ?? 0;
    sharing.set(colour, nth + 1);
    traces.push({ uid: `curve:${curve.label ?? k}`, x: curve.x, y: curve.y, type: "scatter", mode: "lines", meta: "theory",
      name: theoryLabel(data.theory, curve.label !== null ? `: ${curve.label}` : " curve"),
      line: { color: colour, dash: dashes[nth % dashes.length], width: 1.3 }, showlegend: k === 0 || curve.label !== null });
  });
  const xs = data.points.map((p) => p.x).filter((v) => v > 0);
  const logX = xs.length === data.points.length && xs.length > 1 && Math.max(...xs) / Math.min(...xs) > 10;
  await plotly(div, traces, { height: 420, xaxis: { title: { text: data.x }, type: logX ? "log" : "linear",
    ...(logX ? LOG_TICKS : {}) },
    yaxis: { title: { text: data.metric }, exponentformat: "power" }, legend: { orientation: "h", y: -0.22 },
    hovermode: "closest" });
}

export async function drawHeatmap(div, data, { mode = "side" } = {}) {
  const xs = data.xs.map(fmtValue), ys = data.ys.map(fmtValue);
  const text = (z, se) => z.map((row, j) => row.map((v, i) => (v === null ? "" : fmtNumber(v)
    + (se?.[j]?.[i] ? `<br>±${fmtNumber(se[j][i])}` : ""))));
  const all = [...data.z.flat(), ...(data.theory_z ?? []).flat()].filter((v) => typeof v === "number");
  const zmin = Math.min(...all), zmax = Math.max(...all);
  const cell = { type: "heatmap", x: xs, y: ys, colorscale: "Viridis", texttemplate: "%{text}", hoverongaps: false };
  const traces = [];
  // the iso-ηλ lines are white over the cells: on a grey legend their swatch shows as drawn (white on white before)
  const layout = { height: 480, margin: { l: 70, r: 10, t: 30, b: 50 }, annotations: [],
    legend: { orientation: "h", y: -0.18, bgcolor: "#6b6b6b", font: { color: "#fff" } } };
  if (mode === "ratio" && data.theory_z) {
    const ratio = data.z.map((row, j) => row.map((v, i) => (v !== null && data.theory_z[j][i] ? v / data.theory_z[j][i] : null)));
    const spread = Math.max(0.05, ...ratio.flat().filter((v) => v !== null).map((v) => Math.abs(v - 1)));
    traces.push({ ...cell, z: ratio, text: text(ratio), colorscale: "RdBu", reversescale: true, zmid: 1,
      zmin: Math.max(0, 1 - spread), zmax: 1 + spread,
      name: "measured / theory", colorbar: { title: { text: `${data.metric} / ${data.theory}` } },
      hovertemplate: `${data.x} %{x}<br>${data.y} %{y}<br>measured/theory %{z}<extra></extra>` });
    Object.assign(layout, { xaxis: { title: { text: data.x }, type: "category" }, yaxis: { title: { text: data.y }, type: "category" } });
  } else {
    const side = Boolean(data.theory_z);
    // a phone: the theory under the measured cells, not beside them (side by side at 420 px the titles ran
    // together and each cell's label was ~7 px), and no ± in the cells (in the hover still)
    const narrow = div.clientWidth > 0 && div.clientWidth < 600;
    const stacked = side && narrow;
    traces.push({ ...cell, z: data.z, text: text(data.z, narrow ? null : data.se), zmin, zmax, name: "measured",
      colorbar: { title: { text: data.metric }, ...(narrow ? { thickness: 12 } : {}),
        ...(stacked ? { y: 0.5, len: 1 } : {}) },
      hovertemplate: `${data.x} %{x}<br>${data.y} %{y}<br>${data.metric} %{z}<extra>measured</extra>` });
    if (side) traces.push({ ...cell, z: data.theory_z, text: text(data.theory_z), zmin, zmax, xaxis: "x2", yaxis: "y2",
      showscale: false, name: "theory", hovertemplate: `${data.x} %{x}<br>${data.y} %{y}<br>${data.theory} %{z}<extra>theory</extra>` });
    if (stacked) {
      Object.assign(layout, {
        height: 820,
        xaxis: { title: { text: data.x }, type: "category", anchor: "y" },
        yaxis: { title: { text: data.y }, type: "category", domain: [0.58, 1] },
        xaxis2: { title: { text: data.x }, type: "category", anchor: "y2", matches: "x" },
        yaxis2: { title: { text: data.y }, type: "category", anchor: "x2", matches: "y", domain: [0, 0.42] },
      });
    } else {
      Object.assign(layout, {
        xaxis: { title: { text: data.x }, type: "category", domain: side ? [0, 0.44] : [0, 1] },
        yaxis: { title: { text: data.y }, type: "category" },
        ...(side ? { xaxis2: { title: { text: data.x }, type: "category", domain: [0.5, 0.94] },
          yaxis2: { type: "category", anchor: "x2", matches: "y", showticklabels: false } } : {}),
      });
    }
    layout.annotations.push({ text: "measured", x: side && !stacked ? 0.22 : 0.5, y: 1.0, yanchor: "bottom",
      xref: "paper", yref: "paper", showarrow: false });
    if (side) layout.annotations.push({ text: narrow ? "theory" : `theory: ${data.theory}`, x: stacked ? 0.5 : 0.72,
      y: stacked ? 0.42 : 1.0, yanchor: "bottom", xref: "paper", yref: "paper", showarrow: false });
  }
  // a third axis whose settings share a cell: the cell is their mean, which the chart says
  const averaged = Object.entries(data.averaged_over ?? {});
  if (averaged.length) {
    layout.margin.b = 120;   // under the iso-ηλ legend (at y −0.18), not over it
    layout.annotations.push({ text: `each cell: the mean over ${averaged.map(([a, values]) => `${shortName(a)} ∈ {${
      values.map(fmtValue).join(", ")}}`).join("; ")} (choose x and y among them, or read the table)`,
    x: 0, xanchor: "left", y: -0.3, yanchor: "top", xref: "paper", yref: "paper", showarrow: false,
    font: { color: "#a15c00", size: 12 }, name: "averaged" });
  }
  const iso = data.iso ? [["x", "y"], ["x2", "y2"]].slice(0, traces.length).flatMap((axes) => isoSegments(data, axes)) : [];
  if (iso.length) {   // (none where no two cells share a product: no legend entry for lines not drawn)
    layout.shapes = iso;
    // the legend's entry (shapes have none; a lone legend entry is shown only when asked for)
    traces.push({ x: [null], y: [null], type: "scatter", mode: "lines", line: ISO_LINE, name: "iso-ηλ", meta: "iso",
      showlegend: true, hoverinfo: "skip" });
    layout.showlegend = true;
  }
  await plotly(div, traces, layout);
}

function gcd(a, b) {
  return b ? gcd(b, a % b) : a;
}

const ISO_LINE = { color: "rgba(255,255,255,0.8)", dash: "dot", width: 1.2 };
const ISO_CLEAR = 0.4;   // cells (category widths) left clear around each cell's centre, where its label is

// Lines through the cells of equal ηλ (x and y the learning rate and the weight decay, either way round): from
// cell to cell, stopping short of the centres so that they do not cross the cells' labels. Shapes, since a
// category axis places them at fractional positions (its index) where a trace can only name a category.
function isoSegments(data, [xref, yref]) {
  const byProduct = new Map();
  data.xs.forEach((x, i) => data.ys.forEach((y, j) => {
    const key = (x * y).toPrecision(6);
    (byProduct.get(key) ?? byProduct.set(key, []).get(key)).push([i, j]);
  }));
  const segments = [];
  for (const cells of byProduct.values()) {
    cells.sort((a, b) => a[0] - b[0]);
    for (let k = 1; k < cells.length; k += 1) {
      const [[xa, ya], [xb, yb]] = [cells[k - 1], cells[k]];
      // a line between cells that are not neighbours crosses the centres of the cells on it: cut there too
      const parts = gcd(Math.abs(xb - xa), Math.abs(yb - ya)) || 1;
      const [dx, dy] = [(xb - xa) / parts, (yb - ya) / parts];
      const trim = ISO_CLEAR / Math.hypot(dx, dy);
      for (let i = 0; i < parts; i += 1) {
        const [x0, y0] = [xa + i * dx, ya + i * dy];
        segments.push({ type: "line", xref, yref, line: ISO_LINE,
          x0: x0 + trim * dx, y0: y0 + trim * dy, x1: x0 + (1 - trim) * dx, y1: y0 + (1 - trim) * dy });
      }
    }
  }
  return segments;
}

// Parallel coordinates of a study of three or more axes: one line per point (means over seeds), an axis per
// study axis and the metric last, coloured by the metric.
export async function drawParallel(div, rows, axes, metric) {
  const shown = rows.filter((r) => typeof r[metric] === "number");
  const dimension = (name) => {
    const values = shown.map((r) => r[name]);
    if (numeric(values)) return { label: shortName(name), values };
    const levels = [...new Set(values.map(String))];
    return { label: shortName(name), values: values.map((v) => levels.indexOf(String(v))), tickvals: levels.map((_, i) => i),
      ticktext: levels };
  };
  const metricValues = shown.map((r) => r[metric]);
  await plotly(div, [{ type: "parcoords", dimensions: [...axes.map(dimension), { label: metric, values: metricValues }],
    line: { color: metricValues, colorscale: "Viridis", showscale: true, colorbar: { title: { text: metric } } } }],
  { height: 440, margin: { l: 60, r: 60, t: 40, b: 30 } });
}
