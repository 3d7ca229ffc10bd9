"""A game's seat secrets (its vault): what a token check reads, and whose Idempotency-Key answers a
seat keeps.

A started game's vault is sealed: its seats never change again, so a token no seat holds is
refused from what the host read once, never by reading the vault again (a random bogus token
on every request cost a read of the store each). A lobby's seats change hands, on any host: its
vault is read afresh, so a seat taken on another host is found, and once that seat starts the
game the first read of the sealed vault sees every seat (a rematch's too).

A seat's kept Idempotency-Key answers are its holder's: a lobby seat given back forgets them, so
whoever takes it next is never answered with the last holder's refusals. Two hosts are two apps
on one store (a SQLite file, and PostgreSQL).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from domain.commands import parse_action
from domain.errors import IllegalAction
from service.application.aggregates import Vault
from service.config import Settings
from service.http.app import create_app
from tests.support.http import Json, bearer, ok, refused

ROLL = {"type": "roll", "dice": [1, 2, 3, 4]}


@pytest.fixture
def hosts(database_url: str) -> Iterator[tuple[Flask, Flask]]:
    first = create_app(Settings(database_url=database_url), create_tables=True)
    second = create_app(Settings(database_url=database_url))
    yield first, second
    for app in (first, second):
        app.extensions["cantstop"].close()


def vault_reads(host: Flask, monkeypatch: pytest.MonkeyPatch) -> list[uuid.UUID]:
    """The games whose vault ``host`` reads from the store from now on, one entry a read."""
    games_secrets = host.extensions["cantstop"].games.secrets
    read: Callable[[uuid.UUID], Vault] = games_secrets.read
    reads: list[uuid.UUID] = []

    def counted(game_id: uuid.UUID) -> Vault:
        reads.append(game_id)
        return read(game_id)

    monkeypatch.setattr(games_secrets, "read", counted)
    return reads


def act(
    client: FlaskClient, game_id: str, token: str, body: Json, key: str | None = None
) -> TestResponse:
    headers = bearer(token) | ({"Idempotency-Key": key} if key else {})
    return client.post(f"/v1/games/{game_id}/actions", json=body, headers=headers)


def seat_of(client: FlaskClient, game_id: str, token: str) -> int:
    seat: int = ok(client.get(f"/v1/games/{game_id}/seat", headers=bearer(token)))["seat"]
    return seat


def join(client: FlaskClient, game_id: str, name: str) -> Json:
    joined: Json = ok(client.post(f"/v1/games/{game_id}/players", json={"name": name}), 201)
    return joined


# ------------------------------------------------------------------------------ token checks
def test_bogus_tokens_on_a_started_game_read_its_vault_at_most_once(
    client: FlaskClient, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = ok(client.post("/v1/games", json={"players": ["Ann", "Bob"], "dice": "manual"}), 201)
    game_id = created["game"]["id"]
    tokens = [seat["token"] for seat in created["seats"]]
    reads = vault_reads(app, monkeypatch)
    for _ in range(100):
        refused(act(client, game_id, secrets.token_urlsafe(24), ROLL), 401, "unauthorized")
    assert len(reads) <= 1, f"{len(reads)} vault reads for 100 bogus tokens"
    # A seat's own token still acts, from the same kept secrets.
    on_turn = created["game"]["turn"]["player"]
    rolled = act(client, game_id, tokens[on_turn], ROLL)
    assert rolled.status_code == 200, rolled.get_json()
    assert len(reads) <= 1
    refused(act(client, game_id, tokens[1 - on_turn], ROLL), 403, "not_your_turn")


def test_a_lobby_seat_taken_on_another_host_is_found(
    hosts: tuple[Flask, Flask], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, two = (host.test_client() for host in hosts)
    game_id = ok(one.post("/v1/games", json={"seats": 3, "dice": "manual"}), 201)["game"]["id"]
    ann = join(one, game_id, "Ann")
    assert seat_of(one, game_id, ann["token"]) == ann["seat"]  # host one keeps the lobby's
    bob = join(two, game_id, "Bob")  # a seat host one has not seen
    assert seat_of(one, game_id, bob["token"]) == bob["seat"]
    # Bob gives his seat back on host two, Cy takes it, and Dee's seat starts the game there.
    left = two.delete(f"/v1/games/{game_id}/players/{bob['seat']}", headers=bearer(bob["token"]))
    assert left.status_code == 200, left.get_json()
    refused(one.get(f"/v1/games/{game_id}/seat", headers=bearer(bob["token"])), 401, "unauthorized")
    cy = join(two, game_id, "Cy")
    dee = join(two, game_id, "Dee")
    assert dee["game"]["status"] == "in_progress"
    # Host one's first read of the sealed vault sees every seat, and keeps it: a bogus token
    # reads nothing more.
    reads = vault_reads(hosts[0], monkeypatch)
    for player in (ann, cy, dee):
        assert seat_of(one, game_id, player["token"]) == player["seat"]
    refused(one.get(f"/v1/games/{game_id}/seat", headers=bearer(bob["token"])), 401, "unauthorized")
    for _ in range(20):
        bogus = secrets.token_urlsafe(24)
        refused(one.get(f"/v1/games/{game_id}/seat", headers=bearer(bogus)), 401, "unauthorized")
    assert len(reads) <= 1, reads
    on_turn = dee["game"]["turn"]["player"]
    token = next(p["token"] for p in (ann, cy, dee) if p["seat"] == on_turn)
    assert act(one, game_id, token, ROLL).status_code == 200


def test_a_rematch_seat_claimed_on_another_host_is_found(hosts: tuple[Flask, Flask]) -> None:
    one, two = (host.test_client() for host in hosts)
    created = ok(one.post("/v1/games", json={"players": ["Ann", "Bob"], "dice": "manual"}), 201)
    game_id = created["game"]["id"]
    ann, bob = (seat["token"] for seat in created["seats"])
    ok(act(one, game_id, ann, {"type": "resign"}))
    ann_claim = ok(one.post(f"/v1/games/{game_id}/rematch", headers=bearer(ann)), 201)
    rematch_id = ann_claim["game"]["id"]
    # Host one keeps the rematch's lobby (Ann's seat only), then Bob's claim on host two
    # starts the rematch and seals its vault.
    assert seat_of(one, rematch_id, ann_claim["token"]) == ann_claim["seat"]
    bob_claim = ok(two.post(f"/v1/games/{game_id}/rematch", headers=bearer(bob)), 201)
    assert bob_claim["game"]["status"] == "in_progress"
    assert seat_of(one, rematch_id, bob_claim["token"]) == bob_claim["seat"]
    assert seat_of(one, rematch_id, ann_claim["token"]) == ann_claim["seat"]


# ------------------------------------------------------------------------------ keys' holders
def test_a_seat_given_back_keeps_no_answer_for_its_next_holder(
    hosts: tuple[Flask, Flask],
) -> None:
    """Ann's keyed actions in the lobby are refused (kept as her keys' answers); she leaves on
    host one, Bob takes her seat on host two: his requests with her keys are his own."""
    one, two = (host.test_client() for host in hosts)
    lobby = one.post("/v1/games", json={"seats": 2, "dice": "manual", "first_player": 0})
    game_id = ok(lobby, 201)["game"]["id"]
    ann = join(one, game_id, "Ann")
    assert ann["seat"] == 0
    refused(act(one, game_id, ann["token"], ROLL, "roll-1"), 409, "illegal_action")
    stop = {"type": "stop"}
    refused(act(one, game_id, ann["token"], stop, "roll-3"), 409, "illegal_action")
    again = act(two, game_id, ann["token"], ROLL, "roll-1")  # Ann's kept answer, on every host
    refused(again, 409, "illegal_action")
    assert again.headers["Idempotent-Replayed"] == "true"
    left = one.delete(f"/v1/games/{game_id}/players/0", headers=bearer(ann["token"]))
    assert left.status_code == 200, left.get_json()
    bob = join(two, game_id, "Bob")
    assert bob["seat"] == 0
    cy = join(two, game_id, "Cy")
    assert cy["game"]["status"] == "in_progress"
    assert cy["game"]["turn"]["player"] == 0
    for client in (one, two):  # neither host answers Bob with Ann's refusal
        rolled = act(client, game_id, bob["token"], ROLL, "roll-1")
        assert rolled.status_code == 200, rolled.get_json()
        assert rolled.headers.get("Idempotent-Replayed") == (None if client is one else "true")
    moved = act(one, game_id, bob["token"], rolled.get_json()["game"]["legal_actions"][0])
    assert moved.status_code == 200, moved.get_json()
    rolled = act(two, game_id, bob["token"], ROLL, "roll-3")  # Ann's roll-3 was a stop
    assert rolled.status_code == 200, rolled.get_json()
    assert "Idempotent-Replayed" not in rolled.headers


def test_a_refusal_judged_after_the_seat_changed_hands_is_not_kept(
    hosts: tuple[Flask, Flask], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ann's keyed request reads the vault, then (before it is refused) she leaves and Bob
    takes her seat on host two: the refusal is answered to Ann, not kept for Bob."""
    one, two = (host.test_client() for host in hosts)
    lobby = one.post("/v1/games", json={"seats": 2, "dice": "manual", "first_player": 0})
    game_id = ok(lobby, 201)["game"]["id"]
    ann = join(one, game_id, "Ann")
    games_secrets = hosts[0].extensions["cantstop"].games.secrets
    read: Callable[[uuid.UUID], Any] = games_secrets.read
    seated: list[Json] = []

    def read_then_hand_over(gid: uuid.UUID) -> Any:
        vault = read(gid)
        if not seated:  # the request's first read: the seat changes hands on host two
            left = two.delete(f"/v1/games/{game_id}/players/0", headers=bearer(ann["token"]))
            assert left.status_code == 200, left.get_json()
            seated.append(join(two, game_id, "Bob"))
        return vault

    monkeypatch.setattr(games_secrets, "read", read_then_hand_over)
    games = hosts[0].extensions["cantstop"].games
    with pytest.raises(IllegalAction):
        games.act(uuid.UUID(game_id), 0, parse_action(ROLL), idempotency_key="roll-1")
    monkeypatch.undo()
    [bob] = seated
    assert bob["seat"] == 0
    join(two, game_id, "Cy")
    rolled = act(one, game_id, bob["token"], ROLL, "roll-1")
    assert rolled.status_code == 200, rolled.get_json()
    assert "Idempotent-Replayed" not in rolled.headers


def test_the_vault_forgets_a_seats_keys_with_its_holder() -> None:
    """Revoking a seat's token, or issuing it to a new holder, forgets that seat's kept answers
    and no other seat's; a replay of the vault's events forgets the same ones."""
    vault = Vault(game_id=uuid.uuid4(), server_seed=None)
    now = datetime.now(UTC)
    for seat in (0, 1):
        vault.issue(seat, f"holder {seat}")
        vault.refuse(f"{seat}:k", "fingerprint", "illegal_action", "not started", now.isoformat())
    vault.revoke(0)
    assert vault.recall("0:k", now) is None
    assert vault.recall("1:k", now) is not None
    vault.refuse("0:k", "fingerprint", "illegal_action", "not started", now.isoformat())
    vault.issue(0, "holder 2")  # a holder's answer kept after its seat was given back
    assert vault.recall("0:k", now) is None
    replayed: Any = None
    for stored in vault.collect_events():
        replayed = stored.mutate(replayed)
    assert replayed.keys == vault.keys
    assert replayed.token_hashes == {"0": "holder 2", "1": "holder 1"}
