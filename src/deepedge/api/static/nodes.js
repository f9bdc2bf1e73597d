// The service host and the site's nodes: emulated (the testbed's fixed scenario) or live
// (the agents of the service's Ray cluster), each with a page of its own.
import { getJson } from "./api.js";
import { allocationText } from "./allocations.js";
import { $, bar, el, fill, jobLink, joined, link, pickable, status } from "./dom.js";
import { list, num, pct } from "./format.js";
import { go, markSelected, scrollOnce } from "./router.js";
import { state } from "./state.js";

const LOAD = "CPU / GPU / memory";

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
    const use = ["cpu", "gpu", "mem"].filter((k) => u[k] !== undefined)
      .map((k) => el("span", { title: k + " " + pct(u[k]) }, bar(u[k], k === "cpu" ? "" : k), " "));
    if (mixed && n.source !== "live") use.push(el("span", { class: "muted" }, "emulated"));
    const held = (n.allocations || []).map(allocationText);
    const row = el("tr", { class: "pick" + (n.name === state.node ? " selected" : ""),
                           dataset: { node: n.name, source: n.source || "emulated" } },
      el("td", null, link("nodes", n.name, n.name)), el("td", null, n.device || ""), el("td", null, n.role || ""),
      el("td", null, status(n.state)), el("td", { class: "nowrap load" }, ...use),
      el("td", null, ...joined((n.deployments || []).map((d) => link("deployments", d, d)))),
      el("td", null, list(n.canary)),
      el("td", { class: "mono" }, ...joined((n.jobs || []).map(jobLink))),
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
  const facts = el("table", { class: "facts" }, el("tbody", null,
    ...[["device", node.device], ["role", node.role], ["state", status(node.state)],
        [node.source === "live" ? "measured load" : "emulated load",
         ["cpu", "gpu", "mem"].filter((k) => u[k] !== undefined).map((k) => k + " " + pct(u[k])).join(", ")],
        ...liveFacts(node),
        ["deployments", joined((node.deployments || []).map((d) => link("deployments", d, d)))],
        ["canary", list(node.canary)],
        ["update jobs", joined((node.jobs || []).map(jobLink))]]
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
