// Start a stored workflow with an input: a form generated from the JSON Schema the
// document declares (`input_schema`, an object of properties), else a JSON box.
import { api, projectPath } from "./api.js";
import { el } from "./dom.js";

function declared(wf) {
  const given = wf.input_schema;  // the server reads it from the stored document
  if (given && given.type === "object" && given.properties) return given;
  if (!wf.source) return null;
  try {
    const doc = JSON.parse(wf.source);
    const s = doc && (doc.input_schema || (doc.input && doc.input.schema));
    return s && s.type === "object" && s.properties ? s : null;
  } catch (_) { return null; }
}

export function inputForm(name, wf) {
  const schema = declared(wf);
  const msg = el("p", { class: "error", id: "start-error", role: "status" });
  const fields = {};
  let body;
  if (schema) {
    const required = new Set(schema.required || []);
    body = Object.entries(schema.properties).map(([key, spec]) => {
      const input = spec.type === "boolean" ? el("input", { type: "checkbox", name: key })
        : Array.isArray(spec.enum) ? el("select", { name: key }, ["", ...spec.enum].map((v) => el("option", { value: v }, v)))
        : el("input", { name: key, type: ["number", "integer"].includes(spec.type) ? "number" : "text",
                        value: spec.default !== undefined ? String(spec.default) : null });
      fields[key] = [input, spec, required.has(key)];
      return el("label", {}, `${spec.title || key}${required.has(key) ? " *" : ""}`, input);
    });
  } else {
    body = [el("label", {}, "Input (JSON)", el("textarea", { id: "start-input", rows: 3, placeholder: "{}" }))];
  }
  function collect(form) {
    if (!schema) {
      const raw = form.querySelector("#start-input").value.trim();
      if (!raw) return null;
      try { return JSON.parse(raw); } catch (_) { throw new Error("the input is not JSON"); }
    }
    const out = {};
    for (const [key, [input, spec, req]] of Object.entries(fields)) {
      if (spec.type === "boolean") { out[key] = input.checked; continue; }
      if (input.value === "") { if (req) throw new Error(`${key} is required`); continue; }
      if (["number", "integer"].includes(spec.type)) {
        const n = Number(input.value);
        if (!Number.isFinite(n) || (spec.type === "integer" && !Number.isInteger(n))) throw new Error(`${key} must be a number`);
        out[key] = n;
      } else out[key] = input.value;
    }
    return out;
  }
  return el("form", { class: "card start", id: "start-form", onsubmit: async (ev) => {
    ev.preventDefault();
    msg.textContent = "";
    let input;
    try { input = collect(ev.target); } catch (e) { msg.textContent = e.message; return; }
    try {
      const got = await api(projectPath(`/workflows/${encodeURIComponent(name)}/runs`), { method: "POST", body: { input } });
      location.hash = `#/run/${encodeURIComponent(got.run_id)}`;
    } catch (e) { msg.textContent = e.message; }
  } }, el("h2", {}, `Start ${name}`), body, el("button", { type: "submit", id: "start-submit" }, "Start"), msg);
}
