"""Variants, solitaire, resigning, the opening roll and refusals, through the Game aggregate.

Manual dice throughout (server dice only for the opening roll), so every position is scripted. The
authority is rules-rulings.md; the comments name the ruling each test checks.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from domain.audit import audit_records
from domain.commands import NewGame
from domain.errors import (
    DomainError,
    GameOver,
    IllegalAction,
    InvalidDice,
    InvalidRequest,
    NotYourTurn,
)
from domain.game import Game, event_records
from domain.moves import UNCLAIMED, Board
from domain.record_sheet import record_sheet
from domain.rules import heights
from domain.view import game_state
from service.render.sheet import render_text

ROLL = {"type": "roll"}
STOP = {"type": "stop"}


# ------------------------------------------------------------------------------------ helpers
def new_game(
    players: Sequence[str] = ("Ann", "Bob"), *, first_player: int = 0, **rules: Any
) -> Game:
    return Game.start(
        uuid.uuid4(),
        NewGame(players=list(players), rules=rules, dice="manual", first_player=first_player),
    )


def runners(game: Game) -> dict[int, int]:
    turn = game_state(game)["turn"]
    return {int(c): at for c, at in turn["runners"].items()} if turn else {}


def markers(game: Game, seat: int) -> dict[int, int]:
    return {int(c): at for c, at in game_state(game)["players"][seat]["markers"].items()}


def claimed_by(game: Game, column: int) -> int | None:
    owners: dict[int, int | None] = {
        c["column"]: c["claimed_by"] for c in game_state(game)["columns"]
    }
    return owners[column]


def move_sums(game: Game) -> list[list[int]]:
    return [a["sums"] for a in game_state(game)["legal_actions"] if a["type"] == "move"]


def last_event(game: Game) -> Any:
    return game.pending_events[-1]


def last_type(game: Game) -> str:
    return type(last_event(game)).__name__


def roll_move(game: Game, seat: int, dice: list[int], sums: list[int]) -> None:
    game.roll(seat, dice=dice)
    game.move(seat, sums)


def climb_to_top(game: Game, seat: int, column: int) -> None:
    """Roll [a, b, a, b] with a + b = column and play it twice (once just under the top)."""
    faces = game.rules["dice_faces"]
    top = heights(faces)[column]
    low = max(1, column - faces)
    dice = [low, column - low, low, column - low]
    while runners(game).get(column, 0) < top:
        game.roll(seat, dice=dice)
        game.move(seat, [column, column] if [column, column] in move_sums(game) else [column])


def claim(game: Game, seat: int, *columns: int) -> None:
    """One turn: climb up to three columns to the top, then stop."""
    for column in columns:
        climb_to_top(game, seat, column)
    game.stop(seat)


def pass_turn(game: Game, seat: int) -> None:
    """A dull turn: roll 3-4-3-4 (6 and 8, or 7 twice), play the first option and stop."""
    game.roll(seat, dice=[3, 4, 3, 4])
    if game_state(game)["turn"]["phase"] == "move":
        game.move(seat, move_sums(game)[0])
        game.stop(seat)


def bust_turn(game: Game, seat: int) -> None:
    """Runners on 2, 3 and 12, then 3-4-3-4 (only 7 and 7, 6 and 8): a bust."""
    roll_move(game, seat, [1, 1, 1, 2], [2, 3])
    roll_move(game, seat, [6, 6, 6, 6], [12, 12])
    game.roll(seat, dice=[3, 4, 3, 4])
    assert last_type(game) == "TurnBusted"


def refused(
    game: Game,
    error: type[DomainError],
    code: str,
    command: Callable[..., Any],
    *args: Any,
    **kwargs: Any,
) -> DomainError:
    """The command is refused with ``error``/``code`` and records nothing."""
    events, state = len(game.pending_events), game_state(game)
    with pytest.raises(error) as info:
        command(*args, **kwargs)
    assert info.value.code == code
    assert len(game.pending_events) == events
    assert game_state(game) == state
    return info.value


# ----------------------------------------------------------------------------- columns_to_win
@pytest.mark.parametrize(
    ("rules", "finished"),
    [
        pytest.param({"columns_to_win": 1}, True, id="columns_to_win-1-first-claim-wins"),
        pytest.param({}, False, id="default-3-first-claim-does-not-win"),
    ],
)
def test_columns_to_win_decides_when_a_claim_wins(rules: dict[str, Any], finished: bool) -> None:
    game = new_game(**rules)
    claim(game, 0, 2)
    state = game_state(game)
    assert state["status"] == ("finished" if finished else "in_progress")
    assert state["winner"] == (0 if finished else None)


@pytest.mark.parametrize(
    ("players", "to_win"),
    [
        pytest.param(2, 5, id="2-players-play-to-5"),
        pytest.param(3, 4, id="3-players-play-to-4"),
        pytest.param(4, 3, id="4-players-play-to-3"),
        pytest.param(5, 3, id="5-players-play-to-3"),
    ],
)
def test_columns_plus_resolves_by_the_number_of_players(players: int, to_win: int) -> None:
    game = new_game([f"P{i}" for i in range(players)], columns_to_win="by_players")
    assert game_state(game)["rules"]["columns_to_win"] == to_win


def test_columns_plus_two_players_win_with_the_fifth_claimed_column() -> None:
    game = new_game(columns_to_win="by_players")
    claim(game, 0, 2, 3, 12)
    pass_turn(game, 1)
    claim(game, 0, 11)
    assert game_state(game)["status"] == "in_progress"
    assert game_state(game)["players"][0]["claimed"] == [2, 3, 11, 12]
    pass_turn(game, 1)
    claim(game, 0, 4)
    state = game_state(game)
    assert (state["status"], state["winner"], state["finish_reason"]) == ("finished", 0, "columns")


def test_play_goes_on_when_nobody_can_reach_the_columns_to_win_any_more() -> None:
    """Rule 10 alone ends a game by columns: two players to 7, split 5 to 5 with one column
    left, can neither of them win, yet the game goes on (every roll then busts) until a
    resignation leaves one player, who wins (Resigning)."""
    game = new_game(columns_to_win=7)
    for ann, bob in zip((2, 4, 6, 8, 10), (3, 5, 7, 9, 11), strict=True):
        assert game.can_still_win(0) and game.can_still_win(1)
        claim(game, 0, ann)
        claim(game, 1, bob)
    assert not game.can_still_win(0) and not game.can_still_win(1)
    assert game_state(game)["status"] == "in_progress"
    game.roll(0, dice=[6, 6, 6, 6])  # 12: the one column left, open to both
    game.move(0, [12, 12])
    game.stop(0)
    game.roll(1, dice=[1, 1, 1, 1])  # 2 is Ann's: nothing to play
    assert last_type(game) == "TurnBusted"
    game.resign(0)
    state = game_state(game)
    assert (state["status"], state["winner"], state["finish_reason"]) == (
        "finished",
        1,
        "last_player",
    )
    records = json.loads(json.dumps(event_records(game.collect_events())))
    assert audit_records(records)["valid"] is True
    assert render_text(record_sheet(records, 1)).endswith("Winner: Bob\n")


@pytest.mark.parametrize(
    ("faces", "value"),
    [
        pytest.param(6, 0, id="zero"),
        pytest.param(6, -1, id="negative"),
        pytest.param(6, 12, id="more-than-11-columns"),
        pytest.param(8, 16, id="more-than-15-columns-on-d8"),
        pytest.param(6, True, id="bool"),
        pytest.param(6, "3", id="string-number"),
        pytest.param(6, 2.0, id="float"),
        pytest.param(6, "all", id="unknown-word"),
    ],
)
def test_columns_to_win_out_of_range_is_a_bad_request(faces: int, value: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        new_game(columns_to_win=value, dice_faces=faces)
    assert info.value.code == "invalid_request"


@pytest.mark.parametrize(
    ("faces", "value"),
    [
        pytest.param(6, 1, id="one"),
        pytest.param(6, 11, id="all-11-columns"),
        pytest.param(8, 15, id="all-15-columns-on-d8"),
    ],
)
def test_columns_to_win_within_range_is_accepted(faces: int, value: int) -> None:
    assert game_state(new_game(columns_to_win=value, dice_faces=faces))["rules"][
        "columns_to_win"
    ] == (value)


# ------------------------------------------------------------------------------------ jumping
@pytest.mark.parametrize(
    ("jumping", "cy_markers", "ann_after_placing", "ann_after_advancing"),
    [
        pytest.param(
            True,
            {2: 1, 6: 3, 7: 2},
            {6: 1, 7: 3},
            {4: 2, 6: 4, 7: 3},
            id="jumping-skips-every-occupied-space",
        ),
        pytest.param(
            False,
            {2: 1, 6: 2, 7: 1},
            {6: 1, 7: 1},
            {4: 1, 6: 2, 7: 1},
            id="without-jumping-runners-share-spaces",
        ),
    ],
)
def test_jumping_lands_past_other_players_markers(
    jumping: bool,
    cy_markers: dict[int, int],
    ann_after_placing: dict[int, int],
    ann_after_advancing: dict[int, int],
) -> None:
    game = new_game(["Ann", "Bob", "Cy"], first_player=1, jumping=jumping)
    roll_move(game, 1, [3, 3, 3, 4], [6, 7])
    roll_move(game, 1, [1, 5, 2, 2], [4, 6])
    game.stop(1)
    assert markers(game, 1) == {4: 1, 6: 2, 7: 1}

    roll_move(game, 2, [3, 3, 3, 4], [6, 7])
    roll_move(game, 2, [1, 5, 1, 1], [2, 6])
    game.stop(2)
    assert markers(game, 2) == cy_markers

    roll_move(game, 0, [3, 3, 3, 4], [6, 7])  # placing: 7 lands past Bob's 1 and Cy's 2
    assert runners(game) == ann_after_placing
    roll_move(game, 0, [1, 5, 2, 2], [4, 6])  # advancing 6 past 2 and 3; placing 4 past Bob's 1
    assert runners(game) == ann_after_advancing
    game.stop(0)
    assert markers(game, 0) == ann_after_advancing


def test_jumping_never_passes_the_top_space() -> None:
    game = new_game(jumping=True)
    roll_move(game, 0, [1, 1, 1, 1], [2, 2])
    game.stop(0)
    roll_move(game, 1, [1, 1, 1, 1], [2, 2])  # Bob lands on 1 and jumps Ann's 2 to the top
    assert runners(game) == {2: 3}
    assert game_state(game)["legal_actions"] == [ROLL, STOP]
    game.roll(1, dice=[1, 1, 1, 1])
    assert last_type(game) == "TurnBusted"


# -------------------------------------------------------------------------------- forced_move
def bob_on_2_and_7_then_ann_on_the_same_spaces(game: Game) -> None:
    roll_move(game, 1, [3, 4, 1, 1], [2, 7])
    game.stop(1)
    roll_move(game, 0, [3, 4, 1, 1], [2, 7])
    assert runners(game) == markers(game, 1) == {2: 1, 7: 1}


def test_forced_move_refuses_stop_while_a_runner_shares_a_space_with_an_opponent() -> None:
    game = new_game(first_player=1, forced_move=True)
    bob_on_2_and_7_then_ann_on_the_same_spaces(game)
    assert game_state(game)["legal_actions"] == [ROLL]
    refused(game, IllegalAction, "illegal_action", game.stop, 0)

    roll_move(game, 0, [3, 4, 3, 4], [7, 7])  # 7 is clear, 2 still shares Bob's space
    assert runners(game) == {2: 1, 7: 3}
    assert game_state(game)["legal_actions"] == [ROLL]
    refused(game, IllegalAction, "illegal_action", game.stop, 0)

    roll_move(game, 0, [1, 1, 1, 1], [2, 2])  # 2 reaches the top: nothing shared any more
    assert game_state(game)["legal_actions"] == [ROLL, STOP]
    game.stop(0)
    assert claimed_by(game, 2) == 0
    assert markers(game, 1) == {7: 1}


def test_without_forced_move_a_runner_may_stop_on_an_opponents_marker() -> None:
    game = new_game(first_player=1)
    bob_on_2_and_7_then_ann_on_the_same_spaces(game)
    assert game_state(game)["legal_actions"] == [ROLL, STOP]
    game.stop(0)
    assert markers(game, 0) == {2: 1, 7: 1}


def test_forced_move_bust_loses_the_whole_turn() -> None:
    game = new_game(first_player=1, forced_move=True)
    bob_on_2_and_7_then_ann_on_the_same_spaces(game)
    roll_move(game, 0, [6, 6, 6, 6], [12, 12])
    game.roll(0, dice=[3, 4, 3, 4])  # 7 twice or 6 and 8: runner on 7 climbs, so not a bust
    game.move(0, [7, 7])
    game.roll(0, dice=[4, 4, 4, 4])  # only 8 and 8: three runners, none on 8
    assert last_type(game) == "TurnBusted"
    assert markers(game, 0) == {}
    assert game_state(game)["turn"]["player"] == 1


def test_steep_hill_landing_on_the_own_marker_still_jumps_an_opponents_marker_there() -> None:
    # In play, jumping keeps markers from ever sharing a space, so the board is set up directly.
    top = heights(6)
    own = [0] * len(top)
    own[7] = 2
    blocked: list[set[int]] = [set() for _ in top]
    blocked[7] = {2, 3}
    board = Board(top, [UNCLAIMED] * len(top), own, steep_hill=True, blocked=blocked)
    assert board.play((7,), [0] * len(top))[7] == 4


def test_jumping_together_with_forced_move_is_a_bad_request() -> None:
    with pytest.raises(InvalidRequest) as info:
        new_game(jumping=True, forced_move=True)
    assert info.value.code == "invalid_request"
    with pytest.raises(InvalidRequest):
        Game.start(
            uuid.uuid4(),
            NewGame(seats=3, rules={"jumping": True, "forced_move": True}, dice="manual"),
        )


# --------------------------------------------------------------------------------- steep_hill
@pytest.mark.parametrize(
    ("steep_hill", "placed", "progress"),
    [
        pytest.param(True, {6: 1, 7: 2}, {"6": 1}, id="steep-hill-starts-on-the-marker"),
        pytest.param(False, {6: 1, 7: 3}, {"6": 1, "7": 1}, id="standard-starts-above-the-marker"),
    ],
)
def test_steep_hill_places_the_runner_on_the_players_own_marker(
    steep_hill: bool, placed: dict[int, int], progress: dict[str, int]
) -> None:
    game = new_game(steep_hill=steep_hill)
    roll_move(game, 0, [3, 4, 3, 4], [7, 7])
    game.stop(0)
    assert markers(game, 0) == {7: 2}
    pass_turn(game, 1)

    roll_move(game, 0, [3, 4, 1, 5], [6, 7])  # 7 has Ann's marker on 2, 6 has none: bottom
    assert runners(game) == placed
    game.stop(0)
    assert last_event(game).progress == progress
    assert markers(game, 0) == placed


# --------------------------------------------------------------------------------- dice_faces
def test_eight_faced_dice_give_columns_2_to_16_of_heights_3_to_17() -> None:
    game = new_game(dice_faces=8)
    columns = game_state(game)["columns"]
    assert [c["column"] for c in columns] == list(range(2, 17))
    assert [c["height"] for c in columns] == [3, 5, 7, 9, 11, 13, 15, 17, 15, 13, 11, 9, 7, 5, 3]


def test_eight_faced_dice_accept_7_and_8_and_reach_column_16() -> None:
    game = new_game(dice_faces=8)
    game.roll(0, dice=[8, 8, 7, 7])
    assert move_sums(game) == [[14, 16], [15, 15]]
    game.move(0, [16, 14])
    assert runners(game) == {14: 1, 16: 1}


@pytest.mark.parametrize(
    "rules",
    [pytest.param({"dice_faces": 10}, id="ten"), pytest.param({"dice_faces": True}, id="bool")],
)
def test_dice_faces_other_than_6_or_8_are_a_bad_request(rules: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        new_game(**rules)


# ---------------------------------------------------------------------------------- solitaire
def solo(mode: str | None = None, **rules: Any) -> Game:
    if mode is not None:
        rules["solitaire"] = mode
    return new_game(["Sol"], **rules)


@pytest.mark.parametrize(
    ("mode", "resolved", "target"),
    [
        pytest.param(None, "easy", 30, id="default-easy"),
        pytest.param("easy", "easy", 30, id="easy"),
        pytest.param("advanced", "advanced", 40, id="advanced"),
    ],
)
def test_solitaire_plays_to_every_column_with_its_target(
    mode: str | None, resolved: str, target: int
) -> None:
    state = game_state(solo(mode))
    assert state["rules"]["solitaire"] == resolved
    assert state["rules"]["columns_to_win"] == 11
    solitaire = {key: state["solitaire"][key] for key in ("turns", "target", "rating")}
    assert solitaire == {"turns": 0, "target": target, "rating": None}


def test_solitaire_columns_to_win_cannot_be_set() -> None:
    with pytest.raises(InvalidRequest):
        solo(columns_to_win=3)
    with pytest.raises(InvalidRequest):
        new_game(solitaire="easy")  # two players


@pytest.mark.parametrize("mode", ["easy", "advanced"])
def test_solitaire_counts_every_turn_stops_and_busts_alike(mode: str) -> None:
    game = solo(mode)
    roll_move(game, 0, [3, 4, 3, 4], [7, 7])
    game.stop(0)
    assert game_state(game)["solitaire"]["turns"] == 1
    bust_turn(game, 0)
    state = game_state(game)
    assert state["solitaire"]["turns"] == 2
    assert state["turn"]["player"] == 0
    assert state["turn"]["number"] == 3
    assert state["legal_actions"] == [ROLL]


@pytest.mark.parametrize(
    ("mode", "after_bust", "wiped"),
    [
        pytest.param("advanced", {9: 2}, [4, 5], id="advanced-wipes-4-and-5"),
        pytest.param("easy", {4: 1, 5: 1, 9: 2}, [], id="easy-keeps-every-marker"),
    ],
)
def test_advanced_solitaire_bust_wipes_markers_in_columns_holding_a_runner(
    mode: str, after_bust: dict[int, int], wiped: list[int]
) -> None:
    game = solo(mode)
    roll_move(game, 0, [1, 3, 1, 4], [4, 5])
    roll_move(game, 0, [4, 5, 4, 5], [9, 9])
    game.stop(0)
    assert markers(game, 0) == {4: 1, 5: 1, 9: 2}

    roll_move(game, 0, [1, 3, 1, 4], [4, 5])  # runners over the markers in 4 and 5
    roll_move(game, 0, [5, 5, 5, 5], [10, 10])  # a runner in 10, where there is no marker
    game.roll(0, dice=[6, 6, 6, 6])
    assert last_type(game) == "TurnBusted"
    assert last_event(game).wiped == wiped
    assert markers(game, 0) == after_bust


ALL_COLUMNS_IN_FOUR_TURNS = ((2, 3, 4), (5, 6, 7), (8, 9, 10), (11, 12))


def play_solitaire_in(game: Game, turns: int) -> None:
    """Bust until four turns are left, then claim every column in those four."""
    for _ in range(turns - len(ALL_COLUMNS_IN_FOUR_TURNS)):
        bust_turn(game, 0)
    for columns in ALL_COLUMNS_IN_FOUR_TURNS:
        claim(game, 0, *columns)


@pytest.mark.parametrize(
    ("mode", "turns", "rating"),
    [
        pytest.param("easy", 30, "Target met", id="easy-30-target-met"),
        pytest.param("easy", 31, "Try again", id="easy-31-try-again"),
        pytest.param("advanced", 30, "Outstanding", id="advanced-30-outstanding"),
        pytest.param("advanced", 31, "Excellent", id="advanced-31-excellent"),
        pytest.param("advanced", 35, "Excellent", id="advanced-35-excellent"),
        pytest.param("advanced", 36, "Very Good", id="advanced-36-very-good"),
        pytest.param("advanced", 40, "Very Good", id="advanced-40-very-good"),
        pytest.param("advanced", 41, "Try again", id="advanced-41-try-again"),
    ],
)
def test_solitaire_rating_at_the_thresholds(mode: str, turns: int, rating: str) -> None:
    game = solo(mode)
    play_solitaire_in(game, turns)
    state = game_state(game)
    assert state["status"] == "finished"
    assert state["solitaire"]["turns"] == turns
    assert state["solitaire"]["rating"] == rating
    finished = last_event(game)
    assert (type(finished).__name__, finished.turns, finished.rating) == (
        "GameFinished",
        turns,
        rating,
    )


def test_solitaire_finishes_when_the_last_column_is_claimed() -> None:
    game = solo("easy")
    for columns in ALL_COLUMNS_IN_FOUR_TURNS[:-1]:
        claim(game, 0, *columns)
    claim(game, 0, 11)
    state = game_state(game)
    assert state["status"] == "in_progress"
    assert len(state["players"][0]["claimed"]) == 10
    claim(game, 0, 12)
    state = game_state(game)
    assert (state["status"], state["winner"], state["finish_reason"]) == ("finished", 0, "columns")
    assert state["legal_actions"] == []
    assert state["turn"] is None


# --------------------------------------------------------------------------------- resigning
def ann_claims_2_and_keeps_a_marker_on_7(game: Game) -> None:
    roll_move(game, 0, [1, 1, 3, 4], [2, 7])
    climb_to_top(game, 0, 2)
    game.stop(0)
    assert markers(game, 0) == {2: 3, 7: 1}


def test_resigning_removes_markers_except_in_claimed_columns() -> None:
    game = new_game(["Ann", "Bob", "Cy"])
    ann_claims_2_and_keeps_a_marker_on_7(game)
    roll_move(game, 1, [3, 4, 3, 4], [6, 8])
    game.resign(0)  # not Ann's turn
    state = game_state(game)
    assert state["players"][0]["resigned"] is True
    assert markers(game, 0) == {2: 3}
    assert state["players"][0]["claimed"] == [2]
    assert claimed_by(game, 2) == 0
    # Bob's turn goes on, runners and all
    assert state["status"] == "in_progress"
    assert (state["turn"]["player"], state["turn"]["number"]) == (1, 2)
    assert state["turn"]["phase"] == "roll_or_stop"
    assert runners(game) == {6: 1, 8: 1}


def test_resigning_on_ones_own_turn_removes_the_runners_and_passes_the_turn() -> None:
    game = new_game(["Ann", "Bob", "Cy"])
    roll_move(game, 0, [3, 4, 3, 4], [6, 8])
    game.resign(0)
    state = game_state(game)
    assert state["turn"] == {
        "number": 2,
        "player": 1,
        "phase": "roll",
        "dice": None,
        "runners": {},
        "deadline": None,
    }
    assert markers(game, 0) == {}


def test_turn_order_skips_resigned_players() -> None:
    game = new_game(["Ann", "Bob", "Cy"])
    game.resign(1)
    pass_turn(game, 0)
    assert game_state(game)["turn"]["player"] == 2
    pass_turn(game, 2)
    assert game_state(game)["turn"]["player"] == 0
    refused(game, NotYourTurn, "not_your_turn", game.roll, 1, dice=[1, 2, 3, 4])


@pytest.mark.parametrize(
    "resigning",
    [pytest.param(0, id="player-to-act-resigns"), pytest.param(1, id="other-player-resigns")],
)
def test_last_player_left_wins(resigning: int) -> None:
    game = new_game()
    game.resign(resigning)
    state = game_state(game)
    assert state["status"] == "finished"
    assert state["winner"] == 1 - resigning
    assert state["finish_reason"] == "last_player"
    assert state["legal_actions"] == []


def test_last_of_three_players_wins_when_the_other_two_resign() -> None:
    game = new_game(["Ann", "Bob", "Cy"])
    game.resign(2)
    assert game_state(game)["status"] == "in_progress"
    game.resign(0)
    state = game_state(game)
    assert (state["status"], state["winner"]) == ("finished", 1)


def test_solitaire_resignation_ends_the_game_with_no_winner_and_no_rating() -> None:
    game = solo("advanced")
    roll_move(game, 0, [3, 4, 3, 4], [7, 7])
    game.stop(0)
    game.resign(0)
    state = game_state(game)
    assert (state["status"], state["winner"], state["finish_reason"]) == (
        "finished",
        None,
        "resigned",
    )
    assert state["solitaire"]["rating"] is None
    assert last_event(game).rating is None


def test_a_resigned_player_cannot_resign_again() -> None:
    game = new_game(["Ann", "Bob", "Cy"])
    game.resign(2)
    refused(game, IllegalAction, "illegal_action", game.resign, 2)


# ------------------------------------------------------------------------------- opening roll
def scripted_draw(script: Mapping[int, list[int]], calls: list[tuple[int, int, int]]) -> Any:
    """A server-dice ``draw(nonce, count, faces)`` that returns the scripted dice of each nonce."""

    def draw(nonce: int, count: int, faces: int, entropy: str | None = None) -> list[int]:
        calls.append((nonce, count, faces))
        return list(script[nonce])

    return draw


@pytest.mark.parametrize(
    ("script", "rounds", "first"),
    [
        pytest.param(
            {0: [2, 3], 1: [4, 5], 2: [6, 3], 3: [1, 1], 4: [2, 2]},
            [[0, 1, 2], [1, 2]],
            2,
            id="bob-and-cy-tie-on-9-then-cy-wins",
        ),
        pytest.param(
            {
                **{0: [3, 4], 1: [1, 6], 2: [5, 2]},  # all 7
                **{3: [1, 4], 4: [5, 6], 5: [6, 5]},  # Bob and Cy 11
                **{6: [2, 1], 7: [1, 2]},  # 3 and 3 again
                **{8: [6, 6], 9: [1, 1]},
            },
            [[0, 1, 2], [0, 1, 2], [1, 2], [1, 2]],
            1,
            id="three-way-tie-then-two-way-tie-then-bob-wins",
        ),
        pytest.param({0: [1, 1], 1: [6, 6], 2: [3, 3]}, [[0, 1, 2]], 1, id="no-tie"),
    ],
)
def test_opening_roll_rerolls_only_among_the_tied_highest(
    script: dict[int, list[int]], rounds: list[list[int]], first: int
) -> None:
    calls: list[tuple[int, int, int]] = []
    draw = scripted_draw({**script, len(script): [1, 2, 3, 4]}, calls)
    game = Game.start(
        uuid.uuid4(), NewGame(players=["Ann", "Bob", "Cy"]), server_seed="ab" * 32, draw=draw
    )
    decided = last_event(game)
    assert type(decided).__name__ == "TurnOrderDecided"
    by_round: list[list[int]] = []
    for entry in decided.draws:
        if entry["round"] == len(by_round):
            by_round.append([])
        by_round[entry["round"]].append(entry["seat"])
        assert entry["dice"] == script[entry["nonce"]]
    assert by_round == rounds
    assert calls == [(nonce, 2, 6) for nonce in range(len(script))]
    state = game_state(game)
    assert (state["first_player"], state["turn"]["player"], state["turn"]["number"]) == (
        first,
        first,
        1,
    )

    game.roll(first, draw=draw)  # the next draw continues the nonces
    assert calls[-1] == (len(script), 4, 6)
    assert last_event(game).nonce == len(script)


def test_lobby_game_waits_for_its_seats_then_starts() -> None:
    game = Game.start(uuid.uuid4(), NewGame(seats=3, dice="manual"))
    assert game_state(game)["status"] == "waiting"
    assert [game.join("Ann"), game.join("Bob")] == [0, 1]
    refused(game, IllegalAction, "illegal_action", game.roll, 0, dice=[1, 2, 3, 4])
    assert game.join("Cy") == 2
    state = game_state(game)
    assert (state["status"], state["turn"]["player"]) == ("in_progress", 0)
    refused(game, IllegalAction, "illegal_action", game.join, "Dee")


# ------------------------------------------------------------------------------------ refusals
def test_acting_out_of_turn_is_refused_with_not_your_turn() -> None:
    game = new_game()
    refused(game, NotYourTurn, "not_your_turn", game.roll, 1, dice=[1, 2, 3, 4])
    refused(game, NotYourTurn, "not_your_turn", game.stop, 1)  # before illegal_action
    refused(game, NotYourTurn, "not_your_turn", game.roll, 7, dice=[1, 2, 3, 4])
    game.roll(0, dice=[1, 2, 3, 4])
    refused(game, NotYourTurn, "not_your_turn", game.move, 1, [3, 7])


def test_every_command_after_the_finish_is_refused_with_game_over() -> None:
    game = new_game(columns_to_win=1)
    claim(game, 0, 2)
    assert game_state(game)["status"] == "finished"
    refused(game, GameOver, "game_over", game.roll, 1, dice=[1, 2, 3, 4])
    refused(game, GameOver, "game_over", game.roll, 0, dice=[0, 0, 0, 0])
    refused(game, GameOver, "game_over", game.move, 1, [3, 7])
    refused(game, GameOver, "game_over", game.stop, 0)
    refused(game, GameOver, "game_over", game.resign, 1)


@pytest.mark.parametrize(
    ("faces", "dice"),
    [
        pytest.param(6, [1, 2, 3], id="three-dice"),
        pytest.param(6, [1, 2, 3, 4, 5], id="five-dice"),
        pytest.param(6, [0, 1, 2, 3], id="zero"),
        pytest.param(6, [7, 1, 2, 3], id="seven-on-d6"),
        pytest.param(8, [9, 1, 2, 3], id="nine-on-d8"),
        pytest.param(6, [True, 1, 2, 3], id="bool"),
        pytest.param(6, [1.0, 2, 3, 4], id="float"),
        pytest.param(6, "1234", id="string"),
        pytest.param(6, None, id="none"),
    ],
)
def test_dice_outside_one_to_faces_or_not_four_are_invalid(faces: int, dice: Any) -> None:
    game = new_game(dice_faces=faces)
    refused(game, InvalidDice, "invalid_dice", game.roll, 0, dice=dice)


def test_refusals_of_illegal_actions_record_nothing() -> None:
    game = new_game()
    refused(game, IllegalAction, "illegal_action", game.stop, 0)  # before rolling
    refused(game, IllegalAction, "illegal_action", game.move, 0, [6, 10])  # in the roll phase
    game.roll(0, dice=[1, 5, 4, 6])
    refused(game, IllegalAction, "illegal_action", game.stop, 0)  # before moving
    refused(game, IllegalAction, "illegal_action", game.roll, 0, dice=[1, 1, 1, 1])
    refused(game, IllegalAction, "illegal_action", game.roll, 0, dice=[0, 0])  # before the dice
    refused(game, IllegalAction, "illegal_action", game.move, 0, [6])  # half of a pair
    refused(game, IllegalAction, "illegal_action", game.move, 0, [2, 12])
    refused(game, IllegalAction, "illegal_action", game.move, 0, [6, 10, 5])
    refused(game, IllegalAction, "illegal_action", game.move, 0, [])
    refused(game, InvalidRequest, "invalid_request", game.move, 0, ["6", "10"])
    game.move(0, [6, 10])
    refused(game, IllegalAction, "illegal_action", game.move, 0, [6, 10])  # already moved
