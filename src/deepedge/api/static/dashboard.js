// deepedge dashboard: vanilla JS modules over the tenant-scoped /v1 JSON API (no libraries,
// no build step). Every value from the API reaches the page through textContent or an SVG
// attribute, never through innerHTML. This entry wires the views to the page's controls
// and to the URL.
import { hasToken, savedToken } from "./api.js";
import { openDeployment, redraw, setRange } from "./deployments.js";
import { $ } from "./dom.js";
import { followLog, selectJob } from "./jobs.js";
import { openNode } from "./nodes.js";
import { applyRoute, onRoute } from "./router.js";
import { login, logout, refresh } from "./session.js";
import { state } from "./state.js";

onRoute("deployments", openDeployment);
onRoute("jobs", (id, scroll) => {
  if (scroll) state.scrollTo = "job-detail";
  selectJob(id);
});
onRoute("nodes", openNode);

$("log-rank").addEventListener("change", () => {
  if (state.job) followLog(state.job, Number($("log-rank").value));
});
$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  login($("token").value.trim());
});
$("logout").addEventListener("click", () => logout(""));
$("chart-range").addEventListener("click", (event) => {
  const range = event.target && event.target.dataset ? event.target.dataset.range : null;
  if (range) setRange(range);
});
window.addEventListener("hashchange", () => {
  if (hasToken()) applyRoute(true);
});
let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(redraw, 100);
});
document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
if (hasToken()) login(savedToken());
