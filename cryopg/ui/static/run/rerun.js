// Re-run with edited input: a dialog prefilled with the run's input as JSON. The server
// checks the new input against the input_schema of the run's stored workflow (when it
// declares one) and answers 400 naming the field, which the dialog shows.
import { api, projectPath } from "../api.js";
import { el } from "../dom.js";

// current(): the run as last read, so the dialog opens with what the page shows now.
export function rerunEdited(base, current) {
  const box = el("textarea", { id: "rerun-input", rows: 10, spellcheck: "false", class: "json",
                               "aria-label": "input (JSON)" });
  const note = el("p", { class: "muted", id: "rerun-schema" });
  const msg = el("p", { class: "error", id: "rerun-error", role: "status" });
  const cancel = el("button", { type: "button", id: "rerun-cancel" }, "Cancel");
  const dialog = el("dialog", { id: "rerun-dialog", "aria-labelledby": "rerun-title" },
    el("form", { method: "dialog", novalidate: true, onsubmit: (ev) => { ev.preventDefault(); send(); } },
      el("h2", { id: "rerun-title" }, "Re-run with edited input"), note, box, msg,
      el("div", { class: "actions" }, el("button", { type: "submit", id: "rerun-submit" }, "Start"), cancel)));
  cancel.addEventListener("click", () => dialog.close());
  box.addEventListener("input", () => { msg.textContent = ""; });

  async function open() {
    const run = current();
    box.value = JSON.stringify(run.input ?? null, null, 2);
    msg.textContent = "";
    note.textContent = run.workflow ? `The server checks it against ${run.workflow}'s input schema, if it declares one.` : "";
    if (!dialog.isConnected) document.body.append(dialog);
    dialog.showModal();
    box.focus();
    if (run.workflow) {  // show the schema's fields as a hint; the server has the last word
      try {
        const wf = await api(projectPath(`/workflows/${encodeURIComponent(run.workflow)}`));
        const props = wf.input_schema && wf.input_schema.properties;
        if (props) {
          const req = new Set(wf.input_schema.required || []);
          note.textContent = `Checked against ${run.workflow}'s input schema: ` +
            Object.entries(props).map(([k, s]) => `${k}${req.has(k) ? "*" : ""} (${s.type || "any"})`).join(", ");
        }
      } catch (_) { /* the hint is optional */ }
    }
  }

  async function send() {
    let input;
    const raw = box.value.trim();
    try { input = raw ? JSON.parse(raw) : null; } catch (e) { msg.textContent = `not JSON: ${e.message}`; return; }
    try {
      const got = await api(`${base}/run-again`, { method: "POST", body: { input } });
      dialog.close();
      location.hash = `#/run/${encodeURIComponent(got.id)}`;
    } catch (e) { msg.textContent = e.message; }
  }

  return el("button", { type: "button", id: "rerun-edit", onclick: open }, "Re-run with edited input…");
}
