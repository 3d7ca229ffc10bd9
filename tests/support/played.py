"""Whole games played in memory through the ``Game`` aggregate (manual dice from a seeded
generator, computer players choosing every action), as the events ``/events`` would serve: the
analysis's input, without a server."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from domain import strategies
from domain.commands import Move, NewGame, Roll, Stop
from domain.game import Game, event_records
from domain.position import Position

MAX_ACTIONS = 20_000

Chooser = Callable[[Position, random.Random], Any]
"""Picks an action (``Roll``, ``Move``, ``Stop``) for a position."""


def play(
    players: Sequence[str | Chooser],
    *,
    rules: Mapping[str, Any] | None = None,
    seed: int = 0,
    first_player: int = 0,
    until: Callable[[Game], bool] | None = None,
) -> list[dict[str, Any]]:
    """A game of these players (strategy ids or choosers), to its end (or until ``until``
    holds), as served event records. Dice and choices come from generators seeded with
    ``seed``, so the same call always plays the same game."""
    game = play_game(players, rules=rules, seed=seed, first_player=first_player, until=until)
    return event_records(game.collect_events())


def play_game(
    players: Sequence[str | Chooser],
    *,
    rules: Mapping[str, Any] | None = None,
    seed: int = 0,
    first_player: int = 0,
    until: Callable[[Game], bool] | None = None,
) -> Game:
    """``play``'s game itself, its events pending (not collected)."""
    dice_rng, choice_rng = random.Random(f"dice:{seed}"), random.Random(f"choices:{seed}")
    choosers: list[Chooser] = [
        strategies.get(p).choose if isinstance(p, str) else p for p in players
    ]
    game = Game.start(
        uuid.UUID(int=seed),
        NewGame(
            players=[f"P{i}" for i in range(len(players))],
            rules=rules,
            dice="manual",
            first_player=first_player,
        ),
    )
    faces = game.rules_obj.dice_faces
    for _ in range(MAX_ACTIONS):
        if game.status != "in_progress" or (until is not None and until(game)):
            break
        position = Position.from_game(game)
        seat = position.seat
        action = choosers[seat](position, choice_rng)
        if isinstance(action, Roll):
            game.roll(seat, dice=[dice_rng.randint(1, faces) for _ in range(4)])
        elif isinstance(action, Move):
            game.move(seat, action.sums)
        elif isinstance(action, Stop):
            game.stop(seat)
        else:
            game.resign(seat)
    else:
        raise AssertionError(f"the game did not end in {MAX_ACTIONS} actions")
    return game


def lobby_game(seed: int, resign_at: int) -> list[dict[str, Any]]:
    """Three seats filled from the lobby, the rule of 28 in each, one resigning at its
    ``resign_at``-th action: the points an analysis of a game in progress may stop at."""
    rng = random.Random(seed)
    game = Game.start(uuid.UUID(int=seed), NewGame(seats=3, dice="manual", first_player=1))
    choose = strategies.get("rule-of-28").choose
    for name in ("Ann", "Bob", "Cy"):
        game.join(name)
    for action in range(1, 2_000):
        if game.status != "in_progress":
            break
        position = Position.from_game(game)
        chosen = choose(position, rng)
        if action == resign_at:
            game.resign(position.seat)
        elif isinstance(chosen, Roll):
            game.roll(position.seat, dice=[rng.randint(1, 6) for _ in range(4)])
        elif isinstance(chosen, Move):
            game.move(position.seat, chosen.sums)
        else:
            game.stop(position.seat)
    return event_records(game.collect_events())
