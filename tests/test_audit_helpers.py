"""Helpers shared by the test_audit_* files (this module holds no tests).

Games are played through the HTTP API; stored rows are tampered with directly in the database
(SQLite or PostgreSQL), bypassing the application entirely.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from flask import Flask
from flask.testing import FlaskClient
from psycopg import sql

MAX_ACTIONS = 3000
# Three manual turns for seat 0, 1, 0: each a roll, its first legal move, and a stop.
# Versions: 1 GameCreated, 2 TurnOrderDecided, then (roll, move, stop) at 3-5, 6-8, 9-11.
MANUAL_ROLLS = [[3, 4, 2, 6], [1, 5, 4, 6], [2, 2, 3, 5]]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


def create_game(client: FlaskClient, **body: Any) -> tuple[str, list[str]]:
    created = ok(client.post("/v1/games", json=body), 201)
    return created["game"]["id"], [seat["token"] for seat in created["seats"]]


def play_manual(
    client: FlaskClient, rolls: list[list[int]] = MANUAL_ROLLS
) -> tuple[str, list[str]]:
    """A manual-dice game of two players: each roll, then the first legal move, then a stop."""
    game_id, tokens = create_game(client, players=["Ann", "Bob"], dice="manual")
    for dice in rolls:
        state = ok(client.get(f"/v1/games/{game_id}"))
        token = tokens[state["turn"]["player"]]
        state = ok(
            client.post(
                f"/v1/games/{game_id}/actions",
                json={"type": "roll", "dice": dice},
                headers=bearer(token),
            )
        )["game"]
        if state["turn"]["phase"] != "move":
            continue  # a bust: the turn has passed
        move = state["legal_actions"][0]
        ok(client.post(f"/v1/games/{game_id}/actions", json=move, headers=bearer(token)))
        ok(
            client.post(
                f"/v1/games/{game_id}/actions", json={"type": "stop"}, headers=bearer(token)
            )
        )
    return game_id, tokens


def choose(state: dict[str, Any]) -> dict[str, Any]:
    """The first legal action, except that a player stops whenever stopping is allowed.

    (Always taking the first action would roll forever: roll is listed before stop.)
    """
    actions = state["legal_actions"]
    return next((a for a in actions if a["type"] == "stop"), actions[0])


def play_to_the_end(
    client: FlaskClient,
    game_id: str,
    tokens: list[str],
    on_response: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Play a started game with ``choose`` until it is finished; the final state."""
    state: dict[str, Any] = ok(client.get(f"/v1/games/{game_id}"))
    for _ in range(MAX_ACTIONS):
        if state["status"] == "finished":
            return state
        token = tokens[state["turn"]["player"]]
        response = client.post(
            f"/v1/games/{game_id}/actions", json=choose(state), headers=bearer(token)
        )
        if on_response is not None:
            on_response(response)
        state = ok(response)["game"]
    raise AssertionError(f"the game did not finish in {MAX_ACTIONS} actions")


def export_text(client: FlaskClient, game_id: str) -> str:
    response = client.get(f"/v1/games/{game_id}/export")
    assert response.status_code == 200
    assert response.mimetype == "application/x-ndjson"
    return response.get_data(as_text=True)


# ------------------------------------------------------------------------- the stored rows
class StoredRows:
    """Direct access to eventsourcing's stored events table, behind the application's back."""

    def __init__(self, app: Flask, database_url: str) -> None:
        recorder = app.extensions["cantstop"].games.recorder
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
        """Decode a row's JSON state, let ``change`` alter it, write it back."""
        topic, state = self.read(game_id, version)
        body = json.loads(state)
        change(body)
        self.write(game_id, version, topic, json.dumps(body, separators=(",", ":")).encode())
