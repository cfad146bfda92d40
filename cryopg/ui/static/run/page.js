// The run page: header, the views slot (pipeline strip; DAG and Gantt views go there),
// checkpoints, timeline, log, state and children, all kept live from the run's stream.
import { api, apiText, liveStream, projectPath } from "../api.js";
import { el } from "../dom.js";
import { artifactsView } from "./artifacts.js";
import { headerView } from "./header.js";
import { LOG_TAIL_BYTES, logView } from "./log.js";
import { jobNames } from "./names.js";
import { checkpointStatus, passes, renderCheckpoints, renderState, renderTimeline } from "./sections.js";
import { viewSlot } from "./views.js";
import { TERMINAL } from "../status.js";
import "./strip.js";  // registers the strip view
import "./dag.js";  // the DAG and Gantt views (tabs after the strip)
import "./gantt.js";

// q: the address's query; `line=CHUNK.OFFSET` (a log line's link) opens the log there.
export async function runPage(main, runId, ctl, q = new URLSearchParams()) {
  const base = projectPath(`/runs/${encodeURIComponent(runId)}`);
  let run = await api(base, { signal: ctl.signal });
  const ctx = { base, signal: ctl.signal, refresh: () => refresh() };
  const header = headerView(ctx);
  const views = viewSlot(ctx);
  const checkpoints = el("ol", { class: "checkpoints", id: "checkpoints" });
  const cpSection = el("section", { id: "checkpoints-section" }, el("h2", {}, "Checkpoints"), checkpoints);
  const timeline = el("ol", { class: "timeline", id: "timeline" });
  const runHref = `#/run/${encodeURIComponent(runId)}`;
  const log = logView({ base, filename: run.workflow || run.filename, ranges: run.kind !== "graph",
                        lineHref: (origin) => `${runHref}?line=${origin}` });
  const state = el("section", { id: "state" });
  const children = el("section", { id: "children" });
  const artifacts = artifactsView(ctx);
  const isGraph = run.kind === "graph";
  cpSection.hidden = isGraph;  // a graph's engine records nodes, not durable calls
  // Shown while the page's stream is down, so an open page says the server is away.
  const conn = el("p", { class: "error", id: "run-connection", role: "status", hidden: true });
  main.replaceChildren(conn, header.el, views.el, cpSection, el("h2", {}, "Timeline"), timeline,
    log.el, artifacts.el, el("h2", {}, "State"), state, children);

  // A graph's job run is named for its node, not for the job script's file.
  let title = run.workflow || run.filename;
  if (run.parent_run_id) {
    const names = await jobNames(run.parent_run_id, ctl.signal);
    if (names[run.id]) title = names[run.id];
  }
  document.title = `${title} · cryopg`;

  let seenPasses = null, openStep = null;
  async function renderAll() {
    // Read before drawing anything, so the header, timeline and checkpoints change in
    // one frame (a run shown succeeded never lists its checkpoints short of the last).
    const cps = isGraph ? null : (await api(`${base}/checkpoints`, { signal: ctl.signal })).checkpoints;
    header.update(run, title);
    log.emptyText(!TERMINAL.has(run.status) ? "No output yet."
      : isGraph ? "No job of this graph wrote to the log." : "The run printed nothing.");
    views.update(run);
    renderTimeline(timeline, run);
    const ps = passes(run.history || []);
    if (seenPasses !== null && ps.length > seenPasses) {
      const p = ps[ps.length - 1];
      log.marker(`── pass ${p.n}: woken by ${p.why}, the script replays from the top (recorded steps print their output again) ──`);
    }
    seenPasses = ps.length;
    if (!isGraph) {
      renderCheckpoints(checkpoints, cps, run);
      const running = cps.find((c) => checkpointStatus(c, run) === "running");
      const key = running ? `${running.seq}` : null;
      if (key !== openStep) {
        if (running) log.openSection(`step ${running.name}${running.label ? " · " + running.label : ""}`);
        else log.closeSection();
        openStep = key;
      }
    }
    await Promise.all([renderState(state, children, run, base, ctl.signal), artifacts.update()]);
  }

  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      run = await api(base, { signal: ctl.signal });
      await renderAll();
      if (isGraph) graphLog();
    } catch (_) { /* the next push retries */ }
    busy = false;
    if (again) { again = false; refresh(); }
  }
  await renderAll();
  // A log line's link: the log opens at that line (the ranges around it), highlighted.
  const line = /^(\d+)\.(\d+)$/.exec(q.get("line") || "");
  if (line && !isGraph) {
    log.el.scrollIntoView();
    log.openLine(Number(line[1]), Number(line[2]));
  }

  // A graph's log is its node jobs' logs, each line prefixed [node]; read beside the
  // page's refreshes, never holding them up.
  let logBusy = false;
  function graphLog() {
    if (logBusy) return;
    logBusy = true;
    // times=1: one JSON line per chunk with when it was stored, for the timestamps toggle.
    apiText(`${base}/logs?times=1`, ctl.signal).then((t) => log.setText(t.split("\n").filter(Boolean).map((l) => JSON.parse(l))),
      () => {}).finally(() => { logBusy = false; });
  }
  if (isGraph) graphLog();
  let after = 0;
  let pending = null;
  const later = () => { if (!pending) pending = setTimeout(() => { pending = null; refresh(); }, 100); };
  // A run read as finished changes no more: its stream's hello and end need no re-read.
  const settled = (data) => TERMINAL.has(run.status) && data && data.status === run.status;
  liveStream(`${base}/stream?tail=${LOG_TAIL_BYTES}`, (name, data) => {
    if (name === "hello") {
      conn.hidden = true;
      // The stream reports changes after its baseline, taken before hello; anything
      // between the first read and then is in this read.
      if (!settled(data)) refresh();
    } else if (name === "reconnect") {
      conn.hidden = false;
      conn.textContent = `Lost the connection to the server (${data.error}); trying again in ${Math.round(data.delay_ms / 1000)} s. What is shown may be out of date.`;
    } else if (name === "tail" && !isGraph) {
      log.tail(data);
      after = 0;
    } else if (name === "log" && !isGraph) {
      if (data.id > after) { after = data.id; log.chunk(data.text, data.at, data.id); }
    } else if (name === "changed") {
      later();
    } else if (name === "end" && !settled(data)) {
      later();
    }
  }, ctl);
}
