// The lobby: create a game or a solitaire, join an open seat, watch games, the leaderboard.
//
// Signed in (an account's personal token in this browser's storage: api.js, account.js), the
// games created and joined here are the account's (contract 1.2, "Playing with an account"):
// its seat is named by the account, "My games" lists them, a game may be rated, and the game
// page acts with the personal token, so no seat token is kept for them.

import {
  api,
  committedSeeds,
  forgetAccount,
  heldAccount,
  rememberSeat,
  seatLink,
} from "./api.js";
import { $, $$, fill, h, show } from "./dom.js";

const NAME_KEY = "cantstop:name";
const MAX_OPPONENTS = 7;
const MY_GAMES = 10;
const nameInput = $("#player-name");
let bots = [{ id: "expert", name: "Expert", description: "" }];
let account = heldAccount(); // {handle, token, …} or null: anonymous

// ---------------------------------------------------------------------------------- helpers
/** A message in the lobby's alert region, or in a form's own (``where``). */
function say(text, where = "#lobby-message") {
  for (const id of ["#lobby-message", "#create-message", "#solitaire-message"]) {
    const el = $(id);
    el.textContent = id === where ? text : "";
    show(el, id === where && Boolean(text));
  }
}

function myName(where = "#lobby-message") {
  if (account) return account.handle;
  const name = nameInput.value.trim();
  if (!name) {
    say("Type your name first: the other players see it.", where);
    nameInput.focus();
    return null;
  }
  try {
    localStorage.setItem(NAME_KEY, name);
  } catch {
    // not remembered
  }
  return name;
}

function rulesSummary(rules, dice) {
  const parts = [];
  if (rules.solitaire) parts.push(`${rules.solitaire} solitaire`);
  else parts.push(`${rules.columns_to_win} ${rules.columns_to_win === 1 ? "column" : "columns"} to win`);
  parts.push(`${rules.dice_faces}-sided dice`);
  if (dice === "manual") parts.push("real dice");
  for (const [key, text] of [
    ["jumping", "jumping"],
    ["forced_move", "forced move"],
    ["steep_hill", "steep hill"],
  ]) {
    if (rules[key]) parts.push(text);
  }
  return parts.join(" · ");
}

function playersText(game) {
  const named = game.players.filter((p) => p !== null);
  return named.length ? named.join(", ") : "nobody yet";
}

/** Go to a game as the holder of a seat: the token rides in the fragment, which the page
 * moves to this browser's storage at once. The account's own seat needs none: the page acts
 * with the personal token. */
function goPlay(gameId, token, seat, asAccount = false) {
  location.assign(asAccount ? `/games/${gameId}` : seatLink(gameId, token, seat));
}

// ------------------------------------------------------------------------------ the account
function renderAccount() {
  for (const el of [nameInput, $("#player-name-label"), $("#player-name-hint")]) show(el, !account);
  show($("#signed-in"), Boolean(account));
  show($("#rated-field"), Boolean(account));
  show($("#my-games"), Boolean(account));
  if (account) {
    $("#signed-in-handle").textContent = account.handle;
    $("#profile-link").setAttribute("href", `/players/${encodeURIComponent(account.handle)}`);
  } else {
    $("#rated").checked = false;
  }
}

/** A sign-in kept here may have ended elsewhere (revoked, or the account closed). */
async function checkAccount() {
  if (!account) return;
  try {
    await api("/v1/account", { token: account.token });
  } catch (e) {
    if (e.status === 401) {
      forgetAccount();
      account = null;
      renderAccount();
      say("Your sign-in has ended (signed out elsewhere, or revoked): you play as a guest now.");
    }
  }
}

/** One of the account's games: who plays, how it stands, and the way to it. */
function myGameCard(entry, state) {
  const names = state ? state.players.map((p) => (p.name === null ? "open seat" : p.name)) : [];
  const title = state && state.solitaire ? `Solitaire: ${names[0]}` : names.join(" vs ") || "A game";
  const status = state ? state.status : entry.status;
  let standing;
  if (status === "finished") {
    if (state && state.winner !== null && state.winner !== undefined) {
      standing = state.winner === entry.seat ? "you won" : `${names[state.winner]} won`;
    } else {
      const reason = state && state.finish_reason;
      standing = reason === "abandoned" || reason === "aborted" ? reason : "finished";
    }
  } else if (status === "in_progress") {
    const turn = state && state.turn ? state.turn.player : null;
    standing = turn === entry.seat ? "your turn" : turn === null ? "in progress" : `${names[turn]}'s turn`;
  } else {
    standing = "waiting for players";
  }
  const finished = status === "finished";
  return h(
    "li",
    { class: "card" },
    h("p", { class: "card-title" }, title),
    h("p", { class: "muted" }, `${entry.rated ? "Rated" : "Unrated"} · ${standing}`),
    h(
      "p",
      { class: "card-actions" },
      h(
        "a",
        {
          class: finished ? "button secondary" : "button primary",
          href: finished ? `/games/${entry.game_id}/replay` : `/games/${entry.game_id}`,
        },
        finished ? "Replay" : "Play",
        h("span", { class: "visually-hidden" }, ` the game of ${title}`),
      ),
    ),
  );
}

async function loadMyGames() {
  if (!account) return;
  const handle = account.handle;
  try {
    const page = await api(`/v1/accounts/${encodeURIComponent(handle)}/games?limit=${MY_GAMES}`);
    const states = await Promise.all(
      page.games.map((g) => api(`/v1/games/${g.game_id}`).catch(() => null)),
    );
    if (!account || account.handle !== handle) return; // signed out meanwhile
    fill($("#my-list"), page.games.map((g, i) => myGameCard(g, states[i])));
    show($("#my-empty"), page.games.length === 0);
  } catch (e) {
    say(`Your games could not be read: ${e.detail}`);
  }
}

// -------------------------------------------------------------------------- the new game
function opponentKinds() {
  const manual = $("#dice-manual").checked;
  return [
    ...bots.map((b) => ({ value: `bot:${b.id}`, label: `Computer: ${b.name}`, disabled: manual })),
    { value: "person", label: "Person (you hand them a link)" },
    { value: "open", label: "Open seat (anyone may join)" },
  ];
}

let rowCounter = 0;
function addOpponent(kind = null) {
  const list = $("#opponent-rows");
  if (list.children.length >= MAX_OPPONENTS) return null;
  const row = $("#opponent-row").content.firstElementChild.cloneNode(true);
  const n = ++rowCounter;
  const select = $("[data-name=kind]", row);
  const name = $("[data-name=name]", row);
  select.id = `opponent-kind-${n}`;
  name.id = `opponent-name-${n}`;
  $("[data-for=kind]", row).setAttribute("for", select.id);
  $("[data-for=name]", row).setAttribute("for", name.id);
  fillKinds(select, kind);
  select.addEventListener("change", () => syncRow(row));
  $("[data-action=remove]", row).addEventListener("click", () => {
    row.remove();
    renumber();
    $("#add-opponent").focus();
  });
  list.append(row);
  syncRow(row);
  renumber();
  return row;
}

function fillKinds(select, wanted) {
  const current = wanted || select.value;
  fill(
    select,
    opponentKinds().map((k) =>
      h("option", { value: k.value, disabled: k.disabled || null }, k.label),
    ),
  );
  const usable = opponentKinds().filter((k) => !k.disabled);
  select.value = usable.some((k) => k.value === current) ? current : usable[0].value;
}

function syncRow(row) {
  const kind = $("[data-name=kind]", row).value;
  const name = $("[data-name=name]", row);
  const field = name.closest(".field");
  show(field, kind !== "open");
  if (kind.startsWith("bot:")) {
    const bot = bots.find((b) => `bot:${b.id}` === kind);
    if (!name.value || name.dataset.auto === "true") {
      name.value = bot ? bot.name : "";
      name.dataset.auto = "true";
    }
  } else if (name.dataset.auto === "true") {
    name.value = "";
    name.dataset.auto = "false";
  }
  name.addEventListener("input", () => (name.dataset.auto = "false"), { once: true });
  syncFirstPlayer();
}

function renumber() {
  $$("#opponent-rows .opponent").forEach((row, i) => {
    $("[data-for=kind]", row).textContent = `Seat ${i + 1}`;
    $("[data-action=remove]", row).textContent = `Remove seat ${i + 1}`;
  });
  $("#add-opponent").disabled = $("#opponent-rows").children.length >= MAX_OPPONENTS;
  syncFirstPlayer();
}

function syncFirstPlayer() {
  const manual = $("#dice-manual").checked;
  show($("#first-player-field"), manual);
  const select = $("#first-player");
  const keep = select.value;
  const labels = ["You"];
  $$("#opponent-rows .opponent").forEach((row, i) => {
    const name = $("[data-name=name]", row).value.trim();
    labels.push(name || `Seat ${i + 1}`);
  });
  fill(
    select,
    labels.map((label, i) => h("option", { value: i }, `${label} (seat ${i})`)),
  );
  if (Number(keep) < labels.length) select.value = keep;
}

function checkedRules(prefix = "rule") {
  return {
    jumping: $(`#${prefix}-jumping`)?.checked || false,
    forced_move: $(`#${prefix}-forced-move`)?.checked || false,
    steep_hill: $(`#${prefix}-steep-hill`)?.checked || false,
  };
}

async function createGame(event) {
  event.preventDefault();
  const where = "#create-message";
  say("", where);
  const me = myName(where);
  if (!me) return;
  const rows = $$("#opponent-rows .opponent").map((row) => ({
    kind: $("[data-name=kind]", row).value,
    name: $("[data-name=name]", row).value.trim(),
    input: $("[data-name=name]", row),
  }));
  if (!rows.length) {
    say("Add at least one opponent, or play solitaire.", where);
    $("#add-opponent").focus();
    return;
  }
  const unnamed = rows.find((r) => r.kind === "person" && !r.name);
  if (unnamed) {
    say("Give each person a name.", where);
    unnamed.input.focus();
    return;
  }
  const manual = $("#dice-manual").checked;
  const rated = Boolean(account) && $("#rated").checked;
  const bad = ratedRefusal(rated, manual, rows);
  if (bad) {
    say(bad, where);
    return;
  }
  // An account holds one seat of a game, and once a game seats an account, each computer player
  // plays as its own account: the same one twice is a game played without the account.
  const asAccount = Boolean(account) && (rated || !sameBotTwice(rows));
  const body = {
    rules: {
      columns_to_win: Number($("#columns-to-win").value),
      dice_faces: Number($("#dice-faces").value),
      ...checkedRules(),
    },
    dice: manual ? "manual" : "server",
  };
  if ($("#clock-on").checked) body.clock = { turn_seconds: Number($("#clock-seconds").value) };
  if (rated) body.rated = true;
  const submit = $("#create-form button[type=submit]");
  submit.disabled = true;
  try {
    if (rows.some((r) => r.kind === "open")) {
      await createLobby(body, me, rows, asAccount);
    } else {
      if (manual) body.first_player = Number($("#first-player").value);
      body.players = [
        asAccount ? { account: account.handle } : me,
        ...rows.map((r) =>
          r.kind.startsWith("bot:") ? { name: r.name || r.kind.slice(4), bot: r.kind.slice(4) } : r.name,
        ),
      ];
      const seeded = { ...body, ...(await committedSeeds(body.dice)) };
      const created = await api("/v1/games", {
        method: "POST",
        body: seeded,
        token: asAccount ? account.token : undefined,
      });
      handOut(created.game.id, created.seats[0], created.seats.slice(1), asAccount);
    }
  } catch (e) {
    say(e.detail, where);
  } finally {
    submit.disabled = false;
  }
}

/** Why a rated game cannot be made of this form (a sentence), or null. */
function ratedRefusal(rated, manual, rows) {
  if (!rated) return null;
  if (manual) return "A rated game uses the server's dice: choose them, or play unrated.";
  if (!$("#clock-on").checked) return "A rated game has a turn clock: limit each turn, or play unrated.";
  if (rows.some((r) => r.kind === "person")) {
    return "A rated game seats accounts only: make each person's seat an open seat, which they take signed in.";
  }
  if (sameBotTwice(rows)) {
    return "In a rated game each computer player plays as its own account: choose each one once.";
  }
  return null;
}

function sameBotTwice(rows) {
  const kinds = rows.filter((r) => r.kind.startsWith("bot:")).map((r) => r.kind);
  return new Set(kinds).size !== kinds.length;
}

/** Open seats: a lobby game that starts when every seat is taken. You take the first seat,
 * then the people named and the computer players are seated; the rest wait for others.
 * Signed in, the personal token seats you at once (seat 0) as the account. */
async function createLobby(body, me, rows, asAccount) {
  const seeded = { ...body, seats: rows.length + 1, ...(await committedSeeds(body.dice)) };
  let id;
  let mine;
  if (asAccount) {
    const created = await api("/v1/games", { method: "POST", body: seeded, token: account.token });
    id = created.game.id;
    mine = { ...created.seats[0], token: account.token };
  } else {
    const created = await api("/v1/games", { method: "POST", body: seeded });
    id = created.game.id;
    mine = await api(`/v1/games/${id}/players`, { method: "POST", body: { name: me } });
  }
  const others = [];
  for (const row of rows) {
    if (row.kind === "person") {
      others.push(await api(`/v1/games/${id}/players`, { method: "POST", body: { name: row.name } }));
    }
  }
  for (const row of rows) {
    if (row.kind.startsWith("bot:")) {
      const bot = row.kind.slice(4);
      await api(`/v1/games/${id}/players`, {
        method: "POST",
        body: { name: row.name || bot, bot },
        token: mine.token,
      });
    }
  }
  handOut(id, mine, others, asAccount);
}

/** Other people's seats: their links, shown this once; then on to the game. */
function handOut(gameId, mine, others, asAccount = false) {
  const people = others.filter((s) => s.token);
  if (!people.length) {
    goPlay(gameId, mine.token, mine.seat, asAccount);
    return;
  }
  if (!asAccount) rememberSeat(gameId, mine.token, mine.seat);
  fill(
    $("#handout-links"),
    people.map((seat) => {
      const id = `handout-${seat.seat}`;
      const input = h("input", { id, readonly: true, value: seatLink(gameId, seat.token, seat.seat) });
      return h(
        "li",
        {},
        h("label", { for: id }, `Link for ${seat.name} (seat ${seat.seat})`),
        h(
          "span",
          { class: "copy-row" },
          input,
          h(
            "button",
            {
              type: "button",
              class: "secondary",
              onclick: async (event) => {
                input.select();
                try {
                  await navigator.clipboard.writeText(input.value);
                  event.currentTarget.textContent = `Copied the link for ${seat.name}`;
                } catch {
                  say("Copy the selected link with your keyboard or menu.");
                }
              },
            },
            `Copy the link for ${seat.name}`,
          ),
        ),
      );
    }),
  );
  $("#handout-go").setAttribute("href", `/games/${gameId}`);
  show($("#create-form"), false);
  show($("#handout"), true);
  $("#handout-h").focus();
}

async function playSolitaire(event) {
  event.preventDefault();
  const where = "#solitaire-message";
  say("", where);
  const me = myName(where);
  if (!me) return;
  const form = event.currentTarget;
  const body = {
    players: [account ? { account: account.handle } : me],
    rules: {
      solitaire: form.elements.mode.value,
      dice_faces: Number($("#solo-faces").value),
      steep_hill: $("#solo-steep-hill").checked,
    },
    dice: form.elements.solo_dice.value,
  };
  try {
    const seeded = { ...body, ...(await committedSeeds(body.dice)) };
    const token = account ? account.token : undefined;
    const created = await api("/v1/games", { method: "POST", body: seeded, token });
    goPlay(created.game.id, created.seats[0].token, 0, Boolean(account));
  } catch (e) {
    say(e.detail, "#solitaire-message");
  }
}

// ------------------------------------------------------------------------------ the lists
function gameCard(game, action) {
  return h(
    "li",
    { class: "card" },
    h("p", { class: "card-title" }, playersText(game)),
    h("p", { class: "muted" }, rulesSummary(game.rules, game.dice)),
    action,
  );
}

function joinButton(game) {
  return h(
    "button",
    {
      type: "button",
      class: "primary",
      onclick: async () => {
        say("");
        const me = myName();
        if (!me) return;
        try {
          // Signed in, an empty body and the personal token seat the account.
          const done = await api(`/v1/games/${game.id}/players`, {
            method: "POST",
            body: account ? {} : { name: me },
            token: account ? account.token : undefined,
          });
          goPlay(game.id, done.token, done.seat, Boolean(account));
        } catch (e) {
          say(e.detail);
          loadGames();
        }
      },
    },
    "Join",
    h("span", { class: "visually-hidden" }, ` the game of ${playersText(game)}`),
  );
}

function gameLink(href, label, game) {
  return h(
    "a",
    { class: "button secondary", href },
    label,
    h("span", { class: "visually-hidden" }, ` the game of ${playersText(game)}`),
  );
}

async function loadList(query, listId, emptyId, action, keep = () => true) {
  try {
    const answer = await api(`/v1/games?${query}`);
    const games = answer.games.filter(keep);
    fill($(listId), games.map((g) => gameCard(g, action(g))));
    show($(emptyId), games.length === 0);
  } catch (e) {
    say(`The list of games could not be read: ${e.detail}`);
  }
}

function loadGames() {
  loadMyGames();
  loadList("status=waiting&open=true&limit=20", "#open-list", "#open-empty", (g) =>
    h("p", { class: "card-actions" }, `${g.open_seats} open of ${g.players.length} · `, joinButton(g)),
  );
  loadList(
    "status=in_progress&limit=20",
    "#live-list",
    "#live-empty",
    (g) => h("p", { class: "card-actions" }, gameLink(`/games/${g.id}`, "Watch", g)),
    (g) => !g.imported, // kept for audit, not being played
  );
  loadList("status=finished&limit=10", "#finished-list", "#finished-empty", (g) =>
    h("p", { class: "card-actions" }, gameLink(`/games/${g.id}/replay`, "Replay", g)),
  );
}

async function loadLeaderboard() {
  const mode = $("#board-mode").value;
  const faces = $("#board-faces").value;
  const steep = $("#board-steep").value;
  $("#leaderboard-caption").textContent = `Best results: ${mode}, ${faces} faces${steep === "true" ? ", steep hill" : ""}`;
  try {
    const answer = await api(
      `/v1/solitaire/leaderboard?mode=${mode}&dice_faces=${faces}&steep_hill=${steep}`,
    );
    fill(
      $("#leaderboard-rows"),
      answer.results.map((r) =>
        h(
          "tr",
          {},
          h("td", {}, String(r.rank)),
          h("td", {}, r.player),
          h("td", {}, String(r.turns)),
          h("td", {}, r.rating),
          h(
            "td",
            {},
            h(
              "a",
              { href: `/games/${r.game_id}/replay` },
              "Replay",
              h("span", { class: "visually-hidden" }, ` ${r.player}'s game of ${r.turns} turns`),
            ),
          ),
        ),
      ),
    );
    show($("#leaderboard-empty"), answer.results.length === 0);
  } catch (e) {
    say(`The leaderboard could not be read: ${e.detail}`);
  }
}

// ---------------------------------------------------------------------------------- start
try {
  nameInput.value = localStorage.getItem(NAME_KEY) || "";
} catch {
  // no storage
}
renderAccount();
checkAccount();
$("#add-opponent").addEventListener("click", () => {
  const row = addOpponent();
  if (row) $("[data-name=kind]", row).focus();
});
for (const radio of $$("input[name=dice]")) {
  radio.addEventListener("change", () => {
    for (const select of $$("#opponent-rows [data-name=kind]")) {
      fillKinds(select, null);
      syncRow(select.closest(".opponent"));
    }
    syncFirstPlayer();
  });
}
$("#opponent-rows").addEventListener("input", syncFirstPlayer);
$("#clock-on").addEventListener("change", (e) => show($("#clock-field"), e.currentTarget.checked));
// A rated game needs a turn clock (contract 1.3): choosing one turns the clock on.
$("#rated").addEventListener("change", (e) => {
  if (!e.currentTarget.checked) return;
  $("#clock-on").checked = true;
  show($("#clock-field"), true);
});
$("#dice-faces").addEventListener("change", (e) => {
  $("#columns-to-win").max = e.currentTarget.value === "8" ? "15" : "11";
});
$("#create-form").addEventListener("submit", createGame);
$("#solitaire-form").addEventListener("submit", playSolitaire);
$("#refresh").addEventListener("click", () => {
  loadGames();
  loadLeaderboard();
});
for (const id of ["#board-mode", "#board-faces", "#board-steep"]) {
  $(id).addEventListener("change", loadLeaderboard);
}
addOpponent("bot:expert");
api("/v1/bots")
  .then((answer) => {
    bots = answer.bots;
    for (const select of $$("#opponent-rows [data-name=kind]")) {
      fillKinds(select, null);
      syncRow(select.closest(".opponent"));
    }
  })
  .catch(() => {});
loadGames();
loadLeaderboard();
setInterval(() => {
  if (document.visibilityState === "visible") loadGames();
}, 15000);
