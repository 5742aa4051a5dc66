// Small DOM and formatting helpers shared by the pages.

// h("div.card#x", {onclick}, child, "text", [children]) → an element.
export function h(tag, attrs = {}, ...children) {
  const [name, ...rest] = tag.split(/(?=[.#])/);
  const el = document.createElement(name || "div");
  for (const part of rest) {
    if (part[0] === ".") el.classList.add(part.slice(1));
    else el.id = part.slice(1);
  }
  // the second argument is attributes only when it is a plain object; anything else (0 and "" too) is a child
  if (attrs === null || typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs)) {
    children.unshift(attrs);
    attrs = {};
  }
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key in el && key !== "list" && key !== "type") el[key] = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

export function fmtNumber(value) {
  if (value === null || value === undefined || value === "") return "";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value) && Math.abs(value) < 1e7) return String(value);
  const abs = Math.abs(value);
  // 4 significant digits without trailing zeros: 5e-4 and 1.81e-7, not 5.000e-4 beside 0.1
  return abs !== 0 && (abs < 1e-3 || abs >= 1e6) ? value.toExponential(3).replace(/\.?0+e/, "e")
    : Number(value.toPrecision(4)).toString();
}

// Any value as the pages write it: a number by fmtNumber, a string as it is, anything else (a list such as a
// schedule, an object, a boolean) as compact JSON with its numbers by fmtNumber; "" for none.
export function fmtValue(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return fmtNumber(value);
  if (typeof value === "string") return value;
  return JSON.stringify(value, (k, v) => (typeof v === "number" ? Number(fmtNumber(v)) : v));
}

export function fmtTime(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "";
  if (seconds < 10) return `${Math.max(0, seconds).toFixed(1)} s`;
  seconds = Math.round(seconds);
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}

export function statusBadge(status) {
  return h(`span.badge.status-${status}`, { dataset: { status } }, status);
}

export function progressBar(progress, label) {
  const bar = h("div.progress", h("div.progress-fill"), h("span.progress-label"));
  setProgress(bar, progress, label);
  return bar;
}

// A progressBar's fill and label, updated in place.
export function setProgress(bar, progress, label) {
  const pct = Math.round((progress || 0) * 1000) / 10;
  bar.title = `${pct}%`;
  bar.firstChild.style.width = `${pct}%`;
  bar.lastChild.textContent = label ?? `${pct}%`;
}

// el's children as build() makes them, rebuilt only when key (anything JSON can write) differs from the last
// time's. A page that redraws on every progress event keeps the nodes that did not change: a replaced link or
// button loses the click that straddles its replacement.
const builtFrom = new WeakMap();
export function refill(el, key, build) {
  const written = JSON.stringify([key]);   // in a list: undefined is written too ("[null]")
  if (builtFrom.get(el) === written) return;
  const children = build();   // recorded once built: a build that throws is tried again at the next call
  el.replaceChildren();
  append(el, [children]);
  builtFrom.set(el, written);
}

// Seconds left of an estimate the server gave (seconds, as of readAt), now: readAt and now are performance.now()
// milliseconds, so only the page's own intervals enter and a browser whose clock is off counts the same; null
// without an estimate, and 0 once it is due.
export function countdown(seconds, readAt = 0, now = readAt) {
  return seconds === null || seconds === undefined ? null : Math.max(0, seconds - (now - readAt) / 1000);
}

// A running job's seconds to its estimated finish (eta, from its last progress write, progressed_at: both on the
// server's clock) as of readAt, now (countdown); null without an estimate. It counts from the write, so it
// overstates by the write's age when read (under one flush interval while steps are quick).
export function secondsLeft({ status, eta, progressed_at: writtenAt }, readAt = 0, now = readAt) {
  if (status !== "running" || !eta || !writtenAt) return null;
  return countdown((Date.parse(eta) - Date.parse(writtenAt)) / 1000, readAt, now);
}

// el's children: one node for each item (idOf: unique among them), the last call's kept while the item's key
// (anything JSON can write) is unchanged, and built anew otherwise; update(node, item), when given, then brings a
// node's changing parts (a progress bar) up to date in place. Rows of a list that refreshes while jobs run stay
// under the pointer.
const keyedNodes = new WeakMap();
export function keyedChildren(el, items, idOf, keyOf, build, update = () => {}) {
  const before = keyedNodes.get(el) ?? new Map();
  const now = new Map();
  const nodes = items.map((item) => {
    const key = JSON.stringify([keyOf(item)]);
    const kept = before.get(idOf(item));
    const node = kept && kept.key === key ? kept.node : build(item);
    now.set(idOf(item), { key, node });
    update(node, item);
    return node;
  });
  keyedNodes.set(el, now);
  setChildren(el, nodes);
}

// el's children set to nodes, moving only those not already in their place: a node taken out and put back loses
// the click that straddles the move, and the focus (one new row of a list must not move the others).
function setChildren(el, nodes) {
  const wanted = new Set(nodes);
  for (const child of [...el.childNodes]) if (!wanted.has(child)) child.remove();
  nodes.forEach((node, i) => { if (el.childNodes[i] !== node) el.insertBefore(node, el.childNodes[i] ?? null); });
}

export function errorBox(error) {
  const detail = error && error.detail !== undefined ? error.detail : error?.message ?? String(error);
  const text = Array.isArray(detail) ? detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("\n")
    : typeof detail === "string" ? detail : JSON.stringify(detail);
  return h("div.error-box", { role: "alert" }, text);
}

export const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

// The hash route's query (#/new?from=ID → {from: "ID"}).
export function routeQuery() {
  const query = location.hash.split("?")[1] || "";
  return Object.fromEntries(new URLSearchParams(query));
}
