"""Invariants of the tournament rules (issue #45), over many random tournaments (hypothesis).

docs/tournaments.md names these tests beside the promises they hold."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from itertools import combinations
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from domain.tournament import Pair, Tournament, split_tables, table_points

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HASH = "cd" * 32


def _places(draw: st.DrawFn, players: Sequence[str]) -> dict[str, int]:
    """Random ranks: a random order, with random ties (as domain.ratings.ranks gives them)."""
    order = draw(st.permutations(list(players)))
    scores = [draw(st.integers(0, 2)) for _ in order]  # equal scores tie
    return {h: sum(1 for s in scores if s > scores[i]) for i, h in enumerate(order)}


@st.composite
def swiss_runs(draw: st.DrawFn) -> tuple[Tournament, list[dict[str, Any]]]:
    """A Swiss tournament played to its end with random results and withdrawals; each round
    with the state just before it was paired (byes had, the active players)."""
    size = draw(st.integers(2, 4))
    count = draw(st.integers(2, 11))
    rounds = draw(st.integers(1, 5))
    tournament = Tournament.create(
        name="Prop", kind="swiss", rules={}, players_per_table=size, rounds=rounds,
        clock={"turn_seconds": 60}, creator="host", at=T0,
    )  # fmt: skip
    for i in range(count):
        tournament.register(f"p{i}", float(draw(st.integers(20, 30))), at=T0)
    tournament.start(at=T0)
    seen: list[dict[str, Any]] = []
    while tournament.status == "started":
        if draw(st.integers(0, 5)) == 0 and tournament.players:
            tournament.withdraw(draw(st.sampled_from(tournament.players)), at=T0)
        scores = tournament.scores()
        before = {
            "active": list(tournament.players),
            "byes": {tournament.entrants[k]["handle"]: s["byes"] for k, s in scores.items()},
        }
        paired = tournament.pair_next_round(at=T0)
        if paired is None:
            break
        seen.append({**before, "round": paired})
        for table in paired["tables"]:
            aborted = draw(st.integers(0, 9)) == 0
            places = {} if aborted else _places(draw, table["players"])
            tournament.record_result(table["game_id"], places, HASH, T0, aborted, at=T0)
    return tournament, seen


@settings(max_examples=150, deadline=None)
@given(swiss_runs())
def test_swiss_every_active_player_once_per_round_byes_spread(
    run: tuple[Tournament, list[dict[str, Any]]],
) -> None:
    tournament, rounds = run
    assert tournament.status == "finished"
    for seen in rounds:
        paired, active, byes_had = seen["round"], seen["active"], seen["byes"]
        seated = [h for t in paired["tables"] for h in t["players"]]
        # Nobody at two tables; everybody active seated or given a bye, and nobody else.
        assert len(seated) == len(set(seated))
        assert sorted(seated + paired["byes"]) == sorted(active)
        # Nobody gets a bye while an active player without it has had fewer.
        for bye in paired["byes"]:
            others = [h for h in active if h not in paired["byes"]]
            assert all(byes_had[h] >= byes_had[bye] for h in others)
        sizes = {len(t["players"]) for t in paired["tables"]}
        assert sizes == {tournament.players_per_table} or (
            len(paired["tables"]) == 1 and len(active) < tournament.players_per_table
        )


@settings(max_examples=150, deadline=None)
@given(swiss_runs())
def test_points_per_table_are_constant_and_standings_sorted(
    run: tuple[Tournament, list[dict[str, Any]]],
) -> None:
    tournament, _ = run
    for game_id, result in tournament.results.items():
        m = len(tournament.tables[tournament.table_index[game_id]]["players"])
        if not result["aborted"]:
            assert sum(table_points(result["places"]).values()) == m * (m - 1) / 2
    standings = tournament.standings()
    assert sorted(r["handle"] for r in standings) == sorted(
        e["handle"] for e in tournament.entrants.values()
    )
    keys = [tournament.standing_key(r) for r in standings]
    assert keys == sorted(keys)
    assert [r["rank"] for r in standings] == list(range(1, len(standings) + 1))
    assert (
        sum(r["points"] for r in standings)
        == sum(
            sum(table_points(res["places"]).values())
            for res in tournament.results.values()
            if not res["aborted"]
        )
        + sum(r["byes"] for r in standings) * (tournament.players_per_table - 1) / 2
    )


@settings(max_examples=100, deadline=None)
@given(swiss_runs())
def test_the_same_events_give_the_same_tables(run: tuple[Tournament, list[dict[str, Any]]]) -> None:
    """Pairing is deterministic: replaying the commands in a fresh aggregate with the same id
    pairs every round alike (the audit relies on it)."""
    tournament, _ = run
    again = Tournament.create(
        name="Prop", kind="swiss", rules={}, players_per_table=tournament.players_per_table,
        rounds=tournament.rounds_planned, clock={"turn_seconds": 60}, creator="host",
        id=tournament.id, at=T0,
    )  # fmt: skip
    for event in tournament.collect_events()[1:]:
        kind, data = type(event).__name__, event.__dict__
        if kind == "Registered":
            again.register(data["handle"], data["rating"], at=T0)
        elif kind == "Withdrawn":
            again.withdraw(data["handle"], data["reason"], at=T0)
        elif kind == "Started":
            again.start(at=T0)
        elif kind == "RoundPaired":
            assert again.pair_next_round(at=T0) == {
                "number": data["number"],
                "tables": [{**t, "result": None} for t in data["tables"]],
                "byes": data["byes"],
            }
        elif kind == "ResultRecorded":
            again.record_result(data["game_id"], data["places"], HASH, T0, data["aborted"], at=T0)
        elif kind == "Finished" and again.status != "finished":  # for want of players
            assert again.pair_next_round(at=T0) is None
    assert again.as_json() == tournament.as_json()


# ------------------------------------------------------------------------------ brute force
def partitions(players: Sequence[str], size: int) -> Iterator[list[list[str]]]:
    """Every split into tables of ``size``, in the top-down order (head + companions)."""
    if not players:
        yield []
        return
    head, rest = players[0], players[1:]
    for companions in combinations(rest, size - 1):
        left = [p for p in rest if p not in companions]
        for tail in partitions(left, size):
            yield [[head, *companions], *tail]


def cost(split: list[list[str]], met: dict[Pair, int]) -> int:
    return sum(met.get(frozenset(p), 0) for t in split for p in combinations(t, 2))


@st.composite
def meetings(draw: st.DrawFn) -> tuple[list[str], int, dict[Pair, int]]:
    size = draw(st.integers(2, 4))
    tables = draw(st.integers(1, 9 // size if size > 2 else 4))
    players = [f"q{i}" for i in range(size * tables)]
    met = {
        frozenset(pair): draw(st.integers(0, 2))
        for pair in combinations(players, 2)
        if draw(st.booleans())
    }
    return players, size, met


@settings(max_examples=300, deadline=None)
@given(meetings())
def test_repeat_meetings_are_minimal_against_a_brute_force(
    case: tuple[list[str], int, dict[Pair, int]],
) -> None:
    players, size, met = case
    found = split_tables(players, size, met)
    assert sorted(p for t in found for p in t) == sorted(players)
    every = list(partitions(players, size))
    best = min(cost(s, met) for s in every)
    assert cost(found, met) == best
    assert found == next(s for s in every if cost(s, met) == best)  # the first such, top-down


# ------------------------------------------------------------------------------ arena
@settings(max_examples=150, deadline=None)
@given(st.integers(2, 4), st.integers(2, 9), st.data())
def test_arena_nobody_sits_at_two_open_tables(size: int, count: int, data: st.DataObject) -> None:
    tournament = Tournament.create(
        name="Arena", kind="arena", rules={}, players_per_table=size, minutes=30,
        clock={"turn_seconds": 30}, creator="host", at=T0,
    )  # fmt: skip
    for i in range(count):
        tournament.register(f"a{i}", float(i % 4) + 24, at=T0)
    tournament.start(at=T0)
    now = T0
    for _ in range(data.draw(st.integers(1, 40))):
        now += timedelta(seconds=data.draw(st.integers(0, 90)))
        action = data.draw(st.sampled_from(["seat", "seat", "result", "result", "pause", "leave"]))
        if tournament.status != "started":
            break
        if action == "seat":
            while tournament.seat_next_table(at=now) is not None:
                pass
        elif action == "result" and tournament.open_tables():
            game_id = data.draw(st.sampled_from(tournament.open_tables()))
            table = tournament.table_of(game_id)
            assert table is not None
            order = data.draw(st.permutations(table["players"]))
            tournament.record_result(
                game_id, {h: i for i, h in enumerate(order)}, HASH, now, at=now
            )
        elif action == "pause" and tournament.players:
            handle = data.draw(st.sampled_from(tournament.players))
            entrant = tournament.entrant(handle)
            assert entrant is not None
            (tournament.resume if entrant["paused"] else tournament.pause)(handle, at=now)
        elif action == "leave" and tournament.players:
            tournament.withdraw(data.draw(st.sampled_from(tournament.players)), at=now)
        seated = [h for g in tournament.open_tables() for h in tournament.table_of(g)["players"]]  # type: ignore[index]
        assert len(seated) == len(set(seated))
        assert not set(seated) & set(tournament.waiting())
        withdrawn = {e["handle"] for e in tournament.entrants.values() if e["withdrawn"]}
        paused = {e["handle"] for e in tournament.entrants.values() if e["paused"]}
        assert not (withdrawn | paused) & set(tournament.waiting())
        # Seating goes on while a table's worth wait (in the window).
        if action == "seat" and tournament.window_open(now):
            assert len(tournament.waiting()) < size
    ids = [t["game_id"] for t in tournament.tables]
    assert len(ids) == len(set(ids))
