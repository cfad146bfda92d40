// Schedules, webhooks and event handlers, made and changed in the browser: create, edit,
// pause/resume and delete each; start a schedule's workflow now; deliver a stored
// webhook delivery again. Every button is a call to the public API, which checks roles
// itself: Members change schedules and handlers, run now and redeliver; Admins change
// webhooks; a Viewer sees the lists and no buttons. A schedule or handler a workflow's
// own `on:` registered belongs to that workflow and is changed by editing it.
import { api, projectPath } from "./api.js";
import { el } from "./dom.js";
import { S } from "./session.js";
import { fmtTime, when } from "./time.js";

const table = (id, heads, rows, empty) => rows.length
  ? el("div", { class: "scroll-x" }, el("table", { id },
      el("thead", {}, el("tr", {}, heads.map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows)))
  : el("p", { class: "muted", id }, empty);
const wfLink = (name) => name ? el("a", { href: `#/workflows/${encodeURIComponent(name)}` }, name) : "—";
const runLink = (id, text) => el("a", { href: `#/run/${encodeURIComponent(id)}` }, text || id.split(":").pop());
const paused = () => el("span", { class: "badge s-parked" }, "paused");
const field = (label, input) => el("label", {}, label, input);

async function workflowNames(signal) {
  const { workflows } = await api(projectPath("/workflows"), { signal });
  return workflows.map((w) => w.name);
}

function workflowSelect(names, value, none) {
  return el("select", { name: "workflow" }, none ? el("option", { value: "" }, none) : "",
    names.map((n) => el("option", { value: n, selected: n === value }, n)));
}

// A form that sends what build() returns and reloads the page, or shows the refusal.
function form(id, title, fields, send, after) {
  const msg = el("p", { class: "error", role: "alert" });
  const f = el("form", { id, class: "card trigger-form", novalidate: true, onsubmit: async (ev) => {
    ev.preventDefault();
    msg.textContent = "";
    try { await after(await send(f)); } catch (e) { msg.textContent = e.message; }
  } }, el("h2", {}, title), fields, el("div", { class: "actions" },
    el("button", { type: "submit" }, "Save"),
    el("button", { type: "button", class: "form-cancel", onclick: () => f.remove() }, "Cancel")), msg);
  return f;
}

const act = (cls, label, fn, note) => el("button", { class: cls, type: "button", onclick: async () => {
  try { await fn(); } catch (e) { note(e.message, true); }
} }, label);

function notice() {
  const p = el("p", { id: "trigger-msg", role: "status" });
  const say = (text, bad) => { p.className = bad ? "error" : "muted"; p.replaceChildren(...[text].flat()); };
  return [p, say];
}

// -- schedules -----------------------------------------------------------------------------

function scheduleForm(names, s, done) {
  const isCron = !s || s.cron;
  const kind = el("select", { name: "kind" }, el("option", { value: "cron", selected: isCron }, "cron"),
    el("option", { value: "every", selected: !isCron }, "every"));
  const cron = el("input", { name: "cron", value: s && s.cron ? s.cron : "0 * * * *", placeholder: "0 9 * * 1-5" });
  const tz = el("input", { name: "timezone", value: s ? s.timezone : "UTC" });
  const every = el("input", { name: "every", value: s && s.every_seconds ? `${s.every_seconds}s` : "1h", placeholder: "10m" });
  const input = el("textarea", { name: "input", rows: 2, placeholder: s ? "(unchanged)" : "{}" });
  const name = el("input", { name: "name", value: s ? s.name : "", readonly: Boolean(s), required: true });
  const shown = () => { cron.parentElement.hidden = tz.parentElement.hidden = kind.value !== "cron"; every.parentElement.hidden = kind.value === "cron"; };
  kind.addEventListener("change", shown);
  const f = form(s ? "schedule-edit" : "schedule-form", s ? `Edit schedule ${s.name}` : "New schedule", [
    field("Name", name), field("Workflow", workflowSelect(names, s && s.workflow)), field("Timing", kind),
    field("Cron expression", cron), field("Time zone", tz), field("Every (30s, 10m, 1h)", every),
    field("Input (JSON)", input)], async (f) => {
    const body = { workflow: f.querySelector('[name="workflow"]').value };
    if (kind.value === "cron") { body.cron = cron.value.trim(); body.timezone = tz.value.trim() || "UTC"; }
    else body.every = every.value.trim();
    if (input.value.trim()) {
      try { body.input = JSON.parse(input.value); } catch (_) { throw new Error("the input is not JSON"); }
    }
    if (s) return api(projectPath(`/schedules/${encodeURIComponent(s.name)}`), { method: "PUT", body });
    return api(projectPath("/schedules"), { method: "POST", body: { ...body, name: name.value.trim() } });
  }, done);
  queueMicrotask(shown);
  return f;
}

export async function schedulesEditPage(main, ctl) {
  const [msg, say] = notice();
  const load = async () => {
    const [{ schedules }, names] = await Promise.all([api(projectPath("/schedules"), { signal: ctl.signal }),
      S.canAct ? workflowNames(ctl.signal) : []]);
    const slot = el("div", { id: "schedule-form-slot" });
    const open = (s) => slot.replaceChildren(scheduleForm(names, s, () => { say(s ? `Schedule ${s.name} saved.` : "Schedule created."); load(); }));
    const call = (s, rest, opts) => api(projectPath(`/schedules/${encodeURIComponent(s.name)}${rest}`), opts || { method: "POST", body: {} });
    main.replaceChildren(el("h1", {}, "Schedules"), msg,
      S.canAct ? el("p", {}, el("button", { id: "new-schedule", onclick: () => open(null) }, "New schedule")) : "", slot,
      table("schedules", ["Name", "Workflow", "When", "Next fire times", "Last run", ""],
        schedules.map((s) => el("tr", { "data-schedule": s.name }, el("td", {}, s.name,
            s.registered_by ? el("div", { class: "muted" }, `from ${s.registered_by}'s on:`) : ""),
          el("td", {}, wfLink(s.workflow)),
          el("td", {}, s.cron ? `${s.cron} (${s.timezone})` : `every ${s.every_seconds} s`),
          el("td", { class: "next-fires" }, s.paused ? paused()
            : s.next_fires && s.next_fires.length ? el("ol", { class: "fires" }, s.next_fires.map((t) => el("li", {}, el("time", { datetime: t }, fmtTime(t)))))
            : when(s.next_fire_at)),
          el("td", {}, s.last_run_id ? runLink(s.last_run_id, fmtTime(s.last_fire_at)) : "—"),
          el("td", { class: "row-actions" }, S.canAct ? [
            act("run-now", "Run now", async () => {
              const got = await call(s, "/run");
              say(got.run_id ? ["Started ", runLink(got.run_id), "."] : "No run: the workflow's if was false.");
            }, say),
            act("pause-resume", s.paused ? "Resume" : "Pause", async () => { await call(s, s.paused ? "/resume" : "/pause"); load(); }, say),
            s.registered_by ? "" : act("edit", "Edit", async () => open(s), say),
            s.registered_by ? "" : act("delete", "Delete", async () => {
              if (!confirm(`Delete schedule ${s.name}?`)) return;
              await call(s, "", { method: "DELETE" }); say(`Schedule ${s.name} deleted.`); load();
            }, say)] : ""))),
        "No schedules."));
  };
  await load();
}

// -- webhooks ------------------------------------------------------------------------------

// What a stored delivery did, in words (cryo.deliver_webhook's outcomes).
const OUTCOMES = {
  started: "accepted: started a run",
  skipped: "accepted, no run: the workflow's if was false",
  ignored: "accepted, no run: the workflow's on.webhook leaves this event out",
  published: "accepted: published on the bus",
  paused: "accepted, no run: the webhook was paused",
};

function webhookForm(names, w, done) {
  const name = el("input", { name: "name", value: w ? w.name : "", readonly: Boolean(w), required: true });
  const status = el("input", { name: "status_url", value: w && w.status_url ? w.status_url : "", placeholder: "https://… (optional)" });
  return form(w ? "webhook-edit" : "webhook-form", w ? `Edit webhook ${w.name}` : "New webhook", [
    field("Name", name), field("Workflow", workflowSelect(names, w && w.workflow, "none: publish on the bus")),
    field("Commit status URL", status)], async (f) => {
    const body = { workflow: f.querySelector('[name="workflow"]').value || null, status_url: status.value.trim() || null };
    if (w) return api(projectPath(`/webhooks/${encodeURIComponent(w.name)}`), { method: "PUT", body });
    return api(projectPath("/webhooks"), { method: "POST", body: { ...body, name: name.value.trim() } });
  }, done);
}

export async function webhooksEditPage(main, ctl) {
  const [msg, say] = notice();
  const load = async () => {
    const [{ webhooks }, { deliveries }, names] = await Promise.all([
      api(projectPath("/webhooks"), { signal: ctl.signal }),
      api(projectPath("/webhook-deliveries?limit=50"), { signal: ctl.signal }),
      S.isAdmin ? workflowNames(ctl.signal) : []]);
    const slot = el("div", { id: "webhook-form-slot" });
    const open = (w) => slot.replaceChildren(webhookForm(names, w, (got) => {
      // The signing secret is shown once, by the create call, and never again.
      say(got && got.secret ? ["Webhook created. Its signing secret (shown once): ", el("code", { id: "webhook-secret" }, got.secret)]
        : `Webhook ${w ? w.name : ""} saved.`);
      load();
    }));
    const call = (w, rest, opts) => api(projectPath(`/webhooks/${encodeURIComponent(w.name)}${rest}`), opts || { method: "POST", body: {} });
    main.replaceChildren(el("h1", {}, "Webhooks"), msg,
      S.isAdmin ? el("p", {}, el("button", { id: "new-webhook", onclick: () => open(null) }, "New webhook")) : "", slot,
      table("webhooks", ["Name", "Workflow", "URL", "Deliveries", "Last delivery", ""],
        webhooks.map((w) => el("tr", { "data-webhook": w.name }, el("td", {}, w.name, w.paused ? [" ", paused()] : ""),
          el("td", {}, w.workflow ? wfLink(w.workflow) : "the bus"),
          el("td", {}, el("code", { class: "url" }, location.origin + w.path)), el("td", {}, String(w.deliveries ?? 0)),
          el("td", {}, when(w.last_delivery_at)),
          el("td", { class: "row-actions" }, S.isAdmin ? [
            act("pause-resume", w.paused ? "Resume" : "Pause", async () => { await call(w, w.paused ? "/resume" : "/pause"); load(); }, say),
            act("edit", "Edit", async () => open(w), say),
            act("delete", "Delete", async () => {
              if (!confirm(`Delete webhook ${w.name} and its deliveries?`)) return;
              await call(w, "", { method: "DELETE" }); say(`Webhook ${w.name} deleted.`); load();
            }, say)] : ""))),
        "No webhooks."),
      el("h2", {}, "Recent deliveries"),
      table("webhook-deliveries", ["When", "Webhook", "Event", "Outcome", "Run or event", ""], deliveries.map((d) =>
        el("tr", { "data-outcome": d.outcome || "", "data-delivery": String(d.id) }, el("td", {}, when(d.created_at)), el("td", {}, d.webhook),
          el("td", {}, d.event), el("td", { class: "outcome" }, OUTCOMES[d.outcome] || d.outcome || "being delivered",
            d.redelivery_of ? el("div", { class: "muted" }, `redelivery of #${d.redelivery_of}${d.redelivered_by ? ` by ${d.redelivered_by}` : ""}`) : ""),
          el("td", {}, d.run_id ? runLink(d.run_id) : d.event_id ? `event ${d.event_id}` : "—"),
          el("td", {}, S.canAct && d.redeliverable ? act("redeliver", "Redeliver", async () => {
            const got = await api(projectPath(`/webhook-deliveries/${d.id}/redeliver`), { method: "POST", body: {} });
            say(got.run_id ? ["Delivered again: started ", runLink(got.run_id), "."] : `Delivered again: ${OUTCOMES[got.outcome] || got.outcome}.`);
            load();
          }, say) : ""))),
        "No deliveries yet."),
      el("p", { class: "muted" }, "A delivery without a valid signature is refused (401) and not recorded."));
  };
  await load();
}

// -- event handlers ------------------------------------------------------------------------

function handlerForm(names, h, done) {
  const name = el("input", { name: "name", value: h ? h.name : "", readonly: Boolean(h), required: true });
  const event = el("input", { name: "event", value: h ? h.event : "", placeholder: "deploy.done", required: true });
  return form(h ? "handler-edit" : "handler-form", h ? `Edit handler ${h.name}` : "New event handler", [
    field("Name", name), field("Event", event), field("Workflow", workflowSelect(names, h && h.workflow))], async (f) => {
    const body = { event: event.value.trim(), workflow: f.querySelector('[name="workflow"]').value };
    if (h) return api(projectPath(`/handlers/${encodeURIComponent(h.name)}`), { method: "PUT", body });
    return api(projectPath("/handlers"), { method: "POST", body: { ...body, name: name.value.trim() } });
  }, done);
}

export async function handlersEditPage(main, ctl) {
  const [msg, say] = notice();
  const load = async () => {
    const [{ handlers }, names] = await Promise.all([api(projectPath("/handlers"), { signal: ctl.signal }),
      S.canAct ? workflowNames(ctl.signal) : []]);
    const slot = el("div", { id: "handler-form-slot" });
    const open = (h) => slot.replaceChildren(handlerForm(names, h, () => { say(h ? `Handler ${h.name} saved.` : "Handler created."); load(); }));
    const call = (h, rest, opts) => api(projectPath(`/handlers/${encodeURIComponent(h.name)}${rest}`), opts || { method: "POST", body: {} });
    main.replaceChildren(el("h1", {}, "Event handlers"), msg,
      S.canAct ? el("p", {}, el("button", { id: "new-handler", onclick: () => open(null) }, "New handler")) : "", slot,
      table("handlers", ["Name", "Event", "Workflow", "Registered by", "Since", ""],
        handlers.map((h) => el("tr", { "data-handler": h.name }, el("td", {}, h.name, h.paused ? [" ", paused()] : ""),
          el("td", {}, h.event), el("td", {}, wfLink(h.workflow)),
          el("td", {}, h.registered_by || "—"), el("td", {}, when(h.created_at)),
          el("td", { class: "row-actions" }, S.canAct ? [
            act("pause-resume", h.paused ? "Resume" : "Pause", async () => { await call(h, h.paused ? "/resume" : "/pause"); load(); }, say),
            h.registered_by ? "" : act("edit", "Edit", async () => open(h), say),
            h.registered_by ? "" : act("delete", "Delete", async () => {
              if (!confirm(`Delete handler ${h.name}?`)) return;
              await call(h, "", { method: "DELETE" }); say(`Handler ${h.name} deleted.`); load();
            }, say)] : ""))),
        "No handlers."));
  };
  await load();
}
