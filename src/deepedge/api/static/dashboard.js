// deepedge dashboard: vanilla JS over the tenant-scoped /v1 JSON API (no libraries).
// Every value from the API reaches the page through textContent or an SVG attribute,
// never through innerHTML.
"use strict";

const TOKEN_KEY = "deepedge.token";
const RANGE_KEY = "deepedge.range";
const REFRESH_MS = 2000;
const LOG_MAX_CHARS = 400000;
const LOG_WAIT_S = 60;
const MISSING_RETRY_EVERY = 15; // refreshes between two probes of an endpoint that was 404
const TENANT_EVERY = 15;        // refreshes between two reads of the tenant (quotas in use)
const ALL_WINDOWS = 5000;       // the API's most windows per read
const NEAR_THRESHOLD = 0.05;    // accuracy this close above the trigger threshold is a warning
const ENDED = new Set(["COMPLETED", "FAILED", "HALTED"]);
const RUNNING = new Set(["PENDING", "DEPLOYING", "PROCESSING", "RESTARTED", "STORING"]);
const RESULT_KINDS = new Set(["ekya-window", "placement", "model-update"]);
const MARKER_KINDS = { "promoted": "update", "rolled-back": "rollback", "canary-started": "canary" };
const STOP_REASONS = { converged: "converged", max_epochs: "max epochs reached",
  target_reached: "target accuracy reached", continue: "still improving" };
const SVG = "http://www.w3.org/2000/svg";

const ui = {
  token: sessionStorage.getItem(TOKEN_KEY),
  timer: null,
  session: 0,         // bumped at every login and logout
  refreshing: false,  // a refresh round is in flight
  rounds: 0,          // refresh rounds of this session
  job: null,          // id of the job shown in detail
  jobView: null,      // its last GET /v1/jobs/{id}
  follow: null,       // AbortController of the log follower
  deployment: null,   // name of the deployment shown in detail
  node: null,         // name of the node shown in detail
  range: sessionStorage.getItem(RANGE_KEY) || "50",
  chart: null,        // what the accuracy chart last drew (redrawn when the page resizes)
  chartKey: "",       // and its serialised form (redrawn when the data change)
  data: { jobs: [], deployments: null, nodes: null },
  tenant: null,       // GET /v1/tenant
  lastOk: null,       // when the service last answered a whole round
  downSince: null,    // when it stopped answering
  scrollTo: null,     // the detail a deep link opened, scrolled to once it is drawn
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
const clock = (at) => (at ? new Date(at * 1000).toLocaleTimeString() : "—");
const pct = (x) => (x === null || x === undefined ? "—" : (100 * x).toFixed(1) + " %");
const num = (x, d = 2) => (x === null || x === undefined ? "—" : Number(x).toFixed(d));
const short = (id) => (id ? id.slice(0, 8) : "—");
const list = (xs) => (xs && xs.length ? xs.join(", ") : "—");
const route = (kind, id) => "#/" + kind + "/" + encodeURIComponent(id);

function ago(at) {
  if (!at) return "—";
  const s = Math.max(0, Date.now() / 1000 - at);
  if (s < 60) return Math.floor(s) + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return Math.floor(s / 86400) + "d ago";
}

// A time cell: the local time, its age on hover.
function when(at) {
  return el("span", { title: at ? new Date(at * 1000).toLocaleString() + " (" + ago(at) + ")" : null }, clock(at));
}

function status(text) {
  return el("span", { class: "status s-" + text }, text);
}

function link(kind, id, text) {
  const a = el("a", { href: route(kind, id) }, text);
  a.addEventListener("click", (event) => event.stopPropagation());
  return a;
}

// "ok" at or above threshold + NEAR_THRESHOLD, "warn" just above it, "bad" below it.
function accuracyClass(accuracy, threshold) {
  if (accuracy === null || accuracy === undefined || threshold === null || threshold === undefined) return "";
  if (accuracy < threshold) return "acc-bad";
  return accuracy < threshold + NEAR_THRESHOLD ? "acc-warn" : "acc-ok";
}

function accuracy(value, threshold) {
  const cls = accuracyClass(value, threshold);
  const title = threshold === null || threshold === undefined ? null
    : (cls === "acc-bad" ? "below" : "above") + " the trigger threshold " + pct(threshold);
  return el("span", { class: "acc " + cls, title, dataset: { level: cls.replace("acc-", "") } }, pct(value));
}

function stopReason(reason) {
  const key = String(reason || "").split(".").pop().toLowerCase();
  return STOP_REASONS[key] || key.replace(/_/g, " ");
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

// Fill a table's body; each cell learns its column's name (the phone layout shows it).
function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
  const headers = [...tbody.parentElement.querySelectorAll("thead th")].map((th) => th.textContent);
  for (const row of tbody.rows) {
    [...row.cells].forEach((cell, i) => { if (headers[i]) cell.dataset.label = headers[i]; });
  }
}

class Unauthorized extends Error {}
class Stale extends Error {}
class Unreachable extends Error {}

// A request of the current session. A session ends at logout: an answer arriving after
// that is dropped (Stale), so nothing of one token's data reaches the next token's page.
// No answer at all, or a gateway's 502-504, means the service is unreachable.
async function api(path, options) {
  const session = ui.session;
  if (!ui.token) throw new Stale(path);
  let response;
  try {
    response = await fetch(path, {
      ...(options || {}),
      headers: { Authorization: "Bearer " + ui.token },
      cache: "no-store",
    });
  } catch (err) {
    if (options && options.signal && options.signal.aborted) throw err;
    throw new Unreachable(path + ": " + err.message);
  }
  if (session !== ui.session) throw new Stale(path);
  if (response.status === 401) throw new Unauthorized(path);
  if (response.status >= 502 && response.status <= 504) throw new Unreachable(path + " answered " + response.status);
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
  let body;
  try {
    body = await response.json();
  } catch (err) {
    throw new Unreachable(path + ": " + err.message);
  }
  if (session !== ui.session) throw new Stale(path);
  return body;
}

// -- deep links: #/deployments/NAME, #/jobs/ID (or a unique prefix), #/nodes/NAME -----------

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const kind = parts[0] || "";
  const id = parts.length > 1 ? decodeURIComponent(parts.slice(1).join("/")) : "";
  return { kind, id };
}

function applyRoute(scroll) {
  if (!ui.token) return;
  const { kind, id } = parseRoute();
  if (kind === "deployments" && id) {
    ui.deployment = id;
    if (scroll) ui.scrollTo = "deployment-detail";
    refreshDeployment().catch(quietly);
    markSelected();
  } else if (kind === "jobs" && id) {
    if (scroll) ui.scrollTo = "job-detail";
    selectJob(id);
  } else if (kind === "nodes" && id) {
    ui.node = id;
    if (scroll) ui.scrollTo = "node-detail";
    renderNode();
  }
}

function go(kind, id) {
  const target = route(kind, id);
  if (location.hash === target) applyRoute(false);
  else location.hash = target;
}

function markSelected() {
  for (const row of $("deployments").tBodies[0].rows) row.classList.toggle("selected", row.dataset.deployment === ui.deployment);
  for (const row of $("jobs").tBodies[0].rows) row.classList.toggle("selected", row.dataset.jobId === ui.job);
  for (const row of $("nodes").tBodies[0].rows) row.classList.toggle("selected", row.dataset.node === ui.node);
}

function scrollOnce(id) {
  if (ui.scrollTo === id) {
    ui.scrollTo = null;
    $(id).scrollIntoView({ block: "start" });
  }
}

const quietly = (err) => {
  if (!(err instanceof Stale) && !(err instanceof Unreachable)) console.warn(err);
};

// -- login ------------------------------------------------------------------------------

async function login(token) {
  ui.token = token;
  let tenant;
  try {
    tenant = await getJson("/v1/tenant");
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
  ui.rounds = 0;
  showTenant(tenant);
  $("login-error").textContent = "";
  $("login-view").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  await refresh();
  applyRoute(true);
}

function showTenant(tenant) {
  ui.tenant = tenant;
  $("whoami").textContent = tenant ? "tenant " + tenant.name : "logged in with a tenant token";
  $("whoami").title = tenant ? "tenant id " + tenant.id + "; " + tenant.active_jobs + " of " +
    tenant.max_active_jobs + " active jobs, " + num(tenant.cores_in_use, 1) + " of " + num(tenant.max_cores, 1) + " cores" : "";
}

function logout(message) {
  ui.session += 1;
  stopFollow();
  clearTimeout(ui.timer);
  sessionStorage.removeItem(TOKEN_KEY);
  Object.assign(ui, { token: null, job: null, jobView: null, deployment: null, node: null, tenant: null,
                      chart: null, lastOk: null, downSince: null, scrollTo: null,
                      data: { jobs: [], deployments: null, nodes: null } });
  ui.results.clear();
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login-view").hidden = false;
  for (const id of ["whoami", "refresh-state", "connection"]) $(id).textContent = "";
  $("connection").hidden = true;
  $("connection-banner").hidden = true;
  document.body.classList.remove("stale");
  $("login-error").textContent = message || "";
  $("token").value = "";
  for (const id of ["job-detail", "deployment-detail", "node-detail"]) $(id).hidden = true;
  // Nothing of this token's data stays in the page for the next one.
  for (const table of ["jobs", "deployments", "nodes", "versions", "allocations"]) $(table).tBodies[0].replaceChildren();
  for (const id of ["host", "health", "windows", "placement", "events", "job-log", "job-history", "job-result",
                    "job-metrics", "node-body", "traffic-cards", "traffic-endpoint"]) $(id).replaceChildren();
  for (const id of ["windows", "placement"]) delete $(id).dataset.job;
  for (const id of ["deployments-section", "windows-section", "placement-section"]) $(id).hidden = true;
  $("accuracy-chart").replaceChildren();
  ui.chartKey = "";
  ui.missing.clear();
  history.replaceState(null, "", location.pathname + location.search);
}

// -- refresh loop and the connection's state -----------------------------------------------

// One round at a time: a call while a round is in flight (login, the tab shown again) is
// dropped, and the round in flight schedules the next.
async function refresh() {
  clearTimeout(ui.timer);
  if (!ui.token || ui.refreshing) return;
  ui.refreshing = true;
  const session = ui.session;
  try {
    if (!document.hidden) {
      const reads = [refreshJobs(), refreshHost(), refreshNodes(), refreshDeployments()];
      if (ui.rounds % TENANT_EVERY === 0 && ui.rounds > 0) reads.push(getJson("/v1/tenant").then(showTenant));
      await Promise.all(reads);
      ui.rounds += 1;
      renderHealth();
      markReachable();
      // Milliseconds from navigation to the first complete render (read by the benchmark).
      if (!document.body.dataset.firstRenderMs) document.body.dataset.firstRenderMs = performance.now().toFixed(1);
    }
  } catch (err) {
    if (err instanceof Stale || session !== ui.session) {
      // this round belonged to an ended session: the next starts at once
    } else if (err instanceof Unauthorized) {
      ui.refreshing = false;
      return logout("The token is no longer accepted.");
    } else if (err instanceof Unreachable) {
      markUnreachable(err.message);
    } else {
      $("refresh-state").textContent = "refresh failed: " + err.message;
    }
  } finally {
    ui.refreshing = false;
  }
  if (ui.token) ui.timer = setTimeout(refresh, session === ui.session ? REFRESH_MS : 0);
}

function markReachable() {
  ui.lastOk = Date.now();
  ui.downSince = null;
  document.body.classList.remove("stale");
  document.body.dataset.connection = "live";
  $("connection-banner").hidden = true;
  $("connection").hidden = false;
  $("connection").className = "badge live";
  $("connection").textContent = "live";
  $("refresh-state").textContent = "updated " + new Date(ui.lastOk).toLocaleTimeString();
}

// The service stopped answering: say so plainly, keep the last answer greyed out, and keep
// trying (the next round that gets through clears it).
function markUnreachable(reason) {
  if (!ui.downSince) ui.downSince = Date.now();
  document.body.classList.add("stale");
  document.body.dataset.connection = "down";
  $("connection").hidden = false;
  $("connection").className = "badge down";
  $("connection").textContent = "service unreachable";
  const since = new Date(ui.downSince).toLocaleTimeString();
  const shown = ui.lastOk ? new Date(ui.lastOk).toLocaleTimeString() : "never";
  $("connection-banner").textContent = "The service is unreachable (since " + since + "; retrying every " +
    REFRESH_MS / 1000 + " s). Everything below is as it was at " + shown + " and may no longer be true.";
  $("connection-banner").title = reason;
  $("connection-banner").hidden = false;
  $("refresh-state").textContent = "last answer " + shown;
  const service = card("bad", "service", "unreachable", "since " + since, null, "service");
  const old = $("health").querySelector('[data-health="service"]');
  if (old) old.replaceWith(service);
  else $("health").append(service);
}

// -- health summary ----------------------------------------------------------------------------

function deploymentHealth(d) {
  if (d.status === "STOPPED") return "idle";
  if (d.last_accuracy !== null && d.accuracy_threshold !== null && d.accuracy_threshold !== undefined &&
      d.last_accuracy < d.accuracy_threshold) return "bad";
  if (d.status !== "ACTIVE" || accuracyClass(d.last_accuracy, d.accuracy_threshold) === "acc-warn") return "warn";
  return "ok";
}

function card(level, title, value, detail, href, key) {
  const body = [el("span", { class: "muted" }, title), el("b", null, value), el("span", null, detail)];
  return href ? el("a", { class: "card " + level, href, dataset: { health: key, level } }, ...body)
              : el("div", { class: "card " + level, dataset: { health: key, level } }, ...body);
}

const worst = (levels) => (levels.includes("bad") ? "bad" : levels.includes("warn") ? "warn" : levels.length ? "ok" : "idle");

function renderHealth() {
  const cards = [];
  const deployments = ui.data.deployments || [];
  if (ui.data.deployments !== null) {
    const live = deployments.filter((d) => d.status !== "STOPPED");
    const levels = live.map(deploymentHealth);
    const below = live.filter((d, i) => levels[i] === "bad");
    const accurate = live.filter((d) => d.last_accuracy !== null && !(d.last_accuracy < d.accuracy_threshold));
    const unscored = live.filter((d) => d.last_accuracy === null);
    const busy = live.filter((d) => d.status === "UPDATING" || d.status === "CANARY");
    const first = below[0] || busy[0] || unscored[0];
    const notes = [];
    if (below.length) notes.push("below threshold: " + below.map((d) => d.name + " " + pct(d.last_accuracy)).join(", "));
    if (busy.length) notes.push(busy.map((d) => d.name + " " + d.status.toLowerCase()).join(", "));
    if (unscored.length) notes.push(unscored.length + " not scored yet");
    if (!notes.length) notes.push(live.length ? "every one at or above its trigger threshold" : "deepedge deploy FILE.yaml");
    cards.push(card(worst(levels), "deployments",
      live.length ? accurate.length + " of " + live.length + " accurate" : "none running",
      notes.join("; "), first ? route("deployments", first.name) : null, "deployments"));
  }
  const jobs = ui.data.jobs || [];
  const failed = jobs.filter((j) => j.status === "FAILED");
  const running = jobs.filter((j) => RUNNING.has(j.status));
  const queued = jobs.filter((j) => j.status === "QUEUED");
  cards.push(card(failed.length ? "bad" : jobs.length ? "ok" : "idle", "jobs",
    running.length + " running, " + queued.length + " queued",
    failed.length ? failed.length + " failed: " + failed.slice(0, 3).map((j) => j.name).join(", ")
      : jobs.length ? "none failed (of the latest " + jobs.length + ")" : "no jobs yet",
    failed.length ? route("jobs", failed[0].id) : null, "jobs"));
  if (ui.data.nodes !== null) {
    const nodes = ui.data.nodes || [];
    const down = nodes.filter((n) => n.state !== "up");
    cards.push(card(down.length ? "bad" : "ok", "nodes", (nodes.length - down.length) + " of " + nodes.length + " up",
      down.length ? "not up: " + down.map((n) => n.name).join(", ")
        : ui.data.nodesCluster ? "live nodes of " + ui.data.nodesCluster + (ui.data.nodesStale ? " (stale view)" : "")
        : "emulated site nodes",
      down.length ? route("nodes", down[0].name) : null, "nodes"));
  }
  cards.push(card("ok", "service", "reachable", "answered at " + new Date().toLocaleTimeString(), null, "service"));
  $("health").replaceChildren(...cards);
}

// -- jobs ---------------------------------------------------------------------------------

async function refreshJobs() {
  const page = await getJson("/v1/jobs?limit=50");
  const jobs = page ? page.jobs : [];
  ui.data.jobs = jobs;
  $("jobs-empty").hidden = jobs.length > 0;
  $("jobs").hidden = jobs.length === 0;
  fill($("jobs").tBodies[0], jobs.map((job) => {
    const row = el("tr", { class: "pick" + (job.id === ui.job ? " selected" : ""),
                           dataset: { jobId: job.id, status: job.status } },
      el("td", null, link("jobs", job.id, job.name)), el("td", null, job.kind), el("td", null, status(job.status)),
      el("td", { class: "nowrap" }, when(job.created_at)), el("td", { class: "nowrap" }, when(job.updated_at)),
      el("td", null, job.restarts), el("td", { class: "mono" }, short(job.id)));
    pickable(row, () => go("jobs", job.id));
    return row;
  }));
  await Promise.all([
    ui.job ? refreshJob() : null,
    showLatest(jobs, "ekya-window", "windows", renderWindowPlan),
    showLatest(jobs, "placement", "placement", renderPlacement),
  ]);
}

async function selectJob(ref) {
  if (ui.job && (ui.job === ref || ui.job.startsWith(ref))) {
    $("job-detail").hidden = false;
    scrollOnce("job-detail");
    return;
  }
  $("job-detail").hidden = false;
  $("job-error").textContent = "";
  $("job-history").replaceChildren();
  $("job-result").replaceChildren();
  $("job-metrics").replaceChildren();
  $("job-log").textContent = "";
  $("log-rank").replaceChildren();
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
    ui.job = null;
    $("job-name").textContent = short(ref);
    $("job-status").replaceChildren(status("DELETED"));
    $("job-error").textContent = "No job " + ref + " of this tenant (deleted, or the id is wrong).";
    return;
  }
  ui.job = job.id;
  ui.jobView = null;
  markSelected();
  followLog(job.id, 0);
  await refreshJob().catch(quietly);
  scrollOnce("job-detail");
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
  $("job-link").href = route("jobs", job.id);
  $("job-status").replaceChildren(status(job.status));
  $("job-status").dataset.status = job.status;
  $("job-error").textContent = job.error ? job.error.code + ": " + job.error.message : "";
  $("job-history").replaceChildren(...job.history.map((h) =>
    el("li", { dataset: { status: h.status } }, clock(h.at) + "  ", status(h.status),
       h.cause ? "  " + h.cause : "")));
  const learners = (job.manifest && job.manifest.learners) || 1;
  if (learners > 1 && $("log-rank").options.length !== learners) {
    $("log-rank").replaceChildren(...Array.from({ length: learners }, (_, r) =>
      el("option", { value: r }, "learner " + r)));
    $("log-rank").hidden = false;
  }
  if (ui.follow === null && !ENDED.has(job.status)) followLog(id, Number($("log-rank").value || 0));
  await refreshMetrics(job);
  if (job.status === "COMPLETED" && RESULT_KINDS.has(job.kind)) {
    const result = await jobResult(job.id);
    if (result && ui.job === id) $("job-result").replaceChildren(renderResult(job.kind, result));
  }
}

function sampleText(sample) {
  return Object.entries(sample).filter(([k]) => k !== "at")
    .map(([k, v]) => k + " " + (typeof v === "number" && !Number.isInteger(v) ? v.toFixed(4) : v)).join(", ");
}

// The job's learner-reported metrics: the newest sample in words, then the latest ones.
async function refreshMetrics(job) {
  const metrics = await getJson("/v1/jobs/" + job.id + "/metrics?limit=200");
  if (!metrics || ui.job !== job.id) return;
  const samples = metrics.samples;
  const parts = [];
  if (samples.length) {
    parts.push(el("p", { class: "muted" }, "metrics: " + sampleText(samples[samples.length - 1]) +
      " (newest of " + samples.length + (samples.length === 200 ? "+" : "") + " samples)"));
    const keys = [...new Set(samples.flatMap((s) => Object.keys(s)).filter((k) => k !== "at"))];
    const shown = samples.slice(-10).reverse();
    const head = el("tr", null, el("th", null, "at"), ...keys.map((k) => el("th", null, k)));
    const rows = shown.map((s) => el("tr", null, el("td", null, clock(s.at)),
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
  const accuracies = (result.accuracies || result.validation_accuracies || []).map((a, i) => ({ x: i + 1, y: a }));
  const final = result.final_accuracy !== undefined ? result.final_accuracy : result.metric_after;
  const chart = svg("svg", { class: "chart result-chart" });
  const box = el("div", { class: "chart-box" }, chart);
  const heading = el("h4", { class: "result-title" }, "Update: final accuracy " + pct(final) + " (stopped: " +
    stopReason(result.stop_reason) + ", " + (result.restarts || 0) + " restarts)");
  requestAnimationFrame(() => drawChart(chart, { served: accuracies, canaryRuns: [], markers: [], xLabel: "epoch" }));
  return el("div", null, heading, box);
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
      if (err instanceof Stale) return;
      $("log-state").textContent = "reconnecting";
      $("job-log").dataset.state = "reconnecting";
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

function allocationText(a) {
  return a.deployment + (a.version ? " v" + a.version : "") +
    (a.window !== null && a.window !== undefined ? " w" + a.window : "") +
    (a.policy === "ekya-window"
      ? ": inference " + num(a.inference_gpus) + " (" + (a.inference_config || "—") + "), retraining " +
        num(a.retraining_gpus) + " (" + (a.retraining_config || "no retraining") + ") of " + num(a.gpus)
      : a.selected === false ? " (not selected)" : ": shard " + a.shard + ", batch " + a.batch);
}

async function refreshNodes() {
  const page = await getJson("/v1/nodes", "nodes");
  $("nodes").hidden = !page;
  ui.data.nodes = page ? page.nodes : null;
  ui.data.nodesCluster = page ? page.cluster : null;
  ui.data.nodesStale = page ? page.stale : false;
  if (!page) return;
  fill($("nodes").tBodies[0], page.nodes.map((n) => {
    const u = load(n);
    const use = ["cpu", "gpu", "mem"].filter((k) => u[k] !== undefined)
      .map((k) => el("span", { title: k + " " + pct(u[k]) }, bar(u[k], k === "cpu" ? "" : k), " "));
    const held = (n.allocations || []).map(allocationText);
    const row = el("tr", { class: "pick" + (n.name === ui.node ? " selected" : ""), dataset: { node: n.name } },
      el("td", null, link("nodes", n.name, n.name)), el("td", null, n.device || ""), el("td", null, n.role || ""),
      el("td", null, status(n.state)), el("td", { class: "nowrap" }, ...use),
      el("td", null, ...joined((n.deployments || []).map((d) => link("deployments", d, d)))),
      el("td", null, list(n.canary)),
      el("td", { class: "mono" }, ...joined((n.jobs || []).map((j) => link("jobs", j, short(j))))),
      el("td", { class: "allocation" }, held.length ? held.join("; ") : "—"));
    pickable(row, () => go("nodes", n.name));
    return row;
  }));
  if (ui.node) renderNode();
}

// A live node's measured load (its agent's last report), else the emulated scenario's.
function load(node) {
  const u = node.utilisation || node.emulated_utilisation || {};
  return Object.fromEntries(Object.entries(u).filter(([, v]) => v !== null && v !== undefined));
}

function liveFacts(node) {
  if (node.source !== "live") return [];
  const r = node.resources || {};
  return [["source", "live agent" + (ui.data.nodesStale ? " (stale view)" : "")],
    ["last report", num(node.age_s) + " s ago"],
    ["apps", (node.apps || []).map((a) => a.name + " (" + a.kind + ", " + num(a.deadline_s) + " s)").join(", ") || "—"],
    ["labels", Object.entries(node.labels || {}).map(([k, v]) => k + "=" + v).join(", ") || "—"],
    ["Ray node", node.ray_node_id || "—"],
    ["resources", num(r.cpus) + " CPU, " + num(r.gpus) + " GPU, " + num(r.memory_mb) + " MiB, object store " + num(r.object_store_mb) + " MiB"]];
}

function joined(nodes) {
  if (!nodes.length) return ["—"];
  return nodes.flatMap((node, i) => (i ? [", ", node] : [node]));
}

function renderNode() {
  const node = (ui.data.nodes || []).find((n) => n.name === ui.node);
  $("node-detail").hidden = false;
  $("node-name").textContent = ui.node;
  $("node-link").href = route("nodes", ui.node);
  markSelected();
  if (!node) {
    $("node-body").replaceChildren(el("p", { class: "muted" }, ui.data.nodes ? "No node " + ui.node + " at this site." : "loading"));
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
        ["update jobs", joined((node.jobs || []).map((j) => link("jobs", j, short(j))))]]
      .map(([k, v]) => el("tr", null, el("th", null, k), el("td", null, ...(Array.isArray(v) ? v : [v]))))));
  const allocations = (node.allocations || []).map((a) => el("li", null, allocationText(a)));
  $("node-body").replaceChildren(facts, el("h4", null, "Newest allocations"),
    allocations.length ? el("ul", null, ...allocations) : el("p", { class: "muted" }, "none"));
  scrollOnce("node-detail");
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
  ui.data.deployments = page ? page.deployments : null;
  if (!page) return;
  const empty = page.deployments.length === 0;
  $("deployments-empty").hidden = !empty;
  $("deployments").hidden = empty;
  const rows = page.deployments.map((d) => {
    const row = el("tr", { class: "pick" + (d.name === ui.deployment ? " selected" : ""),
                           dataset: { deployment: d.name, health: deploymentHealth(d) } },
      el("td", null, link("deployments", d.name, d.name)), el("td", null, status(d.status)),
      el("td", null, accuracy(d.last_accuracy, d.accuracy_threshold)), el("td", null, pct(d.accuracy_threshold)),
      el("td", null, d.serving_version === null ? "—" : "v" + d.serving_version),
      el("td", null, d.canary_version === null ? "—" : "v" + d.canary_version),
      el("td", null, d.window < 0 ? "—" : d.window), el("td", null, d.update_policy),
      el("td", null, list(d.nodes)),
      el("td", { class: "mono" }, d.current_job_id ? link("jobs", d.current_job_id, short(d.current_job_id)) : "—"));
    pickable(row, () => go("deployments", d.name));
    return row;
  });
  fill($("deployments").tBodies[0], rows);
  if (!ui.deployment && page.deployments.length) ui.deployment = page.deployments[0].name;
  if (ui.deployment) await refreshDeployment();
  else $("deployment-detail").hidden = true;
}

async function refreshDeployment() {
  const name = ui.deployment;
  const base = "/v1/deployments/" + encodeURIComponent(name);
  const limit = ui.range === "all" ? ALL_WINDOWS : Number(ui.range);
  const [windows, events, versions] = await Promise.all([
    getJson(base + "/windows?limit=" + limit), getJson(base + "/events?limit=500"), getJson(base + "/versions"),
  ]);
  if (ui.deployment !== name) return;
  $("deployment-detail").hidden = false;
  $("deployment-name").textContent = name;
  $("deployment-link").href = route("deployments", name);
  if (!windows) {
    $("deployment-name").textContent = name + " (no such deployment of this tenant)";
    $("accuracy-chart").replaceChildren();
    return;
  }
  const summary = (ui.data.deployments || []).find((d) => d.name === name) || {};
  const threshold = summary.accuracy_threshold;
  const points = windows.windows;
  const evts = events ? events.events : [];
  const first = points.length ? points[0].window : 0;
  // An event without a window (e.g. the first version, promoted before window 0) is drawn
  // at the first window scored after it.
  const windowAt = (at) => {
    const next = points.find((p) => p.at >= at);
    return next ? next.window : points.length ? points[points.length - 1].window : 0;
  };
  const markers = evts.filter((e) => MARKER_KINDS[e.kind])
    .map((e) => ({ x: e.window !== null ? e.window : windowAt(e.at), kind: MARKER_KINDS[e.kind],
                   label: (e.kind === "rolled-back" ? "rollback " : e.kind === "canary-started" ? "canary " : "") +
                     (e.version ? "v" + e.version : e.kind), message: e.message }))
    .filter((m) => m.x >= first);
  const chart = {
    served: points.map((p) => ({ x: p.window, y: p.accuracy, version: p.served_version })),
    canaryRuns: canaryRuns(points),
    markers,
    threshold,
    xLabel: "window",
  };
  // Redrawn only when something changed: a chart rebuilt every refresh loses its tooltips.
  const drawn = JSON.stringify([name, chart]);
  if (drawn !== ui.chartKey || !$("accuracy-chart").childElementCount) {
    ui.chart = chart;
    ui.chartKey = drawn;
    drawChart($("accuracy-chart"), chart);
  }
  $("chart-caption").textContent = points.length ? "windows " + first + "–" + points[points.length - 1].window +
    (threshold !== undefined && threshold !== null ? "; an update is due below " + pct(threshold) : "") : "no window scored yet";
  for (const b of $("chart-range").querySelectorAll("button")) b.classList.toggle("on", b.dataset.range === ui.range);
  await refreshTraffic(name);
  fill($("allocations").tBodies[0], evts.filter((e) => e.kind === "allocation").reverse().slice(0, 20)
    .map((e) => el("tr", { dataset: { window: e.window === null ? "" : e.window, policy: (e.detail || {}).policy || "" } },
      el("td", null, e.window === null ? "—" : e.window),
      el("td", null, e.version ? "v" + e.version : "—"), el("td", { class: "nowrap" }, when(e.at)),
      el("td", { class: "mono" }, e.detail && Array.isArray(e.detail.streams) ? ekyaShares(e.detail)
                                                                           : describeAllocation(e.detail)))));
  fill($("versions").tBodies[0], (versions ? versions.versions : []).map((v) => el("tr", { dataset: { version: v.version } },
    el("td", null, "v" + v.version), el("td", null, v.parent_version === null ? "—" : "v" + v.parent_version),
    el("td", null, status(v.status)), el("td", null, pct((v.metrics || {}).gate_accuracy)),
    el("td", { class: "mono" }, v.job_id ? link("jobs", v.job_id, short(v.job_id)) : "—"), el("td", null, v.note || ""))));
  $("events").replaceChildren(...evts.slice().reverse().slice(0, 200).map((e) => el("li", { dataset: { kind: e.kind } },
    clock(e.at) + (e.window !== null ? "  w" + e.window : "") + "  ", el("b", null, e.kind), "  " + (e.message || ""),
    e.kind === "allocation" && e.detail ? el("div", { class: "muted mono" }, describeAllocation(e.detail)) : null)));
  scrollOnce("deployment-detail");
}

// The windows a canary served, as separate runs: consecutive windows of one canary version.
function canaryRuns(points) {
  const runs = [];
  let run = null;
  for (const p of points) {
    const has = p.canary_accuracy !== null && p.canary_accuracy !== undefined;
    if (!has) {
      run = null;
      continue;
    }
    const last = run && run.points[run.points.length - 1];
    if (!run || p.canary_version !== run.version || p.window !== last.x + 1) {
      run = { version: p.canary_version, points: [] };
      runs.push(run);
    }
    run.points.push({ x: p.window, y: p.canary_accuracy });
  }
  return runs;
}

// The data plane's live traffic of a deployment (GET /v1/deployments/{name}/traffic: the
// endpoint its cameras call, request rate, latency quantiles, the canary's share of the routed
// requests over the last seconds, the samples kept to learn from); the panel stays hidden
// where the service has no such route (404) or neither a data plane nor recent traffic.
async function refreshTraffic(name) {
  const body = await getJson("/v1/deployments/" + encodeURIComponent(name) + "/traffic?span_s=10", "traffic");
  if (ui.deployment !== name) return;
  const t = body && body.traffic;
  if (!t || !(body.data_plane || t.requests)) {
    $("traffic").hidden = true;
    return;
  }
  const ms = (x) => (x === null || x === undefined ? "—" : num(x, 1) + " ms");
  const cards = [
    ["requests", num(t.rps, 1) + " /s", t.requests + " over the last " + num(t.span_s, 0) + " s"],
    ["latency p50", ms(t.latency_p50_ms), t.latency_mean_ms === null ? "" : "mean " + ms(t.latency_mean_ms)],
    ["latency p99", ms(t.latency_p99_ms), ""],
    ["canary share", pct(t.canary_share), t.canary_share === null ? "no canary" : "of routed requests"],
    ["failed", String(t.failed ?? 0), "requests"],
  ].map(([k, v, note]) => el("div", { class: "card", dataset: { traffic: k } },
    el("span", { class: "muted" }, k), el("b", null, v), note ? el("span", { class: "muted" }, note) : null));
  $("traffic-cards").replaceChildren(...cards);
  const samples = body.samples || {};
  $("traffic-endpoint").replaceChildren(...(body.endpoint ? ["endpoint ", el("code", null, body.endpoint),
    " (model " + body.model + ")" + (body.data_plane ? "" : ", not served now: the service runs no data plane") +
    "; samples kept " + (samples.stored ?? 0) + (samples.evicted ? " (" + samples.evicted + " evicted)" : "")] : []));
  $("traffic").hidden = false;
}

// Marker labels in rows so that none overprints another; a label that would leave the plot on
// the right is drawn to the left of its line. Widths are measured on the chart itself.
function placeLabels(chart, markers, sx, left, right) {
  const probe = svg("text", { class: "marker-label", x: 0, y: -100 });
  chart.append(probe);
  const rowsEnd = [];
  const placed = markers.slice().sort((a, b) => a.x - b.x).map((m) => {
    probe.textContent = m.label;
    const width = probe.getComputedTextLength() || m.label.length * 7;
    const x = sx(m.x);
    let start = x + 3;
    let anchor = "start";
    if (start + width > right) {
      start = x - 3 - width;
      anchor = "end";
    }
    start = Math.max(left, start);
    let row = rowsEnd.findIndex((end) => end + 6 <= start);
    if (row < 0) {
      row = rowsEnd.length;
      rowsEnd.push(0);
    }
    rowsEnd[row] = start + width;
    return { ...m, row, anchor, start, width };
  });
  probe.remove();
  return placed;
}

// Accuracy (0..1) against window (or epoch): the served line (broken where a window has no
// score), each canary run on its own (one window: a point), the trigger threshold, and a
// vertical marker per promotion, rollback and canary start. Drawn at the chart's real width.
function drawChart(chart, data) {
  const width = Math.max(280, Math.round((chart.parentElement || chart).clientWidth || 720));
  const H = width < 500 ? 220 : 260;
  const L = 44, R = 14, B = 30, ROW = 15;
  chart.replaceChildren();
  chart.setAttribute("viewBox", "0 0 " + width + " " + H);
  chart.setAttribute("width", width);
  chart.setAttribute("height", H);
  const canaryPoints = data.canaryRuns.flatMap((r) => r.points);
  const xs = [...data.served, ...canaryPoints, ...data.markers].map((p) => p.x);
  const x0 = xs.length ? Math.min(...xs) : 0;
  const x1 = xs.length ? Math.max(...xs, x0 + 1) : 1;
  const sx0 = (x) => L + ((x - x0) / (x1 - x0)) * (width - L - R);
  const labels = placeLabels(chart, data.markers, sx0, L, width - R);
  const rows = labels.length ? Math.max(...labels.map((l) => l.row)) + 1 : 0;
  const T = 10 + rows * ROW;
  const sy = (y) => T + (1 - Math.max(0, Math.min(1, y))) * (H - T - B);
  const parts = [];
  for (const y of [0, 0.25, 0.5, 0.75, 1]) {
    parts.push(svg("line", { class: "grid", x1: L, x2: width - R, y1: sy(y), y2: sy(y) }));
    parts.push(svg("text", { x: L - 6, y: sy(y) + 4, "text-anchor": "end" }, Math.round(y * 100) + "%"));
  }
  parts.push(svg("line", { class: "axis", x1: L, x2: width - R, y1: H - B, y2: H - B }));
  // Ticks on round numbers, at most one per 60 pixels, and the last window.
  const most = Math.max(1, Math.floor((width - L - R) / 60));
  const step = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000].find((s) => (x1 - x0) / s <= most) ||
    Math.ceil((x1 - x0) / most);
  const ticks = [];
  for (let x = Math.ceil(x0 / step) * step; x <= x1; x += step) ticks.push(x);
  if (!ticks.includes(x0) && (!ticks.length || sx0(ticks[0]) - sx0(x0) > 30)) ticks.unshift(x0);
  if (!ticks.includes(x1) && (!ticks.length || sx0(x1) - sx0(ticks[ticks.length - 1]) > 30)) ticks.push(x1);
  for (const x of ticks) parts.push(svg("text", { x: sx0(x), y: H - B + 15, "text-anchor": "middle" }, x));
  parts.push(svg("text", { x: width - R, y: H - 2, "text-anchor": "end" }, data.xLabel));
  if (data.threshold !== undefined && data.threshold !== null) {
    parts.push(svg("line", { class: "threshold", x1: L, x2: width - R, y1: sy(data.threshold), y2: sy(data.threshold),
                             "data-threshold": data.threshold }));
    parts.push(svg("text", { class: "threshold-label", x: width - R - 2, y: sy(data.threshold) - 4, "text-anchor": "end" },
      "trigger below " + pct(data.threshold)));
  }
  for (const m of labels) {
    parts.push(svg("line", { class: "marker " + m.kind, x1: sx0(m.x), x2: sx0(m.x), y1: T, y2: H - B,
                             "data-kind": m.kind, "data-x": m.x }));
    const text = svg("text", { class: "marker-label " + m.kind, x: m.anchor === "end" ? m.start + m.width : m.start,
                               y: 10 + m.row * ROW + 2, "text-anchor": m.anchor, "data-row": m.row }, m.label);
    if (m.message) text.append(svg("title", {}, m.message));
    parts.push(text);
  }
  // The served line, broken where a window was not scored.
  let segment = [];
  const flush = () => {
    if (segment.length > 1) parts.push(svg("polyline", { class: "served", points: segment.map((p) => sx0(p.x) + "," + sy(p.y)).join(" ") }));
    segment = [];
  };
  for (const p of data.served) {
    if (p.y === null || p.y === undefined) flush();
    else segment.push(p);
  }
  flush();
  data.canaryRuns.forEach((run, i) => {
    const group = svg("g", { class: "canary-run", "data-version": run.version, "data-from": run.points[0].x,
                             "data-to": run.points[run.points.length - 1].x, "data-run": i });
    if (run.points.length > 1) group.append(svg("polyline", { class: "canary", points: run.points.map((p) => sx0(p.x) + "," + sy(p.y)).join(" ") }));
    for (const p of run.points) {
      const dot = svg("circle", { class: "canary-point", cx: sx0(p.x), cy: sy(p.y), r: run.points.length > 1 ? 3 : 5 });
      dot.append(svg("title", {}, "canary v" + run.version + ", " + data.xLabel + " " + p.x + ": " + pct(p.y)));
      group.append(dot);
    }
    parts.push(group);
  });
  const scored = data.served.filter((p) => p.y !== null && p.y !== undefined);
  for (const p of scored) {
    const low = data.threshold !== undefined && data.threshold !== null && p.y < data.threshold;
    const dot = svg("circle", { class: "point" + (low ? " low" : ""), cx: sx0(p.x), cy: sy(p.y), r: 2.5 });
    dot.append(svg("title", {}, data.xLabel + " " + p.x + (p.version ? " (v" + p.version + ")" : "") + ": " + pct(p.y)));
    parts.push(dot);
  }
  chart.append(...parts);
  chart.dataset.points = String(scored.length);
  chart.dataset.markers = String(data.markers.length);
  chart.dataset.canaries = String(data.canaryRuns.length);
  chart.dataset.labelRows = String(rows);
  chart.dataset.lastX = scored.length ? String(scored[scored.length - 1].x) : "";
}

// -- allocations per window (Ekya) and placement decisions (MVSP) --------------------------

async function showLatest(jobs, kind, section, render) {
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
function renderWindowPlan(result) {
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

function renderPlacement(solution) {
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

// -- start ----------------------------------------------------------------------------------

$("log-rank").addEventListener("change", () => {
  if (ui.job) followLog(ui.job, Number($("log-rank").value));
});
$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  login($("token").value.trim());
});
$("logout").addEventListener("click", () => logout(""));
$("chart-range").addEventListener("click", (event) => {
  const range = event.target && event.target.dataset ? event.target.dataset.range : null;
  if (!range) return;
  ui.range = range;
  sessionStorage.setItem(RANGE_KEY, range);
  refreshDeployment().catch(quietly);
});
window.addEventListener("hashchange", () => applyRoute(true));
let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => { if (ui.chart) drawChart($("accuracy-chart"), ui.chart); }, 100);
});
document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
if (ui.token) login(ui.token);
