"""Playing one turn well: expectimax over the distinct rolls, for any valuation of how it ends.

Within a turn the markers stand still and only the runners move, so a turn is a small acyclic
decision problem. At each "roll or stop" point the player may take what the runners hold now
(``utility(state)``) or roll: the roll either busts (``bust_utility(state)``) or offers moves,
of which the player takes the best. A *state* is the runners, as ``((column, space), ...)``
sorted by column.

``TurnPlanner`` values these points in two ways:

* exactly (``value``) once the runners' columns are settled: three runners out, or no column
  left to place one in. What remains is a small problem over at most three columns, solved by
  memoised recursion, with one shortcut: where stopping is worth at least as much as rolling
  once more and then stopping (the one-step look-ahead), it stops without looking further. That
  is exact when a point at which it pays to stop is only ever followed by points at which it
  pays to stop (risk only grows as runners climb), and very nearly so otherwise.
* by a look-ahead (``estimate``) while runners can still be placed: the next roll exactly, then
  ``horizon``, which reads one more roll and supposes every later roll alike (the same chance
  to bust, the same expected gain). The exact values of every column triple a turn could still
  reach would cost a second of search; the look-ahead costs a few milliseconds (and is worth
  half a turn over valuing the moves by ``horizon`` alone: 7.06 turns to 3 columns, not 7.50).

The exact search is used for a decision when the points it must value number at most
``EXACT_BUDGET``; past that the look-ahead decides. Whether it fits depends on the decision's
points alone (they are counted, never what an earlier decision left in memory), and a point's
exact value is the same whichever decision asks for it, so the values are kept for the turn.

Rolls are judged by shape: for a *shape* of the table (per column: closed, or holding a runner
or not, and able to take one more step or two; and how many runners are out), ``roll_groups``
lists the moves the rolls offer, and for each move the ordered rolls offering it, one bit per
roll. The expectation of the best move's worth is then taken move by move, best first, each move
credited with the rolls that offer it and no better one (a popcount). The moves offered are
exactly ``Board.legal_moves`` (a test compares them).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from typing import NamedTuple, cast

from domain.moves import MAX_RUNNERS, Board, Sums, pairings
from domain.odds import distinct_rolls

State = tuple[tuple[int, int], ...]
"""The runners of a turn: ``((column, space), ...)``, sorted by column."""
Utility = Callable[[State], float]

# The shape of a column, for the moves a roll offers.
CLOSED, RUNNER_ONE, RUNNER_MORE, FREE_ONE, FREE_MORE = range(5)


NO_STOP = float("-inf")
LOOK_AHEAD = 1
"""Rolls looked at one by one before ``horizon`` takes over, while runners can be placed."""
REMEMBERED_SEARCHES = 16
"""The last searches ``TurnPlanner.fits`` keeps, of each outcome."""
EXACT_BUDGET = 250
"""Points the exact search may value for one decision (a few milliseconds); past them, the
look-ahead decides (measured: no loss in strength against a budget of 600). Eight-sided dice
have about 2.5 times as many roll shapes per point: a third of the budget, and the horizon
straight after the move instead of one roll looked at first (docs/bots.md: the same strength,
decisions 15 times faster at the 99.9th percentile)."""


@cache
def pairings_table(faces: int) -> tuple[tuple[int, tuple[tuple[int, int], ...]], ...]:
    """Distinct rolls grouped by their pairings: (ordered rolls, sorted pairs of sums)."""
    counts: dict[tuple[tuple[int, int], ...], int] = {}
    for dice, n in distinct_rolls(faces):
        pairs = tuple(sorted((min(a, b), max(a, b)) for a, b in pairings(dice)))
        counts[pairs] = counts.get(pairs, 0) + n
    return tuple((n, pairs) for pairs, n in sorted(counts.items()))


def offered(
    shape: Sequence[int], runners_out: int, pairs: Sequence[tuple[int, int]], prune: bool = False
) -> tuple[Sums, ...]:
    """The moves a roll with these pairings offers in a table of this shape, sorted.

    ``shape[c]`` is the shape of column ``c``. The rule of ``Board.legal_moves``: a pairing
    (a, b) offers both sums when a is playable and b still is after a, else each playable sum.
    With ``prune``, a move playing one sum is left out where the roll offers a move playing it
    and another sum: meant for settled columns, where one more step all but never hurts (it can
    top a column sooner, closing it to later rolls of the turn); the planner's choices among
    the legal moves themselves are never pruned.
    """

    def playable(c: int, out: int) -> bool:
        s = shape[c]
        return s in (RUNNER_ONE, RUNNER_MORE) or (s >= FREE_ONE and out < MAX_RUNNERS)

    options: set[Sums] = set()
    for a, b in pairs:
        if playable(a, runners_out):
            if a == b:
                both = shape[a] in (RUNNER_MORE, FREE_MORE)
            else:
                both = playable(b, runners_out + (shape[a] >= FREE_ONE))
            if both:
                options.add((a, b) if a <= b else (b, a))
                continue
            options.add((a,))
        if playable(b, runners_out):
            options.add((b,))
    if prune:
        doubles = [m for m in options if len(m) == 2]
        options = {m for m in options if len(m) == 2 or not any(m[0] in d for d in doubles)}
    return tuple(sorted(options))


class Shape(NamedTuple):
    """How the rolls fall out for one shape of the table.

    Every ordered roll has a bit (the rolls of one row of ``pairings_table`` take consecutive
    bits), so "how many rolls offer this move and no better one" is a popcount: the expectation
    over rolls of the best move's worth is taken move by move, best first (``TurnPlanner``),
    instead of roll by roll.
    """

    busts: int
    """Ordered rolls that bust."""
    moves: tuple[Sums, ...]
    """Every move some roll offers."""
    rolls: tuple[int, ...]
    """Per move, the bits of the ordered rolls that offer it."""


@cache
def _pair_rolls(faces: int) -> tuple[tuple[int, int, int], ...]:
    """Per pairing of two sums (a ≤ b): a, b and the bits of the ordered rolls that have it
    (the bits of ``roll_groups``: the rolls of one row of ``pairings_table`` consecutive)."""
    bits: dict[tuple[int, int], int] = {}
    offset = 0
    for n, pairs in pairings_table(faces):
        row = ((1 << n) - 1) << offset
        for pair in set(pairs):
            bits[pair] = bits.get(pair, 0) | row
        offset += n
    return tuple((a, b, rolls) for (a, b), rolls in sorted(bits.items()))


@lru_cache(maxsize=1 << 14)
def _pair_offers(a: int, b: int, shape_a: int, shape_b: int, runners_out: int) -> tuple[Sums, ...]:
    """``offered`` for the one pairing (a, b), from the shapes of its two columns."""
    shape = [CLOSED] * (b + 1)
    shape[a], shape[b] = shape_a, shape_b
    return offered(shape, runners_out, ((a, b),))


@lru_cache(maxsize=16384)
def roll_groups(faces: int, shape: tuple[int, ...], runners_out: int, prune: bool = False) -> Shape:
    """Every roll of ``faces``-sided dice in a table of this shape, by the moves it offers.

    Pairing by pairing: a roll offers the moves its three pairings offer, so the rolls offering
    a move are those of the pairings that offer it. With ``prune``, a roll offering a move of
    two sums offers no move of one of them alone (``offered``)."""
    rolls: dict[Sums, int] = {}
    for a, b, bits in _pair_rolls(faces):
        for move in _pair_offers(a, b, shape[a], shape[b], runners_out):
            rolls[move] = rolls.get(move, 0) | bits
    offering = 0
    for bits in rolls.values():
        offering |= bits
    if prune:
        for move in [m for m in rolls if len(m) == 1]:
            for double in rolls:
                if len(double) == 2 and move[0] in double:
                    rolls[move] &= ~rolls[double]
            if not rolls[move]:
                del rolls[move]
    moves = tuple(sorted(rolls))
    return Shape(faces**4 - offering.bit_count(), moves, tuple(rolls[m] for m in moves))


@lru_cache(maxsize=1 << 14)
def columns_after(held: tuple[int, ...], moves: tuple[Sums, ...]) -> tuple[tuple[int, ...], ...]:
    """The columns holding runners after each move, from those holding them before."""
    return tuple([tuple(sorted({*held, *move})) for move in moves])


SHIFT = 5
"""Bits per column in a packed state: spaces go up to 17 (column 9 of eight-sided dice)."""
MASK = (1 << SHIFT) - 1
RUNNER = tuple(tuple((c, at) for at in range(1 << SHIFT)) for c in range(17))
"""``RUNNER[c][at]``: the runner ``(c, at)`` of a state, made once (a turn's states hold tens of
thousands of them: shared, they cost no memory, and a state is built by indexing)."""


def as_state(runners: Sequence[int]) -> State:
    """Runners indexed by column (as a ``Position`` has them) → a planner state."""
    return tuple((c, at) for c, at in enumerate(runners) if at)


def pack(state: State) -> int:
    """A state as one integer (``SHIFT`` bits per column): the planner's key."""
    key = 0
    for c, at in state:
        key |= at << (SHIFT * c)
    return key


Children = tuple[int, tuple[int, ...], tuple[int, ...]]
"""(busting rolls, the packed point each move leads to, the rolls offering each move)."""
Credits = tuple[tuple[int, int], ...]
"""The moves credited by an expectation, best first, each with its count of ordered rolls."""
Plans = dict[tuple[int, ...], Credits]
Kids = tuple[int, tuple[int, ...], tuple[int, ...], int, tuple[tuple[int, ...], ...], Plans]
"""``Children``, then the rolls offering some move (bits), the columns each move leaves held
and the credits by ranking of the moves (``credit_plans``): what the planner keeps per point."""
Caps = tuple[tuple[int, int], ...]
"""Per runner: its column and how many more steps it can take (0, 1, or 2 for more)."""
Layout = tuple[Shape, tuple[tuple[int, ...], ...], list[int] | None, int, Plans]
"""Per shape of the runners: the rolls by move, the columns each move leaves held, the moves'
offsets of the packed key (None: not uniform), the rolls offering some move (bits), and the
credits by ranking of the moves."""

SHARED_POINTS = 1 << 15
"""Points a ``Shared`` keeps of each kind (runners, children) before it is emptied: about a
game's worth (the duel of seed 11 reached 28,427 distinct points, 16,892 with every runner out;
an analysis of it kept part way holds some 11 MB more than without them, tracemalloc)."""

PLANS_PER_SHAPE = 256
"""Rankings of the moves kept per group of rolls (``credit_plans``): with the 512 groups kept,
at most 131,072 plans of a few pairs each."""


@lru_cache(maxsize=512)
def credit_plans(rolls: tuple[int, ...]) -> Plans:
    """For the moves of one group of rolls (``Shape.rolls``): per ranking of them, best first
    (the ranking by their worth, ties in the moves' order), the moves credited with rolls and
    how many rolls each, as ``_credit`` works them out. The rolls each move is
    credited with depend on the ranking alone, and the same rankings come back again and
    again (the best moves of nearby points rank alike): the sum over them is then a few
    multiplications. Filled by the planners, at most ``PLANS_PER_SHAPE`` rankings."""
    return {}


def _credit(ranking: tuple[int, ...], rolls: tuple[int, ...], left: int, plans: Plans) -> Credits:
    """The moves credited for a ranking (best first) not in ``plans`` yet, and their counts of
    rolls: each move the rolls that offer it and no better move, until every roll in ``left``
    is credited."""
    credited = []
    for i in ranking:
        fresh = rolls[i] & left
        if fresh:
            credited.append((i, fresh.bit_count()))
            left ^= fresh
            if not left:
                break
    found = tuple(credited)
    if len(plans) < PLANS_PER_SHAPE:
        plans[ranking] = found
    return found


class Shared:
    """What the planners of one player share from turn to turn: what depends on the points
    alone, not on what the table makes them worth. A point's runners (``unpack``: its key
    alone); and on a board where every step is one space (``TurnPlanner.uniform``: no marker to
    jump), a point with every runner out moves in its own columns only, whatever the markers:
    its children and their layout (``Kids``, ``Layout``), per dice and pruning. A turn's points
    are mostly the last turn's: in the duel of seed 11, 28,427 distinct points of 60,492 asked
    for in its 12 turns. Emptied when a planner is built past ``SHARED_POINTS``."""

    def __init__(self) -> None:
        self.states: dict[int, State] = {}
        self.settled: dict[tuple[int, bool], tuple[dict[int, Kids], dict[int, Layout]]] = {}

    def trimmed(self) -> Shared:
        if len(self.states) > SHARED_POINTS:
            self.states.clear()
        for kids, _ in self.settled.values():
            if len(kids) > SHARED_POINTS:
                kids.clear()
        return self


class TurnPlanner:
    """The value of the points of one turn, for a table whose markers stand still.

    ``utility(state)``: what stopping with these runners is worth (higher is better);
    ``bust_utility(state)``: what busting with them is worth; ``must_roll(state)``: stopping is
    not allowed (forced move, or a rule of the player's own); ``steps_never_hurt``: one more step
    in a settled column is never worse (by default, unless ``must_roll`` is given: under forced
    move a step can land beside another player's marker and force the player on);
    ``bust_value``: what busting is worth whatever the runners, when it is so (``bust_utility``
    says the same; read without a call). Inside, points are packed integers (``pack``),
    remembered.
    """

    def __init__(
        self,
        board: Board,
        faces: int,
        utility: Utility,
        bust_utility: Utility,
        must_roll: Callable[[State], bool] | None = None,
        steps_never_hurt: bool | None = None,
        shared: Shared | None = None,
        bust_value: float | None = None,
    ) -> None:
        self.faces = faces
        self.total = faces**4
        self.utility = utility
        self.bust_utility = bust_utility
        self.bust_value = bust_value
        self.must_roll = must_roll
        self.prune = must_roll is None if steps_never_hurt is None else steps_never_hurt
        n_cols = len(board.heights)
        self.columns = columns = range(2, n_cols)
        # next_space[c][s]: where one more step in column c takes a runner at s (0: none yet);
        # 0 when it cannot move (claimed column, topped runner). Jumping and steep hill included.
        self.next_space: list[list[int]] = [[0] * (h + 1) for h in board.heights]
        probe = [0] * n_cols
        for c in columns:
            for s in range(board.heights[c] + 1):
                probe[c] = s
                self.next_space[c][s] = board.step(c, probe, 0)
            probe[c] = 0
        # the same step as a change of the packed key
        self.step_delta = [
            [(to - at) << (SHIFT * c) if to else 0 for at, to in enumerate(row)]
            for c, row in enumerate(self.next_space)
        ]
        free = [CLOSED] * n_cols
        for c in columns:
            placed = self.next_space[c][0]
            if placed:
                free[c] = FREE_MORE if self.next_space[c][placed] else FREE_ONE
        self.free_shape = tuple(free)
        self.free_columns = [c for c in columns if free[c]]
        self.free_mask = sum(1 << c for c in self.free_columns)  # their bits
        self.low_bits = sum(1 << (SHIFT * c) for c in columns)  # each column's lowest in a key
        # steps[c][s]: how many more steps a runner at s in column c can take (0, 1, 2: more)
        self.steps = [
            [(2 if row[to] else 1) if (to := row[at]) else 0 for at in range(len(row))]
            for row in self.next_space
        ]
        # the same as one int per point (``_kids``): each column's steps in two bits of its own
        self.cap_codes = [[(n + 1) << (2 * c) for n in row] for c, row in enumerate(self.steps)]
        # Without jumping a step changes the packed key by the same amount wherever the
        # runner stands (placing it aside): a point's children are then its key plus offsets
        # that depend on the shape of its runners alone.
        self.uniform = all(
            delta == 1 << (SHIFT * c)
            for c, row in enumerate(self.step_delta)
            for at, delta in enumerate(row)
            if at and delta
        )
        self._shapes: dict[Caps, Shape] = {}
        # per shape of the runners: the rolls by move, and the columns each move leaves held
        self._layouts: dict[int, Layout] = {}  # by ``cap_codes``
        self._states: dict[int, State] = {}
        self._children: dict[int, Kids] = {}
        # points with every runner out: their children and layouts, shared when they can be
        self._settled_kids, self._settled_layouts = self._children, self._layouts
        if shared is not None:
            shared.trimmed()
            self._states = shared.states
            if self.uniform:
                self._settled_kids, self._settled_layouts = shared.settled.setdefault(
                    (faces, self.prune), ({}, {})
                )
        self._stop: dict[int, float] = {}
        self._worth: dict[int, float] = {}
        self._bust: dict[int, float] = {}
        self._look: dict[int, float] = {}
        self._value: dict[int, float] = {}
        # the points the exact search goes on to from a point: none where it stops at once
        self._onward: dict[int, tuple[int, ...]] = {}
        # ``fits``' last searches: the points reached by those that fit, the points of others
        self._fitting: deque[frozenset[int]] = deque(maxlen=REMEMBERED_SEARCHES)
        self._not_fitting: deque[frozenset[int]] = deque(maxlen=REMEMBERED_SEARCHES)
        self._moves: dict[tuple[int, tuple[Sums, ...]], list[float]] = {}
        self._estimate: dict[tuple[int, int], float] = {}
        self._horizon: dict[int, float] = {}
        self.exact_budget = EXACT_BUDGET if faces <= 6 else EXACT_BUDGET // 3
        self.depth = LOOK_AHEAD if faces <= 6 else 0

    # ------------------------------------------------------------------ points and moves
    def unpack(self, key: int) -> State:
        found = self._states.get(key)
        if found is None:  # the columns holding runners, lowest first, by their bits alone
            state = []
            rest = key
            while rest:
                c = ((rest & -rest).bit_length() - 1) // SHIFT
                shift = SHIFT * c
                state.append(RUNNER[c][rest >> shift & MASK])
                rest &= ~(MASK << shift)
            found = self._states[key] = tuple(state)
        return found

    def _caps(self, key: int) -> Caps:
        """Per runner: its column and how many more steps it can take (0, 1, or 2 for more)."""
        steps = self.steps
        return tuple([(c, steps[c][s]) for c, s in self.unpack(key)])

    def shape(self, key: int) -> tuple[tuple[int, ...], int]:
        """The shape of the table at this point (per column), and how many runners are out."""
        caps = self._caps(key)
        out = len(caps)
        shape = list(self.free_shape) if out < MAX_RUNNERS else [CLOSED] * len(self.free_shape)
        for c, cap in caps:
            shape[c] = (CLOSED, RUNNER_ONE, RUNNER_MORE)[cap]
        return tuple(shape), out

    def groups(self, key: int) -> Shape:
        """The rolls at this point, grouped by the moves they offer."""
        caps = self._caps(key)
        found = self._shapes.get(caps)
        if found is None:
            shape, out = self.shape(key)
            prune = self.prune and (out >= MAX_RUNNERS or not any(s >= FREE_ONE for s in shape))
            found = self._shapes[caps] = roll_groups(self.faces, shape, out, prune)
        return found

    def settled(self, key: int) -> bool:
        """No more runners can be placed this turn: the columns are settled."""
        state = self.unpack(key)
        if len(state) >= MAX_RUNNERS:
            return True
        held = 0
        for c, _ in state:
            held |= 1 << c
        return held & self.free_mask == self.free_mask

    def after(self, key: int, move: Sums) -> int:
        """The point reached by playing ``move``."""
        delta = self.step_delta
        for c in move:
            key += delta[c][key >> (SHIFT * c) & MASK]
        return key

    def children(self, key: int) -> Children:
        """(busting rolls, the point each move offered leads to, the rolls offering each)."""
        return self._kids(key)[:3]

    def _kids(self, key: int) -> Kids:
        """``children``, with the rolls offering some move and the columns each move leaves
        held (``Kids``), kept per point."""
        found = self._children.get(key)
        if found is None:
            state = self.unpack(key)
            layouts = self._layouts
            if len(state) == MAX_RUNNERS:
                found = self._settled_kids.get(key)
                if found is not None:
                    self._children[key] = found
                    return found
                layouts = self._settled_layouts
            codes = self.cap_codes
            caps = 0
            for c, s in state:
                caps += codes[c][s]
            layout = layouts.get(caps)
            if layout is None:
                group = self.groups(key)
                offsets = None
                if self.uniform:
                    offsets = [self.after(key, move) - key for move in group.moves]
                offering = 0
                for bits in group.rolls:
                    offering |= bits
                layout = layouts[caps] = (
                    group,
                    columns_after(tuple([c for c, _ in state]), group.moves),
                    offsets,
                    offering,
                    credit_plans(group.rolls),
                )
            group, held_after, offsets, offering, plans = layout
            if offsets is not None:
                kids = [key + offset for offset in offsets]
            else:
                delta = self.step_delta
                kids = []
                for move in group.moves:  # ``after``, inlined
                    kid = key
                    for c in move:
                        kid += delta[c][kid >> (SHIFT * c) & MASK]
                    kids.append(kid)
            found = self._children[key] = (
                group.busts,
                tuple(kids),
                group.rolls,
                offering,
                held_after,
                plans,
            )
            if len(state) == MAX_RUNNERS:
                self._settled_kids[key] = found
        return found

    # ------------------------------------------------------------------ values
    def _utility(self, key: int) -> float:
        """``utility``, remembered (whether or not the player may stop there)."""
        value = self._worth.get(key)
        if value is None:
            value = self._worth[key] = self.utility(self.unpack(key))
        return value

    def _bust_utility(self, key: int) -> float:
        if self.bust_value is not None:
            return self.bust_value
        value = self._bust.get(key)
        if value is None:
            value = self._bust[key] = self.bust_utility(self.unpack(key))
        return value

    def stop_value(self, key: int) -> float:
        """What stopping now is worth (``NO_STOP`` when the player may not stop)."""
        value = self._stop.get(key)
        if value is None:
            if self.must_roll is not None and self.must_roll(self.unpack(key)):
                value = NO_STOP
            else:
                value = self._utility(key)
            self._stop[key] = value
        return value

    def _expect(self, key: int, worth: Callable[[int], float]) -> float:
        """Rolling now, each roll followed by the move to the point of highest ``worth``.

        Moves are taken best first; each is credited with the rolls that offer it and no
        better move (``Shape``), until every roll that does not bust is credited."""
        busts, kids, rolls, left, _, plans = self._children.get(key) or self._kids(key)
        bust = self.bust_value
        total = busts * (self._bust_utility(key) if bust is None else bust) if busts else 0.0
        values = [worth(kid) for kid in kids]
        order = tuple(sorted(range(len(kids)), key=values.__getitem__, reverse=True))
        for i, n in plans.get(order) or _credit(order, rolls, left, plans):
            total += values[i] * n
        return total / self.total

    def look_ahead(self, key: int) -> float:
        """Rolling once more, then stopping after the best move (``_expect`` of ``utility``,
        inlined: the planner's hottest path)."""
        found = self._look.get(key)
        if found is None:
            busts, kids, rolls, left, held_after, plans = self._children.get(key) or self._kids(key)
            bust = self.bust_value
            total = busts * (self._bust_utility(key) if bust is None else bust) if busts else 0.0
            worth = self._worth
            known = list(map(worth.get, kids))
            if None in known:  # points not valued yet
                utility = self.utility
                states = self._states
                for i, value in enumerate(known):
                    if value is None:
                        kid = kids[i]
                        state = states.get(kid)
                        if state is None:  # ``unpack``, knowing which columns hold runners
                            state = states[kid] = tuple(
                                [RUNNER[c][kid >> (SHIFT * c) & MASK] for c in held_after[i]]
                            )
                        known[i] = worth[kid] = utility(state)
            values = cast("list[float]", known)
            order = tuple(sorted(range(len(kids)), key=values.__getitem__, reverse=True))
            for i, n in plans.get(order) or _credit(order, rolls, left, plans):
                total += values[i] * n
            found = self._look[key] = total / self.total
        return found

    def value(self, key: int) -> float:
        """A "roll or stop" point, played as well as possible from here (see the module):
        exact, however many points it takes (``fits`` says whether a decision may ask)."""
        found = self._value.get(key)
        if found is None:
            stop = self.stop_value(key)
            if stop != NO_STOP and stop >= self.look_ahead(key):
                found = stop
            else:
                found = max(stop, self._expect(key, self.value))
            self._value[key] = found
        return found

    def onward(self, key: int) -> tuple[int, ...]:
        """The points ``value`` values to value this one: none where it stops at once."""
        found = self._onward.get(key)
        if found is None:
            stop = self.stop_value(key)
            stops = stop != NO_STOP and stop >= self.look_ahead(key)
            found = self._onward[key] = () if stops else self._kids(key)[1]
        return found

    def fits(self, keys: Sequence[int]) -> bool:
        """The exact values of these points take at most ``exact_budget`` points in all
        (themselves and every point ``value`` reaches from them), counted afresh: the choice
        between the exact search and the look-ahead depends on the points alone.

        Points are counted as they are found, and those whose onward points are known already
        are looked past first, then the others in the order found (breadth first: the points
        nearer the start, which roll on more often, first): a search too big for the budget is
        told from a few points.

        The last searches are remembered: the points a search that fit reached (closed: they
        hold every point they reach) answer for any points among them, and points that did not
        fit for any points that include them."""
        limit = self.exact_budget
        seen = set(keys)
        if len(seen) > limit:
            return False
        for reached in self._fitting:
            if seen <= reached:
                return True
        for too_many in self._not_fitting:
            if too_many <= seen:
                return False
        found = self._search(seen, limit)
        remembered = self._fitting if found else self._not_fitting
        remembered.appendleft(frozenset(seen) if found else frozenset(keys))
        return found

    def _search(self, seen: set[int], limit: int) -> bool:
        """``fits``' search from the points ``seen``: they grow to every point reached, as long
        as they number at most ``limit``."""
        known = self._onward
        ready = [key for key in seen if key in known]
        later = deque([key for key in seen if key not in known])
        onward = self.onward
        while ready or later:
            key = ready.pop() if ready else later.popleft()
            kids = known.get(key)
            for kid in onward(key) if kids is None else kids:
                if kid not in seen:
                    seen.add(kid)
                    if len(seen) > limit:
                        return False
                    (ready if kid in known else later).append(kid)
        return True

    def horizon(self, key: int) -> float:
        """A settled point valued as if every further roll were like the next one: the same
        chance to bust, the same expected gain. Rolling ``k`` more times then is worth
        ``bust + (1 - p)**k * (at_stake + k * gain)``; the best ``k`` is taken (0: stop)."""
        found = self._horizon.get(key)
        if found is not None:
            return found
        look = self.look_ahead(key)
        stop = self.stop_value(key)
        busts = (self._children.get(key) or self._kids(key))[0]
        if not busts or busts == self.total or stop == NO_STOP or not self.settled(key):
            found = self._horizon[key] = max(stop, look)
            return found
        bust = self._bust_utility(key)
        success = self.total - busts
        gain = (look * self.total - busts * bust) / success - stop
        at_stake = stop - bust
        keep = success / self.total
        found = stop
        if gain > 0:
            best = -1 / math.log(keep) - at_stake / gain
            for k in {1, max(1, math.floor(best)), max(1, math.ceil(best))}:
                found = max(found, bust + keep**k * (at_stake + k * gain))
        self._horizon[key] = found
        return found

    def estimate(self, key: int, depth: int = 1) -> float:
        """A "roll or stop" point valued by looking ``depth`` rolls ahead, then ``horizon``."""
        if depth <= 0:
            return self.horizon(key)
        memo = (key, depth)
        found = self._estimate.get(memo)
        if found is None:
            deeper = self.horizon if depth == 1 else lambda k: self.estimate(k, depth - 1)
            found = max(self.stop_value(key), self._expect(key, deeper))
            self._estimate[memo] = found
        return found

    # ------------------------------------------------------------------ decisions
    def move_values(self, runners: Sequence[int], moves: Sequence[Sums]) -> list[float]:
        """What each move leads to: exact values when every move leaves the same settled
        columns and the search fits the budget, else the two-roll look-ahead for all of them
        (so they compare fairly). The answer depends on the position alone: it is kept."""
        start = pack(as_state(runners))
        memo = (start, tuple(moves))
        found = self._moves.get(memo)
        if found is None:
            found = self._moves[memo] = self._move_values(start, moves)
        return list(found)

    def _move_values(self, start: int, moves: Sequence[Sums]) -> list[float]:
        delta = self.step_delta
        children = []
        for move in moves:  # ``after``, inlined
            kid = start
            for c in move:
                kid += delta[c][kid >> (SHIFT * c) & MASK]
            children.append(kid)
        # the columns holding runners: each field (SHIFT = 5 bits) ORed into its lowest bit
        low = self.low_bits
        columns = {(k | k >> 1 | k >> 2 | k >> 3 | k >> 4) & low for k in children}
        if len(columns) == 1 and self.settled(children[0]) and self.fits(children):
            return [self.value(child) for child in children]
        return [self.estimate(child, self.depth) for child in children]

    def best_move(self, runners: Sequence[int], moves: Sequence[Sums]) -> Sums:
        """The move leading to the most valuable point (the first of equals)."""
        if len(moves) == 1:
            return moves[0]
        values = self.move_values(runners, moves)
        return moves[max(range(len(moves)), key=values.__getitem__)]

    def roll_value(self, runners: Sequence[int]) -> float:
        """What rolling on is worth, as ``should_roll`` weighs it: it rolls exactly when this
        is more than ``stop_value`` (the analysis judges a roll or a stop by it). Settled
        columns, or no look-ahead (eight-sided dice): rolling once more, then stopping; else the
        expectation of the look-ahead, which ``estimate`` would clip at stopping."""
        key = pack(as_state(runners))
        if self.settled(key) or self.depth <= 0:
            return self.look_ahead(key)
        depth = self.depth
        deeper = self.horizon if depth == 1 else (lambda k: self.estimate(k, depth - 1))
        return self._expect(key, deeper)

    def should_roll(self, runners: Sequence[int]) -> bool:
        key = pack(as_state(runners))
        stop = self.stop_value(key)
        if stop == NO_STOP:
            return True
        if self.settled(key):  # the exact choice, by the one-step look-ahead (see ``value``)
            return self.look_ahead(key) > stop
        return self.estimate(key, self.depth) > stop
