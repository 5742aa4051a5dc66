// New experiment: a form generated from the submission's JSON schema in /openapi.json (per kind and
// model every field with its default, bounds and description). The server validates: its 422
// errors are shown next to the fields they name. "Duplicate and edit" arrives as #/new?from=ID.

import { api } from "./api.js";
import { errorBox, h, routeQuery } from "./util.js";

let schemaCache = null;

async function submissionSchema() {
  if (!schemaCache) {
    const openapi = await api("/openapi.json");
    const body = openapi.paths["/v1/experiments"].post.requestBody.content["application/json"].schema;
    schemaCache = { root: body, components: openapi.components.schemas };
  }
  return schemaCache;
}

export function render(main) {
  const message = h("div");
  const form = h("form#new-experiment.spec-form", { novalidate: true });
  main.append(h("h1", "New experiment"), message, form);
  let builder;

  (async () => {
    try {
      const { root, components } = await submissionSchema();
      const from = routeQuery().from;
      const source = from ? await api(`/v1/experiments/${from}`) : null;
      // the spec, and what is the experiment's own beside it (its tags) that the form also submits
      const initial = source ? { ...source.spec, ...(source.tags?.length ? { tags: source.tags } : {}) } : {};
      if (from) main.querySelector("h1").textContent = `New experiment (from ${initial.name || from.slice(0, 8)})`;
      builder = new FormBuilder(components);
      form.append(builder.field(root, [], initial, "experiment"),
        h("div.toolbar", h("button#submit.primary", { type: "submit" }, "Submit"),
          h("span.muted", "Empty fields take their defaults.")));
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  })();

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    builder.clearErrors();
    message.replaceChildren();
    // errors placed next to their fields, the rest in the box on top; the first marked field brought into view
    const place = (detail, placedText) => {
      const unplaced = detail.filter((d) => !builder.showError(d.loc, d.msg));
      if (unplaced.length) message.replaceChildren(errorBox({ detail: unplaced }));
      else message.replaceChildren(h("div.error-box", placedText));
      // on a long form the first marked field may be off screen: bring it into view, ready to edit
      const marked = form.querySelector(".has-error");
      marked?.scrollIntoView({ block: "center" });
      marked?.querySelector("input, select, textarea")?.focus({ preventScroll: true });
    };
    let spec;
    try {
      spec = builder.value();
    } catch (error) {
      if (error instanceof FieldErrors) place(error.detail, "Some values cannot be read: see the fields marked.");
      else message.replaceChildren(errorBox(error));
      return;
    }
    try {
      const experiment = await api("/v1/experiments", { method: "POST", body: spec });
      location.hash = `#/experiments/${experiment.id}`;
    } catch (error) {
      if (error.status === 422 && Array.isArray(error.detail)) place(error.detail, "The server refused some values: see the fields marked.");
      else message.replaceChildren(errorBox(error));
    }
  });
}

// The fields the form could not read (a JSON field that does not parse), each as a 422's detail entry.
class FieldErrors extends Error {
  constructor(detail) {
    super(detail.map((d) => `${d.loc.slice(1).join(".")}: ${d.msg}`).join("; "));
    this.detail = detail;
  }
}

// Builds inputs for a JSON schema; value() reads them back into a spec; showError(loc, msg) puts a
// server error next to the field its loc names (union tags such as "nrq" in ["body", "nrq", "params",
// "lr"] are skipped).
class FormBuilder {
  constructor(components) {
    this.components = components;
    this.readers = new Map();   // dotted path → () => value (undefined: leave out)
    this.fields = new Map();    // dotted path → the field's element
    this.tags = new Map();      // dotted path of a union → its tag values
  }

  resolve(schema) {
    while (schema && schema.$ref) schema = this.components[schema.$ref.split("/").pop()];
    return schema;
  }

  // A field for `schema` at `path` with the initial value; returns its element.
  field(schema, path, initial, label) {
    schema = this.resolve(schema);
    const options = (schema.oneOf || []).map((s) => this.resolve(s));
    if (options.length) return this.union(options, path, initial, label);
    if (schema.type === "object" && schema.properties) return this.object(schema, path, initial, label);
    return this.leaf(schema, path, initial, label);
  }

  union(options, path, initial, label) {
    const tag = Object.keys(options[0].properties).find((p) => options.every((o) => o.properties[p]?.const !== undefined));
    const values = options.map((o) => o.properties[tag].const);
    const key = path.join(".");
    this.tags.set(key, new Set(values));
    const chosen = values.includes(initial?.[tag]) ? initial[tag] : values[0];
    const holder = h("div.union-body");
    const select = h("select", { name: [...path, tag].join(".") || tag, id: `field-${[...path, tag].join("-")}` },
      values.map((v) => h("option", { value: v, selected: v === chosen }, v)));
    const show = (value, start) => {
      const inside = (k) => k !== key && k.startsWith(key ? `${key}.` : "");   // the previous option's fields
      for (const map of [this.readers, this.fields, this.tags]) for (const k of [...map.keys()]) if (inside(k)) map.delete(k);
      this.readers.set([...path, tag].join("."), () => select.value);
      const option = options[values.indexOf(value)];
      holder.replaceChildren(this.object(option, path, start, null, tag));
      this.readers.set([...path, tag].join("."), () => select.value);
    };
    select.addEventListener("change", () => show(select.value, {}));
    const wrapper = h("fieldset.union", h("legend", label || tag),
      h("label.field", h("span.field-name", tag), select), holder);
    this.fields.set(key, wrapper);
    show(chosen, initial || {});
    return wrapper;
  }

  object(schema, path, initial, label, skip) {
    const children = [];
    for (const [name, prop] of Object.entries(schema.properties)) {
      if (name === skip || prop.const !== undefined) continue;
      children.push(this.field(prop, [...path, name], initial?.[name], name));
    }
    const box = label === null ? h("div.object", children) : h("fieldset.object", h("legend", label), children);
    this.fields.set(path.join("."), box);
    return box;
  }

  leaf(schema, path, initial, name) {
    const key = path.join(".");
    const nullable = (schema.anyOf || []).some((s) => s.type === "null");
    const base = this.resolve((schema.anyOf || []).find((s) => s.type !== "null") || schema);
    const value = initial !== undefined ? initial : schema.default;
    let input;
    let read;
    if (base.enum) {
      input = h("select", { name: key }, (nullable || value === undefined) && h("option", { value: "" }, "(default)"),
        base.enum.map((v) => h("option", { value: v, selected: v === value }, v)));
      read = () => (input.value === "" ? undefined : input.value);
    } else if (base.type === "boolean") {
      input = h("input", { type: "checkbox", name: key, checked: Boolean(value) });
      read = () => input.checked;
    } else if (base.type === "array" && this.resolve(base.items)?.type === "string") {
      // a list of words (tags): "a, b" or "a b", or JSON
      input = h("input", { type: "text", name: key, value: Array.isArray(value) ? value.join(", ") : "",
        placeholder: "comma-separated" });
      read = () => {
        const text = input.value.trim();
        if (!text) return undefined;
        if (text.startsWith("[")) {
          try { return JSON.parse(text); } catch { throw new Error(`${key}: a list as "a, b" or JSON ["a", "b"]`); }
        }
        return text.split(/[\s,]+/).filter(Boolean);
      };
    } else if (base.type === "array" || base.type === "object" || (!base.type && !base.enum)) {
      input = h("textarea", { name: key, rows: 2, placeholder: "JSON", value: value === undefined || value === null
        ? "" : JSON.stringify(value) });
      read = () => {
        if (!input.value.trim()) return undefined;
        try { return JSON.parse(input.value); } catch (error) { throw new Error(`${key}: not valid JSON (${error.message})`); }
      };
    } else {
      // text, not type=number: any value reaches the server, whose message says what is wrong
      input = h("input", { type: "text", name: key, value: value ?? "", inputMode: base.type === "string" ? "text" : "decimal",
        placeholder: value === undefined || value === null ? "(unset)" : "" });
      read = () => {
        const text = input.value.trim();
        if (text === "") return undefined;   // left out: the server applies its default
        if (base.type === "integer" || base.type === "number") {
          const number = Number(text);
          return text !== "" && Number.isFinite(number) ? number : text;
        }
        return text;
      };
    }
    input.id = `field-${path.join("-")}`;
    this.readers.set(key, read);
    const element = h("label.field", { dataset: { path: key } }, h("span.field-name", name),
      input, h("span.hint", describe(schema, base)), h("span.field-error", { dataset: { errorFor: key } }));
    this.fields.set(key, element);
    return element;
  }

  // The spec the fields give; FieldErrors naming every field that cannot be read (not only the first).
  value() {
    const out = {};
    const errors = [];
    for (const [key, read] of this.readers) {
      let v;
      try {
        v = read();
      } catch (error) {
        const msg = String(error.message);
        errors.push({ loc: ["body", ...key.split(".")], msg: msg.startsWith(`${key}: `) ? msg.slice(key.length + 2) : msg });
        continue;
      }
      if (v === undefined) continue;
      const parts = key.split(".");
      let node = out;
      for (const part of parts.slice(0, -1)) node = node[part] ??= {};
      node[parts.at(-1)] = v;
    }
    if (errors.length) throw new FieldErrors(errors);
    return out;
  }

  clearErrors() {
    for (const el of document.querySelectorAll(".field-error")) el.textContent = "";
    for (const el of document.querySelectorAll(".has-error")) el.classList.remove("has-error");
  }

  // Place the message at the deepest field its loc names; false when no field matches.
  showError(loc, msg) {
    const path = [];
    for (const part of loc.slice(loc[0] === "body" ? 1 : 0)) {
      if (this.tags.get(path.join("."))?.has(part)) continue;
      path.push(part);
    }
    // a check over several fields is reported at their object; its message starts with the field it is about
    const named = /^(?:Value error, )?([A-Za-z_]\w*)[/:]/.exec(msg)?.[1];
    if (named && this.fields.has([...path, named].join("."))) path.push(named);
    for (let n = path.length; n >= 0; n--) {
      const key = path.slice(0, n).join(".");
      const field = this.fields.get(key);
      if (!field || (n === 0 && path.length)) continue;
      let slot = field.querySelector(":scope > .field-error");
      if (!slot) slot = field.appendChild(h("span.field-error", { dataset: { errorFor: key } }));
      // inside a JSON field (a schedule entry): say where, as "0.step: …"
      const text = n < path.length ? `${path.slice(n).join(".")}: ${msg}` : msg;
      slot.textContent = slot.textContent ? `${slot.textContent}; ${text}` : text;
      field.classList.add("has-error");
      return true;
    }
    return false;
  }
}

function describe(schema, base) {
  const bits = [];
  if (schema.description) bits.push(schema.description);
  const bounds = [];
  if (base.minimum !== undefined) bounds.push(`≥ ${bound(base.minimum)}`);
  if (base.exclusiveMinimum !== undefined) bounds.push(`> ${bound(base.exclusiveMinimum)}`);
  if (base.maximum !== undefined) bounds.push(`≤ ${bound(base.maximum)}`);
  if (base.exclusiveMaximum !== undefined) bounds.push(`< ${bound(base.exclusiveMaximum)}`);
  if (bounds.length) bits.push(bounds.join(", "));
  if (schema.default !== undefined && schema.default !== null) bits.push(`default ${JSON.stringify(schema.default)}`);
  return bits.join(" · ");
}

// A bound as the schema means it: an integer past 2⁵³ (a seed's 2⁶³ − 1) is not exact as a JS number.
function bound(value) {
  return Number.isInteger(value) && !Number.isSafeInteger(value) ? value.toExponential(3) : String(value);
}
