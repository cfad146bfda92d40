// Times and durations. Every time is shown relative ("3 min ago") with the absolute time
// beside it, in the zone the header's switch chose (local or UTC, kept in localStorage),
// and the other zone on hover; durations of live runs tick once a second.
import { el } from "./dom.js";

const TZ_KEY = "cryo.tz";
export function tzMode() { return localStorage.getItem(TZ_KEY) === "utc" ? "utc" : "local"; }

const utcText = (d) => d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
const two = (n, w = 2) => String(n).padStart(w, "0");

export function fmtTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return tzMode() === "utc" ? utcText(d) : d.toLocaleString();
}

// A log line's clock, HH:MM:SS.mmm, in the chosen zone.
export function fmtClock(d) {
  if (tzMode() === "utc") return d.toISOString().slice(11, 23);
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}.${two(d.getMilliseconds(), 3)}`;
}

// The header's switch: flips the zone, remembers it, and draws the page again so every
// time on it follows.
export function wireTzSwitch(onChange) {
  const b = document.getElementById("tz-switch");
  if (!b || b.dataset.wired) return;
  b.dataset.wired = "1";
  const label = () => { b.textContent = `times: ${tzMode() === "utc" ? "UTC" : "local"}`; };
  label();
  b.addEventListener("click", () => {
    localStorage.setItem(TZ_KEY, tzMode() === "utc" ? "local" : "utc");
    label();
    onChange();
  });
}

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

// A <time>: relative text that ticks, the absolute time (the chosen zone) in the same
// element for wide screens, and the other zone in the title.
export function when(iso, id) {
  if (!iso) return el("span", { class: "muted" }, "—");
  const d = new Date(iso);
  const other = tzMode() === "utc" ? d.toLocaleString() : utcText(d);
  return el("time", { datetime: iso, title: other, "data-rel": iso, id },
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
