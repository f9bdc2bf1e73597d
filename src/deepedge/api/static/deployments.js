// The deployments list and a deployment's page: its accuracy over time, live traffic,
// versions, decisions and allocations per window.
import { getJson, quietly } from "./api.js";
import { describeAllocation, ekyaShares } from "./allocations.js";
import { drawChart } from "./chart.js";
import { curve } from "./curve.js";
import { $, accuracy, el, fill, fillOrSay, jobLink, link, pickable, status, when } from "./dom.js";
import { ago, clock, known, list, num, pct } from "./format.js";
import { deploymentHealth, scoredAccuracy } from "./health.js";
import { go, markSelected, route, scrollOnce } from "./router.js";
import { state } from "./state.js";

const RANGE_KEY = "deepedge.range";
const ALL_WINDOWS = 5000; // the API's most windows per read

let range = sessionStorage.getItem(RANGE_KEY) || "50";
let drawn = null;   // what the accuracy chart last drew (redrawn when the page resizes)
let drawnKey = "";  // and its serialised form (redrawn when the data change)

// Running deployments first, the stopped ones after them (each group in the API's order).
export const ordered = (deployments) => [...deployments.filter((d) => d.status !== "STOPPED"),
                                         ...deployments.filter((d) => d.status === "STOPPED")];

// The accuracy cell: the newest window's, or, when that window had no labelled sample, the
// last scored one with its age (a window without samples says nothing of the model).
function accuracyCell(d) {
  const cell = el("td", null, accuracy(scoredAccuracy(d), d.accuracy_threshold));
  if (!known(d.last_accuracy) && known(d.last_scored_accuracy)) {
    cell.append(el("span", { class: "muted scored-age", title: "no labelled sample since window " +
      d.last_scored_window }, " w" + d.last_scored_window + ", " + ago(d.last_scored_at)));
  }
  return cell;
}

export async function refreshDeployments() {
  const page = await getJson("/v1/deployments", "deployments");
  $("deployments-section").hidden = !page;
  state.data.deployments = page ? ordered(page.deployments) : null;
  if (!page) return;
  const deployments = state.data.deployments;
  fillOrSay($("deployments"), $("deployments-empty"), deployments.map((d) => {
    const row = el("tr", { class: "pick" + (d.name === state.deployment ? " selected" : ""),
                           dataset: { deployment: d.name, health: deploymentHealth(d), status: d.status } },
      el("td", null, link("deployments", d.name, d.name)), el("td", null, status(d.status)),
      accuracyCell(d), el("td", null, pct(d.accuracy_threshold)),
      el("td", null, d.serving_version === null ? "—" : "v" + d.serving_version),
      el("td", null, d.canary_version === null ? "—" : "v" + d.canary_version),
      el("td", null, d.window < 0 ? "—" : d.window), el("td", null, d.update_policy),
      el("td", null, list(d.nodes)),
      el("td", { class: "mono" }, d.current_job_id ? jobLink(d.current_job_id) : "—"));
    pickable(row, () => go("deployments", d.name));
    return row;
  }));
  if (!state.deployment && deployments.length) state.deployment = deployments[0].name;
  if (state.deployment) await refreshDeployment();
  else $("deployment-detail").hidden = true;
}

export function openDeployment(name, scroll) {
  state.deployment = name;
  if (scroll) state.scrollTo = "deployment-detail";
  refreshDeployment().catch(quietly);
  markSelected();
}

export function setRange(value) {
  range = value;
  sessionStorage.setItem(RANGE_KEY, value);
  refreshDeployment().catch(quietly);
}

export function redraw() {
  if (drawn) drawChart($("accuracy-chart"), drawn);
}

async function refreshDeployment() {
  const name = state.deployment;
  const base = "/v1/deployments/" + encodeURIComponent(name);
  const limit = range === "all" ? ALL_WINDOWS : Number(range);
  const [windows, events, versions] = await Promise.all([
    getJson(base + "/windows?limit=" + limit), getJson(base + "/events?limit=500"), getJson(base + "/versions"),
  ]);
  if (state.deployment !== name) return;
  $("deployment-detail").hidden = false;
  $("deployment-name").textContent = name;
  $("deployment-link").href = route("deployments", name);
  if (!windows) {
    $("deployment-name").textContent = name + " (no such deployment of this tenant)";
    $("accuracy-chart").replaceChildren();
    return;
  }
  const summary = (state.data.deployments || []).find((d) => d.name === name) || {};
  const threshold = summary.accuracy_threshold;
  const points = windows.windows;
  const evts = events ? events.events : [];
  const chart = curve(points, evts, threshold);
  // Redrawn only when something changed: a chart rebuilt every refresh loses its tooltips.
  const key = JSON.stringify([name, chart]);
  if (key !== drawnKey || !$("accuracy-chart").childElementCount) {
    drawn = chart;
    drawnKey = key;
    drawChart($("accuracy-chart"), chart);
  }
  $("chart-caption").textContent = points.length ? "windows " + points[0].window + "–" + points[points.length - 1].window +
    (known(threshold) ? "; an update is due below " + pct(threshold) : "") : "no window scored yet";
  for (const b of $("chart-range").querySelectorAll("button")) b.classList.toggle("on", b.dataset.range === range);
  await refreshTraffic(name);
  fillOrSay($("allocations"), $("allocations-empty"), evts.filter((e) => e.kind === "allocation").reverse().slice(0, 20)
    .map((e) => el("tr", { dataset: { window: e.window === null ? "" : e.window, policy: (e.detail || {}).policy || "" } },
      el("td", null, e.window === null ? "—" : e.window),
      el("td", null, e.version ? "v" + e.version : "—"), el("td", { class: "nowrap" }, when(e.at)),
      el("td", { class: "mono" }, e.detail && Array.isArray(e.detail.streams) ? ekyaShares(e.detail)
                                                                           : describeAllocation(e.detail)))));
  fill($("versions").tBodies[0], (versions ? versions.versions : []).map((v) => el("tr", { dataset: { version: v.version } },
    el("td", null, "v" + v.version), el("td", null, v.parent_version === null ? "—" : "v" + v.parent_version),
    el("td", null, status(v.status)), el("td", null, pct((v.metrics || {}).gate_accuracy)),
    el("td", { class: "mono" }, v.job_id ? jobLink(v.job_id) : "—"), el("td", null, v.note || ""))));
  $("events").replaceChildren(...evts.slice().reverse().slice(0, 200).map((e) => el("li", { dataset: { kind: e.kind } },
    clock(e.at) + (e.window !== null ? "  w" + e.window : "") + "  ", el("b", null, e.kind), "  " + (e.message || ""),
    e.kind === "allocation" && e.detail ? el("div", { class: "muted mono" }, describeAllocation(e.detail)) : null)));
  scrollOnce("deployment-detail");
}

// The data plane's live traffic of a deployment (GET /v1/deployments/{name}/traffic: the
// endpoint its cameras call, request rate, latency quantiles where a client sees them (at the
// ingress) and inside the replicas, the canary's share of the routed requests over the last
// seconds, the samples kept to learn from); the panel stays hidden where the service has no
// such route (404) or neither a data plane nor recent traffic.
async function refreshTraffic(name) {
  const body = await getJson("/v1/deployments/" + encodeURIComponent(name) + "/traffic?span_s=10", "traffic");
  if (state.deployment !== name) return;
  const t = body && body.traffic;
  const health = body && body.data_plane_health;
  const planeOn = body && (body.data_plane || (health && health.state !== "off"));
  if (!t || !(planeOn || t.requests)) {
    $("traffic").hidden = true;
    return;
  }
  const ms = (x) => (x === null || x === undefined ? "—" : num(x, 1) + " ms");
  const latency = t.latency_ms || {};
  const cards = [
    ["requests", num(t.rps, 1) + " /s", t.requests + " over the last " + num(t.span_s, 0) + " s"],
    latencyCard("latency at the ingress", latency.proxy, ms),
    latencyCard("latency in the replica", latency.replica, ms),
    ["canary share", pct(t.canary_share), t.canary_share === null ? "no canary" : "of routed requests"],
    ["failed", String(t.failed ?? 0), "requests"],
  ].map(([k, v, note, where]) => el("div", { class: "card", dataset: { traffic: k }, title: where || null },
    el("span", { class: "muted" }, k), el("b", null, v), note ? el("span", { class: "muted" }, note) : null));
  $("traffic-cards").replaceChildren(...cards);
  const samples = body.samples || {};
  $("traffic-endpoint").replaceChildren(...(body.endpoint ? ["endpoint ", el("code", null, body.endpoint),
    " (model " + body.model + ")" + planeNote(body) +
    "; samples kept " + (samples.stored ?? 0) + (samples.evicted ? " (" + samples.evicted + " evicted)" : "")] : []));
  $("traffic").hidden = false;
}

// A latency card: the median as the figure, p95 and p99 beneath, where it is measured as its
// tooltip; the ingress's says when its figures cover only part of the span, or none of it.
function latencyCard(title, part, ms) {
  if (!part) return [title, "—", "", ""];
  const where = "measured " + part.measured;
  if (part.state === "unavailable") return [title, "—", "not measured: " + part.reason, where];
  const tail = "p50; p95 " + ms(part.p95) + ", p99 " + ms(part.p99);
  const partial = part.state === "partial" ? " (" + part.covered_s + " of " + part.span_s + " s covered)" : "";
  return [title, ms(part.p50), tail + partial, where];
}

// What the data plane's host last reported, in words: nothing while it serves; starting,
// retrying (with the reason and the next try) or failed otherwise.
function planeNote(body) {
  const h = body.data_plane_health;
  if (body.data_plane || (h && h.state === "serving")) return "";
  if (!h || h.state === "off") return ", not served now: the service runs no data plane";
  const since = h.since ? " for " + num(Math.max(0, Date.now() / 1000 - h.since), 0) + " s" : "";
  const retry = h.retry_at ? ", next try in " + num(Math.max(0, h.retry_at - Date.now() / 1000), 0) + " s" : "";
  const why = h.reason ? ": " + h.reason : "";
  return ", not served now: the data plane is " + h.state + since + (h.attempt > 1 ? " (attempt " + h.attempt + ")" : "") + why + retry;
}

export function clearDeployments() {
  drawn = null;
  drawnKey = "";
  $("deployment-detail").hidden = true;
  $("deployments-section").hidden = true;
  for (const table of ["deployments", "versions", "allocations"]) $(table).tBodies[0].replaceChildren();
  for (const id of ["events", "traffic-cards", "traffic-endpoint", "accuracy-chart"]) $(id).replaceChildren();
}
