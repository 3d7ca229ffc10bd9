"""Rated games between accounts, played through the API (contract 1.3: with a clock)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from flask.testing import FlaskClient

from domain.game import ZERO_HASH, chain_hash
from tests.support.http import bearer

Json = dict[str, Any]
PASSWORD = "correct horse battery"
CLOCK = {"turn_seconds": 3600}
NDJSON = "application/x-ndjson"


def sign_up(client: FlaskClient, handle: str) -> str:
    reply = client.post("/v1/accounts", json={"handle": handle, "password": PASSWORD})
    assert reply.status_code == 201, reply.get_json()
    token: str = reply.get_json()["token"]
    return token


def rated_pair(client: FlaskClient, tokens: dict[str, str], first: str, second: str) -> Json:
    """A rated two-seat game with a clock: ``first`` opens the lobby, ``second`` joins it."""
    lobby = client.post(
        "/v1/games",
        json={"seats": 2, "rated": True, "clock": CLOCK},
        headers=bearer(tokens[first]),
    )
    assert lobby.status_code == 201, lobby.get_json()
    game_id = lobby.get_json()["game"]["id"]
    joined = client.post(f"/v1/games/{game_id}/players", json={}, headers=bearer(tokens[second]))
    assert joined.status_code == 201, joined.get_json()
    game: Json = joined.get_json()["game"]
    assert game["status"] == "in_progress"
    return game


def seat_tokens(game: Json, tokens: dict[str, str]) -> dict[int, str]:
    return {p["seat"]: tokens[p["account"]] for p in game["players"] if p["account"] in tokens}


def act(client: FlaskClient, game_id: str, token: str, action: Json) -> Json:
    reply = client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(token))
    assert reply.status_code == 200, reply.get_json()
    game: Json = reply.get_json()["game"]
    return game


def play_a_turn(client: FlaskClient, game: Json, by_seat: dict[int, str]) -> Json:
    """The seat to act rolls, then moves and stops unless it busted: a turn of its own."""
    seat = game["turn"]["player"]
    game = act(client, game["id"], by_seat[seat], {"type": "roll"})
    if game["turn"] is not None and game["turn"]["player"] == seat:
        move = next(a for a in game["legal_actions"] if a["type"] == "move")
        act(client, game["id"], by_seat[seat], {"type": "move", "sums": move["sums"]})
        game = act(client, game["id"], by_seat[seat], {"type": "stop"})
    return game


def finished_rated_game(client: FlaskClient, tokens: dict[str, str]) -> Json:
    """ann against bob, rated: each plays a turn, then the one to act resigns."""
    game = rated_pair(client, tokens, "ann", "bob")
    by_seat = seat_tokens(game, tokens)
    for _ in range(2):
        game = play_a_turn(client, game, by_seat)
    game = act(client, game["id"], by_seat[game["turn"]["player"]], {"type": "resign"})
    assert game["status"] == "finished" and game["finish_reason"] == "last_player"
    return game


def export_text(client: FlaskClient, game_id: str) -> str:
    reply = client.get(f"/v1/games/{game_id}/export")
    assert reply.status_code == 200
    return reply.get_data(as_text=True)


def renamed(export: str, old: str, new: str) -> str:
    """The export with account ``old`` named ``new`` throughout, its hash chain computed again
    and a header naming a game this server does not have: a forgery that verifies on its own."""
    header, *lines = export.splitlines()
    events = [json.loads(line) for line in lines]
    previous = ZERO_HASH
    for event in events:
        text = json.dumps(event["data"]).replace(f'"{old}"', f'"{new}"')
        event["data"] = json.loads(text)
        event["prev_hash"] = previous
        event["hash"] = chain_hash(
            previous, event["version"], event["type"], event["at"], event["data"]
        )
        previous = event["hash"]
    head = {**json.loads(header), "game_id": str(uuid.uuid4())}
    return "\n".join(json.dumps(line) for line in [head, *events]) + "\n"
