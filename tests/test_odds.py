"""Exact bust odds (domain/odds.py) against exhaustive enumeration with the legal-move generator."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.moves import UNCLAIMED, Board, bust_probability_table
from domain.odds import (
    bust_chance,
    bust_chance_after,
    bust_chance_of,
    distinct_rolls,
    playable_mask,
    roll_masks,
    sums_mask,
)
from domain.position import Position
from domain.rules import Rules
from tests.support.positions import positions


def runners_on(columns: list[int], faces: int = 6) -> list[int]:
    runners = [0] * (2 * faces + 1)
    for c in columns:
        runners[c] = 1
    return runners


def fresh(faces: int = 6, runners: list[int] | None = None) -> Position:
    rules = Rules(dice_faces=faces)
    return Position.make(rules, [[0] * (2 * faces + 1)] * 2, runners=runners, phase="roll_or_stop")


def test_runners_on_6_7_8_of_an_empty_board_bust_in_104_of_1296_rolls() -> None:
    position = fresh(runners=runners_on([6, 7, 8]))
    assert Fraction(bust_chance(position)).limit_denominator(1296) == Fraction(104, 1296)
    assert bust_probability_table(position.board(), position.runners) == (104, 1296)


@pytest.mark.parametrize("faces", [6, 8])
def test_a_fresh_board_never_busts_with_fewer_than_three_runners(faces: int) -> None:
    assert bust_chance(fresh(faces)) == 0.0
    assert bust_chance(fresh(faces, runners_on([2, 3], faces))) == 0.0


def test_outer_columns_bust_more_often_than_middle_ones() -> None:
    middle = bust_chance(fresh(runners=runners_on([6, 7, 8])))
    edges = bust_chance(fresh(runners=runners_on([2, 3, 12])))
    assert edges > 0.5 > middle


@pytest.mark.parametrize("faces", [6, 8])
def test_the_roll_tables_count_every_ordered_roll(faces: int) -> None:
    assert sum(n for _, n in distinct_rolls(faces)) == faces**4
    assert sum(n for _, n in roll_masks(faces)) == faces**4
    assert len(distinct_rolls(faces)) == {6: 126, 8: 330}[faces]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(positions(), st.data())
def test_a_roll_busts_exactly_when_none_of_its_sums_is_playable_first(
    position: Position, data: st.DataObject
) -> None:
    """The claim the odds rest on, against the legal-move generator itself: 3 runners, topped
    runners, claimed columns, jumping and steep hill included."""
    faces = position.rules.dice_faces
    dice = data.draw(st.tuples(*[st.integers(1, faces)] * 4))
    board = position.board()
    has_move = bool(board.legal_moves(dice, position.runners))
    assert has_move == bool(sums_mask(dice) & playable_mask(board, position.runners))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(positions(faces=6))
def test_bust_chance_is_the_exact_enumeration_with_six_faces(position: Position) -> None:
    busts, total = bust_probability_table(position.board(), position.runners, 6)
    assert bust_chance(position) == busts / total


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(positions(faces=8))
def test_bust_chance_is_the_exact_enumeration_with_eight_faces(position: Position) -> None:
    busts, total = bust_probability_table(position.board(), position.runners, 8)
    assert total == 8**4
    assert bust_chance(position) == busts / total


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(positions(faces=6, phase="move"))
def test_bust_chance_after_a_move_is_the_enumeration_after_playing_it(position: Position) -> None:
    if position.phase != "move":  # the drawn dice busted: no move to play
        return
    board = position.board()
    for move in position.moves:
        after = board.play(move, position.runners)
        busts, total = bust_probability_table(board, after, 6)
        assert bust_chance_after(position, move) == busts / total
        assert bust_chance_after(position, tuple(reversed(move))) == busts / total


def test_bust_chance_after_refuses_a_move_that_is_not_legal() -> None:
    position = Position.make(Rules(), [[0] * 13], phase="move", dice=(1, 1, 1, 1))
    assert position.moves == ((2, 2),)
    with pytest.raises(ValueError, match="not a legal move"):
        bust_chance_after(position, (7,))


def test_a_topped_runner_leaves_its_column_unplayable() -> None:
    heights = Rules().heights
    runners = runners_on([6, 8])
    runners[7] = heights[7]
    board = Board(heights, [UNCLAIMED] * 13, [0] * 13)
    # 7 topped: only 6 and 8 are playable, and no new runner can be placed
    assert playable_mask(board, runners) == (1 << 6) | (1 << 8)
    busts, total = bust_probability_table(board, runners)
    assert bust_chance_of(board, runners, 6) == busts / total == 228 / 1296
