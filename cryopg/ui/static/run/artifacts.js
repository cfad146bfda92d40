// The run's artifacts (issue 25): each with its size, digest and time, and a download.
// A plain link sends the session cookie but never the bearer token a page signed in with
// a token holds, so with a token the download is fetched with it (?redirect=0: the bytes
// through the server, not a redirect to a store that would be handed the header) and
// given to the browser as a blob; with a cookie session the link itself downloads.
import { api } from "../api.js";
import { el } from "../dom.js";
import { S, authHeaders } from "../session.js";
import { when } from "../time.js";

function size(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function artifactsView(ctx) {
  const list = el("ul", { class: "artifacts", id: "artifacts" });
  const note = el("p", { class: "error", id: "artifacts-error", role: "status" });
  const section = el("section", { id: "artifacts-section", hidden: true }, el("h2", {}, "Artifacts"), list, note);
  let seen = null;

  async function download(ev, a, href) {
    if (!S.token) return;  // the cookie goes with the link
    ev.preventDefault();
    note.textContent = "";
    try {
      const r = await fetch(`${href}?redirect=0`, { headers: authHeaders("GET"), credentials: "same-origin" });
      if (!r.ok) {
        let msg = `HTTP ${r.status}`;
        try { msg = (await r.json()).error.message || msg; } catch (_) { /* not JSON */ }
        throw new Error(msg);
      }
      const link = el("a", { href: URL.createObjectURL(await r.blob()), download: a.name.split("/").pop() });
      document.body.append(link); link.click(); link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
    } catch (e) { note.textContent = `${a.name}: ${e.message}`; }
  }

  async function update() {
    let got;
    try { got = await api(`${ctx.base}/artifacts`, { signal: ctx.signal }); } catch (_) { return; }
    const rows = got.artifacts || [];
    const key = JSON.stringify(rows.map((a) => [a.name, a.sha256]));
    if (key === seen) return;
    seen = key;
    section.hidden = rows.length === 0;
    list.replaceChildren(...rows.map((a) => {
      const href = `${ctx.base}/artifacts/${encodeURIComponent(a.name)}`;
      return el("li", { "data-artifact": a.name },
        el("a", { href, download: a.name.split("/").pop(), onclick: (ev) => download(ev, a, href) }, a.name),
        el("span", { class: "muted" }, ` ${size(a.size)} · `, el("code", { title: a.sha256 }, a.sha256.slice(0, 12)), " · "),
        when(a.created_at));
    }));
  }
  return { el: section, update };
}
