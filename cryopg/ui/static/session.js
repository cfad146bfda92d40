// Who is signed in: an API token in sessionStorage, or an OIDC session cookie the page
// never sees (the page holds only its anti-forgery value).

export const S = {
  get token() { return sessionStorage.getItem("cryo.token"); },
  get org() { return sessionStorage.getItem("cryo.org") || "dev"; },
  get project() { return sessionStorage.getItem("cryo.project") || "default"; },
  save(token, org, project) {
    sessionStorage.setItem("cryo.token", token);
    sessionStorage.setItem("cryo.org", org);
    sessionStorage.setItem("cryo.project", project);
  },
  clear() { sessionStorage.removeItem("cryo.token"); },
  cookie: null,  // { org, login, role, csrf } while such a session is open
  me: null,      // GET /orgs/{org}/me: { login, role }
  get signedIn() { return Boolean(this.token || this.cookie); },
  get canAct() { return Boolean(this.me && this.me.role !== "viewer"); },
  get isAdmin() { return Boolean(this.me && ["admin", "owner"].includes(this.me.role)); },
};

// Asks the server whether this browser's cookie signs somebody in (never with a token).
export async function loadCookieSession() {
  S.cookie = null;
  try {
    // optional=1: no cookie is a 200 saying so, never a 401 logged in the console.
    const r = await fetch("/api/v1/auth/session?optional=1", { credentials: "same-origin" });
    if (r.ok) { const got = await r.json(); S.cookie = got.signed_in === false ? null : got; }
  } catch (_) { S.cookie = null; }
  if (S.cookie && S.cookie.org !== S.org) {
    sessionStorage.setItem("cryo.org", S.cookie.org);
    sessionStorage.setItem("cryo.project", "default");
  }
}

export function authHeaders(method) {
  if (S.token) return { Authorization: `Bearer ${S.token}` };
  if (S.cookie && !["GET", "HEAD"].includes(method)) return { "X-Cryo-CSRF": S.cookie.csrf };
  return {};
}

export async function signOut() {
  if (S.cookie) {
    try {
      await fetch("/api/v1/auth/logout", { method: "POST", credentials: "same-origin",
                                           headers: { "X-Cryo-CSRF": S.cookie.csrf } });
    } catch (_) { /* the page forgets the session either way */ }
    S.cookie = null;
  }
  S.clear(); S.me = null; location.hash = "#/login";
}
