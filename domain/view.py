"""The game state in the contract's shape (api-contract.md, Games → State)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from domain.game import Game, format_at, position_map
from domain.moves import UNCLAIMED
from domain.rules import Rules


def legal_actions(game: Game) -> list[dict[str, Any]]:
    """What the player to act may do now; resigning is always possible and not listed."""
    if game.status != "in_progress" or game.current is None:
        return []  # (also just after the stop that wins, before GameFinished)
    if game.phase == "move":
        return [{"type": "move", "sums": list(m)} for m in game.options]
    if game.phase == "roll_or_stop" and not game.forced_to_roll():
        return [{"type": "roll"}, {"type": "stop"}]
    return [{"type": "roll"}]


@lru_cache(maxsize=4096)
def _moves(options: tuple[tuple[int, ...], ...]) -> list[dict[str, Any]]:
    """A roll's legal moves as actions: a few hundred distinct sets, shared between views."""
    return [{"type": "move", "sums": list(m)} for m in options]


ROLL_OR_STOP = [{"type": "roll"}, {"type": "stop"}]
ROLL = [{"type": "roll"}]


def _legal_actions(game: Game, current: int | None) -> list[dict[str, Any]]:
    """``legal_actions`` for the view: the same lists, shared between views (never changed)."""
    if game.status != "in_progress" or current is None:
        return []
    phase = game.phase
    if phase == "move":
        return _moves(tuple(map(tuple, game.options)))
    if phase == "roll_or_stop" and not game.forced_to_roll():
        return ROLL_OR_STOP
    return ROLL


@lru_cache(maxsize=8192)
def _positions(positions: tuple[int, ...]) -> dict[str, int]:
    """``position_map`` of a board's positions, shared between views (never changed)."""
    return position_map(positions)


@lru_cache(maxsize=8192)
def _player(
    seat: int,
    name: str | None,
    markers: tuple[int, ...],
    columns: range,
    claimed: tuple[int, ...],
    resigned: bool,
    bot: str | None,
    account: str | None,
    timeouts: int,
) -> dict[str, Any]:
    """A seat as the view shows it. Only a turn's end changes a seat (a roll or a move changes
    none), so most views share their seats with the view before (views are never changed)."""
    return {
        "seat": seat,
        "name": name,
        "markers": _positions(markers),
        "claimed": [c for c in columns if claimed[c] == seat] if seat in claimed else [],
        "resigned": resigned,
        "bot": bot,
        "account": account,
        "timeouts_in_a_row": timeouts,
    }


@lru_cache(maxsize=64)
def _rules(rules: Rules) -> dict[str, Any]:
    return rules.to_dict()


@lru_cache(maxsize=4096)
def _columns(rules: Rules, claimed: tuple[int, ...]) -> list[dict[str, Any]]:
    heights = rules.heights
    return [
        {
            "column": c,
            "height": heights[c],
            "claimed_by": None if claimed[c] == UNCLAIMED else claimed[c],
        }
        for c in rules.columns
    ]


def game_state(game: Game, game_id: str | None = None) -> dict[str, Any]:
    """The state view. Its parts that many versions share (the rules, the columns as claimed)
    are built once and shared: a view is never changed once built."""
    rules = game.rules_obj
    claimed = tuple(game.claimed)
    status, current = game.status, game.current
    turn = None
    if status == "in_progress" and current is not None:
        phase = game.phase
        turn = {
            "number": game.turn_number,
            "player": current,
            "phase": phase,
            "dice": list(game.dice) if phase == "move" and game.dice else None,
            "runners": _positions(tuple(game.runners)),
            "deadline": format_at(deadline) if (deadline := game.deadline) else None,
        }
    solitaire = None
    if rules.solitaire:
        solitaire = {
            "mode": rules.solitaire,
            "turns": game.turns_completed,
            "target": game.solitaire_target,
            "rating": game.rating,
        }
    columns = rules.columns
    names, markers, resigned = game.names, game.markers, game.resigned
    bots = game.bots
    accounts = game.accounts
    timeouts = game.timeouts
    players = [
        _player(
            seat,
            names[seat],
            tuple(markers[seat]),
            columns,
            claimed,
            resigned[seat],
            bots.get(str(seat)),
            accounts[seat],
            timeouts[seat] if seat < len(timeouts) else 0,
        )
        for seat in range(game.seats)
    ]
    return {
        "id": game_id,
        "version": game.version,
        "status": status,
        "rules": _rules(rules),
        "dice": game.dice_mode,
        "columns": _columns(rules, claimed),
        "players": players,
        "turn": turn,
        "legal_actions": _legal_actions(game, current),
        "winner": game.winner,
        "finish_reason": game.finish_reason,
        "first_player": game.first_player if status != "waiting" else None,
        "solitaire": solitaire,
        "clock": {"turn_seconds": game.clock_seconds} if game.clock_seconds else None,
        "rematch_of": game.rematch_of,
        "rated": game.rated,
        "fairness": {
            "seed_commitment": game.seed_commitment,
            "client_seed": game.client_seed,
            "server_seed": game.server_seed,
        },
    }
