// cryopg web UI: framework-free ES modules, no build step. Every read goes through the
// public HTTP API with the user's credentials; live views read server-sent events, which
// the server makes from LISTEN/NOTIFY. This module is the router: each page is a module
// exporting one async function (main, params, ctl), registered in PAGES below.
import { agentsPage } from "./agents.js";
import { api, hooks, orgPath } from "./api.js";
import { el } from "./dom.js";
import { loginPage, takeFragmentLogin } from "./login.js";
import { eventsPage, membersPage, secretsPage } from "./project.js";
import { connectionsPage } from "./connections.js";
import { runPage } from "./run/page.js";
import { runsPage } from "./runs.js";
import { editorPage } from "./editor/page.js";
import { S, loadCookieSession, signOut } from "./session.js";
import { handlersEditPage, schedulesEditPage, webhooksEditPage } from "./trigger_edit.js";
import { workflowDetailPage, workflowsListPage } from "./workflows.js";
// The code editor brings CodeMirror (~0.5 MB): loaded when that page is first opened.
const workflowEditPage = async (m, name, c) => (await import("./workflow_edit.js")).workflowEditPage(m, name, c);
import { wireTzSwitch } from "./time.js";

// First path segment -> page. `admin: true` pages are hidden from (and refused to) others,
// as the API refuses them.
const PAGES = {
  runs: { page: (m, p, q, c) => runsPage(m, q, c), nav: "Runs" },
  run: { page: (m, p, q, c) => runPage(m, p[0], c, q) },
  workflows: { page: (m, p, q, c) => (p[0] === "new" ? (q.get("as") === "file" ? workflowEditPage(m, null, c) : editorPage(m, null, c))
    : p[1] === "edit" ? editorPage(m, p[0], c) : p[1] === "code" ? workflowEditPage(m, p[0], c)
    : p[0] ? workflowDetailPage(m, p[0], c) : workflowsListPage(m, c)), nav: "Workflows" },
  schedules: { page: (m, p, q, c) => schedulesEditPage(m, c), nav: "Schedules" },
  webhooks: { page: (m, p, q, c) => webhooksEditPage(m, c), nav: "Webhooks" },
  handlers: { page: (m, p, q, c) => handlersEditPage(m, c), nav: "Handlers" },
  events: { page: (m, p, q, c) => eventsPage(m, c), nav: "Events" },
  secrets: { page: (m, p, q, c) => secretsPage(m, c), nav: "Secrets", admin: true },
  connections: { page: (m, p, q, c) => connectionsPage(m, c), nav: "Connections" },
  members: { page: (m, p, q, c) => membersPage(m, c), nav: "Members" },
  agents: { page: (m, p, q, c) => agentsPage(m, c), nav: "Agents" },
};

let current = null;  // AbortController of the page on screen

function navLinks(active) {
  const nav = document.getElementById("nav");
  nav.replaceChildren();
  if (!S.signedIn) return;
  for (const [key, p] of Object.entries(PAGES)) {
    if (!p.nav || (p.admin && !S.isAdmin)) continue;
    nav.append(el("a", { href: `#/${key}`, "aria-current": key === active ? "page" : null }, p.nav));
  }
  document.getElementById("who").replaceChildren(
    el("span", { class: "who-text" }, `${S.org}/${S.project}${S.me ? ` · ${S.me.login} (${S.me.role})` : ""}`),
    " ", el("button", { id: "sign-out", onclick: signOut }, "Sign out"));
}

function errorPage(main, e) {
  const unreachable = e.status === 0;
  main.replaceChildren(
    el("h1", {}, e.status === 404 ? "Not found" : unreachable ? "Server unreachable" : "Error"),
    el("p", { class: "error", id: "page-error" }, e.message),
    el("button", { id: "retry", onclick: () => route() }, "Retry"));
  if (unreachable) {  // comes back by itself once the server answers again
    const ctl = current;
    const again = setInterval(async () => {
      if (ctl !== current) { clearInterval(again); return; }
      try { await fetch("/api/v1/auth/config", { cache: "no-store" }); clearInterval(again); route(); }
      catch (_) { /* still down */ }
    }, 3000);
  }
}

export async function route() {
  if (current) current.abort();
  const ctl = current = new AbortController();
  await takeFragmentLogin();
  if (ctl !== current) return;  // another navigation took over while the user decided
  const main = document.getElementById("main");
  const [path, qs] = location.hash.replace(/^#/, "").split("?");
  const q = new URLSearchParams(qs || "");
  if (!S.token && !S.cookie) {
    await loadCookieSession();
    if (ctl !== current) return;
  }
  if (!S.signedIn) { document.getElementById("who").replaceChildren(); navLinks(); return loginPage(main, "", route); }
  if (!S.me) {
    try { S.me = await api(orgPath("/me"), { signingIn: true }); }
    catch (e) {
      if (e.status === 401 || e.status === 404) { S.clear(); S.cookie = null; return loginPage(main, e.message, route); }
      if (ctl === current) { navLinks(); return errorPage(main, e); }
    }
    if (ctl !== current) return;  // another navigation took over while we asked
  }
  const parts = (path || "/runs").split("/").filter(Boolean).map(decodeURIComponent);
  const key = parts[0] || "runs";
  navLinks(key === "run" ? "runs" : key);
  const entry = PAGES[key];
  try {
    if (!entry || (key === "run" && !parts[1])) {
      return errorPage(main, { status: 404, message: `There is no page ${location.hash}.` });
    }
    if (entry.admin && !S.isAdmin) {
      return errorPage(main, { status: 403, message: `${entry.nav} are for Admins and Owners.` });
    }
    document.title = `${entry.nav || "Run"} · cryopg`;
    return await entry.page(main, parts.slice(1), q, ctl);
  } catch (e) {
    if (e.name === "AbortError" || ctl !== current) return;
    errorPage(main, e);
  }
}

hooks.signedOut = route;
window.addEventListener("hashchange", route);
wireTzSwitch(route);  // UTC or local: the page is drawn again in the zone chosen
route();
