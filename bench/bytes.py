"""Bytes stored per finished game, by part: what an operator pays for each game kept.

Plays ``--games`` two-player games to the end in process (bench/inproc.py's players: the WSGI
app called directly, two moves a turn, then stop), on a fresh SQLite file or, with
``--postgres URL``, a fresh database on that server, and prints what the store grew by, per game:

- on disk, the views caught up as the worker keeps them, by table and index (SQLite's
  ``dbstat`` after a checkpoint; PostgreSQL's relation sizes after VACUUM), grouped into parts:
  events, the events' indexes, snapshots, secrets, views, the rest; the empty store's size is
  subtracted first;
- the events' own bytes, by what they hold (each stored event's payload: its hash chain, its
  timestamps and topics, the rest), which is what an encoding can save;
- then (``archived``; ``--no-archive`` skips it) the same once every finished game is archived
  as the scheduler archives them (service/application/games/archiving.py, its delay set to 0;
  one more game begun first, as the log's newest row is never archived), measured after the
  space of the deleted rows is given back (SQLite's ``VACUUM``, PostgreSQL's ``VACUUM FULL``:
  on a store that goes on, new rows refill it).

    python -m bench.bytes [--games 200] [--postgres postgresql://postgres@127.0.0.1/postgres]
        [--seed N] [--no-archive]

With ``--seed``, ``os.urandom`` draws from that seed while the games are played (as in
bench/instructions.py): the server's seeds, and so the dice and the games, are the same in
every tree, so two trees compare on the same games (the times still differ).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from service.persistence.compact import COMPACT

# The events' and snapshots' tables: stored_events and stored_snapshots in SQLite,
# cantstop_events and cantstop_snapshots in PostgreSQL (and their indexes).
EVENTS = ("stored_events", "cantstop_events")
SNAPSHOTS = ("stored_snapshots", "cantstop_snapshots")
PARTS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("archived games", lambda n: any(t + "_archive" in n for t in EVENTS)),
    ("events", lambda n: n in EVENTS),
    ("events' indexes", lambda n: any(n.startswith(t) or n.endswith(t + "_1") for t in EVENTS)),
    ("snapshots", lambda n: any(t in n for t in SNAPSHOTS)),
    ("secrets", lambda n: "seed_commitments" in n or "receipt_keys" in n),
    ("views", lambda n: n.startswith("cantstop_view")),
    ("other tables", lambda n: True),
)


def part_of(name: str) -> str:
    return next(part for part, matches in PARTS if matches(name))


def seeded(seed: int) -> None:
    """``os.urandom`` (uuid4, secrets: ids, tokens, server seeds) drawn from ``seed``."""
    draws = random.Random(seed)

    def fixed(n: int) -> bytes:
        return draws.randbytes(n)

    os.urandom = fixed
    random._urandom = fixed  # type: ignore[attr-defined]  # SystemRandom's source


def play(url: str, games: int, seed: int | None = None) -> None:
    os.environ["CANTSTOP_DATABASE_URL"] = url
    os.environ["CANTSTOP_RATE_LIMITS"] = "off"
    from bench.inproc import Games, WsgiClient
    from service.http.app import create_app

    app = create_app(create_tables=True)
    urandom, system = os.urandom, random._urandom  # type: ignore[attr-defined]
    if seed is not None:
        seeded(seed)
    try:
        player, finished, seen = Games(WsgiClient(app)), 0, None
        while finished < games:
            player.act()
            if player.game["status"] == "finished" and player.game["id"] != seen:
                finished, seen = finished + 1, player.game["id"]
    finally:
        os.urandom, random._urandom = urandom, system  # type: ignore[attr-defined]
    runtime = app.extensions["cantstop"]
    for view in runtime.all_views():  # as the worker keeps them, at the end of the log
        runtime.views.catch_up(view)
    runtime.close()


def archive_all(url: str) -> dict[str, int]:
    """Every finished game archived, as the scheduler archives them a while after they end
    (service/application/games/archiving.py, the delay set to 0), after one more game is
    begun (the log's newest row is never archived). The outcomes, counted."""
    os.environ["CANTSTOP_DATABASE_URL"] = url
    from domain.commands import NewGame
    from service.config import Settings
    from service.runtime import Runtime

    runtime = Runtime(Settings.from_env(), create_tables=True)
    try:
        runtime.games.create(NewGame(players=["Last", "Game"]))
        for view in runtime.all_views():
            runtime.views.catch_up(view)
        runtime.archiver.after = 0
        return runtime.archiver.drain()
    finally:
        runtime.close()


def created(url: str) -> None:
    os.environ["CANTSTOP_DATABASE_URL"] = url
    from service.http.app import create_app

    create_app(create_tables=True).extensions["cantstop"].close()


# ------------------------------------------------------------------------------- SQLite
def sqlite_sizes(path: str, *, compact: bool = False) -> dict[str, int]:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        if compact:  # the pages rows were deleted from, rewritten full, as new rows refill them
            db.execute("VACUUM")
        return dict(db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())


def sqlite_rows(path: str) -> list[tuple[Any, int, str, bytes]]:
    import sqlite3

    with sqlite3.connect(path) as db:
        return db.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events"
        ).fetchall()


# ---------------------------------------------------------------------------- PostgreSQL
def pg_sizes(url: str, *, compact: bool = False) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        # FULL: the space of rows deleted (archived games') given back, as new rows reuse it
        conn.execute("VACUUM FULL" if compact else "VACUUM")
        rows = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i', 't')"
        ).fetchall()
        toast = conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.reltoastrelid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.reltoastrelid <> 0"
        ).fetchall()
    sizes = {name: size for name, size in rows}
    for name, size in toast:
        sizes[name] = sizes.get(name, 0) + size
    return sizes


def pg_rows(url: str) -> list[tuple[Any, int, str, bytes]]:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url) as conn:
        query = sql.SQL("SELECT originator_id, originator_version, topic, state FROM {}").format(
            sql.Identifier(EVENTS[1])
        )
        return [(i, v, t, bytes(s)) for i, v, t, s in conn.execute(query)]


def pg_database(server: str) -> tuple[str, Callable[[], None]]:
    import psycopg

    name = f"cantstop_bytes_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, sep, query = server.partition("?")
    url = f"{head.rpartition('/')[0]}/{name}{sep}{query}"

    def drop() -> None:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return url, drop


# ------------------------------------------------------------------------------ report
HASHES = re.compile(rb'"(?:prev_hash|hash|last_hash)":"[0-9a-f]{64}"')
STAMPS = re.compile(rb'"timestamp":\{"_type_":"datetime_iso","_data_":"[^"]*"\},?')


def payload_parts(rows: list[tuple[Any, int, str, bytes]]) -> Counter[str]:
    """The events' bytes by what they hold (a row's ids and version are ~24 bytes more), in
    either stored form: JSON (hashes as hex, times as ISO text, names repeated) or compact
    (service/persistence/compact.py: hashes as bytes, times as 8 bytes, names by schema)."""
    parts: Counter[str] = Counter()
    for _, _, topic, state in rows:
        state = bytes(state)
        kind = "game" if topic.startswith("domain.game:") else topic.split(":")[-1].split(".")[0]
        if state[:1] == bytes((COMPACT,)):
            hashes, stamps = 64, 8
        else:
            hashes = sum(len(m) for m in HASHES.findall(state))
            stamps = sum(len(m) for m in STAMPS.findall(state))
        parts[f"{kind}: hash chain"] += hashes
        parts[f"{kind}: timestamps"] += stamps
        parts[f"{kind}: topic"] += len(topic)
        parts[f"{kind}: the rest"] += len(state) - hashes - stamps
        parts[f"{kind}: count"] += 1
    return parts


def archived_report(
    before: dict[str, int], outcomes: dict[str, int], after: dict[str, int], games: int
) -> dict[str, Any]:
    """What the store holds per game once its finished games are archived and the space of
    their rows given back."""
    by_part: Counter[str] = Counter()
    for name in set(before) | set(after):
        by_part[part_of(name)] += after.get(name, 0) - before.get(name, 0)
    return {
        "outcomes": outcomes,
        "bytes_per_game": round(sum(by_part.values()) / games),
        "parts": {p: round(by_part[p] / games) for p, _ in PARTS if by_part[p]},
    }


def report(
    before: dict[str, int], after: dict[str, int], rows: list[Any], games: int
) -> dict[str, Any]:
    grown: Counter[str] = Counter()
    by_part: Counter[str] = Counter()
    for name in set(before) | set(after):
        delta = after.get(name, 0) - before.get(name, 0)
        if delta:
            grown[name] = delta
            by_part[part_of(name)] += delta
    total = sum(by_part.values())
    payload = payload_parts(rows)
    return {
        "games": games,
        "bytes_per_game": round(total / games),
        "parts": {p: round(by_part[p] / games) for p, _ in PARTS if by_part[p]},
        "largest": {n: round(b / games) for n, b in grown.most_common(8)},
        "events_per_game": round(payload["game: count"] / games, 1),
        "event_payload_per_game": {
            k: round(v / games) for k, v in sorted(payload.items()) if not k.endswith("count")
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--postgres", metavar="URL", help="a server to make a database on")
    parser.add_argument("--seed", type=int, help="the same games in every tree")
    parser.add_argument(
        "--archive",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="then archive every finished game and measure again (default: on)",
    )
    args = parser.parse_args(argv)
    if args.postgres:
        url, drop = pg_database(args.postgres)
        try:
            created(url)
            before = pg_sizes(url)
            play(url, args.games, args.seed)
            result = report(before, pg_sizes(url), pg_rows(url), args.games)
            if args.archive:
                result["archived"] = archived_report(
                    before, archive_all(url), pg_sizes(url, compact=True), args.games
                )
        finally:
            drop()
        result["store"] = "postgresql"
    else:
        path = os.path.join(tempfile.mkdtemp(prefix="cantstop-bytes-"), "bench.sqlite")
        url = f"sqlite:///{path}"
        created(url)
        before = sqlite_sizes(path)
        play(url, args.games, args.seed)
        result = report(before, sqlite_sizes(path), sqlite_rows(path), args.games)
        if args.archive:
            result["archived"] = archived_report(
                before, archive_all(url), sqlite_sizes(path, compact=True), args.games
            )
        result["store"] = "sqlite"
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
