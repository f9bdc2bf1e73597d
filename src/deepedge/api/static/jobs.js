// The jobs list and a job's page: status history, metrics, the live log, its decision.
import { Stale, Unauthorized, api, getJson, quietly } from "./api.js";
import { $, el, fill, fillOrSay, link, pickable, status, when } from "./dom.js";
import { clock, short } from "./format.js";
import { jobResult, renderPlacement, renderResult, renderWindowPlan, showLatest } from "./results.js";
import { go, markSelected, scrollOnce } from "./router.js";
import { state } from "./state.js";

const LOG_MAX_CHARS = 400000;
const LOG_WAIT_S = 60;
const ENDED = new Set(["COMPLETED", "FAILED", "HALTED"]);
const RESULT_KINDS = new Set(["ekya-window", "placement", "model-update"]);
export const RUNNING = new Set(["PENDING", "DEPLOYING", "PROCESSING", "RESTARTED", "STORING"]);

let shown = null;  // the shown job's last GET /v1/jobs/{id}
let follow = null; // AbortController of the log follower

export async function refreshJobs() {
  const page = await getJson("/v1/jobs?limit=50");
  const jobs = page ? page.jobs : [];
  state.data.jobs = jobs;
  fillOrSay($("jobs"), $("jobs-empty"), jobs.map((job) => {
    const row = el("tr", { class: "pick" + (job.id === state.job ? " selected" : ""),
                           dataset: { jobId: job.id, status: job.status } },
      el("td", null, link("jobs", job.id, job.name)), el("td", null, job.kind), el("td", null, status(job.status)),
      el("td", { class: "nowrap" }, when(job.created_at)), el("td", { class: "nowrap" }, when(job.updated_at)),
      el("td", null, job.restarts), el("td", { class: "mono" }, el("span", { class: "id", title: job.id }, short(job.id))));
    pickable(row, () => go("jobs", job.id));
    return row;
  }));
  await Promise.all([
    state.job ? refreshJob() : null,
    showLatest(jobs, "ekya-window", "windows", renderWindowPlan),
    showLatest(jobs, "placement", "placement", renderPlacement),
  ]);
}

// What a job's error says: its code, and its message where it has one.
export const errorText = (error) => (error ? error.code + (error.message ? ": " + error.message : "") : "");

export async function selectJob(ref) {
  if (state.job && (state.job === ref || state.job.startsWith(ref))) {
    $("job-detail").hidden = false;
    scrollOnce("job-detail");
    return;
  }
  $("job-detail").hidden = false;
  $("job-error").textContent = "";
  for (const id of ["job-history", "job-result", "job-metrics", "log-rank"]) $(id).replaceChildren();
  $("job-log").textContent = "";
  $("log-rank").hidden = true;
  stopFollow();
  let job;
  try {
    job = await getJson("/v1/jobs/" + encodeURIComponent(ref));
  } catch (err) {
    if (!(err instanceof Stale)) $("job-error").textContent = "could not read the job: " + err.message;
    return;
  }
  if (!job) {
    state.job = null;
    $("job-name").textContent = short(ref);
    $("job-status").replaceChildren(status("DELETED"));
    $("job-error").textContent = "No job " + ref + " of this tenant (deleted, or the id is wrong).";
    return;
  }
  state.job = job.id;
  shown = null;
  markSelected();
  followLog(job.id, 0);
  await refreshJob().catch(quietly);
  scrollOnce("job-detail");
}

async function refreshJob() {
  const id = state.job;
  if (shown && shown.id === id && ENDED.has(shown.status) && shown.status !== "HALTED") return;
  const job = await getJson("/v1/jobs/" + id);
  if (state.job !== id) return;
  if (!job) {
    $("job-status").replaceChildren(status("DELETED"));
    return;
  }
  shown = job;
  $("job-name").replaceChildren(job.name + " (", el("span", { class: "id" }, short(job.id)), ", " + job.kind + ")");
  $("job-link").href = "#/jobs/" + encodeURIComponent(job.id);
  $("job-status").replaceChildren(status(job.status));
  $("job-status").dataset.status = job.status;
  $("job-error").textContent = errorText(job.error);
  $("job-history").replaceChildren(...job.history.map((h) =>
    el("li", { dataset: { status: h.status } }, clock(h.at) + "  ", status(h.status),
       h.cause ? "  " + h.cause : "")));
  const learners = (job.manifest && job.manifest.learners) || 1;
  if (learners > 1 && $("log-rank").options.length !== learners) {
    $("log-rank").replaceChildren(...Array.from({ length: learners }, (_, r) =>
      el("option", { value: r }, "learner " + r)));
    $("log-rank").hidden = false;
  }
  if (follow === null && !ENDED.has(job.status)) followLog(id, Number($("log-rank").value || 0));
  await refreshMetrics(job);
  if (job.status === "COMPLETED" && RESULT_KINDS.has(job.kind)) {
    const result = await jobResult(job.id);
    if (result && state.job === id) $("job-result").replaceChildren(renderResult(job.kind, result));
  }
}

function sampleText(sample) {
  return Object.entries(sample).filter(([k]) => k !== "at")
    .map(([k, v]) => k + " " + (typeof v === "number" && !Number.isInteger(v) ? v.toFixed(4) : v)).join(", ");
}

// The job's learner-reported metrics: the newest sample in words, then the latest ones.
async function refreshMetrics(job) {
  const metrics = await getJson("/v1/jobs/" + job.id + "/metrics?limit=200");
  if (!metrics || state.job !== job.id) return;
  const samples = metrics.samples;
  const parts = [];
  if (samples.length) {
    parts.push(el("p", { class: "muted" }, "metrics: " + sampleText(samples[samples.length - 1]) +
      " (newest of " + samples.length + (samples.length === 200 ? "+" : "") + " samples)"));
    const keys = [...new Set(samples.flatMap((s) => Object.keys(s)).filter((k) => k !== "at"))];
    const newest = samples.slice(-10).reverse();
    const head = el("tr", null, el("th", null, "at"), ...keys.map((k) => el("th", null, k)));
    const rows = newest.map((s) => el("tr", null, el("td", null, clock(s.at)),
      ...keys.map((k) => el("td", null, typeof s[k] === "number" && !Number.isInteger(s[k]) ? s[k].toFixed(4) : s[k] ?? "—"))));
    const table = el("table", { class: "metrics responsive" }, el("thead", null, head), el("tbody", null));
    fill(table.tBodies[0], rows);
    parts.push(table);
  } else {
    parts.push(el("p", { class: "muted" }, ENDED.has(job.status) ? "No metrics were reported by this job's learners."
      : "metrics: none reported yet"));
  }
  const notes = [];
  if (metrics.checkpoints) notes.push(metrics.checkpoints + " checkpoints");
  if (metrics.restarts) notes.push(metrics.restarts + " restarts");
  if (notes.length) parts.push(el("p", { class: "muted" }, notes.join(", ")));
  $("job-metrics").replaceChildren(...parts);
}

// -- the live log -----------------------------------------------------------------------

export function stopFollow() {
  if (follow) follow.abort();
  follow = null;
}

function appendLog(text) {
  const pre = $("job-log");
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  let content = pre.textContent + text;
  if (content.length > LOG_MAX_CHARS) content = content.slice(content.length - LOG_MAX_CHARS);
  pre.textContent = content;
  if (atBottom) pre.scrollTop = pre.scrollHeight;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Streams GET /v1/jobs/{id}/logs?follow=true from the last byte seen; the server ends the
// stream when the job ends (or after LOG_WAIT_S), and the follower reconnects until it has.
// A refused token ends it: the refresh round that meets the same 401 logs out.
export async function followLog(id, rank) {
  stopFollow();
  const control = new AbortController();
  follow = control;
  $("job-log").textContent = "";
  const decoder = new TextDecoder();
  let offset = 0;
  while (!control.signal.aborted) {
    $("log-state").textContent = "following";
    $("job-log").dataset.state = "following";
    try {
      const url = "/v1/jobs/" + id + "/logs?follow=true&max_wait_s=" + LOG_WAIT_S + "&rank=" + rank +
        "&offset=" + offset;
      const response = await api(url, { signal: control.signal });
      if (!response.ok) {
        $("log-state").textContent = "unavailable (" + response.status + ")";
        return;
      }
      const reader = response.body.getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        offset += value.length;
        appendLog(decoder.decode(value, { stream: true }));
      }
      const job = await getJson("/v1/jobs/" + id);
      if (!job || ENDED.has(job.status)) {
        $("log-state").textContent = "ended" + (job ? " (" + job.status + ")" : "");
        $("job-log").dataset.state = "ended";
        if (follow === control) follow = null;
        return;
      }
    } catch (err) {
      if (control.signal.aborted || err instanceof Stale || err instanceof Unauthorized) return;
      $("log-state").textContent = "reconnecting";
      $("job-log").dataset.state = "reconnecting";
      await sleep(1000);
    }
  }
}

export function clearJobs() {
  stopFollow();
  shown = null;
  $("job-detail").hidden = true;
  $("jobs").tBodies[0].replaceChildren();
  for (const id of ["job-log", "job-history", "job-result", "job-metrics"]) $(id).replaceChildren();
}
