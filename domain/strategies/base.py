"""The strategy protocol: what a computer player is, and what it may answer."""

from __future__ import annotations

import random
from typing import Protocol

from domain.commands import Move, Roll, Stop
from domain.position import Position

Action = Roll | Move | Stop
"""What a strategy answers: never Resign (resigning is a person's decision)."""


class Strategy(Protocol):
    id: str
    name: str
    description: str
    version: str
    """Bumped whenever the behaviour changes, so recorded games say which bot played them."""

    def choose(self, position: Position, rng: random.Random) -> Action:
        """A legal action for the player to act; deterministic given ``rng``."""
        ...


class UnknownStrategy(KeyError):
    """No strategy has that id."""

    def __init__(self, strategy_id: str) -> None:
        super().__init__(strategy_id)
        self.strategy_id = strategy_id

    def __str__(self) -> str:
        return f"unknown bot {self.strategy_id!r}"
