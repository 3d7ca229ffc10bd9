// A tournament's page: its standings, rounds and players as they change, and registering or
// withdrawing the signed-in account.
//
// The server renders the page as it stands; this module then follows the tournament's stream
// (/v1/tournaments/{id}/stream) and, at each change it announces, reads the tournament again
// (one GET, at most one at a time) and redraws what changed. The account's personal token goes
// only in the Authorization header of the API calls (api.js).

import { api, heldAccount, oneReadAtATime, sameHandle } from "./api.js";
import { $, fill, h, show } from "./dom.js";

const root = $("#tournament");
const id = root.dataset.id;
const account = heldAccount();
const STATUS = { created: "upcoming", started: "under way", finished: "finished" };

function say(text) {
  const el = $("#entry-message");
  el.textContent = text;
  show(el, Boolean(text));
}

function registered(t) {
  return Boolean(account) && t.players.some((p) => sameHandle(p, account.handle));
}

function renderEntry(t) {
  show($("#entry-signed-out"), !account);
  show($("#entry-signed-in"), Boolean(account));
  if (!account) return;
  const mine = registered(t);
  const open = t.status === "created" || (t.status === "started" && t.kind === "arena");
  let state;
  if (t.status === "finished") state = mine ? "You played in it." : "It is over.";
  else if (mine) state = `You are registered as ${account.handle}.`;
  else if (open) state = `Register as ${account.handle} to play.`;
  else state = "Registration is closed: it has started.";
  $("#entry-state").textContent = state;
  show($("#register"), !mine && open);
  show($("#withdraw"), mine && t.status !== "finished");
}

function renderStandings(t) {
  const rows = t.standings.map((s) =>
    h(
      "tr",
      {},
      h("td", { text: s.rank }),
      h("th", { scope: "row" }, h("a", { href: `/players/${encodeURIComponent(s.handle)}`, text: s.handle })),
      h("td", { text: s.points }),
      h("td", { text: s.games }),
    ),
  );
  fill($("#standings-body"), rows);
  show($("#standings-empty"), rows.length === 0);
  if (t.status === "finished") $("#standings-live").textContent = "Final standings.";
}

/** How a table stands: as the server's page says it (pages/__init__.py: table_outcome). */
function outcome(table) {
  const result = table.result;
  if (!result) return "under way";
  if (result.aborted) return "aborted: no points";
  const first = Object.entries(result.places || {})
    .filter(([, place]) => place === 0)
    .map(([handle]) => handle);
  return first.length ? `${first.join(" and ")} won` : "finished";
}

/** A Swiss's tables by round, an arena's newest first (as pages/__init__.py: table_groups). */
function groups(t) {
  if (t.kind === "swiss") {
    return t.rounds.map((r) => ({ title: `Round ${r.number}`, tables: r.tables, byes: r.byes || [] }));
  }
  const tables = (t.tables || []).slice().reverse();
  return tables.length ? [{ title: "Games, newest first", tables, byes: [] }] : [];
}

function renderRounds(t) {
  const parts = [];
  const shown = groups(t);
  for (const group of shown) {
    parts.push(h("h3", { text: group.title }));
    parts.push(
      h(
        "ul",
        { class: "cards" },
        group.tables.map((table) =>
          h(
            "li",
            { class: "card" },
            h("a", { href: `/games/${table.game_id}`, text: table.players.join(" vs ") }),
            h("p", { class: "muted", text: outcome(table) }),
          ),
        ),
      ),
    );
    if (group.byes.length) parts.push(h("p", { class: "hint", text: `Bye: ${group.byes.join(", ")}` }));
  }
  fill($("#rounds"), parts);
  show($("#rounds-empty"), shown.length === 0);
}

function renderPlayers(t) {
  const el = $("#players-list");
  if (!t.players.length) {
    fill(el, "Nobody has registered yet.");
    return;
  }
  const links = [];
  t.players.forEach((p, i) => {
    if (i) links.push(", ");
    links.push(h("a", { href: `/players/${encodeURIComponent(p)}`, text: p }));
  });
  fill(el, links);
}

function render(t) {
  $("#tournament-status").textContent = STATUS[t.status] || t.status;
  renderEntry(t);
  renderStandings(t);
  renderRounds(t);
  renderPlayers(t);
}

/** Read the tournament again; calls that arrive meanwhile make one more read after it. */
const refresh = oneReadAtATime(async () => render(await api(`/v1/tournaments/${id}`)));

async function act(method, path) {
  say("");
  for (const button of [$("#register"), $("#withdraw")]) button.disabled = true;
  try {
    await api(path, { method, token: account.token });
    await refresh();
  } catch (error) {
    say(error.detail || "That did not work; try again.");
  } finally {
    for (const button of [$("#register"), $("#withdraw")]) button.disabled = false;
  }
}

$("#register").addEventListener("click", () => act("POST", `/v1/tournaments/${id}/players`));
$("#withdraw").addEventListener("click", () =>
  act("DELETE", `/v1/tournaments/${id}/players/${encodeURIComponent(account.handle)}`),
);

function follow() {
  const stream = new EventSource(`/v1/tournaments/${id}/stream`);
  const changed = () => refresh();
  stream.onmessage = changed;
  for (const type of STREAM_TYPES) stream.addEventListener(type, changed);
  stream.addEventListener("open", changed); // (re)connected: catch up on what was missed
  stream.addEventListener("error", () => {
    if (stream.readyState === EventSource.CLOSED) $("#standings-live").textContent = "Live updates stopped: reload the page.";
  });
}

// The event names of the tournament's stream (its `event:` lines: the tournament's event types).
const STREAM_TYPES = [
  "Created",
  "Registered",
  "Withdrawn",
  "Started",
  "RoundPaired",
  "TableSeated",
  "ResultRecorded",
  "Paused",
  "Resumed",
  "Finished",
];

refresh();
if (root.dataset.status !== "finished") follow();
