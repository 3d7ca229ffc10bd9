// The game page: the board, the players, whose turn, the dice, the history — live by the event
// stream — and, for a browser that holds a seat's token, the buttons to play it. A browser
// signed in as an account that holds a seat (players[i].account) plays that seat with the
// account's personal token, when it holds no seat token of the game. The receipt of every
// action's answer is kept in this browser (api.js, keepReceiptOf) for the replay page to check.

import {
  accountSeat,
  api,
  allEvents,
  committedSeeds,
  forgetAccount,
  forgetSeat,
  heldAccount,
  heldSeat,
  keepReceiptOf,
  oneReadAtATime,
  openGameStream,
  randomText,
  rememberSeat,
  seatLink,
  startOverIfStoreWentBack,
  takeSeatFromAddress,
} from "./api.js";
import { showAnalysis } from "./analysis.js";
import { colourName, drawBoard, playerItem, playerLabel } from "./board.js";
import { $, fill, h, percent, show } from "./dom.js";
import { describe, moveName, rulesText, solitaireText, turnText } from "./story.js";

const root = $("#game");
const gameId = root.dataset.gameId;
let state = JSON.parse($("#initial-state").textContent);
// First of all: a token in the address leaves it at once. A link's token that would replace the
// one this browser holds is checked and confirmed first (api.js), so the page waits for that
// before it reads which seat it holds; a link's token not taken is said below.
// The seat the signed-in account holds counts as held too: a link must not silently switch a
// signed-in player to another seat either.
let account = heldAccount(); // the account this browser is signed in as, or null
const linkRefused = await takeSeatFromAddress(
  gameId,
  (seat) => playerLabel(state, seat),
  accountHeld()?.seat ?? null,
);

const NAME_KEY = "cantstop:name";
const NOT_A_SEAT = "This browser's token does not hold a seat of this game.";

let held = heldSeat(gameId) || accountHeld(); // {token, seat, account?} or null: a watcher
const notMine = new Set(); // seats this token turned out not to hold (seat unknown)
let lastVersion = 0; // the last event shown in the history
let busy = false;
let confirming = null; // "resign" | "forget" | null
let highlight = [];
let adviceOpen = false;
let stream = null;
let controlsKey = "";
let controlsVersion = null; // the version the controls were last drawn for
let seatKey = "";
let bots = null;

// ------------------------------------------------------------------------------ who is who
/** The seat the signed-in account holds, played with its personal token; or null. */
function accountHeld() {
  if (state.imported) return null;
  const seat = accountSeat(state, account);
  return seat === null ? null : { token: account.token, seat, account: true };
}

/** After the game changed: a seat held by the account may have come (joined elsewhere) or
 * gone (left); a seat token held stays until forgotten. */
function reconsiderHeld() {
  if (!held || held.account) held = heldSeat(gameId) || accountHeld();
}

/** The personal token was refused: the sign-in ended elsewhere. */
function signInEnded() {
  forgetAccount();
  account = null;
  held = heldSeat(gameId);
  say("Your sign-in has ended (signed out elsewhere, or revoked): sign in again on the account page to play this seat.");
}

function player(seat) {
  return state.players.find((p) => p.seat === seat);
}

// Once the game is over, the expert's view of it: luck and play (analysis.js), drawn once.
let analysed = false;
function renderAnalysis() {
  if (analysed || state.status !== "finished") return;
  analysed = true;
  const names = state.players.map((p) => (p.name === null ? `Seat ${p.seat}` : p.name));
  show($("#analysis-panel"), true);
  showAnalysis($("#analysis"), gameId, names, (v) => `/games/${gameId}/replay#version=${v}`);
}

function nameOf(seat) {
  const p = player(seat);
  return p && p.name !== null ? p.name : `seat ${seat}`;
}

function isBot(seat) {
  const p = player(seat);
  return Boolean(p && p.bot);
}

function myResigned() {
  return held && held.seat !== null && Boolean(player(held.seat)?.resigned);
}

function isMyTurn() {
  if (!held || state.imported || state.status !== "in_progress" || !state.turn || myResigned()) return false;
  const current = state.turn.player;
  if (held.seat !== null) return current === held.seat;
  return !isBot(current) && !notMine.has(current); // not known yet: the server will tell
}

function learnSeat(events) {
  if (!held || held.seat !== null) return;
  const mine = events.find((e) => e.data && Number.isInteger(e.data.seat) && e.type !== "SeatJoined");
  if (mine) {
    held = { ...held, seat: mine.data.seat };
    rememberSeat(gameId, held.token, held.seat);
  }
}

// ------------------------------------------------------------------------------- messages
function say(text) {
  const el = $("#action-message");
  el.textContent = text;
  show(el, Boolean(text));
}

function announce(text) {
  $("#announce").textContent = text;
}

// --------------------------------------------------------------------------------- render
function render() {
  const solo = state.solitaire !== null;
  const names = state.players.map((p) => (p.name === null ? "open seat" : p.name));
  const heading = solo ? `Solitaire: ${names[0]}` : names.join(" vs ");
  $("#game-title").textContent = heading;
  document.title = `${heading} — Can't Stop`;
  $("#game-rules").textContent = rulesText(state);
  let line = turnText(state);
  if (isMyTurn()) line += " · your turn";
  $("#turn-line").textContent = line;
  const soloLine = $("#solitaire-line");
  soloLine.textContent = solitaireText(state);
  show(soloLine, solo);
  renderDice();
  renderDeadline();
  renderControls();
  renderSeat();
  renderBoard();
  renderPlayers();
  renderAnalysis();
  // No advice in a rated game (contract 1.3): it would rate who asked, not who played.
  show($("#advice"), state.status === "in_progress" && !state.rated);
  if (adviceOpen && !state.rated) loadAdvice();
}

function renderDice() {
  const dice = state.turn && state.turn.dice;
  show($("#dice-row"), Boolean(dice));
  fill($("#dice"), (dice || []).map((d) => h("span", { class: "die" }, String(d))));
}

function renderDeadline() {
  const el = $("#deadline");
  // An imported game's clock no longer runs: its deadline is only history.
  const deadline = !state.imported && state.turn && state.turn.deadline;
  if (!deadline) {
    show(el, false);
    return;
  }
  const left = Math.max(0, Math.round((Date.parse(deadline) - Date.now()) / 1000));
  const m = Math.floor(left / 60);
  const sec = String(left % 60).padStart(2, "0");
  el.textContent = left > 0 ? `Time left for this turn: ${m}:${sec}` : "Time is up for this turn";
  show(el, true);
}

function renderBoard() {
  fill($("#board"), drawBoard(state, { highlight }));
}

function renderPlayers() {
  const list = $("#players");
  fill(
    list,
    state.players.map((p) => {
      const item = playerItem(state, p, { you: Boolean(held && held.seat === p.seat) });
      if (p.bot && state.status === "waiting" && held) {
        item.append(
          h(
            "button",
            {
              type: "button",
              class: "secondary small",
              onclick: () => removeBot(p.seat),
            },
            `Remove ${p.name}`,
          ),
        );
      }
      return item;
    }),
  );
}

// ------------------------------------------------------------------------------- controls
function button(label, onclick, extra = {}) {
  return h("button", { type: "button", onclick, ...extra }, label);
}

function moveButton(sums) {
  const light = (on) => {
    highlight = on ? sums : [];
    renderBoard();
  };
  return button(moveName(sums), () => act({ type: "move", sums }), {
    class: "move",
    onfocus: () => light(true),
    onblur: () => light(false),
    onmouseenter: () => light(true),
    onmouseleave: () => light(false),
  });
}

function manualDice() {
  const faces = state.rules.dice_faces;
  return h(
    "fieldset",
    { class: "manual-dice" },
    h("legend", {}, "The dice you rolled"),
    [1, 2, 3, 4].map((i) =>
      h(
        "label",
        { class: "die-input" },
        `Die ${i}`,
        h("input", {
          type: "number",
          min: 1,
          max: faces,
          inputmode: "numeric",
          required: true,
          "data-die": i,
        }),
      ),
    ),
  );
}

// A server-dice roll keeps its entropy and Idempotency-Key until it is answered: a roll that
// failed (refused, dropped, the server unreachable) is sent again as it was, so a server that
// refuses rolls it dislikes gets the same dice back and cannot try for others (the contract's
// "Fairness that no one can grind"). A new version of the game brings new ones.
let pendingRoll = null; // { version, entropy, key }

function rollBody() {
  if (state.dice !== "manual") {
    if (!pendingRoll || pendingRoll.version !== state.version) {
      pendingRoll = { version: state.version, entropy: randomText(), key: randomText() };
    }
    return { type: "roll", entropy: pendingRoll.entropy };
  }
  const inputs = Array.from(document.querySelectorAll("#controls [data-die]"));
  const dice = inputs.map((el) => Number(el.value));
  const faces = state.rules.dice_faces;
  const bad = inputs.find((el, i) => !Number.isInteger(dice[i]) || dice[i] < 1 || dice[i] > faces);
  if (bad) {
    say(`Type in all four dice, each from 1 to ${faces}.`);
    bad.focus();
    return null;
  }
  return { type: "roll", dice };
}

function renderControls() {
  const key = JSON.stringify([
    state.version,
    state.status,
    held ? [held.seat, held.token.length, Boolean(held.account)] : null,
    [...notMine],
    confirming,
  ]);
  const box = $("#controls");
  if (key === controlsKey) {
    for (const el of box.querySelectorAll("button, input")) el.disabled = busy;
    return;
  }
  controlsKey = key;
  const active = document.activeElement;
  const hadFocus = !active || active === document.body || box.contains(active);
  // Dice typed in for this very roll outlive the re-render: the seat lookup of a bare #token=
  // link (findSeat) answers while they are typed, and emptying them made a Roll that asks for
  // the dice again (or, to a quick hand, one that seemed to do nothing).
  const sameRoll = controlsVersion === state.version;
  const typed = sameRoll ? Array.from(box.querySelectorAll("[data-die]"), (el) => el.value) : [];
  const typing = sameRoll && box.contains(active) && active.dataset.die ? active.dataset.die : null;
  controlsVersion = state.version;
  const nodes = [];
  if (state.imported) {
    nodes.push(
      h(
        "p",
        { class: "waiting" },
        "Imported for audit: this game can be replayed and checked, not played. ",
        h("a", { href: `/games/${gameId}/replay` }, "Replay it"),
      ),
    );
  } else if (state.status === "in_progress" && held && !myResigned()) {
    if (isMyTurn()) {
      const buttons = [];
      const legal = state.legal_actions;
      if (state.dice === "manual" && legal.some((a) => a.type === "roll")) nodes.push(manualDice());
      for (const action of legal) {
        if (action.type === "roll") {
          buttons.push(
            button("Roll", () => {
              const body = rollBody();
              if (body) act(body);
            }, { class: "primary" }),
          );
        } else if (action.type === "stop") {
          buttons.push(button("Stop", () => act({ type: "stop" }), { class: "primary" }));
        } else if (action.type === "move") {
          buttons.push(moveButton(action.sums));
        }
      }
      const label = legal.some((a) => a.type === "move") ? "Choose a move" : "Your turn";
      nodes.push(h("div", { class: "actions", role: "group", "aria-label": label }, buttons));
    } else if (state.turn) {
      const who = state.turn.player;
      nodes.push(
        h("p", { class: "waiting" }, `Waiting for ${nameOf(who)}${isBot(who) ? " (computer)" : ""} to play.`),
      );
    }
    if (confirming === "resign") {
      nodes.push(
        h(
          "div",
          { class: "confirm", role: "group", "aria-label": "Resign?" },
          h("p", {}, "Resign this game? Your markers come off the board; columns you claimed stay yours."),
          button("Yes, resign", () => {
            confirming = null;
            act({ type: "resign" });
          }, { class: "danger" }),
          button("Cancel", () => {
            confirming = null;
            render();
            $("#controls button")?.focus();
          }, { class: "secondary", "data-focus": "true" }),
        ),
      );
    } else {
      nodes.push(
        h(
          "div",
          { class: "resign" },
          button("Resign", () => {
            confirming = "resign";
            render();
            $("#controls [data-focus]")?.focus();
          }, { class: "danger" }),
        ),
      );
    }
  }
  if (state.status === "finished") nodes.push(finishedBlock());
  fill(box, nodes);
  for (const el of box.querySelectorAll("button, input")) el.disabled = busy;
  box.querySelectorAll("[data-die]").forEach((el, i) => {
    if (typed[i]) el.value = typed[i];
  });
  if (typing) {
    box.querySelector(`[data-die="${typing}"]`)?.focus();
  } else if (hadFocus && isMyTurn() && confirming === null) {
    box.querySelector("input, .actions button")?.focus();
  }
}

function sheetLinks(seat, label) {
  const base = `/games/${gameId}/record-sheet`;
  const q = state.players.length > 1 ? `?seat=${seat}` : "";
  return h(
    "p",
    { class: "sheets" },
    h("a", { href: `${base}.pdf${q}`, download: "" }, `Download ${label} (PDF)`),
    " · ",
    h("a", { href: `${base}.txt${q}` }, `${label} as text`),
    " · ",
    h("a", { href: `${base}.csv${q}`, download: "" }, `${label} as CSV`),
  );
}

function finishedBlock() {
  const block = h("div", { class: "finished" });
  if (state.solitaire) {
    block.append(sheetLinks(0, "the record sheet"));
  } else {
    for (const p of state.players) {
      if (p.name !== null) block.append(sheetLinks(p.seat, `${p.name}'s record sheet`));
    }
  }
  if (held && state.solitaire) {
    block.append(button("Play again", playAgain, { class: "primary" }));
  } else if (held && state.finish_reason !== "abandoned") {
    block.append(button("Rematch", rematch, { class: "primary" }));
  }
  block.append(h("p", {}, h("a", { href: `/games/${gameId}/replay` }, "Replay and audit this game")));
  return block;
}

// ------------------------------------------------------------------------------ the seat
function renderSeat() {
  const key = JSON.stringify([
    state.status,
    held ? [held.seat, held.token.length, Boolean(held.account)] : null,
    account ? account.handle : null,
    state.players.map((p) => [p.name, p.bot, p.account]),
    confirming === "forget",
    bots ? bots.length : 0,
  ]);
  if (key === seatKey) return;
  seatKey = key;
  const body = $("#seat-body");
  const nodes = [];
  if (state.imported) {
    nodes.push(h("p", {}, "An imported game has no seat to play."));
  } else if (held) {
    const seatText =
      held.seat === null
        ? "This browser holds a seat of this game."
        : `You play ${playerLabel(state, held.seat)}, ${colourName(held.seat)}.`;
    nodes.push(h("p", {}, seatText));
    if (held.account) {
      nodes.push(
        h(
          "p",
          { class: "hint" },
          `Signed in as ${account.handle}: your account holds this seat, in any browser you sign in on.`,
        ),
      );
    }
    if (state.status === "waiting") nodes.push(...lobbyTools());
    if (held.account) {
      // nothing to forget: the seat is the account's
    } else if (confirming === "forget") {
      nodes.push(
        h(
          "div",
          { class: "confirm", role: "group", "aria-label": "Forget this seat?" },
          h("p", {}, "Forget this seat? This browser will only watch; without its link you cannot play the seat again."),
          button("Yes, forget it", () => {
            confirming = null;
            forgetSeat(gameId);
            held = null;
            say("This browser no longer holds the seat: you are watching.");
            render();
          }, { class: "danger" }),
          button("Cancel", () => {
            confirming = null;
            render();
          }, { class: "secondary", "data-focus": "true" }),
        ),
      );
    } else {
      nodes.push(
        button("Forget this seat", () => {
          confirming = "forget";
          render();
          $("#seat-body [data-focus]")?.focus();
        }, { class: "secondary" }),
      );
    }
  } else {
    const open = state.players.some((p) => p.name === null);
    if (state.status === "waiting" && open) {
      nodes.push(joinForm());
    } else {
      nodes.push(h("p", {}, "You are watching this game."));
    }
  }
  fill(body, nodes);
}

/** Signed in: take an open seat as the account (an empty body and the personal token). */
function joinAsAccount() {
  const handle = account.handle;
  return h(
    "form",
    {
      class: "inline-form",
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          const done = await api(`/v1/games/${gameId}/players`, {
            method: "POST",
            body: {},
            token: account.token,
          });
          say(`You took seat ${done.seat}.`);
          setState(done.game);
        } catch (e) {
          if (e.status === 401) {
            signInEnded();
            seatKey = "";
            render();
          } else say(e.detail);
        }
      },
    },
    h("p", {}, "This game has open seats: take one."),
    h("button", { type: "submit", class: "primary" }, `Join as ${handle}`),
  );
}

function joinForm() {
  if (account) return joinAsAccount();
  const input = h("input", {
    id: "join-name",
    maxlength: 40,
    autocomplete: "nickname",
    required: true,
  });
  try {
    input.value = localStorage.getItem(NAME_KEY) || "";
  } catch {
    // no storage: an empty field
  }
  return h(
    "form",
    {
      class: "inline-form",
      onsubmit: async (event) => {
        event.preventDefault();
        const name = input.value.trim();
        if (!name) {
          say("Type your name to take a seat.");
          input.focus();
          return;
        }
        try {
          const done = await api(`/v1/games/${gameId}/players`, { method: "POST", body: { name } });
          rememberSeat(gameId, done.token, done.seat);
          held = { token: done.token, seat: done.seat };
          try {
            localStorage.setItem(NAME_KEY, name);
          } catch {
            // not remembered
          }
          say(`You took seat ${done.seat}.`);
          setState(done.game);
        } catch (e) {
          say(e.detail);
        }
      },
    },
    h("p", {}, "This game has open seats: take one."),
    h("label", { for: "join-name" }, "Your name"),
    input,
    h("button", { type: "submit", class: "primary" }, "Join"),
  );
}

function lobbyTools() {
  const nodes = [];
  const open = state.players.filter((p) => p.name === null).length;
  const link = `${location.origin}/games/${gameId}`;
  nodes.push(
    h("p", {}, `${open} ${open === 1 ? "seat is" : "seats are"} open. Others join from the lobby, or here:`),
    h(
      "p",
      { class: "copy-row" },
      h("label", { for: "invite-link" }, "Address of this game"),
      h("input", { id: "invite-link", readonly: true, value: link }),
    ),
  );
  if (open && state.dice === "server") {
    if (bots === null) {
      bots = [];
      api("/v1/bots")
        .then((answer) => {
          bots = answer.bots;
          seatKey = "";
          renderSeat();
        })
        .catch(() => {});
    }
    const select = h(
      "select",
      { id: "bot-kind" },
      bots.map((b) => h("option", { value: b.id }, b.name)),
    );
    const name = h("input", { id: "bot-name", maxlength: 40, autocomplete: "off" });
    nodes.push(
      h(
        "form",
        {
          class: "inline-form",
          onsubmit: async (event) => {
            event.preventDefault();
            const bot = bots.find((b) => b.id === select.value);
            if (!bot) return;
            const body = { name: name.value.trim() || bot.name, bot: bot.id };
            try {
              const done = await api(`/v1/games/${gameId}/players`, {
                method: "POST",
                body,
                token: held.token,
              });
              setState(done.game);
            } catch (e) {
              say(e.detail);
            }
          },
        },
        h("label", { for: "bot-kind" }, "Computer player"),
        select,
        h("label", { for: "bot-name" }, "Its name (optional)"),
        name,
        h("button", { type: "submit", class: "secondary" }, "Seat a computer player"),
      ),
    );
  }
  if (held.seat !== null) {
    nodes.push(button("Leave this seat", leave, { class: "secondary" }));
  }
  return nodes;
}

async function leave() {
  try {
    const game = await api(`/v1/games/${gameId}/players/${held.seat}`, {
      method: "DELETE",
      token: held.token,
    });
    forgetSeat(gameId);
    held = null;
    say("You left the game.");
    setState(game);
  } catch (e) {
    say(e.detail);
  }
}

async function removeBot(seat) {
  try {
    const game = await api(`/v1/games/${gameId}/players/${seat}`, {
      method: "DELETE",
      token: held.token,
    });
    setState(game);
  } catch (e) {
    say(e.detail);
  }
}

async function rematch() {
  try {
    // If another player asked first, the rematch exists with their seeds, and these go unused.
    const body = await committedSeeds(state.dice);
    const done = await api(`/v1/games/${gameId}/rematch`, { method: "POST", token: held.token, body });
    const mine = held.account && accountSeat(done.game, account) === done.seat;
    location.assign(mine ? `/games/${done.game.id}` : seatLink(done.game.id, done.token, done.seat));
  } catch (e) {
    say(e.detail);
  }
}

/** Solitaire has no rematch: a new game with the same player, rules and dice. */
async function playAgain() {
  const { solitaire, dice_faces, steep_hill, jumping, forced_move } = state.rules;
  const mine = Boolean(held.account);
  const body = {
    players: [mine ? { account: account.handle } : state.players[0].name],
    rules: { solitaire, dice_faces, steep_hill, jumping, forced_move },
    dice: state.dice,
  };
  try {
    const seeded = { ...body, ...(await committedSeeds(body.dice)) };
    const token = mine ? account.token : undefined;
    const done = await api("/v1/games", { method: "POST", body: seeded, token });
    location.assign(mine ? `/games/${done.game.id}` : seatLink(done.game.id, done.seats[0].token, 0));
  } catch (e) {
    say(e.detail);
  }
}

// -------------------------------------------------------------------------------- actions
async function act(body) {
  if (busy || !held) return;
  busy = true;
  say("");
  renderControls();
  const retried = pendingRoll && body.entropy === pendingRoll.entropy ? pendingRoll : null;
  try {
    const done = await api(`/v1/games/${gameId}/actions`, {
      method: "POST",
      body,
      token: held.token,
      headers: {
        "If-Match": `"${state.version}"`,
        "Idempotency-Key": retried ? retried.key : randomText(),
      },
    });
    if (retried) pendingRoll = null;
    keepReceiptOf(done); // the server's signed word for this version, kept in this browser
    learnSeat(done.events);
    addEvents(done.events);
    busy = false;
    setState(done.game);
  } catch (e) {
    busy = false;
    if (e.code === "not_your_turn" && state.turn) notMine.add(state.turn.player);
    if (e.code === "version_conflict") say("The game moved on meanwhile: here it is now.");
    else if (e.status === 401 && held && held.account) signInEnded();
    else if (e.status === 401) say(NOT_A_SEAT);
    else say(e.detail);
    controlsKey = "";
    render();
    refresh();
  }
}

// ---------------------------------------------------------------------- state and history
function setState(next) {
  if (next.version < state.version) return;
  state = next;
  reconsiderHeld();
  render();
  if (lastVersion < state.version) loadHistory();
  if (state.status === "finished" && stream && lastVersion >= state.version) {
    stream.close();
    stream = null;
  }
}

const refresh = oneReadAtATime(async () => setState(await api(`/v1/games/${gameId}`)));

function addEvents(list) {
  const box = $("#history");
  const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  let added = null;
  for (const event of list) {
    if (event.version <= lastVersion) continue;
    if (event.version !== lastVersion + 1) {
      loadHistory(); // a gap: read what was missed from the store
      return;
    }
    lastVersion = event.version;
    added = event;
    box.append(
      h(
        "li",
        { "data-version": event.version },
        h("span", { class: "version" }, String(event.version)),
        " ",
        describe(event, state),
      ),
    );
  }
  if (added) {
    if (atBottom) box.scrollTop = box.scrollHeight;
    announce(describe(added, state));
  }
}

let loading = false;
async function loadHistory() {
  if (loading) return;
  loading = true;
  try {
    addEvents(await allEvents(gameId, lastVersion));
  } catch {
    // shown on the next event
  } finally {
    loading = false;
  }
  if (lastVersion > state.version) refresh();
  openStream();
}

function openStream() {
  if (stream || state.status === "finished" || typeof EventSource === "undefined") return;
  const onEvent = (event) => {
    addEvents([event]);
    refresh();
  };
  stream = openGameStream(gameId, lastVersion, onEvent, () => {
    stream = null;
    if (state.status !== "finished") setTimeout(reopen, 3000);
  });
}

/** After the server refused the stream: read the game first (the store may have gone back). */
async function reopen() {
  if (!(await startOverIfStoreWentBack(gameId, lastVersion))) loadHistory();
}

// --------------------------------------------------------------------------------- advice
function actionName(action) {
  if (action.type === "move") return moveName(action.sums);
  return action.type === "roll" ? "Roll" : action.type === "stop" ? "Stop" : action.type;
}

async function loadAdvice() {
  const body = $("#advice-body");
  if (state.status !== "in_progress") {
    fill(body, h("p", {}, "Advice is given while the game is in progress."));
    return;
  }
  const version = state.version;
  try {
    const advice = await api(`/v1/games/${gameId}/advice?version=${version}`);
    if (state.version !== version || !adviceOpen) return;
    const nodes = [h("p", {}, `For ${playerLabel(state, advice.seat)}:`)];
    if (advice.bust_chance !== null && advice.bust_chance !== undefined) {
      nodes.push(h("p", {}, `Chance of busting on a roll now: ${percent(advice.bust_chance)}`));
    }
    if (advice.moves.length) {
      nodes.push(
        h("p", {}, "Chance of busting on the next roll after each move:"),
        h(
          "ul",
          { class: "advice-moves" },
          advice.moves.map((m) => h("li", {}, `${moveName(m.sums)}: ${percent(m.bust_chance_after)}`)),
        ),
      );
    }
    if (advice.recommended) {
      nodes.push(
        h("p", { class: "suggestion" }, `The expert suggests: ${actionName(advice.recommended)}`),
      );
    }
    fill(body, nodes);
  } catch (e) {
    fill(body, h("p", {}, `No advice now: ${e.detail}`));
  }
}

$("#advice-toggle").addEventListener("click", (event) => {
  adviceOpen = !adviceOpen;
  const toggle = event.currentTarget;
  toggle.setAttribute("aria-expanded", String(adviceOpen));
  toggle.textContent = adviceOpen ? "Hide advice" : "Show advice";
  show($("#advice-body"), adviceOpen);
  if (adviceOpen) loadAdvice();
});

// ---------------------------------------------------------------------------------- start
/** A token handed over without its seat (a bare #token= link): ask which seat it holds. */
async function findSeat() {
  if (!held || held.seat !== null || state.imported) return; // an import has no seat to find
  const token = held.token;
  try {
    const { seat } = await api(`/v1/games/${gameId}/seat`, { token });
    if (!held || held.token !== token) return; // forgotten meanwhile
    held = { ...held, seat };
    rememberSeat(gameId, token, seat);
  } catch (e) {
    if (e.status === 401 && held && held.token === token) {
      say(NOT_A_SEAT);
    }
    return; // otherwise the answers to its actions tell (learnSeat)
  }
  render();
}

setInterval(renderDeadline, 1000);
render();
if (linkRefused) say(linkRefused);
findSeat();
loadHistory();
