// A node's config as a form generated from its type's JSON Schema (served by the API,
// the same registry the server checks with). A field offers the expression forms its
// schema allows ({"$expr"} / {"$template"} alternatives, the registry's dyn()); strings,
// numbers, booleans and enums are plain controls; a string map (env, headers) is rows of
// name and value; a list of strings (secrets) is one per line; anything else is JSON.
// Expressions are checked inline as they are typed (expr.js).
import { el } from "../dom.js";
import { checkExpr, checkTemplate, checkValue } from "./expr.js";

const isRef = (s) => Boolean(s && typeof s === "object" && typeof s.$ref === "string");

// The plain (non-expression) alternative of a property: the schema itself, or the first
// alternative in its anyOf/oneOf that is not a $ref (the refs are $expr / $template).
function plain(spec) {
  if (!spec || typeof spec !== "object") return {};
  const alts = spec.anyOf || spec.oneOf;
  if (!alts || spec.type || spec.enum) return spec;
  return alts.find((a) => !isRef(a)) || {};
}

function typesOf(spec) {
  if (!spec || typeof spec !== "object") return [];
  if (spec.type) return (Array.isArray(spec.type) ? spec.type : [spec.type]).filter((x) => x !== "null");
  return (spec.anyOf || spec.oneOf || []).filter((a) => !isRef(a)).flatMap(typesOf);
}

// The control a property gets.
export function kindOf(spec) {
  const p = plain(spec);
  if (Array.isArray(p.enum)) return "enum";
  const ts = typesOf(spec);
  if (ts.includes("string") && (ts.includes("number") || ts.includes("integer"))) return "scalar";
  const t = ts[0];
  if (t === "object" && p.additionalProperties && typeof p.additionalProperties === "object"
      && !p.properties && kindOf(p.additionalProperties) === "string") return "map";
  if (t === "array" && p.items && kindOf(p.items) === "string") return "list";
  if (["string", "number", "integer", "boolean", "object", "array"].includes(t)) return t;
  return "json";  // {} : any JSON value
}

// The forms a value may take: "value" plus the expression forms the schema allows
// (x-modes overrides, for the editor's own fields such as the graph's output).
function modesOf(spec) {
  if (spec && Array.isArray(spec["x-modes"])) return spec["x-modes"];
  const out = ["value"];
  for (const a of (spec && (spec.anyOf || spec.oneOf)) || []) {
    if (!isRef(a)) continue;
    if (/\/expr$/.test(a.$ref)) out.push("$expr");
    else if (/\/template$/.test(a.$ref)) out.push("$template");
  }
  return out;
}

// A plain value against the schema keywords a form can say something about.
function checkPlain(v, p, name) {
  if (typeof v === "string") {
    if (p.minLength && v.length < p.minLength) return `${name} must not be empty`;
    if (p.pattern) {
      try { if (!new RegExp(p.pattern, "u").test(v)) return `${name} must match ${p.pattern}`; } catch (_) { /* the server judges */ }
    }
  } else if (typeof v === "number" && typeof p.minimum === "number" && v < p.minimum) {
    return `${name} must be at least ${p.minimum}`;
  }
  return null;
}
const stringAlt = (spec) => (spec.type === "string" ? spec : (spec.anyOf || spec.oneOf || []).find((a) => a.type === "string") || {});
const numberAlt = (spec) => (["number", "integer"].includes(spec.type) ? spec : (spec.anyOf || spec.oneOf || []).find((a) => ["number", "integer"].includes(a.type)) || {});

const modeOf = (v) => (v && typeof v === "object" && !Array.isArray(v)
  ? ("$expr" in v ? "$expr" : "$template" in v ? "$template" : "json") : "value");

// One field: returns { el, check() }. `set(v)` stores a value (undefined removes the key).
export function field(name, spec, value, set, ids, { required = false, idp = "cfg", label = name } = {}) {
  const kind = kindOf(spec);
  if (kind === "map") return mapField(name, spec, value, set, ids, { required, idp });
  const p = plain(spec);
  const modes = [...modesOf(spec)];
  const err = el("span", { class: "invalid", id: `${idp}-err-${name}`, role: "status" });
  const id = `${idp}-${name}`;
  let mode = modeOf(value);
  if (mode === "json") mode = "value";
  if (!modes.includes(mode)) {
    if (mode === "value") mode = modes[0];
    else modes.push(mode);  // stored that way: shown as it is, the server judges it
  }
  let control;
  const show = (why) => {
    err.textContent = why || "";
    control.setAttribute("aria-invalid", why ? "true" : "false");
  };
  function validate(raw) {
    if (mode === "$expr") return checkExpr(raw, ids);
    if (mode === "$template" || (kind === "string" && mode === "value" && spec && spec["x-template"])) return checkTemplate(raw, ids);
    return null;
  }
  function commit() {
    let v;
    if (mode === "$expr" || mode === "$template") {
      const raw = control.value;
      show(validate(raw));
      v = raw === "" ? undefined : { [mode]: raw };
    } else if (kind === "boolean") {
      v = control.checked;
    } else if (kind === "number" || kind === "integer") {
      const raw = control.value.trim();
      if (raw === "") { v = undefined; show(null); } else {
        v = Number(raw);
        const bad = !Number.isFinite(v) || (kind === "integer" && !Number.isInteger(v));
        show(bad ? `${name} must be ${kind === "integer" ? "an integer" : "a number"}` : checkPlain(v, p, name));
        if (bad) return;
      }
    } else if (kind === "scalar") {  // a number or a string (a duration: 30, "2s")
      const raw = control.value.trim();
      v = raw === "" ? undefined : /^-?\d+(\.\d+)?$/.test(raw) ? Number(raw) : raw;
      show(v === undefined ? null : checkPlain(v, typeof v === "number" ? numberAlt(spec) : stringAlt(spec), name));
    } else if (kind === "string" || kind === "enum") {
      v = control.value === "" ? undefined : control.value;
      show(v !== undefined && kind === "string" ? validate(v) || checkPlain(v, p, name) : null);
    } else if (kind === "list") {
      const items = control.value.split("\n").map((s) => s.trim()).filter(Boolean);
      v = items.length ? items : undefined;
      const bad = items.map((s) => checkPlain(s, p.items || {}, name)).find(Boolean);
      show(bad || (p.maxItems && items.length > p.maxItems ? `${name} holds at most ${p.maxItems}` : null));
    } else {
      const raw = control.value.trim();
      if (raw === "") { v = undefined; show(null); }
      else {
        try { v = JSON.parse(raw); } catch (e) { show(`not JSON (${e.message}); a text goes in "quotes"`); return; }
        const isObj = v !== null && typeof v === "object" && !Array.isArray(v);
        const shape = kind === "object" && !isObj ? `${name} must be a JSON object {…}`
          : kind === "array" && !Array.isArray(v) ? `${name} must be a JSON list […]` : null;
        const bad = checkValue(v, ids, name);
        show(shape || (bad.length ? `${bad[0][0]}: ${bad[0][1]}` : null));
        if (shape) return;
      }
    }
    if (v === undefined && required) show(`${name} is required`);
    set(v);
  }
  function build() {
    const cur = value;
    if (mode === "$expr" || mode === "$template") {
      control = el("textarea", { id, name, rows: 2, class: "expr", spellcheck: "false", oninput: commit },
        cur && typeof cur === "object" ? cur[mode] : "");
    } else if (kind === "boolean") {
      control = el("input", { id, name, type: "checkbox", checked: cur === true, onchange: commit });
    } else if (kind === "enum") {
      const seen = new Set();  // GET and get are one choice
      const opts = p.enum.filter((v) => { const k = String(v).toLowerCase(); if (seen.has(k)) return false; seen.add(k); return true; });
      if (cur !== undefined && !opts.includes(cur)) opts.push(cur);
      control = el("select", { id, name, onchange: commit }, ["", ...opts].map((v) =>
        el("option", { value: v, selected: v === cur }, v === "" ? "—" : String(v))));
    } else if (kind === "number" || kind === "integer" || kind === "scalar") {
      control = el("input", { id, name, type: "text", inputmode: kind === "scalar" ? "text" : "decimal", value: cur ?? "",
        placeholder: kind === "scalar" ? "30, 500ms, 2s, 10m" : null, oninput: commit });
    } else if (kind === "string") {
      control = el("textarea", { id, name, rows: name === "run" || name === "script" || name === "source" ? 3 : 1,
        spellcheck: "false", oninput: commit }, typeof cur === "string" ? cur : "");
    } else if (kind === "list") {
      control = el("textarea", { id, name, rows: 2, spellcheck: "false", placeholder: "one per line", oninput: commit },
        Array.isArray(cur) ? cur.join("\n") : "");
    } else {
      control = el("textarea", { id, name, rows: 3, class: "json", spellcheck: "false", oninput: commit,
        placeholder: kind === "object" ? '{"key": "value"}' : kind === "array" ? "[…]" : "any JSON value" },
        cur === undefined ? "" : JSON.stringify(cur, null, 1));
    }
    const r = cur !== undefined && (mode === "$expr" || mode === "$template" || kind === "string")
      ? validate(typeof cur === "object" ? cur[mode] : cur) : null;
    err.textContent = r || "";
    control.setAttribute("aria-invalid", r ? "true" : "false");
    return control;
  }
  const modeSel = modes.length > 1 ? el("select", { class: "mode", "aria-label": `${label}: value or expression`, id: `${id}-mode`,
    onchange: (ev) => {
      const old = control;
      const raw = old.type === "checkbox" ? "" : old.value;
      mode = ev.target.value;
      value = mode === "value" ? (kind === "string" ? raw : undefined) : (raw ? { [mode]: raw } : undefined);
      old.replaceWith(build());
      commit();
    } }, modes.map((m) => el("option", { value: m, selected: m === mode }, m === "value" ? (kind === "string" ? "text" : "value") : m))) : "";
  const wrap = el("label", { "data-field": name, for: id },
    el("span", { class: "field-mode" }, el("strong", {}, label + (required ? " *" : "")), modeSel),
    build(), spec && spec.description ? el("span", { class: "help" }, spec.description) : "", err);
  return { el: wrap, check: () => err.textContent };
}

// A map of names to strings (env, headers): a row per entry, the value a field of its own
// (so it may be an expression where the schema allows).
function mapField(name, spec, value, set, ids, { required, idp }) {
  const vspec = plain(spec).additionalProperties;
  const rows = Object.entries(value && typeof value === "object" && modeOf(value) === "json" ? value : {})
    .map(([k, v]) => ({ k, v }));
  const err = el("span", { class: "invalid", id: `${idp}-err-${name}`, role: "status" });
  const list = el("div", { class: "map-rows", id: `${idp}-${name}` });
  const head = `${idp}-${name}-label`;
  function commit() {
    const out = {};
    let why = null;
    for (const r of rows) {
      const k = r.k.trim();
      if (!k) continue;
      if (k in out) why = `${name}: ${k} is given twice`;
      out[k] = r.v === undefined ? "" : r.v;
    }
    const v = Object.keys(out).length ? out : undefined;
    if (!why && v === undefined && required) why = `${name} is required`;
    err.textContent = why || "";
    set(v);
  }
  function draw(focusLast) {
    list.replaceChildren(...rows.map((r, i) => el("div", { class: "map-row", "data-row": i },
      el("input", { id: `${idp}-${name}-k${i}`, "aria-label": `${name} ${i + 1}: name`, placeholder: "name", value: r.k,
        spellcheck: "false", oninput: (ev) => { r.k = ev.target.value; commit(); } }),
      field(`${name}-v${i}`, vspec, r.v, (v) => { r.v = v; commit(); }, ids, { idp, label: "value" }).el,
      el("button", { type: "button", class: "small", "aria-label": `remove ${name} ${i + 1}`,
        onclick: () => { rows.splice(i, 1); draw(); commit(); } }, "×"))));
    if (focusLast && rows.length) list.querySelector(`#${idp}-${name}-k${rows.length - 1}`).focus();
  }
  draw();
  const add = el("button", { type: "button", id: `${idp}-${name}-add`, onclick: () => { rows.push({ k: "", v: undefined }); draw(true); } },
    `Add to ${name}`);
  return { el: el("div", { class: "map-field", role: "group", "aria-labelledby": head, "data-field": name },
    el("strong", { id: head }, name + (required ? " *" : "")), list, add,
    spec && spec.description ? el("span", { class: "help" }, spec.description) : "", err), check: () => err.textContent };
}

// The whole config: one field per property of `schema`, in the schema's order.
export function schemaForm(schema, config, onChange, ids) {
  const props = (schema && schema.properties) || {};
  const required = new Set((schema && schema.required) || []);
  const value = { ...(config || {}) };
  const fields = Object.entries(props).map(([name, spec]) => field(name, spec, value[name], (v) => {
    if (v === undefined) delete value[name]; else value[name] = v;
    onChange({ ...value });
  }, ids, { required: required.has(name) }).el);
  // Keys the schema does not name (the server refuses them) stay visible as JSON.
  const extra = Object.keys(value).filter((k) => !(k in props));
  return el("fieldset", { class: "config-form", id: "config-form" }, el("legend", {}, "config"), fields,
    extra.length && Object.keys(props).length ? el("p", { class: "invalid" }, `not in this type's schema: ${extra.join(", ")}`) : "");
}
