"""The HTTP API through Flask's test client, on SQLite and on a real PostgreSQL.

Every /v1/ response seen here is validated against openapi.yaml by the ``client`` fixture.
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from functools import partial
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain import fairness
from domain.game import Game
from service.application.games.use_cases import Games
from service.application.store import Store
from service.config import Settings
from service.http.app import create_app
from service.http.core import dumps
from tests.support.games import UNKNOWN
from tests.support.racing import race_cleanly

OCTET = "application/octet-stream"

Json = dict[str, Any]


def create(client: FlaskClient, **body: Any) -> tuple[Json, list[str]]:
    response = client.post("/v1/games", json=body)
    assert response.status_code == 201, response.get_json()
    payload = response.get_json()
    return payload["game"], [seat["token"] for seat in payload["seats"]]


def act(
    client: FlaskClient, game_id: str, token: str | None, headers: Json | None = None, **action: Any
) -> Any:
    all_headers = dict(headers or {})
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token}"
    return client.post(f"/v1/games/{game_id}/actions", json=action, headers=all_headers)


def state(client: FlaskClient, game_id: str, **params: Any) -> Json:
    response = client.get(f"/v1/games/{game_id}", query_string=params)
    assert response.status_code == 200
    result: Json = response.get_json()
    return result


def problem(response: Any, status: int, code: str) -> Json:
    assert response.status_code == status, response.get_json()
    assert response.content_type == "application/problem+json"
    body: Json = response.get_json()
    assert body["code"] == code
    assert body["status"] == status
    assert {"type", "title", "detail"} <= body.keys()
    return body


# ------------------------------------------------------------------------------ creation
def test_create_game_with_named_players_starts_it(client: FlaskClient) -> None:
    response = client.post("/v1/games", json={"players": ["Ann", "Bob"], "dice": "manual"})
    assert response.status_code == 201
    body = response.get_json()
    game = body["game"]
    assert response.headers["Location"] == f"/v1/games/{game['id']}"
    assert response.headers["ETag"] == '"2"'
    assert game["status"] == "in_progress"
    assert game["version"] == 2
    assert game["turn"] == {
        "number": 1,
        "player": 0,
        "phase": "roll",
        "dice": None,
        "runners": {},
        "deadline": None,  # no clock
    }
    assert game["legal_actions"] == [{"type": "roll"}]
    assert [c["height"] for c in game["columns"]] == [3, 5, 7, 9, 11, 13, 11, 9, 7, 5, 3]
    assert [s["seat"] for s in body["seats"]] == [0, 1]
    assert len({s["token"] for s in body["seats"]}) == 2
    assert all(len(s["token"]) >= 22 for s in body["seats"])  # ≥ 128 bits of base64


def test_the_contracts_creation_example_as_written_creates_a_server_dice_game(
    client: FlaskClient,
) -> None:
    # The contract shows every optional field at its default, first_player (0) beside server
    # dice included: sent as written, it is the same as left out (the opening roll decides).
    example = {
        "players": ["Ann", "Bob"],
        "rules": {
            "columns_to_win": 3,
            "jumping": False,
            "forced_move": False,
            "steep_hill": False,
            "solitaire": None,
            "dice_faces": 6,
        },
        "dice": "server",
        "first_player": 0,
        "client_seed": "optional text",
    }
    game, _ = create(client, **example)
    assert game["dice"] == "server" and game["fairness"]["client_seed"] == "optional text"
    created = client.get(f"/v1/games/{game['id']}/events").get_json()["events"][0]
    assert created["type"] == "GameCreated" and created["data"]["first_player"] is None
    # Another seat cannot be honoured with server dice.
    body = {**example, "first_player": 1}
    detail = problem(client.post("/v1/games", json=body), 422, "invalid_request")["detail"]
    assert "opening roll" in detail


def test_rules_are_normalized_in_the_state(client: FlaskClient) -> None:
    game, _ = create(client, players=["A", "B", "C"], rules={"columns_to_win": "by_players"})
    assert game["rules"] == {
        "columns_to_win": 4,
        "jumping": False,
        "forced_move": False,
        "steep_hill": False,
        "solitaire": None,
        "dice_faces": 6,
    }
    solo, _ = create(client, players=["Sol"])
    assert solo["rules"]["solitaire"] == "easy"
    assert solo["rules"]["columns_to_win"] == 11
    assert solo["solitaire"] == {"mode": "easy", "turns": 0, "target": 30, "rating": None}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"players": []}, ""),
        ({"players": ["A"] * 9}, ""),
        ({"players": ["x" * 41, "B"]}, ""),
        ({"players": ["A", "B"], "seats": 2}, "either"),
        ({"seats": 1}, ""),
        ({"seats": 9}, ""),
        ({"players": ["A", "B"], "rules": {"colour": "red"}}, ""),
        ({"players": ["A", "B"], "rules": {"jumping": True, "forced_move": True}}, "exclude"),
        ({"players": ["A", "B"], "rules": {"dice_faces": 10}}, "dice_faces"),
        ({"players": ["A", "B"], "rules": {"columns_to_win": 12}}, "columns_to_win"),
        ({"players": ["A", "B"], "rules": {"columns_to_win": "lots"}}, ""),
        ({"players": ["A", "B"], "rules": {"jumping": "yes"}}, ""),
        ({"players": ["A", "B"], "rules": {"solitaire": "easy"}}, "one-player"),
        ({"players": ["Sol"], "rules": {"columns_to_win": 3}}, "solitaire"),
        ({"players": ["A", "B"], "first_player": 1}, "manual"),
        ({"players": ["A", "B"], "dice": "manual", "first_player": 2}, "first_player"),
        ({"players": ["A", "B"], "dice": "loaded"}, ""),
        ({"players": ["A", "B"], "extra": 1}, ""),
        ({"players": "Ann"}, ""),
        ({"players": [1, 2]}, ""),
    ],
)
def test_bad_creation_is_a_clear_422(client: FlaskClient, body: Json, fragment: str) -> None:
    detail = problem(client.post("/v1/games", json=body), 422, "invalid_request")
    text = f"{detail['detail']} {detail.get('errors', '')}"
    assert fragment in text


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b"null", b"\xff\xfe", b'"text"', b""], ids=repr)
def test_malformed_bodies_are_422_never_500(client: FlaskClient, raw: bytes) -> None:
    response = client.post("/v1/games", data=raw, content_type="application/json")
    problem(response, 422, "invalid_request")


def test_oversized_body_is_413(client: FlaskClient) -> None:
    response = client.post(
        "/v1/games", data=b"[" + b"1," * 200_000 + b"1]", content_type="application/json"
    )
    problem(response, 413, "payload_too_large")


def test_over_long_targets_and_header_blocks_are_refused_before_the_view(
    client: FlaskClient,
) -> None:
    """414 and 431 as problem+json, for a route that exists and whatever the view would say
    (here: a game that does not exist, which would be 404)."""
    missing = f"/v1/games/{uuid.uuid4()}"
    too_long = problem(client.get(missing + "?pad=" + "a" * 9000), 414, "uri_too_long")
    assert "8190 bytes" in too_long["detail"]
    too_big = client.get(missing, headers={"X-Padding": "b" * 40_000})
    assert "32768 bytes" in problem(too_big, 431, "headers_too_large")["detail"]
    problem(client.get(missing + "?pad=" + "a" * 8000), 404, "not_found")  # under the limits


def test_a_body_shorter_than_its_content_length_is_422_and_records_nothing(
    client: FlaskClient,
) -> None:
    """The client went away mid-body (or lied about the length): nothing is read as a game."""
    game, tokens = create(client, players=["Ann", "Bob"])
    short = client.post(
        f"/v1/games/{game['id']}/actions",
        data=b'{"type": "stop"}',
        content_type="application/json",
        headers={"Authorization": f"Bearer {tokens[game['turn']['player']]}"},
        environ_overrides={"CONTENT_LENGTH": "40"},
    )
    assert "ended after 16 of its 40 bytes" in problem(short, 422, "invalid_request")["detail"]
    assert state(client, game["id"])["version"] == game["version"]


@pytest.mark.parametrize(
    "path",
    ["/v1/games/not-a-uuid", f"/v1/games/{UNKNOWN}", f"/v1/games/{UNKNOWN}/events"],
)
def test_unknown_games_are_404(client: FlaskClient, path: str) -> None:
    problem(client.get(path), 404, "not_found")


def test_a_game_has_one_id_as_written_not_every_form_uuid_reads(client: FlaskClient) -> None:
    """32 bare hex digits, braces and a URN all name the same UUID to Python: each was another
    URL of one game (its state, actions, audits). Only the form the service writes is a game id
    (openapi.yaml's pattern; hex digits in either case)."""
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()
    gid = created["game"]["id"]
    for other in (gid.replace("-", ""), "{" + gid + "}", "urn:uuid:" + gid):
        problem(client.get(f"/v1/games/{other}"), 404, "not_found")
        problem(client.get(f"/v1/games/{other}/events"), 404, "not_found")
    assert client.get(f"/v1/games/{gid.upper()}").get_json()["id"] == gid


def test_unknown_route_and_method_are_problems(client: FlaskClient) -> None:
    assert client.get("/v2/nothing").content_type == "application/problem+json"
    assert client.delete("/v1/games").status_code == 405


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_the_import_path_is_the_imports_alone(client: FlaskClient, method: str) -> None:
    """``/v1/games/import`` is not a game called "import": only POST is allowed there."""
    response = client.open("/v1/games/import", method=method)
    problem(response, 405, "method_not_allowed")
    assert set(response.headers["Allow"].split(", ")) == {"POST", "OPTIONS"}  # no GET
    problem(client.get("/v1/games/importer"), 404, "not_found")  # a made-up id, as any


# ------------------------------------------------------------------------------ lobby
def test_lobby_starts_when_the_last_seat_is_taken(client: FlaskClient) -> None:
    game, tokens = create(client, seats=3, dice="manual", first_player=2)
    assert tokens == []
    assert game["status"] == "waiting"
    assert game["turn"] is None and game["legal_actions"] == []
    listing = client.get("/v1/games", query_string={"open": "true"}).get_json()
    assert [g["id"] for g in listing["games"]] == [game["id"]]
    assert listing["games"][0]["open_seats"] == 3

    seats = []
    for name in ("Ann", "Bob", "Cy"):
        response = client.post(f"/v1/games/{game['id']}/players", json={"name": name})
        assert response.status_code == 201
        seats.append(response.get_json())
    assert [s["seat"] for s in seats] == [0, 1, 2]
    final = seats[-1]["game"]
    assert final["status"] == "in_progress"
    assert final["turn"]["player"] == 2
    assert [p["name"] for p in final["players"]] == ["Ann", "Bob", "Cy"]
    assert client.get("/v1/games", query_string={"open": "true"}).get_json()["games"] == []
    in_progress = client.get("/v1/games", query_string={"status": "in_progress"}).get_json()
    assert in_progress["total"] == 1

    full = client.post(f"/v1/games/{game['id']}/players", json={"name": "Dee"})
    problem(full, 409, "illegal_action")
    assert (
        act(client, game["id"], seats[2]["token"], type="roll", dice=[1, 1, 2, 2]).status_code
        == 200
    )


def test_joining_with_a_token_that_is_no_seats_is_401_and_takes_no_seat(
    client: FlaskClient,
) -> None:
    game, _ = create(client, seats=3)
    url = f"/v1/games/{game['id']}/players"
    refused = client.post(url, json={"name": "Zed"}, headers={"Authorization": "Bearer nope"})
    problem(refused, 401, "unauthorized")
    assert state(client, game["id"])["players"][0]["name"] is None  # no seat taken
    ann = client.post(url, json={"name": "Ann"}).get_json()  # a person needs no token
    # A seated player's own token is good: a second seat for the same hands (a shared table).
    bob = client.post(
        url, json={"name": "Bob"}, headers={"Authorization": f"Bearer {ann['token']}"}
    )
    assert bob.status_code == 201 and bob.get_json()["seat"] == 1


def test_a_lobby_seat_acting_before_the_start_is_refused(client: FlaskClient) -> None:
    game, _ = create(client, seats=2, dice="manual")
    joined = client.post(f"/v1/games/{game['id']}/players", json={"name": "Ann"}).get_json()
    problem(
        act(client, game["id"], joined["token"], type="roll", dice=[1, 2, 3, 4]),
        409,
        "illegal_action",
    )
    assert state(client, game["id"])["version"] == 2


def test_the_game_list_pages_newest_first_with_the_total(client: FlaskClient) -> None:
    made = [create(client, players=["Ann", "Bob"])[0]["id"] for _ in range(5)]
    made.reverse()  # newest first
    first = client.get("/v1/games?limit=2").get_json()
    assert [g["id"] for g in first["games"]] == made[:2]
    total = first["total"]
    assert total >= 5 and first["next_offset"] == 2
    last = client.get(f"/v1/games?limit=2&offset={total - 1}").get_json()
    assert len(last["games"]) == 1 and last["total"] == total and last["next_offset"] is None
    beyond = client.get(f"/v1/games?offset={total + 10}").get_json()
    assert beyond == {"games": [], "total": total, "next_offset": None}
    waiting = client.get("/v1/games?status=waiting").get_json()
    assert waiting["total"] == len(waiting["games"]) and made[0] not in {
        g["id"] for g in waiting["games"]
    }


def test_game_list_rejects_bad_filters(client: FlaskClient) -> None:
    problem(client.get("/v1/games?status=lost"), 422, "invalid_request")
    problem(client.get("/v1/games?limit=0"), 422, "invalid_request")
    problem(client.get("/v1/games?open=maybe"), 422, "invalid_request")


# ------------------------------------------------------------------------------ actions
@pytest.fixture
def manual_game(client: FlaskClient) -> tuple[str, list[str]]:
    game, tokens = create(client, players=["Ann", "Bob"], dice="manual")
    return game["id"], tokens


def test_a_turn_roll_move_stop(client: FlaskClient, manual_game: tuple[str, list[str]]) -> None:
    gid, (ann, _bob) = manual_game
    rolled = act(client, gid, ann, type="roll", dice=[1, 5, 4, 6])
    assert rolled.status_code == 200
    body = rolled.get_json()
    assert [e["type"] for e in body["events"]] == ["DiceRolled"]
    assert body["game"]["turn"]["dice"] == [1, 5, 4, 6]
    assert body["game"]["legal_actions"] == [
        {"type": "move", "sums": [5, 11]},
        {"type": "move", "sums": [6, 10]},
        {"type": "move", "sums": [7, 9]},
    ]
    moved = act(client, gid, ann, type="move", sums=[10, 6]).get_json()
    assert moved["events"][0]["data"]["sums"] == [6, 10]
    assert moved["game"]["turn"]["runners"] == {"6": 1, "10": 1}
    assert moved["game"]["legal_actions"] == [{"type": "roll"}, {"type": "stop"}]
    stopped = act(client, gid, ann, type="stop").get_json()
    assert [e["type"] for e in stopped["events"]] == ["TurnStopped"]
    assert stopped["game"]["players"][0]["markers"] == {"6": 1, "10": 1}
    assert stopped["game"]["turn"]["player"] == 1
    assert stopped["game"]["turn"]["number"] == 2


def test_a_bust_is_reported_by_the_roll(
    client: FlaskClient, manual_game: tuple[str, list[str]]
) -> None:
    gid, (ann, _) = manual_game
    act(client, gid, ann, type="roll", dice=[1, 1, 1, 1])
    act(client, gid, ann, type="move", sums=[2, 2])
    act(client, gid, ann, type="roll", dice=[1, 1, 1, 1])
    act(client, gid, ann, type="move", sums=[2])
    busted = act(client, gid, ann, type="roll", dice=[1, 1, 1, 1]).get_json()
    assert [e["type"] for e in busted["events"]] == ["DiceRolled", "TurnBusted"]
    assert busted["events"][1]["data"]["lost"] == {"2": 3}
    assert busted["game"]["turn"]["player"] == 1
    assert busted["game"]["players"][0]["markers"] == {}


def test_tokens_are_checked_first(client: FlaskClient, manual_game: tuple[str, list[str]]) -> None:
    gid, (ann, bob) = manual_game
    problem(act(client, gid, None, type="roll", dice=[1, 2, 3, 4]), 401, "unauthorized")
    problem(act(client, gid, "forged", type="roll", dice=[1, 2, 3, 4]), 401, "unauthorized")
    problem(act(client, gid, "forged", type="jump"), 401, "unauthorized")
    problem(
        client.post(
            f"/v1/games/{gid}/actions", json={"type": "roll"}, headers={"Authorization": ann}
        ),
        401,
        "unauthorized",
    )
    _other, other_tokens = create(client, players=["X", "Y"], dice="manual")
    problem(act(client, gid, other_tokens[0], type="roll", dice=[1, 2, 3, 4]), 401, "unauthorized")
    problem(act(client, gid, bob, type="roll", dice=[1, 2, 3, 4]), 403, "not_your_turn")
    assert state(client, gid)["version"] == 2


@pytest.mark.parametrize(
    "action",
    [
        {"type": "jump"},
        {"type": "move"},
        {"type": "move", "sums": "6"},
        {"type": "move", "sums": [6, "x"]},
        {"type": "move", "sums": [6, 7, 8]},
        {"type": "stop", "sums": [6]},
        {"type": "stop", "dice": [1, 2, 3, 4]},
        {"type": "roll", "colour": "red"},
        {},
    ],
    ids=repr,
)
def test_malformed_actions_are_422(
    client: FlaskClient, manual_game: tuple[str, list[str]], action: Json
) -> None:
    gid, (ann, _) = manual_game
    problem(act(client, gid, ann, **action), 422, "invalid_request")
    assert state(client, gid)["version"] == 2


@pytest.mark.parametrize(
    "dice",
    [
        *(None, [1, 2, 3], [1, 2, 3, 4, 5], [0, 1, 2, 3], [1, 2, 3, 7], [True, 1, 2, 3], "1234"),
        # not a list at all: once a 500 (the parsed-body cache and the key's fingerprint
        # iterated them)
        *(7, 2.5, True, {"a": 1}),
    ],
)
@pytest.mark.parametrize("key", [None, "roll-1"], ids=["no key", "Idempotency-Key"])
def test_bad_manual_dice_are_invalid_dice(
    client: FlaskClient, manual_game: tuple[str, list[str]], dice: Any, key: str | None
) -> None:
    gid, (ann, _) = manual_game
    action = {"type": "roll"} if dice is None else {"type": "roll", "dice": dice}
    headers = {"Idempotency-Key": key} if key else None
    detail = problem(act(client, gid, ann, headers, **action), 422, "invalid_dice")["detail"]
    as_json = json.dumps(dice, separators=(",", ":"))
    assert detail.endswith(as_json), detail  # as JSON writes it, not as Python does
    assert state(client, gid)["version"] == 2


def test_dice_sent_as_null_are_no_dice(
    client: FlaskClient, manual_game: tuple[str, list[str]]
) -> None:
    # Not four integers: invalid_dice, as when left out (it was invalid_request).
    gid, (ann, _) = manual_game
    problem(act(client, gid, ann, type="roll", dice=None), 422, "invalid_dice")
    assert state(client, gid)["version"] == 2
    # In a server-dice game, null is the same as leaving them out.
    game, tokens = create(client, players=["Ann", "Bob"])
    rolled = act(client, game["id"], tokens[game["turn"]["player"]], type="roll", dice=None)
    assert rolled.status_code == 200 and rolled.get_json()["events"][0]["type"] == "DiceRolled"


@pytest.mark.parametrize("dice", [[1, 2, 3, 4], 7, 2.5, True])
def test_dice_sent_to_a_server_dice_game_are_refused(client: FlaskClient, dice: Any) -> None:
    game, tokens = create(client, players=["Ann", "Bob"])
    first = game["turn"]["player"]
    problem(
        act(client, game["id"], tokens[first], type="roll", dice=dice),
        422,
        "invalid_request",
    )


def test_illegal_action_lists_the_legal_ones_and_records_nothing(
    client: FlaskClient, manual_game: tuple[str, list[str]]
) -> None:
    gid, (ann, _) = manual_game
    body = problem(act(client, gid, ann, type="stop"), 409, "illegal_action")
    assert body["legal_actions"] == [{"type": "roll"}]
    act(client, gid, ann, type="roll", dice=[1, 5, 4, 6])
    body = problem(act(client, gid, ann, type="move", sums=[6]), 409, "illegal_action")
    assert {"type": "move", "sums": [6, 10]} in body["legal_actions"]
    body = problem(act(client, gid, ann, type="roll", dice=[1, 1, 1, 1]), 409, "illegal_action")
    assert state(client, gid)["version"] == 3


def test_finished_game_refuses_actions_with_game_over(client: FlaskClient) -> None:
    game, (ann, bob) = create(client, players=["Ann", "Bob"], dice="manual")
    resigned = act(client, game["id"], bob, type="resign").get_json()
    assert [e["type"] for e in resigned["events"]] == ["PlayerResigned", "GameFinished"]
    assert resigned["game"]["status"] == "finished"
    assert resigned["game"]["winner"] == 0
    problem(act(client, game["id"], ann, type="roll", dice=[1, 2, 3, 4]), 409, "game_over")
    problem(act(client, game["id"], bob, type="resign"), 409, "game_over")


def test_resigning_out_of_turn_skips_the_turn_check(client: FlaskClient) -> None:
    game, tokens = create(client, players=["Ann", "Bob", "Cy"], dice="manual")
    body = act(client, game["id"], tokens[2], type="resign").get_json()
    assert body["game"]["players"][2]["resigned"] is True
    assert body["game"]["turn"]["player"] == 0
    assert body["game"]["status"] == "in_progress"


# ------------------------------------------------------------------------------ history
def test_every_past_version_can_be_read(
    client: FlaskClient, manual_game: tuple[str, list[str]]
) -> None:
    gid, (ann, bob) = manual_game
    seen = {2: state(client, gid)}
    steps: list[tuple[str, Json]] = [
        (ann, {"type": "roll", "dice": [1, 5, 4, 6]}),
        (ann, {"type": "move", "sums": [6, 10]}),
        (ann, {"type": "stop"}),
        (bob, {"type": "roll", "dice": [2, 2, 3, 3]}),
        (bob, {"type": "move", "sums": [5, 5]}),
    ]
    for token, action in steps:
        after = act(client, gid, token, **action).get_json()["game"]
        seen[after["version"]] = after
    for version, expected in seen.items():
        assert state(client, gid, version=version) == expected
    problem(client.get(f"/v1/games/{gid}?version=0"), 404, "not_found")
    problem(client.get(f"/v1/games/{gid}?version=8"), 404, "not_found")
    problem(client.get(f"/v1/games/{gid}?version=two"), 422, "invalid_request")
    # Any other integer is a version outside the game's: 404, as the contract says (these were
    # 422 until a black-box review; the 4,400 digits are more than Python's int() reads).
    for outside in ("-1", "-0", "1000000000000", "9" * 4400, "-" + "9" * 4400):
        problem(client.get(f"/v1/games/{gid}?version={outside}"), 404, "not_found")
        problem(client.get(f"/v1/games/{gid}/board.svg?version={outside}"), 404, "not_found")
    huge = problem(client.get(f"/v1/games/{gid}?version=99999999999999999999999"), 404, "not_found")
    assert "99999999999999999999999" in huge["detail"]  # (not a stand-in number)
    problem(client.get(f"/v1/games/{gid}?version=1.5"), 422, "invalid_request")
    # Digits of other scripts are not numbers here, though Python's int() reads them.
    for digit in ("\u0662", "\uff12"):  # ARABIC-INDIC DIGIT TWO, FULLWIDTH DIGIT TWO
        problem(client.get(f"/v1/games/{gid}?version={digit}"), 422, "invalid_request")
        events = client.get(f"/v1/games/{gid}/events?after={digit}")
        problem(events, 422, "invalid_request")


def test_a_views_cache_holds_each_games_latest_and_the_past_versions_asked_for(
    app: Flask, client: FlaskClient, manual_game: tuple[str, list[str]]
) -> None:
    """An action's view is dropped at the game's next action (keeping every new version for a
    while made each view live long enough to reach the collector's oldest generation); a past
    version read is kept among a bounded few."""
    gid, (ann, _) = manual_game
    games = app.extensions["cantstop"].games
    game_id = uuid.UUID(gid)
    rolled = act(client, gid, ann, type="roll", dice=[1, 5, 4, 6]).get_json()["game"]
    assert games.views.get(game_id, 3) == rolled
    moved = act(client, gid, ann, type="move", sums=[6, 10]).get_json()["game"]
    assert games.views.get(game_id, 4) == moved
    assert games.views.get(game_id, 3) is None
    assert state(client, gid, version=3) == rolled
    assert games.views.get(game_id, 3) == rolled
    games.views.past = 1
    assert state(client, gid, version=2)["version"] == 2
    assert games.views.get(game_id, 3) is None
    assert games.views.get(game_id, 2) is not None
    assert state(client, gid) == moved


def test_etag_and_if_none_match(client: FlaskClient, manual_game: tuple[str, list[str]]) -> None:
    gid, _ = manual_game
    response = client.get(f"/v1/games/{gid}")
    assert response.headers["ETag"] == '"2"'
    assert client.get(f"/v1/games/{gid}", headers={"If-None-Match": '"2"'}).status_code == 304


def test_events_are_paged_oldest_first(
    client: FlaskClient, manual_game: tuple[str, list[str]]
) -> None:
    gid, (ann, _) = manual_game
    act(client, gid, ann, type="roll", dice=[1, 5, 4, 6])
    act(client, gid, ann, type="move", sums=[6, 10])
    first = client.get(f"/v1/games/{gid}/events?limit=2").get_json()
    assert [e["version"] for e in first["events"]] == [1, 2]
    assert first["next_after"] == 2
    rest = client.get(f"/v1/games/{gid}/events?after=2&limit=2").get_json()
    assert [e["type"] for e in rest["events"]] == ["DiceRolled", "MovePlayed"]
    assert rest["next_after"] is None
    everything = client.get(f"/v1/games/{gid}/events").get_json()["events"]
    assert everything[0]["type"] == "GameCreated"
    assert everything[0]["prev_hash"] == "0" * 64
    assert all(b["prev_hash"] == a["hash"] for a, b in itertools.pairwise(everything))
    assert client.get(f"/v1/games/{gid}/events?after=99").get_json() == {
        "events": [],
        "next_after": None,
    }
    problem(client.get(f"/v1/games/{gid}/events?limit=5000"), 422, "invalid_request")


# ------------------------------------------------------------------------------ retries
def test_if_match_on_an_old_version_is_412(
    client: FlaskClient, manual_game: tuple[str, list[str]]
) -> None:
    gid, (ann, _) = manual_game
    stale = act(client, gid, ann, headers={"If-Match": '"1"'}, type="roll", dice=[1, 2, 3, 4])
    body = problem(stale, 412, "version_conflict")
    assert body["version"] == 2
    fresh = act(client, gid, ann, headers={"If-Match": '"2"'}, type="roll", dice=[1, 2, 3, 4])
    assert fresh.status_code == 200
    # A tag that names no version can never match (RFC 9110: If-Match compares strongly).
    for tag in ('"soon"', '"02"', '"+3"', '"\u0663"'):  # "02" names no version: "3" does
        problem(
            act(client, gid, ann, headers={"If-Match": tag}, type="stop"), 412, "version_conflict"
        )
    # What is no list of entity tags (3, unquoted) is a bad request, not the tag "3".
    for field in ("3", '"3" 3', "W/3", '"3'):
        refused = act(client, gid, ann, headers={"If-Match": field}, type="stop")
        problem(refused, 422, "invalid_request")
        read = client.get(f"/v1/games/{gid}", headers={"If-None-Match": field})
        problem(read, 422, "invalid_request")
    assert state(client, gid)["version"] == 3
    listed = {"If-Match": ' , "1", W/"3", "3" ,'}  # empty elements, a weak tag, then "3"
    assert act(client, gid, ann, headers=listed, type="stop").status_code == 409  # at last legal


def test_joining_or_leaving_a_lobby_honours_if_match(client: FlaskClient) -> None:
    """RFC 9110: a false precondition stops a change; joins and leaves ignored If-Match."""
    lobby = client.post("/v1/games", json={"seats": 3}).get_json()["game"]
    path = f"/v1/games/{lobby['id']}/players"
    stale = {"If-Match": '"9"'}
    problem(client.post(path, json={"name": "Ann"}, headers=stale), 412, "version_conflict")
    ann = client.post(path, json={"name": "Ann"}, headers={"If-Match": '"1"'})
    assert ann.status_code == 201, ann.get_json()
    token = {"Authorization": f"Bearer {ann.get_json()['token']}"}
    leave = f"{path}/{ann.get_json()['seat']}"
    problem(client.delete(leave, headers={**token, **stale}), 412, "version_conflict")
    assert state(client, lobby["id"])["version"] == 2  # nothing recorded by the refusals
    left = client.delete(leave, headers={**token, "If-Match": '"2"'})
    assert left.status_code == 200, left.get_json()


def test_http_edges_answer_as_the_contract_says(
    client: FlaskClient, manual_game: tuple[str, list[str]]
) -> None:
    gid, (ann, _) = manual_game
    # Doubled slashes name no resource: 404 problem+json, not a redirect to the Host sent.
    for path in ("/v1//games", f"/v1/games//{gid}", f"/v1/games/{gid}//events"):
        answer = client.get(path, headers={"Host": "evil.example"})
        problem(answer, 404, "not_found")
        assert "Location" not in answer.headers
    # Leading doubled slashes too (Werkzeug's routing dropped them: //v1/... was /v1/...).
    plain = FlaskClient(client.application)  # (the path is set as a server would pass it on)
    for method, path in (("GET", "//v1/games"), ("GET", "//healthz"), ("POST", f"//v1/{gid}")):
        answer = plain.open("/", method=method, environ_overrides={"PATH_INFO": path})
        problem(answer, 404, "not_found")
    resign = plain.post(
        "/",
        json={"type": "resign"},
        headers={"Authorization": f"Bearer {ann}"},
        environ_overrides={"PATH_INFO": f"//v1/games/{gid}/actions"},
    )
    problem(resign, 404, "not_found")  # and nothing recorded: the game plays on below
    # OPTIONS: 204 with Allow, no body and no media type.
    options = client.options(f"/v1/games/{gid}/actions")
    assert options.status_code == 204 and "Content-Type" not in options.headers
    assert {"POST", "OPTIONS"} <= set(options.headers["Allow"].split(", "))
    # A 406 is the answer to that Accept only.
    refused = client.get(f"/v1/games/{gid}/record-sheet?seat=0", headers={"Accept": "image/png"})
    problem(refused, 406, "not_acceptable")
    assert "Accept" in refused.headers["Vary"]
    # A body with a Content-Encoding is not read as if it had none: 415, nothing recorded.
    for coding in ("gzip", "br, gzip"):
        encoded = act(client, gid, ann, headers={"Content-Encoding": coding}, type="resign")
        problem(encoded, 415, "unsupported_media_type")
    assert state(client, gid)["status"] == "in_progress"
    plain = act(client, gid, ann, headers={"Content-Encoding": "identity"}, type="resign")
    assert plain.status_code == 200


def test_idempotency_key_replays_the_first_response(
    client: FlaskClient, manual_game: tuple[str, list[str]]
) -> None:
    gid, (ann, bob) = manual_game
    key = {"Idempotency-Key": "roll-1"}
    first = act(client, gid, ann, headers=key, type="roll", dice=[1, 5, 4, 6])
    again = act(client, gid, ann, headers=key, type="roll", dice=[1, 5, 4, 6])
    assert again.status_code == 200
    assert again.get_json() == first.get_json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert state(client, gid)["version"] == 3
    other = act(client, gid, ann, headers=key, type="roll", dice=[1, 1, 1, 1])
    problem(other, 422, "idempotency_key_reused")
    # Keys belong to a seat: Bob's same key is his own (and it is not his turn).
    problem(
        act(client, gid, bob, headers=key, type="roll", dice=[1, 5, 4, 6]), 403, "not_your_turn"
    )
    # A move's sums in another order are the same move (rules: in any order), so the same key
    # replays it rather than calling the key reused (found by a black-box review).
    sums = next(a["sums"] for a in first.get_json()["game"]["legal_actions"] if len(a["sums"]) == 2)
    move_key = {"Idempotency-Key": "move-1"}
    moved = act(client, gid, ann, headers=move_key, type="move", sums=sums[::-1])
    assert moved.status_code == 200
    retried = act(client, gid, ann, headers=move_key, type="move", sums=sums)
    assert retried.status_code == 200 and retried.headers["Idempotent-Replayed"] == "true"
    assert retried.get_json() == moved.get_json()


# ------------------------------------------------------------------------------ fairness
def play_first_legal_until_finished(
    client: FlaskClient, game: Json, tokens: list[str]
) -> list[Json]:
    """Drive a server-dice game to its end: always the first legal action, stopping often."""
    gid = game["id"]
    current = game
    for _ in range(5000):
        if current["status"] == "finished":
            page = client.get(f"/v1/games/{gid}/events?limit=1000").get_json()
            events: list[Json] = page["events"]
            return events
        legal = current["legal_actions"]
        stop = {"type": "stop"}
        action = stop if stop in legal else legal[0]
        response = act(client, gid, tokens[current["turn"]["player"]], **action)
        assert response.status_code == 200, response.get_json()
        current = response.get_json()["game"]
        assert current["fairness"]["server_seed"] is None or current["status"] == "finished"
    raise AssertionError("the game did not finish")


def test_server_dice_are_provably_fair(client: FlaskClient) -> None:
    game, tokens = create(client, players=["Ann", "Bob"], rules={"columns_to_win": 1})
    fair = game["fairness"]
    assert fair["client_seed"] == game["id"]
    assert fair["server_seed"] is None
    assert len(fair["seed_commitment"]) == 64
    events = play_first_legal_until_finished(client, game, tokens)
    final = state(client, game["id"])
    seed = final["fairness"]["server_seed"]
    assert seed is not None and fairness.commitment(seed) == fair["seed_commitment"]
    assert events[-1]["type"] == "SeedRevealed"
    draws = [(e["data"]["nonce"], e["data"]["dice"]) for e in events if e["type"] == "DiceRolled"]
    for opening in events[1]["data"]["draws"]:
        draws.append((opening["nonce"], opening["dice"]))
    assert sorted(n for n, _ in draws) == list(range(len(draws)))
    for nonce, dice in draws:
        assert fairness.draw(seed, fair["client_seed"], nonce, len(dice), 6) == dice
    # The seed is not in any earlier version of the state.
    assert (
        state(client, game["id"], version=final["version"] - 1)["fairness"]["server_seed"] is None
    )


def test_client_seed_is_used(client: FlaskClient) -> None:
    game, _ = create(client, players=["Ann", "Bob"], client_seed="lucky")
    assert game["fairness"]["client_seed"] == "lucky"


# ------------------------------------------------------------------------------ transcripts
def test_transcript_verification_over_http(client: FlaskClient) -> None:
    transcript: Json = {
        "players": ["Ann", "Bob"],
        "actions": [
            {"type": "roll", "dice": [1, 5, 4, 6]},
            {"type": "move", "sums": [6, 10]},
            {"type": "stop"},
            {"type": "roll", "dice": [1, 1, 1, 1], "seat": 0},
        ],
    }
    verdict = client.post("/v1/transcripts/verify", json=transcript).get_json()
    assert verdict["valid"] is False
    assert verdict["applied"] == 3
    assert verdict["error"]["index"] == 3
    assert verdict["error"]["code"] == "not_your_turn"
    assert verdict["game"]["players"][0]["markers"] == {"6": 1, "10": 1}
    assert "trace" not in verdict
    transcript["actions"] = transcript["actions"][:3]
    traced = client.post("/v1/transcripts/verify", json={**transcript, "trace": True}).get_json()
    assert traced["valid"] is True and traced["error"] is None
    assert [s["version"] for s in traced["trace"]] == [3, 4, 5]
    problem(client.post("/v1/transcripts/verify", json={"players": []}), 422, "invalid_request")
    problem(
        client.post("/v1/transcripts/verify", json={"players": ["A", "B"], "rules": {"x": 1}}),
        422,
        "invalid_request",
    )


# ------------------------------------------------------------------------------ races
class RacingStore(Store):
    """Holds every command's write at a barrier: both requests have judged the action on the
    same version before either writes."""

    barrier: threading.Barrier | None = None

    def _write(self, *aggregates: Any) -> None:
        if self.barrier is not None:
            barrier, self.barrier = self.barrier, None  # once: the loser is judged again
            barrier.wait(timeout=10)
        super()._write(*aggregates)


def test_two_racing_actions_give_exactly_one_success(settings: Settings) -> None:
    apps: list[Flask] = []
    for _ in range(2):  # two workers: two applications on one store
        flask_app = create_app(settings, create_tables=True)
        runtime = flask_app.extensions["cantstop"]
        runtime.store.close()
        runtime.store = RacingStore(env=dict(runtime.store.env))
        runtime.games = Games(runtime.store)
        apps.append(flask_app)
    game, tokens = create(apps[0].test_client(), players=["Ann", "Bob"], dice="manual")
    barrier = threading.Barrier(2)
    for flask_app in apps:
        flask_app.extensions["cantstop"].store.barrier = barrier

    def roll(i: int) -> Any:
        return act(apps[i].test_client(), game["id"], tokens[0], type="roll", dice=[i + 1, 2, 3, 4])

    results = race_cleanly([partial(roll, i) for i in range(2)], timeout=30)
    statuses = sorted(r.status_code for r in results)
    assert statuses == [200, 409]
    # The loser's insert is refused by the store; judged again on the version the winner
    # recorded, a second roll is not allowed now (phase move).
    loser = next(r for r in results if r.status_code == 409)
    assert loser.get_json()["code"] == "illegal_action"
    for flask_app in apps:
        flask_app.extensions["cantstop"].games.barrier = None
    events = apps[1].test_client().get(f"/v1/games/{game['id']}/events").get_json()["events"]
    assert [e["type"] for e in events] == ["GameCreated", "TurnOrderDecided", "DiceRolled"]
    winner = next(r for r in results if r.status_code == 200)
    assert events[-1] == winner.get_json()["events"][0]
    for flask_app in apps:
        flask_app.extensions["cantstop"].close()


# ------------------------------------------------------------------------------ restarts
def test_state_tokens_and_idempotency_keys_survive_a_restart(settings: Settings) -> None:
    first = create_app(settings, create_tables=True)
    client = first.test_client()
    game, (ann, _bob) = create(client, players=["Ann", "Bob"], dice="manual")
    key = {"Idempotency-Key": "k"}
    before = act(client, game["id"], ann, headers=key, type="roll", dice=[1, 5, 4, 6]).get_json()
    first.extensions["cantstop"].close()

    second = create_app(settings)
    client = second.test_client()
    assert state(client, game["id"]) == before["game"]
    assert (
        act(client, game["id"], ann, headers=key, type="roll", dice=[1, 5, 4, 6]).get_json()
        == before
    )
    assert act(client, game["id"], ann, type="move", sums=[6, 10]).status_code == 200
    assert act(client, game["id"], "forged", type="stop").status_code == 401
    second.extensions["cantstop"].close()


def test_ids_of_other_aggregates_are_not_games(client: FlaskClient) -> None:
    from service.application.aggregates import vault_id

    game, _ = create(client, players=["Ann", "Bob"])
    hidden = vault_id(uuid.UUID(game["id"]))
    for path in (f"/v1/games/{hidden}", f"/v1/games/{hidden}/events"):
        problem(client.get(path), 404, "not_found")


def test_long_games_are_snapshotted_so_reads_never_replay_from_the_start(
    app: Flask, client: FlaskClient
) -> None:
    game, (ann, bob) = create(client, players=["Ann", "Bob"], dice="manual")
    tokens = {0: ann, 1: bob}
    current = game
    a_busted_turn: tuple[Json, ...] = (
        {"type": "roll", "dice": [1, 1, 1, 2]},
        {"type": "move", "sums": [2, 3]},
        {"type": "roll", "dice": [6, 6, 6, 6]},
        {"type": "move", "sums": [12, 12]},
        {"type": "roll", "dice": [3, 3, 3, 3]},
    )
    while current["version"] < 130:  # each turn: three runners, then a bust (six events)
        seat = current["turn"]["player"]
        for action in a_busted_turn:
            response = act(client, game["id"], tokens[seat], **action)
            assert response.status_code == 200, response.get_json()
        current = response.get_json()["game"]
        assert response.get_json()["events"][-1]["type"] == "TurnBusted"
    games: Games = app.extensions["cantstop"].games
    every = Store.SNAPSHOT_INTERVALS[Game]
    assert games.store.snapshots is not None  # the service keeps snapshots
    snapshots = [s.originator_version for s in games.store.snapshots.get(uuid.UUID(game["id"]))]
    assert set(range(every, 121, every)) <= set(snapshots)

    read: list[int] = []
    original = games.store.repository.event_store.get

    def counting_get(*args: Any, **kwargs: Any) -> Any:
        events = list(original(*args, **kwargs))
        read.append(len(events))
        return events

    games.store.repository.event_store.get = counting_get  # type: ignore[method-assign]
    late = state(client, game["id"], version=120)
    assert late["version"] == 120
    assert max(read) < every  # from the nearest snapshot, never the 120 events from the start


def test_a_seat_joined_through_another_worker_is_recognised(settings: Settings) -> None:
    first, second = (create_app(settings, create_tables=True) for _ in range(2))
    try:
        one, two = first.test_client(), second.test_client()
        game, _ = create(one, seats=2, dice="manual")
        ann = one.post(f"/v1/games/{game['id']}/players", json={"name": "Ann"}).get_json()
        # Worker one now knows the game's secrets with Ann's token only.
        problem(act(one, game["id"], ann["token"], type="stop"), 409, "illegal_action")
        bob = two.post(f"/v1/games/{game['id']}/players", json={"name": "Bob"}).get_json()
        assert bob["game"]["status"] == "in_progress"
        # Bob's token is unknown to worker one's cache: it must ask the vault, not refuse him.
        problem(
            act(one, game["id"], bob["token"], type="roll", dice=[1, 2, 3, 4]), 403, "not_your_turn"
        )
        problem(act(one, game["id"], "forged", type="roll", dice=[1, 2, 3, 4]), 401, "unauthorized")
        assert act(one, game["id"], ann["token"], type="roll", dice=[1, 2, 3, 4]).status_code == 200
    finally:
        for flask_app in (first, second):
            flask_app.extensions["cantstop"].close()


def test_an_answer_with_keys_that_are_not_strings_writes_them_as_strings() -> None:
    """Answers are encoded without orjson's slower key check unless a payload needs it."""
    assert dumps({"seat": 0, "markers": {"7": 3}}) == b'{"seat":0,"markers":{"7":3}}'
    assert dumps({7: [1], "odds": {2: None}}) == b'{"7":[1],"odds":{"2":null}}'


def test_downloads_typed_by_accept_say_so_to_caches(app: Flask) -> None:
    """One URL answers its own media type or application/octet-stream, as ``Accept`` asks:
    each answer says ``Vary: Accept``, so a cache never hands one to a request for the other
    (found by a review: board.svg's two answers had the same ETag and no Vary). (A client not
    checked against openapi.yaml: its checker reads an octet-stream body as not a string.)"""
    client = app.test_client()
    created = client.post("/v1/games", json={"players": ["Ann", "Bob"]})
    assert created.status_code == 201, created.get_json()
    gid = created.get_json()["game"]["id"]
    downloads = {
        f"/v1/games/{gid}/board.svg": "image/svg+xml",
        f"/v1/games/{gid}/export": "application/x-ndjson",
        "/v1/ratings/ledger": "application/x-ndjson",
        "/openapi.yaml": "application/yaml",
    }
    for path, native in downloads.items():
        for accept, expected in (("*/*", native), ("application/octet-stream", OCTET)):
            answer = client.get(path, headers={"Accept": accept})
            assert answer.status_code == 200, (path, answer.status_code)
            assert answer.mimetype == expected, (path, accept, answer.mimetype)
            assert "Accept" in answer.vary, (path, answer.headers)
