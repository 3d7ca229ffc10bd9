"""The arena: strategies play whole games in memory, to measure how strong they are.

No aggregate, no events: the table is a few lists and ``domain.moves.Board`` judges every move, as
in ``Game``; strategies see the same ``Position`` they see in a real game. The simulator follows the
rulings (a test plays the same seeded games through it and through ``Game`` with manual dice, and
compares every position and action).

Reproducible: game ``i`` of a run with seed ``s`` draws its dice, and gives the strategies their
randomness, from generators seeded with ``s`` and ``i`` alone.

* ``solo``: one player races to K claimed columns (default all: the solitaire goal); the score is
  the number of turns, busts included. With K below all columns it is an analysis mode, not a
  solitaire game of the API.
* ``duel``: two players, to 3 columns (by default), the first player alternating game by game.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from domain.commands import Move, Roll, Stop
from domain.moves import UNCLAIMED, Sums
from domain.position import Position, board_for, shares_a_space
from domain.rules import Rules
from domain.strategies import Action, Strategy, get

MAX_TURNS = 10_000
"""A game still running after this many turns is given up (counted as unfinished)."""

Observer = Callable[[Position, Action], None]
"""Sees every decision: the position and the action taken (a roll with the dice it rolled)."""
Progress = Callable[[], None]
"""Called once per finished game (a progress bar's tick)."""


class IllegalStrategyAction(RuntimeError):
    """A strategy answered with an action the rules do not allow: a bug in the strategy."""


@dataclass(frozen=True, slots=True)
class Outcome:
    winner: int | None
    """The winning seat; None when the game was given up after ``MAX_TURNS`` turns."""
    turns: int
    """Turns completed, every seat's, busts included."""
    busts: int


def play(
    strategies: Sequence[Strategy],
    rules: Rules,
    *,
    first: int = 0,
    dice_rng: random.Random,
    bot_rng: random.Random,
    observer: Observer | None = None,
    max_turns: int = MAX_TURNS,
    clocks: Sequence[list[float]] | None = None,
) -> Outcome:
    """One game, seat ``i`` played by ``strategies[i]``, seat ``first`` starting.

    ``clocks``: when given, the seconds each decision of seat ``i`` took go to ``clocks[i]``.
    """
    seats = len(strategies)
    faces = rules.dice_faces
    heights = rules.heights
    n_cols = len(heights)
    markers = [[0] * n_cols for _ in range(seats)]
    claimed = [UNCLAIMED] * n_cols
    resigned = (False,) * seats
    current = first
    turns = busts = 0
    while turns < max_turns:
        strategy = strategies[current]
        own = markers[current]
        board = board_for(rules, markers, claimed, current)
        runners = [0] * n_cols
        phase = "roll"
        dice: tuple[int, ...] | None = None
        moves: tuple[Sums, ...] = ()
        while True:
            forced = rules.forced_move and shares_a_space(markers, current, runners)
            position = Position(
                rules,
                current,
                seats,
                tuple(map(tuple, markers)),
                tuple(claimed),
                tuple(runners),
                resigned,
                phase,
                dice,
                moves,
                forced,
                turns + 1,
            )
            if clocks is None:
                action = strategy.choose(position, bot_rng)
            else:
                started = time.perf_counter()
                action = strategy.choose(position, bot_rng)
                clocks[current].append(time.perf_counter() - started)
            if phase == "move":
                if not isinstance(action, Move) or tuple(sorted(action.sums)) not in moves:
                    raise IllegalStrategyAction(f"{strategy.id}: {action!r} in {position!r}")
                if observer:
                    observer(position, action)
                runners = board.play(tuple(sorted(action.sums)), runners)
                phase, dice, moves = "roll_or_stop", None, ()
            elif isinstance(action, Roll):
                dice = tuple(dice_rng.randint(1, faces) for _ in range(4))
                if observer:
                    observer(position, Roll(dice=dice))
                moves = tuple(board.legal_moves(dice, runners))
                if moves:
                    phase = "move"
                    continue
                busts += 1
                if rules.solitaire == "advanced":
                    for column, at in enumerate(runners):
                        if at:
                            own[column] = 0
                break
            elif isinstance(action, Stop) and phase == "roll_or_stop" and not forced:
                if observer:
                    observer(position, action)
                for column, at in enumerate(runners):
                    if not at:
                        continue
                    own[column] = at
                    if at == heights[column]:
                        claimed[column] = current
                        for other, theirs in enumerate(markers):
                            if other != current:
                                theirs[column] = 0
                if sum(1 for owner in claimed if owner == current) >= rules.columns_to_win:
                    return Outcome(current, turns + 1, busts)
                break
            else:
                raise IllegalStrategyAction(f"{strategy.id}: {action!r} in {position!r}")
        turns += 1
        current = (current + 1) % seats
    return Outcome(None, turns, busts)


# ------------------------------------------------------------------------------ statistics
Z95 = 1.959963984540054


def mean_ci(values: Sequence[float]) -> tuple[float, float, float, float]:
    """Mean, standard deviation and the 95% confidence interval of the mean (normal)."""
    mean = statistics.fmean(values)
    stdev = statistics.stdev(values) if len(values) > 1 else 0.0
    half = Z95 * stdev / math.sqrt(len(values))
    return mean, stdev, mean - half, mean + half


def wilson(wins: int, games: int) -> tuple[float, float]:
    """The Wilson score 95% interval of a proportion."""
    if games == 0:
        return 0.0, 1.0
    p = wins / games
    z2 = Z95 * Z95
    centre = (p + z2 / (2 * games)) / (1 + z2 / games)
    half = Z95 * math.sqrt(p * (1 - p) / games + z2 / (4 * games * games)) / (1 + z2 / games)
    return max(0.0, centre - half), min(1.0, centre + half)


def _rngs(seed: int, game: int) -> tuple[random.Random, random.Random]:
    return (
        random.Random(f"cantstop-arena:{seed}:{game}:dice"),
        random.Random(f"cantstop-arena:{seed}:{game}:bots"),
    )


def _round(x: float) -> float:
    return round(x, 4)


def decision_times(seconds: Sequence[float]) -> dict[str, Any]:
    """How long decisions took, in milliseconds: median, 99th and 99.9th percentiles, worst,
    and how many took longer than 50 ms (the budget a server playing many bots can afford)."""
    ordered = sorted(seconds)
    if not ordered:
        return {"decisions": 0}
    return {
        "decisions": len(ordered),
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
        "p999_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.999))] * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
        "over_50_ms": sum(1 for s in ordered if s > 0.05),
    }


# ------------------------------------------------------------------------------ runs
def solo(
    strategy_id: str,
    games: int,
    columns: int | None = None,
    seed: int = 0,
    faces: int = 6,
    progress: Progress | None = None,
    *,
    solitaire: str = "easy",
    steep_hill: bool = False,
    timing: bool = False,
) -> dict[str, Any]:
    """``games`` one-player races to ``columns`` claimed columns (None: all); turns per game.

    ``solitaire="advanced"``: a bust wipes the markers in the columns the runners were in.
    ``timing``: add how long the decisions took (``decision_ms``; varies run to run).
    UnknownStrategy for an unknown id; ValueError for numbers out of range.
    """
    strategy = get(strategy_id)
    n_columns = 2 * faces - 1
    target = n_columns if columns is None else columns
    if games < 1:
        raise ValueError("games must be at least 1")
    if faces not in (6, 8):
        raise ValueError("faces must be 6 or 8")
    if not 1 <= target <= n_columns:
        raise ValueError(f"columns must be from 1 to {n_columns}")
    if solitaire not in ("easy", "advanced"):
        raise ValueError('solitaire must be "easy" or "advanced"')
    rules = Rules(
        columns_to_win=target, steep_hill=steep_hill, solitaire=solitaire, dice_faces=faces
    )
    turns: list[int] = []
    busts: list[int] = []
    unfinished = 0
    clocks: list[list[float]] | None = [[]] if timing else None
    for i in range(games):
        dice_rng, bot_rng = _rngs(seed, i)
        outcome = play([strategy], rules, dice_rng=dice_rng, bot_rng=bot_rng, clocks=clocks)
        if outcome.winner is None:
            unfinished += 1
        else:
            turns.append(outcome.turns)
            busts.append(outcome.busts)
        if progress:
            progress()
    result: dict[str, Any] = {
        "strategy": strategy.id,
        "version": strategy.version,
        "games": games,
        "columns": target,
        "faces": faces,
        "solitaire": solitaire,
        "steep_hill": steep_hill,
        "seed": seed,
        "unfinished": unfinished,
    }
    if turns:
        mean, stdev, lo, hi = mean_ci(turns)
        result |= {
            "mean_turns": _round(mean),
            "ci95": [_round(lo), _round(hi)],
            "stdev": _round(stdev),
            "median_turns": statistics.median(turns),
            "min_turns": min(turns),
            "max_turns": max(turns),
            "mean_busts": _round(statistics.fmean(busts)),
        }
    if clocks is not None:
        result["decision_ms"] = decision_times(clocks[0])
    return result


def duel_keys(id1: str, id2: str) -> tuple[str, str]:
    """How a duel's results name its two players: the ids, or ``id#1``/``id#2`` in a mirror."""
    return (id1, id2) if id1 != id2 else (f"{id1}#1", f"{id2}#2")


def duel(
    id1: str,
    id2: str,
    games: int,
    seed: int = 0,
    faces: int = 6,
    progress: Progress | None = None,
    *,
    columns: int = 3,
    jumping: bool = False,
    forced_move: bool = False,
    steep_hill: bool = False,
    timing: bool = False,
) -> dict[str, Any]:
    """``games`` two-player games; ``id1`` holds seat 0, and game ``i`` starts with seat ``i % 2``.

    A mirror match (``id1 == id2``) names its players ``id#1`` and ``id#2`` (``duel_keys``).
    ``timing``: add how long the decisions took (``decision_ms``; varies run to run).
    UnknownStrategy for an unknown id; ValueError for numbers out of range.
    """
    players = (get(id1), get(id2))
    if games < 1:
        raise ValueError("games must be at least 1")
    if faces not in (6, 8):
        raise ValueError("faces must be 6 or 8")
    if not 1 <= columns <= 2 * faces - 1:
        raise ValueError(f"columns must be from 1 to {2 * faces - 1}")
    if jumping and forced_move:
        raise ValueError("jumping and forced_move exclude each other")
    rules = Rules(
        columns_to_win=columns,
        jumping=jumping,
        forced_move=forced_move,
        steep_hill=steep_hill,
        dice_faces=faces,
    )
    keys = duel_keys(id1, id2)
    wins = [0, 0]
    first_games = [0, 0]
    first_wins = [0, 0]
    second_wins = [0, 0]
    turns: list[int] = []
    unfinished = 0
    clocks: list[list[float]] | None = [[], []] if timing else None
    for i in range(games):
        dice_rng, bot_rng = _rngs(seed, i)
        first = i % 2
        outcome = play(
            players, rules, first=first, dice_rng=dice_rng, bot_rng=bot_rng, clocks=clocks
        )
        first_games[first] += 1
        if outcome.winner is None:
            unfinished += 1
        else:
            turns.append(outcome.turns)
            wins[outcome.winner] += 1
            if outcome.winner == first:
                first_wins[first] += 1
            else:
                second_wins[outcome.winner] += 1
        if progress:
            progress()

    def rate(k: int, n: int) -> float:
        return _round(k / n) if n else 0.0

    decided = games - unfinished
    movers_won = sum(first_wins)
    result: dict[str, Any] = {
        "players": {
            key: {"strategy": p.id, "version": p.version}
            for key, p in zip(keys, players, strict=True)
        },
        "games": games,
        "seed": seed,
        "faces": faces,
        "columns": columns,
        "variants": {"jumping": jumping, "forced_move": forced_move, "steep_hill": steep_hill},
        "wins": {keys[s]: wins[s] for s in (0, 1)},
        "win_rate": {keys[s]: rate(wins[s], games) for s in (0, 1)},
        "ci95": {keys[s]: [_round(x) for x in wilson(wins[s], games)] for s in (0, 1)},
        "first_mover": {
            "win_rate": rate(movers_won, decided),
            "ci95": [_round(x) for x in wilson(movers_won, decided)],
            "by_player": {
                keys[s]: {
                    "moving_first": rate(first_wins[s], first_games[s]),
                    "moving_second": rate(second_wins[s], first_games[1 - s]),
                }
                for s in (0, 1)
            },
        },
        "mean_turns": _round(statistics.fmean(turns)) if turns else None,
        "unfinished": unfinished,
    }
    if clocks is not None:
        result["decision_ms"] = {keys[s]: decision_times(clocks[s]) for s in (0, 1)}
    return result
