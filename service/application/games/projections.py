"""The views across games that answer list queries: the game listing and lobby
(``GET /v1/games``) and the solitaire leaderboard (``GET /v1/solitaire/leaderboard``).

Each is a ``View`` kept in tables of the event store's database and moved on once per event by
``service.persistence.views.Views`` (which says how: tracking, exactly once, rebuilds). This module
says only what each view holds and how each event changes it, in SQL that runs on SQLite and
PostgreSQL alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from eventsourcing.utils import get_topic

from domain.game import Game, format_at, parse_at
from service.application.aggregates import IMPORT_TOPICS, ImportedGame
from service.persistence.sqlite import in_chunks
from service.persistence.views import Head, Sql, View, Views

IMPORTED: type[Any] = ImportedGame.Recorded  # type: ignore[attr-defined]
STARTED = get_topic(Game.TurnOrderDecided)
FINISHED = get_topic(Game.GameFinished)


def _topics(*classes: type[Any]) -> tuple[str, ...]:
    return (*(get_topic(cls) for cls in classes), *IMPORT_TOPICS)


def _waited(status: str, created_at: str, now: datetime) -> int | None:
    """How long a lobby has waited for its players, in whole seconds; None once it started."""
    if status != "waiting":
        return None
    return max(0, int((now - parse_at(created_at)).total_seconds()))


class GameList(View):
    """Every game with its status and seats, newest first (by its place in the log)."""

    name = "games"
    version = 1
    topics = _topics(
        Game.GameCreated, Game.SeatJoined, Game.SeatLeft, Game.TurnOrderDecided, Game.GameFinished
    )
    by_head = frozenset({STARTED})  # a start is its kind alone
    tables = {  # noqa: RUF012 (the View's declaration)
        "games": [
            "CREATE TABLE IF NOT EXISTS {games} (game_id TEXT PRIMARY KEY, "
            "seq BIGINT NOT NULL, created_at TEXT NOT NULL, status TEXT NOT NULL, "
            "players TEXT NOT NULL, open_seats INTEGER NOT NULL, dice TEXT NOT NULL, "
            "rules TEXT NOT NULL, winner INTEGER, imported INTEGER NOT NULL, "
            "rematch INTEGER NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {games}_seq ON {games} (seq)",
            "CREATE INDEX IF NOT EXISTS {games}_status ON {games} (status, seq)",
            "CREATE INDEX IF NOT EXISTS {games}_open ON {games} (open_seats, seq)",
        ],
        # Imported games' markers, which may be read before the game's creation.
        "imports": ["CREATE TABLE IF NOT EXISTS {imports} (game_id TEXT PRIMARY KEY)"],
    }

    COLUMNS = (
        *("game_id", "seq", "created_at", "status", "players", "open_seats", "dice", "rules"),
        *("winner", "imported", "rematch"),
    )

    def apply(self, sql: Sql, prepared: list[tuple[int, Any]]) -> None:
        """The batch's events folded into their games' rows in memory, each row then written
        once: a rebuild's page (``PAGE`` events) holds most of its games' creations, starts and
        ends, where a statement and a read an event cost ~40 µs each."""
        keyed = [(seq, self._key(event), event) for seq, event in prepared]
        keys = sorted({key for _, key, _ in keyed})
        rows: dict[str, dict[str, Any]] = {}  # the batch's games, as they stand
        imports: set[str] = set()  # imported games' markers, before the batch and in it
        for chunk, marks in in_chunks(keys):
            for row in sql.all(f"SELECT * FROM {{games}} WHERE game_id IN ({marks})", chunk):
                rows[row["game_id"]] = {**row, "players": json.loads(row["players"])}
            found = sql.all(f"SELECT game_id FROM {{imports}} WHERE game_id IN ({marks})", chunk)
            imports.update(row["game_id"] for row in found)
        stored, marked, changed = set(rows), set(imports), set()
        for seq, key, event in keyed:
            if self._fold(rows, imports, seq, key, event):
                changed.add(key)
        sql.many("INSERT INTO {imports} (game_id) VALUES (?)", [[key] for key in imports - marked])
        written = [{**rows[key], "players": json.dumps(rows[key]["players"])} for key in changed]
        changes = ("status", "players", "open_seats", "winner", "imported")
        sql.many(
            f"UPDATE {{games}} SET {', '.join(c + ' = ?' for c in changes)} WHERE game_id = ?",
            [[r[c] for c in (*changes, "game_id")] for r in written if r["game_id"] in stored],
        )
        sql.many(
            f"INSERT INTO {{games}} ({', '.join(self.COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(self.COLUMNS))})",
            [[r[c] for c in self.COLUMNS] for r in written if r["game_id"] not in stored],
        )

    @staticmethod
    def _key(event: Any) -> str:
        return str(event.game_id if isinstance(event, IMPORTED) else event.originator_id)

    @staticmethod
    def _open_seats(status: str, players: list[Any], imported: bool, rematch: bool) -> int:
        """Seats anyone may take: only in a lobby still waiting; none in an imported game (it
        is read-only), nor in a rematch (its seats are kept for the players of the game
        before)."""
        if imported or rematch or status != "waiting":
            return 0
        return sum(1 for p in players if p is None)

    def _fold(
        self, rows: dict[str, dict[str, Any]], imports: set[str], seq: int, key: str, event: Any
    ) -> bool:
        """The event of game ``key`` applied to its row in ``rows`` (none: the game has none, or
        not yet): whether it changed a row."""
        row = rows.get(key)
        if isinstance(event, IMPORTED):  # the marker, saved with the imported game's events
            imports.add(key)
            if row is None:
                return False
            row.update(imported=1, open_seats=0)
            return True
        if isinstance(event, Game.GameCreated):
            if row is not None:
                return False
            players = list(event.players) if event.players else [None] * event.seats
            imported = key in imports
            rematch = event.rematch_of is not None
            rows[key] = {
                "game_id": key,
                "seq": seq,
                "created_at": format_at(event.timestamp),
                "status": "waiting",
                "players": players,
                "open_seats": self._open_seats("waiting", players, imported, rematch),
                "dice": event.dice,
                "rules": json.dumps(dict(event.rules), sort_keys=True),
                "winner": None,
                "imported": int(imported),
                "rematch": int(rematch),
            }
            return True
        if row is None:
            return False
        players = row["players"]
        if isinstance(event, Game.SeatJoined):
            players[event.seat] = event.name
        elif isinstance(event, Game.SeatLeft):
            players[event.seat] = None
        elif isinstance(event, Head) and event.topic == STARTED:
            row["status"] = "in_progress"
        elif isinstance(event, Game.GameFinished):
            row["status"] = "finished"
            if event.winner is not None:
                row["winner"] = event.winner
        row["open_seats"] = self._open_seats(
            row["status"], players, bool(row["imported"]), bool(row["rematch"])
        )
        return True

    def query(
        self,
        views: Views,
        *,
        status: str | None = None,
        open_only: bool = False,
        offset: int = 0,
        limit: int,
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of the games that match, newest first, and how many match in all."""
        where, params = [], []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if open_only:
            where.append("open_seats > 0")
        clause = f" WHERE {' AND '.join(where)}" if where else ""

        def run(sql: Sql) -> tuple[list[Any], int]:
            total = sql.one("SELECT count(*) AS n FROM {games}" + clause, params)["n"]
            rows = sql.all(
                "SELECT * FROM {games}" + clause + " ORDER BY seq DESC LIMIT ? OFFSET ?",
                [*params, limit, offset],
            )
            return rows, int(total)

        rows, total = views.read(self, run)
        now = datetime.now(UTC)
        return [self._row(row, now) for row in rows], total

    @staticmethod
    def _row(row: Any, now: datetime) -> dict[str, Any]:
        game = {
            "id": row["game_id"],
            "status": row["status"],
            "created_at": row["created_at"],
            "players": json.loads(row["players"]),
            "open_seats": row["open_seats"],
            "dice": row["dice"],
            "rules": json.loads(row["rules"]),
            "winner": row["winner"],
            "waited_seconds": _waited(row["status"], row["created_at"], now),
        }
        if row["imported"]:  # as in its state: present only on an imported game
            game["imported"] = True
        return game


@dataclass(frozen=True)
class RuleSet:
    """The rules a leaderboard ranks within: results under other rules are not comparable."""

    mode: str
    dice_faces: int = 6
    steep_hill: bool = False


class SolitaireBest(View):
    """The best solitaire games per rule set: fewest turns, earliest first on ties.

    Honest (contract 1.1): only games played to the end on this server, by a person, with server
    dice — never manual dice (anyone could choose them), never an imported game (the same game
    could be imported again and again), never a bot seat."""

    name = "solitaire"
    version = 1
    topics = _topics(Game.GameCreated, Game.GameFinished)
    _rules = "mode TEXT NOT NULL, dice_faces INTEGER NOT NULL, steep_hill INTEGER NOT NULL"
    tables = {  # noqa: RUF012 (the View's declaration)
        "candidates": [
            "CREATE TABLE IF NOT EXISTS {candidates} (game_id TEXT PRIMARY KEY, "
            f"{_rules}, player TEXT NOT NULL)"
        ],
        "results": [
            "CREATE TABLE IF NOT EXISTS {results} (game_id TEXT PRIMARY KEY, "
            f"{_rules}, player TEXT NOT NULL, turns INTEGER NOT NULL, rating TEXT NOT NULL, "
            "finished_at TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {results}_rank ON {results} "
            "(mode, dice_faces, steep_hill, turns, finished_at, game_id)",
        ],
        "imports": ["CREATE TABLE IF NOT EXISTS {imports} (game_id TEXT PRIMARY KEY)"],
    }

    def apply(self, sql: Sql, prepared: list[tuple[int, Any]]) -> None:
        for _, event in prepared:
            self._apply(sql, event)

    def _apply(self, sql: Sql, event: Any) -> None:
        if isinstance(event, IMPORTED):  # the marker, saved with the imported game's events
            key = str(event.game_id)
            sql.execute(
                "INSERT INTO {imports} (game_id) VALUES (?) ON CONFLICT (game_id) DO NOTHING",
                [key],
            )
            sql.execute("DELETE FROM {candidates} WHERE game_id = ?", [key])
            sql.execute("DELETE FROM {results} WHERE game_id = ?", [key])
            return
        key = str(event.originator_id)
        if isinstance(event, Game.GameCreated):
            mode = event.rules.get("solitaire")
            bots = getattr(event, "bots", None)
            if not (mode and event.players and event.dice == "server" and not bots):
                return
            if sql.one("SELECT 1 FROM {imports} WHERE game_id = ?", [key]) is not None:
                return
            sql.execute(
                "INSERT INTO {candidates} (game_id, mode, dice_faces, steep_hill, player) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (game_id) DO NOTHING",
                [
                    key,
                    mode,
                    int(event.rules["dice_faces"]),
                    int(bool(event.rules["steep_hill"])),
                    event.players[0],
                ],
            )
        elif isinstance(event, Game.GameFinished):
            found = sql.one(
                "SELECT mode, dice_faces, steep_hill, player FROM {candidates} WHERE game_id = ?",
                [key],
            )
            if found is None:
                return
            sql.execute("DELETE FROM {candidates} WHERE game_id = ?", [key])
            if event.winner == 0 and event.rating is not None:
                sql.execute(
                    "INSERT INTO {results} (game_id, mode, dice_faces, steep_hill, player, "
                    "turns, rating, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (game_id) DO NOTHING",
                    [
                        key,
                        found["mode"],
                        found["dice_faces"],
                        found["steep_hill"],
                        found["player"],
                        event.turns,
                        event.rating,
                        format_at(event.timestamp),
                    ],
                )

    def best(self, views: Views, rules: RuleSet, limit: int) -> list[dict[str, Any]]:
        def run(sql: Sql) -> list[Any]:
            return sql.all(
                "SELECT * FROM {results} WHERE mode = ? AND dice_faces = ? AND steep_hill = ? "
                "ORDER BY turns, finished_at, game_id LIMIT ?",
                [rules.mode, rules.dice_faces, int(rules.steep_hill), limit],
            )

        return [
            {
                "game_id": row["game_id"],
                "player": row["player"],
                "mode": row["mode"],
                "dice_faces": row["dice_faces"],
                "steep_hill": bool(row["steep_hill"]),
                "turns": row["turns"],
                "rating": row["rating"],
                "date": row["finished_at"],
                "audit": f"/v1/games/{row['game_id']}/audit",
                "rank": rank,
            }
            for rank, row in enumerate(views.read(self, run), start=1)
        ]
