// The inline approval form, generated from the node's JSON Schema (an object of
// properties); checked here first, and the server checks again. Approve or reject, each
// with an optional comment that history keeps.
import { api } from "../api.js";
import { el } from "../dom.js";
import { S } from "../session.js";

export function approvalForm(node, base, refresh) {
  const schema = node.approval.fields || {};
  const props = schema.properties || {};
  const required = new Set(schema.required || []);
  const inputs = {};
  const msg = el("p", { class: "error", id: `approval-error-${node.id}`, role: "status" });
  const fields = Object.entries(props).map(([name, spec]) => {
    let input;
    if (spec.type === "boolean") input = el("input", { type: "checkbox", name });
    else if (Array.isArray(spec.enum)) input = el("select", { name }, ["", ...spec.enum].map((v) => el("option", { value: v }, v)));
    else input = el("input", { name, type: spec.type === "number" || spec.type === "integer" ? "number" : "text" });
    inputs[name] = [input, spec];
    return el("label", {}, `${spec.title || name}${required.has(name) ? " *" : ""}`, input,
              spec.description ? el("span", { class: "muted" }, spec.description) : "");
  });
  const comment = el("textarea", { name: "comment", rows: 2, maxlength: 2000 });
  function collect() {
    const out = {};
    for (const [name, [input, spec]] of Object.entries(inputs)) {
      if (spec.type === "boolean") { out[name] = input.checked; continue; }
      const v = input.value;
      if (v === "") { if (required.has(name)) throw new Error(`${name} is required`); continue; }
      if (spec.type === "integer" || spec.type === "number") {
        const n = Number(v);
        if (!Number.isFinite(n) || (spec.type === "integer" && !Number.isInteger(n))) throw new Error(`${name} must be ${spec.type === "integer" ? "an integer" : "a number"}`);
        if (spec.minimum !== undefined && n < spec.minimum) throw new Error(`${name} must be at least ${spec.minimum}`);
        if (spec.maximum !== undefined && n > spec.maximum) throw new Error(`${name} must be at most ${spec.maximum}`);
        out[name] = n;
      } else {
        if (spec.minLength !== undefined && v.length < spec.minLength) throw new Error(`${name} must be at least ${spec.minLength} characters`);
        if (spec.maxLength !== undefined && v.length > spec.maxLength) throw new Error(`${name} must be at most ${spec.maxLength} characters`);
        if (spec.pattern && !new RegExp(spec.pattern).test(v)) throw new Error(`${name} does not match ${spec.pattern}`);
        out[name] = v;
      }
    }
    return out;
  }
  const path = `${base}/approvals/${encodeURIComponent(node.id)}`;
  async function send(url, body, done) {
    try {
      await api(url, { method: "POST", body });
      msg.className = "muted"; msg.textContent = done;
      refresh();
    } catch (e) { msg.className = "error"; msg.textContent = e.message; }
  }
  const reject = el("button", { type: "button", class: "danger", id: `reject-${node.id}`, onclick: () => {
    msg.textContent = "";
    const c = comment.value.trim();
    send(`${path}/reject`, c ? { comment: c } : {}, "rejected");
  } }, "Reject");
  return el("form", { class: "approval", id: `approval-${node.id}`, onsubmit: (ev) => {
    ev.preventDefault();
    msg.textContent = "";
    let answer;
    try { answer = collect(); } catch (e) { msg.textContent = e.message; return; }
    const c = comment.value.trim();
    send(path, c ? { ...answer, comment: c } : answer, "approved");
  } }, el("strong", {}, `Approval: ${node.id}`), fields, el("label", {}, "Comment (kept in history)", comment),
     S.canAct ? el("div", { class: "row" }, el("button", { type: "submit" }, "Approve"), reject)
              : el("span", { class: "muted" }, "members can approve"), msg);
}
