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
    ("solitaire advanced steep hill", ["Sol"], {"solitaire": "advanced", "steep_hill": True}),
]


def play(client: FlaskClient, players: list[str], rules: dict[str, Any], seed: int) -> Any:
    rng = random.Random(seed)
    faces = rules.get("dice_faces", 6)
    created = client.post(
        "/v1/games", json={"players": players, "rules": rules, "dice": "manual"}
    ).get_json()
    game, tokens = created["game"], [s["token"] for s in created["seats"]]
    transcript: dict[str, Any] = {"players": players, "rules": rules, "actions": []}
    for _ in range(20_000):
        if game["status"] == "finished":
            break
        legal = game["legal_actions"]
        seat = game["turn"]["player"]
        if rng.random() < 0.002 and len(players) > 2:
            action: dict[str, Any] = {"type": "resign"}
        elif legal[0]["type"] == "move":
            action = rng.choice(legal)
        elif {"type": "stop"} in legal and rng.random() < (0.85 if len(players) == 1 else 0.6):
            action = {"type": "stop"}
        else:
            action = {"type": "roll", "dice": [rng.randint(1, faces) for _ in range(4)]}
        response = client.post(
            f"/v1/games/{game['id']}/actions",
            json=action,
            headers={"Authorization": f"Bearer {tokens[seat]}"},
        )
        assert response.status_code == 200, response.get_json()
        game = response.get_json()["game"]
        transcript["actions"].append({**action, "seat": seat})
    return game, transcript


@pytest.mark.parametrize(("players", "rules"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_whole_game_over_http_matches_the_domain(
    client: FlaskClient, players: list[str], rules: dict[str, Any], database_url: str
) -> None:
    if database_url.startswith("postgres") and len(players) != 4:
        pytest.skip("PostgreSQL plays the 4-player game; SQLite plays them all")
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
