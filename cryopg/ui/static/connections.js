// Connections: the project's stored endpoints that connector nodes call by name. Everyone
// reads them (a base URL and a secret's NAME, never a value); Admins create and delete.
import { api, projectPath } from "./api.js";
import { el } from "./dom.js";
import { S } from "./session.js";
import { when } from "./time.js";

const path = (name) => projectPath(`/connections${name ? `/${encodeURIComponent(name)}` : ""}`);

function createForm(reload) {
  const field = (name, label, attrs = {}) => el("label", {}, label, " ", el("input", { name, ...attrs }));
  const auth = el("select", { name: "auth" }, ["none", "bearer", "basic", "header"].map((a) => el("option", { value: a }, a)));
  const err = el("p", { class: "error", role: "alert" });
  const form = el("form", { id: "connection-form" },
    el("h2", {}, "New connection"),
    field("name", "Name", { required: true, pattern: "[a-z0-9][a-z0-9_\\-]{0,62}" }),
    field("base_url", "Base URL", { required: true, placeholder: "https://api.github.com" }),
    el("label", {}, "Auth ", auth),
    field("secret", "Secret", { placeholder: "GITHUB_TOKEN" }),
    field("username", "User (basic)"),
    field("header", "Header (header auth)", { placeholder: "X-Api-Key" }),
    el("label", {}, "Default headers (one NAME: VALUE a line) ", el("textarea", { name: "headers", rows: 2 })),
    el("button", { type: "submit" }, "Create"), err);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const opt = (k) => (f.get(k) || "").trim() || null;
    const headers = {};
    for (const line of (f.get("headers") || "").split("\n")) {
      const i = line.indexOf(":");
      if (i > 0) headers[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    }
    try {
      await api(path(), { method: "POST", body: { name: opt("name"), base_url: opt("base_url"), auth: f.get("auth"),
        secret: opt("secret"), username: opt("username"), header: opt("header"), headers } });
      reload();
    } catch (e) { err.textContent = e.message; }
  });
  return form;
}

export async function connectionsPage(main, ctl) {
  const reload = () => connectionsPage(main, ctl);
  const { connections } = await api(path(), { signal: ctl.signal });
  const rows = connections.map((c) => el("tr", {}, el("td", {}, c.name), el("td", {}, c.base_url),
    el("td", {}, c.auth + (c.secret ? ` (${c.secret})` : "")), el("td", {}, when(c.updated_at)),
    S.isAdmin ? el("td", {}, el("button", { onclick: async () => { await api(path(c.name), { method: "DELETE" }); reload(); } }, "Delete")) : null));
  main.replaceChildren(el("h1", {}, "Connections"),
    el("p", { class: "muted" }, "A connector node names one of these; its credential is a project secret, given only to the agent making the request."),
    el("div", { class: "scroll-x" }, el("table", { id: "connections" },
      el("thead", {}, el("tr", {}, ["Name", "Base URL", "Auth", "Updated"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, rows))),
    S.isAdmin ? createForm(reload) : null);
}
