"""Clocked games over HTTP, as the clock and deadline tests play them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from domain.game import parse_at

Json = dict[str, Any]


def clocked_game(client: FlaskClient) -> tuple[Json, str, datetime]:
    """A manual-dice game of two with a 5 s clock: its state, the token of the seat to play and
    the turn's deadline."""
    created = client.post(
        "/v1/games",
        json={"players": ["Ann", "Bob"], "dice": "manual", "clock": {"turn_seconds": 5}},
    ).get_json()
    game: Json = created["game"]
    token: str = created["seats"][game["turn"]["player"]]["token"]
    return game, token, parse_at(game["turn"]["deadline"])


def roll(client: FlaskClient, game_id: str, token: str) -> TestResponse:
    """The seat's roll of 1, 2, 3, 4 in a manual-dice game: the response."""
    return client.post(
        f"/v1/games/{game_id}/actions",
        json={"type": "roll", "dice": [1, 2, 3, 4]},
        headers={"Authorization": f"Bearer {token}"},
    )
