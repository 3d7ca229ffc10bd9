"""Every worked example of the rulebooks, as data, checked against the rules engine.

Sources (quoted here so the tests never read the rulebooks at run time):
- Parker Brothers 1980 (seed 001): 1-5-4-6; 2-4-3-5 with markers on 6 and 10; 2-4-5-5 with
  markers on 3 and 6; "6, 8 and 10 are already won and you roll 2-4-4-6: you've blown it"; the
  marker moved to the top of column 6 that is lost on a 2-4-5-5 bust; winning a column removes the
  opponents' squares.
- The modern rewrite (seed 000): 3-4-2-6; 2-4-4-6 "could make two moves in column 8".
- CantStop.jl's test vector: runners on 3 and 5, roll 1-2-3-4 → "[3,7], [5,5], [4], [6]".
- The 92% rule of thumb: runners on 6, 7 and 8 bust on 104 of the 1296 rolls.

Where the books and rules-rulings.md differ, the rulings decide (A turn, items 3-7).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from domain.commands import NewGame
from domain.errors import IllegalAction
from domain.game import Game
from domain.moves import UNCLAIMED, Board, bust_probability_table, pairings
from domain.rules import heights
from domain.view import game_state

HEIGHTS = heights(6)
N_INDEXES = len(HEIGHTS)  # 13: indexes 0 and 1 are unused


def by_column(positions: Mapping[int, int]) -> list[int]:
    """A list indexed by column number from a {column: space} map."""
    out = [0] * N_INDEXES
    for column, at in positions.items():
        out[column] = at
    return out


def make_board(
    *, own: Mapping[int, int] | None = None, claimed: Sequence[int] = (), steep_hill: bool = False
) -> Board:
    owners = [UNCLAIMED] * N_INDEXES
    for column in claimed:
        owners[column] = 1  # claimed by an opponent; the rulings close it for everybody anyway
    return Board(HEIGHTS, owners, by_column(own or {}), steep_hill)


def as_map(runners: Sequence[int]) -> dict[int, int]:
    return {column: at for column, at in enumerate(runners) if at}


# ------------------------------------------------------------------------------------ pairings
@pytest.mark.parametrize(
    ("dice", "expected"),
    [
        pytest.param((1, 5, 4, 6), {(6, 10), (5, 11), (7, 9)}, id="parker-1-5-4-6"),
        pytest.param((3, 4, 2, 6), {(7, 8), (5, 10), (6, 9)}, id="modern-3-4-2-6"),
        pytest.param((2, 4, 4, 6), {(6, 10), (8, 8)}, id="modern-2-4-4-6-doubles"),
        pytest.param((1, 2, 3, 4), {(3, 7), (4, 6), (5, 5)}, id="cantstop-jl-1-2-3-4"),
    ],
)
def test_pairings_are_the_three_ways_to_split_the_dice(
    dice: tuple[int, int, int, int], expected: set[tuple[int, int]]
) -> None:
    split = pairings(dice)
    assert len(split) == 3
    assert {tuple(sorted(pair)) for pair in split} == expected


# --------------------------------------------------------------------------------- legal moves
@dataclass(frozen=True)
class Example:
    source: str
    dice: tuple[int, int, int, int]
    runners: Mapping[int, int]
    expected: list[tuple[int, ...]]
    claimed: tuple[int, ...] = ()
    own: Mapping[int, int] = field(default_factory=dict)


EXAMPLES = [
    Example(
        "Parker 1-5-4-6 on an empty board: 6 and 10, 5 and 11, 9 and 7",
        (1, 5, 4, 6),
        {},
        [(5, 11), (6, 10), (7, 9)],
    ),
    Example(
        "Parker 2-4-3-5 with runners on 6 and 10: 6 and 8 both; 5 or 9 but not both; 7 twice",
        (2, 4, 3, 5),
        {6: 1, 10: 1},
        [(5,), (6, 8), (7, 7), (9,)],
    ),
    Example(
        "Parker 2-4-5-5 with runners on 3 and 6: 6 with 10, else 7 or 9 alone; never 6 alone",
        (2, 4, 5, 5),
        {3: 1, 6: 1},
        [(6, 10), (7,), (9,)],
    ),
    Example(
        "Parker: 6, 8 and 10 won and 2-4-4-6 blows it, runners to place or not",
        (2, 4, 4, 6),
        {},
        [],
        claimed=(6, 8, 10),
    ),
    Example(
        "Parker: runner at the top of 6, runners on 3 and 8, 2-4-5-5 blows it",
        (2, 4, 5, 5),
        {3: 1, 6: HEIGHTS[6], 8: 1},
        [],
    ),
    Example(
        "CantStop.jl: runners on 3 and 5, roll 1-2-3-4 gives [3,7], [5,5], [4], [6]",
        (1, 2, 3, 4),
        {3: 1, 5: 1},
        [(3, 7), (4,), (5, 5), (6,)],
    ),
    Example(
        "modern 3-4-2-6 on an empty board: 7 and 8, 5 and 10, 9 and 6",
        (3, 4, 2, 6),
        {},
        [(5, 10), (6, 9), (7, 8)],
    ),
    Example(
        "modern 2-4-4-6: column 8 twice (4+4 and 2+6), or 6 and 10",
        (2, 4, 4, 6),
        {},
        [(6, 10), (8, 8)],
    ),
    Example(
        "ruling 4: 7 and 7 with one space left under the top plays 7 once",
        (3, 4, 3, 4),
        {7: HEIGHTS[7] - 1, 6: 1, 8: 1},
        [(6, 8), (7,)],
    ),
    Example(
        "ruling 3: a claimed column is not playable, so the other sum is played alone",
        (1, 1, 1, 6),
        {},
        [(7,)],
        claimed=(2,),
    ),
]


@pytest.mark.parametrize(
    "example",
    [pytest.param(e, id=e.source) for e in EXAMPLES],
)
def test_legal_moves_of_the_rulebook_examples(example: Example) -> None:
    board = make_board(own=example.own, claimed=example.claimed)
    assert board.legal_moves(example.dice, by_column(example.runners)) == example.expected


@pytest.mark.parametrize(
    ("dice", "runners", "sums", "after"),
    [
        pytest.param(
            (1, 5, 4, 6), {}, (6, 10), {6: 1, 10: 1}, id="parker-first-markers-on-the-bottom"
        ),
        pytest.param(
            (2, 4, 3, 5),
            {6: 1, 10: 1},
            (6, 8),
            {6: 2, 8: 1, 10: 1},
            id="parker-6-and-8-moves-6-up-and-places-the-third-on-8",
        ),
        pytest.param(
            (2, 4, 3, 5),
            {6: 1, 10: 1},
            (7, 7),
            {6: 1, 7: 2, 10: 1},
            id="parker-7-and-7-places-the-third-two-spaces-up",
        ),
        pytest.param(
            (2, 4, 3, 5),
            {6: 1, 10: 1},
            (9,),
            {6: 1, 9: 1, 10: 1},
            id="parker-5-and-9-places-the-third-in-one-of-them",
        ),
        pytest.param((2, 4, 4, 6), {}, (8, 8), {8: 2}, id="modern-8-twice-climbs-two-spaces"),
    ],
)
def test_playing_a_rulebook_move_places_and_advances_runners(
    dice: tuple[int, int, int, int],
    runners: Mapping[int, int],
    sums: tuple[int, ...],
    after: Mapping[int, int],
) -> None:
    board = make_board()
    assert sums in board.legal_moves(dice, by_column(runners))
    assert as_map(board.play(sums, by_column(runners))) == after


def test_runner_is_placed_one_space_above_the_players_own_marker() -> None:
    board = make_board(own={7: 4})
    assert as_map(board.play((7, 8), by_column({}))) == {7: 5, 8: 1}


def test_the_three_runners_climb_no_higher_than_the_top() -> None:
    top = HEIGHTS[2]
    board = make_board()
    assert board.legal_moves((1, 1, 1, 1), by_column({2: top - 1})) == [(2,)]
    assert as_map(board.play((2,), by_column({2: top - 1}))) == {2: top}
    assert board.legal_moves((1, 1, 1, 1), by_column({2: top})) == []


# ------------------------------------------------------------------------ bust probability
def test_runners_on_6_7_8_bust_on_exactly_104_of_1296_rolls() -> None:
    runners = by_column({6: 1, 7: 1, 8: 1})
    counted = sum(
        1
        for roll in itertools.product(range(1, 7), repeat=4)
        if not any({a, b} & {6, 7, 8} for a, b in pairings(roll))
    )
    assert counted == 104
    assert bust_probability_table(make_board(), runners) == (104, 1296)


# ----------------------------------------------------------------- through the Game aggregate
def new_game() -> Game:
    return Game.start(uuid.uuid4(), NewGame(players=["Ann", "Bob"], dice="manual", first_player=0))


def move_sums(game: Game) -> list[list[int]]:
    return [a["sums"] for a in game_state(game)["legal_actions"] if a["type"] == "move"]


def climb_to_top(game: Game, seat: int, column: int) -> None:
    """Roll [a, b, a, b] (a + b = column) and play the column twice, or once near the top."""
    low = max(1, column - 6)
    dice = [low, column - low, low, column - low]
    while game_state(game)["turn"]["runners"].get(str(column), 0) < HEIGHTS[column]:
        game.roll(seat, dice=dice)
        game.move(seat, [column, column] if [column, column] in move_sums(game) else [column])


def test_parker_2_4_5_5_offers_a_single_sum_besides_the_pair_and_refuses_6_alone() -> None:
    game = new_game()
    game.roll(0, dice=[1, 2, 3, 3])
    game.move(0, [3, 6])
    game.roll(0, dice=[2, 4, 5, 5])
    assert move_sums(game) == [[6, 10], [7], [9]]
    for alone in ([6], [10]):
        before = len(game.pending_events)
        with pytest.raises(IllegalAction) as refused:
            game.move(0, alone)
        assert refused.value.code == "illegal_action"
        assert len(game.pending_events) == before
    game.move(0, [7])
    assert game_state(game)["turn"]["runners"] == {"3": 1, "6": 1, "7": 1}


def test_sums_sent_in_any_order_are_the_same_move() -> None:
    game = new_game()
    game.roll(0, dice=[1, 5, 4, 6])
    game.move(0, [10, 6])
    moved: Any = game.pending_events[-1]
    assert (type(moved).__name__, moved.sums) == ("MovePlayed", [6, 10])
    assert game_state(game)["turn"]["runners"] == {"6": 1, "10": 1}


def runner_on_top_of_6_with_runners_on_3_and_8(game: Game) -> None:
    game.roll(0, dice=[1, 2, 3, 3])  # 3 and 6
    game.move(0, [3, 6])
    climb_to_top(game, 0, 6)
    game.roll(0, dice=[4, 4, 1, 1])  # 8 and 2: only one runner left, so 8 alone
    game.move(0, [8])
    assert game_state(game)["turn"]["runners"] == {"3": 1, "6": HEIGHTS[6], "8": 1}


def test_parker_runner_on_top_then_bust_claims_nothing() -> None:
    game = new_game()
    runner_on_top_of_6_with_runners_on_3_and_8(game)
    game.roll(0, dice=[2, 4, 5, 5])
    assert type(game.pending_events[-1]).__name__ == "TurnBusted"
    state = game_state(game)
    assert state["columns"][6 - 2]["claimed_by"] is None
    assert state["players"][0]["markers"] == {}
    assert state["players"][0]["claimed"] == []
    assert state["turn"]["player"] == 1
    assert state["turn"]["runners"] == {}


def test_parker_stopping_with_the_runner_on_top_claims_the_column() -> None:
    game = new_game()
    runner_on_top_of_6_with_runners_on_3_and_8(game)
    game.stop(0)
    state = game_state(game)
    assert state["columns"][6 - 2]["claimed_by"] == 0
    assert state["players"][0]["claimed"] == [6]
    assert state["players"][0]["markers"] == {"3": 1, "6": HEIGHTS[6], "8": 1}


def test_stop_on_the_top_space_claims_the_column_and_removes_opponents_markers_in_it() -> None:
    game = new_game()
    game.roll(0, dice=[3, 4, 3, 4])
    game.move(0, [6, 8])
    game.stop(0)
    game.roll(1, dice=[1, 1, 3, 4])  # 2 and 7
    game.move(1, [2, 7])
    game.stop(1)
    assert game_state(game)["players"][1]["markers"] == {"2": 1, "7": 1}

    climb_to_top(game, 0, 2)
    game.stop(0)

    state = game_state(game)
    assert state["columns"][0]["claimed_by"] == 0
    assert state["players"][0]["markers"] == {"2": HEIGHTS[2], "6": 1, "8": 1}
    assert state["players"][1]["markers"] == {"7": 1}  # column 7 kept, column 2 removed


def test_claimed_column_busts_its_claimant_and_the_opponents_alike() -> None:
    game = new_game()
    climb_to_top(game, 0, 2)
    game.stop(0)
    game.roll(1, dice=[1, 1, 1, 1])  # only 2 and 2: closed
    assert type(game.pending_events[-1]).__name__ == "TurnBusted"
    game.roll(0, dice=[1, 1, 1, 1])
    assert type(game.pending_events[-1]).__name__ == "TurnBusted"
    assert game_state(game)["turn"]["player"] == 1
