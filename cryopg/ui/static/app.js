// cryopg web UI: framework-free, no build step. Every read goes through the public HTTP
// API with the user's token; live views read server-sent events from the server, which
// turns LISTEN/NOTIFY into pushes. Text from runs (names, logs, annotations, cell
// values) only ever reaches the page as text nodes, or through md() which escapes first.
"use strict";

const LOG_WINDOW = 512 * 1024;      // characters of log kept on the page
const LOG_TAIL_BYTES = 256 * 1024;  // bytes of a stored log fetched on open
const PAGE = 50;

// -- session ----------------------------------------------------------------------------

const S = {
  get token() { return sessionStorage.getItem("cryo.token"); },
  get org() { return sessionStorage.getItem("cryo.org") || "dev"; },
  get project() { return sessionStorage.getItem("cryo.project") || "default"; },
  save(token, org, project) {
    sessionStorage.setItem("cryo.token", token);
    sessionStorage.setItem("cryo.org", org);
    sessionStorage.setItem("cryo.project", project);
  },
  clear() { sessionStorage.removeItem("cryo.token"); },
  // Signed in through the OIDC issuer: the browser holds an HttpOnly session cookie the
  // page never sees; the page holds the anti-forgery value every change must carry.
  cookie: null,  // { org, login, role, csrf } while such a session is open
  get signedIn() { return Boolean(this.token || this.cookie); },
};

// Asks the server whether this browser's cookie signs somebody in (never with a token).
async function loadCookieSession() {
  S.cookie = null;
  try {
    const r = await fetch("/api/v1/auth/session", { credentials: "same-origin" });
    if (r.ok) S.cookie = await r.json();
  } catch (_) { S.cookie = null; }
  if (S.cookie && S.cookie.org !== S.org) {
    sessionStorage.setItem("cryo.org", S.cookie.org);
    sessionStorage.setItem("cryo.project", "default");
  }
}

function authHeaders(method) {
  if (S.token) return { Authorization: `Bearer ${S.token}` };
  if (S.cookie && !["GET", "HEAD"].includes(method)) return { "X-Cryo-CSRF": S.cookie.csrf };
  return {};
}

async function signOut() {
  if (S.cookie) {
    try {
      await fetch("/api/v1/auth/logout", { method: "POST", credentials: "same-origin",
                                           headers: { "X-Cryo-CSRF": S.cookie.csrf } });
    } catch (_) { /* the page forgets the session either way */ }
    S.cookie = null;
  }
  S.clear(); me = null; location.hash = "#/login";
}

// `cryopg dev` prints a link whose fragment carries a dev login (#login=TOKEN&org=..&project=..):
// the fragment never reaches the server's logs; it is taken and removed from the URL at
// once, whatever happens next. Such a link may come from anybody (login CSRF: a link that
// silently signs you in as its sender, whose project then sees what you type): while a
// session is open, a link with another token only replaces it when the user says so in
// the page, which names the login the link would sign in as; keeping is the default.
async function takeFragmentLogin() {
  const h = location.hash.replace(/^#/, "");
  if (!h.startsWith("login=")) return;
  history.replaceState(null, "", location.pathname + "#/runs");
  const p = new URLSearchParams(h);
  const token = p.get("login") || "", org = p.get("org") || "dev", project = p.get("project") || "default";
  if (!token) return;
  if (!S.token && !S.cookie) await loadCookieSession();
  if ((S.token && S.token !== token) || (!S.token && S.cookie)) {
    let login = null;
    try {
      const r = await fetch(`/api/v1/orgs/${encodeURIComponent(org)}/me`,
                            { headers: { Authorization: `Bearer ${token}` } });
      if (r.ok) login = (await r.json()).login;
    } catch (_) { login = null; }
    if (!login) return;  // the link's login does not work: nothing to switch to
    if (!me) {
      try { me = await api(`/api/v1/orgs/${encodeURIComponent(S.org)}/me`, { signingIn: true }); }
      catch (_) { me = null; }
    }
    const now = me ? `${me.login} in ${S.org}/${S.project}` : `${S.org}/${S.project}`;
    if (!await askSwitch(`A link asks to sign you in as ${login} in ${org}/${project}, ` +
                         `replacing your session (${now}). Anyone can send such a link.`)) return;
  }
  S.save(token, org, project);
  me = null;
}

// The in-page question before a link replaces the session; resolves true only on
// "Switch". Escape, and Enter on the focused default, keep the session.
function askSwitch(text) {
  return new Promise((resolve) => {
    const keep = el("button", { id: "switch-keep", type: "button", autofocus: true }, "Keep my session");
    const go = el("button", { id: "switch-accept", type: "button" }, "Switch");
    const d = el("dialog", { id: "switch-login", "aria-labelledby": "switch-text" },
                 el("p", { id: "switch-text" }, text), keep, " ", go);
    const done = (v) => { d.close(); d.remove(); resolve(v); };
    keep.addEventListener("click", () => done(false));
    go.addEventListener("click", () => done(true));
    d.addEventListener("cancel", (e) => { e.preventDefault(); done(false); });
    document.body.append(d);
    d.showModal();
    keep.focus();
  });
}

// -- helpers ----------------------------------------------------------------------------

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}

// A small markdown subset for annotations. Everything is escaped first; only the markup
// below is turned back into tags, and links keep http(s) targets only.
function md(src) {
  const blocks = esc(src).split(/\n{2,}/);
  return blocks.map((b) => {
    const inline = (t) => t
      .replace(/`([^`]+)`/g, "<code>$1</code>")
      .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[^*])\*([^*]+)\*/g, "$1<em>$2</em>")
      .replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g,
               '<a href="$2" rel="noopener noreferrer" target="_blank">$1</a>');
    const h = /^(#{1,3}) (.*)$/.exec(b);
    if (h) return `<h4>${inline(h[2])}</h4>`;
    if (/^[-*] /m.test(b) && b.split("\n").every((l) => /^[-*] /.test(l))) {
      return "<ul>" + b.split("\n").map((l) => `<li>${inline(l.slice(2))}</li>`).join("") + "</ul>";
    }
    return `<p>${inline(b).replace(/\n/g, "<br>")}</p>`;
  }).join("");
}

const ANSI_RE = /\x1b\[([0-9;]*)m/g;
// ANSI SGR colours to spans; other escape sequences are dropped. Returns a fragment of
// text nodes inside spans, never markup from the log.
function ansi(text, state) {
  const frag = document.createDocumentFragment();
  let last = 0;
  const push = (t) => {
    if (!t) return;
    t = t.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "").replace(/\r(?!\n)/g, "");
    if (!state.fg && !state.bold) { frag.append(document.createTextNode(t)); return; }
    const s = document.createElement("span");
    s.className = [state.fg ? "ansi-" + state.fg : "", state.bold ? "ansi-bold" : ""].join(" ");
    s.textContent = t;
    frag.append(s);
  };
  for (const m of text.matchAll(ANSI_RE)) {
    push(text.slice(last, m.index));
    for (const c of (m[1] || "0").split(";").map(Number)) {
      if (c === 0) { state.fg = null; state.bold = false; }
      else if (c === 1) state.bold = true;
      else if (c === 22) state.bold = false;
      else if (c >= 30 && c <= 37) state.fg = c;
      else if (c >= 90 && c <= 97) state.fg = c - 60;
      else if (c === 39) state.fg = null;
    }
    last = m.index + m[0].length;
  }
  push(text.slice(last));
  return frag;
}

function fmtTime(iso) { return iso ? new Date(iso).toLocaleString() : ""; }
function fmtDur(a, b) {
  if (!a) return "";
  const ms = (b ? new Date(b) : new Date()) - new Date(a);
  if (ms < 1000) return `${Math.max(ms, 0)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} m ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} m`;
}
function badge(status) { return el("span", { class: `badge s-${status}` }, status); }

function substate(r) {
  const until = r.wake_at ? ` until ${fmtTime(r.wake_at)}` : "";
  if (r.status === "parked") {
    if (r.substate === "sleeping") return `sleeping${until}`;
    if (r.substate === "retry-backoff") return `retrying${r.wake_at ? " at " + fmtTime(r.wake_at) : ""}`;
    return (r.substate || "").replace(/-/g, " ") + (r.substate === "awaiting-event" ? until : "");
  }
  if (r.status === "queued") return r.queue_position ? `awaiting lease, position ${r.queue_position}` : "awaiting lease";
  return r.substate || "";
}

// -- API --------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

function projectPath(rest) {
  return `/api/v1/orgs/${encodeURIComponent(S.org)}/projects/${encodeURIComponent(S.project)}${rest}`;
}

async function api(path, opts = {}) {
  const method = opts.method || "GET";
  const headers = authHeaders(method);
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, credentials: "same-origin",
    body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined, signal: opts.signal });
  let body = null;
  try { body = await r.json(); } catch (_) { body = null; }
  if (!r.ok) {
    const e = (body && body.error) || {};
    if (r.status === 401 && !opts.signingIn) { S.clear(); S.cookie = null; me = null; route(); }
    throw new ApiError(r.status, e.code || "http", e.message || `HTTP ${r.status}`);
  }
  return body;
}

// Server-sent events over fetch (EventSource cannot send an Authorization header).
// Calls onEvent(name, data) per event; resolves when the stream ends or is aborted.
async function sse(path, onEvent, signal) {
  const r = await fetch(path, { headers: { ...authHeaders("GET"), Accept: "text/event-stream" },
                                credentials: "same-origin", signal });
  if (!r.ok) throw new ApiError(r.status, "http", `stream: HTTP ${r.status}`);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const raw = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let name = "message";
      const data = [];
      for (const line of raw.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}

// Keeps one live stream open, reconnecting after a drop (with a pause).
function liveStream(path, onEvent, ctl) {
  (async () => {
    while (!ctl.signal.aborted) {
      try { await sse(path, onEvent, ctl.signal); } catch (_) { /* retried below */ }
      if (ctl.signal.aborted) return;
      onEvent("reconnect", {});
      await new Promise((res) => setTimeout(res, 2000));
    }
  })();
}

// -- routing ----------------------------------------------------------------------------

let current = null;  // AbortController of the page on screen
let me = null;

function navLinks() {
  const nav = document.getElementById("nav");
  nav.replaceChildren();
  if (!S.signedIn) return;
  nav.append(el("a", { href: "#/runs" }, "Runs"), el("a", { href: "#/events" }, "Events"),
             el("a", { href: "#/secrets" }, "Secrets"), el("a", { href: "#/members" }, "Members"));
  document.getElementById("who").replaceChildren(
    `${S.org}/${S.project}${me ? ` · ${me.login} (${me.role})` : ""} `,
    el("button", { id: "sign-out", onclick: signOut }, "Sign out"));
}

async function route() {
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
  if (!S.signedIn) { document.getElementById("who").replaceChildren(); navLinks(); return loginPage(main); }
  if (!me) {
    try { me = await api(`/api/v1/orgs/${encodeURIComponent(S.org)}/me`, { signingIn: true }); }
    catch (e) {
      if (e.status === 401 || e.status === 404) { S.clear(); S.cookie = null; return loginPage(main, e.message); }
    }
    if (ctl !== current) return;  // another navigation took over while we asked
  }
  navLinks();
  const parts = (path || "/runs").split("/").filter(Boolean);
  try {
    if (parts[0] === "run" && parts[1]) return await runPage(main, decodeURIComponent(parts[1]), ctl);
    if (parts[0] === "events") return await eventsPage(main, ctl);
    if (parts[0] === "secrets") return await secretsPage(main, ctl);
    if (parts[0] === "members") return await membersPage(main, ctl);
    return await runsPage(main, q, ctl);
  } catch (e) {
    if (e.name === "AbortError") return;
    main.replaceChildren(el("h1", {}, e.status === 404 ? "Not found" : "Error"),
                         el("p", { class: "error", id: "page-error" }, e.message));
  }
}

function loginPage(main, err) {
  const token = el("input", { id: "login-token", type: "password", autocomplete: "off" });
  const org = el("input", { id: "login-org", value: S.org });
  const project = el("input", { id: "login-project", value: S.project });
  const msg = el("p", { class: "error", id: "login-error" }, err || "");
  main.replaceChildren(el("h1", {}, "Sign in"), el("form", {
    class: "card",
    onsubmit: async (ev) => {
      ev.preventDefault();
      S.save(token.value.trim(), org.value.trim(), project.value.trim());
      me = null;
      try { me = await api(`/api/v1/orgs/${encodeURIComponent(S.org)}/me`, { signingIn: true }); }
      catch (e) { S.clear(); msg.textContent = e.message; return; }
      location.hash = "#/runs";
      route();
    },
  }, el("label", {}, "API token", token), el("label", {}, "Organisation", org),
     el("label", {}, "Project", project), el("button", { type: "submit", id: "login-submit" }, "Sign in"),
     msg));
  offerIssuerSignIn(main, org, project);
}

// With an OIDC issuer configured, people sign in there: the server starts the sign-in
// and sets the session cookie when the issuer sends the browser back.
async function offerIssuerSignIn(main, org, project) {
  let cfg = null;
  try { cfg = await (await fetch("/api/v1/auth/config")).json(); } catch (_) { cfg = null; }
  if (!cfg || !cfg.oidc) return;
  const go = el("button", { type: "button", id: "sign-in-oidc", onclick: () => {
    const o = org.value.trim() || "dev";
    sessionStorage.setItem("cryo.org", o);
    sessionStorage.setItem("cryo.project", project.value.trim() || "default");
    location.href = `/api/v1/auth/oidc/login?org=${encodeURIComponent(o)}`;
  } }, "Sign in with your identity provider");
  main.insertBefore(el("div", { class: "card", id: "oidc-card" }, go,
    el("p", { class: "muted" }, `Through ${cfg.oidc.issuer}, into the organisation below. ` +
      "Or sign in with an API token.")), main.children[1] || null);
}

// -- runs list --------------------------------------------------------------------------

async function runsPage(main, q, ctl) {
  const status = q.get("status") || "", workflow = q.get("workflow") || "";
  const before = q.get("before") || "";
  const statusSel = el("select", { id: "filter-status" },
    ["", "queued", "pending", "running", "parked", "succeeded", "failed", "cancelled"].map(
      (s) => el("option", { value: s, selected: s === status }, s || "any status")));
  const wfInput = el("input", { id: "filter-workflow", placeholder: "workflow", value: workflow });
  const apply = () => {
    const p = new URLSearchParams();
    if (statusSel.value) p.set("status", statusSel.value);
    if (wfInput.value.trim()) p.set("workflow", wfInput.value.trim());
    location.hash = "#/runs" + (p.toString() ? "?" + p : "");
  };
  statusSel.addEventListener("change", apply);
  wfInput.addEventListener("change", apply);
  const tbody = el("tbody", { id: "runs-body" });
  const pager = el("div", { class: "pager" });
  const live = el("span", { class: "muted", id: "live-state" }, "connecting…");
  main.replaceChildren(el("h1", {}, "Runs"),
    el("div", { class: "filters" }, statusSel, wfInput, live),
    el("table", { id: "runs" }, el("thead", {}, el("tr", {},
      ["Run", "Status", "Workflow", "Trigger", "Started", "Duration"].map((h) => el("th", {}, h)))),
      tbody), pager);
  const expanded = new Set();

  function row(r, child) {
    const tr = el("tr", { class: child ? "child" : "", "data-run": r.id },
      el("td", {}, r.children > 0 ? el("button", { class: "expand", title: "children",
        onclick: () => { expanded.has(r.id) ? expanded.delete(r.id) : expanded.add(r.id); load(); } },
        expanded.has(r.id) ? "▾" : "▸") : "",
        " ", el("a", { href: `#/run/${encodeURIComponent(r.id)}` }, r.id.split(":").pop())),
      el("td", {}, badge(r.status), " ", el("span", { class: "muted substate" }, substate(r))),
      el("td", { class: "workflow" }, r.workflow || r.filename),
      el("td", {}, r.trigger || "manual"),
      el("td", {}, fmtTime(r.started_at)),
      el("td", {}, fmtDur(r.started_at, r.finished_at)));
    return tr;
  }

  async function load() {
    const p = new URLSearchParams({ top: "1", limit: String(PAGE) });
    if (status) p.set("status", status);
    if (workflow) p.set("workflow", workflow);
    if (before) p.set("before", before);
    const page = await api(projectPath(`/runs?${p}`), { signal: ctl.signal });
    const rows = [];
    for (const r of page.runs) {
      rows.push(row(r, false));
      if (expanded.has(r.id)) {
        const kids = await api(projectPath(`/runs?parent=${encodeURIComponent(r.id)}&limit=200`),
                               { signal: ctl.signal });
        for (const k of kids.runs) rows.push(row(k, true));
      }
    }
    tbody.replaceChildren(...rows);
    if (!rows.length) tbody.append(el("tr", {}, el("td", { colspan: 6, class: "muted" }, "No runs.")));
    pager.replaceChildren(
      before ? el("a", { href: "#/runs" + (status || workflow ? "?" + new URLSearchParams(
        Object.fromEntries(Object.entries({ status, workflow }).filter(([, v]) => v))) : "") }, "« newest") : "",
      page.next ? el("a", { id: "next-page", href: `#/runs?${new URLSearchParams({
        ...(status ? { status } : {}), ...(workflow ? { workflow } : {}), before: page.next })}` }, "older »") : "");
  }
  await load();
  // Live: the server pushes a hint when a run of the project changes; the page re-reads
  // its own (bounded) page, at most every half second.
  let pending = null;
  liveStream(projectPath("/stream"), (name) => {
    if (name === "hello") live.textContent = "live";
    if (name === "reconnect") live.textContent = "reconnecting…";
    if (name === "changed" && !pending) {
      pending = setTimeout(() => { pending = null; load().catch(() => {}); }, 300);
    }
  }, ctl);
}

// -- run page ---------------------------------------------------------------------------

async function runPage(main, runId, ctl) {
  const base = projectPath(`/runs/${encodeURIComponent(runId)}`);
  const header = el("section", { id: "run-header" });
  const strip = el("section", { id: "pipeline" });
  const checkpoints = el("ol", { class: "checkpoints", id: "checkpoints" });
  const timeline = el("ol", { class: "timeline", id: "timeline" });
  const logInfo = el("p", { class: "muted", id: "log-info" });
  const log = el("pre", { id: "log" });
  const state = el("section", { id: "state" });
  const children = el("section", { id: "children" });
  main.replaceChildren(header, strip,
    el("h2", {}, "Checkpoints"), checkpoints, el("h2", {}, "Timeline"), timeline,
    el("h2", {}, "Log"), logInfo, log, el("h2", {}, "State"), state, children);

  let run = await api(base, { signal: ctl.signal });
  const canAct = me && me.role !== "viewer";

  let actionsEl = null;  // built once, so a live re-render never wipes what is being typed
  function renderHeader() {
    if (!canAct || run.finished) actionsEl = null;
    else if (!actionsEl) actionsEl = el("div", { class: "filters" }, buildActions());
    header.replaceChildren(...headerTop(), actionsEl || "");
    renderGraph();
  }

  function buildActions() {
    const actions = [];
    actions.push(el("button", { class: "danger", id: "cancel", onclick: async () => {
      if (!confirm("Cancel this run?")) return;
      await api(`${base}/cancel`, { method: "POST", body: {} });
      refresh();
    } }, "Cancel"));
    const sigName = el("input", { id: "signal-name", placeholder: "signal name" });
    const sigPayload = el("input", { id: "signal-payload", placeholder: "payload (JSON)" });
    const sigMsg = el("span", { class: "error", id: "signal-error" });
    actions.push(el("form", { id: "signal-form", onsubmit: async (ev) => {
      ev.preventDefault();
      sigMsg.textContent = "";
      let payload = null;
      if (sigPayload.value.trim()) {
        try { payload = JSON.parse(sigPayload.value); } catch (_) { sigMsg.textContent = "payload is not JSON"; return; }
      }
      try {
        await api(`${base}/signal/${encodeURIComponent(sigName.value.trim())}`, { method: "POST", body: { payload } });
        sigName.value = ""; sigPayload.value = "";
      } catch (e) { sigMsg.textContent = e.message; }
    } }, sigName, sigPayload, el("button", { type: "submit" }, "Send signal"), sigMsg));
    return actions;
  }

  function headerTop() {
    return [
      el("h1", {}, run.workflow || run.filename, " ", el("span", { class: "muted" }, run.id)),
      el("div", { class: "kv" }, ...[
        "status", el("span", { id: "run-status" }, badge(run.status), " ", el("span", { class: "muted" }, substate(run))),
        "attempt", String(run.attempt),
        "trigger", run.parent_run_id ? el("a", { href: `#/run/${encodeURIComponent(run.parent_run_id)}` }, `parent ${run.parent_run_id}`) : "manual",
        "started", run.started_at ? `${fmtTime(run.started_at)}  (${fmtDur(run.started_at, run.finished_at)})` : "not yet",
        "input", el("pre", { class: "json", id: "run-input" }, JSON.stringify(run.input ?? null, null, 1)),
        "outputs", el("pre", { class: "json", id: "run-outputs" }, JSON.stringify(run.outputs || {}, null, 1)),
        run.error ? "error" : null, run.error ? el("span", { class: "error" }, run.error) : null,
      ].filter((x) => x !== null).map((x, i) => el("span", { class: i % 2 ? "" : "muted" }, x)))];
  }

  const openForms = {};
  function renderGraph() {
    if (run.kind !== "graph" || !run.graph) { strip.replaceChildren(); return; }
    const nodes = run.graph.nodes || [], edges = run.graph.edges || [];
    // Order nodes by their depth along the edges, so the strip reads left to right.
    const depth = Object.fromEntries(nodes.map((n) => [n.id, 0]));
    for (let i = 0; i < nodes.length; i++) {
      for (const e of edges) if (depth[e.to] !== undefined && depth[e.from] !== undefined) {
        depth[e.to] = Math.max(depth[e.to], depth[e.from] + 1);
      }
    }
    const ordered = [...nodes].sort((a, b) => depth[a.id] - depth[b.id]);
    const detail = el("div", { id: "node-detail" });
    const items = [];
    ordered.forEach((n, i) => {
      if (i) items.push(el("span", { class: "arrow" }, depth[n.id] > depth[ordered[i - 1].id] ? "→" : "·"));
      items.push(el("button", { class: `node s-${n.status}`, "data-node": n.id, title: `${n.type} · ${n.status}`,
        onclick: () => detail.replaceChildren(el("h2", {}, `Node ${n.id}`),
          el("p", {}, `${n.type} · ${n.status} · attempt ${n.attempt ?? 0}`),
          el("pre", { class: "json", id: "node-output" }, JSON.stringify(n.output ?? null, null, 1))) },
        n.id));
    });
    // A form being filled in survives live re-renders; it goes when its node stops waiting.
    const waiting = nodes.filter((n) => n.status === "waiting" && n.approval);
    for (const id of Object.keys(openForms)) {
      if (!waiting.some((n) => n.id === id)) delete openForms[id];
    }
    const forms = waiting.map((n) => openForms[n.id] || (openForms[n.id] = approvalForm(n)));
    strip.replaceChildren(el("h2", {}, "Pipeline"), el("div", { class: "strip", id: "strip" }, items),
                          edges.length ? el("p", { class: "muted" }, edges.map((e) => `${e.from} → ${e.to}`).join(", ")) : "",
                          ...forms, detail);
  }

  // The inline approval form, generated from the node's JSON Schema (an object of
  // properties); checked here first, and the server checks again.
  function approvalForm(node) {
    const schema = node.approval.fields || {};
    const props = schema.properties || {};
    const required = new Set(schema.required || []);
    const inputs = {};
    const msg = el("p", { class: "error", id: `approval-error-${node.id}` });
    const fields = Object.entries(props).map(([name, spec]) => {
      let input;
      if (spec.type === "boolean") input = el("input", { type: "checkbox", name });
      else if (Array.isArray(spec.enum)) input = el("select", { name }, ["", ...spec.enum].map((v) => el("option", { value: v }, v)));
      else input = el("input", { name, type: spec.type === "number" || spec.type === "integer" ? "number" : "text" });
      inputs[name] = [input, spec];
      return el("label", {}, `${spec.title || name}${required.has(name) ? " *" : ""}`, input,
                spec.description ? el("span", { class: "muted" }, spec.description) : "");
    });
    function collect() {
      const out = {};
      for (const [name, [input, spec]] of Object.entries(inputs)) {
        if (spec.type === "boolean") { out[name] = input.checked; continue; }
        const v = input.value;
        if (v === "") { if (required.has(name)) throw new Error(`${name} is required`); continue; }
        if (spec.type === "integer" || spec.type === "number") {
          const n = Number(v);
          if (!Number.isFinite(n) || (spec.type === "integer" && !Number.isInteger(n))) throw new Error(`${name} must be ${spec.type === "integer" ? "an integer" : "a number"}`);
          if (spec.minimum !== undefined && n < spec.minimum) throw new Error(`${name} must be at least ${spec.minimum}`);
          if (spec.maximum !== undefined && n > spec.maximum) throw new Error(`${name} must be at most ${spec.maximum}`);
          out[name] = n;
        } else {
          if (spec.minLength !== undefined && v.length < spec.minLength) throw new Error(`${name} must be at least ${spec.minLength} characters`);
          if (spec.maxLength !== undefined && v.length > spec.maxLength) throw new Error(`${name} must be at most ${spec.maxLength} characters`);
          if (spec.pattern && !new RegExp(spec.pattern).test(v)) throw new Error(`${name} does not match ${spec.pattern}`);
          out[name] = v;
        }
      }
      return out;
    }
    return el("form", { class: "approval", id: `approval-${node.id}`, onsubmit: async (ev) => {
      ev.preventDefault();
      msg.textContent = "";
      let answer;
      try { answer = collect(); } catch (e) { msg.textContent = e.message; return; }
      try {
        await api(`${base}/approvals/${encodeURIComponent(node.id)}`, { method: "POST", body: answer });
        msg.className = "muted"; msg.textContent = "approved";
        refresh();
      } catch (e) { msg.className = "error"; msg.textContent = e.message; }
    } }, el("strong", {}, `Approval: ${node.id}`), fields,
       canAct ? el("button", { type: "submit" }, "Approve") : el("span", { class: "muted" }, "members can approve"), msg);
  }

  async function renderCheckpoints() {
    const { checkpoints: cps } = await api(`${base}/checkpoints`, { signal: ctl.signal });
    checkpoints.replaceChildren(...cps.map((c) => {
      const running = c.status === "pending" && c.family === "step" && run.status === "running";
      const st = c.status === "done" ? (c.exit_code ? "failed" : "succeeded") : running ? "running" : "waiting";
      return el("li", { "data-seq": c.seq, "data-status": st, class: "checkpoint" }, badge(st), " ",
        el("strong", {}, c.family), " ", c.name, c.ordinal ? ` #${c.ordinal}` : "",
        c.label ? el("span", { class: "muted" }, ` ${c.label}`) : "",
        el("span", { class: "muted" }, `  ${fmtTime(c.created_at)} · ${fmtDur(c.created_at, c.completed_at)}`),
        c.due_at ? el("span", { class: "muted" }, ` · due ${fmtTime(c.due_at)}`) : "");
    }));
    if (!cps.length) checkpoints.append(el("li", { class: "muted" }, "no durable calls yet"));
  }

  function renderTimeline() {
    const hist = run.history || [];
    timeline.replaceChildren(...hist.map((h, i) => {
      const next = hist[i + 1];
      const what = h.family ? `${h.family} ${h.name || ""}${h.ordinal ? " #" + h.ordinal : ""}` : "";
      const li = el("li", { class: `ev ev-${h.kind}`, "data-kind": h.kind },
        el("span", { class: "muted" }, fmtTime(h.at)), el("strong", {}, h.kind.replace(/_/g, " ")),
        el("span", {}, what, h.attempt ? el("span", { class: "muted" }, ` attempt ${h.attempt}`) : ""),
        el("span", { class: "muted" }, next ? fmtDur(h.at, next.at) : ""));
      if (h.kind === "annotation" && h.text !== undefined) {
        const note = el("div", { class: "note" });
        note.innerHTML = md(h.text);  // md() escapes before it adds any markup
        li.append(note);
      }
      return li;
    }));
  }

  async function renderState() {
    try {
      const { cells } = await api(`${base}/state`, { signal: ctl.signal });
      state.replaceChildren(cells.length ? el("table", { id: "state-cells" },
        el("thead", {}, el("tr", {}, el("th", {}, "Key"), el("th", {}, "Value"), el("th", {}, "Version"))),
        el("tbody", {}, cells.map((c) => el("tr", {}, el("td", {}, c.key),
          el("td", {}, el("pre", { class: "json" }, JSON.stringify(c.value, null, 1))), el("td", {}, String(c.version))))))
        : el("p", { class: "muted" }, "No cells."));
    } catch (e) { state.replaceChildren(el("p", { class: "error" }, e.message)); }
    if (canAct) {  // entity cells are for Members and up
      try {
        const { cells } = await api(`${base}/entity-state`, { signal: ctl.signal });
        if (cells.length) {
          state.append(el("h3", {}, "Entity cells this run created or wrote last"),
            el("table", { id: "entity-cells" },
              el("thead", {}, el("tr", {}, ["Entity", "Key", "Value", "Version"].map((h) => el("th", {}, h)))),
              el("tbody", {}, cells.map((c) => el("tr", {}, el("td", {}, c.entity), el("td", {}, c.key),
                el("td", {}, el("pre", { class: "json" }, JSON.stringify(c.value, null, 1))),
                el("td", {}, String(c.version)))))));
        }
      } catch (e) { state.append(el("p", { class: "error" }, e.message)); }
    }
    const kids = await api(projectPath(`/runs?parent=${encodeURIComponent(run.id)}&limit=200`), { signal: ctl.signal });
    children.replaceChildren(...(kids.runs.length ? [el("h2", {}, "Children"), el("ul", {}, kids.runs.map((k) =>
      el("li", {}, el("a", { href: `#/run/${encodeURIComponent(k.id)}` }, k.id), " ", badge(k.status))))] : []));
  }

  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      run = await api(base, { signal: ctl.signal });
      renderHeader(); renderTimeline();
      await renderCheckpoints(); await renderState();
    } catch (_) { /* the next push retries */ }
    busy = false;
    if (again) { again = false; refresh(); }
  }
  renderHeader(); renderTimeline();
  await renderCheckpoints(); await renderState();

  // The log: a tail window of the stored log, then live chunks. Only the newest
  // LOG_WINDOW characters stay on the page, so a huge log never freezes the tab.
  const ansiState = { fg: null, bold: false };
  let kept = 0;
  function appendLog(text) {
    const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 20;
    log.append(ansi(text, ansiState));
    kept += text.length;
    while (kept > LOG_WINDOW && log.firstChild) {
      kept -= log.firstChild.textContent.length;
      log.firstChild.remove();
    }
    if (stick) log.scrollTop = log.scrollHeight;
  }
  let after = 0;
  let pending = null;
  liveStream(`${base}/stream?tail=${LOG_TAIL_BYTES}`, (name, data) => {
    if (name === "tail") {
      log.replaceChildren(); kept = 0;
      logInfo.textContent = data.skipped_bytes > 0
        ? `showing the last ${Math.round((data.total_bytes - data.skipped_bytes) / 1024)} KiB of ${Math.round(data.total_bytes / 1024)} KiB` : "";
    } else if (name === "log") {
      if (data.id > after) { after = data.id; appendLog(data.text); }
    } else if (name === "changed" || name === "end") {
      if (!pending) pending = setTimeout(() => { pending = null; refresh(); }, 200);
    }
  }, ctl);
}

// -- project pages ----------------------------------------------------------------------

async function eventsPage(main, ctl) {
  const { events } = await api(projectPath("/events?limit=100"), { signal: ctl.signal });
  main.replaceChildren(el("h1", {}, "Event bus"), el("table", { id: "events" },
    el("thead", {}, el("tr", {}, ["When", "Name", "Payload", "From run"].map((h) => el("th", {}, h)))),
    el("tbody", {}, events.map((e) => el("tr", {}, el("td", {}, fmtTime(e.created_at)), el("td", {}, e.name),
      el("td", {}, el("pre", { class: "json" }, JSON.stringify(e.payload))),
      el("td", {}, e.emitted_by_run ? el("a", { href: `#/run/${encodeURIComponent(e.emitted_by_run)}` }, e.emitted_by_run) : ""))))));
}

async function secretsPage(main, ctl) {
  const { secrets } = await api(projectPath("/secrets"), { signal: ctl.signal });
  main.replaceChildren(el("h1", {}, "Secrets"), el("p", { class: "muted" }, "Names only: a value never leaves the server."),
    el("table", { id: "secrets" }, el("thead", {}, el("tr", {}, el("th", {}, "Name"), el("th", {}, "Updated"))),
      el("tbody", {}, secrets.map((s) => el("tr", {}, el("td", {}, s.name), el("td", {}, fmtTime(s.updated_at)))))));
}

async function membersPage(main, ctl) {
  const { members } = await api(`/api/v1/orgs/${encodeURIComponent(S.org)}/members`, { signal: ctl.signal });
  main.replaceChildren(el("h1", {}, "Members"), el("table", { id: "members" },
    el("thead", {}, el("tr", {}, el("th", {}, "Login"), el("th", {}, "Role"), el("th", {}, "Since"))),
    el("tbody", {}, members.map((m) => el("tr", {}, el("td", {}, m.login), el("td", {}, m.role), el("td", {}, fmtTime(m.created_at)))))));
}

window.addEventListener("hashchange", route);
route();
