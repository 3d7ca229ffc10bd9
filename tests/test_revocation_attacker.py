"""Revocation against an attacker (contract 1.2: a revoked token "is refused (401) from the next
request on", and a closed account's tokens die): neither an ``Idempotency-Key``'s stored answer
(service/http/idempotent.py) nor an account stream opened before the revocation
(service/live/hub.py) goes on serving a dead token."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support.http import bearer
from tests.support.sse import frame_fields

Json = dict[str, Any]
PASSWORD = "correct horse battery"
# How long a dead token's stream may still be open: the hub's sweep of the account streams'
# tokens (service/live/hub.py, TOKEN_CHECK: 2 s) plus a generous margin for a loaded machine.
STREAM_BOUND = 10.0


@pytest.fixture(autouse=True)
def fast_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep-alives every 0.2 s, so that each read of a stream returns within that."""
    monkeypatch.setenv("CANTSTOP_STREAM_KEEPALIVE", "0.2")
    monkeypatch.setenv("CANTSTOP_STREAM_POLL", "0.05")


def signed_up(client: FlaskClient, handle: str) -> tuple[str, str]:
    """A new account's token and the token's id."""
    reply = client.post("/v1/accounts", json={"handle": handle, "password": PASSWORD})
    assert reply.status_code == 201, reply.get_json()
    body = reply.get_json()
    return body["token"], body["token_id"]


def spare_token(client: FlaskClient, handle: str) -> tuple[str, str]:
    """Another token of the account (both scopes), and its id."""
    scopes = ["play", "account"]
    reply = client.post(
        "/v1/tokens", json={"handle": handle, "password": PASSWORD, "scopes": scopes}
    )
    assert reply.status_code == 201, reply.get_json()
    body = reply.get_json()
    return body["token"], body["id"]


def revoke(client: FlaskClient, by: str, token_id: str) -> None:
    gone = client.delete(f"/v1/account/tokens/{token_id}", headers=bearer(by))
    assert gone.status_code == 204, gone.get_json()


def keyed(key: str, token: str) -> dict[str, str]:
    return {"Idempotency-Key": key, **bearer(token)}


def assert_unauthorized(reply: Any) -> None:
    assert reply.status_code == 401, (reply.status_code, reply.get_data(as_text=True))
    assert reply.get_json()["code"] == "unauthorized"
    assert "Idempotent-Replayed" not in reply.headers


# ---------------------------------------------------------------- Idempotency-Key replays
def test_a_revoked_token_gets_no_replay_of_its_keyed_creation(app: Flask) -> None:
    """The attack: create a lobby with a personal token and a key (the answer holds a seat
    token), revoke the token, send the same request again: the stored answer must not come back
    for the 48 h the key is kept. The token is judged before the key, so another request with
    the key is 401 too, not 422."""
    client = app.test_client()
    ann, ann_id = signed_up(client, "ann")
    spare, _ = spare_token(client, "ann")
    first = client.post("/v1/games", json={"seats": 2}, headers=keyed("k1", ann))
    assert first.status_code == 201, first.get_json()
    seat_token = first.get_json()["seats"][0]["token"]
    # Before the revocation the retry is answered as the contract says: the first answer.
    retry = client.post("/v1/games", json={"seats": 2}, headers=keyed("k1", ann))
    assert retry.status_code == 201 and retry.headers["Idempotent-Replayed"] == "true"

    revoke(client, spare, ann_id)
    fresh = client.post("/v1/games", json={"seats": 2}, headers=bearer(ann))
    assert_unauthorized(fresh)  # what the endpoint answers the dead token
    replayed = client.post("/v1/games", json={"seats": 2}, headers=keyed("k1", ann))
    assert_unauthorized(replayed)
    assert seat_token not in replayed.get_data(as_text=True)
    other = client.post("/v1/games", json={"seats": 3}, headers=keyed("k1", ann))
    assert_unauthorized(other)
    # The account's live token is untouched, and its own keys replay as before.
    mine = client.post("/v1/games", json={"seats": 2}, headers=keyed("k1", spare))
    again = client.post("/v1/games", json={"seats": 2}, headers=keyed("k1", spare))
    assert mine.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true" and again.get_json() == mine.get_json()


def test_a_closed_account_gets_no_replay_of_its_keyed_creations(app: Flask) -> None:
    """The same after closing the account, for a plain creation (``creates``) and for one that
    needs credentials (``creates_signed_in``: a challenge)."""
    client = app.test_client()
    ann, _ = signed_up(client, "ann")
    signed_up(client, "bob")
    requests: list[tuple[str, Json, str]] = [
        ("/v1/games", {"seats": 2}, "g1"),
        ("/v1/challenges", {"to": "bob"}, "c1"),
    ]
    for path, body, key in requests:
        made = client.post(path, json=body, headers=keyed(key, ann))
        assert made.status_code == 201, (path, made.get_json())
    assert client.delete("/v1/account", headers=bearer(ann)).status_code == 204
    for path, body, key in requests:
        assert_unauthorized(client.post(path, json=body, headers=keyed(key, ann)))


def test_a_closed_accounts_seat_token_gets_no_replay_of_its_rematch_claim(app: Flask) -> None:
    """A seat token of a closed account's seat plays nowhere (README: the rematch of its seat
    is 401); a rematch claimed with it and a key must not be handed out again either."""
    client = app.test_client()
    ann, _ = signed_up(client, "ann")
    made = client.post(
        "/v1/games", json={"players": [{"account": "ann"}, "Bob"]}, headers=bearer(ann)
    )
    assert made.status_code == 201, made.get_json()
    game_id = made.get_json()["game"]["id"]
    seat_token, bob = (seat["token"] for seat in made.get_json()["seats"])
    resigned = client.post(
        f"/v1/games/{game_id}/actions", json={"type": "resign"}, headers=bearer(bob)
    )
    assert resigned.status_code == 200, resigned.get_json()
    path = f"/v1/games/{game_id}/rematch"
    claimed = client.post(path, headers=keyed("r1", seat_token))
    assert claimed.status_code == 201, claimed.get_json()
    assert client.delete("/v1/account", headers=bearer(ann)).status_code == 204
    assert_unauthorized(client.post(path, headers=bearer(seat_token)))  # the endpoint's answer
    replayed = client.post(path, headers=keyed("r1", seat_token))
    assert_unauthorized(replayed)
    assert claimed.get_json()["token"] not in replayed.get_data(as_text=True)


# ------------------------------------------------------------------------ account streams
class Reader:
    """An account stream's frames as the test client hands them over; each read returns within
    the keep-alive interval, so a bounded wait is bounded."""

    def __init__(self, frames: Iterator[bytes]) -> None:
        self.frames = frames
        self.notices: list[tuple[int, str]] = []
        self.comments: list[str] = []
        self.ended = False
        self._rest = ""

    def read_until(self, done: Callable[[Reader], bool], timeout: float) -> Reader:
        deadline = time.monotonic() + timeout
        while not done(self):
            assert time.monotonic() < deadline, (
                f"timed out after {timeout} s; notices {self.notices}, comments {self.comments}"
            )
            try:
                chunk = next(self.frames)
            except StopIteration:
                self.ended = True
                return self
            *frames, self._rest = (self._rest + chunk.decode("utf-8")).split("\n\n")
            for frame in frames:
                fields = frame_fields(frame, self.comments)
                if "data" in fields:
                    self.notices.append((int(fields["id"]), fields["event"]))
        return self

    def types(self) -> list[str]:
        return [kind for _, kind in self.notices]


def account_stream(client: FlaskClient, token: str) -> Reader:
    response = client.get("/v1/account/stream", headers=bearer(token), buffered=False)
    assert response.status_code == 200, response.get_data()
    reader = Reader(iter(cast(Iterable[bytes], response.response)))
    reader.read_until(lambda r: bool(r.comments), 5)  # the opening comment: the stream is live
    return reader


def test_an_open_account_stream_ends_when_its_token_is_revoked(app: Flask) -> None:
    """The attack: keep an account stream open with a token, then have the token revoked; the
    stream went on telling the token's holder of every challenge and game. Now it ends, and a
    notice made after the revocation never reaches it, while the account's other token's
    stream gets it."""
    client = app.test_client()
    ann, ann_id = signed_up(client, "ann")
    spare, _ = spare_token(client, "ann")
    bob, _ = signed_up(client, "bob")
    doomed = account_stream(client, ann)
    kept = account_stream(client, spare)
    revoke(client, spare, ann_id)
    made = client.post("/v1/challenges", json={"to": "ann"}, headers=bearer(bob))
    assert made.status_code == 201, made.get_json()
    kept.read_until(lambda r: "challenge" in r.types(), 10)
    doomed.read_until(lambda r: r.ended, STREAM_BOUND)
    assert doomed.notices == []  # the challenge came after the revocation
    assert not kept.ended
    assert client.get("/v1/account/stream", headers=bearer(ann)).status_code == 401


def test_an_open_account_stream_ends_when_its_account_is_closed(app: Flask) -> None:
    """Closing the account kills its tokens: its open stream ends within the bound, even with
    nothing more to send it."""
    client = app.test_client()
    ann, _ = signed_up(client, "ann")
    stream = account_stream(client, ann)
    started = time.monotonic()
    assert client.delete("/v1/account", headers=bearer(ann)).status_code == 204
    stream.read_until(lambda r: r.ended, STREAM_BOUND)
    assert time.monotonic() - started <= STREAM_BOUND
    assert any("unauthorized" in comment for comment in stream.comments), stream.comments
