"""Every fast path that replaces a library path stores exactly what the library path stores
(the store's own recorders and write path, service/persistence and service/application/store.py).

Each test writes the same rows through the service's store and through the library's own
recorders, on fresh tables of the same database, and compares what each stored: the rows of the
events and snapshots tables, and the notification ids, in order. Spies make sure the fast path
under test is the one that ran. (The orjson encoder of game events is compared with the
library's by a property test: tests/test_properties.py.)
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from eventsourcing.application import Repository
from eventsourcing.persistence import IntegrityError, StoredEvent
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
)
from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteApplicationRecorder, SQLiteDatastore
from flask import Flask
from flask.testing import FlaskClient
from psycopg.conninfo import conninfo_to_dict
from werkzeug.routing import MapAdapter

from domain.commands import NewGame
from domain.game import Game
from service.application.aggregates import vault_id
from service.application.games.use_cases import Games
from service.application.store import Store
from service.config import Settings
from service.http.app import create_app
from service.persistence.guard import ROWS_PER_STATEMENT
from service.persistence.postgres import PREPARED_ROWS
from tests.support.http import bearer, ok

Row = tuple[Any, ...]
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
# Batch sizes around each path's limits: a command's few rows (libpq's prepared insert up to
# PREPARED_ROWS on PostgreSQL; one statement up to ROWS_PER_STATEMENT) and an import's many (in
# chunks, in one transaction).
SIZES = (1, 3, PREPARED_ROWS, PREPARED_ROWS + 1, ROWS_PER_STATEMENT, ROWS_PER_STATEMENT + 1, 450)


# ------------------------------------------------------------------------------ the stores
@contextmanager
def service_store(url: str) -> Iterator[Games]:
    app = create_app(Settings(database_url=url), create_tables=True)
    try:
        games = app.extensions["cantstop"].games
        assert isinstance(games, Games)
        yield games
    finally:
        app.extensions["cantstop"].close()


class LibraryStore:
    """The library's own recorders, on tables of their own: the path the service replaces."""

    def __init__(self, datastore: Any, events: Any, snapshots: Any) -> None:
        self.datastore = datastore
        self.events = events
        self.snapshots = snapshots
        events.create_table()
        snapshots.create_table()

    @classmethod
    def sqlite(cls, path: Path) -> LibraryStore:
        datastore = SQLiteDatastore(db_name=str(path))
        return cls(
            datastore,
            SQLiteApplicationRecorder(datastore, events_table_name="library_events"),
            SQLiteAggregateRecorder(datastore, events_table_name="library_snapshots"),
        )

    @classmethod
    def postgres(cls, url: str) -> LibraryStore:
        info = conninfo_to_dict(url)
        datastore = PostgresDatastore(
            dbname=str(info.get("dbname") or "postgres"),
            host=str(info.get("host") or "127.0.0.1"),
            port=str(info.get("port") or 5432),
            user=str(info.get("user") or "postgres"),
            password=str(info.get("password") or ""),
        )
        return cls(
            datastore,
            PostgresApplicationRecorder(datastore, events_table_name="library_events"),
            PostgresAggregateRecorder(datastore, events_table_name="library_snapshots"),
        )

    def close(self) -> None:
        self.datastore.close()


@contextmanager
def stores(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Games, LibraryStore, Callable[[str], list[Row]]]]:
    """The service's store and the library's, empty, in one database, and a reader of a
    table's rows in the order of their notification ids (events) or keys (snapshots)."""
    if backend == "postgres":
        url = request.getfixturevalue("postgres_url")
        assert isinstance(url, str)
        with service_store(url) as games:
            library = LibraryStore.postgres(url)
            try:
                yield games, library, lambda table: postgres_rows(url, table)
            finally:
                library.close()
        return
    path = tmp_path / "fast.sqlite"
    with service_store(f"sqlite:///{path}") as games:
        library = LibraryStore.sqlite(path)
        try:
            yield games, library, lambda table: sqlite_rows(path, table)
        finally:
            library.close()


def sqlite_rows(path: Path, table: str) -> list[Row]:
    with sqlite3.connect(path) as db:
        if table.endswith("_events"):  # the notification id is the rowid
            query = f"SELECT rowid, originator_id, originator_version, topic, state FROM {table} "
            return db.execute(query + "ORDER BY rowid").fetchall()
        query = f"SELECT originator_id, originator_version, topic, state FROM {table} "
        return db.execute(query + "ORDER BY originator_id, originator_version").fetchall()


def postgres_rows(url: str, table: str) -> list[Row]:
    with psycopg.connect(url) as db:
        if table.endswith("_events"):
            query = "SELECT notification_id, originator_id, originator_version, topic, state "
            query += f"FROM {table} ORDER BY notification_id"
        else:
            query = f"SELECT originator_id, originator_version, topic, state FROM {table} "
            query += "ORDER BY originator_id, originator_version"
        return [tuple(row) for row in db.execute(query).fetchall()]


def stored(originator: uuid.UUID, versions: range, tag: str = "") -> list[StoredEvent]:
    """Rows as varied as a store may see: topics in and out of ASCII, states with NUL, 0xFF
    and text, of varying length."""
    return [
        StoredEvent(
            originator_id=originator,
            originator_version=version,
            topic=f"tests.fast_paths:Évènement{tag}{version % 3}",
            state=bytes([version % 256, 0, 255])
            + f'{{"v":{version},"t":"✓"}}'.encode() * (version % 4),
        )
        for version in versions
    ]


def game_events(games: Games) -> list[StoredEvent]:
    """A new game's events, as the service's mapper stores them."""
    game = Game.start(uuid.uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))
    return [games.store.mapper.to_stored_event(event) for event in game.collect_events()]


def batches(games: Games) -> list[list[StoredEvent]]:
    """Two new games' events, then batches of each size in SIZES for two originators in turn."""
    found = [game_events(games), game_events(games)]
    a, b = uuid.uuid4(), uuid.uuid4()
    last = {a: 0, b: 0}
    for size in SIZES:
        for originator in (a, b):
            found.append(
                stored(originator, range(last[originator] + 1, last[originator] + size + 1))
            )
            last[originator] += size
    return found


Spies = dict[str, int]


def spy(monkeypatch: pytest.MonkeyPatch, recorder: Any, *names: str) -> Spies:
    """Count the calls of the recorder's methods ``names`` (the paths taken)."""
    calls = dict.fromkeys(names, 0)
    for name in names:
        method = getattr(recorder, name)

        def counted(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _method(*args, **kwargs)

        monkeypatch.setattr(recorder, name, counted)
    return calls


def the_same(ours: list[Row], theirs: list[Row]) -> None:
    assert len(ours) == len(theirs)
    for mine, library in zip(ours, theirs, strict=True):
        assert mine == library


# ------------------------------------------------------------------ (a) SQLite: the events
def test_sqlite_insert_stores_what_the_library_stores(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GuardedSQLiteApplicationRecorder's insert (one multi-row statement on the writer
    connection, ``_insert_alone``; more rows in chunks in one transaction) against
    SQLiteApplicationRecorder.insert_events: the same rows and notification ids, batch by batch."""
    with stores("sqlite", tmp_path, request) as (games, library, rows):
        recorder: Any = games.store.recorder
        assert not recorder.max_notification_id() and not library.events.max_notification_id()
        calls = spy(monkeypatch, recorder, "_insert", "_insert_alone")
        for batch in batches(games):
            before = dict(calls)
            assert recorder.insert_events(batch) == library.events.insert_events(batch)
            assert calls["_insert"] == before["_insert"] + 1  # the fast path, every time
            alone = -(-len(batch) // ROWS_PER_STATEMENT)  # statements: one, or one a chunk
            assert calls["_insert_alone"] == before["_insert_alone"] + alone
        the_same(rows(recorder.events_table_name), rows(library.events.events_table_name))
        assert [n.id for n in recorder.select_notifications(1, 5000)] == [
            n.id for n in library.events.select_notifications(1, 5000)
        ]


def test_sqlite_insert_refused_stores_nothing_as_the_librarys(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A batch with a taken version is refused whole by both (IntegrityError), alone or in
    chunks, and the next ids are the same."""
    with stores("sqlite", tmp_path, request) as (games, library, rows):
        recorder: Any = games.store.recorder
        originator = uuid.uuid4()
        first = stored(originator, range(1, 4))
        assert recorder.insert_events(first) == library.events.insert_events(first)
        for size in (2, ROWS_PER_STATEMENT + 5):
            taken = stored(originator, range(4, 4 + size)) + first[-1:]
            for insert in (recorder.insert_events, library.events.insert_events):
                with pytest.raises(IntegrityError):
                    insert(taken)
        after = stored(originator, range(4, 6))
        assert recorder.insert_events(after) == library.events.insert_events(after)
        the_same(rows(recorder.events_table_name), rows(library.events.events_table_name))


# -------------------------------------------------------------- (b) PostgreSQL: the events
def paths_taken(before: Spies, rows: int) -> Spies:
    """The calls of PostgreSQL's paths after an insert of ``rows`` rows: libpq's prepared
    statement for a command's few, psycopg's above, once per chunk past one statement's rows."""
    if rows <= PREPARED_ROWS:
        return {**before, "_execute_prepared": before["_execute_prepared"] + 1}
    return {**before, "_execute": before["_execute"] + -(-rows // ROWS_PER_STATEMENT)}


@pytest.mark.postgres
def test_postgres_insert_stores_what_the_library_stores(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GuardedPostgresApplicationRecorder's insert (libpq's prepared statement up to
    PREPARED_ROWS, ``_execute_prepared``; psycopg's statement above, ``_execute``, in chunks in
    one transaction past ROWS_PER_STATEMENT) against PostgresApplicationRecorder.insert_events:
    the same rows and notification ids; a refused batch stores nothing in either."""
    with stores("postgres", tmp_path, request) as (games, library, rows):
        recorder: Any = games.store.recorder
        assert not recorder.datastore.pool.closed  # (the recorder opens it): the fast path's
        calls = spy(monkeypatch, recorder, "_execute_prepared", "_execute")
        for batch in batches(games):
            before = dict(calls)
            assert recorder.insert_events(batch) == library.events.insert_events(batch)
            assert calls == paths_taken(before, len(batch))
        originator = uuid.uuid4()
        first = stored(originator, range(1, 4))
        assert recorder.insert_events(first) == library.events.insert_events(first)
        for size in (2, PREPARED_ROWS + 2, ROWS_PER_STATEMENT + 5):  # a taken version: none stored
            taken = stored(originator, range(4, 4 + size)) + first[-1:]
            for insert in (recorder.insert_events, library.events.insert_events):
                with pytest.raises(IntegrityError):
                    insert(taken)
        after = stored(originator, range(4, 6))
        assert recorder.insert_events(after) == library.events.insert_events(after)
        the_same(rows(recorder.events_table_name), rows(library.events.events_table_name))


# ------------------------------------------------------- (c) the events with their snapshots
def with_snapshots(games: Games) -> list[tuple[list[StoredEvent], list[StoredEvent]]]:
    """Batches of events with the snapshots they make due (one or two originators; a
    command's few events, more than PREPARED_ROWS, more than one statement's rows)."""
    a, b = uuid.uuid4(), uuid.uuid4()
    game = Game.start(uuid.uuid4(), NewGame(players=["Ann", "Bob"], dice="manual"))
    events = [games.store.mapper.to_stored_event(e) for e in game.collect_events()]
    snapshot = games.store.mapper.to_stored_event(Game.Snapshot.take(game))
    return [
        (events, [snapshot]),
        (stored(a, range(1, 4)), stored(a, range(3, 4), tag="snapshot")),
        (
            stored(a, range(4, 6)) + stored(b, range(1, 3)),
            stored(a, range(5, 6), tag="snapshot") + stored(b, range(2, 3), tag="snapshot"),
        ),
        (stored(a, range(6, 6 + PREPARED_ROWS + 4)), stored(a, range(20, 21), tag="snapshot")),
        (stored(b, range(3, 3 + ROWS_PER_STATEMENT + 60)), stored(b, range(200, 201), tag="s")),
    ]


def insert_with_snapshots_as_the_library(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    with stores(backend, tmp_path, request) as (games, library, rows):
        recorder: Any = games.store.recorder
        assert games.store.snapshots is not None
        snapshots: Any = games.store.snapshots.recorder
        postgres = backend == "postgres"
        names = ("_execute_prepared", "_execute") if postgres else ("_insert", "_replace")
        calls = spy(monkeypatch, recorder, *names)
        for events, due in with_snapshots(games):
            before = dict(calls)
            ids = recorder.insert_with_snapshots(events, snapshots, due)
            assert ids == library.events.insert_events(events)
            library.snapshots.insert_events(due)
            if postgres:  # the snapshots go with the first chunk's statement
                assert calls == paths_taken(before, len(events))
            else:
                assert calls == {
                    "_insert": before["_insert"] + 1,
                    "_replace": before["_replace"] + 1,
                }
        the_same(rows(recorder.events_table_name), rows(library.events.events_table_name))
        the_same(rows(snapshots.events_table_name), rows(library.snapshots.events_table_name))


def test_sqlite_insert_with_snapshots_stores_what_the_library_stores(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``insert_with_snapshots`` on SQLite (the events through ``_insert``, then the snapshots
    in one INSERT OR REPLACE, ``_replace``) against the library's way, the events' recorder's
    insert_events and then the snapshots' recorder's: the same rows in both tables, and the
    same notification ids."""
    insert_with_snapshots_as_the_library("sqlite", tmp_path, request, monkeypatch)


@pytest.mark.postgres
def test_postgres_insert_with_snapshots_stores_what_the_library_stores(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on PostgreSQL, where the events and snapshots are one statement (a WITH),
    through libpq's prepared insert, psycopg's, and in chunks."""
    insert_with_snapshots_as_the_library("postgres", tmp_path, request, monkeypatch)


# -------------------------------------------------------------------- (d) the snapshots
class LibrarySnapshots:
    """The library's own snapshots, as its ``Application`` with ``snapshotting_intervals`` takes
    them on ``save``: at each event whose version is a multiple of its aggregate's interval, the
    aggregate read back from the stored events at that version (a Repository without snapshots
    or cache) and its Snapshot taken."""

    def __init__(self, games: Games) -> None:
        self.intervals = Store.SNAPSHOT_INTERVALS
        self.repository: Repository[uuid.UUID] = Repository(
            games.store.events
        )  # no snapshots, no cache

    def of(self, games: Games, aggregate_ids: list[uuid.UUID]) -> dict[tuple[uuid.UUID, int], Any]:
        """What the library takes for the aggregates' stored events, saved in any batches."""
        taken = []
        for aggregate_id in aggregate_ids:
            interval = self.intervals[type(self.repository.get(aggregate_id))]
            for event in games.store.events.get(aggregate_id):
                if event.originator_version % interval == 0:
                    aggregate: Any = self.repository.get(
                        aggregate_id, version=event.originator_version
                    )
                    taken.append(type(aggregate).Snapshot.take(aggregate))
        return snapshot_states(games, taken)


def snapshot_states(games: Games, snapshots: list[Any]) -> dict[tuple[uuid.UUID, int], Any]:
    """Each snapshot's topic and state as stored and read back (the time it was taken aside)."""
    found = {}
    for snapshot in snapshots:
        back: Any = games.store.mapper.to_domain_event(games.store.mapper.to_stored_event(snapshot))
        found[(back.originator_id, back.originator_version)] = (type(back), back.state)
    return found


# What a game object holds that one rebuilt from its events does not: Game.start sets
# ``_replay_times`` (None but in the audit's in-memory replays), no event does. A snapshot taken
# from the object just saved carries it, as null; the library's, from a rebuilt game, does not.
# Read back, ``Game.replay_times`` is None either way. Any other difference fails the tests.
LIVE_ONLY = {"_replay_times": None}


def the_services_snapshots(
    games: Games, aggregate_ids: list[uuid.UUID]
) -> dict[tuple[uuid.UUID, int], Any]:
    """The snapshots the service stored for the aggregates, ``LIVE_ONLY`` aside."""
    assert games.store.snapshots is not None
    found = snapshot_states(games, [s for i in aggregate_ids for s in games.store.snapshots.get(i)])
    for _, state in found.values():
        for name, value in LIVE_ONLY.items():
            if name in state:
                assert state.pop(name) == value, name
    return found


DICE = ([1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6], [1, 3, 5, 6], [2, 2, 4, 6])


def play(client: FlaskClient, game_id: str, tokens: list[str], until: int) -> list[dict[str, Any]]:
    """Actions of a manual-dice game (dice in rotation, the first legal move, a stop when
    allowed) until its version reaches ``until``; the actions taken."""
    taken = []
    game = ok(client.get(f"/v1/games/{game_id}"))
    while game["version"] < until:
        legal = game["legal_actions"]
        action = {"type": "stop"} if {"type": "stop"} in legal else dict(legal[0])
        if action["type"] == "roll":
            action["dice"] = DICE[game["version"] % len(DICE)]
        token = tokens[game["turn"]["player"]]
        game = ok(client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(token)))[
            "game"
        ]
        taken.append(action)
    return taken


@contextmanager
def service_app(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Flask]:
    url = (
        request.getfixturevalue("postgres_url")
        if backend == "postgres"
        else f"sqlite:///{tmp_path / 'games.sqlite'}"
    )
    app = create_app(Settings(database_url=url), create_tables=True)
    try:
        yield app
    finally:
        app.extensions["cantstop"].close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_snapshots_of_played_games_are_the_librarys(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Games takes the snapshots an action makes due from the object just saved
    (``_take_snapshots_of`` on ``save``, ``_snapshots_of`` on the command path ``_write``), where
    the library reads the aggregate back from the store at the due version: the same snapshots,
    of the same states, at the same versions, for a game played past two intervals."""
    with service_app(backend, tmp_path, request) as app:
        games = app.extensions["cantstop"].games
        client = app.test_client()
        game_id, tokens = created(client, {"players": ["Ann", "Bob"], "dice": "manual"})
        play(client, game_id, tokens, until=2 * Store.SNAPSHOT_INTERVALS[Game] + 3)
        ids = [uuid.UUID(game_id), vault_id(uuid.UUID(game_id))]
        ours = the_services_snapshots(games, ids)
        assert [version for (_, version) in ours] == [20, 40]
        assert ours == LibrarySnapshots(games).of(games, ids)


def created(client: FlaskClient, body: dict[str, Any]) -> tuple[str, list[str]]:
    response = client.post("/v1/games", json=body)
    if response.status_code != 201:
        pytest.fail(f"the game was not created: {response.get_json()}")
    answer = response.get_json()
    return answer["game"]["id"], [seat["token"] for seat in answer["seats"]]


def test_snapshots_of_an_imported_game_are_the_librarys(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A transcript imported is one save of all its events: the library would snapshot it at
    every multiple of the interval. (Only the comparison may fail: the rest calls pytest.fail.)"""
    with service_app("sqlite", tmp_path, request) as app:
        games = app.extensions["cantstop"].games
        client = app.test_client()
        body = {"players": ["Ann", "Bob"], "dice": "manual", "first_player": 0}
        game_id, tokens = created(client, body)
        try:
            actions = play(client, game_id, tokens, until=2 * Store.SNAPSHOT_INTERVALS[Game] + 3)
        except AssertionError as exc:
            pytest.fail(f"the game was not played: {exc}")
        transcript = {"players": ["Ann", "Bob"], "first_player": 0, "actions": actions}
        response = client.post("/v1/games/import", json={"transcript": transcript})
        if response.status_code != 201:
            pytest.fail(f"the transcript was not imported: {response.get_json()}")
        copy = uuid.UUID(response.get_json()["game"]["id"])
        ids = [copy, vault_id(copy)]
        library, ours = LibrarySnapshots(games).of(games, ids), the_services_snapshots(games, ids)
        if not library:
            pytest.fail("the library would take no snapshot: the game is too short")
        assert ours == library


# ------------------------------------------------------------------------------ HTTP routing
ROUTED_PATHS = [
    "/v1/games/0b7e5a44-8f7d-4a4c-9a53-1c1f2b3c4d5e/actions",
    "/v1/games/import/actions",
    "/v1/games/x/actions",
    "/v1/games/%20/actions",
    "/v1/games/caf\u00e9/actions",
    "/v1/games/a b/actions",
    "/v1/games//actions",
    "//v1/games/x/actions",
    "/v1/games/x/actions/",
    "/v1/games/x/y/actions",
    "/v1/games/x/actions/x",
    "/v1/games/x/actionsx",
    "/v1/games/x",
    "/v1/games/import",
    "/v1/games",
    "/v1/games/x/events",
    "/V1/games/x/actions",
    "/nothing",
]


def routed(app: Flask, path: str, method: str, general: bool) -> Any:
    """What routing gives (rule and arguments, or the exception raised) for the request."""
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "HTTP_HOST": "127.0.0.1:8000",
        "SCRIPT_NAME": "",
        "wsgi.url_scheme": "http",
    }
    adapter = app.url_map.bind_to_environ(environ, server_name=None, subdomain="")
    match: Any = partial(MapAdapter.match, adapter) if general else adapter.match
    try:
        rule, args = match(return_rule=True)
    except Exception as exc:  # a refusal: NotFound, MethodNotAllowed (with its Allow)
        return type(exc).__name__, getattr(exc, "valid_methods", None)
    return rule.rule, rule.endpoint, sorted(rule.methods or ()), dict(args)


@pytest.mark.parametrize("method", ["POST", "GET", "OPTIONS", "DELETE"])
def test_action_route_matches_as_werkzeugs_matcher(
    app: Flask, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The action's request is matched by one regular expression (http/app.py ``ActionFirst``):
    every path, the action's and its near misses, routes as Werkzeug's own matcher routes it."""
    assert app.url_map.action_rule() is not None  # type: ignore[attr-defined]
    for path in ROUTED_PATHS:
        assert routed(app, path, method, general=False) == routed(
            app, path, method, general=True
        ), path

    def unused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the general matcher ran")

    monkeypatch.setattr(MapAdapter, "match", unused)  # the fast path is the one that runs
    assert routed(app, ROUTED_PATHS[0], "POST", general=False)[1] == "games.act"


def served(response: Any, method: str) -> tuple[str, list[tuple[str, str]], bytes, bool]:
    """What the server is handed: status, headers, body, and whether ``close`` ran."""
    closed: list[bool] = []
    response.call_on_close(lambda: closed.append(True))
    started: list[Any] = []
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": "/v1/games/x/actions",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "HTTP_HOST": "127.0.0.1:8000",
        "wsgi.url_scheme": "http",
    }
    chunks = response(
        environ, lambda status, headers, exc_info=None: started.append((status, headers))
    )
    body = b"".join(chunks)
    chunks.close()
    [(status, headers)] = started
    return status, headers, body, closed == [True]


@pytest.mark.parametrize("method", ["POST", "GET", "HEAD"])
@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (200, {"ETag": '"7"'}),
        (200, {}),
        (201, {"Location": "/v1/games/caf\u00e9"}),
        (201, {"Content-Location": "/v1/x y"}),
        (204, {}),
        (304, {"ETag": '"7"'}),
        (404, {}),
        (409, {"Retry-After": "1"}),
    ],
)
def test_answers_are_handed_over_as_werkzeugs(
    method: str, status: int, headers: dict[str, str]
) -> None:
    """A JSON answer (http/core.py ``Answer``) reaches the server with the same status,
    headers and body as Flask's own response, and its ``close`` runs."""
    from flask import Response

    from service.http.core import Answer, Body

    payload = b'{"game": {"id": "x"}}'
    ours, theirs = (
        kind(payload, status, headers=headers, content_type="application/json")
        for kind in (Answer, Response)
    )
    fast = 200 <= status < 300 and status != 204 and method != "HEAD"
    assert isinstance(ours.get_app_iter({"REQUEST_METHOD": method}), Body) == fast
    assert served(ours, method) == served(theirs, method)
    stream = Answer(iter([payload]), status, content_type="application/json")
    assert served(stream, method) == served(
        Response(iter([payload]), status, content_type="application/json"), method
    )


def test_bound_maps_are_werkzeugs(app: Flask) -> None:
    """The map binds each request (http/app.py ``Routes``, the site's part kept once worked
    out) to the same host, script name, subdomain, scheme, path, method and query as Werkzeug's
    own binding, for requests of several sites in turn."""
    from werkzeug.routing import Map

    fields = (
        "server_name",
        "script_name",
        "subdomain",
        "url_scheme",
        "path_info",
        "default_method",
        "query_args",
        "websocket",
    )
    sites = [
        {"HTTP_HOST": "127.0.0.1:8000"},
        {"HTTP_HOST": "Example.COM:80"},
        {"HTTP_HOST": "example.com:443", "wsgi.url_scheme": "https"},
        {"SERVER_NAME": "srv", "SERVER_PORT": "8080"},
        {"HTTP_HOST": "h", "SCRIPT_NAME": "/mounted"},
        {"HTTP_HOST": "h", "HTTP_CONNECTION": "keep-alive, Upgrade", "HTTP_UPGRADE": "websocket"},
        {"HTTP_HOST": "b\u00fccher.example"},
    ]
    requests = [
        {"REQUEST_METHOD": "POST", "PATH_INFO": "/v1/games/x/actions", "QUERY_STRING": ""},
        {"REQUEST_METHOD": "GET", "PATH_INFO": "/v1/games/caf\u00c3\u00a9", "QUERY_STRING": "a=1"},
        {"REQUEST_METHOD": "GET"},
    ]
    for _ in range(2):  # the second time round, every site is known
        for site in sites:
            for request in requests:
                environ = {"wsgi.url_scheme": "http", "SERVER_NAME": "s", "SERVER_PORT": "80"}
                environ |= site | request
                ours = app.url_map.bind_to_environ(environ, server_name=None, subdomain="")
                theirs = Map.bind_to_environ(app.url_map, environ, None, "")
                assert [getattr(ours, f) for f in fields] == [getattr(theirs, f) for f in fields]


def test_request_hooks_run_once_registered(app: Flask) -> None:
    """Flask's request hooks are skipped while nothing is registered to them (http/app.py
    ``App``); once something is, it runs as Flask runs it, the teardowns with the error."""
    from flask import appcontext_tearing_down, request_tearing_down

    seen: list[str] = []
    app.url_value_preprocessor(lambda endpoint, values: seen.append(f"values {endpoint}"))
    app.before_request(lambda: seen.append("before"))
    app.teardown_request(lambda exc: seen.append(f"teardown {exc!r}"))
    app.teardown_appcontext(lambda exc: seen.append(f"app teardown {exc!r}"))

    def told(sender: Any, **extra: Any) -> None:
        seen.append(f"signal {extra.get('exc')!r}")

    with (
        request_tearing_down.connected_to(told, app),
        appcontext_tearing_down.connected_to(told, app),
    ):
        assert app.test_client().get("/healthz").status_code == 200
    assert seen == [
        "values meta.healthz",
        "before",
        "teardown None",
        "signal None",
        "app teardown None",
        "signal None",
    ]


def test_request_signals_sent_once_connected(app: Flask) -> None:
    """Flask's ``request_started`` and ``request_finished`` are not sent while nobody listens
    (http/app.py ``App``); once someone does, each request sends them as Flask does, with the
    answer, an error's too."""
    from flask import request_finished, request_started

    client = app.test_client()
    assert client.get("/healthz").status_code == 200  # the first request goes Flask's way
    seen: list[str] = []

    def started(sender: Any, **extra: Any) -> None:
        seen.append(f"started {sender is app}")

    def finished(sender: Any, **extra: Any) -> None:
        seen.append(f"finished {extra['response'].status_code}")

    with (
        request_started.connected_to(started, app),
        request_finished.connected_to(finished, app),
    ):
        assert client.get("/healthz").status_code == 200
        assert client.get("/v1/games/not-a-game").status_code == 404
    assert client.get("/healthz").status_code == 200
    assert seen == ["started True", "finished 200", "started True", "finished 404"]


def test_after_request_functions_run_once_registered(app: Flask, settings: Settings) -> None:
    """Flask's walk of the after-request functions is skipped for an endpoint that has none
    (http/app.py ``App.process_response``); one given to ``after_this_request``, a
    blueprint's and the app's own run as Flask runs them, for answers and refusals."""
    from flask import Response

    from service.http.core import after_this_request

    seen: list[str] = []

    def note(where: str) -> Callable[[Response], Response]:
        def noted(response: Response) -> Response:
            seen.append(f"{where} {response.status_code}")
            return response

        return noted

    def healthz() -> Any:
        after_this_request(note("later"))
        return {"ok": True}

    app.after_request_funcs["pages"].append(note("pages"))  # before the first request
    app.view_functions["meta.healthz"] = healthz
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/v1/games/not-a-game").status_code == 404
    assert client.get("/healthz").status_code == 200
    assert seen == ["later 200", "later 200"]
    assert client.get("/").status_code == 200  # the pages' blueprint
    assert seen[-1] == "pages 200"

    fresh = create_app(settings)
    try:
        fresh.after_request(note("app"))
        assert fresh.test_client().get("/v1/games/not-a-game").status_code == 404
        assert fresh.test_client().get("/healthz").status_code == 200
    finally:
        fresh.extensions["cantstop"].close()
    assert seen[-2:] == ["app 404", "app 200"]


def test_after_this_request_only_through_core() -> None:
    """Flask's ``after_this_request`` is called through ``core.after_this_request`` only: a
    function given to Flask's directly would not run (``App.process_response``)."""
    import re

    flasks = re.compile(r"flask\.after_this_request|from flask import[^\n]*\bafter_this_request\b")
    root = Path(__file__).resolve().parents[1] / "service"
    callers = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if flasks.search(path.read_text(encoding="utf-8"))
    ]
    assert callers == ["http/core.py"]


def test_url_adapters_and_hosts_are_flasks(app: Flask) -> None:
    """The request's URL adapter is bound as Flask binds it, and its ``host`` reads as Flask
    sets it (http/app.py ``App.create_url_adapter``, which leaves the host to be read), also
    with trusted hosts configured."""
    from werkzeug.exceptions import SecurityError
    from werkzeug.wsgi import get_host

    fields = ("server_name", "script_name", "subdomain", "url_scheme", "path_info", "query_args")
    hosts = ["127.0.0.1:8000", "Example.COM:80", "example.com:443", "bad host", "b\u00fccher.x"]
    for trusted in (None, ["example.com"]):
        app.config["TRUSTED_HOSTS"] = trusted
        for host in hosts:
            with app.test_request_context(
                "/v1/games/x/actions?a=1", method="POST", headers={"Host": host}
            ) as ctx:
                req = ctx.request

                def bound(create: Callable[[Any], MapAdapter | None], req: Any = req) -> Any:
                    try:
                        adapter = create(req)
                    except SecurityError as refused:  # an untrusted host, both ways
                        return repr(refused)
                    assert adapter is not None
                    return [getattr(adapter, f) for f in fields]

                assert bound(app.create_url_adapter) == bound(
                    partial(Flask.create_url_adapter, app)
                )
                if trusted is None:
                    assert req.host == get_host(req.environ)
    app.config["TRUSTED_HOSTS"] = None


def test_more_sites_than_kept_bind_as_werkzeugs(app: Flask) -> None:
    """Past the sites a map keeps (``SITES_KEPT``), it forgets them and binds each request
    as Werkzeug does, from threads at once too."""
    from concurrent.futures import ThreadPoolExecutor

    from werkzeug.routing import Map

    from service.http.app import SITES_KEPT

    def bind(host: int) -> None:
        environ = {
            "wsgi.url_scheme": "http",
            "HTTP_HOST": f"host-{host}.example:8000",
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/v1/games/x/actions",
        }
        ours = app.url_map.bind_to_environ(environ, server_name=None, subdomain="")
        theirs = Map.bind_to_environ(app.url_map, environ, None, "")
        assert vars(ours) == vars(theirs)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(bind, [n % (SITES_KEPT * 3) for n in range(SITES_KEPT * 12)]))
