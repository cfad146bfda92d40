// A run's log: a tail window of the stored log, then live chunks. Only the newest
// LOG_WINDOW characters stay on the page, so a huge log never freezes the tab. Lines can
// show the time they reached the page, fold under the step that printed them, and be
// searched; the whole log can be loaded or downloaded on demand.
import { apiText } from "../api.js";
import { ansi, el } from "../dom.js";

const LOG_WINDOW = 512 * 1024;     // characters of log kept on the page
export const LOG_TAIL_BYTES = 256 * 1024;  // bytes of a stored log fetched on open
const WHOLE_MAX = 16 * 1024 * 1024;  // "load earlier" fetches at most this much text

const kib = (n) => `${Math.max(1, Math.round(n / 1024))} KiB`;
const stamp = (d) => d.toISOString().slice(11, 23);

export function logView({ base, filename }) {
  const info = el("p", { class: "muted", id: "log-info", role: "status" });
  const pre = el("pre", { id: "log", tabindex: "0", role: "log", "aria-label": "log" });
  const empty = el("p", { class: "muted", id: "log-empty" }, "No output yet.");
  const tsBox = el("input", { type: "checkbox", id: "log-ts", onchange: () => pre.classList.toggle("show-ts", tsBox.checked) });
  const find = el("input", { type: "search", id: "log-find", placeholder: "find in log", "aria-label": "find in log" });
  const count = el("span", { class: "muted", id: "log-find-count" });
  const earlier = el("button", { id: "log-earlier", hidden: true, onclick: () => loadWhole() }, "Load earlier output");
  const tools = el("div", { class: "filters log-tools" },
    el("label", { class: "inline" }, tsBox, " timestamps"), find,
    el("button", { id: "log-prev", "aria-label": "previous match", onclick: () => step(-1) }, "↑"),
    el("button", { id: "log-next", "aria-label": "next match", onclick: () => step(1) }, "↓"), count,
    earlier, el("button", { id: "log-download", onclick: () => download() }, "Download"));
  const root = el("section", { id: "log-section" }, el("h2", {}, "Log"), tools, info, empty, pre);

  const ansiState = { fg: null, bold: false };
  let windowChars = LOG_WINDOW;  // grows when the user asks for the earlier output
  let kept = 0, atLineStart = true, shownBytes = 0, totalBytes = 0, skipped = 0;
  let target = pre;  // where lines go: the log, or the open section of a running step
  let paused = null;  // chunks held while the whole log loads

  function label() {
    info.textContent = skipped > 0 ? `showing the last ${kib(totalBytes - skipped)} of ${kib(totalBytes)}` : "";
    earlier.hidden = skipped <= 0;
  }

  function appendText(text, at) {
    const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
    const frag = document.createDocumentFragment();
    for (const part of text.split(/(?<=\n)/)) {
      if (atLineStart) frag.append(el("span", { class: "ts", "data-t": at ? stamp(at) : "" }));
      frag.append(ansi(part, ansiState));
      atLineStart = part.endsWith("\n");
    }
    target.append(frag);
    empty.hidden = true;
    kept += text.length;
    while (kept > windowChars && pre.firstChild) {
      kept -= pre.firstChild.textContent.length;
      pre.firstChild.remove();
    }
    if (stick) pre.scrollTop = pre.scrollHeight;
  }

  async function loadWhole() {
    earlier.disabled = true;
    paused = [];
    try {
      // One JSON line per chunk, with the time it was stored.
      const chunks = (await apiText(`${base}/logs?times=1`)).split("\n").filter(Boolean).map((l) => JSON.parse(l));
      let size = 0, first = chunks.length;
      while (first > 0 && size + chunks[first - 1].text.length <= WHOLE_MAX) size += chunks[--first].text.length;
      windowChars = size + LOG_WINDOW;
      pre.replaceChildren(); kept = 0; atLineStart = true; target = pre;
      for (const c of chunks.slice(first)) appendText(c.text, c.at ? new Date(c.at) : null);
      skipped = 0; label();
    } catch (e) { info.textContent = e.message; }
    paused = null;
    earlier.disabled = false;
  }

  async function download() {
    const text = await apiText(`${base}/logs`);
    const a = el("a", { href: URL.createObjectURL(new Blob([text], { type: "text/plain" })),
                        download: `${(filename || "run").replace(/[^\w.-]+/g, "_")}.log` });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  }

  // Search: every match highlighted (CSS custom highlights), one current, ↑/↓ to move.
  let matches = [], at = -1;
  function search() {
    const needle = find.value.toLowerCase();
    matches = []; at = -1;
    if (window.CSS && CSS.highlights) { CSS.highlights.delete("log-find"); CSS.highlights.delete("log-find-current"); }
    if (!needle) { count.textContent = ""; return; }
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const t = n.data.toLowerCase();
      for (let i = t.indexOf(needle); i >= 0; i = t.indexOf(needle, i + needle.length)) {
        const r = new Range(); r.setStart(n, i); r.setEnd(n, i + needle.length); matches.push(r);
      }
    }
    if (window.CSS && CSS.highlights) CSS.highlights.set("log-find", new Highlight(...matches));
    step(1);
  }
  function step(d) {
    if (!matches.length) { count.textContent = find.value ? "no match" : ""; return; }
    at = (at + d + matches.length) % matches.length;
    const r = matches[at];
    if (window.CSS && CSS.highlights) CSS.highlights.set("log-find-current", new Highlight(r));
    const host = r.startContainer.parentElement;
    const sec = host.closest("details"); if (sec) sec.open = true;
    const box = r.getBoundingClientRect(), top = pre.getBoundingClientRect();
    pre.scrollTop += box.top - top.top - pre.clientHeight / 2;
    count.textContent = `${at + 1} of ${matches.length}`;
    pre.dataset.current = String(at);
  }
  find.addEventListener("input", search);
  find.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); step(e.shiftKey ? -1 : 1); } });

  return {
    el: root,
    // The stream's first event: how much of the stored log was left out.
    tail(data) {
      // A step section opened before the stream began stays, empty, for what comes next.
      const open = target !== pre ? target.parentNode : null;
      pre.replaceChildren(...(open ? [open] : [])); kept = 0; atLineStart = true;
      if (open) target.replaceChildren();
      skipped = data.skipped_bytes || 0; totalBytes = data.total_bytes || 0; shownBytes = 0;
      this.dropPartial = skipped > 0;
      label();
    },
    // `at`: when the server stored the chunk (ISO), so a line's time is when it was written.
    chunk(text, at) {
      if (paused) { paused.push(text); return; }
      totalBytes = Math.max(totalBytes, skipped + (shownBytes += text.length));
      if (this.dropPartial) {  // the window starts at a line, not mid-line
        this.dropPartial = false;
        const nl = text.indexOf("\n");
        if (nl >= 0) text = text.slice(nl + 1);
      }
      appendText(text, at ? new Date(at) : null);
      label();
    },
    // A step started: what it prints folds under it until it ends.
    openSection(title) {
      this.closeSection();
      const body = el("div", { class: "section-body" });
      const d = el("details", { class: "log-section", open: true }, el("summary", {}, title), body);
      if (!atLineStart) { pre.append("\n"); atLineStart = true; }
      pre.append(d);
      target = body;
    },
    closeSection() {
      if (target !== pre) { if (!atLineStart) { target.append("\n"); atLineStart = true; } target = pre; }
    },
    // A new pass of the script: lines after it are printed again by the replay.
    marker(text) {
      this.closeSection();
      if (!atLineStart) { pre.append("\n"); atLineStart = true; }
      pre.append(el("div", { class: "pass-marker", role: "separator" }, text));
      empty.hidden = true;
    },
    setText(text) { pre.replaceChildren(); kept = 0; atLineStart = true; target = pre; if (text) appendText(text, null); else empty.hidden = false; },
  };
}
