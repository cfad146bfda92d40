// A node's config as a form generated from its type's JSON Schema (served by the API,
// the same schema the server validates with). Text fields can hold plain text, a
// {"$template"} or an {"$expr"}; numbers and booleans a value or an {"$expr"}; objects and
// lists are JSON. Expressions are checked inline as they are typed (expr.js).
import { el } from "../dom.js";
import { checkExpr, checkTemplate, checkValue } from "./expr.js";

// The schema's main type for a property: its `type`, or the first plain type among its
// anyOf/oneOf (the others being the expression forms).
function mainType(spec) {
  if (!spec || typeof spec !== "object") return "json";
  if (Array.isArray(spec.enum)) return "enum";
  const t = Array.isArray(spec.type) ? spec.type.find((x) => x !== "null") : spec.type;
  if (t) return t;
  for (const alt of spec.anyOf || spec.oneOf || []) {
    const a = mainType(alt);
    if (a !== "object" && a !== "json") return a;
  }
  return "json";
}

const modeOf = (v) => (v && typeof v === "object" && !Array.isArray(v)
  ? ("$expr" in v ? "$expr" : "$template" in v ? "$template" : "json") : "value");

// One field: returns { el, check() }. `set(v)` stores a value (undefined removes the key).
export function field(name, spec, value, set, ids, { required = false, idp = "cfg" } = {}) {
  const type = mainType(spec);
  const err = el("span", { class: "invalid", id: `${idp}-err-${name}`, role: "status" });
  const id = `${idp}-${name}`;
  const exprCapable = type === "string" || type === "number" || type === "integer" || type === "boolean" || type === "enum";
  let mode = modeOf(value);
  if (mode === "json" && exprCapable) mode = "value";
  let control;
  const show = (why) => {
    err.textContent = why || "";
    control.setAttribute("aria-invalid", why ? "true" : "false");
  };
  function validate(raw) {
    if (mode === "$expr") return checkExpr(raw, ids);
    if (mode === "$template" || (type === "string" && mode === "value" && spec && spec["x-template"])) return checkTemplate(raw, ids);
    return null;
  }
  function commit() {
    let v;
    if (mode === "$expr" || mode === "$template") {
      const raw = control.value;
      show(validate(raw));
      v = raw === "" ? undefined : { [mode]: raw };
    } else if (type === "boolean") {
      v = control.checked;
    } else if (type === "number" || type === "integer") {
      const raw = control.value.trim();
      if (raw === "") v = undefined;
      else {
        v = Number(raw);
        const bad = !Number.isFinite(v) || (type === "integer" && !Number.isInteger(v));
        show(bad ? `${name} must be ${type === "integer" ? "an integer" : "a number"}` : null);
        if (bad) return;
      }
      if (v !== undefined) show(null);
    } else if (type === "string" || type === "enum") {
      v = control.value === "" ? undefined : control.value;
      show(v !== undefined && type === "string" ? validate(v) : null);
    } else {
      const raw = control.value.trim();
      if (raw === "") { v = undefined; show(null); }
      else {
        try { v = JSON.parse(raw); } catch (e) { show(`not JSON: ${e.message}`); return; }
        const bad = checkValue(v, ids, name);
        show(bad.length ? `${bad[0][0]}: ${bad[0][1]}` : null);
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
    } else if (type === "boolean") {
      control = el("input", { id, name, type: "checkbox", checked: cur === true, onchange: commit });
    } else if (type === "enum") {
      control = el("select", { id, name, onchange: commit }, ["", ...spec.enum].map((v) =>
        el("option", { value: v, selected: v === cur }, v === "" ? "—" : String(v))));
    } else if (type === "number" || type === "integer") {
      control = el("input", { id, name, type: "text", inputmode: "decimal", value: cur ?? "", oninput: commit });
    } else if (type === "string") {
      control = el("textarea", { id, name, rows: name === "run" || name === "script" || name === "source" ? 3 : 1,
        spellcheck: "false", oninput: commit }, typeof cur === "string" ? cur : "");
    } else {
      control = el("textarea", { id, name, rows: 3, class: "json", spellcheck: "false", oninput: commit },
        cur === undefined ? "" : JSON.stringify(cur, null, 1));
    }
    const r = cur !== undefined && (mode === "$expr" || mode === "$template" || type === "string")
      ? validate(typeof cur === "object" ? cur[mode] : cur) : null;
    err.textContent = r || "";
    control.setAttribute("aria-invalid", r ? "true" : "false");
    return control;
  }
  const modes = exprCapable ? el("select", { class: "mode", "aria-label": `${name}: value or expression`, id: `${id}-mode`,
    onchange: (ev) => {
      const old = control;
      const raw = old.type === "checkbox" ? "" : old.value;
      mode = ev.target.value;
      value = mode === "value" ? (type === "string" ? raw : undefined) : (raw ? { [mode]: raw } : undefined);
      old.replaceWith(build());
      commit();
    } }, [["value", type === "string" ? "text" : "value"], ["$template", "$template"], ["$expr", "$expr"]]
      .filter(([m]) => m !== "$template" || type === "string")
      .map(([m, label]) => el("option", { value: m, selected: m === mode }, label))) : "";
  const wrap = el("label", { "data-field": name, for: id },
    el("span", { class: "field-mode" }, el("strong", {}, name + (required ? " *" : "")), modes),
    build(), spec && spec.description ? el("span", { class: "help" }, spec.description) : "", err);
  // The label's control is rebuilt when the mode changes; keep it in place.
  return { el: wrap, check: () => err.textContent };
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
