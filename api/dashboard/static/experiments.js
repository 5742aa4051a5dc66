// Experiments: yours and lab-visible ones, newest first, with filters, cursor paging, live status,
// and "compare" (a study grouping the selected experiments: POST /v1/studies {"experiments": [...]}).

import { api } from "./api.js";
import { errorBox, fmtTime, h, progressBar, routeQuery, statusBadge, TERMINAL } from "./util.js";

const STATUSES = ["", "queued", "running", "succeeded", "failed", "cancelled"];
const KINDS = ["", "nrq", "sde", "train"];
const REFRESH_MS = 2000;

export function render(main) {
  // the filters live in the address (#/?kind=sde&tag=…): Back from an experiment finds them again
  const query = routeQuery();
  const filters = { status: query.status || "", kind: query.kind || "", name: query.name || "", tag: query.tag || "" };
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

  main.append(h("h1", "Experiments"),
    h("div.toolbar", select("status", STATUSES), select("kind", KINDS), nameInput, tagInput,
      h("a.button", { href: "#/new" }, "New experiment"), compare),
    message,
    h("table.list#experiments-table", h("thead", h("tr", h("th", ""), h("th", "name"), h("th", "kind"),
      h("th", "status"), h("th", "progress"), h("th", "tags"), h("th", "owner"), h("th", "created"))), body),
    h("div.pager", prev, info, next));

  function restart() {
    cursors.length = 1;
    const kept = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
    const text = String(kept);
    history.replaceState(null, "", `#/${text ? `?${text}` : ""}`);
    load();
  }

  async function load() {
    clearTimeout(timer);
    const query = new URLSearchParams({ limit: "25" });
    for (const [key, value] of Object.entries(filters)) if (value) query.set(key, value);
    const cursor = cursors[cursors.length - 1];
    if (cursor) query.set("cursor", cursor);
    let page;
    const number = ++latest;
    try {
      page = await api(`/v1/experiments?${query}`);
      if (number !== latest) return;
      message.replaceChildren();
    } catch (error) {
      if (number === latest) message.replaceChildren(errorBox(error));
      return;
    }
    if (stopped) return;
    body.replaceChildren(...page.items.map(row));
    if (!page.items.length) body.append(h("tr", h("td.muted", { colSpan: 8 }, "No experiments match.")));
    info.textContent = `${page.total} experiment${page.total === 1 ? "" : "s"}`;
    prev.disabled = cursors.length <= 1;
    next.disabled = !page.next_cursor;
    next.onclick = () => { cursors.push(page.next_cursor); load(); };
    // live: refresh while anything on the page is still queued or running
    if (page.items.some((e) => !TERMINAL.has(e.status))) timer = setTimeout(load, REFRESH_MS);
  }

  function row(e) {
    shown.set(e.id, e.name);
    const box = h("input", { type: "checkbox", checked: selected.has(e.id), title: "select to compare",
      onchange: (ev) => { ev.target.checked ? selected.add(e.id) : selected.delete(e.id); updateCompare(); } });
    return h("tr", { dataset: { id: e.id, status: e.status } },
      h("td", box),
      h("td", h("a", { href: `#/experiments/${e.id}` }, e.name || e.id.slice(0, 12))),
      h("td", e.kind + (e.spec?.params?.model && e.kind !== "nrq" ? `/${e.spec.params.model}` : "")),
      h("td", statusBadge(e.status)),
      h("td", progressBar(e.progress)),
      h("td.tags", (e.tags || []).map((t) => h("button.tag", { type: "button", title: `only "${t}"`,
        onclick: () => { filters.tag = t; tagInput.value = t; restart(); } }, t))),
      h("td", e.owner || ""),
      h("td", fmtTime(e.created_at)));
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
