"""Secrets stay secret: no response or log line carries the server seed before the game is finished,
and none ever carries a token (beyond the response that issued it) or a token's hash.

Whole server-dice games are played through HTTP; every response body and header is kept, and every
log record of every logger is captured at DEBUG (there is no gunicorn here: the Flask app's own
loggers, eventsourcing's, the database drivers'…).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.application.aggregates import token_hash, vault_id
from tests.support.games import choose
from tests.support.http import bearer, ok


@dataclass
class Seen:
    """Everything served, each with the tokens it issued, and where the game had got to."""

    served: list[tuple[str, str, frozenset[str], bool]] = field(default_factory=list)
    finished: bool = False

    def keep(self, label: str, response: Any, issued: frozenset[str] = frozenset()) -> Any:
        headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
        text = f"{headers}\n\n{response.get_data(as_text=True)}"
        self.served.append((label, text, issued, self.finished))
        return response


def peek_everything(client: FlaskClient, seen: Seen, game_id: str) -> None:
    """Every read a client (or an auditor) could make of a game."""
    for path in ("", "/events?limit=1000", "/audit", "/export", "/board.svg", "?version=2"):
        seen.keep(f"GET {path}", client.get(f"/v1/games/{game_id}{path}"))
    seen.keep("GET list", client.get("/v1/games"))


def seed_of(app: Flask, game_id: str) -> str:
    vault = app.extensions["cantstop"].games.store.repository.get(vault_id(uuid.UUID(game_id)))
    seed = vault.server_seed
    assert isinstance(seed, str) and len(seed) == 64
    return seed


def assert_nothing_leaked(
    seen: Seen, logs: list[tuple[str, bool]], seed: str, tokens: list[str]
) -> None:
    hashes = [token_hash(t) for t in tokens]
    for label, text, issued, after_finish in seen.served:
        if not after_finish:
            assert seed not in text, f"the seed was served before the end: {label}"
        for token, digest in zip(tokens, hashes, strict=True):
            assert digest not in text, f"a token hash was served: {label}"
            if token not in issued:
                assert token not in text, f"a token was served again: {label}"
    for line, after_finish in logs:
        if not after_finish:
            assert seed not in line, f"the seed was logged before the end: {line[:200]}"
        for token, digest in zip(tokens, hashes, strict=True):
            assert token not in line and digest not in line, f"a secret was logged: {line[:200]}"


def log_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = []
    for record in caplog.records:
        lines.append(f"{record.name} {record.levelname} {record.getMessage()}")
        if record.exc_text:
            lines.append(record.exc_text)
    lines.append(caplog.text)
    return lines


def test_a_whole_server_dice_game_leaks_no_secret(
    client: FlaskClient, app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen = Seen()
    logs: list[tuple[str, bool]] = []
    # A lobby: the tokens are issued by the joins; the last join makes the opening roll.
    created = ok(seen.keep("create", client.post("/v1/games", json={"seats": 2})), 201)
    game_id = created["game"]["id"]
    assert created["seats"] == []
    tokens: list[str] = []
    for name in ("Ann", "Bob"):
        response = client.post(f"/v1/games/{game_id}/players", json={"name": name})
        token = ok(response, 201)["token"]
        seen.keep(f"join {name}", response, frozenset({token}))
        tokens.append(token)
    seed = seed_of(app, game_id)

    # Refusals are served and logged too.
    seen.keep("no token", client.post(f"/v1/games/{game_id}/actions", json={"type": "roll"}))
    seen.keep(
        "bad token",
        client.post(
            f"/v1/games/{game_id}/actions", json={"type": "roll"}, headers=bearer("x" * 32)
        ),
    )
    state = ok(client.get(f"/v1/games/{game_id}"))
    waiting = tokens[1 - state["turn"]["player"]]
    seen.keep(
        "not your turn",
        client.post(f"/v1/games/{game_id}/actions", json={"type": "roll"}, headers=bearer(waiting)),
    )

    for number in range(3000):
        if state["status"] == "finished":
            break
        token = tokens[state["turn"]["player"]]
        action = choose(state)
        response = client.post(f"/v1/games/{game_id}/actions", json=action, headers=bearer(token))
        state = ok(response)["game"]
        seen.finished = state["status"] == "finished"
        seen.keep(f"action {number}", response)
        if number % 25 == 0:
            peek_everything(client, seen, game_id)
        logs.extend((line, seen.finished) for line in log_lines(caplog))
        caplog.clear()
    assert state["status"] == "finished"
    peek_everything(client, seen, game_id)
    logs.extend((line, True) for line in log_lines(caplog))

    # The scan saw every kind of answer, before and after the end, logs included (the audit and
    # export routes log what they do). How many actions a game takes is up to the dice.
    labels = {label.split(" ")[0] for label, _, _, _ in seen.served}
    assert {"create", "join", "no", "bad", "not", "action", "GET"} <= labels
    assert {after for _, _, _, after in seen.served} == {False, True}
    assert any("audited game" in line for line, _ in logs)
    assert any(seed in text for _, text, _, after in seen.served if after)
    assert_nothing_leaked(seen, logs, seed, tokens)

    fairness = state["fairness"]
    assert fairness["server_seed"] == seed
    assert hashlib.sha256(seed.encode("ascii")).hexdigest() == fairness["seed_commitment"]
    assert ok(client.get(f"/v1/games/{game_id}/audit"))["valid"] is True


def test_tokens_issued_at_creation_are_never_served_again(
    client: FlaskClient, app: Flask, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen = Seen()
    response = client.post("/v1/games", json={"players": ["Ann", "Bob", "Cy"]})
    created = ok(response, 201)
    game_id = created["game"]["id"]
    tokens = [s["token"] for s in created["seats"]]
    seen.keep("create", response, frozenset(tokens))
    seed = seed_of(app, game_id)
    state = created["game"]
    for number in range(30):
        response = client.post(
            f"/v1/games/{game_id}/actions",
            json=choose(state),
            headers=bearer(tokens[state["turn"]["player"]]),
        )
        state = ok(seen.keep(f"action {number}", response))["game"]
    peek_everything(client, seen, game_id)
    resign = client.post(
        f"/v1/games/{game_id}/actions", json={"type": "resign"}, headers=bearer(tokens[2])
    )
    seen.keep("resign", resign)
    assert state["status"] == "in_progress"
    logs = [(line, False) for line in log_lines(caplog)]
    assert_nothing_leaked(seen, logs, seed, tokens)
    issuing = seen.served[0][1]
    assert all(issuing.count(token) == 1 for token in tokens)
