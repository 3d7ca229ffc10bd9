"""The turn record sheet: rows built from the served event history, and its text/CSV/JSON/PDF forms.

Every game here is played by hand through the domain aggregate with manual dice, so each expected
sheet is exact (rules-rulings.md, Solitaire: the record-sheet row format).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest
from pypdf import PdfReader

from domain.commands import NewGame
from domain.errors import InvalidRequest
from domain.game import Game, event_record
from domain.record_sheet import record_sheet, sheet_rows
from service.render.sheet import render_csv, render_json, render_pdf, render_text

HEIGHTS = {c: 2 * (6 - abs(c - 7)) + 1 for c in range(2, 13)}
Play = tuple[Sequence[int], Sequence[int]]
"""One roll of manual dice and the sums then played."""

# Three rolls that place runners in 2, 3 and 4, then a roll of 12s: a bust (no markers needed).
PLACE_2_3_4: tuple[Play, ...] = (([1, 1, 1, 2], [2, 3]), ([1, 1, 2, 2], [2, 4]))
ALL_TWELVES = [6, 6, 6, 6]


# ----------------------------------------------------------------------------------- helpers
def solitaire(rules: dict[str, Any] | None = None, name: str = "Sol") -> Game:
    return Game.start(uuid4(), NewGame(players=[name], rules=rules, dice="manual"))


def served(game: Game) -> list[dict[str, Any]]:
    """The game's history as ``/events`` serves it."""
    events = []
    for event in game.pending_events:
        assert isinstance(event, Game.Event)
        events.append(event_record(event))
    return events


def stop_turn(game: Game, *plays: Play, seat: int = 0) -> None:
    for dice, sums in plays:
        game.roll(seat, dice=list(dice))
        game.move(seat, list(sums))
    game.stop(seat)


def bust_turn(game: Game, *plays: Play, bust: Sequence[int], seat: int = 0) -> None:
    for dice, sums in plays:
        game.roll(seat, dice=list(dice))
        game.move(seat, list(sums))
    game.roll(seat, dice=list(bust))
    assert type(game.pending_events[-1]).__name__ == "TurnBusted"


def doubles(column: int) -> list[int]:
    """Four dice whose pairings include (column, column)."""
    low = max(1, column - 6)
    return [low, column - low, low, column - low]


def claim_column(game: Game, column: int, seat: int = 0) -> None:
    """One turn climbing ``column`` from the seat's marker to the top, two spaces a roll."""
    left = HEIGHTS[column] - game.markers[seat][column]
    plays: list[Play] = []
    while left > 0:
        plays.append((doubles(column), [column, column] if left >= 2 else [column]))
        left -= len(plays[-1][1])
    stop_turn(game, *plays, seat=seat)


def finish(game: Game) -> None:
    """Claim every column still open, one a turn, ascending: the solitaire game is won."""
    for column in HEIGHTS:
        if game.status != "finished" and game.claimed[column] == -1:
            claim_column(game, column)
    assert game.status == "finished"


def pdf_text(pdf: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)


def advanced_with_wipe() -> Game:
    """Advanced solitaire: a stop in 4 and 5, a bust wiping both, a restart in 4, a double claim."""
    game = solitaire({"solitaire": "advanced"})
    stop_turn(game, ([1, 3, 2, 3], [4, 5]))
    bust_turn(game, ([1, 3, 2, 3], [4, 5]), ([1, 1, 1, 1], [2, 2]), bust=ALL_TWELVES)
    stop_turn(game, ([1, 3, 2, 3], [4, 5]), ([2, 2, 3, 3], [4, 6]))
    stop_turn(game, *[([1, 1, 6, 6], [2, 12])] * 3)
    return game


# ----------------------------------------------------------------------------------- rows
def test_stop_row_lists_each_column_gained_ascending() -> None:
    game = solitaire()
    stop_turn(game, ([2, 2, 4, 4], [4, 8]), ([2, 2, 4, 4], [8, 4]), ([3, 6, 1, 1], [9]))

    assert sheet_rows(served(game)) == [
        {
            "turn": 1,
            "result": "stop",
            "progress": {"4": 2, "8": 2, "9": 1},
            "claimed": [],
            "wiped": [],
            "text": "4×2, 8×2, 9×1",
            "claimed_total": 0,
            "version": 9,
        }
    ]


def test_stop_that_claims_a_column_ends_with_cap() -> None:
    game = solitaire()
    stop_turn(game, *[([1, 6, 1, 6], [7, 7])] * 5, ([1, 5, 2, 4], [5, 7]))
    stop_turn(game, ([1, 5, 3, 4], [6, 7]), ([1, 5, 3, 4], [6, 7]), ([1, 5, 3, 4], [6]))

    rows = sheet_rows(served(game))

    assert [row["text"] for row in rows] == ["5×1, 7×11", "6×3, 7×2, 7 Cap"]
    assert rows[1]["progress"] == {"6": 3, "7": 2}
    assert rows[1]["claimed"] == [7]
    assert rows[1]["claimed_total"] == 1


def test_stop_that_claims_two_columns_lists_both_caps() -> None:
    game = solitaire({"solitaire": "advanced"})
    stop_turn(game, *[([1, 1, 6, 6], [2, 12])] * 3)

    (row,) = sheet_rows(served(game))

    assert row["text"] == "2×3, 12×3, 2 Cap, 12 Cap"
    assert row["claimed"] == [2, 12]
    assert row["claimed_total"] == 2


def test_easy_bust_is_a_plain_s() -> None:
    game = solitaire({"solitaire": "easy"})
    stop_turn(game, ([1, 3, 2, 3], [4, 5]))
    bust_turn(game, ([1, 3, 2, 3], [4, 5]), ([1, 1, 1, 1], [2, 2]), bust=ALL_TWELVES)

    rows = sheet_rows(served(game))

    assert rows[1] == {
        "turn": 2,
        "result": "bust",
        "progress": {},
        "claimed": [],
        "wiped": [],
        "text": "S",
        "claimed_total": 0,
        "version": 11,
    }


def test_advanced_bust_lists_the_wiped_columns_after_an_en_dash() -> None:
    rows = sheet_rows(served(advanced_with_wipe()))

    assert rows[1]["text"] == "S \u2013 4,5"
    assert rows[1]["wiped"] == [4, 5]
    # The wiped markers start again from the bottom: 4 gains 2 from nothing, 5 gains 1.
    assert rows[2]["text"] == "4×2, 5×1, 6×1"


def test_steep_hill_leaves_out_a_column_whose_marker_did_not_move() -> None:
    game = solitaire({"solitaire": "easy", "steep_hill": True})
    stop_turn(game, ([1, 3, 1, 3], [4, 4]))
    stop_turn(game, ([1, 3, 2, 3], [4, 5]))  # the runner in 4 starts on the marker and stays

    rows = sheet_rows(served(game))

    assert [row["text"] for row in rows] == ["4×2", "5×1"]
    assert rows[1]["progress"] == {"5": 1}


def test_steep_hill_stop_that_moved_no_marker_has_an_empty_row() -> None:
    game = solitaire({"solitaire": "easy", "steep_hill": True})
    stop_turn(game, ([1, 3, 2, 3], [4, 5]), ([1, 5, 1, 1], [6]))
    stop_turn(game, ([1, 3, 2, 3], [4, 5]), ([1, 5, 6, 6], [6]))

    sheet = record_sheet(served(game))

    assert [row["text"] for row in sheet["rows"]] == ["4×1, 5×1, 6×1", ""]
    assert sheet["rows"][1]["result"] == "stop"
    assert render_text(sheet).splitlines()[1:] == ["1. 4×1, 5×1, 6×1", "2."]
    assert "stopped, no marker moved" in pdf_text(render_pdf(sheet))


def test_turns_count_stops_and_busts_in_order_with_their_event_versions() -> None:
    rows = sheet_rows(served(advanced_with_wipe()))

    assert [(row["turn"], row["result"], row["version"]) for row in rows] == [
        (1, "stop", 5),
        (2, "bust", 11),
        (3, "stop", 16),
        (4, "stop", 23),
    ]
    assert [row["claimed_total"] for row in rows] == [0, 0, 0, 2]


# ----------------------------------------------------------------------------------- sheets
def test_advanced_sheet_in_progress_is_exact() -> None:
    events = served(advanced_with_wipe())

    assert record_sheet(events, game_id="g-1") == {
        "title": "Can't Stop solitaire (advanced) \u2013 Sol",
        "game_id": "g-1",
        "version": 23,
        "seat": 0,
        "player": "Sol",
        "mode": "advanced",
        "target": 40,
        "rules": {
            "columns_to_win": 11,
            "jumping": False,
            "forced_move": False,
            "steep_hill": False,
            "solitaire": "advanced",
            "dice_faces": 6,
        },
        "columns": list(range(2, 13)),
        "created_at": events[0]["at"],
        "rows": sheet_rows(events),
        "turns": 4,
        "claimed": [2, 12],
        "resigned": False,
        "finished": False,
        "finished_at": None,
        "finish_reason": None,
        "winner": None,
        "score": None,
        "rating": None,
    }


def test_finished_easy_game_has_score_and_rating() -> None:
    game = solitaire({"solitaire": "easy"})
    bust_turn(game, *PLACE_2_3_4, bust=ALL_TWELVES)
    finish(game)
    events = served(game)

    sheet = record_sheet(events)

    assert sheet["finished"] is True
    assert sheet["finish_reason"] == "columns"
    assert sheet["finished_at"] == events[-1]["at"]
    assert sheet["winner"] == "Sol"
    assert (sheet["turns"], sheet["score"], sheet["rating"]) == (12, 12, "Target met")
    assert sheet["claimed"] == list(range(2, 13))
    assert sheet["rows"][-1]["claimed_total"] == 11


def test_finished_advanced_game_text_is_exact() -> None:
    game = advanced_with_wipe()
    finish(game)

    assert render_text(record_sheet(served(game))) == (
        "Can't Stop solitaire (advanced) \u2013 Sol\n"
        "1. 4×1, 5×1\n"
        "2. S \u2013 4,5\n"
        "3. 4×2, 5×1, 6×1\n"
        "4. 2×3, 12×3, 2 Cap, 12 Cap\n"
        "5. 3×5, 3 Cap\n"
        "6. 4×5, 4 Cap\n"
        "7. 5×8, 5 Cap\n"
        "8. 6×10, 6 Cap\n"
        "9. 7×13, 7 Cap\n"
        "10. 8×11, 8 Cap\n"
        "11. 9×9, 9 Cap\n"
        "12. 10×7, 10 Cap\n"
        "13. 11×5, 11 Cap\n"
        "Score: 13 turns\n"
        "Rating: Outstanding\n"
    )


def test_game_over_the_target_is_rated_try_again() -> None:
    game = solitaire({"solitaire": "easy"})
    for _ in range(20):
        bust_turn(game, *PLACE_2_3_4, bust=ALL_TWELVES)
    finish(game)

    sheet = record_sheet(served(game))

    assert (sheet["score"], sheet["rating"]) == (31, "Try again")
    assert render_text(sheet).endswith("31. 12×3, 12 Cap\nScore: 31 turns\nRating: Try again\n")


def test_resigned_solitaire_game_is_finished_without_score_or_rating() -> None:
    game = solitaire()
    stop_turn(game, ([1, 3, 2, 3], [4, 5]))
    game.resign(0)

    sheet = record_sheet(served(game))

    assert (sheet["finished"], sheet["resigned"], sheet["finish_reason"]) == (
        True,
        True,
        "resigned",
    )
    assert (sheet["score"], sheet["rating"], sheet["winner"]) == (None, None, None)
    assert render_text(sheet) == (
        "Can't Stop solitaire (easy) \u2013 Sol\n1. 4×1, 5×1\nResigned after 1 turn: no score\n"
    )


def test_an_abandoned_game_says_so_not_resigned() -> None:
    game = solitaire()
    stop_turn(game, ([1, 3, 2, 3], [4, 5]))
    game.abandon(game.idle_since() + timedelta(days=8), after=7 * 24 * 3600)

    sheet = record_sheet(served(game))

    assert (sheet["finished"], sheet["resigned"], sheet["finish_reason"]) == (
        True,
        False,
        "abandoned",
    )
    assert render_text(sheet).endswith("1. 4×1, 5×1\nAbandoned after 1 turn: no score\n")
    pair = Game.start(uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))
    pair.abandon(pair.idle_since() + timedelta(days=8), after=7 * 24 * 3600)
    assert render_text(record_sheet(served(pair), seat=1)).endswith("\nAbandoned: no winner\n")


def test_sheet_at_an_earlier_version_reads_only_the_events_up_to_it() -> None:
    game = advanced_with_wipe()
    finish(game)
    events = served(game)

    sheet = record_sheet(events[:11])

    assert sheet["version"] == 11
    assert [row["text"] for row in sheet["rows"]] == ["4×1, 5×1", "S \u2013 4,5"]
    assert (sheet["finished"], sheet["score"], sheet["rating"]) == (False, None, None)


def test_sheet_reads_an_export_file_with_its_header_line() -> None:
    game = advanced_with_wipe()
    events = served(game)
    export = [json.dumps({"format": "cantstop-game", "format_version": 1, "game_id": "abc"})]
    export += [json.dumps(e, ensure_ascii=False) for e in events]

    sheet = record_sheet(line + "\n" for line in [*export, ""])

    assert sheet == record_sheet(events, game_id="abc")
    assert sheet_rows(export) == sheet_rows(events)


def test_sheet_needs_the_game_created_event_first() -> None:
    events = served(advanced_with_wipe())

    with pytest.raises(ValueError, match="GameCreated"):
        record_sheet(events[1:])


@pytest.mark.parametrize("seat", [1, -1])
def test_solitaire_sheet_has_only_seat_zero(seat: int) -> None:
    with pytest.raises(InvalidRequest):
        record_sheet(served(advanced_with_wipe()), seat)


# ----------------------------------------------------------------------------- multiplayer
def multiplayer() -> Game:
    """Ann and Bob: Bob claims 2 (removing Ann's marker there), Ann busts, then Ann resigns."""
    game = Game.start(uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))
    stop_turn(game, ([1, 1, 1, 2], [2, 3]), seat=0)
    stop_turn(game, ([1, 1, 1, 1], [2, 2]), ([1, 1, 1, 1], [2]), seat=1)
    bust_turn(game, ([1, 3, 2, 3], [4, 5]), ([1, 5, 1, 1], [6]), bust=ALL_TWELVES, seat=0)
    stop_turn(game, ([2, 2, 4, 4], [4, 8]), seat=1)
    game.resign(0)
    return game


def test_multiplayer_sheet_holds_only_that_seats_turns() -> None:
    events = served(multiplayer())

    sheet = record_sheet(events, seat=1)

    assert sheet["title"] == "Can't Stop \u2013 Bob (seat 1)"
    assert (sheet["player"], sheet["mode"], sheet["target"]) == ("Bob", None, None)
    assert sheet["rows"] == [
        {
            "turn": 1,
            "result": "stop",
            "progress": {"2": 3},
            "claimed": [2],
            "wiped": [],
            "text": "2×3, 2 Cap",
            "claimed_total": 1,
            "version": 10,
        },
        {
            "turn": 2,
            "result": "stop",
            "progress": {"4": 1, "8": 1},
            "claimed": [],
            "wiped": [],
            "text": "4×1, 8×1",
            "claimed_total": 1,
            "version": 19,
        },
    ]
    assert (sheet["finished"], sheet["winner"], sheet["finish_reason"]) == (
        True,
        "Bob",
        "last_player",
    )
    assert (sheet["score"], sheet["rating"]) == (None, None)
    assert render_text(sheet) == (
        "Can't Stop \u2013 Bob (seat 1)\n1. 2×3, 2 Cap\n2. 4×1, 8×1\nWinner: Bob\n"
    )


def test_multiplayer_sheet_of_the_other_seat() -> None:
    sheet = record_sheet(served(multiplayer()), seat=0)

    assert [row["text"] for row in sheet["rows"]] == ["2×1, 3×1", "S"]
    assert sheet["resigned"] is True


def test_lobby_seat_names_come_from_seat_joined() -> None:
    game = Game.start(uuid4(), NewGame(seats=2, dice="manual"))
    game.join("Cy")

    sheet = record_sheet(served(game), seat=1)

    assert sheet["player"] == "Seat 1"
    game.join("Di")
    assert record_sheet(served(game), seat=1)["player"] == "Di"


# ----------------------------------------------------------------------------- renderings
def test_csv_has_the_contract_header_and_one_line_per_turn() -> None:
    game = advanced_with_wipe()
    stop_turn(game, ([2, 2, 4, 4], [4, 8]), ([2, 2, 4, 4], [4, 8]), ([3, 6, 1, 1], [9]))

    assert render_csv(record_sheet(served(game))) == (
        "turn,result,progress,wiped,captured,claimed_total\r\n"
        "1,stop,4×1 5×1,,,0\r\n"
        "2,bust,,4 5,,0\r\n"
        "3,stop,4×2 5×1 6×1,,,0\r\n"
        "4,stop,2×3 12×3,,2 12,2\r\n"
        "5,stop,4×2 8×2 9×1,,,2\r\n"
    )


def test_json_is_the_sheet_tagged_with_its_format() -> None:
    game = advanced_with_wipe()
    finish(game)
    sheet = record_sheet(served(game), game_id="g-2")

    document = render_json(sheet)

    assert document == {
        "format": "cantstop-record-sheet",
        "format_version": 1,
        **sheet,
        "result_lines": ["Score: 13 turns", "Rating: Outstanding"],
    }
    assert json.loads(json.dumps(document)) == document
    document["rows"][0]["progress"]["4"] = 99
    assert sheet["rows"][0]["progress"]["4"] == 1  # a copy, not the sheet itself


def test_pdf_holds_every_row_the_score_and_the_rating() -> None:
    game = advanced_with_wipe()
    finish(game)
    sheet = record_sheet(served(game), game_id="g-3")

    pdf = render_pdf(sheet)

    assert pdf.startswith(b"%PDF-")
    reader = PdfReader(io.BytesIO(pdf))
    assert len(reader.pages) == 1
    assert reader.metadata is not None
    assert reader.metadata.title == sheet["title"]
    text = pdf_text(pdf)
    for row in sheet["rows"]:
        assert row["text"] in text
    for expected in ("Sol", "Advanced solitaire", "Score: 13 turns", "Rating: Outstanding"):
        assert expected in text
    assert "S \u2013 4,5" in text and "2×3, 12×3, 2 Cap, 12 Cap" in text


def test_pdf_offers_numbered_rows_up_to_the_target_and_blank_score_lines() -> None:
    sheet = record_sheet(served(advanced_with_wipe()))

    text = pdf_text(render_pdf(sheet))

    assert "40" in text.split()
    assert "41" not in text.split()
    assert "Score: ________ turns" in text


def test_pdf_of_a_game_past_its_target_runs_on_numbered_rows() -> None:
    game = solitaire({"solitaire": "easy"})
    for _ in range(20):
        bust_turn(game, *PLACE_2_3_4, bust=ALL_TWELVES)
    finish(game)

    text = pdf_text(render_pdf(record_sheet(served(game))))

    assert "31" in text.split() and "11×5, 11 Cap" in text
    assert "Rating: Try again" in text


def test_pdf_of_a_multiplayer_sheet_names_the_winner() -> None:
    text = pdf_text(render_pdf(record_sheet(served(multiplayer()), seat=1)))

    assert "Multiplayer, seat 1" in text
    assert "Winner: Bob" in text
    assert "2×3, 2 Cap" in text


def test_a_line_break_in_a_name_cannot_forge_rows_in_the_text() -> None:
    # The domain refuses such names; a sheet made from a hand-edited export must still be safe.
    with pytest.raises(InvalidRequest):
        solitaire(name="Sol\n1. 7×13, 7 Cap")
    game = solitaire(name="Sol")
    stop_turn(game, ([1, 3, 2, 3], [4, 5]))
    events = served(game)
    events[0]["data"]["players"] = ["Sol\n1. 7×13,\t7 Cap"]

    sheet = record_sheet(events)

    assert render_text(sheet).splitlines() == [
        "Can't Stop solitaire (easy) \u2013 Sol 1. 7×13, 7 Cap",
        "1. 4×1, 5×1",
    ]
    assert "Sol 1. 7×13, 7 Cap" in pdf_text(render_pdf(sheet))


def test_pdf_escapes_markup_in_a_players_name() -> None:
    text = pdf_text(render_pdf(record_sheet(served(solitaire(name="<b>Zoë & Co</b>")))))

    assert "<b>Zoë & Co</b>" in text


def test_pdf_renders_a_name_with_letters_outside_helvetica() -> None:
    pdf = render_pdf(record_sheet(served(solitaire(name="Łukasz"))))

    # With DejaVu Sans on the machine the Ł is drawn; without it, it shows as a box.
    assert len(PdfReader(io.BytesIO(pdf)).pages) == 1
    assert "ukasz" in pdf_text(pdf)
