// Words for a game: each recorded event as a sentence, whose turn it is, and how it ended.

import { andList } from "./dom.js";
import { playerLabel } from "./board.js";

const PHASES = { roll: "roll", move: "choose a move", roll_or_stop: "roll again or stop" };
const REASONS = {
  columns: "claimed the columns to win",
  last_player: "the last player left",
  resigned: "everyone resigned",
  abandoned: "the game was abandoned",
  aborted: "aborted before every seat had played a turn: not rated",
};

function who(state, seat) {
  if (seat === null || seat === undefined) return "someone";
  const player = state.players.find((p) => p.seat === seat);
  return player && player.name !== null ? player.name : `seat ${seat}`;
}

export function moveName(sums) {
  return `Move ${sums.join(" and ")}`;
}

function columnsText(columns) {
  const list = [...columns].map(Number).sort((a, b) => a - b);
  return `${list.length === 1 ? "column" : "columns"} ${andList(list.map(String))}`;
}

/** One event as a sentence; ``state`` (any recent one) gives the names. */
export function describe(event, state) {
  const d = event.data || {};
  switch (event.type) {
    case "GameCreated": {
      if (d.players && d.players.length === 1) return `Solitaire game created for ${d.players[0]}`;
      if (d.players) return `Game created: ${andList(d.players)}`;
      return `Game created with ${d.seats} open seats`;
    }
    case "SeatJoined":
      return `${d.name} took seat ${d.seat}${d.bot ? ` (computer player: ${d.bot})` : ""}`;
    case "SeatLeft":
      return `Seat ${d.seat} was given back`;
    case "TurnOrderDecided": {
      // each round of the opening roll: every player still in it throws two dice
      const rounds = new Map();
      for (const draw of d.draws || []) {
        const total = draw.dice.reduce((a, b) => a + b, 0);
        if (!rounds.has(draw.round)) rounds.set(draw.round, []);
        rounds.get(draw.round).push(`${who(state, draw.seat)} ${total}`);
      }
      const opening = [...rounds.values()].map((r) => r.join(", ")).join("; then ");
      return `${opening ? `Opening roll: ${opening}. ` : ""}${who(state, d.first_player)} goes first`;
    }
    case "DiceRolled":
      return `${who(state, d.seat)} rolled ${d.dice.join(" ")}${
        d.moves && d.moves.length === 0 ? ": no move" : ""
      }`;
    case "MovePlayed":
      return `${who(state, d.seat)} moved ${d.sums.join(" and ")}`;
    case "TurnStopped": {
      const claimed = d.claimed && d.claimed.length ? `, claiming ${columnsText(d.claimed)}` : "";
      return `${who(state, d.seat)} stopped${claimed}`;
    }
    case "TurnBusted": {
      const wiped = d.wiped && d.wiped.length ? `, losing markers in ${columnsText(d.wiped)}` : "";
      return `${who(state, d.seat)} busted${wiped}`;
    }
    case "TurnTimedOut":
      return `${who(state, d.seat)} ran out of time (${d.in_a_row} in a row)`;
    case "PlayerResigned":
      return `${who(state, d.seat)} resigned${d.reason === "inactivity" ? " for inactivity" : ""}`;
    case "GameFinished": {
      const rating = d.rating ? ` Rating: ${d.rating}.` : "";
      if (d.winner === null || d.winner === undefined) {
        return `The game ended with no winner (${REASONS[d.reason] || d.reason}).${rating}`;
      }
      return `${who(state, d.winner)} won after ${d.turns} turns.${rating}`;
    }
    case "GameAbandoned":
      return "The game was abandoned: nothing happened for too long";
    case "SeedRevealed":
      return "The server's seed was revealed: every roll can now be checked";
    default:
      return event.type;
  }
}

/** Whose turn, in words: "Robo (seat 1) to choose a move · turn 3". */
export function turnText(state) {
  if (state.status === "waiting") {
    const open = state.players.filter((p) => p.name === null).length;
    return `Waiting for ${open} more ${open === 1 ? "player" : "players"}`;
  }
  if (state.status === "finished") {
    return [resultText(state), resultReason(state)].filter(Boolean).join(" ");
  }
  const turn = state.turn;
  if (!turn) return "The turn is over";
  return `${playerLabel(state, turn.player)} to ${PHASES[turn.phase] || turn.phase} · turn ${turn.number}`;
}

/** How a finished game ended. */
export function resultText(state) {
  if (state.winner === null || state.winner === undefined) {
    const why = REASONS[state.finish_reason] || state.finish_reason || "finished";
    return `Finished with no winner (${why})`;
  }
  if (state.solitaire) {
    return `${who(state, state.winner)} claimed every column in ${state.solitaire.turns} turns`;
  }
  return `${who(state, state.winner)} won`;
}

/** Why the winner won, in a few words: "by claiming columns 4 and 7". */
export function resultReason(state) {
  if (state.status !== "finished" || state.winner === null || state.solitaire) return "";
  if (state.finish_reason === "columns") {
    const claimed = state.players.find((p) => p.seat === state.winner)?.claimed || [];
    return `by claiming ${columnsText(claimed)}`;
  }
  return REASONS[state.finish_reason] ? `(${REASONS[state.finish_reason]})` : "";
}

/** "Turns taken: 7 of a target of 30 · rating: Target met". */
export function solitaireText(state) {
  const solo = state.solitaire;
  if (!solo) return "";
  let text = `${solo.mode === "advanced" ? "Advanced" : "Easy"} solitaire · turns taken: ${solo.turns} · target: ${solo.target} or fewer`;
  if (solo.rating) text += ` · rating: ${solo.rating}`;
  return text;
}

export function rulesText(state) {
  const r = state.rules;
  const parts = [];
  if (!state.solitaire) parts.push(`${r.columns_to_win} ${r.columns_to_win === 1 ? "column" : "columns"} to win`);
  parts.push(`${r.dice_faces}-sided dice`);
  parts.push(state.dice === "manual" ? "real dice typed in" : "server dice");
  for (const [key, name] of [
    ["jumping", "jumping"],
    ["forced_move", "forced move"],
    ["steep_hill", "steep hill"],
  ]) {
    if (r[key]) parts.push(name);
  }
  if (state.clock) parts.push(`${state.clock.turn_seconds} s per turn`);
  return parts.join(" · ");
}
