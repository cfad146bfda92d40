// A run's status as a badge, and what it waits for in words.
import { el } from "./dom.js";
import { fmtTime } from "./time.js";

export function badge(status) { return el("span", { class: `badge s-${status}` }, status); }

export function substate(r) {
  const until = r.wake_at ? ` until ${fmtTime(r.wake_at)}` : "";
  if (r.status === "parked") {
    if (r.substate === "sleeping") return `sleeping${until}`;
    if (r.substate === "retry-backoff") return `retrying${r.wake_at ? " at " + fmtTime(r.wake_at) : ""}`;
    return (r.substate || "").replace(/-/g, " ") + (r.substate === "awaiting-event" ? until : "");
  }
  if (r.status === "queued") return r.queue_position ? `awaiting lease, position ${r.queue_position}` : "awaiting lease";
  return r.substate || "";
}

export const LIVE = new Set(["pending", "queued", "running", "parked"]);
// The statuses a run never leaves (cryo.is_terminal).
export const TERMINAL = new Set(["succeeded", "failed", "cancelled", "unreadable"]);
