"""``GET /v1/games/{id}/analysis`` and ``cantstop analyse``: the same JSON, kept once a game is
finished, to any version while it is in progress, and corrupt_game for a history the rules
refuse. Real stores (SQLite and PostgreSQL), the OpenAPI-checked client, nothing mocked."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain.analysis import analyse
from service import cli
from service.application import analyst as analyst_module
from service.config import Settings
from service.http.app import create_app
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
    answer = client.get(f"/v1/games/{game_id}/analysis")
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

    # another worker (or a restart) reads it from the store: nothing worked out again
    other = create_app(settings)
    try:
        again = other.test_client().get(f"/v1/games/{game_id}/analysis")
        assert again.get_json() == analysis
        assert other.extensions["cantstop"].analyst.computed == 0
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
    now = ok(client.get(f"/v1/games/{game_id}/analysis"))
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
    past = ok(client.get(f"/v1/games/{game_id}/analysis?version={now['version']}"))
    assert past == now
    # the CLI reads a version too
    path = tmp_path / "game.ndjson"
    path.write_text(export_text(client, game_id))
    assert cli.main(["analyse", "--version", str(now["version"]), str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == now


def test_a_solitaire_game_is_valued_in_turns_to_finish(client: FlaskClient) -> None:
    game_id, tokens = create_game(client, players=["Sol"], rules={"solitaire": "advanced"})
    play_to_the_end(client, game_id, tokens)
    analysis = ok(client.get(f"/v1/games/{game_id}/analysis"))
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
        analysis = refused(client.get(f"/v1/games/{game}/analysis{query}"), 404, "not_found")
        assert analysis["detail"] == advice["detail"]
    refused(client.get(f"/v1/games/{game_id}/analysis?version=x"), 422, "invalid_request")
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
    body = refused(client.get(f"/v1/games/{game_id}/analysis"), 409, "corrupt_game")
    assert body["version"] == 6
    # offline, the export does not verify: no analysis, and the exit status says so
    path.write_text(export_text(client, game_id))
    assert cli.main(["analyse", str(path)]) == 1
    assert "first bad version 6" in capsys.readouterr().err
    # a stored event that is gone is corrupt_game at the gap
    rows.delete(game_id, 8)
    body = refused(client.get(f"/v1/games/{game_id}/analysis"), 409, "corrupt_game")
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
    analyst = app.extensions["cantstop"].analyst
    game_id, tokens = create_game(client, players=["Ann", "Bob"])
    take_actions(client, game_id, tokens, 30)
    first = ok(client.get(f"/v1/games/{game_id}/analysis"))
    replayed = analyst.stepped
    assert first == analyse(history(client, game_id))
    take_actions(client, game_id, tokens, 3)
    now = ok(client.get(f"/v1/games/{game_id}/analysis"))
    assert now["version"] > first["version"]
    assert analyst.stepped - replayed <= now["version"] - first["version"]
    assert now == analyse(history(client, game_id))
    replayed = analyst.stepped
    for version in range(1, now["version"], 7):  # the past: nothing replayed again
        past = ok(client.get(f"/v1/games/{game_id}/analysis?version={version}"))
        assert past == analyse(history(client, game_id), version)
    assert analyst.stepped == replayed


class Gate:
    """Holds every computation of the analyst until opened: a computation as long as the test
    needs, with no sleeping for luck."""

    def __init__(self, analyst: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        work_out = analyst._work_out

        def held(game_id: Any, version: int) -> dict[str, Any]:
            self.entered.set()
            assert self.opened.wait(30), "the test never opened the gate"
            answer: dict[str, Any] = work_out(game_id, version)
            return answer

        monkeypatch.setattr(analyst, "_work_out", held)


def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.005)


def test_analyses_are_bounded_kept_ones_at_once_the_same_one_shared_others_busy(
    client: FlaskClient, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real concurrent requests, each in its own thread with its own client: while one analysis
    is being worked out, a kept one (in memory, or in the table) is answered at once; a request
    for the same one shares it; one for another game waits at most WAIT, then is 503
    analysis_busy with Retry-After; past WAITING waiters, at once."""
    analyst = app.extensions["cantstop"].analyst
    monkeypatch.setattr(analyst_module, "WAIT", 0.5)
    monkeypatch.setattr(analyst_module, "WAITING", 1)
    busy_id, busy_tokens = create_game(client, players=["Ann", "Bob"])
    take_actions(client, busy_id, busy_tokens, 8)
    other_id, other_tokens = create_game(client, players=["Ann", "Bob"])
    take_actions(client, other_id, other_tokens, 8)
    done_id, done_tokens = create_game(client, players=["Ann", "Bob"])
    play_to_the_end(client, done_id, done_tokens)
    kept = ok(client.get(f"/v1/games/{done_id}/analysis"))  # worked out, stored, in memory
    analyst._answers.clear()  # now only in the table
    gate = Gate(analyst, monkeypatch)

    answers: dict[str, Any] = {}

    def ask(name: str, path: str) -> threading.Thread:
        def run() -> None:
            mine = app.test_client()
            mine.spec = client.spec  # type: ignore[attr-defined]
            answers[name] = mine.get(path)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    leader = ask("leader", f"/v1/games/{busy_id}/analysis")
    assert gate.entered.wait(10)
    follower = ask("follower", f"/v1/games/{busy_id}/analysis")
    until(lambda: analyst._waiting == 1)
    # kept answers: at once, though a computation holds the only place
    started = time.monotonic()
    for name in ("stored", "stored-again"):  # from the table, then from memory
        ask(name, f"/v1/games/{done_id}/analysis").join(5)
        assert ok(answers[name]) == kept
    # another game's analysis: no place to wait in (WAITING is 1), at once
    ask("turned-away", f"/v1/games/{other_id}/analysis").join(5)
    assert time.monotonic() - started < 2.5
    body = refused(answers["turned-away"], 503, "analysis_busy")
    assert answers["turned-away"].headers["Retry-After"] == str(analyst_module.RETRY_AFTER)
    assert str(other_id) in body["detail"]
    # the follower waited WAIT for the held computation, then gave up: busy, not a hang
    follower.join(5)
    assert not follower.is_alive()
    refused(answers["follower"], 503, "analysis_busy")
    # a waiter for a place to compute: busy after WAIT too
    started = time.monotonic()
    ask("no-place", f"/v1/games/{other_id}/analysis").join(5)
    assert 0.5 <= time.monotonic() - started < 4.5
    refused(answers["no-place"], 503, "analysis_busy")
    assert analyst._waiting == 0 and analyst.computed == 1  # only the finished game's
    # opened: the leader's answer, kept; the follower's retry reads it, nothing worked out again
    monkeypatch.setattr(analyst_module, "WAIT", 5.0)
    sharing = ask("sharing", f"/v1/games/{busy_id}/analysis")
    until(lambda: analyst._waiting == 1)
    gate.opened.set()
    leader.join(30)
    sharing.join(30)
    assert ok(answers["leader"]) == ok(answers["sharing"]) == analyse(history(client, busy_id))
    assert analyst.computed == 2
    assert ok(client.get(f"/v1/games/{busy_id}/analysis")) == ok(answers["leader"])
    assert analyst.computed == 2 and analyst._flights == {}
