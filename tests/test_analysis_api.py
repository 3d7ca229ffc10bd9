"""``GET /v1/games/{id}/analysis`` and ``cantstop analyse``: the same JSON, kept once a game is
finished, to any version while it is in progress, and corrupt_game for a history the rules
refuse. Each is a job, worked out here by the in-process worker (tests/support/analysis.py;
the queue itself: tests/test_analysis_jobs.py). Real stores (SQLite and PostgreSQL), the
OpenAPI-checked client, nothing mocked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain.analysis import analyse
from service import cli
from service.config import Settings
from service.http.app import create_app
from tests.support.analysis import analysed, cooled, worker_of
from tests.support.games import (
    UNKNOWN,
    choose,
    create_game,
    export_text,
    history,
    play_manual,
    play_to_the_end,
)
from tests.support.http import bearer, ok
from tests.support.stored import StoredRows


def refused(response: Any, status: int, code: str) -> dict[str, Any]:
    """The problem+json of a refused request, checked for its status and code."""
    body: dict[str, Any] = response.get_json()
    assert response.status_code == status, body
    assert response.mimetype == "application/problem+json" and body["code"] == code, body
    return body


def add_up(seat: dict[str, Any]) -> float:
    change = float(seat["value_end"]) - float(seat["value_start"])
    return abs(change - (float(seat["luck"]) - float(seat["skill_loss"]) + float(seat["drift"])))


def test_a_finished_game_is_analysed_once_kept_and_equal_to_the_cli(
    client: FlaskClient, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    game_id, tokens = create_game(client, players=["Ann", "Bob"], rules={"dice_faces": 8})
    final = play_to_the_end(client, game_id, tokens)
    answer = analysed(client, f"/v1/games/{game_id}/analysis")
    analysis = ok(answer)
    assert answer.headers["ETag"] == f'"{final["version"]}"'
    assert analysis["strategy"] == "expert" and analysis["finished"] is True
    assert analysis["version"] == final["version"]
    for seat in analysis["seats"]:
        assert seat["value_end"] == (1.0 if seat["seat"] == final["winner"] else 0.0)
        assert add_up(seat) <= 1e-9
    assert "server_seed" not in answer.get_data(as_text=True)

    # offline, from the export: the same JSON
    path = tmp_path / "game.ndjson"
    path.write_text(export_text(client, game_id))
    assert cli.main(["analyse", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == analysis

    # another worker (or a restart) reads it from the store at once: no job queued again
    other = create_app(settings)
    try:
        again = other.test_client().get(f"/v1/games/{game_id}/analysis")
        assert again.status_code == 200 and again.get_json() == analysis
        assert other.extensions["cantstop"].analyst.jobs.counts() == {"done": 1}
    finally:
        other.extensions["cantstop"].close()


def test_a_game_in_progress_is_analysed_to_its_version_and_reveals_nothing_to_come(
    client: FlaskClient, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    game_id, tokens = create_game(client, players=["Ann", "Bob", "Cy"])
    for _ in range(12):  # a few turns: roll, the first move, roll again, then stop
        state = ok(client.get(f"/v1/games/{game_id}"))
        legal = state["legal_actions"]
        action = legal[0] if state["turn"]["number"] % 2 else legal[-1]
        token = tokens[state["turn"]["player"]]
        ok(client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(token)))
    state = ok(client.get(f"/v1/games/{game_id}"))
    now = ok(analysed(client, f"/v1/games/{game_id}/analysis"))
    assert now["version"] == state["version"] and now["finished"] is False
    assert now["values"][-1]["version"] == state["version"]
    assert all(add_up(seat) <= 1e-9 for seat in now["seats"])
    # the advice shows who is to act and the dice; the analysis says no more than the events
    assert now == analyse(history(client, game_id))
    # played on, the game's past analysis is the same: nothing in it depended on what came after
    for _ in range(6):
        state = ok(client.get(f"/v1/games/{game_id}"))
        token = tokens[state["turn"]["player"]]
        ok(
            client.post(
                f"/v1/games/{game_id}/actions",
                json=state["legal_actions"][0],
                headers=bearer(token),
            )
        )
    past = ok(analysed(client, f"/v1/games/{game_id}/analysis?version={now['version']}"))
    assert past == now
    # the CLI reads a version too
    path = tmp_path / "game.ndjson"
    path.write_text(export_text(client, game_id))
    assert cli.main(["analyse", "--version", str(now["version"]), str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == now


def test_a_solitaire_game_is_valued_in_turns_to_finish(client: FlaskClient) -> None:
    game_id, tokens = create_game(client, players=["Sol"], rules={"solitaire": "advanced"})
    play_to_the_end(client, game_id, tokens)
    analysis = ok(analysed(client, f"/v1/games/{game_id}/analysis"))
    assert analysis["kind"] == "turns"
    [seat] = analysis["seats"]
    assert seat["value_start"] < -1 and seat["value_end"] == 0
    assert add_up(seat) <= 1e-9


def test_unknown_games_and_versions_are_the_same_404s_as_the_advice(client: FlaskClient) -> None:
    game_id, _ = play_manual(client)
    for game, query in (
        (UNKNOWN, ""),
        (game_id, "?version=0"),
        (game_id, "?version=999"),
        (game_id, "?version=-3"),
    ):
        advice = refused(client.get(f"/v1/games/{game}/advice{query}"), 404, "not_found")
        analysis = refused(analysed(client, f"/v1/games/{game}/analysis{query}"), 404, "not_found")
        assert analysis["detail"] == advice["detail"]
    refused(analysed(client, f"/v1/games/{game_id}/analysis?version=x"), 422, "invalid_request")
    refused(client.get("/v1/games/not-a-game/analysis"), 404, "not_found")


def test_a_history_the_rules_refuse_is_corrupt_game_at_its_version(
    client: FlaskClient,
    app: Flask,
    database_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    game_id, _ = play_manual(client)
    path = tmp_path / "game.ndjson"

    def change_die(body: dict[str, Any]) -> None:
        body["dice"][0] = body["dice"][0] % 6 + 1

    rows = StoredRows(app, database_url)
    rows.edit(game_id, 6, change_die)  # the second turn's DiceRolled
    body = refused(analysed(client, f"/v1/games/{game_id}/analysis"), 409, "corrupt_game")
    assert body["version"] == 6
    # offline, the export does not verify: no analysis, and the exit status says so
    path.write_text(export_text(client, game_id))
    assert cli.main(["analyse", str(path)]) == 1
    assert "first bad version 6" in capsys.readouterr().err
    # a stored event that is gone is corrupt_game at the gap
    rows.delete(game_id, 8)
    cooled(app)  # the failed job may be asked for again
    body = refused(analysed(client, f"/v1/games/{game_id}/analysis"), 409, "corrupt_game")
    assert body["version"] == 8


def take_actions(client: FlaskClient, game_id: str, tokens: list[str], count: int) -> None:
    for _ in range(count):
        state = ok(client.get(f"/v1/games/{game_id}"))
        token = tokens[state["turn"]["player"]]
        ok(client.post(f"/v1/games/{game_id}/actions", json=choose(state), headers=bearer(token)))


def test_a_game_in_progress_costs_only_its_new_steps(client: FlaskClient, app: Flask) -> None:
    """The analysis of a game in progress goes on from where it stood: the next version
    replays only the moves since, a past version none, and every answer is the same as the
    analysis of the history from scratch."""
    worker = worker_of(app)
    game_id, tokens = create_game(client, players=["Ann", "Bob"])
    take_actions(client, game_id, tokens, 30)
    first = ok(analysed(client, f"/v1/games/{game_id}/analysis"))
    replayed = worker.stepped
    assert first == analyse(history(client, game_id))
    take_actions(client, game_id, tokens, 3)
    now = ok(analysed(client, f"/v1/games/{game_id}/analysis"))
    assert now["version"] > first["version"]
    assert worker.stepped - replayed <= now["version"] - first["version"]
    assert now == analyse(history(client, game_id))
    replayed = worker.stepped
    for version in range(1, now["version"], 7):  # the past: nothing replayed again
        past = ok(analysed(client, f"/v1/games/{game_id}/analysis?version={version}"))
        assert past == analyse(history(client, game_id), version)
    assert worker.stepped == replayed
