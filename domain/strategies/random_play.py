"""The random player: a uniformly random legal action."""

from __future__ import annotations

import random

from domain.commands import Move, Roll, Stop
from domain.position import Position
from domain.strategies.base import Action


class RandomStrategy:
    id = "random"
    name = "Random"
    description = "Picks uniformly among the legal actions: any move; roll or stop at even odds."
    version = "1"

    def choose(self, position: Position, rng: random.Random) -> Action:
        if position.phase == "move":
            return Move(rng.choice(position.moves))
        if position.phase == "roll" or position.forced_to_roll:
            return Roll()
        return Roll() if rng.random() < 0.5 else Stop()
