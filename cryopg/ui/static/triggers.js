// Definitions and triggers: stored workflows (kind, source, jobs, recent runs, start with
// an input), schedules (next fire, pause/resume), webhooks (URL, deliveries) and event
// handlers. Buttons follow the API's roles: Members start and pause, Viewers look.
import { api, projectPath } from "./api.js";
import { el, json } from "./dom.js";
import { S } from "./session.js";
import { badge } from "./status.js";
import { duration, when } from "./time.js";
import { inputForm } from "./start.js";

const table = (id, heads, rows, empty) => rows.length
  ? el("div", { class: "scroll-x" }, el("table", { id },
      el("thead", {}, el("tr", {}, heads.map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows)))
  : el("p", { class: "muted", id }, empty);
const wfLink = (name) => name ? el("a", { href: `#/workflows/${encodeURIComponent(name)}` }, name) : "—";

export async function workflowsPage(main, ctl) {
  const { workflows } = await api(projectPath("/workflows"), { signal: ctl.signal });
  main.replaceChildren(el("h1", {}, "Workflows"), S.canAct ? el("p", {}, el("a", { href: "#/workflows/new", id: "new-graph" }, "New graph on the canvas")) : "", table("workflows", ["Name", "Kind", "File", "Triggers", "Updated"],
    workflows.map((w) => el("tr", { "data-workflow": w.name }, el("td", {}, wfLink(w.name)),
      el("td", {}, w.kind + (w.pipeline ? ` (${w.pipeline})` : "")), el("td", {}, w.filename),
      el("td", {}, [w.schedules ? `${w.schedules} schedule(s)` : "", w.webhooks ? `${w.webhooks} webhook(s)` : "",
                    w.handlers ? `${w.handlers} handler(s)` : ""].filter(Boolean).join(", ") || "—"),
      el("td", {}, when(w.updated_at)))), "No stored workflows (cryopg workflow put NAME FILE)."));
}

export async function workflowPage(main, name, ctl) {
  const path = projectPath(`/workflows/${encodeURIComponent(name)}`);
  const [wf, recent] = await Promise.all([
    api(path + (S.canAct ? "?source=1" : ""), { signal: ctl.signal }),
    api(projectPath(`/runs?workflow=${encodeURIComponent(name)}&limit=10`), { signal: ctl.signal })]);
  const word = wf.kind === "pipeline" ? "Jobs" : "Nodes";
  main.replaceChildren(el("h1", {}, name, " ", el("span", { class: "muted" }, wf.kind + (wf.pipeline ? ` ${wf.pipeline}` : ""))),
    el("div", { class: "kv" }, ["file", wf.filename, "interpreter", wf.interpreter || "by extension", "directory", wf.workdir || "—",
      "on", wf.on ? json(wf.on) : "—"].map((x, i) => el("span", { class: i % 2 ? "" : "muted" }, x))),
    S.canAct ? inputForm(name, wf) : "",
    wf.kind !== "script" ? el("p", {}, el("a", { href: `#/workflows/${encodeURIComponent(name)}/edit`, id: "open-canvas" }, wf.kind === "pipeline" ? "View on the canvas" : "Edit on the canvas")) : "",
    wf.nodes ? el("section", {}, el("h2", {}, word), el("ul", { id: "workflow-nodes" }, wf.nodes.map((n) =>
      el("li", {}, el("strong", {}, n.id), ` (${n.type})`, n.needs.length ? el("span", { class: "muted" }, ` needs ${n.needs.join(", ")}`) : "")))) : "",
    el("h2", {}, "Recent runs"), table("workflow-runs", ["Run", "Status", "Started", "Duration"], recent.runs.map((r) =>
      el("tr", { "data-run": r.id }, el("td", {}, el("a", { href: `#/run/${encodeURIComponent(r.id)}` }, r.id.split(":").pop())),
        el("td", {}, badge(r.status)), el("td", {}, when(r.started_at || r.created_at)), el("td", {}, duration(r.started_at, r.finished_at)))),
      "No runs yet."),
    wf.source !== undefined ? el("section", {}, el("h2", {}, "Source"), el("pre", { class: "json source", id: "workflow-source", tabindex: "0" }, wf.source)) : "");
}

export async function schedulesPage(main, ctl) {
  const load = async () => {
    const { schedules } = await api(projectPath("/schedules"), { signal: ctl.signal });
    main.replaceChildren(el("h1", {}, "Schedules"), table("schedules",
      ["Name", "Workflow", "When", "Next fire", "Last run", ""],
      schedules.map((s) => el("tr", { "data-schedule": s.name }, el("td", {}, s.name), el("td", {}, wfLink(s.workflow)),
        el("td", {}, s.cron ? `${s.cron} (${s.timezone})` : `every ${s.every_seconds} s`),
        el("td", {}, s.paused ? el("span", { class: "badge s-parked" }, "paused") : when(s.next_fire_at)),
        el("td", {}, s.last_run_id ? el("a", { href: `#/run/${encodeURIComponent(s.last_run_id)}` }, when(s.last_fire_at)) : "—"),
        el("td", {}, S.canAct ? el("button", { class: "pause-resume", onclick: async () => {
          await api(projectPath(`/schedules/${encodeURIComponent(s.name)}/${s.paused ? "resume" : "pause"}`), { method: "POST", body: {} });
          load();
        } }, s.paused ? "Resume" : "Pause") : ""))), "No schedules."));
  };
  await load();
}

// What a stored delivery did, in words (cryo.deliver_webhook's outcomes).
const OUTCOMES = {
  started: "accepted: started a run",
  skipped: "accepted, no run: the workflow's if was false",
  ignored: "accepted, no run: the workflow's on.webhook leaves this event out",
  published: "accepted: published on the bus",
};

export async function webhooksPage(main, ctl) {
  const { webhooks } = await api(projectPath("/webhooks"), { signal: ctl.signal });
  const { deliveries } = await api(projectPath("/webhook-deliveries?limit=50"), { signal: ctl.signal });
  main.replaceChildren(el("h1", {}, "Webhooks"), table("webhooks", ["Name", "Workflow", "URL", "Deliveries", "Last delivery"],
    webhooks.map((w) => el("tr", { "data-webhook": w.name }, el("td", {}, w.name), el("td", {}, wfLink(w.workflow)),
      el("td", {}, el("code", { class: "url" }, location.origin + w.path)), el("td", {}, String(w.deliveries ?? 0)),
      el("td", {}, when(w.last_delivery_at)))), "No webhooks."),
    el("h2", {}, "Recent deliveries"),
    table("webhook-deliveries", ["When", "Webhook", "Event", "Outcome", "Run or event"], deliveries.map((d) =>
      el("tr", { "data-outcome": d.outcome || "" }, el("td", {}, when(d.created_at)), el("td", {}, d.webhook),
        el("td", {}, d.event), el("td", { class: "outcome" }, OUTCOMES[d.outcome] || d.outcome || "being delivered"),
        el("td", {}, d.run_id ? el("a", { href: `#/run/${encodeURIComponent(d.run_id)}` }, d.run_id.split(":").pop())
          : d.event_id ? `event ${d.event_id}` : "—"))),
      "No deliveries yet."),
    el("p", { class: "muted" }, "A delivery without a valid signature is refused (401) and not recorded."));
}

export async function handlersPage(main, ctl) {
  const { handlers } = await api(projectPath("/handlers"), { signal: ctl.signal });
  main.replaceChildren(el("h1", {}, "Event handlers"), table("handlers", ["Name", "Event", "Workflow", "Registered by", "Since"],
    handlers.map((h) => el("tr", {}, el("td", {}, h.name), el("td", {}, h.event), el("td", {}, wfLink(h.workflow)),
      el("td", {}, h.registered_by || "—"), el("td", {}, when(h.created_at)))), "No handlers."));
}
