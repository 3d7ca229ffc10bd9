// The JSON API as the pages use it, and the seat tokens and the account this browser holds.
//
// A seat's token is sent only in the Authorization header of an API call. It reaches a page in
// the address's fragment (#token=…, which browsers never send to a server); takeSeatFromAddress()
// removes it from the address bar at once (history.replaceState) and moves it to localStorage,
// but never silently in place of a token already held for the game (see there).
// An account's personal token (contract 1.2) comes in the answer to signing up or in (the account
// page, account.js) and is kept the same way, in localStorage, until signing out: it too is sent
// only in the Authorization header, never in an address. Nothing here logs either.

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

/** `read` (async), made to run one at a time: a call while it runs makes one more run after it
 * (however many such calls came), so a page re-reading on each change announced never reads
 * twice at once nor misses the last change. A failed run is left for the next call. */
export function oneReadAtATime(read) {
  let reading = false;
  let again = false;
  return async () => {
    if (reading) {
      again = true;
      return;
    }
    reading = true;
    try {
      do {
        again = false;
        await read();
      } while (again);
    } catch {
      // away for now: the next change, or the stream's reconnection, reads again
    } finally {
      reading = false;
    }
  };
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

/**
 * Move #token=…[&seat=N] from the address to this browser's storage for the game. The fragment
 * leaves the address bar at once, whatever comes of its token.
 *
 * Game ids are public, so anyone can send a player a link to their own game with a token of
 * their choosing: a link's token must never silently replace the token this browser already
 * holds for the game (the player would lose their seat, and on a clocked game time out). So a
 * different token is first checked with the server (GET /v1/games/{id}/seat): one that holds no
 * seat is dropped, one that does replaces the held token only if the person confirms it, naming
 * the seat (`describe(seat)`: its words, e.g. "Bob (seat 1)"); one of the seat already held is
 * taken. The seat the signed-in account holds (`accountSeat`) counts as held. With nothing held
 * for the game, the link's token is taken as it comes (the game page then asks which seat it
 * holds).
 *
 * Resolves to a message for the page to show when the link's token was not taken, else null.
 */
export async function takeSeatFromAddress(gameId, describe = (seat) => `seat ${seat}`, accountSeat = null) {
  if (!location.hash.includes("token=")) return null;
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  const seatText = params.get("seat");
  params.delete("token");
  params.delete("seat");
  const rest = params.toString();
  history.replaceState(history.state, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
  if (!token) return null;
  // A seat the signed-in account holds (`accountSeat`, played with its personal token) is held
  // as much as a stored seat token is.
  const before = heldSeat(gameId) || (accountSeat === null ? null : { token: null, seat: accountSeat });
  if (!before) {
    rememberSeat(gameId, token, seatText !== null && /^\d+$/.test(seatText) ? Number(seatText) : null);
    return null;
  }
  if (before.token === token) return null; // the seat this browser holds already
  const kept = before.seat === null ? "the seat it holds" : describe(before.seat);
  let seat;
  try {
    ({ seat } = await api(`/v1/games/${gameId}/seat`, { token }));
  } catch (e) {
    // Refused (401): a token of no seat, perhaps sent to take this browser's seat away.
    // Not answered: it cannot be checked now, and the held one stays (the link can be opened again).
    return e.status === 401
      ? `The link's token holds no seat of this game: this browser keeps ${kept}.`
      : `The link's token could not be checked (${e.detail}): this browser keeps ${kept}.`;
  }
  if (!Number.isInteger(seat)) return `The link's token could not be checked: this browser keeps ${kept}.`;
  if (seat === before.seat) {
    rememberSeat(gameId, token, seat); // the same seat: nothing is taken away
    return null;
  }
  const question =
    `This link plays ${describe(seat)} of this game, but this browser holds ${kept}.\n\n` +
    `Play ${describe(seat)} from now on in this browser? (Cancel keeps ${kept}.)`;
  if (!window.confirm(question)) return `This browser keeps ${kept}; the link's seat was not taken.`;
  rememberSeat(gameId, token, seat);
  return null;
}

/** Keep `token` (of `seat`, or null when not known yet) as this browser's token for the game,
 * in place of any held: only for a token this browser itself was given by the server (taking a
 * seat, creating a game) or one already checked (takeSeatFromAddress), never a link's as such. */
export function rememberSeat(gameId, token, seat) {
  write(KEY(gameId), JSON.stringify({ token, seat }));
}

function read(key) {
  const storage = store();
  return storage ? storage.getItem(key) : memory.get(key);
}

function write(key, value) {
  const storage = store();
  if (storage) storage.setItem(key, value);
  else memory.set(key, value);
}

function remove(key) {
  const storage = store();
  if (storage) storage.removeItem(key);
  memory.delete(key);
}

/** {token, seat} (seat null when this browser was handed a token without it), or null. */
export function heldSeat(gameId) {
  const raw = read(KEY(gameId));
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
  remove(KEY(gameId));
}

/** The address that hands a seat to a browser: the token rides in the fragment only. */
export function seatLink(gameId, token, seat) {
  const fragment = new URLSearchParams({ token, seat: String(seat) });
  return `${location.origin}/games/${gameId}#${fragment}`;
}

// --------------------------------------------------------------------------- the account
const ACCOUNT_KEY = "cantstop:account";

/** The account this browser is signed in as: {handle, token, tokenId, scopes}, or null. */
export function heldAccount() {
  try {
    const value = JSON.parse(read(ACCOUNT_KEY));
    if (value && typeof value.handle === "string" && typeof value.token === "string" && value.token) {
      return {
        handle: value.handle,
        token: value.token,
        tokenId: typeof value.tokenId === "string" ? value.tokenId : null,
        scopes: Array.isArray(value.scopes) ? value.scopes : [],
      };
    }
  } catch {
    // nothing held, or something unreadable: signed out
  }
  return null;
}

export function rememberAccount({ handle, token, tokenId, scopes }) {
  write(ACCOUNT_KEY, JSON.stringify({ handle, token, tokenId, scopes }));
}

export function forgetAccount() {
  remove(ACCOUNT_KEY);
}

/** Whether ``handle`` names the account (handles are equal without regard to case). */
export function sameHandle(a, b) {
  return typeof a === "string" && typeof b === "string" && a.toLowerCase() === b.toLowerCase();
}

/** The seat of ``state`` that ``account`` holds (players[i].account), or null. */
export function accountSeat(state, account) {
  if (!account) return null;
  const mine = state.players.find((p) => sameHandle(p.account, account.handle));
  return mine ? mine.seat : null;
}

// ------------------------------------------------------------------------------- receipts
// Contract 1.2: every answer to an action carries the server's signed receipt of the game's
// latest version. This browser keeps the latest receipt of each game it acted in (the 200 most
// recently acted in), and every public key of the server it has seen (GET /v1/keys, read when a
// receipt names a key not held yet): so the replay page can check the history the server serves
// later against what it acknowledged then, with the keys as they were, even if the server
// changes its keys since. Nothing here is secret: a receipt is proof, not a credential.
const RECEIPTS_KEY = "cantstop:receipts"; // {game_id: receipt}, the least recently kept first
const RECEIPT_KEYS_KEY = "cantstop:receipt-keys"; // {"keys": [GET /v1/keys's keys, merged]}
export const RECEIPTS_KEPT = 200;
const RECEIPT_TEXT = ["game_id", "hash", "at", "key_id", "signature"];

/** Whether ``value`` has a receipt's shape (the contract's six fields). */
export function isReceipt(value) {
  return Boolean(
    value &&
      typeof value === "object" &&
      Number.isInteger(value.version) &&
      value.version >= 1 &&
      RECEIPT_TEXT.every((f) => typeof value[f] === "string"),
  );
}

function heldReceipts() {
  try {
    const value = JSON.parse(read(RECEIPTS_KEY));
    if (value && typeof value === "object" && !Array.isArray(value)) return value;
  } catch {
    // nothing held, or something unreadable: nothing held
  }
  return {};
}

/** The receipt this browser holds for the game, or null. */
export function heldReceipt(gameId) {
  const receipt = heldReceipts()[gameId];
  return isReceipt(receipt) && receipt.game_id === gameId ? receipt : null;
}

/** The keys this browser holds to check receipts with: {"keys": [...]}. */
export function heldReceiptKeys() {
  try {
    const value = JSON.parse(read(RECEIPT_KEYS_KEY));
    if (value && Array.isArray(value.keys)) {
      return { keys: value.keys.filter((k) => k && typeof k.key_id === "string") };
    }
  } catch {
    // none held
  }
  return { keys: [] };
}

/** Add the keys of an answer of GET /v1/keys to those held. A key id held keeps its key: a
 * server that later publishes another key under the same id does not change what was seen. */
export function rememberReceiptKeys(published) {
  const held = heldReceiptKeys();
  const known = new Set(held.keys.map((k) => k.key_id));
  const fresh = (published && Array.isArray(published.keys) ? published.keys : []).filter(
    (k) => k && typeof k.key_id === "string" && typeof k.public_key === "string" && !known.has(k.key_id),
  );
  if (!fresh.length) return held;
  const merged = { keys: [...held.keys, ...fresh] };
  try {
    write(RECEIPT_KEYS_KEY, JSON.stringify(merged));
  } catch {
    // storage full: kept for this page only
  }
  return merged;
}

/** Keep ``receipt`` as the game's latest, if it is later than the one held (a late answer never
 * replaces a later receipt); the least recently kept games beyond RECEIPTS_KEPT are dropped.
 * True when it was kept. */
export function keepReceipt(receipt) {
  if (!isReceipt(receipt)) return false;
  const all = heldReceipts();
  const before = all[receipt.game_id];
  if (isReceipt(before) && before.version >= receipt.version) return false;
  delete all[receipt.game_id]; // and added again: the most recently kept last
  all[receipt.game_id] = receipt;
  const ids = Object.keys(all);
  for (const id of ids.slice(0, Math.max(0, ids.length - RECEIPTS_KEPT))) delete all[id];
  try {
    write(RECEIPTS_KEY, JSON.stringify(all));
  } catch {
    return false; // storage full or refused
  }
  return true;
}

/** Keep the receipt of an action's answer and, if its key is not held yet, the server's keys
 * (best effort: a failure here never disturbs play; the replay page asks again if need be). */
export async function keepReceiptOf(answer) {
  const receipt = answer && answer.receipt;
  if (!keepReceipt(receipt)) return;
  if (heldReceiptKeys().keys.some((k) => k.key_id === receipt.key_id)) return;
  try {
    rememberReceiptKeys(await api("/v1/keys"));
  } catch {
    // away: the replay page reads the keys when it checks
  }
}
