// The accuracy chart: inline SVG drawn at its container's real width, so that its 12-pixel
// text stays 12 pixels on a phone. Every value reaches it as an attribute or as text.
import { svg } from "./dom.js";
import { known, pct } from "./format.js";

const ROW = 15; // pixels per row of marker labels
const GAP = 4;  // pixels kept clear on either side of a label

function measure(chart, cls, text) {
  const probe = svg("text", { class: cls, x: 0, y: -100 }, text);
  chart.append(probe);
  const width = probe.getComputedTextLength() || text.length * 7;
  probe.remove();
  return width;
}

// Marker labels in rows so that none overprints another; a label that would leave the plot on
// the right is drawn to the left of its line. Widths are measured on the chart itself.
function placeLabels(chart, markers, sx, left, right) {
  const rowsEnd = [];
  return markers.slice().sort((a, b) => a.x - b.x).map((m) => {
    const width = measure(chart, "marker-label", m.label);
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
}

// Where a label of `width` pixels goes between `left` and `right`: at the preferred end, else
// the other end, else the widest stretch between two blocked spans (marker lines, [x, x]; other
// labels, [x1, x2]); the start of the first place that crosses none, or null (the marker
// lines are then broken around it instead).
export function labelStart(width, blocked, left, right, preferLeft) {
  const clear = (start) => blocked.every(([a, z]) => z < start - GAP || a > start + width + GAP);
  const ends = preferLeft ? [left, right - width] : [right - width, left];
  const found = ends.find(clear);
  if (found !== undefined) return found;
  const spans = blocked.filter(([a, z]) => z > left && a < right).sort((p, q) => p[0] - q[0]);
  let best = null;
  let from = left;
  for (const [a, z] of [...spans, [right, right]]) {
    const room = a - from - 2 * GAP;
    if (room >= width && (best === null || room > best.room)) best = { room, start: from + GAP + (room - width) / 2 };
    from = Math.max(from, z);
  }
  return best ? best.start : null;
}

// A vertical line from y1 to y2 at x, less the boxes it would cross: its pieces.
export function around(x, y1, y2, boxes) {
  let pieces = [[y1, y2]];
  for (const b of boxes) {
    if (x < b.x1 || x > b.x2) continue;
    pieces = pieces.flatMap(([a, z]) => (z <= b.y1 || a >= b.y2 ? [[a, z]]
      : [[a, b.y1], [b.y2, z]].filter(([p, q]) => q - p > 1)));
  }
  return pieces;
}

// A line of accuracy per run of points (a run: consecutive x of one version), each a polyline
// with a dot per point, or one larger dot for a run of one.
function runs(data, cls, title, sx, sy) {
  return data.map((run, i) => {
    const group = svg("g", { class: cls + "-run", "data-version": run.version ?? "", "data-from": run.points[0].x,
                             "data-to": run.points[run.points.length - 1].x, "data-run": i });
    if (run.points.length > 1) group.append(svg("polyline", { class: cls, points: run.points.map((p) => sx(p.x) + "," + sy(p.y)).join(" ") }));
    for (const p of run.points) {
      const dot = svg("circle", { class: cls + "-point", cx: sx(p.x), cy: sy(p.y), r: run.points.length > 1 ? 3 : 5 });
      dot.append(svg("title", {}, title(run, p)));
      group.append(dot);
    }
    return group;
  });
}

// Accuracy (0..1) against window (or epoch): the served line (broken where a window has no
// score), the version it replaced on the same samples ("without this update", where scored),
// each canary run on its own, the trigger threshold, the level before the newest drift, and
// a vertical marker per promotion, rollback, canary start and change of the served version.
export function drawChart(chart, data) {
  const shadow = data.shadowRuns || [];
  const width = Math.max(280, Math.round((chart.parentElement || chart).clientWidth || 720));
  const H = width < 500 ? 220 : 260;
  const L = 44, R = 14, B = 30;
  chart.replaceChildren();
  chart.setAttribute("viewBox", "0 0 " + width + " " + H);
  chart.setAttribute("width", width);
  chart.setAttribute("height", H);
  const extra = [...data.canaryRuns, ...shadow].flatMap((r) => r.points);
  const xs = [...data.served, ...extra, ...data.markers].map((p) => p.x);
  const x0 = xs.length ? Math.min(...xs) : 0;
  const x1 = xs.length ? Math.max(...xs, x0 + 1) : 1;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (width - L - R);
  const labels = placeLabels(chart, data.markers, sx, L, width - R);
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
  if (!ticks.includes(x0) && (!ticks.length || sx(ticks[0]) - sx(x0) > 30)) ticks.unshift(x0);
  if (!ticks.includes(x1) && (!ticks.length || sx(x1) - sx(ticks[ticks.length - 1]) > 30)) ticks.push(x1);
  for (const x of ticks) parts.push(svg("text", { x: sx(x), y: H - B + 15, "text-anchor": "middle" }, x));
  parts.push(svg("text", { x: width - R, y: H - 2, "text-anchor": "end" }, data.xLabel));

  // The horizontal levels and their labels, placed where no marker line runs and drawn
  // over the data (with a halo) so that a line passing under them leaves them readable.
  const blocked = labels.map((m) => [sx(m.x), sx(m.x)]);
  const boxes = [];
  const texts = [];
  const level = (cls, y, text, span, attrs) => {
    const a = span ? sx(span.from) : L, z = span ? sx(span.to) : width - R;
    parts.push(svg("line", { class: cls, x1: a, x2: z, y1: sy(y), y2: sy(y), ...attrs }));
    const w = measure(chart, cls + "-label", text);
    // above the line, unless that would leave the plot
    let base = sy(y) - 4 - 12 < T ? sy(y) + 14 : sy(y) - 4;
    const near = boxes.filter((b) => b.y1 < base + 4 && b.y2 > base - 12).map((b) => [b.x1, b.x2]);
    // a level of part of the chart is labelled from its start; the threshold at the right
    const left = span ? Math.min(a, width - R - 2 - w) : L + GAP + 1;
    const right = span ? Math.max(z, Math.min(width - R - 2, a + 2 * w)) : width - R - 2;
    const found = labelStart(w, [...blocked, ...near], Math.max(L + GAP + 1, left), right, Boolean(span));
    const start = found === null ? (span ? Math.max(L + GAP + 1, left) : right - w) : found;
    // nowhere clear on its row: below any label it would overprint
    for (const b of boxes) {
      if (b.x1 < start + w + GAP && b.x2 > start - GAP && b.y1 < base + 4 && b.y2 > base - 12) base = b.y2 + 13;
    }
    texts.push(svg("text", { class: cls + "-label", x: start, y: base, "text-anchor": "start" }, text));
    boxes.push({ x1: start - GAP, x2: start + w + GAP, y1: base - 12, y2: base + 4 });
  };
  if (known(data.threshold)) {
    level("threshold", data.threshold, "trigger below " + pct(data.threshold), null,
          { "data-threshold": data.threshold });
  }
  if (data.level && known(data.level.y)) {
    level("before", data.level.y, "before the drift " + pct(data.level.y), data.level,
          { "data-level": data.level.y, "data-window": data.level.to });
  }
  for (const m of labels) {
    const x = sx(m.x);
    // One line.marker a marker; where it had to be broken around a label, its other pieces.
    around(x, T, H - B, boxes).forEach(([y1, y2], i) => parts.push(svg("line", i
      ? { class: "marker-rest " + m.kind, x1: x, x2: x, y1, y2 }
      : { class: "marker " + m.kind, x1: x, x2: x, y1, y2, "data-kind": m.kind, "data-x": m.x })));
    const text = svg("text", { class: "marker-label " + m.kind, x: m.anchor === "end" ? m.start + m.width : m.start,
                               y: 10 + m.row * ROW + 2, "text-anchor": m.anchor, "data-row": m.row,
                               "data-kind": m.kind }, m.label);
    if (m.message) text.append(svg("title", {}, m.message));
    parts.push(text);
  }
  parts.push(...runs(shadow, "shadow", (run, p) => "without this update (v" + run.version + "), " + data.xLabel + " " +
    p.x + ": " + pct(p.y), sx, sy));
  // The served line, broken where a window was not scored.
  let segment = [];
  const flush = () => {
    if (segment.length > 1) parts.push(svg("polyline", { class: "served", points: segment.map((p) => sx(p.x) + "," + sy(p.y)).join(" ") }));
    segment = [];
  };
  for (const p of data.served) {
    if (known(p.y)) segment.push(p);
    else flush();
  }
  flush();
  parts.push(...runs(data.canaryRuns, "canary", (run, p) => "canary v" + run.version + ", " + data.xLabel + " " + p.x +
    ": " + pct(p.y), sx, sy));
  const scored = data.served.filter((p) => known(p.y));
  for (const p of scored) {
    const low = known(data.threshold) && p.y < data.threshold;
    const dot = svg("circle", { class: "point" + (low ? " low" : ""), cx: sx(p.x), cy: sy(p.y), r: 2.5,
                                "data-version": p.version ?? "" });
    dot.append(svg("title", {}, data.xLabel + " " + p.x + (p.version ? " (v" + p.version + ")" : "") + ": " + pct(p.y)));
    parts.push(dot);
  }
  chart.append(...parts, ...texts);
  chart.dataset.points = String(scored.length);
  chart.dataset.markers = String(data.markers.length);
  chart.dataset.canaries = String(data.canaryRuns.length);
  chart.dataset.shadow = String(shadow.reduce((n, r) => n + r.points.length, 0));
  chart.dataset.labelRows = String(rows);
  chart.dataset.lastX = scored.length ? String(scored[scored.length - 1].x) : "";
}
