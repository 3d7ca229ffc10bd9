"""The cap on an account's live personal tokens (service/persistence/accounts.py): held by a
conditional insert into a slot, whatever races, on every host; tokens made before the cap are
counted and kept."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
from flask import Flask

from service.config import Settings
from service.http.app import create_app
from tests.support.http import bearer
from tests.support.racing import race_cleanly

PASSWORD = "correct horse battery"
SIGNINS = "signin=100000/minute"  # the sign-in limit is not what these tests count


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, rate_limits=SIGNINS)


def host(settings: Settings, cap: int, *, create: bool = False) -> Flask:
    app = create_app(settings, create_tables=create)
    app.extensions["cantstop"].accounts.max_tokens = cap
    return app


@pytest.fixture
def hosts(settings: Settings) -> Iterator[list[Flask]]:
    made = [host(settings, 5, create=True), host(settings, 5)]
    yield made
    for app in made:
        app.extensions["cantstop"].close()


def sign_up(app: Flask, handle: str) -> str:
    reply = app.test_client().post("/v1/accounts", json={"handle": handle, "password": PASSWORD})
    assert reply.status_code == 201, reply.get_json()
    token: str = reply.get_json()["token"]
    return token


def sign_in(app: Flask, handle: str, password: str = PASSWORD) -> Any:
    body = {"handle": handle, "password": password, "scopes": ["play", "account"]}
    return app.test_client().post("/v1/tokens", json=body)


def listed(app: Flask, token: str) -> list[str]:
    reply = app.test_client().get("/v1/account/tokens", headers=bearer(token))
    assert reply.status_code == 200, reply.get_json()
    return [row["id"] for row in reply.get_json()["tokens"]]


def status(app: Flask, token: str) -> int:
    code: int = app.test_client().get("/v1/account", headers=bearer(token)).status_code
    return code


def test_a_sign_in_past_the_cap_revokes_the_oldest_token(hosts: list[Flask]) -> None:
    app = hosts[0]
    first = sign_up(app, "Capped")
    made = [sign_in(app, "capped").get_json() for _ in range(4)]
    assert len(listed(app, first)) == 5
    # The sixth: the oldest (the sign-up's) makes room, on either host.
    sixth = sign_in(hosts[1], "capped")
    assert sixth.status_code == 201, sixth.get_json()
    assert status(app, first) == 401 and status(hosts[1], sixth.get_json()["token"]) == 200
    now = listed(app, made[0]["token"])
    assert now == [token["id"] for token in made] + [sixth.get_json()["id"]]
    # A token revoked by its owner frees its slot: the next sign-in revokes nothing.
    gone = app.test_client().delete(
        f"/v1/account/tokens/{made[2]['id']}", headers=bearer(made[0]["token"])
    )
    assert gone.status_code == 204
    assert sign_in(app, "capped").status_code == 201
    assert all(status(app, token["token"]) == 200 for token in (made[0], made[1], made[3]))
    # A wrong password changes nothing.
    wrong = sign_in(app, "capped", "not the password")
    assert (wrong.status_code, wrong.get_json()["code"]) == (401, "unauthorized")
    assert status(app, made[0]["token"]) == 200 and len(listed(app, made[0]["token"])) == 5
    # No room found (with a cap of 0 here; at 100, only sign-ins racing by the dozens): 409,
    # and nothing is made or revoked.
    app.extensions["cantstop"].accounts.max_tokens = 0
    full = sign_in(app, "capped")
    assert (full.status_code, full.get_json()["code"]) == (409, "too_many_tokens")
    assert full.get_json()["limit"] == 0 and full.content_type == "application/problem+json"
    assert len(listed(app, made[0]["token"])) == 5
    app.extensions["cantstop"].accounts.max_tokens = 5
    # Another account's slots are its own.
    other = sign_up(hosts[1], "Other")
    assert sign_in(app, "other").status_code == 201
    assert len(listed(app, other)) == 2 and status(app, made[0]["token"]) == 200


def test_sign_ins_racing_on_two_hosts_keep_the_cap(hosts: list[Flask]) -> None:
    """Twelve sign-ins, six at each of two hosts on one store at once, for an account holding
    one token of five: every one is answered with a token, and the account ends with five
    live, the other eight revoked."""
    first = sign_up(hosts[0], "Racer")
    calls = [partial(sign_in, hosts[i % 2], "racer") for i in range(12)]
    replies = race_cleanly(calls, timeout=120)
    assert [reply.status_code for reply in replies] == [201] * 12
    tokens = [first, *(reply.get_json()["token"] for reply in replies)]
    alive = [token for token in tokens if status(hosts[1], token) == 200]
    assert len(alive) == 5 and len(listed(hosts[0], alive[0])) == 5
    assert sum(status(hosts[0], token) == 401 for token in tokens) == 8


def test_a_host_frozen_mid_sign_in_leaves_the_cap_held(hosts: list[Flask]) -> None:
    """Host A stops inside a sign-in at the cap, after revoking the oldest token for room and
    before taking its slot; host B's sign-in takes the slot meanwhile. Thawed, A makes room
    again (the next oldest) and answers: both have a token, and five stay live."""
    first = sign_up(hosts[0], "Frozen")
    made = [sign_in(hosts[0], "frozen").get_json()["token"] for _ in range(4)]
    credentials = hosts[0].extensions["cantstop"].accounts.credentials
    execute = credentials.execute
    frozen, thawed = threading.Event(), threading.Event()

    def stalled(sql: str, *args: Any, **kwargs: Any) -> Any:
        result = execute(sql, *args, **kwargs)
        if sql.startswith("UPDATE") and not frozen.is_set():  # the oldest revoked for room
            frozen.set()
            assert thawed.wait(30)
        return result

    credentials.execute = stalled
    answers: list[Any] = []
    request = threading.Thread(target=lambda: answers.append(sign_in(hosts[0], "frozen")))
    request.start()
    try:
        assert frozen.wait(30)
        assert status(hosts[1], first) == 401
        other = sign_in(hosts[1], "frozen")
        assert other.status_code == 201, other.get_json()
        assert status(hosts[1], made[0]) == 200 and len(listed(hosts[1], made[0])) == 5
    finally:
        thawed.set()
        request.join(timeout=30)
        credentials.execute = execute
    assert answers[0].status_code == 201, answers[0].get_json()
    assert status(hosts[1], made[0]) == 401  # the next oldest made room for A's
    mine = answers[0].get_json()["token"]
    assert status(hosts[1], mine) == 200 and len(listed(hosts[1], mine)) == 5


def older_token(app: Flask, account: str, created_at: str) -> str:
    """A live token written as a release before the cap wrote one: no slot."""
    token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    app.extensions["cantstop"].accounts.credentials.execute(
        "INSERT INTO cantstop_tokens (id, account, digest, scopes, description, created_at, "
        "revoked) VALUES (?, ?, ?, ?, ?, ?, 0)",
        (
            token_id,
            account,
            hashlib.sha256(secret.encode()).hexdigest(),
            json.dumps(["play", "account"]),
            "older",
            created_at,
        ),
    )
    return f"cst_{token_id}_{secret}"


def slots(app: Flask) -> dict[str, Any]:
    rows = app.extensions["cantstop"].accounts.credentials.execute(
        "SELECT id, slot FROM cantstop_tokens WHERE revoked = 0", fetch="all"
    )
    return {str(row["id"]): row["slot"] for row in rows}


def test_tokens_made_before_the_cap_are_counted_and_kept(settings: Settings) -> None:
    """A store whose tokens have no slots (the table as an older release made it): the next
    start gives each live token a slot, oldest first. An account past the cap keeps its newest
    past it until they are revoked; its sign-ins revoke the oldest, under it."""
    old = host(settings, 5, create=True)
    try:
        signed_up = sign_up(old, "Elder")
        sign_up(old, "Young")
        credentials = old.extensions["cantstop"].accounts.credentials
        credentials.execute("DROP INDEX cantstop_tokens_slot")
        credentials.execute("DROP INDEX cantstop_tokens_unslotted")
        credentials.execute("ALTER TABLE cantstop_tokens DROP COLUMN slot")
        # Six more of Elder's, older than its sign-up's, made a day apart.
        elder = [older_token(old, "elder", f"2026-11-0{day}T12:00:00Z") for day in range(1, 7)]
    finally:
        old.extensions["cantstop"].close()
    new = host(settings, 5, create=True)
    try:
        given = slots(new)
        assert sorted(given.values()) == [0, 0, 1, 2, 3, 4, 5, 6]  # Young's, and Elder's seven
        assert [given[token[4:20]] for token in [*elder, signed_up]] == [0, 1, 2, 3, 4, 5, 6]
        assert all(status(new, token) == 200 for token in [*elder, signed_up])
        # A sign-in revokes the oldest token under the cap; those past it stay until revoked.
        newer = sign_in(new, "elder").get_json()["token"]
        assert [status(new, token) for token in [*elder, signed_up, newer]] == [401] + [200] * 7
        assert slots(new)[newer[4:20]] == 0
        gone = new.test_client().delete(
            f"/v1/account/tokens/{signed_up[4:20]}", headers=bearer(newer)
        )
        assert gone.status_code == 204  # slot 6 is free, and past the cap: no room under it
        sign_in(new, "elder")
        assert [status(new, token) for token in elder] == [401, 401] + [200] * 4
        assert len(listed(new, newer)) == 6
        assert sign_in(new, "young").status_code == 201
        settled = slots(new)
    finally:
        new.extensions["cantstop"].close()
    again = host(settings, 5, create=True)  # a second start: the slots given stay as they are
    try:
        assert slots(again) == settled
    finally:
        again.extensions["cantstop"].close()


def test_revoked_tokens_are_forgotten_thirty_days_on(settings: Settings) -> None:
    """Tokens revoked by their owner, by a sign-in past the cap and by closing the account are
    kept 30 days (told "revoked"), then forgotten (told "unknown"); live tokens stay, and the
    tokens revoked before the time was kept go once they were made 30 days ago."""
    app = host(settings, 2, create=True)
    try:
        rt = app.extensions["cantstop"]
        credentials = rt.accounts.credentials
        client = app.test_client()
        owner = sign_up(app, "Keeper")
        spare = sign_in(app, "keeper").get_json()["token"]
        assert (
            client.delete(f"/v1/account/tokens/{spare[4:20]}", headers=bearer(owner)).status_code
            == 204
        )
        second = sign_in(app, "keeper").get_json()["token"]
        third = sign_in(app, "keeper").get_json()["token"]  # past the cap: the sign-up's goes
        closing = sign_up(app, "Closer")
        assert client.delete("/v1/account", headers=bearer(closing)).status_code == 204
        older = older_token(app, "keeper", "2026-10-01T12:00:00.000000Z")
        credentials.execute("UPDATE cantstop_tokens SET revoked = 1 WHERE id = ?", (older[4:20],))
        recent = older_token(app, "keeper", "2026-12-01T12:00:00.000000Z")
        credentials.execute("UPDATE cantstop_tokens SET revoked = 1 WHERE id = ?", (recent[4:20],))

        def detail(token: str) -> str:
            reply = client.get("/v1/account", headers=bearer(token))
            assert reply.status_code == 401
            said: str = reply.get_json()["detail"]
            return said

        now = datetime.now(UTC).timestamp()
        assert rt.accounts.prune(now) == 1  # the one revoked (as kept) made two months ago
        assert detail(older) == "unknown token"
        assert {detail(t) for t in (spare, owner, closing, recent)} == {"this token was revoked"}
        assert rt.accounts.prune(now + 31 * 86_400) == 4
        assert {detail(t) for t in (spare, owner, closing, recent)} == {"unknown token"}
        assert status(app, second) == status(app, third) == 200
        assert len(listed(app, third)) == 2
        # The scheduler's chore, at most once an hour a process: nothing left to forget now.
        assert rt.accounts.prune_now_and_then in rt.scheduler().chores
        credentials.execute("UPDATE cantstop_tokens SET revoked = 1, revoked_at = 0")
        assert rt.accounts.prune_now_and_then() == 2
        assert rt.accounts.prune_now_and_then() == 0
    finally:
        app.extensions["cantstop"].close()
