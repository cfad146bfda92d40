// Start a stored workflow with an input: a form generated from the JSON Schema the
// document declares (`input_schema`, an object of properties), else a JSON box.
import { api, projectPath } from "./api.js";
import { el } from "./dom.js";
import { schemaFields } from "./schemafields.js";

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
  let body, collectFields = null;
  if (schema) {
    const got = schemaFields(schema, "start");
    body = got.fields; collectFields = got.collect;
  } else {
    body = [el("label", {}, "Input (JSON)", el("textarea", { id: "start-input", rows: 3, placeholder: "{}" }))];
  }
  function collect(form) {
    if (collectFields) return collectFields();
    const raw = form.querySelector("#start-input").value.trim();
    if (!raw) return null;
    try { return JSON.parse(raw); } catch (_) { throw new Error("the input is not JSON"); }
  }
  return el("form", { class: "card start", id: "start-form", novalidate: true,
                      oninput: () => { msg.textContent = ""; }, onsubmit: async (ev) => {
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
