// The public HTTP API with the user's credentials, and server-sent events over fetch
// (EventSource cannot send an Authorization header).
import { S, authHeaders } from "./session.js";

export class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

export function projectPath(rest) {
  return `/api/v1/orgs/${encodeURIComponent(S.org)}/projects/${encodeURIComponent(S.project)}${rest}`;
}

export function orgPath(rest) { return `/api/v1/orgs/${encodeURIComponent(S.org)}${rest}`; }

// Called when the server says the credentials no longer work (set by the router).
export const hooks = { signedOut: () => {} };

export async function api(path, opts = {}) {
  const method = opts.method || "GET";
  const headers = authHeaders(method);
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  let r;
  try {
    r = await fetch(path, { method, headers, credentials: "same-origin",
      body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined, signal: opts.signal });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, "unreachable", "The server cannot be reached.");
  }
  let body = null;
  try { body = await r.json(); } catch (_) { body = null; }
  if (!r.ok) {
    const e = (body && body.error) || {};
    if (r.status === 401 && !opts.signingIn) { S.clear(); S.cookie = null; S.me = null; hooks.signedOut(); }
    throw new ApiError(r.status, e.code || "http", e.message || `HTTP ${r.status}`);
  }
  return body;
}

// The raw text of a response (a whole log), with the same credentials.
export async function apiText(path, signal) {
  const r = await fetch(path, { headers: authHeaders("GET"), credentials: "same-origin", signal });
  if (!r.ok) throw new ApiError(r.status, "http", `HTTP ${r.status}`);
  return r.text();
}

// Calls onEvent(name, data) per event; resolves when the stream ends or is aborted.
export async function sse(path, onEvent, signal) {
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
export function liveStream(path, onEvent, ctl) {
  (async () => {
    while (!ctl.signal.aborted) {
      try { await sse(path, onEvent, ctl.signal); } catch (_) { /* retried below */ }
      if (ctl.signal.aborted) return;
      onEvent("reconnect", {});
      await new Promise((res) => setTimeout(res, 2000));
    }
  })();
}
