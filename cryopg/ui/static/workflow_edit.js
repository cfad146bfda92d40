// Editing a script or a YAML pipeline in the browser (CodeMirror 6, vendored). Saving is
// the same PUT `cryopg workflow put` makes, so the server's own checks decide: a
// definition that does not compile comes back as a 400 naming its line, shown at that
// line, and nothing is stored. The save names the version it was edited from, so a
// save over someone else's newer one is refused (409) instead of losing their work.
import { api, projectPath } from "./api.js";
import { el } from "./dom.js";
import { S } from "./session.js";
import {
  EditorView, EditorState, Compartment, basicSetup, StreamLanguage, yaml, python, shell,
  lintGutter, setDiagnostics,
} from "./vendor/codemirror.esm.js";

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

function language(filename) {
  if (/\.ya?ml$/i.test(filename)) return yaml();
  if (/\.py$/i.test(filename)) return python();
  return StreamLanguage.define(shell);
}

const PIPELINE = "version: cryosleep/pipeline/v1\njobs:\n  hello:\n    run: echo hello\n";
const SCRIPT = "#!/usr/bin/env bash\nset -euo pipefail\ncryopg step hello -- echo hello\n";

// workflow_edit: #/workflows/NAME/code (an existing one) or #/workflows/new?as=file.
export async function workflowEditPage(main, name, ctl) {
  if (!S.canAct) throw Object.assign(new Error("Editing a workflow needs a Member."), { status: 403 });
  const wf = name ? await api(projectPath(`/workflows/${encodeURIComponent(name)}?source=1`), { signal: ctl.signal })
    : { filename: "pipeline.yaml", source: PIPELINE, version: 0, interpreter: null, workdir: null, kind: "pipeline" };
  if (wf.kind === "graph") {  // graph documents are edited on the canvas
    location.replace(`#/workflows/${encodeURIComponent(name)}/edit`);
    return;
  }
  const nameInput = name ? null : el("input", { id: "edit-name", name: "name", required: true, placeholder: "nightly-report" });
  const fileInput = el("input", { id: "edit-filename", name: "filename", value: wf.filename, required: true });
  const interp = el("input", { id: "edit-interpreter", name: "interpreter", value: wf.interpreter || "", placeholder: "by extension" });
  const msg = el("p", { class: "error", id: "edit-error", role: "alert" });
  const status = el("p", { class: "muted", id: "edit-status", role: "status" });
  const holder = el("div", { class: "code-editor", id: "code-editor" });
  const lang = new Compartment();
  const ext = (f) => f.includes(".") ? f.split(".").pop().toLowerCase() : "";
  let langFor = ext(fileInput.value);
  const view = new EditorView({
    parent: holder,
    state: EditorState.create({ doc: wf.source, extensions: [basicSetup, lintGutter(), lang.of(language(fileInput.value)),
      EditorView.updateListener.of((u) => { if (u.docChanged) { msg.textContent = ""; } }),
      // A name for screen readers, and a tab stop axe can see (contenteditable alone is not one).
      EditorView.contentAttributes.of({ "aria-label": `Source of ${wf.name || "the workflow"}`, tabindex: "0" })] }),
  });
  const relanguage = () => {
    if (ext(fileInput.value) === langFor) return;
    langFor = ext(fileInput.value);
    view.dispatch({ effects: lang.reconfigure(language(fileInput.value)) });
  };
  fileInput.addEventListener("change", relanguage);
  if (!name) fileInput.addEventListener("change", () => {
    if (view.state.doc.toString() === PIPELINE && !/\.ya?ml$/i.test(fileInput.value)) {
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: SCRIPT } });
    }
  });

  const showError = (e) => {
    msg.replaceChildren(e.line ? `line ${e.line}: ` : "", e.message);
    if (!e.line) return;
    const doc = view.state.doc;
    const line = doc.line(Math.min(Math.max(1, e.line), doc.lines));
    view.dispatch(setDiagnostics(view.state, [{ from: line.from, to: line.to, severity: "error", message: e.message }]),
      { selection: { anchor: line.from }, scrollIntoView: true });
  };

  const save = async (ev) => {
    ev.preventDefault();
    msg.textContent = ""; status.textContent = "";
    const target = name || nameInput.value.trim();
    if (!NAME.test(target)) { msg.textContent = "the name must be letters, digits, _ . - (up to 128)"; return; }
    const body = { source: view.state.doc.toString(), filename: fileInput.value.trim(),
                   interpreter: interp.value.trim() || null, base_version: wf.version };
    if (wf.workdir) body.workdir = wf.workdir;  // a save keeps where it was stored from
    let r;
    try {
      r = await fetchSave(target, body);
    } catch (e) { msg.textContent = e.message; return; }
    if (r.error) { showError(r.error); return; }
    location.hash = `#/workflows/${encodeURIComponent(target)}`;
  };

  main.replaceChildren(
    el("h1", {}, name ? `Edit ${name}` : "New script or pipeline", name ? el("span", { class: "muted" }, ` · from v${wf.version}`) : ""),
    el("form", { id: "edit-form", class: "edit-form", novalidate: true, onsubmit: save },
      el("div", { class: "edit-fields" },
        nameInput ? el("label", {}, "Name", nameInput) : "",
        el("label", {}, "File name (.yaml for a pipeline)", fileInput),
        el("label", {}, "Interpreter", interp)),
      holder, msg,
      el("div", { class: "actions" }, el("button", { type: "submit", id: "edit-save" }, "Save"),
        el("a", { href: name ? `#/workflows/${encodeURIComponent(name)}` : "#/workflows" }, "Cancel")),
      status));
  view.focus();
  ctl.signal.addEventListener("abort", () => view.destroy());
}

// The PUT, returning the JSON error (with its line) instead of throwing on a 400/409.
async function fetchSave(name, body) {
  try {
    return await api(projectPath(`/workflows/${encodeURIComponent(name)}`), { method: "PUT", body });
  } catch (e) {
    if (e.status === 400 || e.status === 409) return { error: { message: e.message, line: e.line, code: e.code } };
    throw e;
  }
}
