// DOM helpers. Text from runs (names, logs, annotations, cell values) only ever reaches
// the page as text nodes, or through md() which escapes first.

export function el(tag, attrs, ...kids) {
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

export function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}

// A small markdown subset for annotations. Everything is escaped first; only the markup
// below is turned back into tags, and links keep http(s) targets only.
export function md(src) {
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
export function ansi(text, state) {
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

// Focusable: a long value scrolls, and a keyboard must reach it (axe: scrollable-region-focusable).
export function json(value, id) {
  return el("pre", { class: "json", id, tabindex: "0" }, JSON.stringify(value ?? null, null, 1));
}
