"""Advice for the player to act: the exact odds of busting now and after each move, and what the
strongest computer player would do. Pure: it reveals nothing secret (no dice to come)."""

from __future__ import annotations

import random
from typing import Any

from domain import odds, strategies
from domain.commands import to_dict
from domain.position import Position

ADVISOR = "expert"


def advise(position: Position, seed: str) -> dict[str, Any]:
    """``bust_chance`` (rolling now; None while dice wait for a move), each legal move's
    ``bust_chance_after``, and the expert's ``recommended`` action (deterministic: ``seed``)."""
    strategy = strategies.get(ADVISOR)
    recommended = strategy.choose(position, random.Random(seed))
    in_move = position.phase == "move"
    return {
        "seat": position.seat,
        "phase": position.phase,
        "bust_chance": None if in_move else odds.bust_chance(position),
        "moves": [
            {"sums": list(sums), "bust_chance_after": odds.bust_chance_after(position, sums)}
            for sums in (position.moves if in_move else ())
        ],
        "recommended": to_dict(recommended),
        "strategy": strategy.id,
        "strategy_version": strategy.version,
    }
