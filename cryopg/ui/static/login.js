// Signing in: the token form, the issuer's button, and the dev login link.
import { api, orgPath } from "./api.js";
import { el } from "./dom.js";
import { S, loadCookieSession } from "./session.js";

// `cryopg dev` prints a link whose fragment carries a dev login (#login=TOKEN&org=..&project=..):
// the fragment never reaches the server's logs; it is taken and removed from the URL at
// once, whatever happens next. Such a link may come from anybody (login CSRF: a link that
// silently signs you in as its sender, whose project then sees what you type): while a
// session is open, a link with another token only replaces it when the user says so in
// the page, which names the login the link would sign in as; keeping is the default.
export async function takeFragmentLogin() {
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
    if (!S.me) {
      try { S.me = await api(orgPath("/me"), { signingIn: true }); }
      catch (_) { S.me = null; }
    }
    const now = S.me ? `${S.me.login} in ${S.org}/${S.project}` : `${S.org}/${S.project}`;
    if (!await askSwitch(`A link asks to sign you in as ${login} in ${org}/${project}, ` +
                         `replacing your session (${now}). Anyone can send such a link.`)) return;
  }
  S.save(token, org, project);
  S.me = null;
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

export function loginPage(main, err, route) {
  const token = el("input", { id: "login-token", type: "password", autocomplete: "off" });
  const org = el("input", { id: "login-org", value: S.org });
  const project = el("input", { id: "login-project", value: S.project });
  const msg = el("p", { class: "error", id: "login-error" }, err || "");
  main.replaceChildren(el("h1", {}, "Sign in"), el("form", {
    class: "card",
    onsubmit: async (ev) => {
      ev.preventDefault();
      S.save(token.value.trim(), org.value.trim(), project.value.trim());
      S.me = null;
      try { S.me = await api(orgPath("/me"), { signingIn: true }); }
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

