// What an allocation says in words: a Deep-Edge update's shards and batches per worker, or
// Thief's GPU shares of one Ekya window on an edge server.
import { bar, el } from "./dom.js";
import { describe, num } from "./format.js";

export const shareUnit = (detail) => (detail.device === "cpu" ? " GPU-equivalents (CPU threads)" : " GPUs");

// A node's newest allocation (GET /v1/nodes), one line.
export function allocationText(a) {
  return a.deployment + (a.version ? " v" + a.version : "") +
    (a.window !== null && a.window !== undefined ? " w" + a.window : "") +
    (a.policy === "ekya-window"
      ? ": inference " + num(a.inference_gpus) + " (" + (a.inference_config || "—") + "), retraining " +
        num(a.retraining_gpus) + " (" + (a.retraining_config || "no retraining") + ") of " + num(a.gpus)
      : a.selected === false ? " (not selected)" : ": shard " + a.shard + ", batch " + a.batch);
}

// Thief's shares of one Ekya window: a deployment's allocation event on the edge server.
export function ekyaShares(detail) {
  const gpus = detail.gpus || 1;
  // An edge server's window lists every stream on the server; the deployment's own is marked.
  const own = (s) => (detail.stream === s.stream_id && detail.streams.length > 1 ? " (this deployment)" : "");
  return el("span", null, ...(detail.streams || []).map((s) => el("span", { class: "shares", dataset: { stream: s.stream_id } },
    s.stream_id + own(s) + ": ", bar(s.inference_gpus / gpus), " inference " + num(s.inference_gpus) +
    " (" + (s.inference_config || "—") + ") ", bar(s.retraining_gpus / gpus, "gpu"),
    " retraining " + num(s.retraining_gpus) + " (" + (s.retraining_config || "no retraining") + ") ")),
    "of " + num(gpus) + shareUnit(detail) + " on " + (detail.server || "the edge server") +
    (detail.replans ? ", re-planned " + detail.replans + "x" : ""));
}

// An allocation event's detail, one line.
export function describeAllocation(detail) {
  if (detail && Array.isArray(detail.streams)) {
    return (detail.policy || "ekya-window") + " on " + (detail.server || "the edge server") + ": " +
      detail.streams.map((s) => s.stream_id + ": inference " + num(s.inference_gpus) + " (" + (s.inference_config || "—") +
        "), retraining " + num(s.retraining_gpus) + " (" + (s.retraining_config || "no retraining") + ")").join("; ") +
      " of " + num(detail.gpus) + shareUnit(detail);
  }
  if (detail && Array.isArray(detail.workers)) {
    const workers = detail.workers.filter((w) => w.selected !== false)
      .map((w) => w.node + ": shard " + w.shard + ", batch " + w.batch);
    const left = detail.workers.filter((w) => w.selected === false).map((w) => w.node);
    return (detail.policy ? detail.policy + ": " : "") + workers.join("; ") +
      (left.length ? "; not selected: " + left.join(", ") : "") + (detail.ps ? "; parameter server " + detail.ps : "");
  }
  return describe(detail || {});
}
