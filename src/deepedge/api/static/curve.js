// A deployment's windows and decisions (GET /v1/deployments/{name}/windows and /events) as
// the accuracy chart draws them (pure: documents in, chart data out).
import { known } from "./format.js";

const MARKER_KINDS = { "promoted": "update", "rolled-back": "rollback", "canary-started": "canary" };
const CHANGES = new Set(["update", "rollback"]); // markers that change the served version

// Consecutive windows of one version that carry `value`: each run a line of its own.
export function runsOf(points, value, version) {
  const runs = [];
  let run = null;
  for (const p of points) {
    if (!known(p[value])) {
      run = null;
      continue;
    }
    const last = run && run.points[run.points.length - 1];
    if (!run || p[version] !== run.version || p.window !== last.x + 1) {
      run = { version: p[version], points: [] };
      runs.push(run);
    }
    run.points.push({ x: p.window, y: p[value] });
  }
  return runs;
}

// The decisions' markers. An event without a window (e.g. the first version, promoted before
// window 0) is drawn at the first window scored after it.
function eventMarkers(points, events) {
  const windowAt = (at) => {
    const next = points.find((p) => p.at >= at);
    return next ? next.window : points.length ? points[points.length - 1].window : 0;
  };
  return events.filter((e) => MARKER_KINDS[e.kind])
    .map((e) => ({ x: e.window !== null ? e.window : windowAt(e.at), kind: MARKER_KINDS[e.kind],
                   label: (e.kind === "rolled-back" ? "rollback " : e.kind === "canary-started" ? "canary " : "") +
                     (e.version ? "v" + e.version : e.kind), message: e.message }));
}

// Where the served version changed from one window to the next and no promotion or rollback
// of the events read says so (an older one than the events read, an operator's action): the
// windows are what was served, whatever the events kept.
export function versionChanges(points, markers) {
  const changes = [];
  for (let i = 1; i < points.length; i++) {
    const before = points[i - 1].served_version, now = points[i].served_version;
    if (!known(now) || !known(before) || now === before) continue;
    const x = points[i].window;
    if (markers.some((m) => CHANGES.has(m.kind) && m.x >= points[i - 1].window && m.x <= x)) continue;
    changes.push({ x, kind: "version", label: "v" + now, message: "v" + now + " serves from window " + x +
                   " (v" + before + " before)" });
  }
  return changes;
}

// The level the site had before the newest drift in view: the trigger's own reading (the
// control plane's `level` of an accuracy-drop trigger), from the first window in view to it.
function levelBefore(points, events) {
  const first = points.length ? points[0].window : 0;
  const trigger = events.filter((e) => e.kind === "trigger" && e.detail && known(e.detail.level) &&
                                       known(e.window) && e.window >= first).pop();
  return trigger ? { y: trigger.detail.level, from: first, to: trigger.window } : null;
}

export function curve(points, events, threshold) {
  const first = points.length ? points[0].window : 0;
  const markers = eventMarkers(points, events).filter((m) => m.x >= first);
  return {
    served: points.map((p) => ({ x: p.window, y: p.accuracy, version: p.served_version })),
    shadowRuns: runsOf(points, "previous_accuracy", "previous_version"),
    canaryRuns: runsOf(points, "canary_accuracy", "canary_version"),
    markers: [...markers, ...versionChanges(points, markers)],
    level: levelBefore(points, events),
    threshold,
    xLabel: "window",
  };
}
