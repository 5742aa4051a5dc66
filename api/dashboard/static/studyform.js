// New study: a base spec (an experiment's, "sweep from here" as #/studies/new?from=ID, or written), axes
// (a grid or zipped, values as a list or a linspace/logspace) and seeds. Before submitting, the page
// asks the server for the plan (POST /v1/study-plans: runs and work, nothing stored) and shows its
// 422 next to the axis it names.

import { api } from "./api.js";
import { errorBox, fmtNumber, h, routeQuery } from "./util.js";

const DEFAULT_BASE = { kind: "nrq", params: { steps: 2000, trials: 200, record_every: 50 } };

// The values of an axis row: a list ("0.05, 0.1"), a JSON list where the values are lists themselves (a
// spectrum axis: "[[1, 2, 2], [1, 4, 4]]", which splitting at commas could not give), or start, stop and count
// for lin/logspace.
export function axisValues(mode, text) {
  if (mode === "list" && text.trim().startsWith("[")) return jsonList(text);
  const parts = text.split(/[\s,;]+/).filter(Boolean);
  if (mode === "list") return parts.map((p) => (p !== "" && Number.isFinite(Number(p)) ? Number(p) : p));
  const [start, stop, count] = parts.map(Number);
  if (![start, stop, count].every(Number.isFinite) || count < 1 || !Number.isInteger(count)) {
    throw new Error(`${mode}: expected "start, stop, count" (count a whole number ≥ 1), got "${text}"`);
  }
  if (mode === "logspace" && !(start > 0 && stop > 0)) throw new Error(`logspace: expected start and stop > 0, got "${text}"`);
  return Array.from({ length: count }, (_, i) => {
    const t = count === 1 ? 0 : i / (count - 1);
    const v = mode === "linspace" ? start + t * (stop - start) : start * (stop / start) ** t;
    return Number(v.toPrecision(12));
  });
}

function jsonList(text) {
  let values;
  try { values = JSON.parse(text); } catch (e) { throw new Error(`list: not valid JSON (${e.message})`); }
  if (!Array.isArray(values)) throw new Error(`list: expected a JSON list of the axis's values, got "${text}"`);
  return values;
}

export function render(main) {
  const message = h("div");
  const plan = h("div.plan#study-plan", "…");
  const name = h("input#study-name", { type: "text", name: "name", placeholder: "(optional)" });
  const baseText = h("textarea#study-base", { name: "base", rows: 8, spellcheck: false });
  const baseError = h("span.field-error", { dataset: { errorFor: "base" } });
  const rows = h("div#study-axes");
  const seeds = h("input#study-seeds", { type: "text", name: "seeds", value: "0, 1", placeholder: "0, 1, 2" });
  const seedsError = h("span.field-error", { dataset: { errorFor: "seeds" } });
  const submit = h("button#study-submit.primary", { type: "submit" }, "Submit study");
  const form = h("form#new-study.spec-form", { novalidate: true },
    h("label.field", h("span.field-name", "name"), name),
    h("label.field", h("span.field-name", "base"), baseText, h("span.hint", "The experiment spec every run starts from (JSON)."), baseError),
    h("fieldset.axes", h("legend", "axes"), rows,
      h("button#add-axis", { type: "button", onclick: () => { addAxis(); replan(); } }, "Add axis")),
    h("label.field", h("span.field-name", "seeds"), seeds, h("span.hint", "Each point runs once per seed."), seedsError),
    plan, h("div.toolbar", submit));
  main.append(h("h1", "New study"), message, form);
  let timer = null;
  let asked = 0;

  function addAxis(path = "params.lr", mode = "list", text = "0.05, 0.1", group = "grid") {
    const row = h("div.axis-row", { dataset: { path } },
      h("input", { type: "text", name: "axis-path", value: path, placeholder: "params.lr", list: "axis-paths" }),
      h("select", { name: "axis-mode" }, ["list", "linspace", "logspace"].map((m) => h("option", { value: m, selected: m === mode }, m))),
      h("input", { type: "text", name: "axis-values", value: text, placeholder: "0.05, 0.1  or  start, stop, count",
        title: "list: values, or a JSON list ([[1, 2, 2], [1, 4, 4]] for lists); lin/logspace: start, stop, count" }),
      h("select", { name: "axis-group" }, ["grid", "zip"].map((g) => h("option", { value: g, selected: g === group }, g))),
      h("button.small", { type: "button", title: "remove this axis", onclick: () => { row.remove(); replan(); } }, "×"),
      h("span.field-error.axis-error"));
    rows.append(row);
    return row;
  }

  // The study the form describes; else throws an Error whose `problems` are every mistake the page can
  // see before asking the server, one { field, text } per field (so all of them are shown at once).
  function study() {
    const problems = [];
    let base;
    try { base = JSON.parse(baseText.value); } catch (e) { problems.push({ field: baseError, text: `base: not valid JSON (${e.message})` }); }
    const body = { base, seeds: [] };
    if (name.value.trim()) body.name = name.value.trim();
    const seen = new Map();   // path → its row number: a second row of one path replaced the first, unsaid
    for (const [index, row] of [...rows.querySelectorAll(".axis-row")].entries()) {
      const path = row.querySelector('[name="axis-path"]').value.trim();
      row.dataset.path = path;
      const group = row.querySelector('[name="axis-group"]').value;
      if (path && seen.has(path)) {
        problems.push({ field: row.querySelector(".axis-error"), text: `${path}: already axis ${seen.get(path)}: give its values there` });
        continue;
      }
      seen.set(path, index + 1);
      try {
        const values = axisValues(row.querySelector('[name="axis-mode"]').value, row.querySelector('[name="axis-values"]').value);
        (body[group] ??= {})[path] = values;
      } catch (e) {
        problems.push({ field: row.querySelector(".axis-error"), text: e.message });
      }
    }
    const seedText = seeds.value.trim();
    body.seeds = seedText ? seedText.split(/[\s,;]+/).map(Number) : [];
    if (body.seeds.some((s) => !Number.isInteger(s) || s < 0)) {
      problems.push({ field: seedsError, text: `seeds: expected whole numbers ≥ 0, got "${seedText}"` });
    }
    if (problems.length) throw Object.assign(new Error(problems.map((p) => p.text).join("; ")), { problems });
    if (!body.seeds.length) delete body.seeds;
    return body;
  }

  // study()'s problems beside their fields, marked as the server's errors are; any other error above the form
  function showProblems(error) {
    if (!error.problems) { message.replaceChildren(errorBox(error)); return; }
    for (const { field, text } of error.problems) {
      field.textContent = text;
      field.closest(".axis-row, .field")?.classList.add("has-error");
    }
  }

  function clearErrors() {
    for (const el of form.querySelectorAll(".field-error")) el.textContent = "";
    for (const el of form.querySelectorAll(".has-error")) el.classList.remove("has-error");
    message.replaceChildren();
  }

  // Each 422 error next to the axis its loc names (an unknown path, or a point's bad value of that
  // path), else next to the base or the seeds; what matches none goes above the form. The same message
  // at several points is said once, with the points it holds at and the values of the first.
  function showErrors(detail) {
    const unplaced = [];
    const said = new Map();   // slot -> message -> points (their errors' point objects)
    for (const error of detail) {
      const loc = error.loc || [];
      let path = null;
      if (loc[1] === "axis") path = loc[2];
      else if (loc[1] === "point") path = loc.slice(3).join(".");
      else if ((loc[1] === "grid" || loc[1] === "zip") && typeof loc[2] === "string") path = loc[2];
      const row = path && [...rows.querySelectorAll(".axis-row")].find((r) => r.dataset.path === path);
      const slot = row ? row.querySelector(".axis-error") : loc[1] === "seeds" ? seedsError : loc[1] === "base" ? baseError : null;
      if (!slot) { unplaced.push(error); continue; }
      if (!said.has(slot)) said.set(slot, new Map());
      const messages = said.get(slot);
      if (!messages.has(error.msg)) messages.set(error.msg, []);
      if (error.point) messages.get(error.msg).push(error.point);
      slot.closest(".axis-row, .field")?.classList.add("has-error");
    }
    for (const [slot, messages] of said) {
      slot.textContent = [...messages].map(([msg, points]) => msg + atPoints(points)).join("; ");
    }
    if (unplaced.length) message.replaceChildren(errorBox({ detail: unplaced }));
  }

  function atPoints(points) {
    if (!points.length) return "";
    const values = Object.entries(points[0].values).map(([path, value]) => `${path} = ${JSON.stringify(value)}`);
    const which = points.length === 1 ? `point ${points[0].index}` :
      `points ${points.map((p) => p.index).join(", ")}; the first`;
    return ` (at ${which}: ${values.join(", ")})`;
  }

  // what the plan strip says while the study cannot be planned (its errors are marked where they are)
  const NO_PLAN = "No plan: the study as written cannot run (see the errors).";

  async function askPlan() {
    const ticket = ++asked;
    clearErrors();
    let body;
    try { body = study(); } catch (e) {
      showProblems(e);
      plan.textContent = NO_PLAN;
      plan.dataset.runs = "";
      submit.disabled = true;
      return;
    }
    try {
      const p = await api("/v1/study-plans", { method: "POST", body });
      if (ticket !== asked) return;
      const limit = p.max_work ? ` of your limit ${fmtNumber(p.max_work)}` : "";
      const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
      plan.replaceChildren(h("strong", `${plural(p.points, "point")} × ${plural(p.seeds, "seed")} = ${plural(p.runs, "run")}`),
        ` · work ${fmtNumber(p.work)}${limit} (the work quota's units)`,
        ...(p.warnings || []).map((w) => h("div.muted", `⚠ ${w.code}: ${w.message}`)));
      plan.dataset.runs = p.runs;
      submit.disabled = Boolean(p.max_work && p.work > p.max_work);
    } catch (error) {
      if (ticket !== asked) return;
      plan.textContent = NO_PLAN;
      plan.dataset.runs = "";
      submit.disabled = true;
      if (error.status === 422 && Array.isArray(error.detail)) showErrors(error.detail);
      else message.replaceChildren(errorBox(error));
    }
  }

  function replan() {
    clearTimeout(timer);
    timer = setTimeout(askPlan, 350);
  }

  form.addEventListener("input", replan);
  form.addEventListener("change", replan);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    let body;
    try { body = study(); } catch (e) { showProblems(e); return; }
    try {
      const created = await api("/v1/studies", { method: "POST", body });
      location.hash = `#/studies/${created.id}`;
    } catch (error) {
      if (error.status === 422 && Array.isArray(error.detail)) showErrors(error.detail);
      else message.replaceChildren(errorBox(error));
    }
  });

  (async () => {
    const from = routeQuery().from;
    let base = DEFAULT_BASE;
    if (from) {
      try {
        const source = await api(`/v1/experiments/${from}`);
        base = { ...source.spec };
        delete base.name;
        main.querySelector("h1").textContent = `New study (sweep from ${source.name || from.slice(0, 8)})`;
      } catch (error) {
        message.replaceChildren(errorBox(error));
      }
    }
    baseText.value = JSON.stringify(base, null, 2);
    const paths = Object.keys(base.params || {}).map((k) => `params.${k}`);
    form.append(h("datalist#axis-paths", [...new Set(["params.lr", "params.weight_decay", "params.momentum", ...paths])]
      .map((p) => h("option", { value: p }))));
    addAxis("params.lr", "logspace", "0.025, 0.1, 3");
    addAxis("params.weight_decay", "list", "0.005, 0.01");
    askPlan();
  })();
  return () => clearTimeout(timer);
}
