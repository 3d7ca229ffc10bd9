// Replay and audit: step through every version of a game (buttons, ← → Home End, a slider),
// the event list with the current one marked, the audit's verdict, and the game's files; and,
// when this browser holds the server's receipt of the game (kept when it played, api.js), the
// check of the game's export against that receipt.

import {
  allEvents,
  api,
  heldReceipt,
  heldReceiptKeys,
  openGameStream,
  rememberReceiptKeys,
  startOverIfStoreWentBack,
} from "./api.js";
import { showAnalysis } from "./analysis.js";
import { drawBoard, playerItem } from "./board.js";
import { $, fill, h, show } from "./dom.js";
import { describe, solitaireText, turnText } from "./story.js";

const root = $("#replay");
const gameId = root.dataset.gameId;
let latest = JSON.parse($("#initial-state").textContent);
let total = latest.version;
let current = total;
let events = [];
const states = new Map([[latest.version, latest]]);
let shownVersion = null;
let stream = null;

const slider = $("#version-slider");

function wanted() {
  const match = /^#version=(\d+)$/.exec(location.hash);
  return match ? Number(match[1]) : null;
}

async function stateAt(version) {
  if (!states.has(version)) {
    states.set(version, await api(`/v1/games/${gameId}?version=${version}`));
  }
  return states.get(version);
}

function go(version) {
  current = Math.min(Math.max(1, version), total);
  history.replaceState(history.state, "", `#version=${current}`);
  show_();
}

async function show_() {
  const version = current;
  const label = `Version ${version} of ${total}`;
  $("#version-line").textContent = label;
  slider.max = String(total);
  slider.value = String(version);
  slider.setAttribute("aria-valuetext", label);
  const focused = document.activeElement;
  $("#previous").disabled = version <= 1;
  $("#first").disabled = version <= 1;
  $("#next").disabled = version >= total;
  $("#last").disabled = version >= total;
  if (focused instanceof HTMLButtonElement && focused.disabled) {
    // a keyboard user keeps a place: the button that still leads somewhere
    (version <= 1 ? $("#next") : $("#previous")).focus();
  }
  markEvent(version);
  $("#board-picture").setAttribute("href", `/v1/games/${gameId}/board.svg?version=${version}`);
  let state;
  try {
    state = await stateAt(version);
  } catch (e) {
    $("#event-now").textContent = `Version ${version} cannot be read: ${e.detail}`;
    return;
  }
  if (version !== current) return; // stepped on meanwhile
  shownVersion = version;
  const event = events[version - 1];
  $("#event-now").textContent = event ? describe(event, latest) : "";
  let turn = turnText(state);
  if (state.solitaire) turn += ` · ${solitaireText(state)}`;
  $("#replay-turn").textContent = turn;
  const dice = state.turn && state.turn.dice;
  show($("#dice-row"), Boolean(dice));
  fill($("#dice"), (dice || []).map((d) => h("span", { class: "die" }, String(d))));
  fill($("#board"), drawBoard(state));
  $("#board").dataset.version = String(version);
  renderPlayers(state);
}

function renderPlayers(state) {
  fill(
    $("#players"),
    state.players.map((p) => playerItem(state, p)),
  );
}

function markEvent(version) {
  const list = $("#events");
  const old = list.querySelector("[aria-current]");
  if (old) old.removeAttribute("aria-current");
  const item = list.querySelector(`[data-version="${version}"]`);
  if (item) {
    const link = item.querySelector("a");
    link.setAttribute("aria-current", "step");
    // keep the current event in view inside the list, without scrolling the page
    const top = item.offsetTop - list.offsetTop;
    if (top < list.scrollTop || top + item.offsetHeight > list.scrollTop + list.clientHeight) {
      list.scrollTop = top - list.clientHeight / 2;
    }
  }
}

function eventItem(event) {
  return h(
    "li",
    { "data-version": event.version },
    h(
      "a",
      {
        href: `#version=${event.version}`,
        onclick: (e) => {
          e.preventDefault();
          go(event.version);
        },
      },
      h("span", { class: "version" }, String(event.version)),
      " ",
      describe(event, latest),
    ),
  );
}

function addEvents(list) {
  const box = $("#events");
  for (const event of list) {
    if (event.version !== events.length + 1) continue;
    events.push(event);
    box.append(eventItem(event));
  }
}

// ------------------------------------------------------------------------------ the audit
async function audit() {
  try {
    const verdict = await api(`/v1/games/${gameId}/audit`);
    $("#verdict").textContent = verdict.valid
      ? "Verdict: valid — every check passed."
      : `Verdict: NOT valid${verdict.first_bad_version ? ` — first bad version ${verdict.first_bad_version}` : ""}.`;
    $("#verdict").dataset.valid = String(verdict.valid);
    fill(
      $("#checks"),
      verdict.checks.map((c) =>
        h(
          "li",
          { class: c.ok ? "ok" : "bad" },
          h("span", { class: "mark", "aria-hidden": "true" }, c.ok ? "✓" : "✗"),
          h("strong", {}, `${c.name}: ${c.ok ? "passed" : "failed"}`),
          ` — ${c.detail}`,
        ),
      ),
    );
  } catch (e) {
    $("#verdict").textContent = `The audit could not run: ${e.detail}`;
  }
}

function sheets() {
  const nodes = [h("h3", {}, "Record sheets")];
  const players = latest.players.filter((p) => p.name !== null);
  for (const p of players) {
    const q = latest.players.length > 1 ? `?seat=${p.seat}` : "";
    const base = `/games/${gameId}/record-sheet`;
    const who = latest.players.length > 1 ? `${p.name}: ` : "";
    nodes.push(
      h(
        "p",
        { class: "sheets" },
        who,
        h("a", { href: `${base}.txt${q}` }, "text"),
        " · ",
        h("a", { href: `${base}.csv${q}`, download: "" }, "CSV"),
        " · ",
        h("a", { href: `${base}.pdf${q}`, download: "" }, "PDF"),
      ),
    );
  }
  fill($("#sheets"), nodes);
}

// ---------------------------------------------------------------------------- your receipt
// The checks of `cantstop audit --receipt` (contract 1.2), in the browser: the receipt's
// Ed25519 signature verifies with the key it names (WebCrypto), and the export holds the
// receipt's version with the receipt's hash and time. An export cut before that version, or
// another event there, is a history the server has changed since it signed.
const receipt = heldReceipt(gameId);

/** base64url without padding to bytes, or null. */
function fromB64url(text) {
  if (typeof text !== "string" || !/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) return null;
  try {
    const padded = text.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (text.length % 4)) % 4);
    return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}

/** The key the receipt names: among those this browser kept when it played, else as the server
 * publishes it now (and kept from now on). */
async function receiptKey() {
  const find = (held) => held.keys.find((k) => k.key_id === receipt.key_id) || null;
  const kept = find(heldReceiptKeys());
  if (kept) return { key: kept, kept: true };
  try {
    return { key: find(rememberReceiptKeys(await api("/v1/keys"))), kept: false };
  } catch {
    return { key: null, kept: false, away: true };
  }
}

/** {state: "ok" | "bad" | "unchecked", detail} for the receipt's signature. */
async function signatureCheck() {
  if (!globalThis.crypto || !crypto.subtle) {
    return {
      state: "unchecked",
      detail: "this browser offers no WebCrypto on this page (a page not served over HTTPS), so it cannot check Ed25519 signatures",
    };
  }
  const { key, kept, away } = await receiptKey();
  if (!key) {
    return away
      ? { state: "unchecked", detail: `the key ${receipt.key_id} is not held here and the server cannot be reached to read it` }
      : { state: "bad", detail: `the receipt's key ${receipt.key_id} is not among the server's keys` };
  }
  const raw = fromB64url(key.public_key);
  const signature = fromB64url(receipt.signature);
  if (!raw || raw.length !== 32 || !signature) {
    return { state: "bad", detail: "the receipt's signature or its key is not base64url of the right bytes" };
  }
  let publicKey;
  try {
    publicKey = await crypto.subtle.importKey("raw", raw, { name: "Ed25519" }, false, ["verify"]);
  } catch (e) {
    if (e && e.name === "NotSupportedError") {
      return { state: "unchecked", detail: "this browser cannot check Ed25519 signatures (WebCrypto lacks Ed25519)" };
    }
    return { state: "bad", detail: `the key ${receipt.key_id} cannot be read as an Ed25519 public key` };
  }
  const message = new TextEncoder().encode(
    `cantstop-receipt:v1:${receipt.game_id}:${receipt.version}:${receipt.hash}:${receipt.at}`,
  );
  const good = await crypto.subtle.verify("Ed25519", publicKey, signature, message);
  const source = kept ? "kept in this browser when you played" : "as the server publishes it now";
  return good
    ? { state: "ok", detail: `signed by the server's key ${receipt.key_id} (${source})` }
    : { state: "bad", detail: `the signature does not verify with the key ${receipt.key_id} (${source})` };
}

/** The game's export: its header and its events, or an ApiError-like {detail}. */
async function readExport() {
  let response;
  try {
    response = await fetch(`/v1/games/${gameId}/export`, {
      headers: { Accept: "application/x-ndjson" },
      cache: "no-store",
      credentials: "omit",
    });
  } catch {
    throw new Error("the server cannot be reached; try again");
  }
  if (!response.ok) throw new Error(`the server answered ${response.status}`);
  const lines = (await response.text()).split("\n").filter((line) => line.trim());
  try {
    const [header, ...records] = lines.map((line) => JSON.parse(line));
    return { header: header || {}, records };
  } catch {
    throw new Error("the export is not NDJSON");
  }
}

/** {state: "ok" | "cut" | "differs", detail}: whether the export holds the receipt's version
 * with its hash and time. */
function historyCheck({ header, records }) {
  const version = receipt.version;
  if (header.game_id !== receipt.game_id) {
    return { state: "differs", detail: `the export is of game ${header.game_id}, the receipt of ${receipt.game_id}` };
  }
  if (records.length < version) {
    return {
      state: "cut",
      detail: `the export stops at version ${records.length}, before the receipt's version ${version}: events the server acknowledged are missing`,
    };
  }
  const record = records[version - 1];
  if (!record || record.version !== version) {
    return { state: "differs", detail: `the export's line for version ${version} is not that event` };
  }
  if (record.hash !== receipt.hash || record.at !== receipt.at) {
    return { state: "differs", detail: `the export's event at version ${version} differs from the receipt's` };
  }
  return { state: "ok", detail: `the export holds version ${version} with the receipt's hash and time` };
}

function checkItem(name, state, detail) {
  const ok = state === "ok";
  const word = ok ? "passed" : state === "unchecked" ? "not checked" : "failed";
  return h(
    "li",
    { class: ok ? "ok" : state === "unchecked" ? "unchecked" : "bad" },
    h("span", { class: "mark", "aria-hidden": "true" }, ok ? "✓" : state === "unchecked" ? "?" : "✗"),
    h("strong", {}, `${name}: ${word}`),
    ` — ${detail}`,
  );
}

async function checkReceipt() {
  const button = $("#receipt-check");
  const verdict = $("#receipt-verdict");
  button.disabled = true;
  delete verdict.dataset.valid;
  verdict.textContent = "Checking the history against your receipt…";
  fill($("#receipt-checks"));
  const n = receipt.version;
  try {
    const [signature, history] = await Promise.all([
      signatureCheck(),
      readExport().then(historyCheck, (e) => ({ state: "unchecked", detail: `the export cannot be read: ${e.message}` })),
    ]);
    let text;
    let valid = false;
    if (signature.state === "bad") text = "The receipt's signature does not verify.";
    else if (history.state === "cut") text = `The history is cut before version ${n} that the server acknowledged.`;
    else if (history.state === "differs") text = `The history differs at version ${n}.`;
    else if (history.state === "unchecked") text = "The history could not be checked against your receipt: try again.";
    else {
      text = `The server's history matches your receipt of version ${n}.`;
      valid = signature.state === "ok";
      if (!valid) text += " Its signature could not be checked in this browser.";
    }
    fill(
      $("#receipt-checks"),
      checkItem("signature", signature.state, signature.detail),
      checkItem("history", history.state, history.detail),
    );
    // green only when both were checked and hold; red when one failed; plain when unchecked
    const unsure = !valid && signature.state !== "bad" && ["ok", "unchecked"].includes(history.state);
    if (!unsure) verdict.dataset.valid = String(valid);
    verdict.textContent = text;
  } catch (e) {
    verdict.textContent = `Your receipt could not be checked: ${e.message}`;
  } finally {
    button.disabled = false;
    receiptFiles();
  }
}

/** A link that saves a JSON document from this page (the receipt, the keys) as a file. */
function saveLink(label, name, value) {
  const url = URL.createObjectURL(new Blob([JSON.stringify(value, null, 2)], { type: "application/json" }));
  return h("li", {}, h("a", { href: url, download: name }, label));
}

/** The files to check the receipt offline: the receipt and the keys held (more, once a check
 * read the server's keys). */
function receiptFiles() {
  for (const link of document.querySelectorAll("#receipt-files a")) URL.revokeObjectURL(link.href);
  fill(
    $("#receipt-files"),
    saveLink("Save my receipt (JSON)", `receipt-${gameId}.json`, receipt),
    saveLink("Save the keys kept to check it (JSON)", `keys-${gameId}.json`, heldReceiptKeys()),
  );
}

function showReceipt() {
  if (!receipt) return;
  $("#receipt-about").textContent =
    `This browser keeps the server's signed receipt of version ${receipt.version} of this game, ` +
    `recorded at ${receipt.at}.`;
  receiptFiles();
  $("#receipt-check").addEventListener("click", checkReceipt);
  show($("#receipt-panel"), true);
}

// ------------------------------------------------------------------------------- controls
$("#first").addEventListener("click", () => go(1));
$("#previous").addEventListener("click", () => go(current - 1));
$("#next").addEventListener("click", () => go(current + 1));
$("#last").addEventListener("click", () => go(total));
slider.addEventListener("input", () => go(Number(slider.value)));
document.addEventListener("keydown", (event) => {
  if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
  const target = event.target;
  if (target instanceof HTMLInputElement || target instanceof HTMLSelectElement) return;
  const step = { ArrowLeft: -1, ArrowRight: 1 }[event.key];
  if (step) go(current + step);
  else if (event.key === "Home") go(1);
  else if (event.key === "End") go(total);
  else return;
  event.preventDefault();
});
window.addEventListener("hashchange", () => {
  const v = wanted();
  if (v !== null && v !== current) go(v);
});

// ----------------------------------------------------------------------------- following
/** New events were added to the list: the latest state, and the view moved along with it if it
 * showed the last version (``following``). */
async function grown(following) {
  if (events.length <= total) return;
  total = events.length;
  try {
    latest = await stateAt(total);
  } catch {
    return;
  }
  if (latest.status === "finished") {
    if (stream) stream.close();
    audit();
    analysis();
  }
  if (following) go(total);
  else show_();
}

function follow() {
  if (stream || latest.status === "finished" || typeof EventSource === "undefined") return;
  const onEvent = (event) => {
    const following = current === total;
    addEvents([event]);
    grown(following);
  };
  stream = openGameStream(gameId, events.length, onEvent, () => {
    stream = null;
    if (latest.status !== "finished") setTimeout(reopen, 3000);
  });
}

/** After the server refused the stream: read the game first (the store may have gone back);
 * then what was missed, and follow again. */
async function reopen() {
  if (await startOverIfStoreWentBack(gameId, events.length)) return;
  try {
    const following = current === total;
    addEvents(await allEvents(gameId, events.length));
    await grown(following);
  } catch {
    // away: the stream tries again below
  }
  follow();
}

/** The expert's view of the game so far (analysis.js); each mark steps the replay to it. Closed
 * while a rated game is played (contract 1.3): it names the expert's best choice. */
function analysis() {
  if (latest.rated && latest.status !== "finished") {
    fill($("#analysis"), h("p", { class: "muted" }, "The expert's view of a rated game opens when it is finished."));
    return;
  }
  const names = latest.players.map((p) => (p.name === null ? `Seat ${p.seat}` : p.name));
  // a game in progress: the version shown now, so that its job is one, however fast play goes on
  const upto = latest.status === "finished" ? null : total;
  showAnalysis($("#analysis"), gameId, names, (v) => `#version=${v}`, upto);
}

async function start() {
  sheets();
  analysis();
  showReceipt();
  audit();
  try {
    addEvents(await allEvents(gameId));
  } catch (e) {
    $("#event-now").textContent = `The history cannot be read: ${e.detail}`;
  }
  if (events.length > total) {
    total = events.length;
    latest = await stateAt(total);
  }
  const v = wanted();
  go(v === null ? total : v);
  follow();
}

start();
