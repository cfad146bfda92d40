// Form fields from a JSON Schema object's properties (an approval's fields, a workflow's
// input), and the values they hold, checked here first; the server checks again.
// Numbers are typed as text (the browser's own number check would stop the submit with a
// bubble and leave an old message standing); arrays take a JSON array or a comma list;
// a required boolean is a yes/no choice, so leaving it alone is not an answer.
import { el } from "./dom.js";

const NUMERIC = new Set(["integer", "number"]);

function typeOf(spec) {
  const t = Array.isArray(spec.type) ? spec.type.find((x) => x !== "null") : spec.type;
  return t || (Array.isArray(spec.enum) ? "enum" : "string");
}

function input(name, spec, required, id) {
  const type = typeOf(spec);
  const dflt = spec.default;
  if (Array.isArray(spec.enum)) {
    return el("select", { name, id }, el("option", { value: "" }, required ? "choose…" : ""),
      spec.enum.map((v, i) => el("option", { value: String(i), selected: dflt !== undefined && v === dflt }, String(v))));
  }
  if (type === "boolean" && required) {
    return el("select", { name, id }, el("option", { value: "" }, "choose…"),
      el("option", { value: "true", selected: dflt === true }, "yes"),
      el("option", { value: "false", selected: dflt === false }, "no"));
  }
  if (type === "boolean") return el("input", { type: "checkbox", name, id, checked: dflt === true });
  if (type === "object") {
    return el("textarea", { name, id, rows: 2, placeholder: "{ JSON object }" },
      dflt !== undefined ? JSON.stringify(dflt) : "");
  }
  const attrs = { name, id, type: "text", autocomplete: "off" };
  if (type === "integer") attrs.inputmode = "numeric";
  if (type === "number") attrs.inputmode = "decimal";
  if (type === "array") attrs.placeholder = "a, b, c  or  a JSON array";
  if (dflt !== undefined) attrs.value = type === "array" ? JSON.stringify(dflt) : String(dflt);
  return el("input", attrs);
}

function number(name, spec, raw) {
  const t = typeOf(spec);
  const n = raw.trim() === "" ? NaN : Number(raw);
  if (!Number.isFinite(n) || (t === "integer" && !Number.isInteger(n))) {
    throw new Error(`${name} must be ${t === "integer" ? "an integer" : "a number"}`);
  }
  if (spec.minimum !== undefined && n < spec.minimum) throw new Error(`${name} must be at least ${spec.minimum}`);
  if (spec.maximum !== undefined && n > spec.maximum) throw new Error(`${name} must be at most ${spec.maximum}`);
  return n;
}

function text(name, spec, v) {
  if (spec.minLength !== undefined && v.length < spec.minLength) throw new Error(`${name} must be at least ${spec.minLength} characters`);
  if (spec.maxLength !== undefined && v.length > spec.maxLength) throw new Error(`${name} must be at most ${spec.maxLength} characters`);
  if (spec.pattern && !new RegExp(spec.pattern, "u").test(v)) throw new Error(`${name} does not match ${spec.pattern}`);
  return v;
}

// One item of an array, typed by the array's `items`.
function item(name, spec, v) {
  const t = typeOf(spec || {});
  if (typeof v !== "string") {
    if (NUMERIC.has(t)) return number(name, spec, String(v));
    return v;
  }
  if (NUMERIC.has(t)) return number(name, spec, v);
  if (t === "boolean") {
    if (["true", "yes"].includes(v.toLowerCase())) return true;
    if (["false", "no"].includes(v.toLowerCase())) return false;
    throw new Error(`${name} must be true or false`);
  }
  if (Array.isArray((spec || {}).enum) && !spec.enum.includes(v)) throw new Error(`${name} must be one of ${spec.enum.join(", ")}`);
  return text(name, spec || {}, v);
}

function array(name, spec, raw) {
  const s = raw.trim();
  let items;
  if (s.startsWith("[")) {
    try { items = JSON.parse(s); } catch (_) { throw new Error(`${name} is not a JSON array`); }
    if (!Array.isArray(items)) throw new Error(`${name} is not a JSON array`);
  } else {
    items = s.split(",").map((x) => x.trim()).filter((x) => x !== "");
  }
  const out = items.map((v, i) => item(`${name}[${i}]`, spec.items, v));
  if (spec.minItems !== undefined && out.length < spec.minItems) throw new Error(`${name} needs at least ${spec.minItems} items`);
  if (spec.maxItems !== undefined && out.length > spec.maxItems) throw new Error(`${name} takes at most ${spec.maxItems} items`);
  if (spec.uniqueItems && new Set(out.map((v) => JSON.stringify(v))).size !== out.length) throw new Error(`${name} has an item twice`);
  return out;
}

// schema: {properties, required}. Returns {fields: [label elements], collect()}, where
// collect() returns the answer object or throws an Error naming the field.
export function schemaFields(schema, idPrefix = "field") {
  const props = schema.properties || {};
  const required = new Set(schema.required || []);
  const inputs = [];
  const fields = Object.entries(props).map(([name, spec]) => {
    const id = `${idPrefix}-${name}`.replace(/[^\w-]/g, "_");
    const box = input(name, spec || {}, required.has(name), id);
    inputs.push([name, spec || {}, box]);
    return el("label", { for: id }, `${(spec && spec.title) || name}${required.has(name) ? " *" : ""}`, box,
              spec && spec.description ? el("span", { class: "muted" }, spec.description) : "");
  });
  function collect() {
    const out = {};
    for (const [name, spec, box] of inputs) {
      const t = typeOf(spec);
      const req = required.has(name);
      if (box.type === "checkbox") { out[name] = box.checked; continue; }
      const v = box.value;
      if (v === "" || (t === "array" && v.trim() === "")) {
        if (req) throw new Error(`${name} is required`);
        continue;
      }
      if (Array.isArray(spec.enum)) out[name] = spec.enum[Number(v)];
      else if (t === "boolean") out[name] = v === "true";
      else if (NUMERIC.has(t)) out[name] = number(name, spec, v);
      else if (t === "array") out[name] = array(name, spec, v);
      else if (t === "object") {
        try { out[name] = JSON.parse(v); } catch (_) { throw new Error(`${name} is not JSON`); }
        if (!out[name] || typeof out[name] !== "object" || Array.isArray(out[name])) throw new Error(`${name} must be a JSON object`);
      } else out[name] = text(name, spec, v);
    }
    return out;
  }
  return { fields, collect };
}
