// Deep links: #/deployments/NAME, #/jobs/ID (or a unique prefix), #/nodes/NAME. The views
// register what opening one of them does; the URL is the page's only state.
import { state } from "./state.js";

const views = new Map(); // kind -> open(id, scroll)

export const route = (kind, id) => "#/" + kind + "/" + encodeURIComponent(id);

export function onRoute(kind, open) {
  views.set(kind, open);
}

function parseRoute() {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const kind = parts[0] || "";
  const id = parts.length > 1 ? decodeURIComponent(parts.slice(1).join("/")) : "";
  return { kind, id };
}

export function applyRoute(scroll) {
  const { kind, id } = parseRoute();
  const open = views.get(kind);
  if (open && id) open(id, scroll);
}

export function go(kind, id) {
  const target = route(kind, id);
  if (location.hash === target) applyRoute(false);
  else location.hash = target;
}

export function forgetRoute() {
  history.replaceState(null, "", location.pathname + location.search);
}

// The rows of the three lists that are shown in detail.
export function markSelected() {
  const mark = (table, key, selected) => {
    for (const row of document.getElementById(table).tBodies[0].rows) {
      row.classList.toggle("selected", row.dataset[key] === selected);
    }
  };
  mark("deployments", "deployment", state.deployment);
  mark("jobs", "jobId", state.job);
  mark("nodes", "node", state.node);
}

export function scrollOnce(id) {
  if (state.scrollTo === id) {
    state.scrollTo = null;
    document.getElementById(id).scrollIntoView({ block: "start" });
  }
}
