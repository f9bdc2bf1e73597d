// The health summary at the top (deployments, jobs, nodes, the service) and the
// connection's state: a service that stopped answering is said to be unreachable.
import { $, accuracyClass, el } from "./dom.js";
import { known, pct } from "./format.js";
import { RUNNING } from "./jobs.js";
import { route } from "./router.js";
import { state } from "./state.js";

const REFRESH_S = 2;
let lastOk = null;    // when the service last answered a whole round
let downSince = null; // when it stopped answering

// A deployment's accuracy: its newest window's, else (that window had no labelled sample)
// the last scored window's; null only when no window was ever scored.
export const scoredAccuracy = (d) => (known(d.last_accuracy) ? d.last_accuracy : d.last_scored_accuracy ?? null);

export function deploymentHealth(d) {
  if (d.status === "STOPPED") return "idle";
  const value = scoredAccuracy(d);
  if (known(value) && known(d.accuracy_threshold) && value < d.accuracy_threshold) return "bad";
  if (d.status !== "ACTIVE" || accuracyClass(value, d.accuracy_threshold) === "acc-warn") return "warn";
  return "ok";
}

function card(level, title, value, detail, href, key) {
  const body = [el("span", { class: "muted" }, title), el("b", null, value), el("span", null, detail)];
  return href ? el("a", { class: "card " + level, href, dataset: { health: key, level } }, ...body)
              : el("div", { class: "card " + level, dataset: { health: key, level } }, ...body);
}

const worst = (levels) => (levels.includes("bad") ? "bad" : levels.includes("warn") ? "warn" : levels.length ? "ok" : "idle");

function deploymentsCard(deployments) {
  const live = deployments.filter((d) => d.status !== "STOPPED");
  const levels = live.map(deploymentHealth);
  const below = live.filter((d, i) => levels[i] === "bad");
  const accurate = live.filter((d) => known(scoredAccuracy(d)) && !(scoredAccuracy(d) < d.accuracy_threshold));
  const unscored = live.filter((d) => !known(scoredAccuracy(d)));
  const busy = live.filter((d) => d.status === "UPDATING" || d.status === "CANARY");
  const first = below[0] || busy[0] || unscored[0];
  const notes = [];
  if (below.length) notes.push("below threshold: " + below.map((d) => d.name + " " + pct(scoredAccuracy(d))).join(", "));
  if (busy.length) notes.push(busy.map((d) => d.name + " " + d.status.toLowerCase()).join(", "));
  if (unscored.length) notes.push(unscored.length + " not scored yet");
  if (!notes.length) notes.push(live.length ? "every one at or above its trigger threshold" : "deepedge deploy FILE.yaml");
  return card(worst(levels), "deployments", live.length ? accurate.length + " of " + live.length + " accurate" : "none running",
    notes.join("; "), first ? route("deployments", first.name) : null, "deployments");
}

export function renderHealth() {
  const cards = [];
  if (state.data.deployments !== null) cards.push(deploymentsCard(state.data.deployments));
  const jobs = state.data.jobs || [];
  const failed = jobs.filter((j) => j.status === "FAILED");
  const running = jobs.filter((j) => RUNNING.has(j.status));
  const queued = jobs.filter((j) => j.status === "QUEUED");
  cards.push(card(failed.length ? "bad" : jobs.length ? "ok" : "idle", "jobs",
    running.length + " running, " + queued.length + " queued",
    failed.length ? failed.length + " failed: " + failed.slice(0, 3).map((j) => j.name).join(", ")
      : jobs.length ? "none failed (of the latest " + jobs.length + ")" : "no jobs yet",
    failed.length ? route("jobs", failed[0].id) : null, "jobs"));
  if (state.data.nodes !== null) {
    const nodes = state.data.nodes || [];
    const down = nodes.filter((n) => n.state !== "up");
    cards.push(card(down.length ? "bad" : "ok", "nodes", (nodes.length - down.length) + " of " + nodes.length + " up",
      down.length ? "not up: " + down.map((n) => n.name).join(", ")
        : state.data.nodesCluster ? "live nodes of " + state.data.nodesCluster + (state.data.nodesStale ? " (stale view)" : "")
        : "emulated site nodes",
      down.length ? route("nodes", down[0].name) : null, "nodes"));
  }
  cards.push(card("ok", "service", "reachable", "answered at " + new Date().toLocaleTimeString(), null, "service"));
  $("health").replaceChildren(...cards);
}

export function markReachable() {
  lastOk = Date.now();
  downSince = null;
  document.body.classList.remove("stale");
  document.body.dataset.connection = "live";
  $("connection-banner").hidden = true;
  $("connection").hidden = false;
  $("connection").className = "badge live";
  $("connection").textContent = "live";
  $("refresh-state").textContent = "updated " + new Date(lastOk).toLocaleTimeString();
}

// The service stopped answering: say so plainly, keep the last answer greyed out, and keep
// trying (the next round that gets through clears it).
export function markUnreachable(reason) {
  if (!downSince) downSince = Date.now();
  document.body.classList.add("stale");
  document.body.dataset.connection = "down";
  $("connection").hidden = false;
  $("connection").className = "badge down";
  $("connection").textContent = "service unreachable";
  const since = new Date(downSince).toLocaleTimeString();
  const shown = lastOk ? new Date(lastOk).toLocaleTimeString() : "never";
  $("connection-banner").textContent = "The service is unreachable (since " + since + "; retrying every " +
    REFRESH_S + " s). Everything below is as it was at " + shown + " and may no longer be true.";
  $("connection-banner").title = reason;
  $("connection-banner").hidden = false;
  $("refresh-state").textContent = "last answer " + shown;
  const service = card("bad", "service", "unreachable", "since " + since, null, "service");
  const old = $("health").querySelector('[data-health="service"]');
  if (old) old.replaceWith(service);
  else $("health").append(service);
}

export function clearHealth() {
  lastOk = null;
  downSince = null;
  $("health").replaceChildren();
  for (const id of ["whoami", "refresh-state", "connection"]) $(id).textContent = "";
  $("connection").hidden = true;
  $("connection-banner").hidden = true;
  document.body.classList.remove("stale");
}
