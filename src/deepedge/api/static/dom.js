// Building the page: elements and SVG nodes whose values are always text (never markup),
// table bodies, clickable rows, and the small pieces every view shares.
import { ago, clock, pct, short } from "./format.js";
import { route } from "./router.js";

const SVG = "http://www.w3.org/2000/svg";
export const NEAR_THRESHOLD = 0.05; // accuracy this close above the trigger threshold is a warning

export const $ = (id) => document.getElementById(id);

export function el(tag, attrs, ...children) {
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

export function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// A time cell: the local time, its age on hover.
export function when(at) {
  return el("span", { title: at ? new Date(at * 1000).toLocaleString() + " (" + ago(at) + ")" : null }, clock(at));
}

export function status(text) {
  return el("span", { class: "status s-" + text }, text);
}

export function link(kind, id, text) {
  const a = el("a", { href: route(kind, id) }, text);
  a.addEventListener("click", (event) => event.stopPropagation());
  return a;
}

// A job's link by its short id, never broken across lines.
export function jobLink(id) {
  const a = link("jobs", id, short(id));
  a.className = "id";
  a.title = id;
  return a;
}

// "ok" at or above threshold + NEAR_THRESHOLD, "warn" just above it, "bad" below it.
export function accuracyClass(accuracy, threshold) {
  if (accuracy === null || accuracy === undefined || threshold === null || threshold === undefined) return "";
  if (accuracy < threshold) return "acc-bad";
  return accuracy < threshold + NEAR_THRESHOLD ? "acc-warn" : "acc-ok";
}

export function accuracy(value, threshold) {
  const cls = accuracyClass(value, threshold);
  const title = threshold === null || threshold === undefined ? null
    : (cls === "acc-bad" ? "below" : "above") + " the trigger threshold " + pct(threshold);
  return el("span", { class: "acc " + cls, title, dataset: { level: cls.replace("acc-", "") } }, pct(value));
}

export function bar(fraction, kind) {
  const fill = el("span");
  fill.style.width = Math.max(0, Math.min(1, fraction || 0)) * 100 + "%";
  return el("span", { class: "bar " + (kind || ""), title: pct(fraction) }, fill);
}

// A table row that opens its detail by click, or by Enter / Space from the keyboard.
export function pickable(row, open) {
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
export function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
  const headers = [...tbody.parentElement.querySelectorAll("thead th")].map((th) => th.textContent);
  for (const row of tbody.rows) {
    [...row.cells].forEach((cell, i) => { if (headers[i]) cell.dataset.label = headers[i]; });
  }
}

// A table and the sentence shown in its place while it has no row.
export function fillOrSay(table, note, rows) {
  fill(table.tBodies[0], rows);
  table.hidden = rows.length === 0;
  note.hidden = rows.length > 0;
}

export function joined(nodes) {
  if (!nodes.length) return ["—"];
  return nodes.flatMap((node, i) => (i ? [", ", node] : [node]));
}
