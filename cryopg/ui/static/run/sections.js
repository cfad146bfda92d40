// The run page's lists: checkpoints (durable calls), the timeline (history), state cells
// and children.
import { api, projectPath } from "../api.js";
import { el, json, md } from "../dom.js";
import { S } from "../session.js";
import { badge } from "../status.js";
import { duration, fmtDur, when } from "../time.js";
import { namesOf } from "./names.js";

export function checkpointStatus(c, run) {
  const running = c.status === "pending" && c.family === "step" && run.status === "running";
  return c.status === "done" ? (c.exit_code ? "failed" : "succeeded") : running ? "running" : "waiting";
}

// A step the agent saw end before it pinned a marker (a few tens of ms) has one time for
// its start and end: say it was quick rather than "0 ms". Other calls are instant.
function cpDur(c) {
  if (!c.completed_at) return "";
  if (c.completed_at === c.created_at) return c.family === "step" ? "under 0.1 s" : "instant";
  return fmtDur(c.created_at, c.completed_at);
}

export function renderCheckpoints(list, cps, run) {
  list.replaceChildren(...cps.map((c) => {
    const st = checkpointStatus(c, run);
    return el("li", { "data-seq": c.seq, "data-status": st, class: "checkpoint" }, badge(st), " ",
      el("strong", {}, c.family), " ", c.name, c.ordinal ? ` #${c.ordinal}` : "",
      c.label ? el("span", { class: "muted" }, ` ${c.label}`) : "",
      el("span", { class: "muted" }, "  ", when(c.created_at), " · ",
         st === "running" ? duration(c.created_at, null) : el("span", { class: "cp-dur" }, cpDur(c))),
      c.due_at ? el("span", { class: "muted" }, " · due ", when(c.due_at)) : "");
  }));
  if (!cps.length) list.append(el("li", { class: "muted" }, "no durable calls yet"));
}

// A script replays from the top after every wake: each of these history kinds starts a
// new pass (the attempt number only changes on a retry).
const WAKES = { timer_fired: "its timer", signal_received: "a signal", event_received: "an event",
                retry_scheduled: "a retry", activity_completed: "an activity",
                activities_completed: "its activities", lease_granted: "a lease" };

export function passes(history) {
  const out = [];
  history.forEach((h, i) => { if (WAKES[h.kind]) out.push({ at: h.at, n: out.length + 2, why: WAKES[h.kind], index: i }); });
  return out;
}

export function renderTimeline(list, run) {
  const hist = run.history || [];
  const byIndex = Object.fromEntries(passes(hist).map((p) => [p.index, p]));
  const items = hist.map((h, i) => {
    const next = hist[i + 1];
    const what = h.family ? `${h.family} ${h.name || ""}${h.ordinal ? " #" + h.ordinal : ""}` : "";
    const p = byIndex[i];
    // A wake queues the next pass; it begins when an agent claims the run (the run's
    // attempt counts those), so a pass not claimed yet is "next", as the header says.
    const begun = !p || run.kind === "graph" || (run.attempt || 0) >= p.n;
    const extra = (p ? ` pass ${p.n} ${begun ? "begins" : "next"}, woken by ${p.why}` : "") +
      (h.kind === "retry_scheduled" && h.attempt ? ` (attempt ${h.attempt})` : "");
    const li = el("li", { class: `ev ev-${h.kind}`, "data-kind": h.kind },
      el("span", { class: "muted" }, when(h.at)), el("strong", {}, h.kind.replace(/_/g, " ")),
      el("span", {}, what, extra ? el("span", { class: "muted" }, extra) : "",
         h.by ? el("span", { class: "muted" }, ` by ${h.by}`) : ""),
      el("span", { class: "muted" }, next ? fmtDur(h.at, next.at) : ""));
    if (h.comment) li.append(el("div", { class: "note comment" }, h.comment));
    if (h.kind === "annotation" && h.text !== undefined) {
      const note = el("div", { class: "note" });
      note.innerHTML = md(h.text);  // md() escapes before it adds any markup
      li.append(note);
    }
    return li;
  });
  list.replaceChildren(...(hist.length > GROUP_AT ? grouped(hist, items, run) : items));
}

// A long history (a 500-node graph has over a thousand rows) folds into groups: a script
// run's by pass, a graph run's by node; the newest group stays open.
export const GROUP_AT = 200;
function grouped(hist, items, run) {
  const groups = new Map();
  let pass = 1;
  hist.forEach((h, i) => {
    if (WAKES[h.kind]) pass += 1;
    const key = run.kind === "graph" ? (h.name || h.node || "the run") : `pass ${pass}`;
    if (!groups.has(key)) groups.set(key, { key, rows: [], last: i });
    const g = groups.get(key);
    g.rows.push(items[i]); g.last = i;
  });
  const newest = [...groups.values()].reduce((a, b) => (b.last > a.last ? b : a));
  return [...groups.values()].map((g) => el("li", { class: "tl-group" },
    el("details", { open: g === newest },
      el("summary", {}, `${g.key} · ${g.rows.length} event${g.rows.length === 1 ? "" : "s"}`),
      el("ol", { class: "timeline" }, g.rows))));
}


export async function renderState(box, children, run, base, signal) {
  try {
    const { cells } = await api(`${base}/state`, { signal });
    box.replaceChildren(cells.length ? el("div", { class: "scroll-x" }, el("table", { id: "state-cells" },
      el("thead", {}, el("tr", {}, el("th", {}, "Key"), el("th", {}, "Value"), el("th", {}, "Version"))),
      el("tbody", {}, cells.map((c) => el("tr", {}, el("td", {}, c.key),
        el("td", {}, json(c.value)), el("td", {}, String(c.version)))))))
      : el("p", { class: "muted" }, "No cells."));
  } catch (e) { box.replaceChildren(el("p", { class: "error" }, e.message)); }
  if (S.canAct) {  // entity cells are for Members and up
    try {
      const { cells } = await api(`${base}/entity-state`, { signal });
      if (cells.length) {
        box.append(el("h3", {}, "Entity cells this run created or wrote last"),
          el("div", { class: "scroll-x" }, el("table", { id: "entity-cells" },
            el("thead", {}, el("tr", {}, ["Entity", "Key", "Value", "Version"].map((h) => el("th", {}, h)))),
            el("tbody", {}, cells.map((c) => el("tr", {}, el("td", {}, c.entity), el("td", {}, c.key),
              el("td", {}, json(c.value)), el("td", {}, String(c.version))))))));
      }
    } catch (e) { box.append(el("p", { class: "error" }, e.message)); }
  }
  const kids = await api(projectPath(`/runs?parent=${encodeURIComponent(run.id)}&limit=200`), { signal });
  const names = namesOf(run);
  children.replaceChildren(...(kids.runs.length ? [el("h2", {}, "Children"), el("ul", { id: "children-list", class: "children" }, kids.runs.map((k) =>
    el("li", { "data-run": k.id }, badge(k.status), " ",
       el("a", { href: `#/run/${encodeURIComponent(k.id)}` }, names[k.id] || k.workflow || k.filename),
       " ", el("span", { class: "muted" }, k.id.split(":").pop(), " · ", when(k.started_at || k.created_at), " · ", duration(k.started_at, k.finished_at)))))] : []));
}
