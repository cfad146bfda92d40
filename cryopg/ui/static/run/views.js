// The run page's "graph" slot: views of a run's shape registered by modules, shown as
// tabs above the checkpoints. The pipeline strip is the first; a DAG view or a Gantt
// view registers the same way: registerView({ id, label, applies(run), create(ctx) }),
// where create returns { el, update(run) } and ctx is { base, signal, refresh }.
import { el } from "../dom.js";

const VIEWS = [];

export function registerView(view) { VIEWS.push(view); }

// Builds the slot for a run; returns { el, update(run) }.
export function viewSlot(ctx) {
  const section = el("section", { id: "views", "aria-label": "run views" });
  let made = null;  // [{ view, inst, tab, panel }]
  let active = null;
  function build(run) {
    made = VIEWS.filter((v) => v.applies(run)).map((view) => {
      const inst = view.create(ctx);
      const panel = el("div", { class: "view-panel", id: `view-${view.id}`, role: "tabpanel" }, inst.el);
      const tab = el("button", { role: "tab", class: "view-tab", id: `tab-${view.id}`,
        onclick: () => show(view.id) }, view.label);
      return { view, inst, tab, panel };
    });
    if (!made.length) return;
    section.replaceChildren(made.length > 1 ? el("div", { role: "tablist", class: "tabs" }, made.map((m) => m.tab)) : "",
                            ...made.map((m) => m.panel));
    show(made[0].view.id);
  }
  function show(id) {
    active = id;
    for (const m of made) {
      m.panel.hidden = m.view.id !== id;
      m.tab.setAttribute("aria-selected", String(m.view.id === id));
    }
  }
  return {
    el: section,
    update(run) {
      if (!made) build(run);
      for (const m of made) m.inst.update(run);
      return active;
    },
  };
}
