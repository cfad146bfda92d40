// Times and durations. Every time is shown relative ("3 min ago") with the absolute
// local time beside it and UTC on hover; durations of live runs tick once a second.
import { el } from "./dom.js";

export function fmtTime(iso) { return iso ? new Date(iso).toLocaleString() : ""; }

export function fmtMs(ms) {
  ms = Math.max(ms, 0);
  if (ms < 1000) return `${Math.floor(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${(Math.floor(s * 10) / 10).toFixed(1)} s`;
  const whole = Math.floor(s);  // floored, so 119.6 s reads 1 m 59 s, never 1 m 60 s
  if (whole < 3600) return `${Math.floor(whole / 60)} m ${whole % 60} s`;
  return `${Math.floor(whole / 3600)} h ${Math.floor((whole % 3600) / 60)} m`;
}

export function fmtDur(a, b) {
  if (!a) return "";
  return fmtMs((b ? new Date(b) : new Date()) - new Date(a));
}

export function fmtAgo(iso) {
  const s = Math.round((Date.now() - new Date(iso)) / 1000);
  const fut = s < 0, n = Math.abs(s);
  const t = n < 5 ? "just now" : n < 60 ? `${n} s` : n < 3600 ? `${Math.floor(n / 60)} min`
    : n < 86400 ? `${Math.floor(n / 3600)} h` : `${Math.floor(n / 86400)} d`;
  return n < 5 ? t : fut ? `in ${t}` : `${t} ago`;
}

// A <time>: relative text that ticks, the absolute local time in the same element for
// wide screens, and UTC in the title.
export function when(iso, id) {
  if (!iso) return el("span", { class: "muted" }, "—");
  const utc = new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  return el("time", { datetime: iso, title: utc, "data-rel": iso, id },
            el("span", { class: "rel" }, fmtAgo(iso)), " ", el("span", { class: "abs" }, fmtTime(iso)));
}

// A duration that ticks while `end` is unknown (a running or parked run).
export function duration(start, end, id) {
  if (!start) return el("span", { id }, "");
  return el("span", { class: "dur", "data-since": end ? null : start, id }, fmtDur(start, end));
}

setInterval(() => {
  for (const e of document.querySelectorAll("[data-since]")) e.textContent = fmtDur(e.dataset.since);
  for (const e of document.querySelectorAll("time[data-rel] .rel")) e.textContent = fmtAgo(e.parentNode.dataset.rel);
}, 1000);
