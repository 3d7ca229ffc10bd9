"""Whole games played purely through HTTP, checked against the pure domain.

Each game is driven by a seeded random player. The actions sent over HTTP are written down as a
transcript, and the offline verifier (the domain alone) must reach exactly the state the API served.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from flask.testing import FlaskClient

from domain.transcript import verify

CASES = [
    ("2 players", ["Ann", "Bob"], {}),
    ("3 players, Columns+", ["Ann", "Bob", "Cy"], {"columns_to_win": "by_players"}),
    ("4 players, jumping", ["A", "B", "C", "D"], {"jumping": True}),
    ("5 players, forced move", ["A", "B", "C", "D", "E"], {"forced_move": True}),
    ("2 players, steep hill", ["Ann", "Bob"], {"steep_hill": True}),
    ("2 players, 8-sided dice", ["Ann", "Bob"], {"dice_faces": 8, "columns_to_win": 2}),
    ("3 players, steep hill + jumping", ["A", "B", "C"], {"steep_hill": True, "jumping": True}),
    ("solitaire easy", ["Sol"], {"solitaire": "easy"}),
    ("solitaire advanced", ["Sol"], {"solitaire": "advanced"}),
    ("solitaire easy steep hill", ["Sol"], {"solitaire": "easy", "steep_hill": True}),
]


def choose(game: Any, rng: random.Random, moves: int, steep_hill: bool) -> dict[str, Any]:
    """A random player that still finishes: half its moves advance runners it already has, it
    stops when a runner is on a top space, and otherwise stops at random once the turn has gained
    (two moves under steep hill, where a placed runner starts on its marker)."""
    legal = game["legal_actions"]
    turn = game["turn"]
    if legal[0]["type"] == "move":
        advancing = [a for a in legal if all(str(c) in turn["runners"] for c in a["sums"])]
        return rng.choice(advancing if advancing and rng.random() < 0.5 else legal)
    if {"type": "stop"} in legal:
        heights = {c["column"]: c["height"] for c in game["columns"]}
        if any(at == heights[int(c)] for c, at in turn["runners"].items()):
            return {"type": "stop"}
        if moves >= (2 if steep_hill else 1) and rng.random() < 0.5:
            return {"type": "stop"}
    return {"type": "roll"}


def play(client: FlaskClient, players: list[str], rules: dict[str, Any], seed: int) -> Any:
    rng = random.Random(seed)
    faces = rules.get("dice_faces", 6)
    created = client.post(
        "/v1/games", json={"players": players, "rules": rules, "dice": "manual"}
    ).get_json()
    game, tokens = created["game"], [s["token"] for s in created["seats"]]
    transcript: dict[str, Any] = {"players": players, "rules": rules, "actions": []}
    moves = 0  # moves made in the current turn
    for _ in range(5_000):
        if game["status"] == "finished":
            break
        seat = game["turn"]["player"]
        if rng.random() < 0.002 and len(players) > 2:
            action: dict[str, Any] = {"type": "resign"}
        else:
            action = choose(game, rng, moves, rules.get("steep_hill", False))
        if action == {"type": "roll"}:
            action["dice"] = [rng.randint(1, faces) for _ in range(4)]
        response = client.post(
            f"/v1/games/{game['id']}/actions",
            json=action,
            headers={"Authorization": f"Bearer {tokens[seat]}"},
        )
        assert response.status_code == 200, response.get_json()
        game = response.get_json()["game"]
        transcript["actions"].append({**action, "seat": seat})
        moves = moves + 1 if action["type"] == "move" else moves
        if game["status"] == "in_progress" and game["turn"]["phase"] == "roll":
            moves = 0  # a new turn: after a stop, a bust or a resignation
    return game, transcript


SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
POSTGRES = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@SQLITE
@pytest.mark.parametrize(("players", "rules"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_whole_game_over_http_matches_the_domain(
    client: FlaskClient, players: list[str], rules: dict[str, Any]
) -> None:
    check_whole_game(client, players, rules)


@POSTGRES
def test_whole_game_on_postgresql_matches_the_domain(client: FlaskClient) -> None:
    check_whole_game(client, ["A", "B", "C", "D"], {"jumping": True})


def check_whole_game(client: FlaskClient, players: list[str], rules: dict[str, Any]) -> None:
    game, transcript = play(client, players, rules, seed=len(players) * 7919 + len(rules))
    assert game["status"] == "finished"
    verdict = verify(transcript)
    assert verdict["valid"], verdict["error"]
    offline = verdict["game"]
    for key in ("status", "players", "columns", "winner", "turn", "solitaire", "legal_actions"):
        assert offline[key] == game[key], key
    if len(players) == 1:
        assert game["solitaire"]["turns"] > 0
        if game["winner"] == 0:
            assert game["solitaire"]["rating"] is not None
        assert all(c["claimed_by"] == 0 for c in game["columns"]) or game["winner"] is None
    # Every version served equals the state rebuilt from the events up to it.
    for version in (1, 2, game["version"] // 2, game["version"]):
        past = client.get(f"/v1/games/{game['id']}?version={version}")
        assert past.status_code == 200
        assert past.get_json()["version"] == version
