"""Only games played here are rated (contract 1.3, "What is rated"): an imported game, repeated
or forged, never reaches the ratings, an account's games, counts or bulk export, its notices or
webhooks; the server signs no receipt of it; importing is rate-limited by default."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.application.analysis.jobs import FINAL
from service.config import Settings
from service.http.app import create_app
from tests.support.http import bearer
from tests.support.rated import (
    NDJSON,
    export_text,
    finished_rated_game,
    renamed,
    sign_up,
)

Json = dict[str, Any]
HANDLES = ("ann", "bob", "cy")


@pytest.fixture
def settings(database_url: str) -> Settings:
    """The conftest ``app`` and ``client``, with webhooks to local addresses allowed."""
    return Settings(database_url=database_url, extra_env={"CANTSTOP_WEBHOOK_ALLOW_PRIVATE": "1"})


def figures(client: FlaskClient, app: Flask, tokens: dict[str, str]) -> Json:
    """Everything an account's games reach, for each account: once every view caught up."""
    rt = app.extensions["cantstop"]
    for view in rt.moved_views:
        rt.views.catch_up(view)
    seen: Json = {"enqueued": rt.webhooks.enqueued}
    for handle in HANDLES:
        profile = client.get(f"/v1/accounts/{handle}").get_json()
        seen[handle] = {
            "ratings": profile["ratings"],
            "counts": profile["counts"],
            "history": profile["rating_history"],
            "games": client.get(f"/v1/accounts/{handle}/games").get_json()["games"],
            # (unchecked: an empty NDJSON body is one the spec's validator cannot read)
            "export": app.test_client().get(f"/v1/accounts/{handle}/games/export").get_data(),
            "notices": rt.notices.latest(handle),
            "webhooks": [
                client.get(
                    f"/v1/account/webhooks/{hook['id']}/deliveries", headers=bearer(tokens[handle])
                ).get_json()["deliveries"]
                for hook in client.get(
                    "/v1/account/webhooks", headers=bearer(tokens[handle])
                ).get_json()["webhooks"]
            ],
        }
    return seen


def imported(client: FlaskClient, export: str) -> str:
    reply = client.post("/v1/games/import", data=export, content_type=NDJSON)
    assert reply.status_code == 201, reply.get_json()
    game: Json = reply.get_json()["game"]
    assert game["imported"] is True and game["rated"] is True
    return str(game["id"])


def test_repeated_and_forged_imports_of_a_rated_game_change_no_figure(
    client: FlaskClient, app: Flask
) -> None:
    tokens = {handle: sign_up(client, handle) for handle in HANDLES}
    for handle in HANDLES:
        hook = client.post(
            "/v1/account/webhooks",
            json={"url": "http://127.0.0.1:9/hook", "events": ["game_started", "game_finished"]},
            headers=bearer(tokens[handle]),
        )
        assert hook.status_code == 201, hook.get_json()
    game = finished_rated_game(client, tokens)
    before = figures(client, app, tokens)
    assert before["ann"]["ratings"][0]["games"] == 1  # the game played here is rated, once
    assert before["ann"]["counts"] == {"games": 1, "finished": 1, "rated": 1}
    assert before["ann"]["notices"] > 0 and before["enqueued"] > 0  # and it sent notices

    export = export_text(client, game["id"])
    copies = [imported(client, export) for _ in range(3)]
    forged = imported(client, renamed(export, "bob", "cy"))
    assert client.get(f"/v1/games/{forged}").get_json()["players"][1]["account"] == "cy"

    after = figures(client, app, tokens)
    assert after == before
    # Only the game played here is queued for its analysis (the fair-play figures'): a copy,
    # importable by anyone again and again, would be a job of the uncapped system client.
    jobs = app.extensions["cantstop"].analyst.jobs
    assert jobs.get(uuid.UUID(game["id"]), FINAL) is not None
    assert [jobs.get(uuid.UUID(copy), FINAL) for copy in [*copies, forged]] == [None] * 4
    assert after["cy"]["ratings"] == [] and after["cy"]["games"] == []
    assert after["cy"]["counts"] == {"games": 0, "finished": 0, "rated": 0}
    assert after["cy"]["export"] == b"" and after["cy"]["notices"] == 0
    # Rebuilt from the start of the log, the views leave the imports out just the same.
    rt = app.extensions["cantstop"]
    for view in (rt.ratings, rt.account_games):
        rt.views.rebuild(view)
    assert figures(client, app, tokens) == before

    # The server signs no receipt of a game it did not see played; of its own, it does.
    for game_id in [*copies, forged]:
        refused = client.get(f"/v1/games/{game_id}/receipt")
        assert refused.status_code == 409 and refused.mimetype == "application/problem+json"
        assert refused.get_json()["code"] == "imported_game"
    assert client.get(f"/v1/games/{game['id']}/receipt").status_code == 200


def test_two_imports_racing_change_nothing(app: Flask, client: FlaskClient) -> None:
    tokens = {handle: sign_up(client, handle) for handle in HANDLES}
    game = finished_rated_game(client, tokens)
    before = figures(client, app, tokens)
    forged = renamed(export_text(client, game["id"]), "bob", "cy")
    answers: list[int] = []
    start = threading.Barrier(2)

    def race() -> None:
        racer = app.test_client()
        start.wait()
        reply = racer.post("/v1/games/import", data=forged, content_type=NDJSON)
        answers.append(reply.status_code)

    threads = [threading.Thread(target=race) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert answers == [201, 201]  # two read-only copies, neither of them counted
    assert figures(client, app, tokens) == before
    listed = client.get("/v1/games?status=finished").get_json()["games"]
    assert sum(1 for g in listed if g.get("imported")) == 2


def test_imports_are_rate_limited_by_default_and_as_configured(database_url: str) -> None:
    assert Settings(database_url=database_url).limits["audit"].count == 120  # on by default
    app = create_app(
        Settings(database_url=database_url, rate_limits="audit=2/minute"), create_tables=True
    )
    try:
        client = app.test_client()
        game_id = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()["game"]
        export = export_text(client, game_id["id"])  # one request of the audit scope's two
        first = client.post("/v1/games/import", data=export, content_type=NDJSON)
        assert first.status_code == 201 and first.headers["X-RateLimit-Limit"] == "2"
        refused = client.post("/v1/games/import", data=export, content_type=NDJSON)
        assert refused.status_code == 429 and refused.mimetype == "application/problem+json"
        assert refused.get_json()["code"] == "rate_limited"
        assert int(refused.headers["Retry-After"]) >= 1
        listed = client.get("/v1/games").get_json()["games"]
        assert sum(1 for g in listed if g.get("imported")) == 1  # the refused one recorded nothing
    finally:
        app.extensions["cantstop"].close()


def test_the_default_import_limit_is_announced(client: FlaskClient) -> None:
    game_id = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()["game"]["id"]
    reply = client.post("/v1/games/import", data=export_text(client, game_id), content_type=NDJSON)
    assert reply.status_code == 201 and reply.headers["X-RateLimit-Limit"] == "120"
