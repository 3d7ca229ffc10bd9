"""Rate limits (CANTSTOP_RATE_LIMITS): the syntax, fixed windows in Redis or in memory, the 429."""

from __future__ import annotations

from typing import Any

import flask
import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from limits import RateLimitItemPerSecond

from service.config import ConfigError, Settings, parse_limits
from service.http.app import create_app
from service.http.limits import Limiter, RateLimited, Rule, client_address

LIMITS = "create=2/minute, action=3/10s"


@pytest.fixture
def settings(database_url: str) -> Settings:
    """The conftest ``app`` and ``client`` (checked against openapi.yaml), with limits on."""
    return Settings(database_url=database_url, rate_limits=LIMITS)


# ---------------------------------------------------------------------------------- syntax
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("off", {}),
        ("", {}),
        (None, {}),
        ("create=30/minute,action=120/minute", {"create": (30, 60), "action": (120, 60)}),
        ("action=10/5s", {"action": (10, 5)}),
        ("create = 5 / 2 hours", {"create": (5, 7200)}),
        ("ACTION=1/day", {"action": (1, 86400)}),
        ("create=7/sec", {"create": (7, 1)}),
    ],
)
def test_rate_limit_syntax(text: str | None, expected: dict[str, tuple[int, int]]) -> None:
    parsed = parse_limits(text)
    assert {scope: (limit.count, limit.period) for scope, limit in parsed.items()} == expected


@pytest.mark.parametrize(
    "text",
    [
        "create=30",
        "create=30/fortnight",
        "join=5/minute",
        "create=0/minute",
        "create=5/0minute",
        "create=1/minute,create=2/minute",
        "create=-1/minute",
    ],
)
def test_bad_rate_limits_are_refused_at_start(text: str) -> None:
    with pytest.raises(ConfigError, match="CANTSTOP_RATE_LIMITS"):
        parse_limits(text)
    with pytest.raises(ConfigError, match="CANTSTOP_RATE_LIMITS"):
        Settings.from_env({"CANTSTOP_RATE_LIMITS": text})


# ------------------------------------------------------------------------------------ HTTP
def create(client: FlaskClient) -> Any:
    return client.post("/v1/games", json={"players": ["Ann", "Bob"], "dice": "manual"})


def test_creation_over_the_limit_is_429_with_retry_after(client: FlaskClient) -> None:
    assert [create(client).status_code for _ in range(2)] == [201, 201]
    refused = create(client)
    assert refused.status_code == 429
    assert refused.mimetype == "application/problem+json"
    body = refused.get_json()
    assert body["code"] == "rate_limited" and body["status"] == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["X-RateLimit-Limit"] == "2"
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    # An import creates a game too: the same count (checked before the body is even read).
    imported = client.post("/v1/games/import", data=b"{}", content_type="application/json")
    assert imported.status_code == 429
    assert client.post("/v1/seed-commitments").status_code == 429


def test_limited_answers_say_how_many_requests_are_left(client: FlaskClient) -> None:
    first = create(client)
    assert first.status_code == 201
    assert (first.headers["X-RateLimit-Limit"], first.headers["X-RateLimit-Remaining"]) == (
        "2",
        "1",
    )
    assert "X-RateLimit-Limit" not in client.get("/v1/games").headers  # reads are not limited
    # Retry-After asks a refused client to wait: not on an answer that was given.
    assert "Retry-After" not in first.headers


def test_actions_are_counted_per_seat_token(client: FlaskClient) -> None:
    game = create(client).get_json()
    game_id, (ann, bob) = game["game"]["id"], [s["token"] for s in game["seats"]]

    def bogus_action(token: str) -> int:
        response = client.post(
            f"/v1/games/{game_id}/actions",
            json={"type": "bogus"},  # refused by the schema: the limiter runs before anything
            headers={"Authorization": f"Bearer {token}"},
        )
        status: int = response.status_code
        return status

    assert [bogus_action(ann) for _ in range(4)] == [422, 422, 422, 429]
    assert bogus_action(bob) == 422  # another seat, another count


@pytest.mark.redis
def test_limits_use_redis_when_configured(redis_url: str, tmp_path: Any) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'limits.sqlite'}",
        redis_url=redis_url,
        rate_limits="create=1/hour",
    )
    apps: list[Flask] = [create_app(settings, create_tables=True), create_app(settings)]
    try:
        first, second = (app.test_client() for app in apps)
        # Both "processes" share one count, kept in Redis: the second creation is refused.
        with redis.Redis.from_url(redis_url) as server:
            server.flushdb()
        assert create(first).status_code == 201
        assert create(second).status_code == 429
    finally:
        for app in apps:
            app.extensions["cantstop"].close()


def test_without_reachable_redis_each_process_counts_in_memory(tmp_path: Any) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'limits.sqlite'}",
        redis_url="redis://127.0.0.1:9/0",  # nothing listens there
        rate_limits="create=1/hour",
    )
    app = create_app(settings, create_tables=True)
    try:
        client = app.test_client()
        assert create(client).status_code == 201
        assert create(client).status_code == 429
    finally:
        app.extensions["cantstop"].close()


def test_limits_off_by_default_but_for_sign_in(app: Flask) -> None:
    assert "limiter" in app.extensions  # this module's settings turn them on
    plain = create_app(Settings(database_url=app.extensions["cantstop"].settings.database_url))
    try:
        response = create(plain.test_client())
        assert response.status_code == 201 and "X-RateLimit-Limit" not in response.headers
        # Guessing passwords is limited whatever the settings: 10 a minute by default.
        sign_in = plain.test_client().post("/v1/tokens", json={"handle": "x1", "password": "y"})
        assert sign_in.status_code == 401 and sign_in.headers["X-RateLimit-Limit"] == "10"
    finally:
        plain.extensions["cantstop"].close()


def test_whole_history_reads_are_limited_per_address_when_asked(database_url: str) -> None:
    """``audit``: what works through a whole history, which anyone may ask for (the audit, the
    export, the record sheets, a transcript's verification), counted together per address."""
    app = create_app(
        Settings(database_url=database_url, rate_limits="audit=4/minute"), create_tables=True
    )
    try:
        client = app.test_client()
        game_id = create(client).get_json()["game"]["id"]
        transcript = {"players": ["Ann", "Bob"], "actions": []}
        statuses = [
            client.get(f"/v1/games/{game_id}/audit").status_code,
            client.get(f"/v1/games/{game_id}/export").status_code,
            client.get(f"/v1/games/{game_id}/record-sheet?seat=0").status_code,
            client.post("/v1/transcripts/verify", json=transcript).status_code,
            client.get(f"/v1/games/{game_id}/audit").status_code,
        ]
        assert statuses == [200, 200, 200, 200, 429]
        refused = client.get(f"/v1/games/{game_id}/export")
        assert refused.status_code == 429 and refused.get_json()["code"] == "rate_limited"
        assert int(refused.headers["Retry-After"]) >= 1
        page = client.get(
            f"/games/{game_id}/record-sheet.txt?seat=0", headers={"Accept": "text/html"}
        )
        assert page.status_code == 429 and page.mimetype == "text/html"  # a page answers as a page
        # Other reads and the game itself are not counted; nor is creating or acting.
        assert client.get(f"/v1/games/{game_id}").status_code == 200
        assert client.get(f"/v1/games/{game_id}/events").status_code == 200
        assert create(client).status_code == 201
        # Another address has its own count.
        other = client.get(f"/v1/games/{game_id}/audit", environ_base={"REMOTE_ADDR": "10.0.0.9"})
        assert other.status_code == 200
    finally:
        app.extensions["cantstop"].close()


def test_counts_go_to_memory_while_redis_is_down_and_back_once_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limiter = Limiter("redis://127.0.0.1:9/0")  # nothing listens there
    rules = (Rule("create", RateLimitItemPerSecond(1, 3600), client_address, frozenset({"POST"})),)
    app = Flask(__name__)

    def check() -> str:
        with app.test_request_context("/", method="POST"):
            try:
                limiter.check(flask.request._get_current_object(), rules)  # type: ignore[attr-defined]
            except RateLimited:
                return "refused"
            return "counted"

    assert check() == "counted"  # Redis refused the connection: counted in memory
    assert limiter.down_since is not None
    assert limiter.recheck_at > limiter.down_since  # Redis is asked again later, not now
    limiter.recheck_at = float("inf")  # (however slow this machine is)
    assert check() == "refused"  # the memory's count
    hits: list[str] = []

    def hit(item: Any, *keys: str, cost: int = 1) -> bool:
        hits.append(keys[1])
        return True

    monkeypatch.setattr(limiter.storage, "check", lambda: True)  # Redis answers again
    monkeypatch.setattr(limiter.shared, "hit", hit)
    monkeypatch.setattr(limiter.shared, "get_window_stats", lambda item, *keys: (0.0, 1))
    assert check() == "refused"  # not asked before its time
    limiter.recheck_at = 0.0  # its time
    assert check() == "counted" and hits == ["a:unknown"]  # counted in Redis again
    assert limiter.down_since is None
