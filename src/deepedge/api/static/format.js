// Values as the page writes them: times, percentages, short ids, stop reasons (pure).

const STOP_REASONS = { converged: "converged", max_epochs: "max epochs reached",
  target_reached: "target accuracy reached", continue: "still improving" };

export const clock = (at) => (at ? new Date(at * 1000).toLocaleTimeString() : "—");
export const pct = (x) => (x === null || x === undefined ? "—" : (100 * x).toFixed(1) + " %");
export const num = (x, d = 2) => (x === null || x === undefined ? "—" : Number(x).toFixed(d));
export const short = (id) => (id ? id.slice(0, 8) : "—");
export const list = (xs) => (xs && xs.length ? xs.join(", ") : "—");
export const known = (x) => x !== null && x !== undefined;

// A load as a whole percentage: "43 %".
export const wholePct = (x) => (x === null || x === undefined ? "—" : Math.round(100 * x) + " %");

// "21:50:40 (75 s ago)": the time of day of at and how long before now (both in
// seconds) it was; minutes from 120 s on, hours from 120 min on.
export function since(at, now) {
  const d = new Date(at * 1000);
  const hms = [d.getHours(), d.getMinutes(), d.getSeconds()].map((v) => String(v).padStart(2, "0")).join(":");
  const s = Math.max(0, Math.round(now - at));
  const age = s < 120 ? s + " s" : s < 7200 ? Math.floor(s / 60) + " min" : Math.floor(s / 3600) + " h";
  return hms + " (" + age + " ago)";
}

export function ago(at) {
  if (!at) return "—";
  const s = Math.max(0, Date.now() / 1000 - at);
  if (s < 60) return Math.floor(s) + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return Math.floor(s / 86400) + "d ago";
}

// An update's stop reason: its value (the learner's), or an older result's enum name.
export function stopReason(reason) {
  const key = String(reason || "").split(".").pop().toLowerCase();
  return STOP_REASONS[key] || key.replace(/_/g, " ");
}

export function describe(object) {
  return Object.entries(object).map(([k, v]) => k + " " + (typeof v === "object" ? JSON.stringify(v) : v)).join(", ");
}
