"""Creating requests with an Idempotency-Key (#43 item 3): a retry returns the first answer, with
the same tokens, to the same caller, and creates nothing more, on any host; the stored answer
gives nothing away without the key (service/http/idempotent.py)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.config import Settings
from service.http.app import create_app
from tests.support.http import bearer
from tests.support.racing import race_cleanly
from tests.support.rated import CLOCK, PASSWORD, sign_up

Json = dict[str, Any]


def key() -> str:
    return str(uuid.uuid4())


def keyed(k: str, token: str | None = None) -> dict[str, str]:
    return {"Idempotency-Key": k, **(bearer(token) if token else {})}


def games_total(client: FlaskClient) -> int:
    total: int = client.get("/v1/games?limit=1").get_json()["total"]
    return total


def test_a_repeated_game_creation_answers_the_first_answer_and_creates_nothing(
    app: Flask,
) -> None:
    client = app.test_client()
    k = key()
    first = client.post("/v1/games", json={"players": ["Ann", "Bob"]}, headers=keyed(k))
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    again = client.post("/v1/games", json={"players": ["Ann", "Bob"]}, headers=keyed(k))
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == first.get_json()  # the same game, the same seat tokens
    assert again.headers["Location"] == first.headers["Location"]
    assert again.headers["ETag"] == first.headers["ETag"]
    assert games_total(client) == 1
    # The seat tokens replayed are the game's: they act.
    game = first.get_json()["game"]
    token = again.get_json()["seats"][game["turn"]["player"]]["token"]
    acted = client.post(
        f"/v1/games/{game['id']}/actions", json={"type": "roll"}, headers=bearer(token)
    )
    assert acted.status_code == 200, acted.get_json()


def test_another_request_with_the_same_key_is_refused(app: Flask) -> None:
    client = app.test_client()
    k = key()
    assert (
        client.post("/v1/games", json={"players": ["A", "B"]}, headers=keyed(k)).status_code == 201
    )
    other = client.post("/v1/games", json={"players": ["A", "C"]}, headers=keyed(k))
    assert other.status_code == 422 and other.get_json()["code"] == "idempotency_key_reused"
    elsewhere = client.post(
        "/v1/accounts", json={"handle": "ann", "password": PASSWORD}, headers=keyed(k)
    )
    assert elsewhere.get_json()["code"] == "idempotency_key_reused"
    assert games_total(client) == 1


def test_a_short_key_without_credentials_and_a_bad_key_are_422(app: Flask) -> None:
    client = app.test_client()
    short = client.post("/v1/games", json={"players": ["A", "B"]}, headers=keyed("abc"))
    assert short.status_code == 422 and "at least 16" in short.get_json()["detail"]
    bad = client.post("/v1/games", json={"players": ["A", "B"]}, headers=keyed("x" * 201))
    assert bad.status_code == 422
    token = sign_up(client, "ann")  # with credentials, any key of 1 to 200 characters
    made = client.post("/v1/games", json={"players": ["A", "B"]}, headers=keyed("1", token))
    assert made.status_code == 201
    assert games_total(client) == 1


def test_the_same_key_from_another_caller_is_another_request(app: Flask) -> None:
    client = app.test_client()
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    body = {"players": [{"account": "ann"}, "Robo"]}
    first = client.post("/v1/games", json=body, headers=keyed("k1", ann))
    body_bob = {"players": [{"account": "bob"}, "Robo"]}
    second = client.post("/v1/games", json=body_bob, headers=keyed("k1", bob))
    assert first.status_code == second.status_code == 201
    assert first.get_json()["game"]["id"] != second.get_json()["game"]["id"]


def test_a_refused_creation_gives_its_key_back(app: Flask) -> None:
    client = app.test_client()
    k = key()
    refused = client.post(
        "/v1/games", json={"players": ["A", "B"], "rated": True}, headers=keyed(k)
    )
    assert refused.status_code == 422 and refused.get_json()["code"] == "rated_needs_clock"
    again = client.post("/v1/games", json={"players": ["A", "B"], "rated": True}, headers=keyed(k))
    assert again.status_code == 422 and "Idempotent-Replayed" not in again.headers
    made = client.post("/v1/games", json={"players": ["A", "B"]}, headers=keyed(k))
    assert made.status_code == 201
    assert games_total(client) == 1


@pytest.fixture
def hooks_app(database_url: str) -> Iterator[Flask]:
    """An app whose webhooks may point at this machine (as tests/test_webhooks.py's)."""
    env = {"CANTSTOP_WEBHOOK_ALLOW_PRIVATE": "true"}
    application = create_app(Settings(database_url=database_url, extra_env=env), create_tables=True)
    yield application
    application.extensions["cantstop"].close()


def test_sign_up_challenge_seek_webhook_and_rematch_replay(hooks_app: Flask) -> None:
    client = hooks_app.test_client()
    k = key()
    signed = client.post(
        "/v1/accounts", json={"handle": "ann", "password": PASSWORD}, headers=keyed(k)
    )
    again = client.post(
        "/v1/accounts", json={"handle": "ann", "password": PASSWORD}, headers=keyed(k)
    )
    assert signed.status_code == again.status_code == 201
    assert again.get_json()["token"] == signed.get_json()["token"]
    ann = signed.get_json()["token"]
    bob = sign_up(client, "bob")

    for n, (path, body) in enumerate(
        (
            ("/v1/challenges", {"to": "bob", "rated": True, "clock": CLOCK}),
            ("/v1/seeks", {"players": 2}),
            ("/v1/account/webhooks", {"url": "http://127.0.0.1:9/hook", "events": ["challenge"]}),
        )
    ):
        first = client.post(path, json=body, headers=keyed(f"k{n}", ann))
        repeat = client.post(path, json=body, headers=keyed(f"k{n}", ann))
        assert first.status_code == 201, (path, first.get_json())
        assert repeat.status_code == 201 and repeat.headers["Idempotent-Replayed"] == "true"
        assert repeat.get_json() == first.get_json(), path
    challenges = client.get("/v1/challenges", headers=bearer(bob)).get_json()
    assert len(challenges["incoming"]) == 1

    game = client.post("/v1/games", json={"players": ["A", "B"]}).get_json()
    tokens = [s["token"] for s in game["seats"]]
    game_id = game["game"]["id"]
    client.post(f"/v1/games/{game_id}/actions", json={"type": "resign"}, headers=bearer(tokens[0]))
    claim = client.post(f"/v1/games/{game_id}/rematch", headers=keyed("r", tokens[1]))
    repeat = client.post(f"/v1/games/{game_id}/rematch", headers=keyed("r", tokens[1]))
    assert claim.status_code == 201, claim.get_json()
    assert repeat.get_json() == claim.get_json() and repeat.headers["Idempotent-Replayed"] == "true"


def test_the_stored_answer_holds_no_token_in_the_clear(app: Flask) -> None:
    client = app.test_client()
    k = key()
    made = client.post("/v1/games", json={"players": ["A", "B"]}, headers=keyed(k)).get_json()
    rt = app.extensions["cantstop"]
    rows = rt.creations.execute("SELECT * FROM cantstop_creations", fetch="all")
    assert len(rows) == 1
    stored = b"".join(
        bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode()
        for v in dict(rows[0]).values()
    )
    for seat in made["seats"]:
        assert seat["token"].encode() not in stored
    assert k.encode() not in stored and made["game"]["id"].encode() not in stored


@pytest.fixture
def two_hosts(postgres_url: str) -> Iterator[tuple[Flask, Flask]]:
    hosts = [create_app(Settings(database_url=postgres_url), create_tables=True) for _ in (0, 1)]
    yield hosts[0], hosts[1]
    for host in hosts:
        host.extensions["cantstop"].close()


@pytest.mark.postgres
def test_two_hosts_racing_with_one_key_create_one_game(two_hosts: tuple[Flask, Flask]) -> None:
    def create(client: FlaskClient, k: str) -> tuple[int, Any]:
        reply = client.post("/v1/games", json={"players": ["A", "B"]}, headers=keyed(k))
        return reply.status_code, reply.get_json()

    for _ in range(5):
        k = key()
        clients = [h.test_client() for h in (*two_hosts, *two_hosts)]
        answers = race_cleanly([partial(create, c, k) for c in clients], timeout=60)
        made = [body for status, body in answers if status == 201]
        busy = [body for status, body in answers if status == 409]
        assert len(made) + len(busy) == 4 and made
        assert all(b["code"] == "idempotency_key_in_use" for b in busy)
        assert all(m == made[0] for m in made)  # one game, one answer
    assert games_total(two_hosts[0].test_client()) == 5


@pytest.mark.postgres
def test_a_host_frozen_mid_creation_holds_the_key_until_it_answers(
    two_hosts: tuple[Flask, Flask],
) -> None:
    """Host A stops inside the creation (after claiming the key); the client's retry on host B
    is told to wait (409 with Retry-After), and once A answers, B replays A's answer."""
    frozen, thawed = threading.Event(), threading.Event()
    rt_a = two_hosts[0].extensions["cantstop"]
    create = rt_a.games.create

    def stalled(*args: Any, **kwargs: Any) -> Any:
        frozen.set()
        assert thawed.wait(30)
        return create(*args, **kwargs)

    rt_a.games.create = stalled
    k = key()
    first: list[Any] = []
    request = threading.Thread(
        target=lambda: first.append(
            two_hosts[0]
            .test_client()
            .post("/v1/games", json={"players": ["A", "B"]}, headers=keyed(k))
        )
    )
    request.start()
    try:
        assert frozen.wait(30)
        b = two_hosts[1].test_client()
        waiting = b.post("/v1/games", json={"players": ["A", "B"]}, headers=keyed(k))
        assert waiting.status_code == 409
        assert waiting.get_json()["code"] == "idempotency_key_in_use"
        assert waiting.headers["Retry-After"] == "1"
    finally:
        thawed.set()
        request.join(timeout=30)
        rt_a.games.create = create
    assert first[0].status_code == 201
    replay = b.post("/v1/games", json={"players": ["A", "B"]}, headers=keyed(k))
    assert replay.status_code == 201 and replay.get_json() == first[0].get_json()
    assert games_total(b) == 1


def test_a_claim_left_by_a_dead_request_is_taken_over_after_60_s(app: Flask) -> None:
    """Claims and answers through the table itself: a pending claim holds its key for STALE
    seconds, an answered one for KEEP; a claim that no longer stands cannot complete."""
    from service.persistence.creations import KEEP, STALE, Found

    table = app.extensions["cantstop"].creations
    assert table.claim("k", "f", 1000.0) is None
    assert table.claim("k", "f", 1000.0 + STALE - 1) == Found("f", None)  # still answered
    assert table.claim("k", "f", 1000.0 + STALE) is None  # the dead one's claim is taken over
    assert not table.complete("k", 1000.0, b"late")  # the first claimant's answer is dropped
    assert table.complete("k", 1000.0 + STALE, b"sealed")
    assert table.claim("k", "f", 2000.0) == Found("f", b"sealed")
    assert table.claim("k", "f", 1000.0 + STALE + KEEP) is None  # expired: a new request
