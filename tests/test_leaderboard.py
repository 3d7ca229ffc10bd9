"""The honest solitaire leaderboard (contract 1.1): only games played to the end on this server,
by a person, with server dice; never manual dice or imports; ranked within one rule set."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.application.games.projections import RuleSet

Json = dict[str, Any]


def play_solitaire(client: FlaskClient, name: str, rules: Json, dice: str = "server") -> Json:
    """A whole solitaire game: always the first legal move; stop once a runner has gained."""
    created = client.post("/v1/games", json={"players": [name], "rules": rules, "dice": dice})
    assert created.status_code == 201, created.get_json()
    body = created.get_json()
    game: Json = body["game"]
    token = body["seats"][0]["token"]
    for _ in range(5_000):
        if game["status"] == "finished":
            return game
        legal = game["legal_actions"]
        turn, markers = game["turn"], game["players"][0]["markers"]
        gained = any(at > markers.get(c, 0) for c, at in turn["runners"].items())
        action: Json = {"type": "stop"} if {"type": "stop"} in legal and gained else legal[0]
        if action["type"] == "roll" and dice == "manual":  # chosen dice: every roll a double
            column = next(c["column"] for c in game["columns"] if c["claimed_by"] is None)
            low = max(1, column - 6)
            action = {"type": "roll", "dice": [low, column - low, low, column - low]}
        response = client.post(
            f"/v1/games/{game['id']}/actions",
            json=action,
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 200, response.get_json()
        game = response.get_json()["game"]
    raise AssertionError("the game did not end")


def board(client: FlaskClient, query: str = "") -> Json:
    response = client.get(f"/v1/solitaire/leaderboard{query}")
    assert response.status_code == 200, response.get_json()
    body: Json = response.get_json()
    return body


@pytest.mark.parametrize("mode", ["easy", "advanced"])
def test_server_dice_games_rank_by_fewest_turns_then_earliest(
    app: Flask, client: FlaskClient, mode: str
) -> None:
    played = [play_solitaire(client, f"P{i}", {"solitaire": mode}) for i in range(3)]
    quitter = client.post("/v1/games", json={"players": ["Quitter"]}).get_json()
    client.post(
        f"/v1/games/{quitter['game']['id']}/actions",
        json={"type": "resign"},
        headers={"Authorization": f"Bearer {quitter['seats'][0]['token']}"},
    )
    ranked = board(client, f"?mode={mode}")
    assert (ranked["mode"], ranked["dice_faces"], ranked["steep_hill"]) == (mode, 6, False)
    expected = sorted(played, key=lambda g: g["solitaire"]["turns"])  # stable: earliest first
    assert [r["game_id"] for r in ranked["results"]] == [g["id"] for g in expected]
    assert [r["rank"] for r in ranked["results"]] == [1, 2, 3]
    for entry, game in zip(ranked["results"], expected, strict=True):
        assert entry["turns"] == game["solitaire"]["turns"]
        assert entry["rating"] == game["solitaire"]["rating"]
        assert entry["audit"] == f"/v1/games/{game['id']}/audit"
        assert client.get(entry["audit"]).get_json()["valid"] is True
    other = "advanced" if mode == "easy" else "easy"
    assert board(client, f"?mode={other}")["results"] == []

    runtime = app.extensions["cantstop"]  # rebuilt from the log, the view answers the same
    runtime.views.rebuild(runtime.leaderboard)
    assert runtime.leaderboard.best(runtime.views, RuleSet(mode), 20) == ranked["results"]


def test_manual_dice_games_are_never_ranked(client: FlaskClient) -> None:
    # The reported exploit: choose the dice, finish in a handful of turns, rank first.
    cheat = play_solitaire(client, "Cheat", {}, dice="manual")
    assert cheat["status"] == "finished" and cheat["solitaire"]["rating"] is not None
    assert board(client)["results"] == []


def test_an_imported_game_never_ranks_however_often_it_is_imported(client: FlaskClient) -> None:
    honest = play_solitaire(client, "Honest", {})
    before = board(client)["results"]
    assert [r["game_id"] for r in before] == [honest["id"]]
    export = client.get(f"/v1/games/{honest['id']}/export").get_data()
    for _ in range(2):
        imported = client.post("/v1/games/import", data=export, content_type="application/x-ndjson")
        assert imported.status_code == 201
    assert board(client)["results"] == before


def test_each_rule_set_has_its_own_ranking(client: FlaskClient) -> None:
    eight = play_solitaire(client, "Octo", {"dice_faces": 8})
    steep = play_solitaire(client, "Hill", {"steep_hill": True})
    assert board(client)["results"] == []  # 6-sided dice, no steep hill
    assert [r["game_id"] for r in board(client, "?dice_faces=8")["results"]] == [eight["id"]]
    hill = board(client, "?steep_hill=true")
    assert [r["game_id"] for r in hill["results"]] == [steep["id"]]
    assert hill["results"][0]["steep_hill"] is True


@pytest.mark.parametrize("query", ["?mode=hard", "?dice_faces=7", "?steep_hill=yes", "?limit=0"])
def test_bad_leaderboard_queries_are_422(client: FlaskClient, query: str) -> None:
    response = client.get(f"/v1/solitaire/leaderboard{query}")
    assert response.status_code == 422
    assert response.get_json()["code"] == "invalid_request"
