// Experiments: yours and lab-visible ones, newest first, with filters, cursor paging, live status,
// and "compare" (a study grouping the selected experiments: POST /v1/studies {"experiments": [...]}).

import { api } from "./api.js";
import {
  errorBox, fmtDuration, fmtNumber, fmtTime, h, keyedChildren, progressBar, refill, routeQuery, secondsLeft, setProgress,
  statusBadge, TERMINAL,
} from "./util.js";

const STATUSES = ["", "queued", "running", "succeeded", "failed", "cancelled"];
const KINDS = ["", "nrq", "sde", "train"];
const REFRESH_MS = 2000;

export function render(main) {
  // the filters live in the address (#/?kind=sde&tag=…): Back from an experiment finds them again
  const query = routeQuery();
  const filters = { status: query.status || "", kind: query.kind || "", name: query.name || "", tag: query.tag || "" };
  // the API's own filters (param.<path>[.op]=v, summary.<name>[.op]=v), columns of spec paths and summary
  // values, and the order (order_by=[-]summary.<name>): all kept in the address too
  let where = query.where || "";
  let columns = (query.columns || "").split(",").map((c) => c.trim()).filter(Boolean);
  let orderBy = query.order_by || "";
  const cursors = [null]; // cursor of each page visited, for "previous"
  const selected = new Set();
  const shown = new Map(); // id → name of the experiments listed so far (to name a comparison)
  let timer = null;
  let stopped = false;
  let latest = 0;   // the newest load's number: an older answer arriving late is dropped

  const body = h("tbody");
  const info = h("span.muted");
  const compare = h("button#compare", { type: "button", disabled: true, onclick: compareSelected }, "Compare selected");
  const prev = h("button", { type: "button", onclick: () => { cursors.pop(); load(); } }, "← Newer");
  const next = h("button", { type: "button" }, "Older →");
  const message = h("div");
  const select = (name, values) => h("select", { name, onchange: (e) => { filters[name] = e.target.value; restart(); } },
    values.map((v) => h("option", { value: v, selected: v === filters[name] }, v || `any ${name}`)));
  const nameInput = h("input", { type: "search", name: "name", placeholder: "name contains…", value: filters.name,
    oninput: debounce((e) => { filters.name = e.target.value; restart(); }, 300) });

  const tagInput = h("input", { type: "search", name: "tag", placeholder: "tag", value: filters.tag,
    oninput: debounce((e) => { filters.tag = e.target.value.trim(); restart(); }, 300) });

  const whereInput = h("input#where", { type: "search", name: "where", value: where, size: 44,
    placeholder: "summary.au_rms.lt=0.02 param.params.lr.ge=0.1",
    title: "the API's filters, space separated: param.<spec path>[.eq|ne|lt|le|gt|ge|in]=value, summary.<name>[.op]=value",
    oninput: debounce((e) => { where = e.target.value.trim(); restart(); }, 500) });
  const columnsInput = h("input#columns", { type: "text", name: "columns", value: columns.join(", "), size: 36,
    placeholder: "params.lr, summary.au_rms", title: "extra columns: spec paths (params.lr) and summary.<name>",
    onchange: (e) => { columns = e.target.value.split(",").map((c) => c.trim()).filter(Boolean); restart(); } });
  const head = h("thead");

  main.append(h("h1", "Experiments"),
    h("div.toolbar", select("status", STATUSES), select("kind", KINDS), nameInput, tagInput,
      h("a.button", { href: "#/new" }, "New experiment"), compare),
    h("div.toolbar", h("label", "where ", whereInput), h("label", "columns ", columnsInput)),
    message,
    h("div.scroll", h("table.list#experiments-table", head, body)),
    h("div.pager", prev, info, next));

  function drawHead() {
    const sortable = (c) => c.startsWith("summary.");
    refill(head, [columns, orderBy], () => h("tr", h("th", ""), h("th", "name"), h("th", "kind"), h("th", "status"), h("th", "progress"),
      h("th", "tags"), h("th", "owner"), h("th", "created"),
      columns.map((c) => h("th", { dataset: { column: c }, title: sortable(c) ? "sort (server side, every page)" : "",
        onclick: sortable(c) ? () => { orderBy = orderBy === c ? `-${c}` : c; restart(); } : undefined },
      c, orderBy === c ? " ▲" : orderBy === `-${c}` ? " ▼" : ""))));
  }

  function restart() {
    // a filter typed just before leaving (a link or "Compare selected" within the debounce) must not rewrite
    // the next page's address to this list's
    if (stopped) return;
    cursors.length = 1;
    const kept = new URLSearchParams(Object.entries({ ...filters, where, columns: columns.join(","), order_by: orderBy })
      .filter(([, v]) => v));
    const text = String(kept);
    history.replaceState(null, "", `#/${text ? `?${text}` : ""}`);
    load();
  }

  async function load() {
    clearTimeout(timer);
    const query = new URLSearchParams({ limit: "25" });
    for (const [key, value] of Object.entries(filters)) if (value) query.set(key, value);
    for (const term of where.split(/\s+/).filter(Boolean)) {
      const at = term.indexOf("=");
      if (at <= 0) {   // it was left out silently, and the list looked filtered by it
        refused(`where: expected key=value terms (e.g. summary.au_rms.lt=0.02), got "${term}"`);
        return;
      }
      query.append(term.slice(0, at), term.slice(at + 1));
    }
    if (columns.some((c) => c.startsWith("summary.")) || orderBy) query.set("include", "summary");
    if (orderBy) query.set("order_by", orderBy);
    drawHead();
    const cursor = cursors[cursors.length - 1];
    if (cursor) query.set("cursor", cursor);
    let page;
    const number = ++latest;
    try {
      page = await api(`/v1/experiments?${query}`);
      if (number !== latest) return;
      message.replaceChildren();
    } catch (error) {
      if (number === latest) refused(error);
      return;
    }
    if (stopped) return;
    // a listed experiment's row is kept across refreshes (rebuilt for other columns) and updated cell by cell: the
    // list refreshes every REFRESH_MS while a job runs, and a link, box or tag rebuilt under the pointer lost the click
    keyedChildren(body, page.items, (e) => e.id, () => columns, row, update);
    if (!page.items.length) body.append(h("tr", h("td.muted", { colSpan: 8 + columns.length }, "No experiments match.")));
    info.textContent = `${page.total} experiment${page.total === 1 ? "" : "s"}`;
    prev.disabled = cursors.length <= 1;
    next.disabled = !page.next_cursor;
    next.onclick = () => { cursors.push(page.next_cursor); load(); };
    // live: refresh while anything on the page is still queued or running
    if (page.items.some((e) => !TERMINAL.has(e.status))) timer = setTimeout(load, REFRESH_MS);
  }

  // A filter the page or the server refused: the error, and no rows (the last ones looked like its matches).
  function refused(error) {
    message.replaceChildren(errorBox(error));
    body.replaceChildren(h("tr", h("td.muted", { colSpan: 8 + columns.length }, "Not listed: the filter was refused.")));
    info.textContent = "";
    prev.disabled = next.disabled = true;
  }

  // An experiment's row: its cells, empty until update() fills them (cellsOf: row → its named cells).
  const cellsOf = new WeakMap();
  function row(e) {
    const box = h("input", { type: "checkbox", checked: selected.has(e.id), title: "select to compare",
      onchange: (ev) => { ev.target.checked ? selected.add(e.id) : selected.delete(e.id); updateCompare(); } });
    const cells = { name: h("td"), kind: h("td"), status: h("td"), bar: progressBar(0), eta: h("div.muted.eta"),
      tags: h("td.tags"), owner: h("td"), created: h("td"), extra: columns.map(() => h("td.number")) };
    const tr = h("tr", { dataset: { id: e.id } }, h("td", box), cells.name, cells.kind, cells.status,
      h("td", cells.bar, cells.eta), cells.tags, cells.owner, cells.created, cells.extra);
    cellsOf.set(tr, cells);
    return tr;
  }

  function update(tr, e) {
    shown.set(e.id, e.name);
    const r = cellsOf.get(tr);
    const { name, kind, status, tags, owner, created, extra } = r;
    const model = e.spec?.params?.model && e.kind !== "nrq" ? `/${e.spec.params.model}` : "";
    tr.dataset.status = e.status;
    refill(name, e.name, () => h("a", { href: `#/experiments/${e.id}` }, e.name || e.id.slice(0, 12)));
    refill(kind, e.kind + model, () => e.kind + model);
    refill(status, e.status, () => statusBadge(e.status));
    setProgress(r.bar, e.progress);
    const left = secondsLeft(e);   // as of this page's read (the list refreshes while any job runs)
    r.eta.textContent = left === null ? "" : `ETA ${fmtDuration(left)}`;
    r.eta.hidden = left === null;
    refill(tags, e.tags || [], () => (e.tags || []).map((t) => h("button.tag", { type: "button", title: `only "${t}"`,
      onclick: () => { filters.tag = t; tagInput.value = t; restart(); } }, t)));
    refill(owner, e.owner || "", () => e.owner || "");
    refill(created, e.created_at, () => fmtTime(e.created_at));
    extra.forEach((td, i) => { const v = fmtNumber(valueAt(e, columns[i])); refill(td, v, () => v); });
  }

  function updateCompare() {
    compare.disabled = selected.size < 2;
    compare.textContent = selected.size ? `Compare selected (${selected.size})` : "Compare selected";
  }

  async function compareSelected() {
    try {
      const names = [...selected].map((id) => shown.get(id) || id.slice(0, 8));
      const name = `compare ${names.join(", ")}`.slice(0, 200);
      const study = await api("/v1/studies", { method: "POST", body: { experiments: [...selected], name } });
      location.hash = `#/studies/${study.id}`;
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  }

  load();
  return () => { stopped = true; clearTimeout(timer); };
}

function debounce(fn, ms) {
  let t;
  return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); };
}

// A column's value: summary.<name> from the summary, any other path from the spec (params.lr).
function valueAt(e, column) {
  if (column.startsWith("summary.")) return e.summary?.[column.slice(8)];
  let node = e.spec;
  for (const part of column.split(".")) node = node?.[part];
  return node !== null && typeof node === "object" ? JSON.stringify(node) : node;
}
