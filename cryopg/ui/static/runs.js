// The runs list: search and filters kept in the URL (a link shares them), live updates,
// children under their parent, columns sorted by the server (so the order holds across
// pages), and cancelling or re-running several runs at once.
import { api, liveStream, projectPath } from "./api.js";
import { el } from "./dom.js";
import { S } from "./session.js";
import { LIVE, badge, substate } from "./status.js";
import { duration, when } from "./time.js";
import { jobNames } from "./run/names.js";

const PAGE = 50;
const FILTERS = ["q", "status", "match", "workflow", "trigger", "since", "until", "sort"];
const SEARCH = ["q", "match", "trigger", "since", "until"];
const SORTS = { Started: "started", Ended: "ended", Duration: "duration", Status: "status", Workflow: "workflow" };
const DOWN_FIRST = new Set(["started", "ended", "duration"]);

function isDate(v) {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(v)) return false;
  const d = new Date(`${v}T00:00:00Z`);
  return !Number.isNaN(d.getTime()) && d.toISOString().slice(0, 10) === v;
}

export async function runsPage(main, q, ctl) {
  const t0 = performance.now();
  const f = Object.fromEntries(FILTERS.map((k) => [k, q.get(k) || ""]));
  // A date the address bar carries is checked here: a bad one is named beside the
  // filters and left out, and the list still shows (it was replaced by "Error").
  const filterMsg = el("p", { class: "error", id: "filter-error", role: "status" });
  const bad = [];
  for (const [k, word] of [["since", "from"], ["until", "to"]]) {
    if (f[k] && !isDate(f[k])) { bad.push(`the ${word} date ${f[k]} is not a date (YYYY-MM-DD); it is left out`); f[k] = ""; }
  }
  filterMsg.textContent = bad.join("; ");
  const before = q.get("before") || "";
  const input = (id, key, attrs = {}) => el("input", { id, value: f[key], "aria-label": attrs.label || key, ...attrs, label: null });
  const text = input("filter-q", "q", { type: "search", placeholder: "run id, workflow, input, label", label: "search" });
  const statusSel = el("select", { id: "filter-status", "aria-label": "status" },
    ["", "queued", "pending", "running", "parked", "succeeded", "failed", "cancelled"].map(
      (s) => el("option", { value: s, selected: s === f.status }, s || "any status")));
  const wf = input("filter-workflow", "match", { placeholder: "workflow", label: "workflow" });
  const trig = el("select", { id: "filter-trigger", "aria-label": "trigger" },
    ["", "manual", "parent", "schedule", "webhook", "event"].map(
      (s) => el("option", { value: s, selected: s === f.trigger }, s || "any trigger")));
  const since = input("filter-since", "since", { type: "date", label: "from date" });
  const until = input("filter-until", "until", { type: "date", label: "until date" });
  const apply = () => {
    const p = new URLSearchParams();
    const vals = { q: text.value.trim(), status: statusSel.value, match: wf.value.trim(),
                   workflow: f.workflow, trigger: trig.value, since: since.value, until: until.value, sort: f.sort };
    for (const [k, v] of Object.entries(vals)) if (v) p.set(k, v);
    location.hash = "#/runs" + (p.toString() ? "?" + p : "");
  };
  for (const c of [statusSel, wf, trig, since, until, text]) c.addEventListener("change", apply);
  const tbody = el("tbody", { id: "runs-body" });
  const pager = el("div", { class: "pager" });
  const live = el("span", { class: "muted", id: "live-state" }, "connecting…");
  const total = el("span", { class: "muted", id: "runs-total", role: "status" });
  const selected = new Map();  // run id -> status when ticked
  const bulkMsg = el("span", { class: "muted", id: "bulk-msg", role: "status" });
  const liveIds = () => [...selected].filter(([, st]) => LIVE.has(st)).map(([id]) => id);
  const again = el("button", { id: "rerun-selected", disabled: true, onclick: async () => {
    const ids = [...selected.keys()];
    if (!confirm(`Run ${ids.length} run(s) again with the same input?`)) return;
    const got = await Promise.allSettled(ids.map((id) =>
      api(projectPath(`/runs/${encodeURIComponent(id)}/run-again`), { method: "POST", body: {} })));
    const ok = got.filter((g) => g.status === "fulfilled").map((g) => g.value.id);
    const bad = got.filter((g) => g.status === "rejected");
    bulkMsg.replaceChildren(`started ${ok.length} of ${ids.length}`,
      bad.length ? ` (${bad.length} refused: ${bad[0].reason.message})` : "", ok.length ? ": " : "",
      ...ok.map((id) => el("a", { href: `#/run/${encodeURIComponent(id)}`, class: "chip" }, id.split(":").pop())));
    selected.clear(); syncBulk(); load();
  } }, "Re-run selected");
  const bulk = el("button", { class: "danger", id: "cancel-selected", disabled: true, onclick: async () => {
    const ids = liveIds();
    if (!confirm(`Cancel ${ids.length} run(s)?`)) return;
    const got = await Promise.allSettled(ids.map((id) =>
      api(projectPath(`/runs/${encodeURIComponent(id)}/cancel`), { method: "POST", body: {} })));
    const bad = got.filter((g) => g.status === "rejected").length;
    bulkMsg.textContent = `cancelled ${ids.length - bad} of ${ids.length}` + (bad ? ` (${bad} refused)` : "");
    selected.clear(); syncBulk(); load();
  } }, "Cancel selected");
  const syncBulk = () => {
    const n = liveIds().length;
    bulk.disabled = n === 0; bulk.textContent = `Cancel selected (${n})`;
    again.disabled = selected.size === 0; again.textContent = `Re-run selected (${selected.size})`;
  };
  const searching = SEARCH.some((k) => f[k]);
  main.replaceChildren(el("h1", {}, "Runs"),
    el("form", { class: "filters", id: "run-filters", role: "search", onsubmit: (e) => { e.preventDefault(); apply(); } },
       text, statusSel, wf, trig, el("label", { class: "inline" }, "from ", since), el("label", { class: "inline" }, "to ", until),
       el("button", { type: "submit" }, "Search"),
       searching || f.status || f.workflow || bad.length ? el("a", { href: "#/runs", id: "clear-filters" }, "clear") : "", live),
    filterMsg, total,
    S.canAct ? el("div", { class: "filters" }, bulk, again, bulkMsg) : "",
    el("div", { class: "scroll-x" }, el("table", { id: "runs" }, el("thead", {}, el("tr", {},
      ["", "Run", "Status", "Workflow", "Trigger", "Started", "Ended", "Duration"].map((h, i) =>
        el("th", { scope: "col", "aria-sort": sortState(h) }, i ? sortButton(h) : el("span", { class: "sr-only" }, "select"))))), tbody)), pager);
  const expanded = new Set();

  // Sortable headers: the first click sorts a time newest (longest) first and a name or
  // status A to Z; a second flips it. The order rides in the URL with the filters.
  function sortState(h) {
    const key = SORTS[h];
    if (!key || !f.sort || f.sort.replace(/^-/, "") !== key) return key ? "none" : null;
    return f.sort.startsWith("-") ? "descending" : "ascending";
  }
  function sortButton(h) {
    const key = SORTS[h];
    if (!key) return h;
    const st = sortState(h);
    const next = st === "none" ? (DOWN_FIRST.has(key) ? "-" : "") + key : st === "descending" ? key : "-" + key;
    return el("button", { type: "button", class: "sort", id: `sort-${key}`, title: `sort by ${h.toLowerCase()}`,
      onclick: () => { f.sort = next; apply(); } }, h, st === "none" ? "" : st === "ascending" ? " ▲" : " ▼");
  }

  function row(r, child, names) {
    const pick = S.canAct
      ? el("input", { type: "checkbox", class: "pick", "aria-label": `select ${r.id}`, checked: selected.has(r.id),
                      onchange: (e) => { e.target.checked ? selected.set(r.id, r.status) : selected.delete(r.id); syncBulk(); } })
      : "";
    const name = (names && names[r.id]) || r.workflow || r.filename;
    return el("tr", { class: child ? "child" : "", "data-run": r.id },
      el("td", {}, pick),
      el("td", {}, r.children > 0 ? el("button", { class: "expand", "aria-label": `children of ${r.id}`,
        "aria-expanded": String(expanded.has(r.id)),
        onclick: () => { expanded.has(r.id) ? expanded.delete(r.id) : expanded.add(r.id); load(); } },
        expanded.has(r.id) ? "▾" : "▸") : "",
        " ", el("a", { href: `#/run/${encodeURIComponent(r.id)}` }, r.id.split(":").pop())),
      el("td", {}, badge(r.status), " ", el("span", { class: "muted substate" }, substate(r))),
      el("td", { class: "workflow" }, name),
      el("td", {}, r.trigger || "manual"),
      el("td", {}, when(r.started_at || r.created_at)),
      el("td", {}, r.finished ? when(r.finished_at) : ""),
      el("td", {}, duration(r.started_at, r.finished_at)));
  }

  function query(extra) {
    const p = new URLSearchParams({ limit: String(PAGE), ...extra });
    for (const k of FILTERS) if (f[k]) p.set(k, f[k]);
    if (!searching) p.set("top", "1");
    return p;
  }

  async function load() {
    let page;
    try {
      page = await api(projectPath(`/runs?${query(before ? { before } : {})}`), { signal: ctl.signal });
    } catch (e) {
      if (e.status !== 400) throw e;
      filterMsg.textContent = e.message;  // a filter the server refused: say which
      page = { runs: [], next: null };
    }
    const rows = [];
    for (const r of page.runs) {
      rows.push(row(r, false));
      if (expanded.has(r.id)) {
        const [kids, names] = await Promise.all([
          api(projectPath(`/runs?parent=${encodeURIComponent(r.id)}&limit=200`), { signal: ctl.signal }),
          jobNames(r.id, ctl.signal)]);
        for (const k of kids.runs) rows.push(row(k, true, names));
      }
    }
    tbody.replaceChildren(...rows);
    // The total under these filters, beside the page (a read of its own, never holding the page up).
    const cq = query({}); cq.delete("limit"); cq.delete("top"); cq.delete("sort");
    api(projectPath(`/run-count?${cq}`), { signal: ctl.signal })
      .then((got) => { if (got) total.textContent = `${got.total} run${got.total === 1 ? "" : "s"}`; }, () => {});
    if (!rows.length) tbody.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No runs.")));
    const keep = new URLSearchParams(FILTERS.filter((k) => f[k]).map((k) => [k, f[k]]));
    const next = new URLSearchParams(keep); if (page.next) next.set("before", page.next);
    pager.replaceChildren(
      before ? el("a", { href: "#/runs" + (keep.toString() ? "?" + keep : "") }, "« newest") : "",
      page.next ? el("a", { id: "next-page", href: `#/runs?${next}` }, "older »") : "");
  }
  await load();
  window.__cryoPerf = { ...(window.__cryoPerf || {}), runsListMs: performance.now() - t0 };
  main.dataset.loadedMs = String(Math.round(performance.now() - t0));
  // Live: the server pushes a hint when a run of the project changes; the page re-reads
  // its own (bounded) page, at most every 300 ms.
  let pending = null;
  liveStream(projectPath("/stream"), (name) => {
    if (name === "hello") live.textContent = "live";
    if (name === "reconnect") live.textContent = "reconnecting…";
    if (name === "changed" && !pending) {
      pending = setTimeout(() => { pending = null; load().catch(() => {}); }, 300);
    }
  }, ctl);
}
