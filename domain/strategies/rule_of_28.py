"""Michael Keller's Rule of 28, as Glenn & Aloi state it (FLAIRS 2009).

Progress: every space a runner advances this turn scores the column's progress value (7 → 1,
6/8 → 2, 5/9 → 3, 4/10 → 4, 3/11 → 5, 2/12 → 6), doubled for the space where the runner was
placed. Once all three runners are out: +2 if their columns are all odd, −2 if all even, +4 if all
are ≥ 7, +4 if all are ≤ 7. Stop when the total reaches 28, and whenever stopping now wins.
Moves: each option scores 6 − |7 − c| for every space it plays, minus 6 for every runner it
places; the best option is played (the first in ascending order on a tie).

The total is read off the position, not remembered: a runner at space ``r`` in a column where
the player's marker is at ``m`` has advanced ``r − m`` spaces, one of them the placement, so it
scores ``v·(r − m + 1)``. Under steep hill a runner placed on its marker advanced no space but was
still placed: ``v·(0 + 1)``. Under jumping the spaces jumped over count as advanced.

Other dice: a column at distance ``d`` from the middle column ``f + 1`` has progress value
``1 + 5·d/(f − 1)`` (1 in the middle, 6 at the edges: exactly the table above for six faces),
and a move scores ``7 − value`` per space; the bonuses compare with ``f + 1`` instead of 7 ("odd"
and "even" keep their meaning, the middle column being odd for both dice). The threshold stays 28.

Not in the published rule, added because it never changes a decision the rule could sensibly
make: the player rolls when the forced-move variant demands it, and stops rather than roll when
every roll would bust (all runners topped).
"""

from __future__ import annotations

import random

from domain.commands import Move, Roll, Stop
from domain.moves import MAX_RUNNERS, Sums
from domain.odds import bust_chance
from domain.position import Position
from domain.strategies.base import Action

THRESHOLD = 28
PLACEMENT_PENALTY = 6


def progress_value(column: int, faces: int) -> float:
    """Points per space advanced in ``column``: 1 in the middle, 6 at the edges."""
    return 1 + 5 * abs(column - (faces + 1)) / (faces - 1)


def turn_progress(position: Position) -> float:
    """The Rule of 28's total for the turn so far."""
    faces = position.rules.dice_faces
    own = position.own
    columns = [c for c, at in enumerate(position.runners) if at]
    total = sum(progress_value(c, faces) * (position.runners[c] - own[c] + 1) for c in columns)
    if len(columns) == MAX_RUNNERS:
        middle = faces + 1
        if all(c % 2 for c in columns):
            total += 2
        elif not any(c % 2 for c in columns):
            total -= 2
        if all(c >= middle for c in columns):
            total += 4
        if all(c <= middle for c in columns):
            total += 4
    return total


def move_score(position: Position, sums: Sums) -> float:
    """The Rule of 28's preference for a move: higher is better."""
    faces = position.rules.dice_faces
    placed = {c for c in sums if not position.runners[c]}
    return sum(7 - progress_value(c, faces) for c in sums) - PLACEMENT_PENALTY * len(placed)


class RuleOf28:
    id = "rule-of-28"
    name = "Rule of 28"
    description = (
        "Michael Keller's Rule of 28: counts progress points this turn (more for outer columns) "
        "and stops at 28, or when stopping wins; prefers moves in the middle columns."
    )
    version = "1"

    def choose(self, position: Position, rng: random.Random) -> Action:
        if position.phase == "move":
            return Move(max(position.moves, key=lambda m: move_score(position, m)))
        if position.phase == "roll" or position.forced_to_roll:
            return Roll()
        if position.stopping_wins() or turn_progress(position) >= THRESHOLD:
            return Stop()
        return Stop() if bust_chance(position) == 1.0 else Roll()
