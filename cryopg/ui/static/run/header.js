// The run page's header: what the run is and how it ended, and the actions on it
// (cancel, signal, run again) for Members.
import { api } from "../api.js";
import { el, json } from "../dom.js";
import { S } from "../session.js";
import { badge, substate } from "../status.js";
import { duration, when } from "../time.js";
import { rerunEdited } from "./rerun.js";

export function headerView({ base, refresh }) {
  const root = el("section", { id: "run-header" });
  let actionsEl = null;  // built once, so a live re-render never wipes what is being typed
  let againEl = null;

  function actions() {
    const cancel = el("button", { class: "danger", id: "cancel", onclick: async () => {
      if (!confirm("Cancel this run?")) return;
      await api(`${base}/cancel`, { method: "POST", body: {} });
      refresh();
    } }, "Cancel");
    const sigName = el("input", { id: "signal-name", placeholder: "signal name", "aria-label": "signal name" });
    const sigPayload = el("input", { id: "signal-payload", placeholder: "payload (JSON)", "aria-label": "signal payload (JSON)" });
    const sigMsg = el("span", { class: "error", id: "signal-error", role: "status" });
    const form = el("form", { id: "signal-form", class: "signal-form", onsubmit: async (ev) => {
      ev.preventDefault();
      sigMsg.className = "error"; sigMsg.textContent = "";
      const name = sigName.value.trim();
      if (!name) { sigMsg.textContent = "give the signal a name"; sigName.focus(); return; }
      let payload = null;
      if (sigPayload.value.trim()) {
        try { payload = JSON.parse(sigPayload.value); } catch (_) { sigMsg.textContent = "payload is not JSON"; return; }
      }
      try {
        await api(`${base}/signal/${encodeURIComponent(name)}`, { method: "POST", body: { payload } });
        sigName.value = ""; sigPayload.value = "";
        sigMsg.className = "muted"; sigMsg.textContent = `sent ${name}`;
      } catch (e) { sigMsg.textContent = e.message; }
    } }, sigName, sigPayload, el("button", { type: "submit" }, "Send signal"), sigMsg);
    return el("div", { class: "actions" }, cancel, form);
  }

  let latest = null;  // the run as last shown, for the edited re-run's dialog
  function again() {
    const msg = el("span", { class: "error", id: "run-again-error" });
    return el("div", { class: "actions" }, el("button", { id: "run-again", onclick: async () => {
      try {
        const got = await api(`${base}/run-again`, { method: "POST", body: {} });
        location.hash = `#/run/${encodeURIComponent(got.id)}`;
      } catch (e) { msg.textContent = e.message; }
    } }, "Run again with the same input"), rerunEdited(base, () => latest), msg);
  }

  // The parts are built once and each replaced only when what it shows changes: a live
  // `hello` or change re-renders nothing under the pointer, so a click on Cancel is
  // never lost to a button taken out and put back (issue 38).
  const h1 = el("h1", {});
  const facts = el("div", { class: "kv" });
  const actionSlot = el("div", {}), againSlot = el("div", {});
  root.append(h1, facts, actionSlot, againSlot);
  let shown = { head: null, facts: null, actions: null, again: null };
  const put = (part, key, slot, make) => {
    if (shown[part] === key) return;
    shown[part] = key;
    slot.replaceChildren(...make());
  };

  return {
    el: root,
    update(run, title) {
      latest = run;
      const live = S.canAct && !run.finished;
      if (!live) actionsEl = null;
      else if (!actionsEl) actionsEl = actions();
      if (S.canAct && !againEl) againEl = again();
      put("actions", live, actionSlot, () => (actionsEl ? [actionsEl] : []));
      put("again", Boolean(againEl), againSlot, () => (againEl ? [againEl] : []));
      put("head", `${title}|${run.id}`, h1, () => [title, " ", el("span", { class: "muted run-id" }, run.id)]);
      const ended = run.status === "failed" || run.status === "cancelled";
      const hasCode = ended && run.exit_code !== null && run.exit_code !== undefined;
      // Why it ended, in words: the engine's reason, else what the exit code says.
      const reason = run.error || (hasCode && run.exit_code ? `the script exited with code ${run.exit_code}` : null);
      const factsKey = JSON.stringify([run.status, substate(run), run.attempt, run.parent_run_id, run.triggered_by,
        run.trigger, run.started_at, run.finished_at, hasCode && run.exit_code, reason, run.trace_id, run.input, run.outputs]);
      put("facts", factsKey, facts, () => {
        const trigger = run.parent_run_id
          ? el("a", { href: `#/run/${encodeURIComponent(run.parent_run_id)}` }, `parent ${run.parent_run_id.split(":").pop()}`)
          : run.triggered_by ? `${run.triggered_by.kind} ${run.triggered_by.name || ""}` : run.trigger || "manual";
        const kv = [
          "status", el("span", { id: "run-status" }, badge(run.status), " ", el("span", { class: "muted" }, substate(run))),
          // The pass that runs or ran (a claim starts one); the timeline says "next" for a
          // wake whose pass has not begun.
          "pass", el("span", { id: "run-pass" }, String(run.attempt)),
          "trigger", trigger,
          "started", run.started_at ? el("span", { id: "run-started" }, when(run.started_at), " (", duration(run.started_at, run.finished_at, "run-duration"), ")") : "not yet",
          hasCode ? "exit code" : null,
          hasCode ? el("span", { id: "run-exit-code", class: "error" }, String(run.exit_code)) : null,
          reason ? "reason" : null, reason ? el("span", { class: "error", id: "run-error" }, reason) : null,
          run.trace_id ? "trace" : null, run.trace_id ? el("code", { id: "run-trace" }, run.trace_id) : null,
          "input", json(run.input, "run-input"),
          "outputs", json(run.outputs || {}, "run-outputs"),
        ].filter((x) => x !== null);
        return kv.map((x, i) => el("span", { class: i % 2 ? "" : "muted" }, x));
      });
    },
  };
}
