// The JSON API as the pages use it, and the seat tokens this browser holds.
//
// A seat's token is sent only in the Authorization header of an API call. It reaches a page in
// the address's fragment (#token=…, which browsers never send to a server); takeSeatFromAddress()
// moves it to localStorage at once and removes it from the address bar (history.replaceState).
// Nothing here logs it.

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem.code || `http_${status}`;
    this.detail = this.message;
    this.problem = problem;
  }
}

/** One API call: JSON in and out; a problem (RFC 9457) becomes an ApiError. */
export async function api(path, { method = "GET", body, token, headers = {} } = {}) {
  const sent = { Accept: "application/json", ...headers };
  if (body !== undefined) sent["Content-Type"] = "application/json";
  if (token) sent.Authorization = `Bearer ${token}`;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: sent,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
    });
  } catch {
    throw new ApiError(0, { code: "offline", detail: "The server cannot be reached; try again." });
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    throw new ApiError(response.status, data || { detail: response.statusText });
  }
  return data;
}

/** Every recorded event of a game after ``after``, oldest first (all pages). */
export async function allEvents(gameId, after = 0) {
  const events = [];
  let next = after;
  while (next !== null) {
    const page = await api(`/v1/games/${gameId}/events?after=${next}&limit=1000`);
    events.push(...page.events);
    next = page.next_after;
  }
  return events;
}

/** Every type of event a game's stream names (its `event:` lines), and the unnamed "message". */
const STREAM_EVENT_TYPES = [
  "message",
  "GameCreated",
  "SeatJoined",
  "SeatLeft",
  "TurnOrderDecided",
  "DiceRolled",
  "MovePlayed",
  "TurnStopped",
  "TurnBusted",
  "TurnTimedOut",
  "PlayerResigned",
  "GameFinished",
  "GameAbandoned",
  "SeedRevealed",
];

/** A game's live stream of events after version `after`: `onEvent(event)` for each one, and
 * `onRefused()` once the server refused the stream (an error status closes it for good; a
 * dropped connection the browser resumes by itself, sending Last-Event-ID). */
export function openGameStream(gameId, after, onEvent, onRefused) {
  const stream = new EventSource(`/v1/games/${gameId}/stream?after=${after}`);
  const handler = (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    onEvent(event);
  };
  for (const type of STREAM_EVENT_TYPES) stream.addEventListener(type, handler);
  stream.addEventListener("error", () => {
    if (stream.readyState === EventSource.CLOSED) onRefused();
  });
  return stream;
}

/** After the server refused a game's stream: if the store went back behind the `shown` version
 * (restored from a backup), it will refuse to resume after it every time, so the page starts
 * over from what the store holds (true: reloading). False when the store is not behind, or the
 * server cannot be reached (the caller tries again). */
export async function startOverIfStoreWentBack(gameId, shown) {
  try {
    const now = await api(`/v1/games/${gameId}`);
    if (now.version < shown) {
      location.reload();
      return true;
    }
  } catch {
    // away
  }
  return false;
}

/** A random text for an Idempotency-Key or a roll's entropy (visible ASCII, 32 hex digits). */
export function randomText() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The seeds of contract 1.1 for a new server-dice game or a rematch: a seed commitment asked for
 * first, then a client seed of this browser's choosing, so the server's seed was fixed before
 * it (the server cannot try seeds until it likes the dice). Manual dice need none.
 */
export async function committedSeeds(dice) {
  if (dice === "manual") return {};
  const { seed_commitment } = await api("/v1/seed-commitments", { method: "POST" });
  return { client_seed: randomText(), seed_commitment };
}

// ----------------------------------------------------------------------------- seat tokens
const KEY = (gameId) => `cantstop:seat:${gameId}`;
const memory = new Map(); // when localStorage is unavailable (a locked-down browser)

function store() {
  try {
    const probe = "cantstop:probe";
    localStorage.setItem(probe, "1");
    localStorage.removeItem(probe);
    return localStorage;
  } catch {
    return null;
  }
}

/** Move #token=…[&seat=N] from the address to this browser's storage for the game. */
export function takeSeatFromAddress(gameId) {
  if (!location.hash.includes("token=")) return;
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  const seat = params.get("seat");
  params.delete("token");
  params.delete("seat");
  const rest = params.toString();
  history.replaceState(history.state, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
  if (token) rememberSeat(gameId, token, seat !== null && /^\d+$/.test(seat) ? Number(seat) : null);
}

export function rememberSeat(gameId, token, seat) {
  const value = JSON.stringify({ token, seat });
  const storage = store();
  if (storage) storage.setItem(KEY(gameId), value);
  else memory.set(KEY(gameId), value);
}

/** {token, seat} (seat null when this browser was handed a token without it), or null. */
export function heldSeat(gameId) {
  const storage = store();
  const raw = storage ? storage.getItem(KEY(gameId)) : memory.get(KEY(gameId));
  try {
    const value = JSON.parse(raw);
    if (value && typeof value.token === "string" && value.token) {
      return { token: value.token, seat: Number.isInteger(value.seat) ? value.seat : null };
    }
  } catch {
    // nothing held, or something unreadable: nothing held
  }
  return null;
}

export function forgetSeat(gameId) {
  const storage = store();
  if (storage) storage.removeItem(KEY(gameId));
  memory.delete(KEY(gameId));
}

/** The address that hands a seat to a browser: the token rides in the fragment only. */
export function seatLink(gameId, token, seat) {
  const fragment = new URLSearchParams({ token, seat: String(seat) });
  return `${location.origin}/games/${gameId}#${fragment}`;
}
