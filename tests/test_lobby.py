"""The lobby's life cycle and computer players' seats (contract 1.1): leaving a seat, bots seated
and removed, the one rematch of a finished game, games of bots only, and advice."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain.moves import Board, bust_probability_table
from domain.rules import heights
from service.config import Settings
from service.http.app import create_app
from tests.support.games import history
from tests.support.polling import poll
from tests.support.racing import race_cleanly
from tests.support.rated import finished_rated_game, play_a_turn, seat_tokens, sign_up
from tests.support.servers import run_scheduler

Json = dict[str, Any]


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def problem(response: Any, status: int, code: str) -> Json:
    assert response.status_code == status, response.get_data(as_text=True)
    body: Json = response.get_json()
    assert body["code"] == code
    return body


def lobby(client: FlaskClient, seats: int = 3, **extra: Any) -> str:
    created = client.post("/v1/games", json={"seats": seats, **extra})
    assert created.status_code == 201, created.get_json()
    game_id: str = created.get_json()["game"]["id"]
    return game_id


def join(client: FlaskClient, game_id: str, name: str, **extra: Any) -> Json:
    response = client.post(
        f"/v1/games/{game_id}/players", json={"name": name, **extra.pop("body", {})}, **extra
    )
    assert response.status_code == 201, response.get_json()
    body: Json = response.get_json()
    return body


# ------------------------------------------------------------------------------ leaving
def test_a_seat_given_back_opens_again_and_its_token_stops_working(client: FlaskClient) -> None:
    game_id = lobby(client)
    ann = join(client, game_id, "Ann")
    bob = join(client, game_id, "Bob")
    left = client.delete(f"/v1/games/{game_id}/players/{bob['seat']}", headers=bearer(bob["token"]))
    assert left.status_code == 200, left.get_json()
    assert left.get_json()["players"][bob["seat"]]["name"] is None
    # The token no longer holds anything: leaving again, or seating a bot with it, is 401.
    problem(
        client.delete(f"/v1/games/{game_id}/players/{bob['seat']}", headers=bearer(bob["token"])),
        401,
        "unauthorized",
    )
    cy = join(client, game_id, "Cy")
    assert cy["seat"] == bob["seat"]  # the first open seat again
    dee = join(client, game_id, "Dee")
    assert dee["game"]["status"] == "in_progress"
    # Bob's old token cannot act as Cy, who holds the seat now.
    response = client.post(
        f"/v1/games/{game_id}/actions", json={"type": "resign"}, headers=bearer(bob["token"])
    )
    problem(response, 401, "unauthorized")
    ok = client.post(
        f"/v1/games/{game_id}/actions", json={"type": "resign"}, headers=bearer(cy["token"])
    )
    assert ok.status_code == 200
    assert ann["token"] != cy["token"]


def test_a_token_tells_which_seat_it_holds_and_nothing_else(client: FlaskClient) -> None:
    created = client.post(
        "/v1/games", json={"players": ["Ann", "Bob", {"name": "R", "bot": "random"}]}
    )
    body = created.get_json()
    game_id = body["game"]["id"]
    for seat in body["seats"][:2]:
        answer = client.get(f"/v1/games/{game_id}/seat", headers=bearer(seat["token"]))
        assert answer.status_code == 200
        assert answer.get_json() == {"seat": seat["seat"]}
        assert answer.headers["Cache-Control"] == "no-store"  # it depends on the token
    path = f"/v1/games/{game_id}/seat"
    problem(client.get(path), 401, "unauthorized")
    problem(client.get(path, headers=bearer("made-up")), 401, "unauthorized")
    other = lobby(client)
    joined = join(client, other, "Cy")
    problem(client.get(path, headers=bearer(joined["token"])), 401, "unauthorized")
    problem(
        client.get(f"/v1/games/{other}/seat", headers=bearer(body["seats"][0]["token"])),
        401,
        "unauthorized",
    )
    unknown = "00000000-0000-4000-8000-000000000000"
    problem(
        client.get(f"/v1/games/{unknown}/seat", headers=bearer(joined["token"])), 404, "not_found"
    )


def test_a_lobby_seat_is_found_by_its_token_until_it_is_given_back(client: FlaskClient) -> None:
    game_id = lobby(client)
    join(client, game_id, "Ann")
    bob = join(client, game_id, "Bob")
    path = f"/v1/games/{game_id}/seat"
    assert client.get(path, headers=bearer(bob["token"])).get_json() == {"seat": bob["seat"]}
    left = client.delete(f"/v1/games/{game_id}/players/{bob['seat']}", headers=bearer(bob["token"]))
    assert left.status_code == 200
    problem(client.get(path, headers=bearer(bob["token"])), 401, "unauthorized")
    cy = join(client, game_id, "Cy")
    assert client.get(path, headers=bearer(cy["token"])).get_json() == {"seat": bob["seat"]}


def test_leaving_is_refused_with_another_seats_token_or_once_started(client: FlaskClient) -> None:
    game_id = lobby(client, seats=2)
    ann = join(client, game_id, "Ann")
    before = client.get(f"/v1/games/{game_id}").get_json()["version"]
    problem(
        client.delete(f"/v1/games/{game_id}/players/1", headers=bearer(ann["token"])),
        409,
        "illegal_action",
    )  # seat 1 is open: nothing to give back
    missing = problem(
        client.delete(f"/v1/games/{game_id}/players/5", headers=bearer(ann["token"])),
        409,
        "illegal_action",
    )
    assert "no seat 5: its seats are 0 to 1" in missing["detail"]
    bob = join(client, game_id, "Bob")
    problem(
        client.delete(f"/v1/games/{game_id}/players/1", headers=bearer(ann["token"])),
        409,
        "illegal_action",
    )  # started
    started = client.get(f"/v1/games/{game_id}").get_json()
    assert started["status"] == "in_progress" and started["version"] == before + 2
    other = lobby(client, seats=3)
    one, two = join(client, other, "One"), join(client, other, "Two")
    problem(
        client.delete(f"/v1/games/{other}/players/{two['seat']}", headers=bearer(one["token"])),
        403,
        "not_your_seat",
    )
    problem(client.delete(f"/v1/games/{other}/players/0"), 401, "unauthorized")
    assert bob["seat"] == 1


def test_the_lobby_listing_shows_open_seats_and_how_long_it_has_waited(
    client: FlaskClient,
) -> None:
    game_id = lobby(client, seats=4)
    join(client, game_id, "Ann")
    listed = client.get("/v1/games?status=waiting&open=true").get_json()["games"]
    row = next(g for g in listed if g["id"] == game_id)
    assert row["open_seats"] == 3 and row["players"][0] == "Ann"
    assert isinstance(row["waited_seconds"], int) and row["waited_seconds"] >= 0


# ------------------------------------------------------------------------------ bot seats
@pytest.fixture
def bot_app(database_url: str) -> Iterator[tuple[Flask, FlaskClient]]:
    app = create_app(Settings(database_url=database_url, bot_pause=0), create_tables=True)
    halt = run_scheduler(app)
    yield app, app.test_client()
    halt()
    app.extensions["cantstop"].close()


def test_a_game_of_bots_only_plays_to_the_end_by_itself(
    bot_app: tuple[Flask, FlaskClient],
) -> None:
    _, client = bot_app
    created = client.post(
        "/v1/games",
        json={
            "players": [{"name": "Robo", "bot": "expert"}, {"name": "Keller", "bot": "rule-of-28"}]
        },
    ).get_json()
    assert [s["token"] for s in created["seats"]] == [None, None]
    assert [p["bot"] for p in created["game"]["players"]] == ["expert", "rule-of-28"]
    game_id = created["game"]["id"]
    state = poll(
        lambda: (
            s
            if (s := client.get(f"/v1/games/{game_id}").get_json())["status"] == "finished"
            else None
        ),
        60,
    )
    assert state["winner"] in (0, 1)
    assert client.get(f"/v1/games/{game_id}/audit").get_json()["valid"] is True
    kinds = {e["type"] for e in history(client, game_id)}
    assert {"DiceRolled", "MovePlayed", "TurnStopped", "GameFinished", "SeedRevealed"} <= kinds


def test_a_bot_seated_in_a_lobby_plays_its_turns_against_a_person(
    bot_app: tuple[Flask, FlaskClient],
) -> None:
    _, client = bot_app
    game_id = lobby(client, seats=2)
    ann = join(client, game_id, "Ann")
    robo = join(client, game_id, "Robo", body={"bot": "rule-of-28"}, headers=bearer(ann["token"]))
    assert robo["token"] is None and robo["bot"] == "rule-of-28"
    state = robo["game"]
    for _ in range(2000):
        if state["status"] == "finished":
            break
        if state["turn"]["player"] != ann["seat"]:
            # The bot's turn: played by the server, with no request of ours.
            state = poll(
                lambda: (
                    s
                    if (s := client.get(f"/v1/games/{game_id}").get_json())["status"] == "finished"
                    or s["turn"]["player"] == ann["seat"]
                    else None
                ),
                30,
            )
            continue
        legal = state["legal_actions"]
        action = {"type": "stop"} if {"type": "stop"} in legal else legal[0]
        response = client.post(
            f"/v1/games/{game_id}/actions", json=action, headers=bearer(ann["token"])
        )
        assert response.status_code == 200, response.get_json()
        state = response.get_json()["game"]
    assert state["status"] == "finished"
    bot_turns = [
        e for e in history(client, game_id) if e["type"] == "TurnStopped" and e["data"]["seat"] == 1
    ]
    assert bot_turns  # the bot played whole turns, action by action


def test_bad_bot_requests_are_refused_and_record_nothing(client: FlaskClient) -> None:
    before = client.get("/v1/games").get_json()["total"]
    for body in (
        {"players": ["Ann", {"name": "X", "bot": "grandmaster"}]},  # no such bot
        {"players": ["Ann", {"name": "X", "bot": "expert"}], "dice": "manual"},
        {"players": ["Ann", {"name": "X", "bot": "expert", "colour": "red"}]},
    ):
        problem(client.post("/v1/games", json=body), 422, "invalid_request")
    assert client.get("/v1/games").get_json()["total"] == before
    game_id = lobby(client, seats=3)
    ann = join(client, game_id, "Ann")
    # A bot is seated by a seated player: no token, or an unknown one, is 401.
    problem(
        client.post(f"/v1/games/{game_id}/players", json={"name": "R", "bot": "random"}),
        401,
        "unauthorized",
    )
    problem(
        client.post(
            f"/v1/games/{game_id}/players",
            json={"name": "R", "bot": "nobody"},
            headers=bearer(ann["token"]),
        ),
        422,
        "invalid_request",
    )
    manual = lobby(client, seats=2, dice="manual")
    host = join(client, manual, "Host")
    problem(
        client.post(
            f"/v1/games/{manual}/players",
            json={"name": "R", "bot": "random"},
            headers=bearer(host["token"]),
        ),
        422,
        "invalid_request",
    )


def test_any_seated_player_may_remove_a_bot_from_the_lobby(client: FlaskClient) -> None:
    game_id = lobby(client, seats=3)
    ann = join(client, game_id, "Ann")
    robo = join(client, game_id, "Robo", body={"bot": "random"}, headers=bearer(ann["token"]))
    removed = client.delete(
        f"/v1/games/{game_id}/players/{robo['seat']}", headers=bearer(ann["token"])
    )
    assert removed.status_code == 200
    assert removed.get_json()["players"][robo["seat"]] == {
        **removed.get_json()["players"][robo["seat"]],
        "name": None,
        "bot": None,
    }


def test_people_joining_a_lobby_at_once_fill_it(app: Flask) -> None:
    """Twelve people join an 8-seat lobby at the same moment: eight are seated and four hear
    that no seat is open. Before, a join that lost a race was refused as concurrent_action
    (the vault read before the game's lock, no second judgement): two seated, ten refused."""
    client = app.test_client()
    game_id = lobby(client, seats=8)

    def join_now(name: str) -> Any:
        return app.test_client().post(f"/v1/games/{game_id}/players", json={"name": name})

    answers = race_cleanly([partial(join_now, f"P{i}") for i in range(12)])
    codes = sorted(a.status_code for a in answers)
    assert codes == [201] * 8 + [409] * 4, [a.get_json() for a in answers]
    assert {a.get_json()["code"] for a in answers if a.status_code == 409} == {"illegal_action"}
    state = client.get(f"/v1/games/{game_id}").get_json()
    assert state["status"] == "in_progress" and None not in [p["name"] for p in state["players"]]
    tokens = [a.get_json()["token"] for a in answers if a.status_code == 201]
    assert len(set(tokens)) == 8
    seats = {
        client.get(f"/v1/games/{game_id}/seat", headers=bearer(t)).get_json()["seat"]
        for t in tokens
    }
    assert seats == set(range(8))


# ------------------------------------------------------------------------------ rematch
def finished_game(client: FlaskClient, players: list[Any], **extra: Any) -> tuple[str, list[Json]]:
    created = client.post("/v1/games", json={"players": players, **extra}).get_json()
    game = created["game"]
    seats = created["seats"]
    for person in (s for s in seats if s["token"]):  # every person resigns: the game ends
        client.post(
            f"/v1/games/{game['id']}/actions",
            json={"type": "resign"},
            headers=bearer(person["token"]),
        )
    assert client.get(f"/v1/games/{game['id']}").get_json()["status"] == "finished"
    return game["id"], seats


def test_listings_answer_while_games_are_created_at_once(app: Flask) -> None:
    """A listing read the index while another request's catch-up added games to it: "dictionary
    changed size during iteration", a 500. Listings and the leaderboard read a copy taken under
    the projection's lock."""
    statuses: list[int] = []
    done = threading.Event()

    def create() -> None:
        client = app.test_client()
        for _ in range(60):
            statuses.append(client.post("/v1/games", json={"players": ["Ann"]}).status_code)

    def read() -> None:
        client = app.test_client()
        while not done.is_set():
            statuses.append(client.get("/v1/games?limit=1").status_code)
            statuses.append(client.get("/v1/solitaire/leaderboard?mode=easy").status_code)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often: the race shows within the bound
    try:
        creators = [threading.Thread(target=create) for _ in range(4)]
        readers = [threading.Thread(target=read) for _ in range(4)]
        for thread in (*creators, *readers):
            thread.start()
        for thread in creators:
            thread.join(timeout=120)
        done.set()
        for thread in readers:
            thread.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert set(statuses) <= {200, 201}, sorted(set(statuses))
    assert statuses.count(201) == 240


def test_a_rematch_is_one_game_however_many_ask_at_once(app: Flask) -> None:
    client = app.test_client()
    old, seats = finished_game(
        client,
        ["Ann", "Bob", {"name": "Robo", "bot": "random"}],
        rules={"jumping": True},
        clock={"turn_seconds": 60},
    )
    old_version = client.get(f"/v1/games/{old}").get_json()["version"]

    def ask(token: str) -> Any:
        return app.test_client().post(f"/v1/games/{old}/rematch", headers=bearer(token))

    answers = race_cleanly([partial(ask, s["token"]) for s in seats[:2] for _ in range(3)])
    ok = [a for a in answers if a.status_code == 201]
    assert len(ok) == 2  # each person's seat once; the repeats are refused
    assert {a.status_code for a in answers} <= {201, 409}
    new_ids = {a.get_json()["game"]["id"] for a in ok}
    assert len(new_ids) == 1
    new = client.get(f"/v1/games/{new_ids.pop()}").get_json()
    assert new["rematch_of"] == old
    assert [p["name"] for p in new["players"]] == ["Ann", "Bob", "Robo"]
    assert new["players"][2]["bot"] == "random"  # the bot claimed its seat at once
    assert new["rules"]["jumping"] is True and new["clock"] == {"turn_seconds": 60}
    assert new["status"] == "in_progress"
    fresh = {a.get_json()["seat"]: a.get_json()["token"] for a in ok}
    assert set(fresh) == {0, 1} and all(fresh.values())
    assert fresh[0] != seats[0]["token"]
    # Nothing was appended to the finished game.
    assert client.get(f"/v1/games/{old}").get_json()["version"] == old_version
    first = history(client, new["id"])[0]
    assert first["data"]["rematch_of"] == old


def test_a_rematch_waits_for_every_person_and_refuses_unfinished_games(
    client: FlaskClient,
) -> None:
    old, seats = finished_game(client, ["Ann", "Bob"])
    claimed = client.post(f"/v1/games/{old}/rematch", headers=bearer(seats[1]["token"]))
    assert claimed.status_code == 201
    assert claimed.get_json()["game"]["status"] == "waiting"
    new_id = claimed.get_json()["game"]["id"]
    # The kept seat cannot be taken by someone else, nor is it offered as open.
    problem(
        client.post(f"/v1/games/{new_id}/players", json={"name": "Mallory"}), 409, "illegal_action"
    )
    rows = client.get("/v1/games?status=waiting").get_json()["games"]
    assert [r["open_seats"] for r in rows if r["id"] == new_id] == [0]
    assert new_id not in {r["id"] for r in client.get("/v1/games?open=true").get_json()["games"]}
    problem(client.post(f"/v1/games/{old}/rematch", headers=bearer("forged")), 401, "unauthorized")
    started = client.post(f"/v1/games/{old}/rematch", headers=bearer(seats[0]["token"]))
    assert started.get_json()["game"]["status"] == "in_progress"
    running = client.post("/v1/games", json={"players": ["Cy", "Dee"]}).get_json()
    problem(
        client.post(
            f"/v1/games/{running['game']['id']}/rematch",
            headers=bearer(running["seats"][0]["token"]),
        ),
        409,
        "illegal_action",
    )


def test_a_rematch_seats_the_accounts_that_held_the_old_seats(client: FlaskClient) -> None:
    """The same players: a seat an account held is that account's in the rematch too (its
    bot's seat as well), so the rematch is in the account's history; a person's seat without
    an account stays without one. (The rematch had seated nobody's account.)"""
    ann = sign_up(client, "ann")
    made = client.post(
        "/v1/games",
        json={"players": [{"account": "ann"}, "Bob", {"name": "R", "bot": "random"}]},
        headers=bearer(ann),
    )
    assert made.status_code == 201, made.get_json()
    old = made.get_json()["game"]
    tokens = [seat["token"] for seat in made.get_json()["seats"]]
    for token in tokens[:2]:
        client.post(
            f"/v1/games/{old['id']}/actions", json={"type": "resign"}, headers=bearer(token)
        )
    claims = [client.post(f"/v1/games/{old['id']}/rematch", headers=bearer(t)) for t in tokens[:2]]
    assert [c.status_code for c in claims] == [201, 201]
    rematch = claims[-1].get_json()["game"]
    assert rematch["status"] == "in_progress"
    assert [p["account"] for p in rematch["players"]] == [p["account"] for p in old["players"]]
    assert rematch["players"][0]["account"] == "ann" and rematch["players"][1]["account"] is None
    fresh = [c.get_json()["token"] for c in claims]
    for token in fresh:
        client.post(
            f"/v1/games/{rematch['id']}/actions", json={"type": "resign"}, headers=bearer(token)
        )
    listed = client.get("/v1/accounts/ann/games").get_json()["games"]
    assert {rematch["id"], old["id"]} <= {row["game_id"] for row in listed}


def test_the_rematch_of_a_rated_game_is_rated_and_counts(client: FlaskClient) -> None:
    """The same players, rules and clock, and rated as before: each account claims its seat with
    its personal token, and the result is in their ratings. (A rematch was never rated.)"""
    tokens = {handle: sign_up(client, handle) for handle in ("ann", "bob")}
    old = finished_rated_game(client, tokens)
    claims = [
        client.post(f"/v1/games/{old['id']}/rematch", headers=bearer(tokens[h]))
        for h in ("ann", "bob")
    ]
    assert [c.status_code for c in claims] == [201, 201], [c.get_json() for c in claims]
    rematch = claims[-1].get_json()["game"]
    assert rematch["rated"] is True and rematch["status"] == "in_progress"
    assert [p["account"] for p in rematch["players"]] == [p["account"] for p in old["players"]]
    by_seat = seat_tokens(rematch, tokens)
    for _ in range(2):
        rematch = play_a_turn(client, rematch, by_seat)
    resigned = client.post(
        f"/v1/games/{rematch['id']}/actions",
        json={"type": "resign"},
        headers=bearer(by_seat[rematch["turn"]["player"]]),
    )
    assert resigned.get_json()["game"]["status"] == "finished"
    rated = client.get("/v1/accounts/ann/games?rated=true").get_json()["games"]
    assert {old["id"], rematch["id"]} <= {row["game_id"] for row in rated}


def test_the_claim_that_creates_a_rematch_may_bring_a_committed_seed(
    client: FlaskClient,
) -> None:
    """Contract 1.1's fairness for a rematch: the seed committed before the client chose its
    seed, as for a new game. Once the rematch exists its seed is drawn: a later claim with
    seeds claims the seat, its commitment left unused. A used commitment is used up."""
    old, seats = finished_game(client, ["Ann", "Bob"])
    committed = client.post("/v1/seed-commitments").get_json()["seed_commitment"]
    path = f"/v1/games/{old}/rematch"
    lacking = {"seed_commitment": committed}  # no client seed: the seed would be the server's
    problem(
        client.post(path, json=lacking, headers=bearer(seats[0]["token"])), 422, "invalid_request"
    )
    seeds = {"client_seed": "ann-rolls-0417", "seed_commitment": committed}
    ann = client.post(path, json=seeds, headers=bearer(seats[0]["token"]))
    assert ann.status_code == 201, ann.get_json()
    fairness = ann.get_json()["game"]["fairness"]
    assert fairness["seed_commitment"] == committed and fairness["client_seed"] == "ann-rolls-0417"
    created = history(client, ann.get_json()["game"]["id"])[0]["data"]
    assert created["seed_committed_at"] is not None and created["rematch_of"] == old
    again = {"players": ["Cy", "Dee"], "client_seed": "x", "seed_commitment": committed}
    problem(client.post("/v1/games", json=again), 422, "invalid_request")  # used up
    # Bob asks with seeds of his own: the rematch exists, its seeds Ann's; his go unused.
    bobs = client.post("/v1/seed-commitments").get_json()["seed_commitment"]
    others = {"client_seed": "bob", "seed_commitment": bobs}
    bob = client.post(path, json=others, headers=bearer(seats[1]["token"]))
    assert bob.status_code == 201 and bob.get_json()["game"]["status"] == "in_progress"
    assert bob.get_json()["game"]["fairness"] == fairness
    unused = {"players": ["Cy", "Dee"], "client_seed": "x", "seed_commitment": bobs}
    assert client.post("/v1/games", json=unused).status_code == 201
    # An empty body is no body, however its length is written: judged as a claim (Bob's seat
    # is taken already), not as a document that is not JSON.
    empty = client.post(
        path,
        data=b"",
        headers={**bearer(seats[1]["token"]), "Content-Type": "application/json"},
        environ_overrides={"CONTENT_LENGTH": "00"},
    )
    assert "claimed already" in problem(empty, 409, "illegal_action")["detail"]


# ------------------------------------------------------------------------------ advice
def test_advice_gives_exact_odds_and_the_experts_choice(client: FlaskClient) -> None:
    created = client.post(
        "/v1/games", json={"players": ["Ann", "Bob"], "dice": "manual"}
    ).get_json()
    game_id, token = created["game"]["id"], created["seats"][0]["token"]
    first = client.get(f"/v1/games/{game_id}/advice").get_json()
    assert first["phase"] == "roll" and first["bust_chance"] == 0.0  # no runner yet
    assert first["recommended"] == {"type": "roll"} and first["strategy"] == "expert"
    for action in (
        {"type": "roll", "dice": [1, 5, 2, 6]},  # 6, 8, 7 …
        {"type": "move", "sums": [6, 8]},
        {"type": "roll", "dice": [3, 4, 1, 1]},
        {"type": "move", "sums": [7]},
    ):
        client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(token))
    now = client.get(f"/v1/games/{game_id}/advice").get_json()
    assert now["phase"] == "roll_or_stop" and now["moves"] == []
    assert now["bust_chance"] == pytest.approx(104 / 1296)  # runners on 6, 7 and 8
    assert now["version"] == client.get(f"/v1/games/{game_id}").get_json()["version"]
    client.post(
        f"/v1/games/{game_id}/actions",
        json={"type": "roll", "dice": [1, 5, 3, 4]},
        headers=bearer(token),
    )
    moving = client.get(f"/v1/games/{game_id}/advice").get_json()
    assert moving["bust_chance"] is None and moving["moves"]
    h = heights(6)
    for move in moving["moves"]:
        runners = [0] * 13
        runners[6], runners[7], runners[8] = 1, 1, 1
        board = Board(h, [-1] * 13, [0] * 13)
        after = board.play(tuple(move["sums"]), runners)
        busts, total = bust_probability_table(board, after)
        assert move["bust_chance_after"] == pytest.approx(busts / total)
    assert moving["recommended"]["type"] == "move"
    assert moving["recommended"]["sums"] in [m["sums"] for m in moving["moves"]]
    past = client.get(f"/v1/games/{game_id}/advice?version={now['version']}").get_json()
    assert past == now  # any past version, the same answer


def test_advice_for_a_finished_or_unknown_game_is_a_clear_problem(client: FlaskClient) -> None:
    old, _ = finished_game(client, ["Ann", "Bob"])
    problem(client.get(f"/v1/games/{old}/advice"), 409, "game_over")
    problem(client.get(f"/v1/games/{old}/advice?version=999"), 404, "not_found")
    waiting = lobby(client, seats=2)
    problem(client.get(f"/v1/games/{waiting}/advice"), 409, "illegal_action")


def test_advice_at_the_version_of_dice_that_bust_says_nobody_chooses(client: FlaskClient) -> None:
    created = client.post(
        "/v1/games", json={"players": ["Ann", "Bob"], "dice": "manual"}
    ).get_json()
    game_id, token = created["game"]["id"], created["seats"][0]["token"]
    for action in (
        {"type": "roll", "dice": [1, 1, 1, 2]},
        {"type": "move", "sums": [2, 3]},
        {"type": "roll", "dice": [1, 1, 1, 3]},
        {"type": "move", "sums": [2, 4]},
        {"type": "roll", "dice": [6, 6, 6, 6]},  # 12 only: no runner can take it
    ):
        answer = client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(token))
        assert answer.status_code == 200, answer.get_json()
    events = answer.get_json()["events"]
    assert [e["type"] for e in events] == ["DiceRolled", "TurnBusted"]
    rolled = events[0]["version"]
    body = problem(
        client.get(f"/v1/games/{game_id}/advice?version={rolled}"), 409, "illegal_action"
    )
    assert "bust" in body["detail"]
    before, after = (
        client.get(f"/v1/games/{game_id}/advice?version={v}") for v in (rolled - 1, rolled + 1)
    )
    assert before.status_code == after.status_code == 200
    assert after.get_json()["seat"] == 1 and after.get_json()["phase"] == "roll"


def test_advice_at_the_version_before_a_game_ends_says_nobody_is_to_act(
    client: FlaskClient,
) -> None:
    """The resignation (or winning stop) and the game's end are two versions of one command:
    between them nobody is to act, and advice there was a 500."""
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()
    game_id, token = created["game"]["id"], created["seats"][0]["token"]
    answer = client.post(
        f"/v1/games/{game_id}/actions", json={"type": "resign"}, headers=bearer(token)
    )
    events = answer.get_json()["events"]
    assert [e["type"] for e in events][:2] == ["PlayerResigned", "GameFinished"]
    resigned = events[0]["version"]
    body = problem(
        client.get(f"/v1/games/{game_id}/advice?version={resigned}"), 409, "illegal_action"
    )
    assert f"version {resigned + 1} records the end" in body["detail"]
    ended = client.get(f"/v1/games/{game_id}/advice?version={resigned + 1}")
    assert problem(ended, 409, "game_over")
    assert client.get(f"/v1/games/{game_id}/advice?version={resigned - 1}").status_code == 200


def test_the_bots_are_listed(client: FlaskClient) -> None:
    bots = client.get("/v1/bots").get_json()["bots"]
    assert {"random", "rule-of-28", "expert"} <= {b["id"] for b in bots}
    assert all(b["name"] and b["description"] and b["version"] for b in bots)
