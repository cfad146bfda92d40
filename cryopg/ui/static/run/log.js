// A run's log: a tail window of the stored log, then live chunks. Only the newest
// LOG_WINDOW characters stay on the page, so a huge log never freezes the tab. Lines can
// show the time they were stored, fold under the step that printed them, and be
// searched; a script run's whole log is browsed by ranges (logpages.js) and searched on
// the server when the window does not hold all of it; it can be downloaded.
import { api, apiText } from "../api.js";
import { ansi, el } from "../dom.js";
import { lineLink, logPages } from "./logpages.js";
import { fmtClock } from "../time.js";

// The live window is small: it draws quickly on open, and the whole log is browsed by
// ranges (logpages.js) rather than by growing it.
const LOG_WINDOW = 192 * 1024;     // characters of log kept on the page
export const LOG_TAIL_BYTES = 96 * 1024;  // bytes of a stored log shown on open

const kib = (n) => `${Math.max(1, Math.round(n / 1024))} KiB`;

// lineHref(origin): the address of the run at a line ("CHUNK.OFFSET"); with it each line
// carries a link there (a script run's log, whose chunks the ranges can read back).
export function logView({ base, filename, ranges = true, lineHref = null }) {
  const info = el("p", { class: "muted", id: "log-info", role: "status" });
  const pre = el("pre", { id: "log", tabindex: "0", role: "log", "aria-label": "log" });
  const empty = el("p", { class: "muted", id: "log-empty" }, "No output yet.");
  const pages = logPages({ base, lineHref: ranges ? lineHref : null });
  const links = ranges && lineHref;
  const tsBox = el("input", { type: "checkbox", id: "log-ts", onchange: () => {
    pre.classList.toggle("show-ts", tsBox.checked); pages.timestamps(tsBox.checked);
  } });
  const find = el("input", { type: "search", id: "log-find", placeholder: "find in log", "aria-label": "find in log" });
  const count = el("span", { class: "muted", id: "log-find-count" });
  const earlier = el("button", { id: "log-earlier", hidden: true, onclick: () => browse(() => pages.end(0)) }, "Load earlier output");
  const start = el("button", { id: "log-start", hidden: true, onclick: () => browse(() => pages.start()) }, "Jump to start");
  const live = el("button", { id: "log-live", hidden: true, onclick: () => unbrowse() }, "Back to live output");
  const tools = el("div", { class: "filters log-tools" },
    el("label", { class: "inline" }, tsBox, " timestamps"), find,
    el("button", { id: "log-prev", "aria-label": "previous match", onclick: () => step(-1) }, "↑"),
    el("button", { id: "log-next", "aria-label": "next match", onclick: () => step(1) }, "↓"), count,
    earlier, start, live, el("button", { id: "log-download", onclick: () => download() }, "Download"));
  const root = el("section", { id: "log-section" }, el("h2", {}, "Log"), tools, info, empty, pre, pages.el);

  const ansiState = { fg: null, bold: false };
  const windowChars = LOG_WINDOW;
  let kept = 0, atLineStart = true, shownBytes = 0, totalBytes = 0, skipped = 0;
  let target = pre;  // where lines go: the log, or the open section of a running step

  function label() {
    if (pages.active) {
      info.textContent = `browsing the whole log (${kib(totalBytes)}); it reads more as you scroll`;
    } else {
      info.textContent = skipped > 0 ? `showing the last ${kib(totalBytes - skipped)} of ${kib(totalBytes)}` : "";
    }
    earlier.hidden = !ranges || skipped <= 0 || pages.active;
    start.hidden = !ranges || (skipped <= 0 && !pages.active);
    live.hidden = !pages.active;
  }

  // The whole log in place of the live window, from a range `open` reads.
  async function browse(open) {
    earlier.disabled = start.disabled = true;
    try {
      pre.hidden = true;
      await open();
      label();
      if (find.value) pages.find(find.value);
    } catch (e) { info.textContent = e.message; if (!pages.active) pre.hidden = false; }
    earlier.disabled = start.disabled = false;
  }
  function unbrowse() {
    pages.hide(); pre.hidden = false; label();
    pre.scrollTop = pre.scrollHeight;
  }

  // id, off: the chunk the text is from and where in it the text starts (line links).
  function appendText(text, at, id = 0, off = 0, bulk = false) {
    const stick = !bulk && pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
    const frag = document.createDocumentFragment();
    for (const part of text.split(/(?<=\n)/)) {
      if (atLineStart && links && id) frag.append(lineLink(lineHref(`${id}.${off}`)));
      off += part.length;
      if (atLineStart) frag.append(el("span", { class: "ts", "data-t": at ? fmtClock(at) : "" }));
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

  async function download() {
    const text = await apiText(`${base}/logs`);
    const a = el("a", { href: URL.createObjectURL(new Blob([text], { type: "text/plain" })),
                        download: `${(filename || "run").replace(/[^\w.-]+/g, "_")}.log` });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  }

  // Search: every match highlighted (CSS custom highlights), one current, ↑/↓ to move.
  // When the page holds only the log's tail, the server searches the whole log and a
  // match opens the range around it.
  let matches = [], at = -1, remote = null, asked = 0;
  function clearMarks() {
    if (window.CSS && CSS.highlights) { CSS.highlights.delete("log-find"); CSS.highlights.delete("log-find-current"); }
  }
  async function search() {
    const needle = find.value.toLowerCase();
    matches = []; at = -1; remote = null;
    clearMarks();
    pages.find(find.value);
    if (!needle) { count.textContent = ""; return; }
    if (ranges && (skipped > 0 || pages.active)) {
      const ask = ++asked;
      count.textContent = "searching…";
      try {
        const got = await api(`${base}/logs?find=${encodeURIComponent(find.value)}`);
        if (ask !== asked) return;
        remote = got;
        count.dataset.truncated = got.truncated ? "1" : "";
        step(1);
      } catch (e) { if (ask === asked) count.textContent = e.message; }
      return;
    }
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
    if (remote) {
      const hits = remote.matches;
      if (!hits.length) { count.textContent = "no match"; return; }
      at = (at + d + hits.length) % hits.length;
      count.textContent = `${at + 1} of ${hits.length}${remote.truncated ? "+" : ""}`;
      const want = at;
      browse(() => pages.reveal(hits[want]));
      return;
    }
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
  let typing = 0;
  find.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(() => { typing = 0; search(); }, 250); });
  find.addEventListener("keydown", (e) => {
    if (e.key !== "Enter") return;
    e.preventDefault();
    if (typing) { clearTimeout(typing); typing = 0; search(); } else step(e.shiftKey ? -1 : 1);
  });

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
    chunk(text, at, id) {
      if (id) pages.append(id, text, at);
      totalBytes = Math.max(totalBytes, skipped + (shownBytes += text.length));
      // A huge chunk: only its end would stay anyway (the tail's first, only the tail).
      const cap = this.dropPartial ? LOG_TAIL_BYTES : windowChars;
      let off = 0;  // where in the chunk the text kept starts
      if (text.length > cap) {
        const cut = text.length - cap;
        skipped += cut; shownBytes -= cut;
        text = text.slice(cut); this.dropPartial = true; off = cut;
      }
      if (this.dropPartial) {  // the window starts at a line, not mid-line
        this.dropPartial = false;
        const nl = text.indexOf("\n");
        if (nl >= 0) { text = text.slice(nl + 1); off += nl + 1; }
      }
      appendText(text, at ? new Date(at) : null, id, off);
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
    // A line's link opened: the whole log browsed from the ranges around that line, the
    // line in the middle and highlighted.
    openLine(id, off) { if (ranges) return browse(() => pages.reveal({ id, offset: off })); return null; },
    // What an empty log says: "No output yet." only while the run can still print.
    emptyText(text) { if (empty.textContent !== text) empty.textContent = text; },
    // The whole log at once (a graph's): text, or chunks [{text, at}] whose lines show
    // their time with the timestamps toggle.
    setText(text) {
      // One read of layout for the lot, not one per chunk.
      const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 20;
      pre.replaceChildren(); kept = 0; atLineStart = true; target = pre;
      const chunks = Array.isArray(text) ? text : text ? [{ text, at: null }] : [];
      for (const c of chunks) if (c.text) appendText(c.text, c.at ? new Date(c.at) : null, 0, 0, true);
      if (!chunks.some((c) => c.text)) empty.hidden = false;
      else if (stick) pre.scrollTop = pre.scrollHeight;
    },
  };
}
