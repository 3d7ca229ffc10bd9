"""The Tournament aggregate (issue #45): its events, the Swiss and arena rules, points, standings.

docs/tournaments.md names these tests beside the promises they hold."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from domain import tournament as tournament_module
from domain.errors import (
    AlreadyRegistered,
    InvalidRequest,
    NotRegistered,
    TournamentFinished,
    TournamentNotReady,
    TournamentStarted,
)
from domain.tournament import (
    IDLE,
    TABLE_NAMESPACE,
    Tournament,
    event_line,
    places_problem,
    replayed,
    swiss_pairing,
    table_points,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HASH = "ab" * 32


def swiss(players: int, size: int = 3, rounds: int = 3, **extra: Any) -> Tournament:
    tournament = Tournament.create(
        name="Spring cup",
        kind="swiss",
        rules={},
        players_per_table=size,
        rounds=rounds,
        clock={"turn_seconds": 60},
        creator="host",
        at=T0,
        **extra,
    )
    for i in range(players):
        tournament.register(f"p{i + 1}", 25.0, at=T0)
    return tournament


def arena(players: int, size: int = 2, minutes: int = 10) -> Tournament:
    tournament = Tournament.create(
        name="Blitz arena",
        kind="arena",
        rules={},
        players_per_table=size,
        minutes=minutes,
        clock={"turn_seconds": 30},
        creator="host",
        at=T0,
    )
    for i in range(players):
        tournament.register(f"a{i + 1}", 25.0 + i, at=T0)
    return tournament


def seat_order_wins(tournament: Tournament, game_id: str, at: datetime = T0) -> None:
    """The table's result: seat 0 first, seat 1 second, ..."""
    table = tournament.table_of(game_id)
    assert table is not None
    places = {h: i for i, h in enumerate(table["players"])}
    tournament.record_result(game_id, places, HASH, at, at=at)


def play_round(tournament: Tournament) -> dict[str, Any]:
    paired = tournament.pair_next_round(at=T0)
    assert paired is not None
    for table in paired["tables"]:
        seat_order_wins(tournament, table["game_id"])
    return paired


# ------------------------------------------------------------------------------ creation
def test_created_holds_the_settings_normalized() -> None:
    tournament = swiss(0)
    event = tournament.collect_events()[0]
    line = event_line(event)
    assert line["type"] == "Created" and line["version"] == 1
    assert line["data"]["rules"]["columns_to_win"] == 3  # defaults resolved
    assert line["data"]["clock"] == {"turn_seconds": 60}
    assert tournament.status == "created" and tournament.players == []


@pytest.mark.parametrize(
    "change",
    [
        {"kind": "knockout"},
        {"players_per_table": 1},
        {"players_per_table": 9},
        {"players_per_table": True},
        {"rounds": 0},
        {"rounds": 51},
        {"minutes": 5},
        {"clock": None},
        {"clock": {"turn_seconds": 1}},
        {"rated": "yes"},
        {"name": " "},
        {"name": "x" * 81},
        {"creator": "1bad"},
        {"starts_at": "tomorrow"},
        {"rules": {"dice_faces": 7}},
    ],
)
def test_bad_settings_are_refused_as_invalid_requests(change: dict[str, Any]) -> None:
    settings: dict[str, Any] = {
        "name": "Cup",
        "kind": "swiss",
        "rules": {},
        "players_per_table": 3,
        "rounds": 3,
        "clock": {"turn_seconds": 60},
        "rated": False,
        "creator": "host",
        **change,
    }
    with pytest.raises(InvalidRequest):
        Tournament.create(**settings)


def test_an_arena_has_minutes_not_rounds() -> None:
    with pytest.raises(InvalidRequest):
        Tournament.create(
            name="A", kind="arena", rules={}, players_per_table=2, rounds=3, minutes=5,
            clock={"turn_seconds": 30}, creator="host",
        )  # fmt: skip


# ------------------------------------------------------------------------------ registration
def test_registering_twice_is_already_registered_whatever_the_case() -> None:
    tournament = swiss(2)
    with pytest.raises(AlreadyRegistered):
        tournament.register("P1", 30.0)
    assert tournament.players == ["p1", "p2"]


def test_a_started_swiss_takes_no_registration_and_records_nothing() -> None:
    tournament = swiss(3)
    tournament.start(at=T0)
    version = tournament.version
    with pytest.raises(TournamentStarted):
        tournament.register("late")
    assert tournament.version == version


def test_withdrawing_before_the_start_is_as_if_never_registered() -> None:
    tournament = swiss(3)
    tournament.withdraw("p2")
    assert tournament.players == ["p1", "p3"]
    assert [row["handle"] for row in tournament.standings()] == ["p1", "p3"]
    tournament.register("p2")  # may come back before the start
    assert tournament.players == ["p1", "p3", "p2"]
    with pytest.raises(NotRegistered):
        tournament.withdraw("nobody")
    with pytest.raises(InvalidRequest):
        tournament.withdraw("p1", "bored")


def test_starting_with_fewer_than_two_players_finishes_at_once() -> None:
    for count in (0, 1):
        tournament = swiss(count)
        tournament.start(at=T0)
        assert tournament.status == "finished"
        assert tournament.finish_reason == "not_enough_players"
        with pytest.raises(TournamentFinished):
            tournament.register("late")


# ------------------------------------------------------------------------------ Swiss
def test_a_swiss_of_nine_at_tables_of_three_for_three_rounds() -> None:
    tournament = swiss(9)
    tournament.start(at=T0)
    met: set[frozenset[str]] = set()
    for number in (1, 2, 3):
        paired = play_round(tournament)
        assert paired["number"] == number and paired["byes"] == []
        seated = [h for t in paired["tables"] for h in t["players"]]
        assert sorted(seated) == sorted(tournament.players)  # everyone, once
        for table in paired["tables"]:
            pairs = {frozenset((a, b)) for a in table["players"] for b in table["players"] if a < b}
            assert not pairs & met  # three rounds of nine at tables of three: no repeat
            met |= pairs
    assert tournament.status == "finished" and tournament.finish_reason == "completed"
    standings = tournament.standings()
    assert sum(row["points"] for row in standings) == 9 * 3  # 3 points per table, 9 tables
    assert [row["rank"] for row in standings] == list(range(1, 10))


def test_table_ids_are_uuid5_of_tournament_round_and_index() -> None:
    tournament = swiss(6, size=3)
    tournament.start(at=T0)
    paired = tournament.pair_next_round(at=T0)
    assert paired is not None
    ids = [t["game_id"] for t in paired["tables"]]
    assert ids == [str(uuid.uuid5(TABLE_NAMESPACE, f"{tournament.id}/1/{i}")) for i in range(2)]
    assert tournament.open_tables() == ids and not tournament.round_complete()


def test_the_next_round_waits_for_every_table_of_the_last() -> None:
    tournament = swiss(4, size=2)
    tournament.start(at=T0)
    paired = tournament.pair_next_round(at=T0)
    assert paired is not None
    seat_order_wins(tournament, paired["tables"][0]["game_id"])
    with pytest.raises(TournamentNotReady):
        tournament.pair_next_round(at=T0)
    seat_order_wins(tournament, paired["tables"][1]["game_id"])
    assert tournament.round_complete()
    assert tournament.pair_next_round(at=T0) is not None


def test_byes_go_to_the_lowest_with_the_fewest_byes_and_give_half_a_table() -> None:
    tournament = swiss(5, size=2, rounds=5)
    tournament.start(at=T0)
    had: list[str] = []
    for _ in range(5):
        paired = play_round(tournament)
        assert len(paired["byes"]) == 1
        had += paired["byes"]
    assert sorted(had) == sorted(tournament.players)  # five rounds, five different byes
    first = tournament.rounds[0]
    assert first["byes"] == ["p5"]  # all equal: the last registered is the lowest
    row = next(r for r in tournament.standings() if r["handle"] == "p5")
    assert row["byes"] == 1 and row["games"] == 4


def test_fewer_players_than_a_table_sit_at_one_short_table() -> None:
    tournament = swiss(3, size=4)
    tournament.start(at=T0)
    paired = tournament.pair_next_round(at=T0)
    assert paired is not None
    assert [t["players"] for t in paired["tables"]] == [["p1", "p2", "p3"]]
    assert paired["byes"] == []


def test_a_withdrawn_player_is_never_paired_again_but_their_game_counts() -> None:
    tournament = swiss(4, size=2)
    tournament.start(at=T0)
    paired = tournament.pair_next_round(at=T0)
    assert paired is not None
    leaving = paired["tables"][0]["players"][0]
    tournament.withdraw(leaving)  # during the game
    for table in paired["tables"]:
        seat_order_wins(tournament, table["game_id"])
    nxt = tournament.pair_next_round(at=T0)
    assert nxt is not None
    assert leaving not in [h for t in nxt["tables"] for h in t["players"]] + nxt["byes"]
    row = next(r for r in tournament.standings() if r["handle"] == leaving)
    assert row["withdrawn"] and row["points"] == 1 and row["games"] == 1


def test_a_swiss_left_with_one_player_finishes_for_want_of_players() -> None:
    tournament = swiss(2, size=2)
    tournament.start(at=T0)
    paired = play_round(tournament)
    assert paired["tables"]
    tournament.withdraw("p1")
    assert tournament.finish_due() == "not_enough_players"
    assert tournament.pair_next_round(at=T0) is None
    assert tournament.finish_reason == "not_enough_players"


def test_seat_zero_goes_to_who_sat_first_least_often() -> None:
    tournament = swiss(2, size=2, rounds=4)
    tournament.start(at=T0)
    firsts = [play_round(tournament)["tables"][0]["players"][0] for _ in range(4)]
    assert firsts == ["p1", "p2", "p1", "p2"]


def test_swiss_order_is_points_then_rating_then_registration() -> None:
    order = ["a", "b", "c", "d"]
    tables, byes = swiss_pairing(order, 2, {}, {}, {})
    assert tables == [["a", "b"], ["c", "d"]] and byes == []
    tournament = swiss(0, size=2)
    for handle, rating in [("low", 20.0), ("high", 30.0), ("mid", 25.0), ("mid2", 25.0)]:
        tournament.register(handle, rating)
    assert tournament.swiss_order() == ["high", "mid", "mid2", "low"]


def test_repeats_are_avoided_when_another_split_has_fewer() -> None:
    met = {frozenset(("a", "b")): 1}
    tables, _ = swiss_pairing(["a", "b", "c", "d"], 2, {}, met, {})
    assert tables == [["a", "c"], ["b", "d"]]


# ------------------------------------------------------------------------------ results
def test_points_per_place_and_ties_share() -> None:
    assert table_points({"a": 0, "b": 1, "c": 2}) == {"a": 2, "b": 1, "c": 0}
    assert table_points({"a": 0, "b": 1, "c": 1, "d": 3}) == {"a": 3, "b": 1.5, "c": 1.5, "d": 0}
    assert places_problem({"a": 0, "b": 2}, ["a", "b"]) is not None  # not ranks
    assert places_problem({"a": 0, "b": 0}, ["a", "b"]) is None  # a tie
    assert places_problem({"a": 0}, ["a", "b"]) is not None


def test_a_result_is_refused_when_it_does_not_fit_its_table() -> None:
    tournament = swiss(4, size=2)
    tournament.start(at=T0)
    paired = tournament.pair_next_round(at=T0)
    assert paired is not None
    game_id = paired["tables"][0]["game_id"]
    a, b = paired["tables"][0]["players"]
    version = tournament.version
    with pytest.raises(InvalidRequest):
        tournament.record_result(game_id, {a: 0, "p9": 1}, HASH, T0)
    with pytest.raises(TournamentNotReady):
        tournament.record_result(str(uuid.uuid4()), {a: 0, b: 1}, HASH, T0)
    assert tournament.version == version
    tournament.record_result(game_id, {a: 0, b: 1}, HASH, T0)
    with pytest.raises(TournamentNotReady):  # one result per table
        tournament.record_result(game_id, {a: 1, b: 0}, HASH, T0)


def test_an_aborted_table_gives_everyone_nothing_and_counts_no_game() -> None:
    tournament = swiss(2, size=2, rounds=1)
    tournament.start(at=T0)
    paired = tournament.pair_next_round(at=T0)
    assert paired is not None
    tournament.record_result(paired["tables"][0]["game_id"], {}, HASH, T0, aborted=True)
    assert all(row["points"] == 0 and row["games"] == 0 for row in tournament.standings())
    assert tournament.finish_reason == "completed"


def test_swiss_tie_breaks_buchholz_then_wins_then_rating() -> None:
    tournament = swiss(4, size=2, rounds=2)
    tournament.start(at=T0)
    play_round(tournament)
    play_round(tournament)
    standings = tournament.standings()
    keys = [
        (-r["points"], -r["buchholz"], -r["wins"], -r["rating"], r["registered"]) for r in standings
    ]
    assert keys == sorted(keys)
    # After 2 rounds: p1 beat p2 and p3 (2 points), one player lost twice.
    assert standings[0]["handle"] == "p1" and standings[0]["points"] == 2


# ------------------------------------------------------------------------------ arena
def test_arena_seats_the_longest_waiting_with_the_closest_then_late_joiners() -> None:
    tournament = arena(5, size=2)
    tournament.start(at=T0)
    first = tournament.seat_next_table(at=T0)
    assert first is not None and first["players"] == ["a1", "a2"]  # a2: closest rating to a1
    second = tournament.seat_next_table(at=T0)
    assert second is not None and sorted(second["players"]) == ["a3", "a4"]
    assert tournament.seat_next_table(at=T0) is None  # a5 waits alone
    assert tournament.waiting() == ["a5"]
    assert first["game_id"] == str(uuid.uuid5(TABLE_NAMESPACE, f"{tournament.id}/arena/0"))
    tournament.register("late", 40.0, at=T0 + timedelta(minutes=1))  # an arena takes late joiners
    third = tournament.seat_next_table(at=T0 + timedelta(minutes=1))
    assert third is not None and third["players"] == ["a5", "late"]


def test_arena_a_win_after_two_wins_in_a_row_counts_double() -> None:
    tournament = arena(2, size=2)
    tournament.start(at=T0)
    gained = []
    for minute in range(4):
        at = T0 + timedelta(minutes=minute)
        table = tournament.seat_next_table(at=at)
        assert table is not None
        tournament.record_result(table["game_id"], {"a1": 0, "a2": 1}, HASH, at, at=at)
        gained.append(next(r["points"] for r in tournament.standings() if r["handle"] == "a1"))
    assert gained == [1, 2, 4, 6]  # the third and fourth wins in a row count double


def test_arena_pause_resume_and_the_window() -> None:
    tournament = arena(3, size=2, minutes=5)
    tournament.start(at=T0)
    tournament.pause("a1", at=T0)
    table = tournament.seat_next_table(at=T0)
    assert table is not None and "a1" not in table["players"]
    with pytest.raises(TournamentNotReady):
        tournament.pause("a1")
    tournament.resume("a1", at=T0)
    assert tournament.waiting() == ["a1"]
    late = T0 + timedelta(minutes=5)
    assert tournament.ends_at == "2026-03-01T12:05:00.000000Z"
    assert tournament.seat_next_table(at=late) is None  # the window closed: no new table
    with pytest.raises(TournamentFinished):
        tournament.register("late", at=late)
    assert tournament.finish_due(late) is None  # a game under way finishes and counts
    tournament.record_result(
        table["game_id"], dict.fromkeys(table["players"], 0), HASH, late, at=late
    )
    assert tournament.status == "finished" and tournament.finish_reason == "completed"
    with pytest.raises(InvalidRequest):
        swiss(2).pause("p1")


def test_an_arena_seats_at_most_its_tables_then_lets_the_window_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past MAX_ARENA_TABLES (here 2) players wait, however many: the history stays within
    what an export audits (MAX_LINES), and a replay seats exactly what was seated."""
    monkeypatch.setattr(tournament_module, "MAX_ARENA_TABLES", 2)
    tournament = arena(4, size=2, minutes=5)
    tournament.start(at=T0)
    tables = [tournament.seat_next_table(at=T0) for _ in range(2)]
    for table in tables:
        assert table is not None
        seat_order_wins(tournament, table["game_id"])
    assert len(tournament.waiting()) == 4 and not tournament.seats_more()
    assert tournament.seat_next_table(at=T0 + timedelta(minutes=1)) is None
    late = T0 + timedelta(minutes=5)
    assert tournament.finish_due(late) == "completed"
    tournament.finish("completed", at=late)
    again = replayed(tournament.collect_events())
    assert again is not None and again.as_json() == tournament.as_json()


def test_an_arena_that_never_seated_a_table_closes_as_window_closed() -> None:
    tournament = arena(1, size=2, minutes=1)
    tournament.register("b1", at=T0)
    tournament.start(at=T0)
    tournament.pause("b1", at=T0)
    late = T0 + timedelta(minutes=2)
    with pytest.raises(TournamentNotReady):
        tournament.finish("completed", at=late)
    assert tournament.finish_due(late) == "window_closed"
    tournament.finish("window_closed", at=late)
    assert tournament.finish_reason == "window_closed"


def test_cancel_at_any_time_and_nothing_after() -> None:
    tournament = swiss(3)
    with pytest.raises(TournamentNotReady):
        tournament.finish("completed")
    tournament.finish("cancelled")
    with pytest.raises(TournamentFinished):
        tournament.start()


def test_only_one_its_creator_was_to_start_is_abandoned_once_idle() -> None:
    """``abandoned`` is due IDLE after the last event of a tournament with no planned start,
    never before, and never for one with a start planned (it starts then); it is refused
    (not due) otherwise, as the audit replays it."""
    waiting = swiss(3)
    last = waiting.modified_on
    assert waiting.finish_due(last + IDLE - timedelta(seconds=1)) is None
    with pytest.raises(TournamentNotReady):
        waiting.finish("abandoned", last + IDLE - timedelta(seconds=1))
    assert waiting.finish_due(last + IDLE) == "abandoned"
    waiting.finish("abandoned", last + IDLE)
    assert (waiting.status, waiting.finish_reason) == ("finished", "abandoned")
    again = replayed(waiting.collect_events())
    assert again is not None and again.as_json() == waiting.as_json()
    planned = swiss(3, starts_at=T0 + timedelta(days=29))
    assert planned.finish_due(T0 + 10 * IDLE) is None


# ------------------------------------------------------------------------------ the views
def test_as_json_is_the_contract_body_and_replays_the_same() -> None:
    tournament = swiss(3, size=3, rounds=1, rated=True)
    tournament.start(at=T0)
    play_round(tournament)
    body = tournament.as_json()
    for key in (
        "id", "name", "kind", "status", "players", "rounds", "standings", "rules",
        "players_per_table", "rounds_planned", "minutes", "clock", "rated", "starts_at",
        "creator", "finish_reason",
    ):  # fmt: skip
        assert key in body
    assert body["rounds"][0]["tables"][0]["result"]["places"]
    assert {"rank", "handle", "points", "games"} <= set(body["standings"][0])
    again = replayed(tournament.collect_events())
    assert again is not None and again.as_json() == body
