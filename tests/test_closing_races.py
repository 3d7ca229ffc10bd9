"""Closing an account (``DELETE /v1/account``) while other requests of it run: a webhook created
meanwhile never outlives the closure, and closes at once all succeed — on SQLite and PostgreSQL.
Each interleaving is forced (an event holds one request at a chosen point, a barrier holds two
at theirs), never left to a sleep."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.application.aggregates import Account
from service.application.notify.delivery import Dispatcher
from service.application.players.accounts import Principal
from service.persistence.accounts import Credentials
from service.persistence.webhooks import WebhookRow
from service.runtime import Runtime
from tests.support.http import bearer
from tests.support.racing import race_cleanly
from tests.support.webhooks import (
    PASSWORD,
    PUBLIC_ADDRESS,
    add_webhook,
    enqueue,
    notice,
    runtime_of,
    sign_up,
)

WAIT = 30.0  # seconds any held request or thread is waited for: a bound, not a pause
HOOK = {"url": "https://hooks.example/in", "events": ["your_turn"]}


def another(app: Flask, client: FlaskClient) -> FlaskClient:
    """A second client of the app, checked against openapi.yaml as ``client`` is, for a request
    made in another thread (a test client is not shared between threads)."""
    other = app.test_client()
    other.spec = client.spec  # type: ignore[attr-defined]
    return other


def closed(client: FlaskClient, handle: str) -> bool:
    reply = client.get(f"/v1/accounts/{handle}")
    assert reply.status_code == 200, reply.get_json()
    return bool(reply.get_json()["closed"])


def assert_erased(client: FlaskClient, rt: Runtime, handle: str, token: str) -> None:
    """The account's password hash is gone and no token of it is live or accepted."""
    assert client.get("/v1/account", headers=bearer(token)).status_code == 401
    credentials = rt.accounts.credentials
    assert credentials.password(handle) is None and credentials.tokens(handle) == []
    signing_in = {"handle": handle, "password": PASSWORD, "scopes": ["account"]}
    assert client.post("/v1/tokens", json=signing_in).status_code == 401


# ---------------------------------------------------------------- a webhook made meanwhile
class Hold:
    """Holds the creation in its thread at one point (``held`` is set once it is there) until
    the test has closed the account (``release``)."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.release = threading.Event()

    def here(self) -> None:
        self.held.set()
        assert self.release.wait(WAIT), "the test never released the held creation"


def hold_creation(rt: Runtime, point: str, monkeypatch: pytest.MonkeyPatch) -> Hold:
    """Hold ``POST /v1/account/webhooks`` in its host lookup (``lookup``: before its insert),
    just after its insert (``insert``), or just after its token is judged again once inserted
    (``confirm``)."""
    hold = Hold()
    webhooks = rt.webhooks
    add = webhooks.tables.add
    authenticate = rt.accounts.authenticate
    inserted = threading.Event()

    def resolver(host: str, port: int) -> list[str]:
        if point == "lookup":
            hold.here()
        return [PUBLIC_ADDRESS]

    def adding(row: WebhookRow, cap: int) -> bool:
        stored = add(row, cap)
        inserted.set()
        if point == "insert":
            hold.here()
        return stored

    def judging(token: str | None, scope: str | None = None) -> Principal:
        principal = authenticate(token, scope)
        if point == "confirm" and inserted.is_set() and not hold.held.is_set():
            hold.here()
        return principal

    monkeypatch.setattr(webhooks, "resolver", resolver)
    monkeypatch.setattr(webhooks.tables, "add", adding)
    monkeypatch.setattr(rt.accounts, "authenticate", judging)
    return hold


@pytest.mark.parametrize(
    ("point", "answered"),
    [
        # Closed before the insert: forget found nothing; the creation, judged again after its
        # insert, finds the token revoked, deletes its row and is refused as a request sent
        # after the close would be. (Before the fix: 201, and the row kept for ever.)
        ("lookup", 401),
        # Closed after the insert, before the second judgement: forget deleted the row; the
        # creation is refused all the same (before the fix: 201 for a deleted webhook).
        ("insert", 401),
        # Closed after the second judgement passed: the creation had been made while the
        # account was open (201); forget, which reads after the close, deletes it.
        ("confirm", 201),
    ],
)
def test_a_webhook_created_while_its_account_closes_is_not_kept(
    app: Flask,
    client: FlaskClient,
    monkeypatch: pytest.MonkeyPatch,
    point: str,
    answered: int,
) -> None:
    token = sign_up(client, "Ann")
    rt = runtime_of(app)
    hold = hold_creation(rt, point, monkeypatch)
    creator = another(app, client)
    replies: list[Any] = []

    def create() -> None:
        replies.append(creator.post("/v1/account/webhooks", json=HOOK, headers=bearer(token)))

    thread = threading.Thread(target=create)
    thread.start()
    try:
        assert hold.held.wait(WAIT), "the creation never reached its held point"
        assert client.delete("/v1/account", headers=bearer(token)).status_code == 204
        # Whatever the close found, it left no webhook behind it.
        assert rt.webhooks.of_account("ann") == []
    finally:
        hold.release.set()
        thread.join(WAIT)
    assert not thread.is_alive() and len(replies) == 1
    # Nothing of the account remains, and nothing can be listed or made by its token.
    assert rt.webhooks.of_account("ann") == [] and rt.webhooks.tables.count("ann") == 0
    reply = replies[0]
    assert reply.status_code == answered, reply.get_json()
    if answered == 401:
        assert reply.get_json()["code"] == "unauthorized"
    assert client.get("/v1/account/webhooks", headers=bearer(token)).status_code == 401
    assert closed(client, "ann")


# ------------------------------------------------------------------------ closes at once
class SavesHeld:
    """The accounts' store, except that the first ``parties`` saves of an account wait at a
    barrier: every close has read the account, open, at one version before any saves."""

    def __init__(self, store: Any, parties: int) -> None:
        self.store = store
        self.parties = parties
        self.barrier = threading.Barrier(parties, timeout=WAIT)
        self.saves = 0
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        if any(isinstance(obj, Account) for obj in objs):
            with self.lock:
                self.saves += 1
                hold = self.saves <= self.parties
            if hold:
                self.barrier.wait()
        return self.store.save(*objs, **kwargs)


def test_two_closes_at_once_both_close_the_account(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both find the account open and save its Closed event at the same version: the store
    takes one; the other reads the account again, finds it closed and goes on (before the
    fix: an IntegrityError, 500)."""
    token = sign_up(client, "Ann")
    rt = runtime_of(app)
    held = SavesHeld(rt.accounts.store, 2)
    monkeypatch.setattr(rt.accounts, "store", held)
    closers = [another(app, client) for _ in range(2)]

    def close(closer: FlaskClient) -> int:
        status: int = closer.delete("/v1/account", headers=bearer(token)).status_code
        return status

    assert race_cleanly([partial(close, closer) for closer in closers], timeout=WAIT) == [204, 204]
    assert held.saves == 2  # both saved (one taken); the loser, reading again, saved nothing
    assert closed(client, "ann")
    assert_erased(client, rt, "ann", token)


# ---------------------------------------------------------- a close overtaken by other events
class Overtaken:
    """The accounts' store, except that each of an account's next ``times`` saves is overtaken:
    an operator's event (an exclusion, then a reinstatement...) is saved first, at the version
    the save was to take."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.times = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        for obj in objs:
            if isinstance(obj, Account) and self.times > 0:
                self.times -= 1
                other: Any = self.store.repository.get(obj.id)  # a copy, as stored
                if other.excluded:
                    other.reinstate("an operator, at the same moment")
                else:
                    other.exclude("an operator, at the same moment")
                self.store.save(other)
        return self.store.save(*objs, **kwargs)


def test_a_close_overtaken_once_closes_and_twice_is_refused_whole(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another event taking the Closed event's version: the close reads the account again and
    closes it on top of that event. Twice in a row: 409 ``concurrent_action``, and nothing is
    closed or erased (the account's tokens and password go on working)."""
    rt = runtime_of(app)
    overtaken = Overtaken(rt.accounts.store)
    monkeypatch.setattr(rt.accounts, "store", overtaken)
    ann = sign_up(client, "Ann")
    overtaken.times = 1
    assert client.delete("/v1/account", headers=bearer(ann)).status_code == 204
    assert closed(client, "ann") and rt.accounts.account("ann").excluded
    assert_erased(client, rt, "ann", ann)

    bob = sign_up(client, "Bob")
    overtaken.times = 2
    refused = client.delete("/v1/account", headers=bearer(bob))
    assert (refused.status_code, refused.get_json()["code"]) == (409, "concurrent_action")
    assert overtaken.times == 0 and not closed(client, "bob")
    assert client.get("/v1/account", headers=bearer(bob)).status_code == 200
    signing_in = {"handle": "bob", "password": PASSWORD, "scopes": ["account"]}
    assert client.post("/v1/tokens", json=signing_in).status_code == 201
    # Tried again once nothing overtakes it, it closes.
    assert client.delete("/v1/account", headers=bearer(bob)).status_code == 204
    assert closed(client, "bob")
    assert_erased(client, rt, "bob", bob)


# ------------------------------------------------------------- a close cut short before forget
def test_webhooks_left_by_a_close_cut_short_are_swept(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that died between the close and ``forget`` (the route's last step) left the
    account's webhooks, their secrets stored and deliveries queued, and nobody could list or
    delete them (the account's tokens are revoked). The dispatcher's pruning deletes them, and
    only them: a person's or a bot account's webhooks, with a live credential, stay."""
    rt = runtime_of(app)
    monkeypatch.setattr(rt.webhooks, "resolver", lambda host, port: [PUBLIC_ADDRESS])
    ann, bob = sign_up(client, "Ann"), sign_up(client, "Bob")
    made = client.post("/v1/accounts", json={"handle": "Robo", "bot": True})
    assert made.status_code == 201, made.get_json()
    robo = made.get_json()["token"]
    for token in (ann, bob, robo):
        add_webhook(client, token, str(HOOK["url"]))
    enqueue(rt.webhooks, notice("ann", 1))
    assert rt.webhooks.tables.counts() == {"pending": 1}

    rt.closing.close(rt.accounts.authenticate(ann, "account"))  # and the process dies here
    assert closed(client, "ann") and len(rt.webhooks.of_account("ann")) == 1  # left behind

    dispatcher = Dispatcher(rt.webhooks)
    try:
        assert dispatcher.step() == 0  # its pruning came first: nothing of Ann's to claim
    finally:
        dispatcher.close()
    assert rt.webhooks.of_account("ann") == [] and rt.webhooks.tables.count("ann") == 0
    assert rt.webhooks.tables.counts() == {}
    assert [len(rt.webhooks.of_account(handle)) for handle in ("bob", "robo")] == [1, 1]
    # again: nothing more to delete
    assert rt.webhooks.tables.sweep_unreachable(Credentials.PASSWORDS, Credentials.TOKENS) == 0
