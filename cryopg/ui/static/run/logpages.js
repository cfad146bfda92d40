// A script run's whole log, browsed by ranges: only a window of chunks is held (at most
// HOLD characters, read from the server by chunk id as the user scrolls) and only the
// lines on screen are in the page (fixed-height rows, a spacer for the rest), so a 50 MB
// log opens, jumps to its start and moves to a search hit as fast as a small one.
// Rows are plain text nodes inside spans (ansi()), never markup from the log.
import { api } from "../api.js";
import { ansi, el } from "../dom.js";
import { fmtClock } from "../time.js";

const PAGE = 256 * 1024;        // characters read per range request
const HOLD = 4 * 1024 * 1024;   // characters held; the far end is dropped past this
const OVERSCAN = 40;            // rows drawn above and below the screen
const NEAR = 60;                // rows from an end at which the next range is read


// Splits chunks into lines. A chunk may end mid-line: the next one continues it. A line's
// origin, "CHUNK.OFFSET" (the chunk it starts in and where), is its permanent address.
function toLines(chunks) {
  const lines = [], at = [], origin = [], starts = new Map();
  let open = false;
  for (const c of chunks) {
    const when = c.at ? new Date(c.at) : null;
    const parts = c.text.split("\n");
    starts.set(c.id, { line: open ? lines.length - 1 : lines.length, col: open ? lines[lines.length - 1].length : 0 });
    let off = 0;
    parts.forEach((p, i) => {
      if (i === 0 && open) lines[lines.length - 1] += p;
      else if (i < parts.length - 1 || p !== "") { lines.push(p); at.push(when); origin.push(`${c.id}.${off}`); }
      off += p.length + 1;
    });
    open = !c.text.endsWith("\n");
  }
  return { lines, at, origin, starts, open };
}

// The link on a line: opens the run at that line (page.js reads `line=` back).
export function lineLink(href) {
  return el("a", { class: "ln", href, tabindex: "-1", title: "link to this line", "aria-label": "link to this line" });
}

export function logPages({ base, lineHref = null }) {
  const spacer = el("div", { class: "log-spacer" });
  const rows = el("div", { class: "log-rows" });
  const box = el("div", { id: "log-pages", class: "log-pages", tabindex: "0", role: "log",
                          "aria-label": "log (whole)", hidden: true }, spacer, rows);
  let chunks = [];          // held, oldest first: {id, at, text}
  let model = toLines([]);
  let moreBefore = false, moreAfter = false, loading = null;
  let lineH = 0, drawn = [-1, -1], current = -1, needle = "", showTs = false;

  const size = () => chunks.reduce((n, c) => n + c.text.length, 0);
  function rebuild() { model = toLines(chunks); spacer.style.height = `${model.lines.length * lineH}px`; }
  function measure() {
    if (lineH) return;
    const probe = el("div", { class: "log-row" }, "x");
    rows.append(probe);
    lineH = probe.getBoundingClientRect().height || 18;
    probe.remove();
  }

  function draw(force) {
    const n = model.lines.length;
    const first = Math.max(0, Math.floor(box.scrollTop / lineH) - OVERSCAN);
    const last = Math.min(n, Math.ceil((box.scrollTop + box.clientHeight) / lineH) + OVERSCAN);
    if (!force && first === drawn[0] && last === drawn[1]) return;
    drawn = [first, last];
    // ANSI colours carry over lines: replay the codes from a little above the first row.
    const state = { fg: null, bold: false };
    for (let i = Math.max(0, first - 200); i < first; i++) ansi(model.lines[i], state);
    const frag = document.createDocumentFragment();
    for (let i = first; i < last; i++) {
      const row = el("div", { class: i === current ? "log-row current" : "log-row", "data-line": String(i) });
      if (lineHref) row.append(lineLink(lineHref(model.origin[i])));
      if (showTs) row.append(el("span", { class: "ts" }, model.at[i] ? fmtClock(model.at[i]) : ""));
      row.append(ansi(model.lines[i], state));
      frag.append(row);
    }
    rows.style.transform = `translateY(${first * lineH}px)`;
    rows.replaceChildren(frag);
    mark();
    nearEnds();
  }

  // Every match of the search on the rows drawn (CSS custom highlights).
  function mark() {
    if (!(window.CSS && CSS.highlights)) return;
    CSS.highlights.delete("log-pages-find");
    if (!needle) return;
    const ranges = [];
    const walker = document.createTreeWalker(rows, NodeFilter.SHOW_TEXT);
    for (let t = walker.nextNode(); t; t = walker.nextNode()) {
      if (t.parentElement.classList.contains("ts")) continue;
      const low = t.data.toLowerCase();
      for (let i = low.indexOf(needle); i >= 0; i = low.indexOf(needle, i + needle.length)) {
        const r = new Range(); r.setStart(t, i); r.setEnd(t, i + needle.length); ranges.push(r);
      }
    }
    CSS.highlights.set("log-pages-find", new Highlight(...ranges));
  }

  async function fetchRange(q) {
    return api(`${base}/logs?${q}&max_bytes=${PAGE}`);
  }

  async function earlier() {
    if (!moreBefore || loading || !chunks.length) return;
    loading = (async () => {
      const got = await fetchRange(`before=${chunks[0].id}`);
      const was = model.lines.length, top = box.scrollTop;
      chunks = got.chunks.concat(chunks);
      moreBefore = got.more;
      while (size() > HOLD && chunks.length > got.chunks.length) { chunks.pop(); moreAfter = true; }
      rebuild();
      const added = model.lines.length - was;
      if (current >= 0) current += added;
      box.scrollTop = top + added * lineH;
      draw(true);
    })().finally(() => { loading = null; });
    return loading;
  }

  async function later() {
    if (!moreAfter || loading || !chunks.length) return;
    loading = (async () => {
      const got = await fetchRange(`after=${chunks[chunks.length - 1].id}`);
      chunks = chunks.concat(got.chunks);
      moreAfter = got.more;
      const whole = toLines(chunks);
      while (size() > HOLD && chunks.length > got.chunks.length) { chunks.shift(); moreBefore = true; }
      const removed = whole.starts.get(chunks[0].id).line;  // rows dropped at the top
      const top = box.scrollTop;
      rebuild();
      if (current >= 0) current -= removed;
      box.scrollTop = top - removed * lineH;
      draw(true);
    })().finally(() => { loading = null; });
    return loading;
  }

  function nearEnds() {
    const topRow = Math.floor(box.scrollTop / lineH);
    const bottomRow = Math.ceil((box.scrollTop + box.clientHeight) / lineH);
    if (topRow < NEAR && moreBefore) earlier().catch(() => {});
    else if (bottomRow > model.lines.length - NEAR && moreAfter) later().catch(() => {});
  }

  let frame = 0;
  box.addEventListener("scroll", () => {
    if (frame) return;
    frame = requestAnimationFrame(() => { frame = 0; draw(false); });
  });

  function show(got, { top = false, line = -1 } = {}) {
    box.hidden = false;
    measure();
    chunks = got.chunks;
    rebuild();
    current = line;
    const target = line >= 0 ? line * lineH - box.clientHeight / 2 : top ? 0 : model.lines.length * lineH;
    box.scrollTop = Math.max(0, target);
    drawn = [-1, -1];
    draw(true);
  }

  return {
    el: box,
    get active() { return !box.hidden; },
    get atEnd() { return !moreAfter; },
    // The first range of the log: its start.
    async start() {
      const got = await fetchRange("after=0");
      moreBefore = false; moreAfter = got.more;
      show(got, { top: true });
    },
    // The last range before the live window, ending at chunk `beforeId` (0: the end).
    async end(beforeId) {
      const got = await fetchRange(`before=${beforeId || 0}`);
      moreBefore = got.more; moreAfter = !!beforeId;
      show(got);
    },
    // A search hit: the chunk holding it and the ranges around it.
    async reveal(hit) {
      const [upTo, after] = await Promise.all([fetchRange(`before=${hit.id + 1}`), fetchRange(`after=${hit.id}`)]);
      moreBefore = upTo.more; moreAfter = after.more;
      const got = { chunks: upTo.chunks.concat(after.chunks) };
      const m = toLines(got.chunks);
      const s = m.starts.get(hit.id);
      const chunk = got.chunks.find((c) => c.id === hit.id);
      let line = s ? s.line : 0;
      if (chunk) for (let i = chunk.text.indexOf("\n"); i >= 0 && i < hit.offset; i = chunk.text.indexOf("\n", i + 1)) line++;
      show(got, { line });
    },
    // Live output, while the held window reaches the end of the log.
    append(id, text, at) {
      if (box.hidden || moreAfter || (chunks.length && id <= chunks[chunks.length - 1].id)) return;
      const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - lineH * 2;
      chunks.push({ id, at, text });
      rebuild();
      if (stick) box.scrollTop = box.scrollHeight;
      draw(true);
    },
    find(text) { needle = text.toLowerCase(); mark(); },
    timestamps(on) { showTs = on; box.classList.toggle("show-ts", on); if (!box.hidden) draw(true); },
    hide() { box.hidden = true; chunks = []; model = toLines([]); rows.replaceChildren(); current = -1; },
    get currentLine() { return current >= 0 ? model.lines[current] : null; },
  };
}
