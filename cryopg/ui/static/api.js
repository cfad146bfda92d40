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
    const err = new ApiError(r.status, e.code || "http", e.message || `HTTP ${r.status}`);
    if (e.line) err.line = e.line;  // a source that did not compile: the line it is about
    throw err;
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
  if (!r.body) return;
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

// Keeps one live stream open, reconnecting after a drop with a growing pause (2 s up to
// 30 s; back to 2 s once a stream has said hello). It stops for good when the server
// says the stream is over (`end` with `final`: a finished run changes no more) or
// refuses it (401, 403, 404): reconnecting then would only read everything again.
// onEvent also gets "reconnect" ({error, delay_ms}) after each drop.
export function liveStream(path, onEvent, ctl) {
  let over = false, delay = 2000;
  const handle = (name, data) => {
    if (name === "hello") delay = 2000;
    if (name === "end" && data && data.final) over = true;
    onEvent(name, data);
  };
  (async () => {
    while (!ctl.signal.aborted && !over) {
      let error = null;
      try { await sse(path, handle, ctl.signal); } catch (e) { error = e; }
      if (ctl.signal.aborted || over) return;
      if (error && [401, 403, 404].includes(error.status)) return;
      onEvent("reconnect", { error: error ? error.message : "the stream ended", delay_ms: delay });
      await new Promise((res) => setTimeout(res, delay));
      delay = Math.min(delay * 2, 30_000);
    }
  })();
}
