// Stored workflows: the list (kind, version, who stored it, what starts it) and one
// workflow's page: what it is, start it, its versions (every changed save, with who and
// when) and a line diff between any two, its recent runs and its source. Scripts and
// YAML pipelines are edited in the code editor (workflow_edit.js), graph documents on
// the canvas (editor/). Members edit and read sources; Viewers see the rest.
import { api, projectPath } from "./api.js";
import { el, json } from "./dom.js";
import { S } from "./session.js";
import { badge } from "./status.js";
import { duration, when } from "./time.js";
import { inputForm } from "./start.js";
import { createTwoFilesPatch } from "./vendor/diff.esm.js";

const table = (id, heads, rows, empty) => rows.length
  ? el("div", { class: "scroll-x" }, el("table", { id },
      el("thead", {}, el("tr", {}, heads.map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows)))
  : el("p", { class: "muted", id }, empty);
const wfPath = (name, rest = "") => projectPath(`/workflows/${encodeURIComponent(name)}${rest}`);
const wfHash = (name, rest = "") => `#/workflows/${encodeURIComponent(name)}${rest}`;

export async function workflowsListPage(main, ctl) {
  const { workflows } = await api(projectPath("/workflows"), { signal: ctl.signal });
  main.replaceChildren(el("h1", {}, "Workflows"),
    S.canAct ? el("p", { class: "actions" },
      el("a", { href: "#/workflows/new?as=file", id: "new-file" }, "New script or pipeline"),
      el("a", { href: "#/workflows/new", id: "new-graph" }, "New graph on the canvas")) : "",
    table("workflows", ["Name", "Kind", "File", "Version", "Triggers", "Updated"],
      workflows.map((w) => el("tr", { "data-workflow": w.name },
        el("td", {}, el("a", { href: wfHash(w.name) }, w.name)),
        el("td", {}, w.kind + (w.pipeline ? ` (${w.pipeline})` : "")), el("td", {}, w.filename),
        el("td", { class: "version" }, `v${w.version}`),
        el("td", {}, [w.schedules ? `${w.schedules} schedule(s)` : "", w.webhooks ? `${w.webhooks} webhook(s)` : "",
                      w.handlers ? `${w.handlers} handler(s)` : ""].filter(Boolean).join(", ") || "—"),
        el("td", {}, when(w.updated_at), w.updated_by ? el("span", { class: "muted" }, ` by ${w.updated_by}`) : ""))),
      "No stored workflows (cryopg workflow put NAME FILE)."));
}

// A unified diff of two texts, one element per line, coloured by what the line is.
export function diffView(nameA, a, nameB, b) {
  const patch = createTwoFilesPatch(nameA, nameB, a, b, "", "", { context: 3 });
  const lines = patch.split("\n").slice(2).filter((l) => !l.startsWith("\\ No newline"));
  if (!lines.some((l) => /^[+-]/.test(l) && !/^(\+\+\+|---) /.test(l))) {
    return el("p", { class: "muted", id: "version-diff" }, "The two versions have the same source.");
  }
  return el("pre", { class: "diff", id: "version-diff", tabindex: "0" }, lines.map((l) => el("span", {
    class: l.startsWith("@@") ? "d-hunk" : l.startsWith("+") && !l.startsWith("+++") ? "d-add"
      : l.startsWith("-") && !l.startsWith("---") ? "d-del" : "d-ctx" }, l)));
}

function versionsSection(name, versions) {
  const out = el("div", { id: "diff-out" });
  const pick = (id, dflt) => el("select", { id, "aria-label": id === "diff-from" ? "from version" : "to version" },
    versions.map((v) => el("option", { value: String(v.version), selected: v.version === dflt }, `v${v.version}`)));
  const newest = versions.length ? versions[0].version : 0;
  const from = pick("diff-from", versions.length > 1 ? versions[1].version : newest), to = pick("diff-to", newest);
  const compare = async () => {
    out.replaceChildren(el("p", { class: "muted" }, "Reading…"));
    try {
      const [a, b] = await Promise.all([from.value, to.value].map((v) => api(wfPath(name, `/versions/${v}`))));
      out.replaceChildren(diffView(`v${a.version} ${a.filename}`, a.source, `v${b.version} ${b.filename}`, b.source));
    } catch (e) { out.replaceChildren(el("p", { class: "error" }, e.message)); }
  };
  return el("section", {}, el("h2", {}, "Versions"),
    table("workflow-versions", ["Version", "File", "Stored by", "When", ""], versions.map((v) =>
      el("tr", { "data-version": String(v.version) }, el("td", {}, `v${v.version}`, v.current ? el("span", { class: "muted" }, " (current)") : ""),
        el("td", {}, v.filename), el("td", {}, v.created_by || "—"), el("td", {}, when(v.created_at)),
        el("td", {}, S.canAct && v.version !== newest ? el("button", { class: "diff-to-current", onclick: () => {
          from.value = String(v.version); to.value = String(newest); compare();
        } }, "Diff with current") : ""))), "No versions kept."),
    S.canAct && versions.length > 1 ? el("div", { class: "actions diff-pick" }, el("span", {}, "Compare"), from,
      el("span", {}, "with"), to, el("button", { id: "diff-show", onclick: compare }, "Show diff")) : "",
    out);
}

export async function workflowDetailPage(main, name, ctl) {
  const [wf, recent, vs] = await Promise.all([
    api(wfPath(name, S.canAct ? "?source=1" : ""), { signal: ctl.signal }),
    api(projectPath(`/runs?workflow=${encodeURIComponent(name)}&limit=10`), { signal: ctl.signal }),
    api(wfPath(name, "/versions"), { signal: ctl.signal })]);
  const word = wf.kind === "pipeline" ? "Jobs" : "Nodes";
  const edit = wf.kind === "graph"
    ? el("a", { href: wfHash(name, "/edit"), id: "open-canvas" }, S.canAct ? "Edit on the canvas" : "View on the canvas")
    : [S.canAct ? el("a", { href: wfHash(name, "/code"), id: "edit-code" }, "Edit the source") : "",
       ...(wf.kind === "pipeline" ? [" · ", el("a", { href: wfHash(name, "/edit"), id: "open-canvas" }, "View on the canvas")] : [])];
  main.replaceChildren(
    el("h1", {}, name, " ", el("span", { class: "muted" }, wf.kind + (wf.pipeline ? ` ${wf.pipeline}` : ""), ` · v${wf.version}`)),
    el("div", { class: "kv" }, ["file", wf.filename, "interpreter", wf.interpreter || "by extension", "directory", wf.workdir || "—",
      "on", wf.on ? json(wf.on) : "—"].map((x, i) => el("span", { class: i % 2 ? "" : "muted" }, x))),
    el("p", { class: "actions" }, edit),
    S.canAct ? inputForm(name, wf) : "",
    wf.nodes ? el("section", {}, el("h2", {}, word), el("ul", { id: "workflow-nodes" }, wf.nodes.map((n) =>
      el("li", {}, el("strong", {}, n.id), ` (${n.type})`, n.needs.length ? el("span", { class: "muted" }, ` needs ${n.needs.join(", ")}`) : "")))) : "",
    versionsSection(name, vs.versions),
    el("h2", {}, "Recent runs"), table("workflow-runs", ["Run", "Status", "Started", "Duration"], recent.runs.map((r) =>
      el("tr", { "data-run": r.id }, el("td", {}, el("a", { href: `#/run/${encodeURIComponent(r.id)}` }, r.id.split(":").pop())),
        el("td", {}, badge(r.status)), el("td", {}, when(r.started_at || r.created_at)), el("td", {}, duration(r.started_at, r.finished_at)))),
      "No runs yet."),
    wf.source !== undefined ? el("section", {}, el("h2", {}, "Source"), el("pre", { class: "json source", id: "workflow-source", tabindex: "0" }, wf.source)) : "");
}
