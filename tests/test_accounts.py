"""Players (contract 1.2): accounts, personal tokens with scopes, seats bound to accounts, rated
games and their ratings, profiles, histories and the bulk export."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.config import Settings
from service.http.app import create_app
from tests.support.http import bearer
from tests.support.racing import race_cleanly
from tests.support.servers import run_scheduler

Json = dict[str, Any]
PASSWORD = "correct horse battery"
CLOCK = {"turn_seconds": 3600}  # a rated game needs a clock (contract 1.3)


def sign_up(client: FlaskClient, handle: str, password: str | None = PASSWORD) -> str:
    body: Json = {"handle": handle}
    if password is None:
        body["bot"] = True
    else:
        body["password"] = password
    response = client.post("/v1/accounts", json=body)
    assert response.status_code == 201, response.get_json()
    data = response.get_json()
    assert data["account"]["handle"] == handle and "password" not in str(data)
    token: str = data["token"]
    return token


def play_a_turn(client: FlaskClient, game: Json, tokens: dict[int, str]) -> Json:
    """The player to act rolls, moves and stops (or busts): one turn of their own."""
    seat = game["turn"]["player"]

    def act(action: Json) -> Json:
        reply = client.post(
            f"/v1/games/{game['id']}/actions", json=action, headers=bearer(tokens[seat])
        )
        assert reply.status_code == 200, reply.get_json()
        state: Json = reply.get_json()["game"]
        return state

    game = act({"type": "roll"})
    if game["turn"] is not None and game["turn"]["player"] == seat:  # no bust
        move = next(a for a in game["legal_actions"] if a["type"] == "move")
        act({"type": "move", "sums": move["sums"]})
        game = act({"type": "stop"})
    return game


def play_out(client: FlaskClient, game: Json, tokens: dict[int, str]) -> Json:
    """Play the people's turns (always the first legal action) until the game ends; bots play
    theirs through the scheduler, which the test drives."""
    for _ in range(3000):
        if game["status"] == "finished":
            return game
        turn = game["turn"]
        if turn is None or turn["player"] not in tokens:
            time.sleep(0.01)
            game = client.get(f"/v1/games/{game['id']}").get_json()
            continue
        legal = game["legal_actions"][0]
        if {"type": "stop"} in game["legal_actions"]:
            legal = {"type": "stop"}  # one move a turn: the game ends in reasonable time
        action = {"type": legal["type"]} | ({"sums": legal["sums"]} if "sums" in legal else {})
        reply = client.post(
            f"/v1/games/{game['id']}/actions", json=action, headers=bearer(tokens[turn["player"]])
        )
        assert reply.status_code == 200, reply.get_json()
        game = reply.get_json()["game"]
    raise AssertionError("the game did not end")


def test_sign_up_sign_in_scopes_and_revocation(client: FlaskClient) -> None:
    token = sign_up(client, "Ann")
    mine = client.get("/v1/account", headers=bearer(token)).get_json()
    assert (mine["handle"], mine["bot"], mine["ratings"]) == ("Ann", False, [])
    # Handles are the same whatever their case; a Cyrillic А is no handle at all.
    taken = client.post("/v1/accounts", json={"handle": "ann", "password": PASSWORD})
    assert (taken.status_code, taken.get_json()["code"]) == (409, "handle_taken")
    cyrillic = client.post("/v1/accounts", json={"handle": "Аnn", "password": PASSWORD})
    assert (cyrillic.status_code, cyrillic.get_json()["code"]) == (422, "invalid_request")
    short = client.post("/v1/accounts", json={"handle": "Bo", "password": "short"})
    assert short.status_code == 422
    # Sign-in: a wrong password and an unknown handle answer the same.
    wrong = client.post("/v1/tokens", json={"handle": "ann", "password": "wrong password"})
    unknown = client.post("/v1/tokens", json={"handle": "nobody", "password": PASSWORD})
    assert wrong.status_code == unknown.status_code == 401
    assert wrong.get_json()["detail"] == unknown.get_json()["detail"]
    play_only = client.post(
        "/v1/tokens", json={"handle": "ann", "password": PASSWORD, "scopes": ["play"]}
    ).get_json()
    assert play_only["scopes"] == ["play"] and play_only["token"].startswith("cst_")
    refused = client.get("/v1/account/tokens", headers=bearer(play_only["token"]))
    assert (refused.status_code, refused.get_json()["code"]) == (403, "insufficient_scope")
    listed = client.get("/v1/account/tokens", headers=bearer(token)).get_json()["tokens"]
    assert {t["id"] for t in listed} >= {play_only["id"]}
    assert all("token" not in t and "digest" not in t for t in listed)
    gone = client.delete(f"/v1/account/tokens/{play_only['id']}", headers=bearer(token))
    assert gone.status_code == 204
    revoked = client.get("/v1/account", headers=bearer(play_only["token"]))
    assert (revoked.status_code, revoked.get_json()["code"]) == (401, "unauthorized")
    made_up = client.get("/v1/account", headers=bearer("cst_0123456789abcdef_" + "x" * 43))
    assert made_up.status_code == 401


def test_revocation_holds_on_every_worker_at_once(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'accounts.sqlite'}")
    one = create_app(settings, create_tables=True)
    two = create_app(settings)
    try:
        token = sign_up(one.test_client(), "Cy")
        spare = (
            one.test_client()
            .post("/v1/tokens", json={"handle": "cy", "password": PASSWORD})
            .get_json()
        )
        assert (
            two.test_client().get("/v1/account", headers=bearer(spare["token"])).status_code == 200
        )
        assert (
            one.test_client()
            .delete(f"/v1/account/tokens/{spare['id']}", headers=bearer(token))
            .status_code
            == 204
        )
        assert (
            two.test_client().get("/v1/account", headers=bearer(spare["token"])).status_code == 401
        )
    finally:
        one.extensions["cantstop"].close()
        two.extensions["cantstop"].close()


def test_ten_sign_ups_racing_for_one_handle_make_one_account(app: Flask) -> None:

    def attempt(i: int) -> int:
        reply = app.test_client().post(
            "/v1/accounts", json={"handle": "Dee" if i % 2 else "dee", "password": PASSWORD}
        )
        return reply.status_code

    answers = race_cleanly([partial(attempt, i) for i in range(10)])
    assert sorted(answers) == [201] + [409] * 9


def test_a_personal_token_seats_and_acts_and_an_account_holds_one_seat(
    client: FlaskClient,
) -> None:
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    lobby = client.post("/v1/games", json={"seats": 2}, headers=bearer(ann))
    assert lobby.status_code == 201, lobby.get_json()
    game = lobby.get_json()["game"]
    assert game["players"][0]["account"] == "ann" and game["players"][1]["account"] is None
    again = client.post(f"/v1/games/{game['id']}/players", json={}, headers=bearer(ann))
    assert (again.status_code, again.get_json()["code"]) == (409, "already_seated")
    joined = client.post(f"/v1/games/{game['id']}/players", json={}, headers=bearer(bob))
    assert joined.status_code == 201, joined.get_json()
    game = joined.get_json()["game"]
    assert [p["account"] for p in game["players"]] == ["ann", "bob"]
    assert [p["name"] for p in game["players"]] == ["ann", "bob"]
    seat = game["turn"]["player"]
    other = (ann, bob)[1 - seat]
    refused = client.post(
        f"/v1/games/{game['id']}/actions", json={"type": "roll"}, headers=bearer(other)
    )
    assert refused.status_code == 403
    rolled = client.post(
        f"/v1/games/{game['id']}/actions", json={"type": "roll"}, headers=bearer((ann, bob)[seat])
    )
    assert rolled.status_code == 200, rolled.get_json()
    stranger = sign_up(client, "cy")
    outside = client.post(
        f"/v1/games/{game['id']}/actions", json={"type": "stop"}, headers=bearer(stranger)
    )
    assert (outside.status_code, outside.get_json()["code"]) == (401, "unauthorized")
    someone_else = client.post(
        "/v1/games", json={"players": [{"account": "bob"}, "Eve"]}, headers=bearer(ann)
    )
    assert someone_else.status_code == 422


def test_rated_games_need_accounts_and_server_dice(client: FlaskClient) -> None:
    ann = sign_up(client, "ann")
    manual = client.post(
        "/v1/games",
        json={
            "players": [{"account": "ann"}, {"name": "Robo", "bot": "expert"}],
            "rated": True,
            "clock": CLOCK,
            "dice": "manual",
        },
        headers=bearer(ann),
    )
    assert manual.status_code == 422
    anonymous = client.post(
        "/v1/games", json={"players": ["Ann", "Bob"], "rated": True, "clock": CLOCK}
    )
    assert anonymous.status_code == 422
    rated_lobby = client.post(
        "/v1/games", json={"seats": 2, "rated": True, "clock": CLOCK}, headers=bearer(ann)
    )
    assert rated_lobby.status_code == 201
    game_id = rated_lobby.get_json()["game"]["id"]
    nameless = client.post(f"/v1/games/{game_id}/players", json={"name": "Guest"})
    assert (nameless.status_code, nameless.get_json()["code"]) == (422, "invalid_request")


@pytest.fixture
def quick_bots(database_url: str) -> Iterator[Flask]:
    """An app whose computer players do not pause between actions."""
    app = create_app(Settings(database_url=database_url, bot_pause=0), create_tables=True)
    yield app
    app.extensions["cantstop"].close()


def test_a_rated_game_against_expert_rates_both_once_and_the_export_recomputes_them(
    quick_bots: Flask, tmp_path: Path
) -> None:
    app = quick_bots
    client = app.test_client()
    ann = sign_up(client, "ann")
    created = client.post(
        "/v1/games",
        json={
            "players": [{"account": "ann"}, {"name": "Robo", "bot": "expert"}],
            "rated": True,
            "clock": CLOCK,
        },
        headers=bearer(ann),
    )
    assert created.status_code == 201, created.get_json()
    game = created.get_json()["game"]
    assert game["rated"] is True
    assert [p["account"] for p in game["players"]] == ["ann", "expert"]
    halt = run_scheduler(app)
    try:
        game = play_out(client, game, {0: ann})
    finally:
        halt()
    profile = client.get("/v1/accounts/ann").get_json()
    assert profile["counts"] == {"games": 1, "finished": 1, "rated": 1}
    [rating] = profile["ratings"]
    assert rating["games"] == 1 and rating["provisional"] is True
    assert rating["rating"] == pytest.approx(rating["mu"] - 3 * rating["sigma"])
    expert = client.get("/v1/accounts/expert").get_json()
    assert expert["bot"] is True and expert["ratings"][0]["games"] == 1
    history = client.get("/v1/accounts/ann/games?rated=true").get_json()
    assert [g["game_id"] for g in history["games"]] == [game["id"]]
    # Rebuilt from the log, the ratings are the same to the last bit.
    runtime = app.extensions["cantstop"]
    before = runtime.ratings.of_account(runtime.views, "ann")
    runtime.views.rebuild(runtime.ratings)
    assert runtime.ratings.of_account(runtime.views, "ann") == before
    # Offline, from the bulk export: the same figures.
    export = client.get("/v1/accounts/ann/games/export")
    assert export.status_code == 200 and export.mimetype == "application/x-ndjson"
    path = tmp_path / "ann.ndjson"
    path.write_bytes(export.get_data())
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "ratings", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    import json

    offline = json.loads(done.stdout)
    mine = next(a for a in offline["accounts"] if a["handle"].lower() == "ann")
    assert (
        mine["ratings"][0]["mu"] == rating["mu"] and mine["ratings"][0]["sigma"] == rating["sigma"]
    )


def test_closing_an_account_kills_its_tokens_and_keeps_its_handle(client: FlaskClient) -> None:
    token = sign_up(client, "gone")
    play_only = client.post(
        "/v1/tokens", json={"handle": "gone", "password": PASSWORD, "scopes": ["play"]}
    ).get_json()["token"]
    assert client.delete("/v1/account", headers=bearer(play_only)).status_code == 403
    assert client.delete("/v1/account", headers=bearer(token)).status_code == 204
    assert client.get("/v1/account", headers=bearer(token)).status_code == 401
    again = client.post("/v1/tokens", json={"handle": "gone", "password": PASSWORD})
    assert again.status_code == 401
    reused = client.post("/v1/accounts", json={"handle": "GONE", "password": PASSWORD})
    assert (reused.status_code, reused.get_json()["code"]) == (409, "handle_taken")
    assert client.get("/v1/accounts/gone").get_json()["closed"] is True


def test_a_password_never_reaches_the_log(
    client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    sign_up(client, "quiet", secret)
    client.post("/v1/tokens", json={"handle": "quiet", "password": secret})
    client.post("/v1/tokens", json={"handle": "quiet", "password": secret + "x"})
    assert secret not in caplog.text


def test_sign_in_is_limited_per_client_address(client: FlaskClient) -> None:
    sign_up(client, "limited")
    answers = [
        client.post("/v1/tokens", json={"handle": "LIMITED", "password": "guess number x"})
        for _ in range(9)
    ]
    assert {a.status_code for a in answers} == {401}  # with the sign-up: 10, the limit
    refused = client.post("/v1/tokens", json={"handle": "limited", "password": PASSWORD})
    assert (refused.status_code, refused.get_json()["code"]) == (429, "rate_limited")
    assert int(refused.headers["Retry-After"]) > 0


def test_a_rated_games_ratings_change_once_when_workers_race_at_its_end(
    database_url: str,
) -> None:
    """Two workers move the ratings view on at the same moment after rated games end (by a
    resignation): each game rates its seats once, as one worker alone would."""
    one = create_app(Settings(database_url=database_url), create_tables=True)
    two = create_app(Settings(database_url=database_url))
    try:
        client = one.test_client()
        tokens = {h: sign_up(client, h) for h in ("ann", "bob")}
        for _ in range(3):
            lobby = client.post(
                "/v1/games",
                json={"seats": 2, "rated": True, "clock": CLOCK},
                headers=bearer(tokens["ann"]),
            ).get_json()["game"]
            game = client.post(
                f"/v1/games/{lobby['id']}/players", json={}, headers=bearer(tokens["bob"])
            ).get_json()["game"]
            by_seat = {p["seat"]: tokens[p["account"]] for p in game["players"]}
            for _ in range(2):  # each plays a turn: a game resigned before is aborted (1.3)
                game = play_a_turn(client, game, by_seat)
            resigned = client.post(
                f"/v1/games/{lobby['id']}/actions",
                json={"type": "resign"},
                headers=bearer(tokens["bob"]),
            )
            assert resigned.get_json()["game"]["status"] == "finished"
        runtimes = [app.extensions["cantstop"] for app in (one, two)]
        race_cleanly([partial(rt.views.catch_up, rt.ratings) for rt in runtimes])
        raced = runtimes[0].ratings.of_account(runtimes[0].views, "ann")
        assert raced[0]["games"] == 3
        runtimes[0].views.rebuild(runtimes[0].ratings)  # one worker, from the start of the log
        assert runtimes[1].ratings.of_account(runtimes[1].views, "ann") == raced
    finally:
        one.extensions["cantstop"].close()
        two.extensions["cantstop"].close()


def test_closing_an_account_gives_up_its_seats_in_unfinished_games(client: FlaskClient) -> None:
    """Its seat tokens cannot play on: a game in progress is resigned, a lobby's seat given back."""
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    lobby = client.post("/v1/games", json={"seats": 2}, headers=bearer(ann)).get_json()
    playing = client.post("/v1/games", json={"seats": 2}, headers=bearer(ann)).get_json()
    joined = client.post(
        f"/v1/games/{playing['game']['id']}/players", json={}, headers=bearer(bob)
    ).get_json()
    assert joined["game"]["status"] == "in_progress"
    seat_token = playing["seats"][0]["token"]
    assert client.delete("/v1/account", headers=bearer(ann)).status_code == 204
    game = client.get(f"/v1/games/{playing['game']['id']}").get_json()
    assert game["status"] == "finished" and game["players"][0]["resigned"] is True
    refused = client.post(
        f"/v1/games/{playing['game']['id']}/actions",
        json={"type": "roll"},
        headers=bearer(seat_token),
    )
    assert refused.status_code == 409  # the game is over for everybody
    left = client.get(f"/v1/games/{lobby['game']['id']}").get_json()
    assert left["players"][0]["name"] is None and left["players"][0]["account"] is None


def test_an_account_acting_in_a_started_game_is_seated_without_reading_the_game(
    client: FlaskClient, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A started game's seats never change, so an action signed by an account finds its seat
    in the game this worker holds: no query for the game's newer events (a round trip on
    PostgreSQL that a seat token's action does not make). A lobby is read afresh: there the
    seats may have changed on another worker."""
    ann, bob = sign_up(client, "ann"), sign_up(client, "bob")
    lobby = client.post("/v1/games", json={"seats": 2}, headers=bearer(ann))
    game_id = lobby.get_json()["game"]["id"]
    store = app.extensions["cantstop"].store
    reads: list[Any] = []
    get = store.events.get

    def counted(originator_id: Any, *args: Any, **kwargs: Any) -> Any:
        if str(originator_id) == game_id:
            reads.append(kwargs)
        return get(originator_id, *args, **kwargs)

    monkeypatch.setattr(store.events, "get", counted)
    joined = client.post(f"/v1/games/{game_id}/players", json={}, headers=bearer(bob))
    assert joined.status_code == 201, joined.get_json()
    assert reads  # the lobby, read afresh to seat bob
    game = joined.get_json()["game"]
    for _ in range(3):
        reads.clear()
        token = (ann, bob)[game["turn"]["player"]]
        acted = client.post(
            f"/v1/games/{game_id}/actions", json={"type": "roll"}, headers=bearer(token)
        )
        assert acted.status_code == 200, acted.get_json()
        assert reads == []
        game = acted.get_json()["game"]
        if game["turn"]["phase"] != "roll":  # not a bust: end the turn
            move = next(a for a in game["legal_actions"] if a["type"] == "move")
            client.post(f"/v1/games/{game_id}/actions", json=move, headers=bearer(token))
            stopped = client.post(
                f"/v1/games/{game_id}/actions", json={"type": "stop"}, headers=bearer(token)
            )
            game = stopped.get_json()["game"]
    # the other seat's account is still refused, and a stranger unknown to the game
    other = (ann, bob)[1 - game["turn"]["player"]]
    refused = client.post(
        f"/v1/games/{game_id}/actions", json={"type": "roll"}, headers=bearer(other)
    )
    assert refused.status_code == 403
