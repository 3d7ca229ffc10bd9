"""Tournaments played in memory to their end (issue #45): each table's game played by the rule
of 28 with seeded dice, its seats bound to the table's accounts, and its result recorded as the
service records it; the tournament's events and the tables' game exports, for the audit's tests."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from domain import strategies
from domain.audit import export_header, replayed
from domain.commands import Move, NewGame, Roll, Stop
from domain.game import Game, event_records
from domain.position import Position
from domain.ratings import finish_of, ranks
from domain.tournament import Tournament

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def table_game(game_id: str, handles: Sequence[str], seed: int) -> list[dict[str, Any]]:
    """A whole game at a table, its seats bound to the table's accounts, played by the rule of
    28 with seeded manual dice: its events as served."""
    rng = random.Random(seed)
    game = Game.start(
        uuid.UUID(game_id),
        NewGame(
            players=[h.upper() for h in handles],
            accounts=list(handles),
            dice="manual",
            first_player=0,
        ),
    )
    choose = strategies.get("rule-of-28").choose
    for _ in range(20_000):
        if game.status != "in_progress":
            break
        position = Position.from_game(game)
        action = choose(position, rng)
        if isinstance(action, Roll):
            game.roll(position.seat, dice=[rng.randint(1, 6) for _ in range(4)])
        elif isinstance(action, Move):
            game.move(position.seat, action.sums)
        elif isinstance(action, Stop):
            game.stop(position.seat)
    return event_records(game.collect_events())


def record_game(
    tournament: Tournament, game_id: str, games: dict[str, Any], seed: int, at: datetime
) -> None:
    """Play the table's game and record its result as the service would."""
    table = tournament.table_of(game_id)
    assert table is not None
    records = table_game(game_id, table["players"], seed)
    game = replayed(records)
    assert game is not None and game.status == "finished"
    resigned = [r["data"]["seat"] for r in records if r["type"] == "PlayerResigned"]
    places = ranks(finish_of(game, resigned))
    assert places is not None
    tournament.record_result(
        game_id,
        {h: places[seat] for seat, h in enumerate(table["players"])},
        records[-1]["hash"],
        records[-1]["at"],
        at=at,
    )
    games[game_id] = (export_header(game_id), records)


def finished_swiss(
    players: int = 9, size: int = 3, rounds: int = 3
) -> tuple[Tournament, dict[str, Any]]:
    tournament = Tournament.create(
        name="Audit cup", kind="swiss", rules={}, players_per_table=size, rounds=rounds,
        clock={"turn_seconds": 60}, creator="host", at=T0, rated=False,
    )  # fmt: skip
    for i in range(players):
        tournament.register(f"bot{i}", 20.0 + (i * 7) % 10, at=T0)
    tournament.start(at=T0)
    games: dict[str, Any] = {}
    seed = 0
    while tournament.status == "started":
        paired = tournament.pair_next_round(at=T0)
        assert paired is not None
        for table in paired["tables"]:
            seed += 1
            record_game(tournament, table["game_id"], games, seed, T0)
    return tournament, games


def finished_arena(players: int = 6, size: int = 2) -> tuple[Tournament, dict[str, Any]]:
    tournament = Tournament.create(
        name="Audit arena", kind="arena", rules={}, players_per_table=size, minutes=3,
        clock={"turn_seconds": 30}, creator="host", at=T0,
    )  # fmt: skip
    for i in range(players):
        tournament.register(f"ar{i}", 25.0 + i, at=T0)
    tournament.start(at=T0)
    games: dict[str, Any] = {}
    now, seed = T0, 100
    tournament.pause("ar5", at=now)
    while tournament.status == "started":
        while (table := tournament.seat_next_table(at=now)) is not None:
            seed += 1
            record_game(tournament, table["game_id"], games, seed, now)
            now += timedelta(seconds=20)
        if seed == 104:
            tournament.resume("ar5", at=now)
        now += timedelta(seconds=20)
        reason = tournament.finish_due(now)
        if reason:
            tournament.finish(reason, at=now)
    return tournament, games
