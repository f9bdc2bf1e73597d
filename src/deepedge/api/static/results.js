// Finished jobs' decisions (GET /v1/jobs/{id}/result): an Ekya window's allocations per
// stream, a placement, an update's accuracy per epoch; the newest Ekya window and placement
// of the tenant have a section of their own.
import { getJson } from "./api.js";
import { shareUnit } from "./allocations.js";
import { drawChart } from "./chart.js";
import { $, bar, el, fill, link, svg } from "./dom.js";
import { clock, num, pct, short, stopReason } from "./format.js";

const results = new Map(); // job id -> result document

export async function jobResult(id) {
  if (!results.has(id)) {
    const result = await getJson("/v1/jobs/" + id + "/result");
    if (result === null) return null;
    results.set(id, result);
  }
  return results.get(id);
}

export function renderResult(kind, result) {
  if (kind === "ekya-window") return renderWindowPlan(result);
  if (kind === "placement") return renderPlacement(result);
  const accuracies = (result.accuracies || result.validation_accuracies || []).map((a, i) => ({ x: i + 1, y: a }));
  const final = result.final_accuracy !== undefined ? result.final_accuracy : result.metric_after;
  const chart = svg("svg", { class: "chart result-chart" });
  const box = el("div", { class: "chart-box" }, chart);
  const heading = el("h4", { class: "result-title" }, "Update: final accuracy " + pct(final) + " (stopped: " +
    stopReason(result.stop_reason) + ", " + (result.restarts || 0) + " restarts)");
  requestAnimationFrame(() => drawChart(chart, { served: accuracies, canaryRuns: [], markers: [], xLabel: "epoch" }));
  return el("div", null, heading, box);
}

// The newest finished job of a kind, in its section (read once per job).
export async function showLatest(jobs, kind, section, render) {
  const job = jobs.find((j) => j.kind === kind && j.status === "COMPLETED");
  $(section + "-section").hidden = !job;
  if (!job || $(section).dataset.job === job.id) return;
  const result = await jobResult(job.id);
  if (!result) return;
  $(section + "-source").replaceChildren("from job ", link("jobs", job.id, job.name + " (" + short(job.id) + ")"),
    ", finished " + clock(job.updated_at));
  $(section).replaceChildren(render(result));
  $(section).dataset.job = job.id;
}

export function clearResults() {
  results.clear();
  for (const id of ["windows", "placement"]) {
    $(id).replaceChildren();
    delete $(id).dataset.job;
    $(id + "-section").hidden = true;
  }
}

// What a window did to each stream: a joint edge-server window keeps each retraining
// stream's outcome under "streams" (by stream id); a one-stream window keeps it at the top.
function streamOutcomes(result) {
  if (result.streams && !Array.isArray(result.streams) && typeof result.streams === "object") return result.streams;
  const first = Array.isArray(result.plans) && result.plans.length ? result.plans[0] : null;
  const decision = result.decision || (first && first.streams && first.streams.length === 1 ? first.streams[0] : null);
  if (decision && "retrained" in result) return { [decision.stream_id]: result };
  return {};
}

// A planner-only ekya-window job's plan, or the first plan of a (deployment's) Ekya window
// with what each stream's retraining then did.
export function renderWindowPlan(result) {
  const window = Array.isArray(result.plans) && result.plans.length ? result : null;
  const plan = window ? { scheduler: result.scheduler, ...result.plans[0] } : result;
  const gpus = plan.gpus || 1;
  const outcomes = window ? streamOutcomes(result) : {};
  const outcome = (s) => {
    if (!window) return s.retraining_config ? "planned" : "inference only";
    const o = outcomes[s.stream_id];
    if (!o) return s.retraining_config ? "planned (no outcome recorded)" : "inference only";
    if (!o.retrained) return "not retrained";
    const measured = "retrained with " + o.retrained + " (estimate " + pct(o.estimated_accuracy) + ", measured " +
      pct(o.validation_accuracy) + ")";
    return o.gate_passed === false ? measured + "; failed the gate against the deployed model (" +
      pct(o.accuracy_before) + "): not deployed" : measured;
  };
  const rows = (plan.streams || []).map((s) => el("tr", { dataset: { stream: s.stream_id } },
    el("td", null, s.stream_id),
    el("td", null, bar(s.inference_gpus / gpus), " " + num(s.inference_gpus)),
    el("td", null, bar(s.retraining_gpus / gpus, "gpu"), " " + num(s.retraining_gpus)),
    el("td", null, s.inference_config || "—"), el("td", null, s.retraining_config || "no retraining"),
    el("td", null, pct(s.window_accuracy)), el("td", { class: "outcome" }, outcome(s))));
  const retrained = Object.entries(outcomes).filter(([, o]) => o && o.retrained);
  const told = !window ? "" : "; " + (retrained.length
    ? retrained.map(([sid, o]) => sid + " retrained with " + o.retrained + " (measured " + pct(o.validation_accuracy) +
      (o.gate_passed === false ? ", failed the gate: not deployed" : "") + ")").join(", ")
    : "no stream retrained") + (window.plans.length > 1 ? ", re-planned " + (window.plans.length - 1) + "x" : "");
  const table = el("table", { class: "window-plan responsive" },
    el("thead", null, el("tr", null, ...["stream", "inference GPUs", "retraining GPUs", "inference config",
      "retraining config", "window accuracy", "outcome"].map((h) => el("th", null, h)))),
    el("tbody", null));
  fill(table.tBodies[0], rows);
  return el("div", null,
    el("p", { class: "window-summary" }, (plan.scheduler || "") + ": " + num(plan.allocated_gpus) + " of " + num(gpus) +
       shareUnit(result) + " over a " + num(plan.window_s, 0) + " s window, mean accuracy " + pct(plan.mean_accuracy) + told),
    table);
}

export function renderPlacement(solution) {
  const placements = (solution.placements || []).map((p) => el("tr", null,
    el("td", null, p.node), el("td", null, p.model), el("td", null, p.variant), el("td", null, p.instances),
    el("td", null, num(p.load_rps, 1) + " / " + num(p.max_load_rps, 1) + " rps")));
  const nodes = (solution.nodes || []).map((n) => el("tr", null,
    el("td", null, n.node), el("td", null, bar(n.utilisation, "mem"), " " + pct(n.utilisation)),
    el("td", null, num(n.memory_used_mb, 0) + " MB"), el("td", null, n.instances)));
  const placed = el("table", { class: "placements responsive" }, el("thead", null, el("tr", null,
    ...["node", "model", "variant", "instances", "load"].map((h) => el("th", null, h)))), el("tbody", null));
  fill(placed.tBodies[0], placements);
  const memory = el("table", { class: "responsive" }, el("thead", null, el("tr", null,
    ...["node", "utilisation", "used", "instances"].map((h) => el("th", null, h)))), el("tbody", null));
  fill(memory.tBodies[0], nodes);
  return el("div", { class: "columns" },
    el("div", null,
      el("p", null, (solution.method || "") + " " + (solution.status || "") + ": objective " + num(solution.objective, 3) +
         ", gap " + pct(solution.gap) + ", mean latency " + num(solution.avg_latency_ms, 1) + " ms"),
      placed),
    el("div", null, el("h4", null, "Memory per node"), memory));
}
