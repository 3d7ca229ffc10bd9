"""Challenges, seeks and the account stream (contract 1.2): how accounts come to play, race-free
across workers, and how an app or a bot hears of it on one connection."""

from __future__ import annotations

import dataclasses
import http.client
import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    Mapper,
    UUIDAsHex,
)
from flask import Flask
from flask.testing import FlaskClient

from service.application.matchmaking import challenges as challenges_module
from service.application.matchmaking.challenges import Challenge, PendingChallenges
from service.application.matchmaking.seeks import Seek, SeekPool, Seeks
from service.application.notify.notices import NOTICE_TYPES, NoticesView
from tests.support.http import HOST, bearer, call
from tests.support.polling import wait_until
from tests.support.racing import race_cleanly
from tests.support.servers import free_port, serving
from tests.support.spec import load_spec, validator

Json = dict[str, Any]
PASSWORD = "correct horse battery"


def sign_up(client: FlaskClient, handle: str, *, bot: bool = False, address: str = "") -> str:
    """A new account (from ``address``: sign-ups are limited per client address)."""
    body: Json = {"handle": handle, **({"bot": True} if bot else {"password": PASSWORD})}
    extra = {"environ_base": {"REMOTE_ADDR": address}} if address else {}
    reply = client.post("/v1/accounts", json=body, **extra)
    assert reply.status_code == 201, reply.get_json()
    token: str = reply.get_json()["token"]
    return token


def problem_code(reply: Any, status: int) -> str:
    assert reply.status_code == status, reply.get_json()
    assert reply.mimetype == "application/problem+json"
    code: str = reply.get_json()["code"]
    return code


# --------------------------------------------------------------------------- challenges
def test_a_challenge_accepted_starts_a_game_with_both_accounts_seated(client: FlaskClient) -> None:
    ann, bob = sign_up(client, "ann"), sign_up(client, "Bob")
    made = client.post("/v1/challenges", json={"to": "bob"}, headers=bearer(ann))
    assert made.status_code == 201, made.get_json()
    challenge = made.get_json()
    assert challenge["status"] == "pending" and challenge["from"] == "ann"
    assert challenge["to"] == "Bob" and challenge["game_id"] is None
    assert client.get("/v1/challenges", headers=bearer(bob)).get_json()["incoming"] == [challenge]
    assert client.get("/v1/challenges", headers=bearer(ann)).get_json()["outgoing"] == [challenge]
    # Only the challenged accepts; the challenger cannot.
    assert problem_code(
        client.post(f"/v1/challenges/{challenge['id']}/accept", headers=bearer(ann)), 404
    )
    accepted = client.post(f"/v1/challenges/{challenge['id']}/accept", headers=bearer(bob))
    assert accepted.status_code == 201, accepted.get_json()
    game = accepted.get_json()["game"]
    assert accepted.get_json()["challenge"]["status"] == "accepted"
    assert accepted.get_json()["challenge"]["game_id"] == game["id"]
    assert [p["account"] for p in game["players"]] == ["ann", "Bob"]
    assert game["status"] == "in_progress"
    # Each plays with its personal token: whoever is to act can.
    turn = game["turn"]["player"]
    token = ann if turn == 0 else bob
    rolled = client.post(
        f"/v1/games/{game['id']}/actions", json={"type": "roll"}, headers=bearer(token)
    )
    assert rolled.status_code == 200, rolled.get_json()
    # Answered: no second answer, and no longer listed.
    for action, who in (("accept", bob), ("decline", bob), ("cancel", ann)):
        reply = client.post(f"/v1/challenges/{challenge['id']}/{action}", headers=bearer(who))
        assert problem_code(reply, 409) == "challenge_not_pending"
    assert client.get("/v1/challenges", headers=bearer(bob)).get_json()["incoming"] == []


def test_declined_canceled_and_expired_challenges_make_no_game(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    first = client.post("/v1/challenges", json={"to": "bob"}, headers=bearer(ann)).get_json()
    declined = client.post(f"/v1/challenges/{first['id']}/decline", headers=bearer(bob))
    assert declined.status_code == 200 and declined.get_json()["status"] == "declined"
    second = client.post("/v1/challenges", json={"to": "bob"}, headers=bearer(ann)).get_json()
    assert problem_code(
        client.post(f"/v1/challenges/{second['id']}/cancel", headers=bearer(bob)), 404
    )
    canceled = client.post(f"/v1/challenges/{second['id']}/cancel", headers=bearer(ann))
    assert canceled.status_code == 200 and canceled.get_json()["status"] == "canceled"
    monkeypatch.setattr(challenges_module, "TTL", timedelta(0))  # expires as it is issued
    third = client.post("/v1/challenges", json={"to": "bob"}, headers=bearer(ann)).get_json()
    assert client.get(f"/v1/challenges/{third['id']}", headers=bearer(bob)).get_json()[
        "status"
    ] == ("expired")
    reply = client.post(f"/v1/challenges/{third['id']}/accept", headers=bearer(bob))
    assert problem_code(reply, 409) == "challenge_not_pending"
    # A third account sees none of them.
    eve = sign_up(client, "eve")
    assert problem_code(client.get(f"/v1/challenges/{first['id']}", headers=bearer(eve)), 404)
    assert client.get("/v1/accounts/bob/games").get_json()["games"] == []


def test_a_built_in_bot_accepts_at_once(client: FlaskClient) -> None:
    ann = sign_up(client, "ann")
    made = client.post(
        "/v1/challenges",
        json={"to": "expert", "rated": True, "clock": {"turn_seconds": 60}},
        headers=bearer(ann),
    )
    assert made.status_code == 201, made.get_json()
    challenge = made.get_json()
    assert challenge["status"] == "accepted" and challenge["game_id"] is not None
    game = client.get(f"/v1/games/{challenge['game_id']}").get_json()
    assert [p["account"] for p in game["players"]] == ["ann", "expert"]
    assert game["rated"] is True
    # The game's start (and whoever's turn it is) is told to its people, never to a built-in bot.
    notices = client.application.extensions["cantstop"].notices
    assert notices.latest("ann") > 0
    assert notices.latest("expert") == 0


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"to": "ann"}, "itself"),
        ({"to": "nobody"}, "no account"),
        ({"to": "bob", "rules": {"solitaire": "easy"}}, ""),
        ({"to": "bob", "rules": {"dice_faces": 7}}, ""),
        ({"to": "bob", "rules": {"jumping": True, "forced_move": True}}, ""),
    ],
)
def test_challenges_that_could_not_make_a_game_are_refused(
    client: FlaskClient, body: Json, why: str
) -> None:
    ann = sign_up(client, "ann")
    sign_up(client, "bob")
    reply = client.post("/v1/challenges", json=body, headers=bearer(ann))
    assert problem_code(reply, 422) == "invalid_request"
    assert why in reply.get_json()["detail"]
    assert client.get("/v1/challenges", headers=bearer(ann)).get_json()["outgoing"] == []


def test_challenges_need_a_personal_token_with_the_play_scope(client: FlaskClient) -> None:
    sign_up(client, "bob")
    assert problem_code(client.post("/v1/challenges", json={"to": "bob"}), 401)
    seat = client.post("/v1/games", json={"players": ["a", "b"]}).get_json()["seats"][0]["token"]
    reply = client.post("/v1/challenges", json={"to": "bob"}, headers=bearer(seat))
    assert problem_code(reply, 401) == "unauthorized"


def test_a_flood_of_challenges_to_one_account_is_limited(client: FlaskClient) -> None:
    sign_up(client, "target")
    codes = []
    for i in range(24):  # 20 a minute to one account by default, from however many senders
        token = sign_up(client, f"sender{i}", bot=True, address=f"10.0.0.{i + 1}")
        reply = client.post("/v1/challenges", json={"to": "target"}, headers=bearer(token))
        codes.append(reply.status_code)
    assert codes[:20] == [201] * 20 and set(codes[20:]) == {429}


def test_two_acceptances_at_once_make_one_game(app: Flask) -> None:
    """Two workers' requests race: the challenge's Accepted is saved with the game, whose id is
    the challenge's, so exactly one is recorded."""
    client = app.test_client()
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    accepted = 0

    def answer(own: FlaskClient, challenge_id: str, action: str, token: str) -> int:
        reply = own.post(f"/v1/challenges/{challenge_id}/{action}", headers=bearer(token))
        return reply.status_code

    for _ in range(5):
        made = client.post("/v1/challenges", json={"to": "bob"}, headers=bearer(ann))
        challenge_id = made.get_json()["id"]
        callers = [("accept", bob), ("accept", bob), ("cancel", ann)]
        statuses: list[int] = race_cleanly(
            [partial(answer, app.test_client(), challenge_id, *c) for c in callers], timeout=30
        )
        assert sorted(statuses) in ([200, 409, 409], [201, 409, 409]), statuses
        accepted += statuses.count(201)
        final = client.get(f"/v1/challenges/{challenge_id}", headers=bearer(bob)).get_json()
        assert final["status"] == ("accepted" if 201 in statuses else "canceled")
    listed = client.get("/v1/accounts/bob/games?limit=100").get_json()["games"]
    assert len(listed) == accepted  # one game per acceptance recorded, none twice


# -------------------------------------------------------------------------------- seeks
def test_compatible_seeks_are_paired_and_others_are_not(client: FlaskClient) -> None:
    ann, bob, cyd = (sign_up(client, h) for h in ("ann", "bob", "cyd"))
    first = client.post("/v1/seeks", json={"players": 2}, headers=bearer(ann))
    assert first.status_code == 201 and first.get_json()["status"] == "open"
    again = client.post("/v1/seeks", json={"players": 2}, headers=bearer(ann))
    assert problem_code(again, 422) == "invalid_request"  # one open seek per kind of game
    other = client.post(
        "/v1/seeks", json={"players": 2, "rules": {"jumping": True}}, headers=bearer(cyd)
    )
    assert other.get_json()["status"] == "open"  # other rules: not compatible
    second = client.post("/v1/seeks", json={"players": 2}, headers=bearer(bob)).get_json()
    assert second["status"] == "paired" and second["game_id"]
    mine = client.get(f"/v1/seeks/{first.get_json()['id']}", headers=bearer(ann)).get_json()
    assert mine["status"] == "paired" and mine["game_id"] == second["game_id"]
    game = client.get(f"/v1/games/{second['game_id']}").get_json()
    assert [p["account"] for p in game["players"]] == ["ann", "bob"]  # the older seek first
    # Withdrawn: never paired; a paired seek cannot be withdrawn.
    withdrawn = client.delete(f"/v1/seeks/{other.get_json()['id']}", headers=bearer(cyd))
    assert withdrawn.status_code == 204
    reply = client.delete(f"/v1/seeks/{second['id']}", headers=bearer(bob))
    assert problem_code(reply, 409) == "seek_not_open"
    late = client.post(
        "/v1/seeks", json={"players": 2, "rules": {"jumping": True}}, headers=bearer(ann)
    )
    assert late.get_json()["status"] == "open"
    # Somebody else's seek is not yours to read or withdraw.
    assert problem_code(client.get(f"/v1/seeks/{second['id']}", headers=bearer(cyd)), 404)


def test_seeks_placed_at_once_on_several_threads_are_each_paired_once(app: Flask) -> None:
    """Sixteen accounts seek at the same moment (each request on its own thread, as on several
    workers): every seek is paired once the scheduler's next pass has run (the contract's 2 s:
    a pass comes every ``poll`` seconds, 0.25 by default), each in one game of two different
    accounts. Counted in passes, not timed: a loaded machine makes a pass slower, not a seek
    less paired."""
    client = app.test_client()
    tokens = [sign_up(client, f"p{i:02d}", address=f"10.0.1.{i + 1}") for i in range(16)]

    def place(own: FlaskClient, token: str) -> str:
        reply = own.post("/v1/seeks", json={"players": 2}, headers=bearer(token))
        assert reply.status_code == 201, reply.get_json()
        seek: str = reply.get_json()["id"]
        return seek

    ids = race_cleanly([partial(place, app.test_client(), t) for t in tokens], timeout=60)
    placed: dict[str, str] = dict(zip(tokens, ids, strict=True))

    def states() -> list[Json]:
        return [
            client.get(f"/v1/seeks/{seek}", headers=bearer(token)).get_json()
            for token, seek in placed.items()
        ]

    scheduler = app.extensions["cantstop"].scheduler()
    scheduler.step()
    assert [s["status"] for s in states()] == ["paired"] * 16
    assert scheduler.poll <= 2.0 / 2  # two passes within the contract's 2 s, whenever they came
    games: dict[str, list[str]] = {}
    for seek in states():
        games.setdefault(seek["game_id"], []).append(seek["account"])
    assert len(games) == 8 and all(len(set(a)) == 2 for a in games.values()), games
    for game_id, accounts in games.items():
        game = client.get(f"/v1/games/{game_id}").get_json()
        assert sorted(p["account"] for p in game["players"]) == sorted(accounts)


# ------------------------------------------------------------------------ account stream
class AccountStream:
    """``GET /v1/account/stream`` on a real server, read on a thread: the notices as they come."""

    def __init__(self, port: int, token: str, last_id: int | None = None) -> None:
        self.conn = http.client.HTTPConnection(HOST, port, timeout=30)
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        if last_id is not None:
            headers["Last-Event-ID"] = str(last_id)
        self.conn.request("GET", "/v1/account/stream", headers=headers)
        self.response = self.conn.getresponse()
        assert self.response.status == 200, self.response.read()
        self.notices: list[Json] = []
        self.ids: list[int] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        event_id = None
        try:
            for raw in self.response:
                line = raw.decode("utf-8").rstrip("\n")
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                    assert event_id is not None and data["id"] == event_id
                    self.ids.append(event_id)
                    self.notices.append(data)
        except (OSError, ValueError):
            return

    def types(self) -> list[str]:
        return [n["type"] for n in self.notices]

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    with serving(
        tmp_path,
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        "2",
        env={},
        ready_port=port,
    ):
        yield port


def test_the_account_stream_tells_each_account_what_to_react_to(server: int) -> None:
    port = server
    _, ann_body = call(port, "POST", "/v1/accounts", {"handle": "ann", "password": PASSWORD})
    _, bob_body = call(port, "POST", "/v1/accounts", {"handle": "bob", "bot": True})
    ann, bob = ann_body["token"], bob_body["token"]
    ann_stream, bob_stream = AccountStream(port, ann), AccountStream(port, bob)
    try:
        status, challenge = call(port, "POST", "/v1/challenges", {"to": "bob"}, token=ann)
        assert status == 201
        wait_until(lambda: bob_stream.types() == ["challenge"], 10, "bob hears the challenge")
        assert bob_stream.notices[0]["challenge"]["id"] == challenge["id"]
        status, accepted = call(port, "POST", f"/v1/challenges/{challenge['id']}/accept", token=bob)
        assert status == 201
        game = accepted["game"]
        first = game["turn"]["player"]
        wait_until(
            lambda: "your_turn" in (ann_stream if first == 0 else bob_stream).types(),
            10,
            f"the first player ({first}) hears it is their turn",
        )
        assert ann_stream.types()[:2] == ["challenge_accepted", "game_started"]
        wait_until(lambda: "game_started" in bob_stream.types(), 10, "bob hears it started")
        # The first player rolls and stops (or busts): the other hears it is their turn.
        mover, other = (ann, bob_stream) if first == 0 else (bob, ann_stream)
        path = f"/v1/games/{game['id']}/actions"
        status, result = call(port, "POST", path, {"type": "roll"}, token=mover)
        state = result["game"]
        if state["turn"]["player"] == first:
            sums = state["legal_actions"][0]["sums"]
            call(port, "POST", path, {"type": "move", "sums": sums}, token=mover)
            status, _ = call(port, "POST", path, {"type": "stop"}, token=mover)
            assert status == 200
        wait_until(lambda: "your_turn" in other.types(), 10, "the other hears its turn")
        assert other.notices[-1]["game_id"] == game["id"]
        # Resumed with Last-Event-ID (on whichever worker answers): only what followed.
        seen = ann_stream.ids[:]
        resumed = AccountStream(port, ann, last_id=seen[0])
        try:
            wait_until(lambda: resumed.ids == seen[1:], 10, "the missed notices, in order")
        finally:
            resumed.close()
        status, body = call(port, "GET", "/v1/account/stream?after=999", token=ann)
        assert status == 422 and body["code"] == "invalid_request"
        # Every notice is what openapi.yaml's Notice says, its type's own schema.
        notice = validator(load_spec(), "Notice")
        for sent in ann_stream.notices + bob_stream.notices:
            notice.validate(sent)
    finally:
        ann_stream.close()
        bob_stream.close()


def test_old_notices_are_pruned_but_each_accounts_numbering_goes_on(app: Flask) -> None:
    client = app.test_client()
    rt = app.extensions["cantstop"]
    ann = sign_up(client, "ann")
    for _ in range(3):
        made = client.post("/v1/challenges", json={"to": "expert"}, headers=bearer(ann))
        assert made.status_code == 201
    newest = rt.notices.latest("ann")
    assert newest >= 6  # three times challenge_accepted and game_started (your_turn if first)
    assert [n.seq for n in rt.notices.after("ann", 0, 100)] == list(range(1, newest + 1))
    rt.notices.prune(now=datetime.now(UTC) + timedelta(days=8))
    assert [n.seq for n in rt.notices.after("ann", 0, 100)] == [newest]  # the newest is kept
    assert rt.notices.first_kept("ann") == newest
    assert rt.notices.first_kept("Ann") == newest  # the account stream asks as registered
    client.post("/v1/challenges", json={"to": "expert"}, headers=bearer(ann))
    assert rt.notices.latest("ann") >= newest + 2


def test_the_oldest_seek_is_paired_with_the_closest_rating_of_another_account() -> None:
    def row(seek: str, account: str, mu: float, seq: int, players: int = 2) -> Json:
        return {"seek_id": seek, "account": account, "mu": mu, "seq": seq, "players": players}

    rows = [row("a", "ann", 25.0, 1), row("b", "bob", 40.0, 2), row("c", "cyd", 27.0, 3)]
    assert [r["seek_id"] for r in Seeks._choose(rows) or []] == ["a", "c"]
    # Never two seeks of one account in a game; a three-player game takes the two closest.
    rows = [row("a", "ann", 25.0, 1, 3), row("a2", "ann", 25.0, 2, 3), row("b", "bob", 40.0, 3, 3)]
    assert Seeks._choose(rows) is None
    rows.append(row("c", "cyd", 10.0, 4, 3))
    rows.append(row("d", "dan", 30.0, 5, 3))
    assert [r["seek_id"] for r in Seeks._choose(rows) or []] == ["a", "b", "d"]


def test_every_notice_type_is_one_the_document_maps() -> None:
    """(Webhooks subscribe to these very types: service/application/notify/webhooks.py.)"""
    mapping = load_spec()["components"]["schemas"]["Notice"]["discriminator"]["mapping"]
    assert set(NOTICE_TYPES) == set(mapping)


def test_closing_an_account_answers_its_challenges_and_withdraws_its_seeks(
    client: FlaskClient,
) -> None:
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    out = client.post("/v1/challenges", json={"to": "bob"}, headers=bearer(ann)).get_json()
    into = client.post("/v1/challenges", json={"to": "ann"}, headers=bearer(bob)).get_json()
    seek = client.post("/v1/seeks", json={"players": 2}, headers=bearer(ann)).get_json()
    assert client.delete("/v1/account", headers=bearer(ann)).status_code == 204
    shown = {
        c: client.get(f"/v1/challenges/{c}", headers=bearer(bob)).get_json()
        for c in (out["id"], into["id"])
    }
    assert shown[out["id"]]["status"] == "canceled"
    assert shown[into["id"]]["status"] == "declined"
    assert client.get("/v1/challenges", headers=bearer(bob)).get_json() == {
        "incoming": [],
        "outgoing": [],
    }
    # Its seek is gone: bob's seek stays open, paired with nobody.
    mine = client.post("/v1/seeks", json={"players": 2}, headers=bearer(bob)).get_json()
    assert mine["status"] == "open" and seek["status"] == "open"


def test_challenges_and_seeks_stored_under_their_old_modules_still_read() -> None:
    """Challenge and Seek lived in service.application.challenges and .seeks: rows stored then
    keep those topics. They read back as the classes now, and the views that select rows by
    topic (pending challenges, the seek pool, notices) select them too."""
    transcoder = JSONTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
        transcoder.register(transcoding)
    mapper: Mapper[uuid.UUID] = Mapper(transcoder=transcoder)
    challenge = Challenge(
        "ann", "bob", {}, rated=False, clock=None, expires_at="2026-01-01T00:00:00Z"
    )
    challenge.cancel()
    seek = Seek("ann", {}, 2, rated=False, clock=None, mu=25.0, expires_at="2026-01-01T00:00:00Z")
    seek.expire()
    for old_module, aggregate in (
        ("service.application.challenges", challenge),
        ("service.application.seeks", seek),
    ):
        for event in aggregate.collect_events():
            stored = mapper.to_stored_event(event)
            old_topic = f"{old_module}:{type(event).__qualname__}"
            assert old_topic != stored.topic
            read = mapper.to_domain_event(dataclasses.replace(stored, topic=old_topic))
            assert read == event
            views = {
                "service.application.challenges": (PendingChallenges, NoticesView),
                "service.application.seeks": (SeekPool,),
            }[old_module]
            for view in views:
                assert old_topic in view.topics, (view.__name__, old_topic)
    assert "service.application.seeks:Seek.Expired" in NoticesView.topics
