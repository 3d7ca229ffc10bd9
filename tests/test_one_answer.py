"""One Idempotency-Key, one final answer, on every host; no action in a turn it was not decided
in (#43 item 1).

The fault a harness found: a roll sent to a host that froze got no answer; its retry on another
host was refused (409 turn_timed_out) and the game went on; when the frozen host thawed it
recorded the original roll under that key in the seat's next turn. Here host A "freezes" holding
the request (the game's lock, held as a stalled host holds it), host B answers the retry and the
game goes on, then A thaws. Both hosts share one store (a SQLite file, and PostgreSQL).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from domain.game import parse_at
from service.config import Settings
from service.http.app import create_app
from tests.support.games import history
from tests.support.http import bearer
from tests.support.polling import wait_until
from tests.support.racing import arrivals

Json = dict[str, Any]
ROLL = {"type": "roll", "dice": [1, 2, 3, 4]}


@pytest.fixture
def hosts(database_url: str) -> Iterator[tuple[Flask, Flask]]:
    apps = [create_app(Settings(database_url=database_url), create_tables=True) for _ in (0, 1)]
    yield apps[0], apps[1]
    for app in apps:
        app.extensions["cantstop"].close()


def clocked_game(client: FlaskClient) -> tuple[Json, str, str, datetime]:
    """A manual-dice game of two with a 5 s clock: its state, the token of the seat on turn,
    the other seat's token and the turn's deadline."""
    created = client.post(
        "/v1/games",
        json={"players": ["Ann", "Bob"], "dice": "manual", "clock": {"turn_seconds": 5}},
    ).get_json()
    game: Json = created["game"]
    on_turn = game["turn"]["player"]
    tokens = [seat["token"] for seat in created["seats"]]
    return game, tokens[on_turn], tokens[1 - on_turn], parse_at(game["turn"]["deadline"])


def act(
    client: FlaskClient, game_id: str, token: str, body: Json, key: str | None = None
) -> TestResponse:
    headers = bearer(token) | ({"Idempotency-Key": key} if key else {})
    return client.post(f"/v1/games/{game_id}/actions", json=body, headers=headers)


def play_a_turn(client: FlaskClient, game_id: str, token: str) -> None:
    """The seat on turn rolls 1 2 3 4, takes the first move and stops."""
    state = act(client, game_id, token, ROLL).get_json()["game"]
    assert state["turn"]["phase"] == "move", state
    act(client, game_id, token, state["legal_actions"][0])
    stopped = act(client, game_id, token, {"type": "stop"})
    assert stopped.status_code == 200, stopped.get_json()


def frozen_request(
    host: Flask, game_id: str, body: Json, token: str, key: str | None
) -> tuple[threading.Thread, list[TestResponse]]:
    answers: list[TestResponse] = []
    thread = threading.Thread(
        target=lambda: answers.append(act(host.test_client(), game_id, token, body, key))
    )
    return thread, answers


def test_a_frozen_hosts_keyed_roll_answers_as_its_retry_was_answered(
    hosts: tuple[Flask, Flask],
) -> None:
    a, b = hosts
    client_b = b.test_client()
    game, token, other_token, deadline = clocked_game(client_b)
    game_id = game["id"]
    other_seat = 1 - game["turn"]["player"]
    key = "roll-once"
    rt_a = a.extensions["cantstop"]
    a.test_client().get(f"/v1/games/{game_id}")  # host A has the game in its cache
    request, answers = frozen_request(a, game_id, ROLL, token, key)
    with rt_a.store.owned(uuid.UUID(game_id)), arrivals(rt_a.store) as arrived:
        request.start()  # host A stalls with the request in hand
        wait_until(arrived.is_set, 10, "host A to have the roll in hand")
        wait_until(lambda: datetime.now(UTC) > deadline, 10, "the turn's deadline to pass")
        retry = act(client_b, game_id, token, ROLL, key)  # the client's retry, on host B
        assert retry.status_code == 409 and retry.get_json()["code"] == "turn_timed_out"
        assert "Idempotent-Replayed" not in retry.headers
        # The game goes on: the other seat plays a turn; it is the first seat's turn again.
        play_a_turn(client_b, game_id, other_token)
        assert client_b.get(f"/v1/games/{game_id}").get_json()["turn"]["player"] != other_seat
        before = [e["hash"] for e in history(client_b, game_id)]
    request.join(30)
    [late] = answers
    assert late.status_code == 409 and late.get_json()["code"] == "turn_timed_out", late.get_json()
    assert [e["hash"] for e in history(client_b, game_id)] == before  # nothing recorded
    for host in (a, b):  # the key's one answer, on every host, from now on
        again = act(host.test_client(), game_id, token, ROLL, key)
        assert again.status_code == 409 and again.get_json()["code"] == "turn_timed_out"
        assert again.headers["Idempotent-Replayed"] == "true"
    assert client_b.get(f"/v1/games/{game_id}/audit").get_json()["valid"] is True


def test_a_frozen_hosts_unkeyed_roll_never_lands_in_a_later_turn(
    hosts: tuple[Flask, Flask],
) -> None:
    """No key, no If-Match, no retry: while host A holds the roll, the turn times out and the
    other seat plays; thawed, A refuses the roll (409 turn_moved_on: the turn now on
    began after the request arrived) and records nothing."""
    a, b = hosts
    client_b = b.test_client()
    game, token, other_token, deadline = clocked_game(client_b)
    game_id = game["id"]
    rt_a = a.extensions["cantstop"]
    a.test_client().get(f"/v1/games/{game_id}")
    request, answers = frozen_request(a, game_id, ROLL, token, None)
    with rt_a.store.owned(uuid.UUID(game_id)), arrivals(rt_a.store) as arrived:
        request.start()
        wait_until(arrived.is_set, 10, "host A to have the roll in hand")
        wait_until(lambda: datetime.now(UTC) > deadline, 10, "the turn's deadline to pass")
        late_elsewhere = act(client_b, game_id, token, {"type": "stop"})  # records the timeout
        assert late_elsewhere.get_json()["code"] == "turn_timed_out"
        play_a_turn(client_b, game_id, other_token)
        before = [e["hash"] for e in history(client_b, game_id)]
    request.join(30)
    [late] = answers
    assert late.status_code == 409 and late.get_json()["code"] == "turn_moved_on", late.get_json()
    assert [e["hash"] for e in history(client_b, game_id)] == before
    # Sent now, the same roll is decided on this turn and recorded.
    assert act(client_b, game_id, token, ROLL).status_code == 200


def test_a_keyed_refusal_is_the_keys_answer_even_once_the_action_is_legal(
    client: FlaskClient,
) -> None:
    created = client.post(
        "/v1/games", json={"players": ["Ann", "Bob"], "dice": "manual"}
    ).get_json()
    game = created["game"]
    game_id, seat = game["id"], game["turn"]["player"]
    token = created["seats"][seat]["token"]
    early = act(client, game_id, token, {"type": "stop"}, "k-stop")  # no runner yet
    assert early.status_code == 409 and early.get_json()["code"] == "illegal_action"
    act(client, game_id, token, ROLL)
    state = client.get(f"/v1/games/{game_id}").get_json()
    act(client, game_id, token, state["legal_actions"][0])
    version = client.get(f"/v1/games/{game_id}").get_json()["version"]
    again = act(client, game_id, token, {"type": "stop"}, "k-stop")  # legal now: same answer
    assert again.status_code == 409 and again.get_json()["code"] == "illegal_action"
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["legal_actions"]  # as an illegal_action problem always has
    assert client.get(f"/v1/games/{game_id}").get_json()["version"] == version
    assert act(client, game_id, token, {"type": "stop"}, "k-stop-2").status_code == 200
    # The game's history and export hold no trace of the refusal.
    assert "refused" not in client.get(f"/v1/games/{game_id}/export").get_data(as_text=True)


def test_a_resignation_is_not_held_to_its_turn(hosts: tuple[Flask, Flask]) -> None:
    a, b = hosts
    client_b = b.test_client()
    game, token, other_token, _ = clocked_game(client_b)
    game_id = game["id"]
    rt_a = a.extensions["cantstop"]
    request, answers = frozen_request(a, game_id, {"type": "resign"}, other_token, None)
    with rt_a.store.owned(uuid.UUID(game_id)), arrivals(rt_a.store) as arrived:
        request.start()
        wait_until(arrived.is_set, 10, "host A to have the resignation in hand")
        play_a_turn(client_b, game_id, token)  # a new turn begins after the resignation arrived
    request.join(30)
    assert answers[0].status_code == 200, answers[0].get_json()


# ------------------------------------------------------------------ what keys cost a game
def vault_of(app: Flask, game_id: str) -> Any:
    return app.extensions["cantstop"].games.secrets.read(uuid.UUID(game_id))


def test_a_seat_keeps_only_its_newest_keys_so_refusals_cannot_grow_the_game(client: Any) -> None:
    """Each keyed refusal is kept in the vault as the key's answer (#43), so a seat sending
    refused actions under fresh keys made the vault, its snapshots and every keyed action of the
    game grow without end (a review measured 2.6 → 21 ms an action after 2,000). A seat's
    newest ``KEYS_PER_SEAT`` keys are kept; an older key's answer is forgotten, as one past the
    48 h TTL is."""
    from service.application.aggregates import KEYS_PER_SEAT

    app = client.application
    game, on_turn, waiting, _ = clocked_game(client)
    game_id = game["id"]
    sent = KEYS_PER_SEAT + 20
    for i in range(sent):
        refused = act(client, game_id, waiting, {"type": "stop"}, key=f"k{i}")
        assert refused.status_code == 403, refused.get_json()
    waiting_seat = 1 - game["turn"]["player"]
    kept = [k for k in vault_of(app, game_id).keys if k.startswith(f"{waiting_seat}:")]
    assert len(kept) == KEYS_PER_SEAT
    assert kept == [f"{waiting_seat}:k{i}" for i in range(sent - KEYS_PER_SEAT, sent)]
    # the newest still answers as it did, on every host: one key, one answer
    again = act(client, game_id, waiting, {"type": "stop"}, key=f"k{sent - 1}")
    assert again.status_code == 403
    assert again.headers.get("Idempotent-Replayed") == "true"
    # the other seat's keys are its own, and its keyed actions go on as before
    rolled = act(client, game_id, on_turn, ROLL, key="mine")
    assert rolled.status_code == 200, rolled.get_json()
    assert f"{1 - waiting_seat}:mine" in vault_of(app, game_id).keys


def test_a_keyed_action_on_a_finished_game_records_nothing(client: Any) -> None:
    """A game over stays over: its refusal is the same for any later copy of the request, so
    nothing need be kept for the key (a refused action records no event)."""
    app = client.application
    game, on_turn, waiting, _ = clocked_game(client)
    game_id = game["id"]
    assert act(client, game_id, on_turn, {"type": "resign"}).status_code == 200
    before = vault_of(app, game_id).version
    for i in range(5):
        refused = act(client, game_id, waiting, {"type": "stop"}, key=f"late{i}")
        assert refused.status_code == 409
        assert refused.get_json()["code"] == "game_over"
    assert vault_of(app, game_id).version == before
