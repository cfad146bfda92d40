// The org's agents as the server sees them: state (idle, busy with which run, draining,
// gone), build, the replica each claims through, capabilities and last contact. Run
// changes arrive on the project's live stream; drains and departures are not runs, so
// the list is also re-read every few seconds while the page is open.
import { api, liveStream, orgPath, projectPath } from "./api.js";
import { el } from "./dom.js";
import { when } from "./time.js";

const REREAD_MS = 3000;

function stateCell(a) {
  const run = (a.state === "busy" || a.state === "draining") && a.claimed_run
    ? [" with ", el("a", { href: `#/run/${encodeURIComponent(a.claimed_run)}`, class: "agent-run" },
                  a.claimed_run.split(":").pop())]
    : [];
  return el("td", { class: "agent-state" }, el("span", { class: `badge a-${a.state}` }, a.state), ...run);
}

function row(a) {
  return el("tr", { "data-agent": a.id, "data-state": a.state },
    el("th", { scope: "row" }, a.id),
    stateCell(a),
    el("td", {}, a.build || "—"),
    el("td", { class: "replica" }, a.replica || "—"),
    el("td", {}, (a.capabilities || []).join(", ")),
    el("td", {}, when(a.last_contact_at || a.last_seen_at)));
}

export async function agentsPage(main, ctl) {
  const tbody = el("tbody", { id: "agents-body" });
  const note = el("p", { class: "muted", id: "agents-note", role: "status" });
  main.replaceChildren(el("h1", {}, "Agents"), note,
    el("div", { class: "scroll-x" }, el("table", { id: "agents" }, el("thead", {}, el("tr", {},
      ["Agent", "State", "Build", "Replica", "Capabilities", "Last contact"].map((h) => el("th", { scope: "col" }, h)))),
      tbody)));
  const load = async () => {
    const { agents } = await api(orgPath("/agents"), { signal: ctl.signal });
    tbody.replaceChildren(...agents.map(row));
    const live = agents.filter((a) => a.state === "idle" || a.state === "busy").length;
    note.textContent = `${agents.length} agent(s), ${live} live`;
  };
  await load();
  let pending = null;
  liveStream(projectPath("/stream"), (name) => {
    if (name === "changed" && !pending) {
      pending = setTimeout(() => { pending = null; load().catch(() => {}); }, 200);
    }
  }, ctl);
  const timer = setInterval(() => { if (!ctl.signal.aborted) load().catch(() => {}); }, REREAD_MS);
  ctl.signal.addEventListener("abort", () => clearInterval(timer));
}
