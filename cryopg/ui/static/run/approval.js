// The inline approval form, generated from the node's JSON Schema (an object of
// properties); checked here first, and the server checks again. Approve or reject, each
// with an optional comment that history keeps.
import { api } from "../api.js";
import { el } from "../dom.js";
import { S } from "../session.js";
import { schemaFields } from "../schemafields.js";

export function approvalForm(node, base, refresh) {
  const msg = el("p", { class: "error", id: `approval-error-${node.id}`, role: "status" });
  const { fields, collect } = schemaFields(node.approval.fields || {}, `approval-${node.id}`);
  const comment = el("textarea", { name: "comment", rows: 2, maxlength: 2000 });
  const path = `${base}/approvals/${encodeURIComponent(node.id)}`;
  async function send(url, body, done) {
    try {
      await api(url, { method: "POST", body });
      msg.className = "muted"; msg.textContent = done;
      refresh();
    } catch (e) { msg.className = "error"; msg.textContent = e.message; }
  }
  const reject = el("button", { type: "button", class: "danger", id: `reject-${node.id}`, onclick: () => {
    msg.className = "error"; msg.textContent = "";
    const c = comment.value.trim();
    send(`${path}/reject`, c ? { comment: c } : {}, "rejected");
  } }, "Reject");
  // novalidate: the fields are checked here, with a message, never the browser's bubble.
  return el("form", { class: "approval", id: `approval-${node.id}`, novalidate: true,
                      oninput: () => { if (msg.className === "error") msg.textContent = ""; }, onsubmit: (ev) => {
    ev.preventDefault();
    msg.textContent = "";
    let answer;
    try { answer = collect(); } catch (e) { msg.className = "error"; msg.textContent = e.message; return; }
    const c = comment.value.trim();
    send(path, c ? { ...answer, comment: c } : answer, "approved");
  } }, el("strong", {}, `Approval: ${node.id}`),
     // several approvers needed: how many have approved so far (e.g. "1 of 2 approvals")
     (node.approval.needed || 1) > 1 ? el("span", { class: "muted" }, ` ${(node.approval.approvals || []).filter((a) => a.answer === "approved").length} of ${node.approval.needed} approvals`) : null,
     fields, el("label", {}, "Comment (kept in history)", comment),
     S.canAct ? el("div", { class: "row" }, el("button", { type: "submit" }, "Approve"), reject)
              : el("span", { class: "muted" }, "members can approve"), msg);
}
