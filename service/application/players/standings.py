"""Players' views across games (contract 1.2): each account's games, and the ratings.

Both are ``View``s kept in the store (service/persistence/views.py), moved on once per event.

The ratings are a pure function of the ratings ledger (``GET /v1/ratings/ledger``): the rated
results and the operators' exclusions, numbered (``seq``) in the order this view meets them in
the log, which is fixed once they are recorded. The ratings fold the ledger in that order, so a
``seq`` never changes and nothing is ever inserted before it: a game that arrives late (another
host's clock a little behind) simply comes next, and an exclusion counts from its own place on.
``cantstop ratings LEDGER`` folds a saved ledger through the same functions
(``players.ratings``); rebuilding the view gives the same ledger and numbers to the last bit.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.utils import get_topic

from domain import ratings as order
from domain.game import Game, format_at
from service.application.aggregates import IMPORT_TOPICS, Account
from service.application.errors import ApplicationError
from service.application.games.projections import FINISHED, IMPORTED, STARTED
from service.application.games.use_cases import Games
from service.application.players.ratings import (
    RatedGame,
    Rating,
    Ratings,
    initial,
    places_of,
    ranking_of,
    rate,
    skipped,
)
from service.persistence.errors import StoreUnavailable
from service.persistence.views import Head, Sql, View, Views

MODERATION = {
    get_topic(Account.Excluded): "exclude",  # type: ignore[attr-defined]
    get_topic(Account.Reinstated): "reinstate",  # type: ignore[attr-defined]
}
LEDGER_LIMIT = (1000, 10_000)  # lines a page of the ledger holds: by default, at most
# Entries a profile's rating history holds: the account's newest (by when their games finished),
# so that a profile's size and cost stay bounded however many rated games an account plays. The
# whole of it is in the ratings ledger (GET /v1/ratings/ledger), which ``cantstop ratings`` folds.
RATING_HISTORY_LIMIT = 500


def resignations(records: Sequence[dict[str, Any]]) -> list[int]:
    """The seats that resigned, in the order they did, from a game's events as served."""
    return [int(r["data"]["seat"]) for r in records if r["type"] == "PlayerResigned"]


def rated_game(
    game: Game, records: Sequence[dict[str, Any]], game_id: str | None = None
) -> tuple[RatedGame, str] | None:
    """A finished rated game as the ratings take it, and when it finished; None for a game that
    is not rated (or not finished). Shared by the view and ``cantstop ratings`` (which replays
    an export: it names the game's id)."""
    if not game.rated or game.status != "finished":
        return None
    finished = next((r for r in records if r["type"] == "GameFinished"), None)
    if finished is None:
        return None
    accounts = [a or "" for a in game.accounts]
    places = (  # an aborted game (contract 1.3) rates nobody, as an abandoned one
        None
        if game.finish_reason == "aborted"
        else order.ranks(order.finish_of(game, resignations(records)))
    )
    pool = order.pool(game.rules, game.seats)
    key = game_id if game_id is not None else str(game.id)
    return RatedGame(key, pool, accounts, places), str(finished["at"])


def finished_hash(records: Sequence[dict[str, Any]]) -> str:
    """The hash of a finished game's last event (``GameFinished``, or the ``SeedRevealed``
    saved with it), where its ledger line is checked against its export."""
    return str(records[-1]["hash"])


@dataclass(frozen=True)
class Finished:
    game: RatedGame
    finished_at: str
    rules: dict[str, Any]
    players: int
    last_hash: str = ""


@dataclass(frozen=True)
class Moderated:
    """An operator's exclusion of an account, or its reinstatement, as the ledger shows it."""

    kind: str  # "exclude" | "reinstate"
    handle: str
    at: str
    reason: str


class RatingsView(View):
    """Every account's rating per pool, its history, the rated games they come from, and the
    ledger they are folded from."""

    name = "ratings"
    version = 2  # 2: the ledger, and exclusions
    topics = (get_topic(Game.GameFinished), *MODERATION)
    heads_only = True
    leaves_cycles = True  # openskill's objects: four cyclic a rated game
    tables = {  # noqa: RUF012 (the View's declaration)
        "games": [
            "CREATE TABLE IF NOT EXISTS {games} (game_id TEXT PRIMARY KEY, pool TEXT NOT NULL, "
            "finished_at TEXT NOT NULL, accounts TEXT NOT NULL, places TEXT)",
            "CREATE INDEX IF NOT EXISTS {games}_order ON {games} (pool, finished_at, game_id)",
        ],
        "pools": [
            "CREATE TABLE IF NOT EXISTS {pools} (pool TEXT PRIMARY KEY, rules TEXT NOT NULL, "
            "players INTEGER NOT NULL)"
        ],
        "ratings": [
            "CREATE TABLE IF NOT EXISTS {ratings} (pool TEXT NOT NULL, account TEXT NOT NULL, "
            "handle TEXT NOT NULL, mu DOUBLE PRECISION NOT NULL, sigma DOUBLE PRECISION NOT NULL, "
            "games INTEGER NOT NULL, PRIMARY KEY (pool, account))",
            "CREATE INDEX IF NOT EXISTS {ratings}_account ON {ratings} (account)",
        ],
        "history": [
            "CREATE TABLE IF NOT EXISTS {history} (account TEXT NOT NULL, pool TEXT NOT NULL, "
            "game_id TEXT NOT NULL, finished_at TEXT NOT NULL, mu DOUBLE PRECISION NOT NULL, "
            "sigma DOUBLE PRECISION NOT NULL, PRIMARY KEY (account, pool, game_id))"
        ],
        # One row per ledger line (``entry``: the line without its seq); pool NULL: moderation.
        "ledger": [
            "CREATE TABLE IF NOT EXISTS {ledger} (seq BIGINT PRIMARY KEY, pool TEXT, "
            "entry TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {ledger}_pool ON {ledger} (pool, seq)",
        ],
        "excluded": [
            "CREATE TABLE IF NOT EXISTS {excluded} (account TEXT PRIMARY KEY, seq BIGINT NOT NULL)"
        ],
    }

    def __init__(self, games: Games) -> None:
        self.games = games

    def prepare(self, items: list[Any], read: Sql) -> list[Finished | Moderated]:
        """Each finished rated game of the batch, read from the store (its last version), and
        each moderation, in the log's order."""
        found: list[Finished | Moderated] = []
        store = self.games.store
        # Each game's creation (most games are not rated), and whether a rated one was
        # imported: read for the whole batch at once.
        created = store.creations([h.originator_id for h in items if h.topic not in MODERATION])
        store.imported([game_id for game_id, game in created.items() if game.rated])
        for head in items:
            if head.topic in MODERATION:
                moderated = self._moderated(head)
                if moderated is not None:
                    found.append(moderated)
                continue
            try:
                first = created.get(head.originator_id) or store.at_creation(head.originator_id)
                if not first.rated:
                    continue
                if self.games.store.is_imported(head.originator_id):
                    continue  # not played here, and importable again and again (1.3)
                game = self.games.game(head.originator_id)
                records = self.games.history(head.originator_id)
            except ApplicationError:  # a damaged game: passed over, as views do
                continue
            rated = rated_game(game, records)
            if rated is not None:
                found.append(
                    Finished(
                        rated[0],
                        rated[1],
                        dict(game.rules),
                        game.seats,
                        finished_hash(records),
                    )
                )
        return found

    def _moderated(self, head: Any) -> Moderated | None:
        """The account as that event left it: its handle, the event's time and reason."""
        try:
            account: Any = self.games.store.repository.get(
                head.originator_id, version=head.originator_version
            )
        except AggregateNotFoundError:
            return None
        if not isinstance(account, Account):
            return None
        return Moderated(
            MODERATION[head.topic],
            account.handle,
            format_at(account.modified_on),
            account.moderation_reason,
        )

    def apply(self, sql: Sql, prepared: list[Finished | Moderated]) -> None:
        row = sql.one("SELECT coalesce(max(seq), 0) AS seq FROM {ledger}", [])
        seq = int(row["seq"]) if row is not None else 0
        for entry in prepared:
            if isinstance(entry, Moderated):
                seq += 1
                self._moderate(sql, seq, entry)
            else:
                seq = self._apply(sql, entry, seq)

    def _moderate(self, sql: Sql, seq: int, entry: Moderated) -> None:
        line = {"type": entry.kind, "handle": entry.handle, "at": entry.at, "reason": entry.reason}
        sql.execute(
            "INSERT INTO {ledger} (seq, pool, entry) VALUES (?, NULL, ?)", [seq, json.dumps(line)]
        )
        if entry.kind == "exclude":
            sql.execute(
                "INSERT INTO {excluded} (account, seq) VALUES (?, ?) "
                "ON CONFLICT (account) DO NOTHING",
                [entry.handle.lower(), seq],
            )
        else:
            sql.execute("DELETE FROM {excluded} WHERE account = ?", [entry.handle.lower()])

    def _apply(self, sql: Sql, finished: Finished, seq: int) -> int:
        """The game's row, its ledger line (a game that rates nobody has none) and, unless it
        names an excluded account, its ratings: the seq it leaves the ledger at."""
        game = finished.game
        if sql.one("SELECT 1 FROM {games} WHERE game_id = ?", [game.game_id]) is not None:
            return seq  # rated once
        sql.execute(
            "INSERT INTO {pools} (pool, rules, players) VALUES (?, ?, ?) "
            "ON CONFLICT (pool) DO NOTHING",
            [game.pool, json.dumps(finished.rules, sort_keys=True), finished.players],
        )
        sql.execute(
            "INSERT INTO {games} (game_id, pool, finished_at, accounts, places) "
            "VALUES (?, ?, ?, ?, ?)",
            [
                game.game_id,
                game.pool,
                finished.finished_at,
                json.dumps(list(game.accounts)),
                None if game.places is None else json.dumps(list(game.places)),
            ],
        )
        if game.places is None:
            return seq
        seq += 1
        ranking = ranking_of(game.accounts, game.places)
        line = {
            "type": "result",
            "game_id": game.game_id,
            "finished_at": finished.finished_at,
            "pool": game.pool,
            "ranking": ranking,
            "last_hash": finished.last_hash,
        }
        sql.execute(
            "INSERT INTO {ledger} (seq, pool, entry) VALUES (?, ?, ?)",
            [seq, game.pool, json.dumps(line)],
        )
        accounts, places = places_of(ranking)  # the order ``cantstop ratings`` folds them in
        excluded = [row["account"] for row in sql.all("SELECT account FROM {excluded}", [])]
        if not skipped(accounts, excluded):
            self._rate(sql, game.pool, accounts, places, game.game_id, finished.finished_at)
        return seq

    def _rate(
        self,
        sql: Sql,
        pool: str,
        accounts: Sequence[str],
        places: Sequence[int],
        game_id: str,
        finished_at: str,
    ) -> None:
        before = []
        for handle in accounts:
            row = sql.one(
                "SELECT mu, sigma, games FROM {ratings} WHERE pool = ? AND account = ?",
                [pool, handle.lower()],
            )
            before.append(
                initial() if row is None else Rating(row["mu"], row["sigma"], row["games"])
            )
        for handle, after in zip(accounts, rate(before, places), strict=True):
            self._put(sql, pool, handle, after, game_id, finished_at)

    def _put(
        self, sql: Sql, pool: str, handle: str, rating: Rating, game_id: str, finished_at: str
    ) -> None:
        sql.execute(
            "INSERT INTO {ratings} (pool, account, handle, mu, sigma, games) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (pool, account) DO UPDATE SET "
            "mu = excluded.mu, sigma = excluded.sigma, games = excluded.games",
            [pool, handle.lower(), handle, rating.mu, rating.sigma, rating.games],
        )
        sql.execute(
            "INSERT INTO {history} (account, pool, game_id, finished_at, mu, sigma) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (account, pool, game_id) DO UPDATE SET "
            "mu = excluded.mu, sigma = excluded.sigma",
            [handle.lower(), pool, game_id, finished_at, rating.mu, rating.sigma],
        )

    # ------------------------------------------------------------------------------ reads
    def of_account(self, views: Views, handle: str) -> list[dict[str, Any]]:
        """The account's ratings, one per pool it played a rated game in."""

        def run(sql: Sql) -> list[Any]:
            return sql.all(
                "SELECT r.*, p.rules, p.players FROM {ratings} r JOIN {pools} p "
                "ON p.pool = r.pool WHERE r.account = ? ORDER BY r.pool",
                [handle.lower()],
            )

        return [_rating(row) for row in views.read(self, run)]

    def leaderboard(self, views: Views, pool: str, limit: int) -> dict[str, Any] | None:
        """The pool's accounts that are not provisional, by rating; None for an unknown pool."""

        # Excluded accounts drop off while excluded (a store built before version 2 has no
        # such table until it is rebuilt).
        kept = "" if views.stale(self) else " AND account NOT IN (SELECT account FROM {excluded})"

        def run(sql: Sql) -> tuple[Any, list[Any]]:
            found = sql.one("SELECT * FROM {pools} WHERE pool = ?", [pool])
            rows = sql.all(
                "SELECT * FROM {ratings} WHERE pool = ? AND games >= ?" + kept, [pool, 10]
            )
            return found, rows

        found, rows = views.read(self, run)
        if found is None:
            return None
        ranked = sorted(
            (
                _rating(dict(row) | {"rules": found["rules"], "players": found["players"]})
                for row in rows
            ),
            key=lambda r: (-r["rating"], r["handle"].lower()),
        )[:limit]
        for place, entry in enumerate(ranked, start=1):
            entry["rank"] = place
        return {
            "pool": pool,
            "rules": json.loads(found["rules"]),
            "players": found["players"],
            "ranking": ranked,
        }

    def history(self, views: Views, handle: str) -> list[dict[str, Any]]:
        """The account's rating after each of its newest ``RATING_HISTORY_LIMIT`` rated games,
        by pool, oldest first (the profile's chart)."""

        def run(sql: Sql) -> list[Any]:
            newest = sql.all(
                "SELECT * FROM {history} WHERE account = ? "
                "ORDER BY finished_at DESC, game_id DESC LIMIT ?",
                [handle.lower(), RATING_HISTORY_LIMIT],
            )
            return sorted(newest, key=lambda r: (r["pool"], r["finished_at"], r["game_id"]))

        return [
            {
                "pool": row["pool"],
                "game_id": row["game_id"],
                "finished_at": row["finished_at"],
                "mu": row["mu"],
                "sigma": row["sigma"],
                "rating": row["mu"] - 3 * row["sigma"],
            }
            for row in views.read(self, run)
        ]

    def ledger(
        self, views: Views, *, pool: str | None, after: int, limit: int
    ) -> list[dict[str, Any]]:
        """Ledger lines after ``after``, in seq order; a pool's results with every moderation
        (an exclusion holds in every pool)."""
        if views.stale(self):
            raise StoreUnavailable(
                "the ratings ledger awaits `cantstop projections rebuild ratings` (an upgrade)"
            )

        def run(sql: Sql) -> list[Any]:
            where = "seq > ?" + ("" if pool is None else " AND (pool = ? OR pool IS NULL)")
            params: list[Any] = [after] if pool is None else [after, pool]
            return sql.all(
                f"SELECT seq, entry FROM {{ledger}} WHERE {where} ORDER BY seq LIMIT ?",
                [*params, limit],
            )

        return [
            {"seq": int(row["seq"]), **json.loads(row["entry"])} for row in views.read(self, run)
        ]


def _rating(row: Any) -> dict[str, Any]:
    rating = Rating(row["mu"], row["sigma"], row["games"])
    rules = row["rules"]
    return {
        "pool": row["pool"],
        "handle": row["handle"],
        "rules": json.loads(rules) if isinstance(rules, str) else rules,
        "players": row["players"],
        "mu": rating.mu,
        "sigma": rating.sigma,
        "rating": rating.rating,
        "games": rating.games,
        "provisional": rating.provisional,
    }


class AccountGames(View):
    """Each account's games (a seat it holds), newest first. Never an imported game (contract
    1.3): its marker comes before its events in the log, and removes it if it came after.

    A finished game's seats carry ``finished``: the game's place among the finishes, numbered
    from 1 in the order this view meets them in the log (``{finishes}`` keeps the last number).
    A number never changes and none is given below one already given, so the bulk export, which
    pages by it (``finished_page``), misses and repeats no game while others finish meanwhile."""

    name = "account_games"
    version = 3  # 2: imported games left out; 3: the finishes numbered (the export's pages)
    topics = (
        *(
            get_topic(c)
            for c in (
                Game.GameCreated,
                Game.SeatJoined,
                Game.SeatLeft,
                Game.TurnOrderDecided,
                Game.GameFinished,
            )
        ),
        *IMPORT_TOPICS,
    )
    by_head = frozenset({STARTED, FINISHED})  # a start, an end: their kind alone
    tables = {  # noqa: RUF012 (the View's declaration)
        "seats": [
            "CREATE TABLE IF NOT EXISTS {seats} (account TEXT NOT NULL, game_id TEXT NOT NULL, "
            "seq BIGINT NOT NULL, seat INTEGER NOT NULL, rated INTEGER NOT NULL, "
            "status TEXT NOT NULL, created_at TEXT NOT NULL, finished BIGINT, "
            "PRIMARY KEY (account, game_id))",
            "CREATE INDEX IF NOT EXISTS {seats}_newest ON {seats} (account, seq)",
            "CREATE INDEX IF NOT EXISTS {seats}_game ON {seats} (game_id)",
            "CREATE INDEX IF NOT EXISTS {seats}_finished ON {seats} (account, finished)",
        ],
        # The last finish numbered (one row, once a game has finished).
        "finishes": ["CREATE TABLE IF NOT EXISTS {finishes} (n BIGINT NOT NULL)"],
        # Every game's creation, for the seats taken later (a lobby's).
        "games": [
            "CREATE TABLE IF NOT EXISTS {games} (game_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, "
            "rated INTEGER NOT NULL, created_at TEXT NOT NULL)"
        ],
        "imports": ["CREATE TABLE IF NOT EXISTS {imports} (game_id TEXT PRIMARY KEY)"],
    }

    def apply(self, sql: Sql, prepared: list[tuple[int, Any]]) -> None:
        last: int | None = None  # the last finish numbered: read at the batch's first finish
        kept = False  # whether {finishes} holds its row yet
        for seq, event in prepared:
            if isinstance(event, IMPORTED):
                key = str(event.game_id)
                sql.execute(
                    "INSERT INTO {imports} (game_id) VALUES (?) ON CONFLICT (game_id) DO NOTHING",
                    [key],
                )
                sql.execute("DELETE FROM {seats} WHERE game_id = ?", [key])
                sql.execute("DELETE FROM {games} WHERE game_id = ?", [key])
                continue
            key = str(event.originator_id)
            if isinstance(event, Game.GameCreated):
                if sql.one("SELECT 1 FROM {imports} WHERE game_id = ?", [key]) is not None:
                    continue
                created = format_at(event.timestamp)
                sql.execute(
                    "INSERT INTO {games} (game_id, seq, rated, created_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (game_id) DO NOTHING",
                    [key, seq, int(bool(event.rated)), created],
                )
                for seat, handle in enumerate(event.accounts or []):
                    if handle is not None:
                        self._seat(sql, handle, key, seat)
            elif isinstance(event, Game.SeatJoined) and event.account is not None:
                self._seat(sql, event.account, key, event.seat)
            elif isinstance(event, Game.SeatLeft):
                sql.execute("DELETE FROM {seats} WHERE game_id = ? AND seat = ?", [key, event.seat])
            elif isinstance(event, Head) and event.topic == STARTED:
                sql.execute("UPDATE {seats} SET status = 'in_progress' WHERE game_id = ?", [key])
            elif isinstance(event, Head):  # finished: the next number
                if last is None:
                    row = sql.one("SELECT n FROM {finishes}")
                    kept = row is not None
                    last = int(row["n"]) if kept else 0
                last += 1
                sql.execute(
                    "UPDATE {seats} SET status = 'finished', finished = ? WHERE game_id = ?",
                    [last, key],
                )
        if last is not None:
            if kept:
                sql.execute("UPDATE {finishes} SET n = ?", [last])
            else:
                sql.execute("INSERT INTO {finishes} (n) VALUES (?)", [last])

    @staticmethod
    def _seat(sql: Sql, handle: str, game_id: str, seat: int) -> None:
        """The account's seat in the game, newest first by the game's creation."""
        sql.execute(
            "INSERT INTO {seats} (account, game_id, seq, seat, rated, status, created_at) "
            "SELECT ?, game_id, seq, ?, rated, 'waiting', created_at FROM {games} "
            "WHERE game_id = ? ON CONFLICT (account, game_id) DO NOTHING",
            [handle.lower(), seat, game_id],
        )

    def page(
        self,
        views: Views,
        handle: str,
        *,
        status: str | None,
        rated: bool | None,
        limit: int,
        cursor: int | None,
    ) -> tuple[list[dict[str, Any]], int | None]:
        """One page of the account's games, newest first, and the cursor of the next page."""
        where: list[str] = ["account = ?"]
        params: list[Any] = [handle.lower()]
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if rated is not None:
            where.append("rated = ?")
            params.append(int(rated))
        if cursor is not None:
            where.append("seq < ?")
            params.append(cursor)

        def run(sql: Sql) -> list[Any]:
            return sql.all(
                f"SELECT * FROM {{seats}} WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
                [*params, limit + 1],
            )

        rows = views.read(self, run)
        more = len(rows) > limit
        rows = rows[:limit]
        page = [
            {
                "game_id": row["game_id"],
                "seat": row["seat"],
                "status": row["status"],
                "rated": bool(row["rated"]),
                "created_at": row["created_at"],
            }
            for row in rows
        ]
        return page, (int(rows[-1]["seq"]) if more and rows else None)

    def counts(self, views: Views, handle: str) -> dict[str, int]:
        def run(sql: Sql) -> list[Any]:
            return sql.all(
                "SELECT status, rated, count(*) AS n FROM {seats} WHERE account = ? "
                "GROUP BY status, rated",
                [handle.lower()],
            )

        counts = {"games": 0, "finished": 0, "rated": 0}
        for row in views.read(self, run):
            counts["games"] += row["n"]
            if row["status"] == "finished":
                counts["finished"] += row["n"]
            if row["rated"]:
                counts["rated"] += row["n"]
        return counts

    def finished_page(
        self, views: Views, handle: str, *, after: int, limit: int
    ) -> tuple[list[uuid.UUID], int | None]:
        """The account's games finished after finish number ``after``, at most ``limit`` of
        them, in the order they finished (the bulk export's page), and the number to ask the
        next page ``after``; None when no more had finished. A game that finishes later is
        numbered past every game before it: it comes on a later page, never on one read."""
        if views.stale(self):
            raise StoreUnavailable(
                "the account's export awaits `cantstop projections rebuild account_games` "
                "(an upgrade)"
            )

        def run(sql: Sql) -> list[Any]:
            return sql.all(
                "SELECT game_id, finished FROM {seats} WHERE account = ? AND finished > ? "
                "ORDER BY finished LIMIT ?",
                [handle.lower(), after, limit + 1],
            )

        rows = views.read(self, run)
        more = len(rows) > limit
        rows = rows[:limit]
        ids = [uuid.UUID(row["game_id"]) for row in rows]
        return ids, (int(rows[-1]["finished"]) if more else None)


__all__ = ["AccountGames", "Ratings", "RatingsView", "rated_game"]
