// deepedge dashboard: vanilla JS over the tenant-scoped /v1 JSON API (no libraries).
// Every value from the API reaches the page through textContent or an SVG attribute,
// never through innerHTML.
"use strict";

const TOKEN_KEY = "deepedge.token";
const REFRESH_MS = 2000;
const LOG_MAX_CHARS = 400000;
const LOG_WAIT_S = 60;
const MISSING_RETRY_EVERY = 15; // refreshes between two probes of an endpoint that was 404
const ENDED = new Set(["COMPLETED", "FAILED", "HALTED"]);
const RESULT_KINDS = new Set(["ekya-window", "placement", "model-update"]);
const MARKER_KINDS = { "promoted": "update", "rolled-back": "rollback", "canary-started": "canary" };
const SVG = "http://www.w3.org/2000/svg";

const ui = {
  token: sessionStorage.getItem(TOKEN_KEY),
  timer: null,
  session: 0,         // bumped at every login and logout
  refreshing: false,  // a refresh round is in flight
  job: null,          // id of the job shown in detail
  jobView: null,      // its last GET /v1/jobs/{id}
  follow: null,       // AbortController of the log follower
  deployment: null,   // name of the deployment shown in detail
  missing: new Map(), // endpoint key -> refreshes left before probing a 404 again
  results: new Map(), // job id -> result document
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const time = (at) => (at ? new Date(at * 1000).toLocaleTimeString() : "");
const pct = (x) => (x === null || x === undefined ? "—" : (100 * x).toFixed(1) + " %");
const num = (x, d = 2) => (x === null || x === undefined ? "—" : Number(x).toFixed(d));
const short = (id) => (id ? id.slice(0, 8) : "—");
const list = (xs) => (xs && xs.length ? xs.join(", ") : "—");

function status(text) {
  return el("span", { class: "status s-" + text }, text);
}

function bar(fraction, kind) {
  const fill = el("span");
  fill.style.width = Math.max(0, Math.min(1, fraction || 0)) * 100 + "%";
  return el("span", { class: "bar " + (kind || ""), title: pct(fraction) }, fill);
}

// A table row that opens its detail by click, or by Enter / Space from the keyboard.
function pickable(row, open) {
  row.tabIndex = 0;
  row.addEventListener("click", open);
  row.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      open();
    }
  });
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

class Unauthorized extends Error {}
class Stale extends Error {}

// A request of the current session. A session ends at logout: an answer arriving after
// that is dropped (Stale), so nothing of one token's data reaches the next token's page.
async function api(path, options) {
  const session = ui.session;
  if (!ui.token) throw new Stale(path);
  const response = await fetch(path, {
    ...(options || {}),
    headers: { Authorization: "Bearer " + ui.token },
    cache: "no-store",
  });
  if (session !== ui.session) throw new Stale(path);
  if (response.status === 401) throw new Unauthorized(path);
  return response;
}

// The JSON at path; null when it answers 404 (a section whose endpoint is absent stays
// hidden, and with a key, the endpoint is probed again only every MISSING_RETRY_EVERY rounds).
async function getJson(path, key) {
  if (key && ui.missing.has(key)) {
    const left = ui.missing.get(key);
    if (left > 0) {
      ui.missing.set(key, left - 1);
      return null;
    }
  }
  const response = await api(path);
  if (response.status === 404) {
    if (key) ui.missing.set(key, MISSING_RETRY_EVERY);
    return null;
  }
  if (!response.ok) throw new Error(path + " answered " + response.status);
  if (key) ui.missing.delete(key);
  const session = ui.session;
  const body = await response.json();
  if (session !== ui.session) throw new Stale(path);
  return body;
}

// -- login ------------------------------------------------------------------------------

async function login(token) {
  ui.token = token;
  try {
    await getJson("/v1/jobs?limit=1");
  } catch (err) {
    ui.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("login-error").textContent =
      err instanceof Unauthorized ? "This token was refused." : "The service did not answer: " + err.message;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  ui.session += 1;
  $("login-error").textContent = "";
  $("login-view").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  $("whoami").textContent = "logged in with a tenant token";
  refresh();
}

function logout(message) {
  ui.session += 1;
  stopFollow();
  clearTimeout(ui.timer);
  sessionStorage.removeItem(TOKEN_KEY);
  Object.assign(ui, { token: null, job: null, jobView: null, deployment: null });
  ui.results.clear();
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login-view").hidden = false;
  $("whoami").textContent = "";
  $("login-error").textContent = message || "";
  $("token").value = "";
  $("job-detail").hidden = true;
  $("deployment-detail").hidden = true;
  // Nothing of this token's data stays in the page for the next one.
  for (const table of ["jobs", "deployments", "nodes", "versions", "allocations"]) $(table).tBodies[0].replaceChildren();
  for (const id of ["host", "windows", "placement", "events", "job-log", "job-history", "job-result"]) $(id).replaceChildren();
  for (const id of ["windows", "placement"]) delete $(id).dataset.job;
  for (const id of ["deployments-section", "windows-section", "placement-section"]) $(id).hidden = true;
  $("accuracy-chart").replaceChildren();
  ui.missing.clear();
}

// -- refresh loop -----------------------------------------------------------------------

// One round at a time: a call while a round is in flight (login, the tab shown again) is
// dropped, and the round in flight schedules the next.
async function refresh() {
  clearTimeout(ui.timer);
  if (!ui.token || ui.refreshing) return;
  ui.refreshing = true;
  const session = ui.session;
  try {
    if (!document.hidden) {
      await Promise.all([refreshJobs(), refreshHost(), refreshNodes(), refreshDeployments()]);
      $("refresh-state").textContent = "updated " + new Date().toLocaleTimeString();
      // Milliseconds from navigation to the first complete render (read by the benchmark).
      if (!document.body.dataset.firstRenderMs) document.body.dataset.firstRenderMs = performance.now().toFixed(1);
    }
  } catch (err) {
    if (err instanceof Stale || session !== ui.session) {
      // this round belonged to an ended session: the next starts at once
    } else if (err instanceof Unauthorized) {
      ui.refreshing = false;
      return logout("The token is no longer accepted.");
    } else {
      $("refresh-state").textContent = "refresh failed: " + err.message;
    }
  } finally {
    ui.refreshing = false;
  }
  if (ui.token) ui.timer = setTimeout(refresh, session === ui.session ? REFRESH_MS : 0);
}

// -- jobs ---------------------------------------------------------------------------------

async function refreshJobs() {
  const page = await getJson("/v1/jobs?limit=50");
  const jobs = page ? page.jobs : [];
  $("jobs-empty").hidden = jobs.length > 0;
  fill($("jobs").tBodies[0], jobs.map((job) => {
    const row = el("tr", { class: "pick" + (job.id === ui.job ? " selected" : ""),
                           dataset: { jobId: job.id, status: job.status } },
      el("td", null, job.name), el("td", null, job.kind), el("td", null, status(job.status)),
      el("td", null, time(job.created_at)), el("td", null, time(job.updated_at)),
      el("td", null, job.restarts), el("td", { class: "mono" }, short(job.id)));
    pickable(row, () => selectJob(job.id));
    return row;
  }));
  await Promise.all([
    ui.job ? refreshJob() : null,
    showLatest(jobs, "ekya-window", "windows", renderWindowPlan),
    showLatest(jobs, "placement", "placement", renderPlacement),
  ]);
}

function selectJob(id) {
  if (ui.job === id) return;
  ui.job = id;
  ui.jobView = null;
  $("job-detail").hidden = false;
  $("job-name").textContent = short(id);
  $("job-history").replaceChildren();
  $("job-result").replaceChildren();
  for (const row of $("jobs").tBodies[0].rows) row.classList.toggle("selected", row.dataset.jobId === id);
  $("log-rank").replaceChildren();
  $("log-rank").hidden = true;
  $("job-metrics").textContent = "";
  followLog(id, 0);
  refreshJob().catch((err) => {
    if (!(err instanceof Stale)) $("job-error").textContent = "could not read the job: " + err.message;
  });
}

async function refreshJob() {
  const id = ui.job;
  if (ui.jobView && ui.jobView.id === id && ENDED.has(ui.jobView.status) && ui.jobView.status !== "HALTED") return;
  const job = await getJson("/v1/jobs/" + id);
  if (ui.job !== id) return;
  if (!job) {
    $("job-status").replaceChildren(status("DELETED"));
    return;
  }
  ui.jobView = job;
  $("job-name").textContent = job.name + " (" + short(job.id) + ", " + job.kind + ")";
  $("job-status").replaceChildren(status(job.status));
  $("job-status").dataset.status = job.status;
  $("job-error").textContent = job.error ? job.error.code + ": " + job.error.message : "";
  $("job-history").replaceChildren(...job.history.map((h) =>
    el("li", { dataset: { status: h.status } }, time(h.at) + "  ", status(h.status),
       h.cause ? "  " + h.cause : "")));
  const learners = (job.manifest && job.manifest.learners) || 1;
  if (learners > 1 && $("log-rank").options.length !== learners) {
    $("log-rank").replaceChildren(...Array.from({ length: learners }, (_, r) =>
      el("option", { value: r }, "learner " + r)));
    $("log-rank").hidden = false;
  }
  if (ui.follow === null && !ENDED.has(job.status)) followLog(id, Number($("log-rank").value || 0));
  await refreshMetrics(id);
  if (job.status === "COMPLETED" && RESULT_KINDS.has(job.kind)) {
    const result = await jobResult(job.id);
    if (result && ui.job === id) $("job-result").replaceChildren(renderResult(job.kind, result));
  }
}

// The job's newest learner-reported metrics, as one line of text.
async function refreshMetrics(id) {
  const metrics = await getJson("/v1/jobs/" + id + "/metrics?limit=1");
  if (!metrics || ui.job !== id) return;
  const last = metrics.samples[metrics.samples.length - 1];
  const shown = last ? Object.entries(last).filter(([k]) => k !== "at")
    .map(([k, v]) => k + " " + (typeof v === "number" && !Number.isInteger(v) ? v.toFixed(4) : v)).join(", ") : "none yet";
  $("job-metrics").textContent = "metrics: " + shown + "; " + metrics.checkpoints + " checkpoints, " +
    metrics.restarts + " restarts";
}

async function jobResult(id) {
  if (!ui.results.has(id)) {
    const result = await getJson("/v1/jobs/" + id + "/result");
    if (result === null) return null;
    ui.results.set(id, result);
  }
  return ui.results.get(id);
}

function renderResult(kind, result) {
  if (kind === "ekya-window") return renderWindowPlan(result);
  if (kind === "placement") return renderPlacement(result);
  const accuracies = (result.accuracies || []).map((a, i) => ({ x: i + 1, y: a }));
  const chart = svg("svg", { class: "chart", viewBox: "0 0 720 240" });
  drawChart(chart, { served: accuracies, canary: [], markers: [], xLabel: "epoch" });
  return el("div", null, el("h4", null, "Update: final accuracy " + pct(result.final_accuracy) +
    " (" + (result.stop_reason || "") + ", " + (result.restarts || 0) + " restarts)"), chart);
}

// -- the live log -----------------------------------------------------------------------

function stopFollow() {
  if (ui.follow) ui.follow.abort();
  ui.follow = null;
}

function appendLog(text) {
  const pre = $("job-log");
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  let content = pre.textContent + text;
  if (content.length > LOG_MAX_CHARS) content = content.slice(content.length - LOG_MAX_CHARS);
  pre.textContent = content;
  if (atBottom) pre.scrollTop = pre.scrollHeight;
}

// Streams GET /v1/jobs/{id}/logs?follow=true from the last byte seen; the server ends the
// stream when the job ends (or after LOG_WAIT_S), and the follower reconnects until it has.
async function followLog(id, rank) {
  stopFollow();
  const control = new AbortController();
  ui.follow = control;
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
        if (ui.follow === control) ui.follow = null;
        return;
      }
    } catch (err) {
      if (control.signal.aborted) return;
      if (err instanceof Unauthorized) return logout("The token is no longer accepted.");
      $("log-state").textContent = "reconnecting";
      await sleep(1000);
    }
  }
}

// -- the service host and the site's nodes ------------------------------------------------

async function refreshHost() {
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

async function refreshNodes() {
  const page = await getJson("/v1/nodes", "nodes");
  $("nodes").hidden = !page;
  if (!page) return;
  fill($("nodes").tBodies[0], page.nodes.map((n) => {
    const u = n.emulated_utilisation || {};
    const use = ["cpu", "gpu", "mem"].filter((k) => u[k] !== undefined)
      .map((k) => el("span", { title: k + " " + pct(u[k]) }, bar(u[k], k === "cpu" ? "" : k), " "));
    const held = (n.allocations || []).map((a) => a.deployment + (a.version ? " v" + a.version : "") +
      (a.window !== null && a.window !== undefined ? " w" + a.window : "") +
      (a.policy === "ekya-window"
        ? ": inference " + num(a.inference_gpus) + " (" + (a.inference_config || "—") + "), retraining " +
          num(a.retraining_gpus) + " (" + (a.retraining_config || "no retraining") + ") of " + num(a.gpus)
        : a.selected === false ? " (not selected)" : ": shard " + a.shard + ", batch " + a.batch));
    return el("tr", { dataset: { node: n.name } },
      el("td", null, n.name), el("td", null, n.device || ""), el("td", null, n.role || ""),
      el("td", null, status(n.state)), el("td", null, ...use), el("td", null, list(n.deployments)),
      el("td", null, list(n.canary)), el("td", { class: "mono" }, list((n.jobs || []).map(short))),
      el("td", null, held.length ? held.join("; ") : "—"));
  }));
}

// Thief's shares of one Ekya window: a deployment's allocation event on the edge server.
const shareUnit = (detail) => (detail.device === "cpu" ? " GPU-equivalents (CPU threads)" : " GPUs");

function ekyaShares(detail) {
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

function describeAllocation(detail) {
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

function describe(object) {
  return Object.entries(object).map(([k, v]) => k + " " + (typeof v === "object" ? JSON.stringify(v) : v)).join(", ");
}

// -- deployments, accuracy over time --------------------------------------------------------

async function refreshDeployments() {
  const page = await getJson("/v1/deployments", "deployments");
  $("deployments-section").hidden = !page;
  if (!page) return;
  const rows = page.deployments.map((d) => {
    const row = el("tr", { class: "pick" + (d.name === ui.deployment ? " selected" : ""), dataset: { deployment: d.name } },
      el("td", null, d.name), el("td", null, status(d.status)), el("td", null, d.update_policy),
      el("td", null, list(d.nodes)), el("td", null, d.serving_version === null ? "—" : "v" + d.serving_version),
      el("td", null, d.canary_version === null ? "—" : "v" + d.canary_version), el("td", null, d.window),
      el("td", null, pct(d.last_accuracy)), el("td", { class: "mono" }, short(d.current_job_id)));
    pickable(row, () => selectDeployment(d.name));
    return row;
  });
  fill($("deployments").tBodies[0], rows);
  if (!ui.deployment && page.deployments.length) ui.deployment = page.deployments[0].name;
  if (ui.deployment) await refreshDeployment();
}

function selectDeployment(name) {
  ui.deployment = name;
  for (const row of $("deployments").tBodies[0].rows) row.classList.toggle("selected", row.dataset.deployment === name);
  refreshDeployment().catch(() => {});
}

async function refreshDeployment() {
  const name = ui.deployment;
  const base = "/v1/deployments/" + encodeURIComponent(name);
  const [windows, events, versions] = await Promise.all([
    getJson(base + "/windows?limit=200"), getJson(base + "/events?limit=200"), getJson(base + "/versions"),
  ]);
  if (ui.deployment !== name) return;
  $("deployment-detail").hidden = !windows;
  if (!windows) return;
  $("deployment-name").textContent = name;
  const points = windows.windows;
  const evts = events ? events.events : [];
  // An event without a window (e.g. the first version, promoted before window 0) is drawn
  // at the first window scored after it.
  const windowAt = (at) => {
    const next = points.find((p) => p.at >= at);
    return next ? next.window : points.length ? points[points.length - 1].window : 0;
  };
  const markers = evts.filter((e) => MARKER_KINDS[e.kind])
    .map((e) => ({ x: e.window !== null ? e.window : windowAt(e.at), kind: MARKER_KINDS[e.kind],
                   label: (e.kind === "rolled-back" ? "rollback " : "") + (e.version ? "v" + e.version : e.kind) }));
  drawChart($("accuracy-chart"), {
    served: points.filter((p) => p.accuracy !== null).map((p) => ({ x: p.window, y: p.accuracy })),
    canary: points.filter((p) => p.canary_accuracy !== null && p.canary_accuracy !== undefined)
      .map((p) => ({ x: p.window, y: p.canary_accuracy })),
    markers,
    xLabel: "window",
  });
  fill($("allocations").tBodies[0], evts.filter((e) => e.kind === "allocation").reverse().slice(0, 20)
    .map((e) => el("tr", { dataset: { window: e.window === null ? "" : e.window, policy: (e.detail || {}).policy || "" } },
      el("td", null, e.window === null ? "—" : e.window),
      el("td", null, e.version ? "v" + e.version : "—"), el("td", null, time(e.at)),
      el("td", { class: "mono" }, e.detail && Array.isArray(e.detail.streams) ? ekyaShares(e.detail)
                                                                           : describeAllocation(e.detail)))));
  fill($("versions").tBodies[0], (versions ? versions.versions : []).map((v) => el("tr", { dataset: { version: v.version } },
    el("td", null, "v" + v.version), el("td", null, v.parent_version === null ? "—" : "v" + v.parent_version),
    el("td", null, status(v.status)), el("td", null, pct((v.metrics || {}).gate_accuracy)),
    el("td", { class: "mono" }, short(v.job_id)), el("td", null, v.note || ""))));
  $("events").replaceChildren(...evts.slice().reverse().map((e) => el("li", { dataset: { kind: e.kind } },
    time(e.at) + (e.window !== null ? "  w" + e.window : "") + "  ", el("b", null, e.kind), "  " + (e.message || ""),
    e.kind === "allocation" && e.detail ? el("div", { class: "muted mono" }, describeAllocation(e.detail)) : null)));
}

// A line chart of accuracy (0..1) against window number, with vertical update markers.
function drawChart(chart, data) {
  const W = 720, H = 240, L = 44, R = 12, T = 12, B = 30;
  const all = [...data.served, ...data.canary, ...data.markers];
  const xs = all.map((p) => p.x);
  const x0 = xs.length ? Math.min(...xs) : 0;
  const x1 = xs.length ? Math.max(...xs, x0 + 1) : 1;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - Math.max(0, Math.min(1, y))) * (H - T - B);
  const parts = [];
  for (const y of [0, 0.25, 0.5, 0.75, 1]) {
    parts.push(svg("line", { class: "grid", x1: L, x2: W - R, y1: sy(y), y2: sy(y) }));
    parts.push(svg("text", { x: L - 6, y: sy(y) + 4, "text-anchor": "end" }, Math.round(y * 100) + "%"));
  }
  parts.push(svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  const ticks = Math.min(10, x1 - x0);
  for (let k = 0; k <= ticks; k++) {
    const x = Math.round(x0 + ((x1 - x0) * k) / ticks);
    parts.push(svg("text", { x: sx(x), y: H - B + 14, "text-anchor": "middle" }, x));
  }
  parts.push(svg("text", { x: W - R, y: H - 2, "text-anchor": "end" }, data.xLabel));
  for (const m of data.markers) {
    parts.push(svg("line", { class: "marker " + m.kind, x1: sx(m.x), x2: sx(m.x), y1: T, y2: H - B,
                             "data-kind": m.kind, "data-x": m.x }));
    parts.push(svg("text", { x: sx(m.x) + 3, y: T + 10 }, m.label));
  }
  const line = (points, cls) => {
    if (!points.length) return;
    parts.push(svg("polyline", { class: cls, points: points.map((p) => sx(p.x) + "," + sy(p.y)).join(" ") }));
  };
  line(data.canary, "canary");
  line(data.served, "served");
  for (const p of data.served) {
    const dot = svg("circle", { cx: sx(p.x), cy: sy(p.y), r: 2.5 });
    dot.append(svg("title", {}, data.xLabel + " " + p.x + ": " + pct(p.y)));
    parts.push(dot);
  }
  chart.replaceChildren(...parts);
  chart.dataset.points = String(data.served.length);
  chart.dataset.markers = String(data.markers.length);
  chart.dataset.lastX = data.served.length ? String(data.served[data.served.length - 1].x) : "";
}

// -- allocations per window (Ekya) and placement decisions (MVSP) --------------------------

async function showLatest(jobs, kind, section, render) {
  const job = jobs.find((j) => j.kind === kind && j.status === "COMPLETED");
  $(section + "-section").hidden = !job;
  if (!job || $(section).dataset.job === job.id) return;
  const result = await jobResult(job.id);
  if (!result) return;
  $(section + "-source").textContent = "from job " + job.name + " (" + short(job.id) + "), finished " + time(job.updated_at);
  $(section).replaceChildren(render(result));
  $(section).dataset.job = job.id;
}

// A planner-only ekya-window job's plan, or the first plan of a deployment's Ekya window.
function renderWindowPlan(result) {
  const window = Array.isArray(result.plans) && result.plans.length ? result : null;
  const plan = window ? { scheduler: result.scheduler, ...result.plans[0] } : result;
  const gpus = plan.gpus || 1;
  const rows = (plan.streams || []).map((s) => el("tr", { dataset: { stream: s.stream_id } },
    el("td", null, s.stream_id),
    el("td", null, bar(s.inference_gpus / gpus), " " + num(s.inference_gpus)),
    el("td", null, bar(s.retraining_gpus / gpus, "gpu"), " " + num(s.retraining_gpus)),
    el("td", null, s.inference_config || "—"), el("td", null, s.retraining_config || "no retraining"),
    el("td", null, pct(s.window_accuracy))));
  return el("div", null,
    el("p", null, (plan.scheduler || "") + ": " + num(plan.allocated_gpus) + " of " + num(gpus) +
       shareUnit(result) + " over a " + num(plan.window_s, 0) + " s window, mean accuracy " + pct(plan.mean_accuracy) +
       (window ? "; " + (window.retrained ? "retrained with " + window.retrained + " (estimate " +
         pct(window.estimated_accuracy) + ", measured " + pct(window.validation_accuracy) + ")" : "no retraining") +
         (window.plans.length > 1 ? ", re-planned " + (window.plans.length - 1) + "x" : "") : "")),
    el("table", { class: "window-plan" },
      el("thead", null, el("tr", null, ...["stream", "inference GPUs", "retraining GPUs", "inference config",
        "retraining config", "window accuracy"].map((h) => el("th", null, h)))),
      el("tbody", null, ...rows)));
}

function renderPlacement(solution) {
  const placements = (solution.placements || []).map((p) => el("tr", null,
    el("td", null, p.node), el("td", null, p.model), el("td", null, p.variant), el("td", null, p.instances),
    el("td", null, num(p.load_rps, 1) + " / " + num(p.max_load_rps, 1) + " rps")));
  const nodes = (solution.nodes || []).map((n) => el("tr", null,
    el("td", null, n.node), el("td", null, bar(n.utilisation, "mem"), " " + pct(n.utilisation)),
    el("td", null, num(n.memory_used_mb, 0) + " MB"), el("td", null, n.instances)));
  return el("div", { class: "columns" },
    el("div", null,
      el("p", null, (solution.method || "") + " " + (solution.status || "") + ": objective " + num(solution.objective, 3) +
         ", gap " + pct(solution.gap) + ", mean latency " + num(solution.avg_latency_ms, 1) + " ms"),
      el("table", { class: "placements" }, el("thead", null, el("tr", null,
        ...["node", "model", "variant", "instances", "load"].map((h) => el("th", null, h)))),
        el("tbody", null, ...placements))),
    el("div", null, el("h4", null, "Memory per node"),
      el("table", null, el("thead", null, el("tr", null, ...["node", "utilisation", "used", "instances"]
        .map((h) => el("th", null, h)))), el("tbody", null, ...nodes))));
}

// -- start ----------------------------------------------------------------------------------

$("log-rank").addEventListener("change", () => {
  if (ui.job) followLog(ui.job, Number($("log-rank").value));
});
$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  login($("token").value.trim());
});
$("logout").addEventListener("click", () => logout(""));
document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
if (ui.token) login(ui.token);
