"""Views across games, by size: how long ``cantstop serve`` takes to answer, how much memory its
workers hold and how fast the listing answers, over stores of 1,000 to 100,000 games, on SQLite and
PostgreSQL; and the bytes a stored game takes, with what would shrink them.

    .venv/bin/python -m bench.views [--sizes 1000,10000,100000] [--stores sqlite,postgres]

For each store and size, in a folder of its own (deleted afterwards, unless ``--keep``):

1. **Fill, fast, in process.** A pool of games (``--pool``, 200) is played through the
   application (``Runtime``: creations, lobby joins, actions, computer players' turns through the
   ``Timekeeper``), a mix like a live server's (``MIX``): mostly finished two-player games, some
   from lobbies, some with a turn clock, some against the expert bot, finished solitaire games
   (the leaderboard's rows), and 5% unfinished (games in progress, lobbies waiting). The store is
   then made up to its size by copying the pool's stored rows (events, the vault's events,
   snapshots) under new random game ids, byte for byte but the vault's id of its game, with bulk
   inserts (SQLite: ``executemany`` in large transactions; PostgreSQL: binary ``COPY``). The
   copies are written in waves of ``WAVE`` games whose events interleave, as a server with that
   many games in play writes them. A copy keeps its original's client seed, so its hash chain
   and dice still verify. PostgreSQL is then vacuumed and analysed once (what autovacuum does on
   a store that grew over months).
2. **Build the views once**, as at a deploy: ``cantstop projections rebuild <view>`` for each
   view, timed.
3. **Launch** ``cantstop serve --workers 2`` (the scheduler in its own process, as by default),
   and measure from the launch: the first ``200`` of ``GET /v1/games`` from each of the two
   gunicorn workers (the worker that answered is found from the connection's port), the first
   leaderboard, and when the scheduler records the ``TurnTimedOut`` of a game created just before
   with a 5-second clock (it falls due ``LEAD`` seconds after the launch); then each process's
   RSS, and the latency (p50, p99 of ``--requests`` requests on one keep-alive connection) of the
   listing unfiltered, ``?status=waiting``, ``?open=true`` and ``?offset=5000``, and of the
   leaderboard.
4. **Bytes per game**: the database's size (SQLite: the file and its WAL; PostgreSQL:
   ``pg_total_relation_size`` of each table) over the games stored, by table; and, on the pool's
   own rows, what would shrink a game (``shrink``): measured, by re-encoding the stored states.

PostgreSQL is a throwaway server (pgserver, as the tests use), one fresh database per size.
docs/scaling.md ("Views across games, by size") records the figures.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import psutil  # type: ignore[import-untyped]
import psycopg

from domain import strategies
from domain.commands import NewGame, Resign, parse_action
from domain.position import Position
from service.application.aggregates import vault_id
from service.config import Settings
from service.persistence.compact import COMPACT
from service.runtime import Runtime

POOL = 200  # games played through the application; the rest of a store are their copies
WAVE = 100  # copies whose events interleave in the log, as games in play at once do
TIME = struct.Struct(">q")  # a compact event's time: microseconds since 1970
DAY_MICROS = 86_400_000_000
COMMIT_ROWS = 200_000  # rows per transaction of the copy
REQUESTS = 200
LEAD = 1.0  # seconds from the launch to the clock game's deadline (the scheduler starts later)
TURN_SECONDS = 5  # the shortest turn clock a game may have
WAIT = 900.0  # seconds the launch's measurements wait at most
IDLE = 10.0  # seconds the server is left without requests, its writes counted
MAX_ACTIONS = 3000  # a game not over by then is resigned
EXPERT = strategies.get("expert")
NAMES = ("Ann", "Bob", "Cleo", "Dev", "Eve", "Finn", "Gus", "Hana", "Ivo", "Jun")
PASSWORD = "bench: a pool player's password"  # accounts made by the pool (`--accounts`)
# What the pool is made of: (kind, share). ``unfinished``: half of them games in progress
# (no clock, no computer player), half lobbies still waiting for players.
MIX = (
    ("two people", 0.55),
    ("lobby", 0.10),
    ("clock", 0.10),
    ("bot", 0.10),
    ("solitaire", 0.10),
    ("unfinished", 0.05),
)
LISTING_SQL: dict[str, tuple[str, list[Any], int]] = {  # WHERE, its parameters, OFFSET
    "listing": ("", [], 0),
    "?status=waiting": (" WHERE status = ?", ["waiting"], 0),
    "?open=true": (" WHERE open_seats > 0", [], 0),
    "?offset=5000": ("", [], 5000),
}
QUERIES = {
    "listing": "/v1/games",
    "?status=waiting": "/v1/games?status=waiting",
    "?open=true": "/v1/games?open=true",
    "?offset=5000": "/v1/games?offset=5000",
    "leaderboard": "/v1/solitaire/leaderboard?mode=easy",
}


def now() -> float:
    return time.monotonic()


# ------------------------------------------------------------------------------ the pool
class Player:
    """Plays a game through the application: people by a simple policy (roll on, play a random
    legal move, stop after one or two moves), computer players through the Timekeeper. A
    solitaire player takes the expert strategy's choices (the simple policy can bust for ever
    once few columns are left)."""

    def __init__(self, rt: Runtime, rng: random.Random, accounts: bool = False) -> None:
        self.rt = rt
        self.rng = rng
        self.tokens: dict[str, str] = {}
        if accounts:  # people's games seat accounts: each turn's end is a notice to someone
            for name in NAMES:
                self.tokens[name] = rt.accounts.sign_up(name.lower(), PASSWORD).token

    def play(
        self, state: dict[str, Any], limit: int | None = None, *, advised: bool = False
    ) -> dict[str, Any]:
        rt, rng = self.rt, self.rng
        game_id = uuid.UUID(state["id"])
        moves, enough = 0, rng.choice((1, 2))
        for done in range(MAX_ACTIONS):
            if state["status"] != "in_progress" or (limit is not None and done >= limit):
                return state
            seat = state["turn"]["player"]
            if state["players"][seat]["bot"] is not None:
                rt.timekeeper.tick(game_id, datetime.now(UTC))  # bot_pause=0: it plays now
                state = rt.games.state(game_id)
                continue
            if advised:
                choice = EXPERT.choose(Position.from_game(rt.games.game(game_id)), rng)
                state = rt.games.act(game_id, seat, choice).state
                continue
            legal = state["legal_actions"]
            others = [a for a in legal if a["type"] != "stop"]
            if {"type": "stop"} in legal and (moves >= enough or not others):
                action, moves = {"type": "stop"}, 0
            else:
                action = rng.choice(others)
                moves += action["type"] == "move"
            state = rt.games.act(game_id, seat, parse_action(action)).state
            if state["status"] == "in_progress" and state["turn"]["phase"] == "roll":
                moves = 0  # a new turn (a bust, or the stop)
        seat = state["turn"]["player"]
        return rt.games.act(game_id, seat, Resign()).state

    def one(self, kind: str, index: int) -> dict[str, Any]:
        rt, rng = self.rt, self.rng
        a, b = rng.sample(NAMES, 2)
        if self.tokens and kind in ("two people", "clock"):  # the accounts of a and b
            clock = {"turn_seconds": 60} if kind == "clock" else None
            lobby = uuid.UUID(rt.games.create(NewGame(seats=2, clock=clock))[0]["id"])
            rt.lobby.join(lobby, a, token=self.tokens[a])
            return self.play(rt.lobby.join(lobby, b, token=self.tokens[b]).state)
        if kind == "two people":
            return self.play(rt.games.create(NewGame(players=[a, b]))[0])
        if kind == "clock":
            return self.play(
                rt.games.create(NewGame(players=[a, b], clock={"turn_seconds": 60}))[0]
            )
        if kind == "bot":
            bot = {"name": "Expert", "bot": "expert"}
            return self.play(rt.games.create(NewGame(players=[a, bot]))[0])
        if kind == "solitaire":
            mode = "advanced" if index % 3 == 2 else "easy"
            setup = NewGame(players=[a], rules={"solitaire": mode})
            return self.play(rt.games.create(setup)[0], advised=True)
        if kind == "lobby":
            lobby = uuid.UUID(rt.games.create(NewGame(seats=2))[0]["id"])
            rt.lobby.join(lobby, a)
            return self.play(rt.lobby.join(lobby, b).state)
        assert kind == "unfinished"
        if index % 2 == 0:
            state = rt.games.create(NewGame(players=[a, b]))[0]
            return self.play(state, limit=rng.randint(5, 60))
        lobby = uuid.UUID(rt.games.create(NewGame(seats=rng.choice((2, 3))))[0]["id"])
        if index % 4 == 1:
            return rt.lobby.join(lobby, a).state
        return rt.games.state(lobby)


@dataclass
class PoolGame:
    """One played game's stored rows, in the order of the log."""

    game_id: uuid.UUID
    events: list[tuple[bool, int, str, bytes]] = field(default_factory=list)  # vault?, v, topic
    snapshots: list[tuple[int, str, bytes]] = field(default_factory=list)

    @property
    def waiting(self) -> bool:
        """A lobby still waiting for players: its game never started (nor finished)."""
        ends = (".TurnOrderDecided", ".GameFinished")
        return not any(topic.endswith(ends) for vault, _, topic, _ in self.events if not vault)


@dataclass
class Pool:
    kinds: dict[str, int]
    statuses: dict[str, int]
    seconds: float


def play_pool(url: str, size: int, rng: random.Random, accounts: bool = False) -> Pool:
    """Play the pool through the application into the store at ``url``. ``accounts``: the games
    of two people (with a clock or not) seat ten accounts, as on a server where people play
    signed in; else guests (no notices are made)."""
    started = now()
    kinds: dict[str, int] = {}
    statuses: dict[str, int] = {}
    plan = [kind for kind, share in MIX for _ in range(max(1, round(share * size)))]
    rng.shuffle(plan)
    with Runtime(Settings(database_url=url, bot_pause=0), create_tables=True) as rt:
        player = Player(rt, rng, accounts)
        for index, kind in enumerate(plan):
            state = player.one(kind, index)
            kinds[kind] = kinds.get(kind, 0) + 1
            statuses[state["status"]] = statuses.get(state["status"], 0) + 1
    return Pool(kinds, statuses, now() - started)


def group_rows(
    events: list[tuple[Any, int, str, bytes]], snapshots: list[tuple[Any, int, str, bytes]]
) -> list[PoolGame]:
    """The pool's rows (originator id as ``uuid.UUID`` or hex) per game: its own and its
    vault's events, and its snapshots."""

    def as_uuid(value: Any) -> uuid.UUID:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))

    games: dict[uuid.UUID, PoolGame] = {}
    for originator, _, topic, _ in events:
        if topic.startswith("domain.game:"):
            game_id = as_uuid(originator)
            games.setdefault(game_id, PoolGame(game_id))
    vaults = {vault_id(game_id): game_id for game_id in games}
    for originator, version, topic, state in events:
        key = as_uuid(originator)
        if key in games:
            games[key].events.append((False, version, topic, bytes(state)))
        elif key in vaults:
            games[vaults[key]].events.append((True, version, topic, bytes(state)))
    for originator, version, topic, state in snapshots:
        key = as_uuid(originator)
        if key in games:
            games[key].snapshots.append((version, topic, bytes(state)))
    return list(games.values())


Row = tuple[uuid.UUID, int, str, bytes]


def aged(state: bytes, micros: int) -> bytes:
    """A game event's stored state ``micros`` earlier, if it is in the compact form (its time is
    bytes 2 to 10: service/persistence/compact.py); any other row as it is."""
    if micros == 0 or not state or state[0] != COMPACT:
        return state
    (at,) = TIME.unpack_from(state, 2)
    return state[:2] + TIME.pack(at - micros) + state[2 + TIME.size :]


def copies(
    pool: list[PoolGame], count: int, rng: random.Random, spread: float = 0.0
) -> Iterator[tuple[list[Row], list[Row]]]:
    """``count`` copies of the pool's games under new ids, a wave at a time: the wave's events,
    interleaved one of each game in turn, and its snapshots. ``spread``: the copies' game
    events are dated back over that many days, the first copies the oldest, as on a server
    that has played them over months (their hash chains then no longer verify: a store to time
    the views by, not to audit)."""
    made = 0
    while made < count:
        wave = min(WAVE, count - made)
        back = round(spread * DAY_MICROS * (1 - made / count))
        queues: list[list[Row]] = []
        snapshots: list[Row] = []
        for i in range(wave):
            source = pool[(made + i) % len(pool)]
            new = uuid.UUID(int=rng.getrandbits(128), version=4)
            vault = vault_id(new)
            old_hex, new_hex = source.game_id.hex.encode(), new.hex.encode()
            queues.append(
                [
                    (vault, v, topic, state.replace(old_hex, new_hex))
                    if is_vault
                    else (new, v, topic, aged(state, back))
                    for is_vault, v, topic, state in source.events
                ]
            )
            snapshots.extend((new, v, topic, state) for v, topic, state in source.snapshots)
        events: list[Row] = []
        longest = max(len(q) for q in queues)
        for step in range(longest):
            events.extend(q[step] for q in queues if step < len(q))
        made += wave
        yield events, snapshots


# ------------------------------------------------------------------------------ the stores
class Store:
    """One store of one size: where it is, how its pool's rows are read and copies written."""

    kind: str
    url: str
    pages: dict[str, tuple[int, int, int, int]] | None = None  # SQLite: pages, bytes, payload

    def events_table(self) -> str:
        raise NotImplementedError

    def read_pool(self) -> list[PoolGame]:
        raise NotImplementedError

    def write(self, batches: Iterator[tuple[list[Row], list[Row]]]) -> int:
        raise NotImplementedError

    def after_fill(self) -> None:
        """Maintenance a store that grew slowly would have had."""

    def after_rebuild(self) -> None:
        """As ``after_fill``, once the views' tables are filled."""

    def sizes(self) -> tuple[int, dict[str, int]]:
        """The database's bytes, and by table group (events, snapshots, views, other)."""
        raise NotImplementedError

    def idle_writes(self, seconds: float) -> int | None:
        """Transactions that wrote while the server sat idle for ``seconds`` (PostgreSQL: the
        transaction ids assigned); None where that is not counted."""
        time.sleep(seconds)
        return None

    def drop(self) -> None:
        raise NotImplementedError

    def connect(self) -> Any:
        """A DB-API connection to the store (``?`` placeholders for ``sql``)."""
        raise NotImplementedError

    def sql(self, statement: str) -> str:
        return statement

    def listing_sql(self, runs: int = 20) -> dict[str, tuple[float, float]]:
        """The listing's two statements alone (``GameList.query``: the count, then the page),
        as each filter runs them on the games view's table: median ms of ``runs`` each. What a
        request costs beyond them is the service's (catching the view up, the JSON)."""
        found = {}
        conn = self.connect()
        try:
            cur = conn.cursor()
            cur.execute(self.sql("SELECT generation FROM cantstop_views WHERE name = ?"), ["games"])
            table = f"cantstop_view_games_games_g{cur.fetchone()[0]}"
            for name, (where, params, offset) in LISTING_SQL.items():
                timings: list[list[float]] = [[], []]
                for _ in range(runs):
                    for i, (statement, args) in enumerate(
                        (
                            (f"SELECT count(*) FROM {table}{where}", params),
                            (
                                f"SELECT * FROM {table}{where} ORDER BY seq DESC LIMIT ? OFFSET ?",
                                [*params, 50, offset],
                            ),
                        )
                    ):
                        started = time.perf_counter()
                        cur.execute(self.sql(statement), args)
                        cur.fetchall()
                        timings[i].append((time.perf_counter() - started) * 1000)
                found[name] = (statistics.median(timings[0]), statistics.median(timings[1]))
        finally:
            conn.close()
        return found


def group_of(table: str) -> str:
    if table.startswith("cantstop_view"):
        return "views"
    if "snapshot" in table:
        return "snapshots"
    if table.endswith("events") or table.startswith("sqlite_autoindex_stored_events"):
        return "events"
    return "other"


class SQLiteStore(Store):
    kind = "sqlite"

    def __init__(self, folder: Path) -> None:
        self.path = folder / "store.sqlite"
        self.url = f"sqlite:///{self.path}"

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None, timeout=60)

    def events_table(self) -> str:
        return "stored_events"

    def connect(self) -> Any:
        return self._connect()

    def read_pool(self) -> list[PoolGame]:
        with contextlib.closing(self._connect()) as conn:
            events = conn.execute(
                "SELECT originator_id, originator_version, topic, state FROM stored_events "
                "ORDER BY rowid"
            ).fetchall()
            snapshots = conn.execute(
                "SELECT originator_id, originator_version, topic, state FROM stored_snapshots"
            ).fetchall()
        return group_rows(events, snapshots)

    def write(self, batches: Iterator[tuple[list[Row], list[Row]]]) -> int:
        rows = 0
        with contextlib.closing(self._connect()) as conn:
            conn.execute("PRAGMA synchronous=OFF")  # this connection only: the fill
            conn.execute("BEGIN")
            pending = 0
            for events, snapshots in batches:
                conn.executemany(
                    "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
                    "VALUES (?, ?, ?, ?)",
                    ((o.hex, v, t, s) for o, v, t, s in events),
                )
                conn.executemany(
                    "INSERT INTO stored_snapshots (originator_id, originator_version, topic, "
                    "state) VALUES (?, ?, ?, ?)",
                    ((o.hex, v, t, s) for o, v, t, s in snapshots),
                )
                rows += len(events)
                pending += len(events) + len(snapshots)
                if pending >= COMMIT_ROWS:
                    conn.execute("COMMIT")
                    conn.execute("BEGIN")
                    pending = 0
            conn.execute("COMMIT")
        return rows

    def sizes(self) -> tuple[int, dict[str, int]]:
        total = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        with contextlib.closing(self._connect()) as conn:
            found = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
            # Where the rows' bytes go, by kind of page: a row of a WITHOUT ROWID table (the
            # snapshots) keeps at most about a quarter of a page in its leaf, the rest of a
            # larger one in overflow pages of its own.
            self.pages = {
                f"{name} {kind}": (int(pages), int(size), int(payload), int(unused))
                for name, kind, pages, size, payload, unused in conn.execute(
                    "SELECT name, pagetype, count(*), sum(pgsize), sum(payload), sum(unused) "
                    "FROM dbstat WHERE name IN ('stored_events', 'stored_snapshots') "
                    "GROUP BY name, pagetype"
                )
            }
        groups: dict[str, int] = {}
        for name, size in found:
            groups[group_of(name)] = groups.get(group_of(name), 0) + int(size)
        return total, groups

    def drop(self) -> None:
        for path in self.path.parent.glob(self.path.name + "*"):
            path.unlink()


class PostgresStore(Store):
    kind = "postgres"

    def __init__(
        self, server_url: str, prefix: str = "cantstop_bench", dbname: str | None = None
    ) -> None:
        """A new database on the server (named ``prefix`` and random letters), or the existing
        ``dbname``."""
        self.server_url = server_url
        self.dbname = dbname or f"{prefix}_{uuid.uuid4().hex[:10]}"
        head, sep, query = server_url.partition("?")
        self.url = f"{head.rpartition('/')[0]}/{self.dbname}{sep}{query}"
        if dbname is None:
            with psycopg.connect(server_url, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.schema = "public"
        self.events = "cantstop_events"
        self.snapshots = "cantstop_snapshots"

    def events_table(self) -> str:
        return self.events

    def connect(self) -> Any:
        return psycopg.connect(self.url, autocommit=True)

    def sql(self, statement: str) -> str:
        return statement.replace("?", "%s")

    def use(self, rt: Runtime) -> None:
        """The tables' real names, from the application."""
        recorder: Any = rt.games.store.recorder
        self.schema = str(recorder.datastore.schema or "public")
        self.events = str(recorder.events_table_name)
        snapshots: Any = rt.games.store.snapshots
        self.snapshots = str(snapshots.recorder.events_table_name)

    def _table(self, name: str) -> str:
        return f'"{self.schema}"."{name}"'

    def read_pool(self) -> list[PoolGame]:
        with psycopg.connect(self.url) as conn:
            events = conn.execute(
                "SELECT originator_id, originator_version, topic, state FROM "
                f"{self._table(self.events)} ORDER BY notification_id"
            ).fetchall()
            snapshots = conn.execute(
                "SELECT originator_id, originator_version, topic, state FROM "
                f"{self._table(self.snapshots)}"
            ).fetchall()
        return group_rows(events, snapshots)

    def _types(self, conn: psycopg.Connection[Any], table: str) -> list[str]:
        found = dict(
            conn.execute(
                "SELECT column_name, udt_name FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = %s",
                [self.schema, table],
            ).fetchall()
        )
        return [found[c] for c in ("originator_id", "originator_version", "topic", "state")]

    def write(self, batches: Iterator[tuple[list[Row], list[Row]]]) -> int:
        rows = 0
        columns = "(originator_id, originator_version, topic, state)"
        with psycopg.connect(self.url) as conn:
            event_types = self._types(conn, self.events)
            snapshot_types = self._types(conn, self.snapshots)
            pending = 0
            for events, snapshots in batches:
                # The events' tx column is filled by its default: this transaction's id.
                for table, types, found in (
                    (self.events, event_types, events),
                    (self.snapshots, snapshot_types, snapshots),
                ):
                    with conn.cursor().copy(
                        f"COPY {self._table(table)} {columns} FROM STDIN (FORMAT BINARY)"
                    ) as copy:
                        copy.set_types(types)
                        for row in found:
                            copy.write_row(row)
                rows += len(events)
                pending += len(events) + len(snapshots)
                if pending >= COMMIT_ROWS:
                    conn.commit()
                    pending = 0
            conn.commit()
        return rows

    def after_fill(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("VACUUM (ANALYZE)")

    def idle_writes(self, seconds: float) -> int | None:
        def xmax() -> int:
            with psycopg.connect(self.url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT pg_snapshot_xmax(pg_current_snapshot())::text"
                ).fetchone()
                assert row is not None
                return int(row[0])

        before = xmax()
        time.sleep(seconds)
        return xmax() - before  # read-only transactions take no id: only writers count

    def after_rebuild(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("ANALYZE")

    def sizes(self) -> tuple[int, dict[str, int]]:
        with psycopg.connect(self.url) as conn:
            found = conn.execute(
                "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind = 'r' AND n.nspname = %s",
                [self.schema],
            ).fetchall()
        groups: dict[str, int] = {}
        for name, size in found:
            groups[group_of(name)] = groups.get(group_of(name), 0) + int(size)
        return sum(groups.values()), groups

    def drop(self) -> None:
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')


# ------------------------------------------------------------------------------ filling
@dataclass
class Fill:
    played: Pool
    pool_rows: int
    rows: int
    copy_seconds: float
    maintenance_seconds: float


def fill(
    store: Store,
    size: int,
    pool_size: int,
    rng: random.Random,
    *,
    few_lobbies: bool = False,
    accounts: bool = False,
    spread: float = 0.0,
) -> tuple[Fill, list[PoolGame]]:
    """Play the pool, then copy it up to ``size`` games. ``few_lobbies``: the copies leave out
    the pool's lobbies still waiting, so that the store holds only those few open lobbies (on a
    live server the open lobbies are the few recent ones, however many games it holds)."""
    played = play_pool(store.url, min(size, pool_size), rng, accounts)
    if isinstance(store, PostgresStore):
        with Runtime(Settings(database_url=store.url), create_tables=False) as rt:
            store.use(rt)
    pool = store.read_pool()
    pool_rows = sum(len(g.events) for g in pool)
    started = now()
    sources = [g for g in pool if not (few_lobbies and g.waiting)]
    rows = store.write(copies(sources, size - len(pool), rng, spread)) if size > len(pool) else 0
    copied = now() - started
    started = now()
    store.after_fill()
    return Fill(played, pool_rows, pool_rows + rows, copied, now() - started), pool


# The source tree whose ``cantstop`` the launches and rebuilds run (None: this one); bench.rebuild
# sets it to time one tree against another on the same store.
TREE: str | None = None


def cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        env=serve_env(url),
        cwd=TREE,
        capture_output=True,
        text=True,
        check=True,
    )


def serve_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CANTSTOP_")}
    env.update({"CANTSTOP_DATABASE_URL": url, "CANTSTOP_ACCESS_LOG": ""})
    if TREE is not None:
        env["PYTHONPATH"] = TREE
    return env


def rebuild(store: Store) -> dict[str, float]:
    """``cantstop projections rebuild <view>`` for each view: seconds each (a process each)."""
    with Runtime(Settings(database_url=store.url), create_tables=False) as rt:
        names = [view.name for view in rt.all_views()]
    seconds = {}
    for name in names:
        started = now()
        cli("projections", "rebuild", name, url=store.url)
        seconds[name] = now() - started
    store.after_rebuild()
    return seconds


# ------------------------------------------------------------------------------ launching
class Others:
    """The CPU that processes other than this benchmark's (its own, the server it launched, its
    PostgreSQL) used over a window, as a share of all cores: on a shared VM, other people's
    work (a test suite, say) makes a run's timings longer; this says by how much there was."""

    postgres_dir: str | None = None  # the throwaway PostgreSQL's data folder, if any

    def __init__(self) -> None:
        self.started = now()
        self.busy, self.own = self._busy(), self._own()

    @staticmethod
    def _busy() -> float:
        t = psutil.cpu_times()
        return float(t.user + t.nice + t.system + t.irq + t.softirq)

    def _own(self) -> dict[int, float]:
        me = psutil.Process()
        mine = [me, *me.children(recursive=True)]
        if self.postgres_dir is not None:
            for proc in psutil.process_iter(["cmdline"]):
                if self.postgres_dir in " ".join(proc.info["cmdline"] or ()):
                    mine += [proc, *proc.children()]
        found: dict[int, float] = {}
        for proc in mine:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                found[proc.pid] = t.user + t.system
                if proc.pid == me.pid:  # and the children it waited for (the rebuilds)
                    found[proc.pid] += t.children_user + t.children_system
        return found

    def share(self) -> float:
        """Of all cores' time since this was made, the share other processes used."""
        busy, own = self._busy() - self.busy, self._own()
        used = sum(cpu - self.own.get(pid, 0.0) for pid, cpu in own.items())
        cores = psutil.cpu_count() or 1
        return max(0.0, busy - used) / ((now() - self.started) * cores)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Served:
    """``cantstop serve --workers 2`` and its processes."""

    def __init__(self, url: str, log: Path) -> None:
        self.port = free_port()
        self.log = log.open("wb")
        self.started = now()
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "service.cli", "serve", "--workers", "2"),
                *("--host", "127.0.0.1", "--port", str(self.port)),
            ],
            env=serve_env(url),
            cwd=TREE,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def since(self) -> float:
        return now() - self.started

    def processes(self) -> tuple[list[psutil.Process], list[psutil.Process]]:
        """The gunicorn workers, and the other processes (gunicorn's master, the scheduler)."""
        workers: list[psutil.Process] = []
        others: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children():
                others.append(child)
                if "--http-only" in child.cmdline():
                    workers.extend(child.children())
        return workers, others

    def worker_of(self, local_port: int) -> int | None:
        """The gunicorn worker holding the other end of our connection from ``local_port``."""
        for worker in self.processes()[0]:
            with contextlib.suppress(psutil.Error):
                for conn in worker.net_connections(kind="tcp"):
                    if conn.raddr and conn.raddr.port == local_port:
                        return int(worker.pid)
        return None

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def until(served: Served, check: Callable[[], bool], pause: float = 0.02) -> float | None:
    """Seconds from the launch until ``check()`` (connection errors retried), or None."""
    while served.since() < WAIT:
        try:
            if check():
                return served.since()
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(pause)
    return None


@dataclass
class Launch:
    first_listing: dict[int, float] = field(default_factory=dict)  # worker pid: seconds
    first_leaderboard: float | None = None
    leaderboard_rows: int = 0
    timeout_recorded: float | None = None
    timeout_due: float = 0.0
    rss_workers: list[int] = field(default_factory=list)
    rss_workers_after: list[int] = field(default_factory=list)
    rss_others: dict[str, int] = field(default_factory=dict)
    latency: dict[str, tuple[float, float, int]] = field(default_factory=dict)  # p50, p99 ms
    idle_writes: int | None = None  # over IDLE seconds with no request
    others: float = 0.0  # the share of the cores other processes used meanwhile (Others)
    listing_sql: dict[str, tuple[float, float]] = field(default_factory=dict)  # count, page ms


def first_listings(served: Served, launch: Launch) -> None:
    """Hit the listing from two threads, new connections each time, until both workers have
    answered it (gunicorn's workers take turns at accepting)."""
    lock = threading.Lock()

    def once() -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
        try:
            conn.request("GET", "/v1/games")
            response = conn.getresponse()
            response.read()
            at = served.since()
            if response.status != 200:
                return False
            pid = served.worker_of(conn.sock.getsockname()[1])
        finally:
            conn.close()
        with lock:
            if pid is not None and pid not in launch.first_listing:
                launch.first_listing[pid] = at
            return len(launch.first_listing) >= 2

    threads = [threading.Thread(target=until, args=(served, once)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def measure_launch(store: Store, folder: Path, requests: int) -> Launch:
    """Launch the server beside a clock game that falls due ``LEAD`` seconds after, and
    measure (see the module's docstring)."""
    launch = Launch()
    with Runtime(Settings(database_url=store.url), create_tables=False) as rt:
        state, seats = rt.games.create(
            NewGame(players=["Tim", "Tom"], clock={"turn_seconds": TURN_SECONDS})
        )
    game_id, token = state["id"], seats[0].token
    deadline = datetime.fromisoformat(state["turn"]["deadline"].replace("Z", "+00:00"))
    time.sleep(max(0.0, (deadline - datetime.now(UTC)).total_seconds() - LEAD))
    others = Others()
    served = Served(store.url, folder / f"serve-{store.kind}.log")
    launch.timeout_due = (deadline - datetime.now(UTC)).total_seconds()
    try:

        def leaderboard() -> bool:
            status, body = get(served.port, QUERIES["leaderboard"])
            if status == 200:
                launch.leaderboard_rows = len(json.loads(body)["results"])
            return status == 200

        def timed_out() -> bool:
            status, body = get(served.port, f"/v1/games/{game_id}/events?limit=1000")
            types = [e["type"] for e in json.loads(body)["events"]] if status == 200 else []
            return "TurnTimedOut" in types

        def watch(check: Callable[[], bool], name: str, pause: float) -> None:
            setattr(launch, name, until(served, check, pause))

        threads = [
            threading.Thread(target=first_listings, args=(served, launch)),
            threading.Thread(target=watch, args=(leaderboard, "first_leaderboard", 0.02)),
            threading.Thread(target=watch, args=(timed_out, "timeout_recorded", 0.05)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        launch.rss_workers, launch.rss_others = rss(served)
        # The clock game would time out every 5 s: ended, so that it writes nothing more.
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
        conn.request(
            "POST",
            f"/v1/games/{game_id}/actions",
            body=json.dumps({"type": "resign"}),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        conn.getresponse().read()
        conn.close()
        for name, path in QUERIES.items():
            launch.latency[name] = latency(served.port, path, requests)
        launch.rss_workers_after, _ = rss(served)
        launch.idle_writes = store.idle_writes(IDLE)
        launch.others = others.share()
    finally:
        served.stop()
    return launch


def rss(served: Served) -> tuple[list[int], dict[str, int]]:
    workers, others = served.processes()
    found = [int(p.memory_info().rss) for p in workers]
    named = {}
    for proc in others:
        with contextlib.suppress(psutil.Error):
            role = "gunicorn master" if "--http-only" in proc.cmdline() else "scheduler"
            named[role] = int(proc.memory_info().rss)
    with contextlib.suppress(psutil.Error):
        named["cantstop serve"] = int(psutil.Process(served.proc.pid).memory_info().rss)
    return found, named


def latency(port: int, path: str, requests: int) -> tuple[float, float, int]:
    """p50 and p99 in ms of ``requests`` GETs on one keep-alive connection, and the body's
    size."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    size = 0
    try:
        for i in range(requests + 5):  # five to warm up
            started = time.perf_counter()
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path}: {response.status} {body[:200]!r}")
            if i >= 5:
                times.append((time.perf_counter() - started) * 1000)
            size = len(body)
    finally:
        conn.close()
    times.sort()
    return statistics.median(times), times[max(0, round(0.99 * len(times)) - 1)], size


# ------------------------------------------------------------------------------ bytes
def shrink(pool: list[PoolGame]) -> dict[str, Any]:
    """What a game's rows hold and what would shrink them, measured on the pool's own rows:
    bytes per game of each part, and of the states re-encoded or compressed."""
    games = len(pool)
    events = [(topic, state) for g in pool for _, _, topic, state in g.events]
    game_events = [state for g in pool for vault, _, _, state in g.events if not vault]
    snaps = [state for g in pool for _, _, state in g.snapshots]
    states = sum(len(s) for _, s in events)
    sample = b"".join(s for _, s in events[:: max(1, len(events) // 300)])[-32768:]

    def per_game(total: float) -> float:
        return total / games

    started = time.perf_counter()
    zlibbed = sum(len(zlib.compress(s)) for _, s in events)
    zlib_us = (time.perf_counter() - started) / len(events) * 1e6

    def with_dictionary(state: bytes) -> int:
        compressor = zlib.compressobj(zdict=sample)
        return len(compressor.compress(state) + compressor.flush())

    dictionary = sum(with_dictionary(s) for _, s in events)

    def reencoded(change: Callable[[dict[str, Any]], None]) -> int:
        total = 0
        for state in game_events:
            data = orjson.loads(state)
            change(data)
            total += len(orjson.dumps(data))
        return total

    def no_prev_hash(data: dict[str, Any]) -> None:
        data.pop("prev_hash", None)

    def base64_hashes(data: dict[str, Any]) -> None:
        for key in ("hash", "prev_hash"):
            if key in data:
                data[key] = base64.b64encode(bytes.fromhex(data[key])).decode()

    def plain_timestamp(data: dict[str, Any]) -> None:
        stamp = data.get("timestamp")
        if isinstance(stamp, dict):
            data["timestamp"] = stamp["_data_"]

    game_states = sum(len(s) for s in game_events)
    return {
        "games": games,
        "rows_per_game": len(events) / games,
        "game_events_per_game": len(game_events) / games,
        "state_bytes_per_game": per_game(states),
        "state_bytes_per_event": states / len(events),
        "topic_bytes_per_game": per_game(sum(len(t) for t, _ in events)),
        "snapshots_per_game": len(snaps) / games,
        "snapshot_bytes_per_game": per_game(sum(len(s) for s in snaps)),
        "zlib_ratio": zlibbed / states,
        "zlib_us_per_event": zlib_us,
        "zlib_snapshots_ratio": sum(len(zlib.compress(s)) for s in snaps)
        / max(1, sum(map(len, snaps))),
        "zlib_dictionary_ratio": dictionary / states,
        "game_state_bytes_per_game": per_game(game_states),
        "without_prev_hash": per_game(game_states - reencoded(no_prev_hash)),
        "base64_hashes": per_game(game_states - reencoded(base64_hashes)),
        "plain_timestamp": per_game(game_states - reencoded(plain_timestamp)),
    }


# ------------------------------------------------------------------------------ the run
@dataclass
class Result:
    store: str
    size: int
    fill: Fill
    rebuild: dict[str, float]
    rebuild_others: float
    launch: Launch
    bytes_total: int
    bytes_by_group: dict[str, int]
    pages: dict[str, tuple[int, int, int, int]] | None

    def games(self) -> int:
        return self.size + 1  # and the clock game


def one(kind: str, size: int, args: argparse.Namespace, server_url: str | None) -> Result:
    folder = Path(tempfile.mkdtemp(prefix=f"cantstop-views-{kind}-{size}-", dir=args.dir))
    store: Store = SQLiteStore(folder) if kind == "sqlite" else PostgresStore(server_url or "")
    rng = random.Random(f"{kind}:{size}")
    try:
        say(f"{kind} {size:,}: filling")
        filled, pool = fill(store, size, args.pool, rng, few_lobbies=args.few_lobbies)
        rate = (filled.rows - filled.pool_rows) / max(filled.copy_seconds, 1e-9)
        say(
            f"  pool of {len(pool)} played in {filled.played.seconds:.1f} s "
            f"({filled.played.statuses}); {filled.rows:,} event rows; copies written in "
            f"{filled.copy_seconds:.1f} s ({rate:,.0f} rows/s); maintenance "
            f"{filled.maintenance_seconds:.1f} s"
        )
        others = Others()
        rebuilt = rebuild(store)
        busy = others.share()
        say(
            f"  views rebuilt: {', '.join(f'{k} {v:.1f} s' for k, v in rebuilt.items())} "
            f"(other processes used {busy:.0%} of the cores meanwhile)"
        )
        launch = measure_launch(store, folder, args.requests)
        launch.listing_sql = store.listing_sql()
        total, groups = store.sizes()
        result = Result(kind, size, filled, rebuilt, busy, launch, total, groups, store.pages)
        report(result)
        if args.json:
            with open(args.json, "a", encoding="utf-8") as out:
                out.write(json.dumps(as_json(result, pool, args.few_lobbies)) + "\n")
        return result
    finally:
        if not args.keep:
            store.drop()
            shutil.rmtree(folder, ignore_errors=True)


def as_json(result: Result, pool: list[PoolGame], few_lobbies: bool) -> dict[str, Any]:
    launch = result.launch
    return {
        "store": result.store,
        "size": result.size,
        "few_lobbies": few_lobbies,
        "pool": {
            "kinds": result.fill.played.kinds,
            "statuses": result.fill.played.statuses,
            "seconds": result.fill.played.seconds,
        },
        "rows": result.fill.rows,
        "copy_seconds": result.fill.copy_seconds,
        "maintenance_seconds": result.fill.maintenance_seconds,
        "rebuild": result.rebuild,
        "rebuild_others": result.rebuild_others,
        "first_listing": sorted(launch.first_listing.values()),
        "first_leaderboard": launch.first_leaderboard,
        "leaderboard_rows": launch.leaderboard_rows,
        "timeout_due": launch.timeout_due,
        "timeout_recorded": launch.timeout_recorded,
        "rss_workers": launch.rss_workers,
        "rss_workers_after": launch.rss_workers_after,
        "rss_others": launch.rss_others,
        "latency": launch.latency,
        "idle_writes": launch.idle_writes,
        "listing_sql": launch.listing_sql,
        "others": launch.others,
        "bytes_total": result.bytes_total,
        "bytes_by_group": result.bytes_by_group,
        "bytes_per_game": result.bytes_total / result.games(),
        "pages": result.pages,
        "shrink": shrink(pool),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def say(text: str) -> None:
    print(text, flush=True)


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def report(result: Result) -> None:
    launch = result.launch
    firsts = sorted(launch.first_listing.values())
    mb = 1024 * 1024
    say(
        f"  first listing by each worker: {', '.join(seconds(s) for s in firsts)}; "
        f"first leaderboard {seconds(launch.first_leaderboard)} ({launch.leaderboard_rows} rows); "
        f"timeout due {launch.timeout_due:.2f} s, recorded {seconds(launch.timeout_recorded)}"
    )
    say(
        "  RSS: workers "
        + ", ".join(f"{r / mb:.0f}" for r in launch.rss_workers)
        + " MB (after the latency runs "
        + ", ".join(f"{r / mb:.0f}" for r in launch.rss_workers_after)
        + " MB); "
        + ", ".join(f"{k} {v / mb:.0f} MB" for k, v in launch.rss_others.items())
    )
    say(f"  other processes used {launch.others:.0%} of the cores meanwhile")
    if launch.idle_writes is not None:
        say(f"  idle for {IDLE:g} s: {launch.idle_writes} transactions wrote")
    for name, (p50, p99, size) in launch.latency.items():
        alone = launch.listing_sql.get(name)
        sql = (
            ""
            if alone is None
            else f"; its SQL alone: count {alone[0]:.2f}, page {alone[1]:.2f} ms"
        )
        say(f"  {name:16} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  ({size:,} bytes{sql})")
    groups = ", ".join(
        f"{k} {v / result.games() / 1024:.1f}" for k, v in sorted(result.bytes_by_group.items())
    )
    say(
        f"  bytes: {result.bytes_total / mb:,.0f} MB, "
        f"{result.bytes_total / result.games() / 1024:.1f} KB per game ({groups} KB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--pool", type=int, default=POOL, help="games played; the rest copies")
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--dir", default=None, help="where the stores go (default: the temp dir)")
    parser.add_argument("--json", default=None, help="append each result as a JSON line here")
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument(
        "--few-lobbies",
        action="store_true",
        help="copy no waiting lobby: only the pool's own few are open (as on a live server)",
    )
    args = parser.parse_args()
    # Stopped (SIGTERM), it still drops its stores and stops its PostgreSQL (the finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    kinds = [s.strip() for s in args.stores.split(",") if s.strip()]
    say(
        f"bench.views: sizes {sizes}, stores {kinds}, pool {args.pool}, "
        f"{os.cpu_count()} CPUs, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    server: Any = None
    server_dir = None
    if "postgres" in kinds:
        import pgserver  # a dev dependency: a throwaway server, as the tests use

        server_dir = tempfile.mkdtemp(prefix="cantstop-views-pg-", dir=args.dir)
        server = pgserver.get_server(server_dir, cleanup_mode="stop")
        Others.postgres_dir = server_dir
    try:
        for kind in kinds:
            for size in sizes:
                one(kind, size, args, server.get_uri() if server is not None else None)
    finally:
        if server is not None:
            server.cleanup()
        if server_dir is not None:
            shutil.rmtree(server_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
