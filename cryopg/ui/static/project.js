// Project pages: the event bus, secret names (Admins), members.
import { api, orgPath, projectPath } from "./api.js";
import { el } from "./dom.js";
import { when } from "./time.js";

const table = (id, heads, rows) => el("div", { class: "scroll-x" }, el("table", { id },
  el("thead", {}, el("tr", {}, heads.map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows)));

export async function eventsPage(main, ctl) {
  const { events } = await api(projectPath("/events?limit=100"), { signal: ctl.signal });
  main.replaceChildren(el("h1", {}, "Event bus"), table("events", ["When", "Name", "Payload", "From run"],
    events.map((e) => el("tr", {}, el("td", {}, when(e.created_at)), el("td", {}, e.name),
      el("td", {}, el("pre", { class: "json" }, JSON.stringify(e.payload))),
      el("td", {}, e.emitted_by_run ? el("a", { href: `#/run/${encodeURIComponent(e.emitted_by_run)}` }, e.emitted_by_run) : "")))));
}

export async function secretsPage(main, ctl) {
  const { secrets } = await api(projectPath("/secrets"), { signal: ctl.signal });
  main.replaceChildren(el("h1", {}, "Secrets"), el("p", { class: "muted" }, "Names only: a value never leaves the server."),
    table("secrets", ["Name", "Updated"], secrets.map((s) => el("tr", {}, el("td", {}, s.name), el("td", {}, when(s.updated_at))))));
}

export async function membersPage(main, ctl) {
  const { members } = await api(orgPath("/members"), { signal: ctl.signal });
  main.replaceChildren(el("h1", {}, "Members"), table("members", ["Login", "Role", "Since"],
    members.map((m) => el("tr", {}, el("td", {}, m.login), el("td", {}, m.role), el("td", {}, when(m.created_at))))));
}
