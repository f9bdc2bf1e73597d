// The service host and the site's nodes: emulated (the testbed's fixed scenario) or live
// (the agents of the service's Ray cluster), each with a page of its own.
import { getJson } from "./api.js";
import { allocationText } from "./allocations.js";
import { $, bar, el, fill, jobLink, joined, link, pickable, status } from "./dom.js";
import { list, num, pct, short, since, wholePct } from "./format.js";
import { go, markSelected, scrollOnce } from "./router.js";
import { state } from "./state.js";

const LOAD = "CPU / GPU / memory";
const LOAD_NAMES = { cpu: "CPU", gpu: "GPU", mem: "memory" };
const GONE = new Set(["lost", "left"]); // its last report says nothing of now
const WORK_WORDS = { "replicas": "replicas", "update-worker": "worker", "parameter-server": "parameter server",
  "window": "Ekya window", "learner": "learner" };

export const isGone = (node) => GONE.has(node.state);

// A node's state, and since when a lost one is lost: "lost since 21:50:40 (75 s ago)".
function stateCell(node) {
  const now = Date.now() / 1000;
  if (node.state !== "lost" || !node.lost_at) return status(node.state);
  return el("span", { class: "lost-since", title: new Date(node.lost_at * 1000).toLocaleString() },
    status("lost"), " since " + since(node.lost_at, now));
}

// One load figure with its number and its bar: "CPU 43 %".
export function loadItem(kind, fraction) {
  return el("span", { class: "load-item", dataset: { load: kind } },
    el("span", { class: "load-figure" }, LOAD_NAMES[kind] + " " + wholePct(fraction)), " ",
    bar(fraction, kind === "cpu" ? "" : kind));
}

// What of the tenant's runs on a node: "line replicas v3", "worker of 3f23ad6c (line)".
export function workText(item) {
  const kind = WORK_WORDS[item.kind] || item.kind;
  if (item.kind === "replicas") return item.deployment + " " + kind + " v" + item.version;
  return kind + " of " + short(item.job) + (item.deployment ? " (" + item.deployment + ")" : "");
}

export async function refreshHost() {
  const host = await getJson("/v1/host", "host");
  if (!host) return;
  const s = host.state;
  const row = (label, value, node) => el("tr", null, el("th", null, label), el("td", null, node || "", " ", value));
  $("host").replaceChildren(el("div", { class: "card", id: "host-card" },
    el("h4", null, host.id + " (service host)"),
    el("table", null, el("tbody", null,
      row("CPU", s ? pct(s.cpu_util) : "—", s ? bar(s.cpu_util) : null),
      row("memory", s ? pct(s.mem_util) : "—", s ? bar(s.mem_util, "mem") : null),
      row("GPU", s && s.gpu_util !== null ? pct(s.gpu_util) : "none", s && s.gpu_util !== null ? bar(s.gpu_util, "gpu") : null),
      row("cores", host.cpu_cores + ", " + Math.round(host.mem_mb / 1024) + " GiB"),
      row("your jobs hold", num(host.allocated_cpus, 1) + " cores, " + host.allocated_gpus + " GPUs in " +
          host.allocations.length + " active jobs"))),
    el("p", { class: "muted" }, "P95 over the last " + host.state_window_s + " s")));
}

// The load column's heading says where its figures come from: "(emulated)" only when every
// node is emulated, "(measured)" when every one is live; a mixed site marks each emulated row.
export function loadHeading(nodes) {
  const live = nodes.filter((n) => n.source === "live").length;
  if (!nodes.length || live === nodes.length) return LOAD + (live ? " (measured)" : "");
  return live ? LOAD : LOAD + " (emulated)";
}

export async function refreshNodes() {
  const page = await getJson("/v1/nodes", "nodes");
  $("nodes").hidden = !page;
  state.data.nodes = page ? page.nodes : null;
  state.data.nodesCluster = page ? page.cluster : null;
  state.data.nodesStale = page ? page.stale : false;
  if (!page) return;
  $("nodes-load").textContent = loadHeading(page.nodes);
  const mixed = page.nodes.some((n) => n.source === "live") && page.nodes.some((n) => n.source !== "live");
  fill($("nodes").tBodies[0], page.nodes.map((n) => {
    const u = load(n);
    const gone = isGone(n);
    const use = ["cpu", "gpu", "mem"].filter((k) => u[k] !== undefined).map((k) => loadItem(k, u[k]));
    if (mixed && n.source !== "live") use.push(el("span", { class: "muted" }, "emulated"));
    const held = (n.allocations || []).map(allocationText);
    // A lost or left node is part of no job now, whatever a stale answer says.
    const jobs = gone ? [] : n.jobs || [];
    const row = el("tr", { class: "pick" + (n.name === state.node ? " selected" : "") + (gone ? " gone" : ""),
                           dataset: { node: n.name, source: n.source || "emulated", state: n.state } },
      el("td", null, link("nodes", n.name, n.name)), el("td", null, n.device || ""), el("td", null, n.role || ""),
      el("td", null, stateCell(n)),
      el("td", { class: "load", title: gone ? "its last report, before it was " + n.state : null }, ...use),
      el("td", null, ...joined((n.deployments || []).map((d) => link("deployments", d, d)))),
      el("td", null, list(n.canary)),
      el("td", { class: "mono" }, ...joined(jobs.map(jobLink))),
      el("td", { class: "allocation" }, held.length ? held.join("; ") : "—"));
    pickable(row, () => go("nodes", n.name));
    return row;
  }));
  if (state.node) renderNode();
}

// A live node's measured load (its agent's last report), else the emulated scenario's.
function load(node) {
  const u = node.utilisation || node.emulated_utilisation || {};
  return Object.fromEntries(Object.entries(u).filter(([, v]) => v !== null && v !== undefined));
}

function liveFacts(node) {
  if (node.source !== "live") return [];
  const r = node.resources || {};
  return [["source", "live agent" + (state.data.nodesStale ? " (stale view)" : "")],
    ["last report", num(node.age_s) + " s ago"],
    ["apps", (node.apps || []).map((a) => a.name + " (" + a.kind + ", " + num(a.deadline_s) + " s)").join(", ") || "—"],
    ["labels", Object.entries(node.labels || {}).map(([k, v]) => k + "=" + v).join(", ") || "—"],
    ["Ray node", el("span", { class: "mono long" }, node.ray_node_id || "—")],
    ["address", node.address || "—"],
    ["host", node.hostname || "—"],
    ["runs here", (node.work || []).map(workText).join("; ") || "—"],
    ["resources", num(r.cpus) + " CPU, " + num(r.gpus) + " GPU, " + num(r.memory_mb) + " MiB, object store " + num(r.object_store_mb) + " MiB"]];
}

export function renderNode() {
  const node = (state.data.nodes || []).find((n) => n.name === state.node);
  $("node-detail").hidden = false;
  $("node-name").textContent = state.node;
  $("node-link").href = "#/nodes/" + encodeURIComponent(state.node);
  markSelected();
  if (!node) {
    $("node-body").replaceChildren(el("p", { class: "muted" }, state.data.nodes ? "No node " + state.node + " at this site." : "loading"));
    return;
  }
  const u = load(node);
  const gone = isGone(node);
  const figures = ["cpu", "gpu", "mem"].filter((k) => u[k] !== undefined).map((k) => LOAD_NAMES[k] + " " + pct(u[k])).join(", ");
  const facts = el("table", { class: "facts" + (gone ? " gone" : "") }, el("tbody", null,
    ...[["device", node.device], ["role", node.role], ["state", stateCell(node)],
        [gone ? "last reported load" : node.source === "live" ? "measured load" : "emulated load",
         el("span", { class: gone ? "muted" : null }, figures)],
        ...liveFacts(node),
        ["deployments", joined((node.deployments || []).map((d) => link("deployments", d, d)))],
        ["canary", list(node.canary)],
        ["update jobs", joined((gone ? [] : node.jobs || []).map(jobLink))]]
      .map(([k, v]) => el("tr", null, el("th", null, k), el("td", null, ...(Array.isArray(v) ? v : [v]))))));
  const allocations = (node.allocations || []).map((a) => el("li", null, allocationText(a)));
  $("node-body").replaceChildren(facts, el("h4", null, "Newest allocations"),
    allocations.length ? el("ul", { class: "allocations" }, ...allocations) : el("p", { class: "muted" }, "none"));
  scrollOnce("node-detail");
}

export function openNode(name, scroll) {
  state.node = name;
  if (scroll) state.scrollTo = "node-detail";
  renderNode();
}

export function clearNodes() {
  $("node-detail").hidden = true;
  $("nodes").tBodies[0].replaceChildren();
  $("host").replaceChildren();
  $("node-body").replaceChildren();
}
