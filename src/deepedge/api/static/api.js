// The client of the tenant-scoped /v1 JSON API: the token (kept in this tab's
// sessionStorage), the session it belongs to, and what a failed request means.

const TOKEN_KEY = "deepedge.token";
const MISSING_RETRY_EVERY = 15; // refreshes between two probes of an endpoint that was 404

export class Unauthorized extends Error {}
export class Stale extends Error {}
export class Unreachable extends Error {}

let token = sessionStorage.getItem(TOKEN_KEY);
let session = 0;           // bumped at every login and logout
const missing = new Map(); // endpoint key -> refreshes left before probing a 404 again

export const hasToken = () => Boolean(token);
export const savedToken = () => token;
export const currentSession = () => session;

export function useToken(value) {
  token = value;
}

// The token was accepted: kept for this tab, and a new session begins.
export function keepToken() {
  sessionStorage.setItem(TOKEN_KEY, token);
  session += 1;
}

// Logout or a refused token: answers still in flight are dropped (Stale).
export function forgetToken() {
  session += 1;
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  missing.clear();
}

export const quietly = (err) => {
  if (!(err instanceof Stale) && !(err instanceof Unreachable)) console.warn(err);
};

// A request of the current session. A session ends at logout: an answer arriving after
// that is dropped (Stale), so nothing of one token's data reaches the next token's page.
// No answer at all, or a gateway's 502-504, means the service is unreachable.
export async function api(path, options) {
  const asked = session;
  if (!token) throw new Stale(path);
  let response;
  try {
    response = await fetch(path, {
      ...(options || {}),
      headers: { Authorization: "Bearer " + token },
      cache: "no-store",
    });
  } catch (err) {
    if (options && options.signal && options.signal.aborted) throw err;
    throw new Unreachable(path + ": " + err.message);
  }
  if (asked !== session) throw new Stale(path);
  if (response.status === 401) throw new Unauthorized(path);
  if (response.status >= 502 && response.status <= 504) throw new Unreachable(path + " answered " + response.status);
  return response;
}

// The JSON at path; null when it answers 404 (a section whose endpoint is absent stays
// hidden, and with a key, the endpoint is probed again only every MISSING_RETRY_EVERY rounds).
export async function getJson(path, key) {
  if (key && missing.has(key)) {
    const left = missing.get(key);
    if (left > 0) {
      missing.set(key, left - 1);
      return null;
    }
  }
  const response = await api(path);
  if (response.status === 404) {
    if (key) missing.set(key, MISSING_RETRY_EVERY);
    return null;
  }
  if (!response.ok) throw new Error(path + " answered " + response.status);
  if (key) missing.delete(key);
  const asked = session;
  let body;
  try {
    body = await response.json();
  } catch (err) {
    throw new Unreachable(path + ": " + err.message);
  }
  if (asked !== session) throw new Stale(path);
  return body;
}
