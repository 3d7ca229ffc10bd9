"""The stored rows of a game, tampered with directly in the database (SQLite or PostgreSQL),
bypassing the application entirely."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from flask import Flask
from flask.testing import FlaskClient
from psycopg import sql

from service.config import Settings
from service.http.app import create_app
from tests.support.http import ok


def json_fields(app: Flask, state: bytes) -> dict[str, Any]:
    """A stored state, whatever its form (compact, deflated, JSON: service/persistence/
    compact.py), as the library's JSON form holds it (times as ``{"_type_": ...}``): what a test
    alters and writes back as JSON, the form a store written before the compact form holds."""
    transcoder = app.extensions["cantstop"].games.store.mapper.transcoder
    fields: dict[str, Any] = json.loads(transcoder.encode_json(transcoder.decode(state)))
    return fields


class StoredRows:
    """Direct access to eventsourcing's stored events table, behind the application's back."""

    def __init__(self, app: Flask, database_url: str) -> None:
        self.app = app
        recorder = app.extensions["cantstop"].games.store.recorder
        self.table: str = recorder.events_table_name
        self.url = database_url
        self.postgres = not database_url.startswith("sqlite:///")
        self.schema: str = recorder.datastore.schema if self.postgres else ""

    def _run(self, statement: str, params: tuple[Any, ...]) -> list[Any]:
        if self.postgres:
            query = sql.SQL(statement.replace("?", "%s")).format(
                table=sql.Identifier(self.schema, self.table)
            )
            with psycopg.connect(self.url, autocommit=True) as conn:
                cursor = conn.execute(query, params)
                return list(cursor.fetchall()) if cursor.description else []
        with sqlite3.connect(self.url[len("sqlite:///") :]) as db:
            rows = db.execute(statement.replace("{table}", self.table), params).fetchall()
        db.close()
        return rows

    def _id(self, game_id: str) -> Any:
        return uuid.UUID(game_id) if self.postgres else uuid.UUID(game_id).hex

    def read(self, game_id: str, version: int) -> tuple[str, bytes]:
        rows = self._run(
            "SELECT topic, state FROM {table} WHERE originator_id = ? AND originator_version = ?",
            (self._id(game_id), version),
        )
        assert len(rows) == 1
        return rows[0][0], bytes(rows[0][1])

    def write(self, game_id: str, version: int, topic: str, state: bytes) -> None:
        self._run(
            "UPDATE {table} SET topic = ?, state = ? "
            "WHERE originator_id = ? AND originator_version = ?",
            (topic, state, self._id(game_id), version),
        )
        assert self.read(game_id, version) == (topic, state)

    def delete(self, game_id: str, version: int) -> None:
        self._run(
            "DELETE FROM {table} WHERE originator_id = ? AND originator_version = ?",
            (self._id(game_id), version),
        )

    def edit(self, game_id: str, version: int, change: Callable[[dict[str, Any]], None]) -> None:
        """Decode a row's state, let ``change`` alter it, write it back in the JSON form."""
        topic, state = self.read(game_id, version)
        body = json_fields(self.app, state)
        change(body)
        self.write(game_id, version, topic, json.dumps(body, separators=(",", ":")).encode())


@contextmanager
def served(url: str) -> Iterator[FlaskClient]:
    """A client of a new app on the store at ``url``: nothing cached, every read from it."""
    app = create_app(Settings(database_url=url), create_tables=True)
    try:
        yield app.test_client()
    finally:
        app.extensions["cantstop"].close()


def answers(client: FlaskClient, game_id: str) -> dict[str, Any]:
    """What the API serves of a game from its stored rows: state, past versions, events,
    export, audit, record sheet."""
    game = ok(client.get(f"/v1/games/{game_id}"))
    paths = [
        f"/v1/games/{game_id}",
        f"/v1/games/{game_id}/events?limit=1000",
        f"/v1/games/{game_id}/export",
        f"/v1/games/{game_id}/audit",
        f"/v1/games/{game_id}/record-sheet?seat=0",
        *(f"/v1/games/{game_id}?version={v}" for v in range(1, game["version"] + 1, 7)),
    ]
    found = {}
    for path in paths:
        response = client.get(path)
        assert response.status_code == 200, path
        found[path] = response.get_data()
    return found
