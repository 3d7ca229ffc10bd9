"""The expert: plays each turn to maximise the worth of how it ends, by expectimax over the rolls.

Two parts (see docs/bots.md for the measurements):

* **How good a table is** (``Valuation``): for each player, an estimate of the turns they still
  need. A column's remaining work is the hits of its sum still needed to top it (its spaces
  left, and on the steep hill one more from a marker, where a runner starts), each weighted
  by ``1 / p`` (``Params.alpha`` = 1) where ``p`` is the chance that a roll offers that
  column's sum: the rolls it takes, about. A player needs the ``columns_to_win`` columns they
  have claimed or can still claim with the least work; further columns count a little
  (``Params.tail``, geometric), because a column started may become one of them. Claimed
  columns cost nothing; columns an opponent claimed are out of reach. Turns left grow with that
  work (``CALIBRATION``, fitted to the expert's own races).
* **How to play the turn** (``TurnPlanner``, domain/strategies/turn.py): exact expectimax over the
  distinct rolls once the columns are settled, a two-roll look-ahead while runners can still be
  placed, with the valuation at the ends of the turn.

What an end of turn is worth:
* alone (solitaire, or a race to K columns): minus the turns still needed (so the expert
  minimises the expected number of turns), with a bust in advanced solitaire wiping the markers;
* against opponents: the chance of winning, from everybody's turns left as a normal race (the
  expert presses when an opponent is close to winning, and claims columns an opponent has
  climbed); a hundredth of a turn of its own progress breaks ties when the chance is all but
  certain either way.

Variants: the planner sees the table through ``Position.board()``, so jumping, steep hill and
claimed or topped columns are in every move it weighs; under forced move it never stops while a
runner shares a space with another player's marker; eight-sided dice change only the rates and
heights the valuation reads.
"""

from __future__ import annotations

import math
import random
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from domain.commands import Move, Roll, Stop
from domain.moves import UNCLAIMED
from domain.odds import roll_masks
from domain.position import Position
from domain.strategies.base import Action
from domain.strategies.turn import Shared, State, TurnPlanner

FAR = 1_000.0
"""Turns left for a player who can no longer win (too few columns open)."""
CALIBRATION = {6: (0.16, 150.0), 8: (0.17, 400.0)}
"""Per number of faces, (rate, scale) of the turns left for the work left, fitted to the
expert's own races to 3 columns (eight-sided dice bust more: a unit of work costs more turns)."""


@cache
def hit_rates(faces: int) -> tuple[float, ...]:
    """Per column, the chance that a roll of four dice offers its sum in some pairing."""
    total = faces**4
    out = [0.0] * (2 * faces + 1)
    for mask, n in roll_masks(faces):
        for c in range(2, 2 * faces + 1):
            if mask >> c & 1:
                out[c] += n / total
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Params:
    alpha: float = 1.0
    """Weight of a space: 1 / (chance a roll offers the column) ** alpha."""
    tail: float = 0.25
    """Weight of the columns beyond the ``columns_to_win`` cheapest ones (geometric)."""
    turns_base: float = 0.2
    """Turns left as the work left goes to nothing (a win itself is 0)."""
    turns_per_work: float | None = None
    """Turns left per unit of work, at first ... (None: ``CALIBRATION`` for the dice)"""
    work_scale: float | None = None
    """... less and less as work grows: ``base + rate · work / (1 + work / scale)``."""
    variance_per_turn: float = 0.9
    """Variance of the turns left, per turn expected (fitted)."""
    tie_break: float = 0.01
    """Against opponents: turns of one's own progress, in chances of winning (breaks ties)."""


def hits_left(height: int, marker: int, steep_hill: bool) -> int:
    """The hits of a column's sum it takes to top a column of ``height`` from a marker at
    ``marker`` (0: none). On the steep hill a runner placed in a column with the player's
    marker starts on it, not above: one hit more than the spaces left (a marker at 1 is worth
    no more than none)."""
    left = height - marker
    return left + 1 if steep_hill and marker and left else left


@cache
def space_weights(faces: int, alpha: float) -> tuple[float, ...]:
    rates = hit_rates(faces)
    return tuple(1 / rates[c] ** alpha if rates[c] else 0.0 for c in range(2 * faces + 1))


class Valuation:
    """Turns left for every player of a table, as the acting player's turn would leave it: its
    runners (``state``) become markers, and the columns they topped are claimed."""

    def __init__(self, position: Position, params: Params) -> None:
        rules = position.rules
        self.params = params
        self.seat = position.seat
        self.heights = rules.heights
        self.need = rules.columns_to_win
        self.weights = weights = space_weights(rules.dice_faces, params.alpha)
        self.rivals = [
            s for s in range(position.seats) if s != position.seat and not position.resigned[s]
        ]
        self.have = [
            sum(1 for owner in position.claimed if owner == s) for s in range(position.seats)
        ]
        # work[c][s]: the work left in column c from a marker at space s (0: none), looked up
        # on the planner's hot path
        self.work = [
            [weights[c] * hits_left(h, s, rules.steep_hill) for s in range(h + 1)]
            for c, h in enumerate(self.heights)
        ]
        # per player, the work in each open column, least first, with the column's bit
        open_columns = [c for c in rules.columns if position.claimed[c] == UNCLAIMED]
        self.ranked = [
            sorted((self.work[c][own[c]], 1 << c) for c in open_columns) for own in position.markers
        ]
        self.tail_terms = 0
        factor = params.tail
        while factor >= 1e-3:
            self.tail_terms += 1
            factor *= params.tail
        self.rivals_known: dict[int, list[float]] = {}  # ``rivals_turns``, by topped columns
        # per (seat, columns skipped, how many): the cheapest other open columns' work
        self._cheapest: dict[tuple[int, int, int], tuple[float, ...]] = {}
        self._mine: dict[int, tuple[float, ...]] = {}  # the same for the acting player, by an int
        self._need_mine = self.need - self.have[self.seat]
        rate, scale = CALIBRATION[rules.dice_faces]
        self.rate = rate if params.turns_per_work is None else params.turns_per_work
        self.scale = scale if params.work_scale is None else params.work_scale

    def _work(self, seat: int, values: list[float], skip: int, need: int) -> float:
        """The work of the ``need`` cheapest columns (and the tail): ``values`` for the columns
        in ``skip`` (bits), the player's markers for the others."""
        if need <= 0:
            return 0.0
        values += self._cheapest_of(seat, skip, need + self.tail_terms)
        if len(values) < need:
            return math.inf
        values.sort()
        total = sum(values[:need])
        factor = tail = self.params.tail
        for work in values[need : need + self.tail_terms]:
            total += factor * work
            factor *= tail
        return total

    def _cheapest_of(self, seat: int, skip: int, wanted: int) -> tuple[float, ...]:
        """The work of the ``wanted`` cheapest open columns of ``seat`` not in ``skip``."""
        memo = (seat, skip, wanted)
        cheapest = self._cheapest.get(memo)
        if cheapest is None:  # the planner's hot path: few masks, asked again and again
            found = []
            for work, bit in self.ranked[seat]:
                if not bit & skip:
                    found.append(work)
                    if len(found) == wanted:
                        break
            cheapest = self._cheapest[memo] = tuple(found)
        return cheapest

    def mine(self, state: State) -> tuple[float, int]:
        """The acting player's turns left if the turn ends with runners ``state``, and the
        columns it would claim (bits). The planner's hottest path: ``_work`` and ``turns``
        inlined, the same arithmetic in the same order."""
        heights, work = self.heights, self.work
        values = []
        skip = topped = 0
        for c, at in state:
            skip |= 1 << c
            if at == heights[c]:
                topped |= 1 << c
            else:
                values.append(work[c][at])
        need = self._need_mine - topped.bit_count()
        if need <= 0:
            return 0.0, topped
        memo = skip << 5 | need  # need < 32: at most the columns
        cheapest = self._mine.get(memo)
        if cheapest is None:
            cheapest = self._mine[memo] = self._cheapest_of(self.seat, skip, need + self.tail_terms)
        values += cheapest
        if len(values) < need:
            return FAR, topped
        values.sort()
        total = sum(values[:need])
        factor = tail = self.params.tail
        for work_left in values[need : need + self.tail_terms]:
            total += factor * work_left
            factor *= tail
        if total == 0:
            return 0.0, topped
        return self.params.turns_base + self.rate * total / (1 + total / self.scale), topped

    def rivals_turns(self, topped: int) -> list[float]:
        """Every rival's turns left, once the acting player claims the ``topped`` columns."""
        try:
            return self.rivals_known[topped]
        except KeyError:
            found = self.rivals_known[topped] = [
                self.turns(self._work(s, [], topped, self.need - self.have[s])) for s in self.rivals
            ]
            return found

    def turns(self, work: float) -> float:
        if work == 0:
            return 0.0
        if work == math.inf:
            return FAR
        return self.params.turns_base + self.rate * work / (1 + work / self.scale)


class ExpertStrategy:
    id = "expert"
    name = "Expert"
    description = (
        "Plays every turn by exact expectation over the dice: each way a turn can end is worth "
        "the turns it leaves to win (alone) or the chance of winning (against others)."
    )
    version = "4"

    def __init__(
        self, params: Params | None = None, cache_size: int = 32, shared: Shared | None = None
    ) -> None:
        """``shared``: what its planners share from turn to turn (a new one by default); one
        given may serve other strategies too, one at a time (an analyst's games, in turn)."""
        self.params = params or Params()
        self._planners: OrderedDict[tuple[object, ...], TurnPlanner] = OrderedDict()
        self._cache_size = cache_size
        self._shared = Shared() if shared is None else shared
        # One decision at a time: the planners' memory is shared, and a decision is pure Python
        # (the GIL serialises it anyway), so bots and advice in several threads lose nothing.
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the planner of a turn
    def forget(self) -> None:
        """Drops its planners and what they share (their memory): a game that is over asks for
        no more."""
        with self._lock:
            self._planners.clear()
            self._shared = Shared()

    def planner(self, position: Position) -> TurnPlanner:
        key = (
            position.rules,
            position.seat,
            position.markers,
            position.claimed,
            position.resigned,
            position.turn_number,
        )
        found = self._planners.get(key)
        if found is not None:
            self._planners.move_to_end(key)
            return found
        found = self._build(position)
        self._planners[key] = found
        while len(self._planners) > self._cache_size:
            self._planners.popitem(last=False)
        return found

    def _build(self, position: Position) -> TurnPlanner:
        valuation = Valuation(position, self.params)
        params = self.params
        seat = position.seat
        rules = position.rules
        others = [m for s, m in enumerate(position.markers) if s != seat]

        mine = valuation.mine
        bust_value = None  # what busting is worth, when the runners do not change it

        if not valuation.rivals:

            def utility(state: State) -> float:
                return -mine(state)[0]

            if rules.solitaire == "advanced":

                def bust_utility(state: State) -> float:
                    return -mine(tuple((c, 0) for c, _ in state))[0]

            else:
                at_bust = bust_value = -mine(())[0]

                def bust_utility(state: State) -> float:
                    return at_bust

        else:
            spread_per_turn = params.variance_per_turn
            root2 = math.sqrt(2)
            sqrt, erf = math.sqrt, math.erf
            tie_break = params.tie_break
            rivals_turns = valuation.rivals_turns
            rivals_known = valuation.rivals_known

            def utility(state: State) -> float:
                turns, topped = mine(state)
                if turns == 0:
                    return 1.0
                chance = 1.0
                rivals = rivals_known.get(topped)  # ``rivals_turns``, nearly always known
                for theirs in rivals_turns(topped) if rivals is None else rivals:
                    spread = sqrt(spread_per_turn * (turns + theirs) + 0.25) * root2
                    chance *= 0.5 * (1 + erf((theirs - turns - 0.5) / spread))
                return chance - tie_break * turns

            at_bust = bust_value = utility(())

            def bust_utility(state: State) -> float:
                return at_bust

        must_roll = None
        steps_never_hurt = None
        if rules.forced_move and others:

            def must_roll(state: State) -> bool:
                return any(m[c] == s for c, s in state for m in others)

        elif not valuation.rivals:
            # Alone, a stop that leaves the board as the turn found it (runners placed on the
            # player's own markers, under steep hill) spends a turn for nothing, and the same
            # dice would stop the same way next time: in advanced solitaire, where a bust wipes
            # those markers, the valuation preferred it, and a game with one column left never
            # ended. The expert rolls on instead; one more step still never hurts.
            own = position.markers[seat]
            steps_never_hurt = True

            def must_roll(state: State) -> bool:
                return all(own[c] == at for c, at in state)

        return TurnPlanner(
            position.board(),
            rules.dice_faces,
            utility,
            bust_utility,
            must_roll,
            steps_never_hurt,
            self._shared,
            bust_value,
        )

    # ------------------------------------------------------------------ decisions
    def choose(self, position: Position, rng: random.Random) -> Action:
        if position.phase == "roll":
            return Roll()
        with self._lock:
            planner = self.planner(position)
            if position.phase == "move":
                return Move(planner.best_move(position.runners, position.moves))
            if position.forced_to_roll or planner.should_roll(position.runners):
                return Roll()
        return Stop()

    def move_values(self, position: Position) -> Sequence[float]:
        """What the expert thinks each legal move is worth (advice may show it)."""
        with self._lock:
            return self.planner(position).move_values(position.runners, position.moves)
