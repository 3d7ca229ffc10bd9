"""The cap on an account's live personal tokens (service/persistence/accounts.py): held by a
conditional insert into a slot, whatever races, on every host; tokens made before the cap are
counted and kept."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterator
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
    return app.test_client().post("/v1/tokens", json={"handle": handle, "password": password})


def listed(app: Flask, token: str) -> list[str]:
    reply = app.test_client().get("/v1/account/tokens", headers=bearer(token))
    assert reply.status_code == 200, reply.get_json()
    return [row["id"] for row in reply.get_json()["tokens"]]


def test_an_account_holds_at_most_its_cap_of_live_tokens(hosts: list[Flask]) -> None:
    app = hosts[0]
    first = sign_up(app, "Capped")
    made = [sign_in(app, "capped") for _ in range(4)]
    assert [reply.status_code for reply in made] == [201] * 4
    full = sign_in(app, "capped")
    assert (full.status_code, full.get_json()["code"]) == (409, "too_many_tokens")
    assert full.get_json()["limit"] == 5 and full.content_type == "application/problem+json"
    # The wrong password is told nothing about the cap.
    wrong = sign_in(app, "capped", "not the password")
    assert (wrong.status_code, wrong.get_json()["code"]) == (401, "unauthorized")
    assert len(listed(app, first)) == 5
    # Revoking one frees its slot, on the other host too; the tokens issued still work.
    gone = made[1].get_json()["id"]
    revoked = app.test_client().delete(f"/v1/account/tokens/{gone}", headers=bearer(first))
    assert revoked.status_code == 204
    again = sign_in(hosts[1], "capped")
    assert again.status_code == 201, again.get_json()
    assert sign_in(hosts[1], "capped").status_code == 409
    for token in [first, again.get_json()["token"], made[0].get_json()["token"]]:
        assert app.test_client().get("/v1/account", headers=bearer(token)).status_code == 200
    # Another account's slots are its own.
    other = sign_up(hosts[1], "Other")
    assert sign_in(app, "other").status_code == 201
    assert len(listed(app, other)) == 2


def test_sign_ins_racing_on_two_hosts_make_only_the_tokens_the_cap_allows(
    hosts: list[Flask],
) -> None:
    """Twelve sign-ins, six at each of two hosts on one store at once, for an account holding
    one token of five: exactly four are made, and the account holds five."""
    first = sign_up(hosts[0], "Racer")
    calls = [partial(sign_in, hosts[i % 2], "racer") for i in range(12)]
    statuses = sorted(reply.status_code for reply in race_cleanly(calls, timeout=120))
    assert statuses == [201] * 4 + [409] * 8, statuses
    assert len(listed(hosts[1], first)) == 5


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
    start gives each live token a slot, oldest first. An account past the cap keeps every
    token, and is given a new one only once a slot under the cap is free."""
    old = host(settings, 5, create=True)
    try:
        signed_up = sign_up(old, "Elder")
        sign_up(old, "Young")
        credentials = old.extensions["cantstop"].accounts.credentials
        credentials.execute("DROP INDEX cantstop_tokens_slot")
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
        for token in [*elder, signed_up]:
            assert new.test_client().get("/v1/account", headers=bearer(token)).status_code == 200
        assert sign_in(new, "elder").status_code == 409
        assert sign_in(new, "young").status_code == 201
        # Revoking a token past the cap frees no slot under it; one under it does.
        client = new.test_client()
        for token in (signed_up, elder[1]):
            gone = client.delete(f"/v1/account/tokens/{token[4:20]}", headers=bearer(elder[0]))
            assert gone.status_code == 204
            if token is signed_up:
                assert sign_in(new, "elder").status_code == 409
        assert sign_in(new, "elder").status_code == 201
        assert sign_in(new, "elder").status_code == 409
        settled = slots(new)
    finally:
        new.extensions["cantstop"].close()
    again = host(settings, 5, create=True)  # a second start: the slots given stay as they are
    try:
        assert slots(again) == settled
    finally:
        again.extensions["cantstop"].close()
