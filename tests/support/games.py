"""Games through the in-process API (the Flask test client): created, played by hand or to the
end, their events and export; and a game id no store holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient

from tests.support.http import Json, bearer, ok

# A game id no store holds (fixed, so parallel test workers collect the same test ids).
UNKNOWN = "5d4a4c1e-0000-4000-8000-00000000dead"

MAX_ACTIONS = 3000
# Three manual turns for seat 0, 1, 0: each a roll, its first legal move, and a stop.
# Versions: 1 GameCreated, 2 TurnOrderDecided, then (roll, move, stop) at 3-5, 6-8, 9-11.
MANUAL_ROLLS = [[3, 4, 2, 6], [1, 5, 4, 6], [2, 2, 3, 5]]


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


def history(client: FlaskClient, game_id: str) -> list[Json]:
    found: list[Json] = client.get(f"/v1/games/{game_id}/events?limit=1000").get_json()["events"]
    return found
