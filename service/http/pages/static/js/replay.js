// Replay and audit: step through every version of a game (buttons, ← → Home End, a slider),
// the event list with the current one marked, the audit's verdict, and the game's files.

import { allEvents, api, openGameStream, startOverIfStoreWentBack } from "./api.js";
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

async function start() {
  sheets();
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
