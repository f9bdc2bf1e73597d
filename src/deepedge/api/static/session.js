// Logging in and out with a tenant token, and the refresh rounds in between.
import { Stale, Unauthorized, Unreachable, currentSession, forgetToken, getJson, hasToken, keepToken,
  useToken } from "./api.js";
import { clearDeployments, refreshDeployments } from "./deployments.js";
import { $ } from "./dom.js";
import { num } from "./format.js";
import { clearHealth, markReachable, markUnreachable, renderHealth } from "./health.js";
import { clearJobs, refreshJobs } from "./jobs.js";
import { clearNodes, refreshHost, refreshNodes } from "./nodes.js";
import { clearResults } from "./results.js";
import { applyRoute, forgetRoute } from "./router.js";
import { resetState } from "./state.js";

const REFRESH_MS = 2000;
const TENANT_EVERY = 15; // refreshes between two reads of the tenant (quotas in use)

let timer = null;
let refreshing = false; // a refresh round is in flight
let rounds = 0;         // refresh rounds of this session

export async function login(token) {
  useToken(token);
  let tenant;
  try {
    tenant = await getJson("/v1/tenant");
  } catch (err) {
    forgetToken();
    $("login-error").textContent =
      err instanceof Unauthorized ? "This token was refused." : "The service did not answer: " + err.message;
    return;
  }
  keepToken();
  $("token").value = "";
  rounds = 0;
  showTenant(tenant);
  $("login-error").textContent = "";
  $("login-view").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  await refresh();
  applyRoute(true);
}

function showTenant(tenant) {
  $("whoami").textContent = tenant ? "tenant " + tenant.name : "logged in with a tenant token";
  $("whoami").title = tenant ? "tenant id " + tenant.id + "; " + tenant.active_jobs + " of " +
    tenant.max_active_jobs + " active jobs, " + num(tenant.cores_in_use, 1) + " of " + num(tenant.max_cores, 1) + " cores" : "";
}

export function logout(message) {
  forgetToken();
  clearTimeout(timer);
  resetState();
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login-view").hidden = false;
  $("login-error").textContent = message || "";
  $("token").value = "";
  // Nothing of this token's data stays in the page for the next one.
  clearHealth();
  clearJobs();
  clearResults();
  clearNodes();
  clearDeployments();
  forgetRoute();
}

// One round at a time: a call while a round is in flight (login, the tab shown again) is
// dropped, and the round in flight schedules the next.
export async function refresh() {
  clearTimeout(timer);
  if (!hasToken() || refreshing) return;
  refreshing = true;
  const session = currentSession();
  try {
    if (!document.hidden) {
      const reads = [refreshJobs(), refreshHost(), refreshNodes(), refreshDeployments()];
      if (rounds % TENANT_EVERY === 0 && rounds > 0) reads.push(getJson("/v1/tenant").then(showTenant));
      await Promise.all(reads);
      rounds += 1;
      renderHealth();
      markReachable();
      // Milliseconds from navigation to the first complete render (read by the benchmark).
      if (!document.body.dataset.firstRenderMs) document.body.dataset.firstRenderMs = performance.now().toFixed(1);
    }
  } catch (err) {
    if (err instanceof Stale || session !== currentSession()) {
      // this round belonged to an ended session: the next starts at once
    } else if (err instanceof Unauthorized) {
      refreshing = false;
      return logout("The token is no longer accepted.");
    } else if (err instanceof Unreachable) {
      markUnreachable(err.message);
    } else {
      $("refresh-state").textContent = "refresh failed: " + err.message;
    }
  } finally {
    refreshing = false;
  }
  if (hasToken()) timer = setTimeout(refresh, session === currentSession() ? REFRESH_MS : 0);
}
