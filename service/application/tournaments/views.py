"""The tournaments' view in the store: the listing (with when each is next due to the scheduler),
the tables by game id, and the standings, one row per tournament and player.

Like every view (service/persistence/views.py) it is moved on once per event from the log. A
batch that touches a tournament reads the tournament as it stands (its events are few: tens to
hundreds) and writes its row, its tables and its standings afresh; a batch that holds the end of
a table's game marks its tournament due at once. So the scheduler's chore, at each poll, reads
the tournaments due by now (one indexed query) and nothing else when nothing is due: a Swiss
waits on its tables' games, an arena on its window's close or on a player waiting, a tournament
not started on its start time (or, its creator to start it, on ``IDLE`` after its last event).

``due_at`` is in epoch microseconds; NULL: nothing is due until an event says so.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.utils import get_topic

from domain.game import Game, parse_at
from domain.tournament import IDLE, STANDINGS_CHANGE, Tournament
from service.application.store import Store
from service.persistence.sqlite import in_chunks
from service.persistence.views import Sql, View

log = logging.getLogger("cantstop.tournaments")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
NOW = 0  # a due time that is always past: look at it at the next poll

TOURNAMENT_TOPICS = tuple(
    sorted(
        get_topic(cls)
        for cls in vars(Tournament).values()
        if isinstance(cls, type) and issubclass(cls, Tournament.Event)
    )
)
GAME_ENDS = (get_topic(Game.GameFinished), get_topic(Game.GameAbandoned))


def micros(at: datetime) -> int:
    return (at - EPOCH) // MICROSECOND


def at_micros(value: int) -> datetime:
    return EPOCH + value * MICROSECOND


def due_of(tournament: Any) -> int | None:
    """When the scheduler must next look at the tournament (epoch µs), None: at its next event
    (a table's game ending is one: ``GAME_ENDS``)."""
    status = tournament.status
    if status == "finished":
        return None
    if status == "created":
        starts = tournament.starts_at
        if starts is None:  # its creator starts it; untouched for IDLE, it is abandoned
            return micros(tournament.modified_on + IDLE)
        return micros(parse_at(starts))
    open_tables = tournament.open_tables()
    if tournament.kind == "swiss":
        return NOW if not open_tables else None
    ends = parse_at(tournament.ends_at)
    if datetime.now(UTC) >= ends:  # the window closed: finish once the last table ends
        return NOW if not open_tables else None
    if len(tournament.waiting()) >= tournament.players_per_table and tournament.seats_more():
        return NOW
    return micros(ends)  # then to finish (or, with tables open, when the last ends)


class TournamentsView(View):
    """Every tournament's row, tables and standings."""

    name = "tournaments"
    version = 1
    topics = (*TOURNAMENT_TOPICS, *GAME_ENDS)
    tables = {  # noqa: RUF012 (the View's declaration)
        "list": [
            "CREATE TABLE IF NOT EXISTS {list} (tournament_id TEXT PRIMARY KEY, "
            "name TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL, starts_at TEXT, "
            "creator TEXT NOT NULL, players INTEGER NOT NULL, created_seq BIGINT NOT NULL, "
            "seq BIGINT NOT NULL, due_at BIGINT)",
            "CREATE INDEX IF NOT EXISTS {list}_status ON {list} (status, created_seq)",
            "CREATE INDEX IF NOT EXISTS {list}_created ON {list} (created_seq)",
            "CREATE INDEX IF NOT EXISTS {list}_due ON {list} (due_at)",
        ],
        "tables": [
            "CREATE TABLE IF NOT EXISTS {tables} (game_id TEXT PRIMARY KEY, "
            "tournament_id TEXT NOT NULL, ended INTEGER NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {tables}_tournament ON {tables} (tournament_id)",
        ],
        "standings": [
            "CREATE TABLE IF NOT EXISTS {standings} (tournament_id TEXT NOT NULL, "
            "handle_key TEXT NOT NULL, rank INTEGER NOT NULL, entry TEXT NOT NULL, "
            "PRIMARY KEY (tournament_id, handle_key))",
            "CREATE INDEX IF NOT EXISTS {standings}_handle ON {standings} (handle_key)",
        ],
    }

    def __init__(self, store: Store) -> None:
        self.store = store

    def prepare(self, items: list[Any], read: Sql) -> dict[str, Any]:
        """Each tournament the batch touched, read as it stands; the tournaments whose table's
        game ended in it."""
        touched: dict[uuid.UUID, int] = {}
        seated: dict[uuid.UUID, list[str]] = {}  # the tables the batch's events seated
        moved: set[uuid.UUID] = set()  # tournaments whose standings the batch may move
        ended: list[str] = []
        for seq, event_ in items:
            if isinstance(event_, Tournament.Event):
                key = event_.originator_id
                touched[key] = seq
                tables = seated.setdefault(key, [])
                if isinstance(event_, Tournament.RoundPaired):
                    tables.extend(str(table["game_id"]) for table in event_.tables)
                elif isinstance(event_, Tournament.TableSeated):
                    tables.append(str(event_.game_id))
                if type(event_).__name__ in STANDINGS_CHANGE:
                    moved.add(key)
            else:
                ended.append(str(event_.originator_id))
        poked: set[str] = set()
        for chunk, marks in in_chunks(ended):
            rows = read.all(
                f"SELECT tournament_id FROM {{tables}} WHERE game_id IN ({marks})", chunk
            )
            poked.update(row["tournament_id"] for row in rows)
        out: list[dict[str, Any]] = []
        for tournament_id, seq in touched.items():
            try:
                found: Any = self.store.repository.get(tournament_id)
            except AggregateNotFoundError:
                log.warning("tournaments: %s vanished", tournament_id)
                continue
            row = self.row(found, seq, seated[tournament_id], tournament_id in moved)
            open_tables = {str(g) for g in found.open_tables()} if row["due_at"] != NOW else set()
            if open_tables:  # a table whose game ended, its result not recorded yet: due now
                done = read.all(
                    "SELECT game_id FROM {tables} WHERE tournament_id = ? AND ended = 1",
                    [str(tournament_id)],
                )
                if open_tables & ({r["game_id"] for r in done} | set(ended)):
                    row["due_at"] = NOW
            out.append(row)
        return {"rows": out, "ended": ended, "poked": sorted(poked)}

    @staticmethod
    def row(tournament: Any, seq: int, tables: list[str], moved: bool) -> dict[str, Any]:
        """The tournament's listing row, the tables seated by the batch's events (each event is
        in one batch: a table is written once, not every table at every batch, which in an
        arena of thousands of tables cost thousands of statements a batch), and its standings
        if the batch may have moved them (None: kept as written)."""
        return {
            "id": str(tournament.id),
            "name": tournament.name,
            "kind": tournament.kind,
            "status": tournament.status,
            "starts_at": tournament.starts_at,
            "creator": tournament.creator,
            "players": len(tournament.players),
            "seq": seq,
            "due_at": due_of(tournament),
            "tables": tables,
            "standings": tournament.standings() if moved else None,
        }

    def apply(self, sql: Sql, prepared: dict[str, Any]) -> None:
        for row in prepared["rows"]:
            key = row["id"]
            sql.execute(
                "INSERT INTO {list} (tournament_id, name, kind, status, starts_at, creator, "
                "players, created_seq, seq, due_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (tournament_id) DO UPDATE SET status = excluded.status, "
                "players = excluded.players, seq = excluded.seq, due_at = excluded.due_at",
                [
                    key,
                    row["name"],
                    row["kind"],
                    row["status"],
                    row["starts_at"],
                    row["creator"].lower(),
                    row["players"],
                    row["seq"],
                    row["seq"],
                    row["due_at"],
                ],
            )
            for game_id in row["tables"]:
                sql.execute(
                    "INSERT INTO {tables} (game_id, tournament_id, ended) VALUES (?, ?, 0) "
                    "ON CONFLICT (game_id) DO NOTHING",
                    [game_id, key],
                )
            if row["standings"] is None:
                continue
            sql.execute("DELETE FROM {standings} WHERE tournament_id = ?", [key])
            for entry in row["standings"]:
                sql.execute(
                    "INSERT INTO {standings} (tournament_id, handle_key, rank, entry) "
                    "VALUES (?, ?, ?, ?)",
                    [key, str(entry["handle"]).lower(), int(entry["rank"]), json.dumps(entry)],
                )
        for game_id in prepared["ended"]:
            sql.execute("UPDATE {tables} SET ended = 1 WHERE game_id = ?", [game_id])
        for key in prepared["poked"]:  # a table's game ended: its result is to be recorded
            sql.execute(
                "UPDATE {list} SET due_at = ? WHERE tournament_id = ? AND status = 'started'",
                [NOW, key],
            )
