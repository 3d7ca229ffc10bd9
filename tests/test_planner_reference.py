"""The expert's planner, made fast for the analysis (issue #44), against the planner as it was
(kept here, slow): the same values to the bit, so the bots play the same games and every
analysis keeps its answers.

What changed, and what the reference keeps as it was: the exact search counted a budget down
from scratch at each decision and gave up past it (now: the points are counted first, and exact
values are kept for the turn); the expectation over the rolls credited every move (now: it stops
once every roll is credited); the rolls were grouped by the moves they offer row by row of the
pairings table (now: pairing by pairing)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.moves import UNCLAIMED, Sums
from domain.position import Position
from domain.rules import Rules
from domain.strategies.expert import ExpertStrategy
from domain.strategies.turn import (
    NO_STOP,
    TurnPlanner,
    as_state,
    offered,
    pack,
    pairings_table,
    roll_groups,
)
from tests.support.positions import positions


class OverBudget(Exception):
    pass


def old_expect(planner: TurnPlanner, key: int, worth: Callable[[int], float]) -> float:
    busts, kids, rolls = planner.children(key)
    total = busts * planner.bust_utility(planner.unpack(key)) if busts else 0.0
    values = [worth(kid) for kid in kids]
    covered = 0
    for i in sorted(range(len(kids)), key=values.__getitem__, reverse=True):
        fresh = rolls[i] & ~covered
        if fresh:
            total += values[i] * fresh.bit_count()
            covered |= fresh
    return total / planner.total


def old_look_ahead(planner: TurnPlanner, key: int) -> float:
    return old_expect(planner, key, lambda kid: planner.utility(planner.unpack(kid)))


def old_move_values(
    planner: TurnPlanner, runners: Sequence[int], moves: Sequence[Sums]
) -> list[float]:
    """The exact search with its budget counted down afresh, else the look-ahead."""
    start = pack(as_state(runners))
    children = [planner.after(start, m) for m in moves]
    columns = {tuple(c for c, _ in planner.unpack(child)) for child in children}
    if len(columns) == 1 and planner.settled(children[0]):
        memo: dict[int, float] = {}
        budget = [planner.exact_budget]

        def value(key: int) -> float:
            found = memo.get(key)
            if found is None:
                budget[0] -= 1
                if budget[0] < 0:
                    raise OverBudget
                stop = planner.stop_value(key)
                if stop != NO_STOP and stop >= old_look_ahead(planner, key):
                    found = stop
                else:
                    found = max(stop, old_expect(planner, key, value))
                memo[key] = found
            return found

        try:
            return [value(child) for child in children]
        except OverBudget:
            pass
    return [planner.estimate(child, planner.depth) for child in children]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(positions(), st.data())
def test_the_planners_values_are_the_old_planners(position: Position, data: st.DataObject) -> None:
    faces = position.rules.dice_faces
    board = position.board()
    rolls = data.draw(st.lists(st.tuples(*[st.integers(1, faces)] * 4), min_size=1, max_size=4))
    planner = ExpertStrategy(cache_size=1).planner(position)
    key = pack(as_state(position.runners))
    assert planner.look_ahead(key) == old_look_ahead(planner, key)
    for dice in rolls:
        moves = board.legal_moves(dice, position.runners)
        if moves:
            old = old_move_values(planner, position.runners, moves)
            assert planner.move_values(position.runners, moves) == old
            fresh = ExpertStrategy(cache_size=1).planner(position)  # nothing kept yet
            assert fresh.move_values(position.runners, moves) == old


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(positions(), st.booleans())
def test_the_rolls_offer_by_pairing_what_they_offered_row_by_row(
    position: Position, prune: bool
) -> None:
    faces = position.rules.dice_faces
    planner = TurnPlanner(position.board(), faces, lambda s: 0.0, lambda s: 0.0)
    shape, out = planner.shape(pack(as_state(position.runners)))
    groups = roll_groups(faces, shape, out, prune)
    offset = busts = 0
    for n, pairs in pairings_table(faces):
        row = ((1 << n) - 1) << offset
        options = offered(shape, out, pairs, prune)
        for move, bits in zip(groups.moves, groups.rolls, strict=True):
            assert bits & row in ((0, row) if move not in options else (row,))
        busts += 0 if options else n
        offset += n
    assert groups.busts == busts
    assert all(groups.rolls) and list(groups.moves) == sorted(set(groups.moves))


def test_a_decision_is_the_same_whatever_was_asked_before() -> None:
    """The exact values kept for the turn never change an answer: the decisions of one turn,
    asked in two orders of two planners, agree with each other and with the old search."""
    runners = [0] * 13
    runners[6], runners[7], runners[8] = 1, 2, 1
    markers = [[0] * 13, [0] * 13]
    markers[1][7] = 9
    position = Position.make(Rules(), markers, runners=runners, phase="roll_or_stop")
    board = position.board()
    rolls = [tuple(random.Random(seed).randint(1, 6) for _ in range(4)) for seed in range(40)]
    decisions = [m for dice in rolls if (m := board.legal_moves(dice, runners))]
    one = ExpertStrategy(cache_size=1).planner(position)
    other = ExpertStrategy(cache_size=1).planner(position)
    reference = ExpertStrategy(cache_size=1).planner(position)
    first = [one.move_values(runners, moves) for moves in decisions]
    second = [other.move_values(runners, moves) for moves in reversed(decisions)][::-1]
    old = [old_move_values(reference, runners, moves) for moves in decisions]
    assert first == second == old


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(positions(), st.data())
def test_what_planners_share_from_turn_to_turn_changes_no_value(
    position: Position, data: st.DataObject
) -> None:
    """A player's planners share points' runners and children from turn to turn (``Shared``):
    after a turn at another table (the other players' markers moved, so other spaces to jump
    over), each turn's values are those of a planner that shares nothing."""
    rules, heights = position.rules, position.rules.heights
    markers = [list(m) for m in position.markers]
    for seat, own in enumerate(markers):
        for c in rules.columns:
            if seat != position.seat and position.claimed[c] == UNCLAIMED:
                own[c] = data.draw(st.integers(0, heights[c] - 1))
    other = Position.make(
        rules, markers, seat=position.seat, claimed=position.claimed, runners=position.runners
    )
    faces, runners = rules.dice_faces, position.runners
    rolls = data.draw(st.lists(st.tuples(*[st.integers(1, faces)] * 4), min_size=1, max_size=3))
    expert = ExpertStrategy(cache_size=1)
    for table in (other, position, other):
        shared = expert.planner(table)
        alone = ExpertStrategy(cache_size=1).planner(table)
        assert shared.roll_value(runners) == alone.roll_value(runners)
        for dice in rolls:
            moves = table.board().legal_moves(dice, runners)
            if moves:
                assert shared.move_values(runners, moves) == alone.move_values(runners, moves)
