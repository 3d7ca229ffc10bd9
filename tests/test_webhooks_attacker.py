"""Webhooks against an attacker: one account's receivers that never answer cannot starve the
others' deliveries (a fair claim, at most two in flight per webhook, a capped queue, a failing
webhook paused); slow name servers cannot take the lookups that deliveries need (a bounded pool
of creation's own, the cap judged before any lookup); and the delivery log tells no more about
refused hosts than creation does. Real stores (SQLite and PostgreSQL), real receivers, real
threads; a stand-in resolver only where a name must resolve to a chosen address or hang (this
machine has no DNS server of ours), as tests/test_webhooks.py does."""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.application.notify.delivery import BUSY_RETRY, SCHEDULE, Dispatcher
from service.application.notify.webhooks import (
    FAILING_AFTER,
    MAX_IN_FLIGHT,
    MAX_PENDING,
    RESOLVE_TIMEOUT,
    WebhookConfig,
    Webhooks,
    micros,
)
from service.config import Settings
from service.persistence.webhooks import QUEUE_FULL, WebhookTables
from service.runtime import Runtime
from tests.support import webhooks as support
from tests.support.http import bearer
from tests.support.polling import wait_until
from tests.support.racing import race
from tests.support.webhooks import (
    PRIVATE,
    PUBLIC_ADDRESS,
    TIMEOUT,
    Clock,
    Receiver,
    add_webhook,
    answer,
    deliveries,
    dispatched,
    enqueue,
    notice,
    run_until,
    runtime_of,
    sign_up,
    store_url,
)

# The module's fixtures, from tests/support/webhooks.py (bound by name, as pytest finds them):
receivers = support.receivers  # real local HTTP(S) receivers
settings = support.settings  # SQLite, private receivers allowed, a short deadline

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
LEASE = 60_000_000  # µs


def now_us() -> int:
    return int(Clock()().timestamp() * 1e6)


def leased(tables: WebhookTables, webhook_id: str, at_us: int) -> int:
    """The webhook's deliveries in flight: claimed, their lease not over."""
    row = tables.execute(
        "SELECT count(*) AS n FROM cantstop_webhook_deliveries WHERE webhook_id = ? "
        "AND status = 'pending' AND claim IS NOT NULL AND next_at > ?",
        (webhook_id, at_us),
        fetch="one",
    )
    return int(row["n"])


def statuses(tables: WebhookTables, webhook_id: str) -> dict[int, str]:
    rows = tables.execute(
        "SELECT seq, status FROM cantstop_webhook_deliveries WHERE webhook_id = ?",
        (webhook_id,),
        fetch="all",
    )
    return {int(row["seq"]): str(row["status"]) for row in rows}


# --------------------------------------------------------- 1. one account starves no other
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_claim_takes_every_webhook_s_first_before_one_webhook_s_backlog(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """20 deliveries of A's webhook queued before 1 of B's: a claim of 4 takes B's and at most
    2 of A's (before: A's 4 oldest); A's 2 in flight, no claim takes a third until one ends."""
    url = store_url(backend, request, tmp_path)
    with Runtime(Settings(database_url=url, extra_env=PRIVATE), create_tables=True) as rt:
        tables = rt.webhooks.tables
        a = rt.webhooks.create("ann", "http://127.0.0.1:9/a", ["your_turn"]).webhook.id
        b = rt.webhooks.create("bob", "http://127.0.0.1:9/b", ["your_turn"]).webhook.id
        enqueue(rt.webhooks, *(notice("ann", n) for n in range(1, 21)))
        enqueue(rt.webhooks, notice("bob", 1))
        now = now_us()
        claimed = [c.webhook_id for c in tables.claim(now, now + LEASE, "x", 4)]
        assert b in claimed
        assert claimed.count(a) <= MAX_IN_FLIGHT == 2
        # A holds its 2 leases: nothing more of A's, however many threads are free.
        assert tables.claim(now, now + LEASE, "y", 10) == []
        assert leased(tables, a, now) == 2
        # The leases over (a claimer that died): 2 of A's are due again, not more (and B's).
        later = now + LEASE + 1
        again = [c.webhook_id for c in tables.claim(later, later + LEASE, "z", 10)]
        assert sorted(again) == sorted([a, a, b])


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_in_flight_per_webhook_however_many_claimers_race(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Eight claimers at once (on PostgreSQL, eight connections), each asking for 10: A's
    webhook ends with exactly 2 deliveries leased, round after round."""
    url = store_url(backend, request, tmp_path)
    with Runtime(Settings(database_url=url, extra_env=PRIVATE), create_tables=True) as rt:
        tables = rt.webhooks.tables
        a = rt.webhooks.create("ann", "http://127.0.0.1:9/a", ["your_turn"]).webhook.id
        enqueue(rt.webhooks, *(notice("ann", n) for n in range(1, 101)))
        at = now_us()

        def claimer(at: int, token: str) -> Callable[[], Any]:
            return lambda: tables.claim(at, at + LEASE, token, 10)

        for round_ in range(5):
            at += LEASE + 1  # the last round's leases are over
            results = race([claimer(at, f"r{round_}c{n}") for n in range(8)])
            assert not [r for r in results if isinstance(r, Exception)], results
            assert sum(len(r) for r in results) == 2, [len(r) for r in results]
            assert leased(tables, a, at) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_webhook_s_queue_is_capped_and_gives_up_its_oldest_even_when_two_queue_at_once(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """MAX_PENDING (1,000) wait at most: queueing more, by two transactions at once, gives up
    the oldest that are not in flight, each with one log entry saying why."""
    url = store_url(backend, request, tmp_path)
    with Runtime(Settings(database_url=url, extra_env=PRIVATE), create_tables=True) as rt:
        tables = rt.webhooks.tables
        a = rt.webhooks.create("ann", "http://127.0.0.1:9/a", ["your_turn"]).webhook.id
        enqueue(rt.webhooks, notice("ann", 1), notice("ann", 2))
        enqueue(rt.webhooks, *(notice("ann", n) for n in range(3, MAX_PENDING + 1)))
        assert set(statuses(tables, a).values()) == {"pending"}
        # The 2 oldest go in flight; then two transactions queue 5 each, at once.
        now = now_us()
        in_flight = tables.claim(now, now + 10 * LEASE, "x", 10)
        rows = tables.execute(
            "SELECT seq FROM cantstop_webhook_deliveries WHERE claim = 'x'", fetch="all"
        )
        assert len(in_flight) == 2 and sorted(int(r["seq"]) for r in rows) == [1, 2]
        first = [notice("ann", MAX_PENDING + n) for n in range(1, 6)]
        second = [notice("ann", MAX_PENDING + n) for n in range(6, 11)]
        results = race(
            [lambda: enqueue(rt.webhooks, *first), lambda: enqueue(rt.webhooks, *second)]
        )
        assert results == [None, None]
        found = statuses(tables, a)
        waiting = [seq for seq, status in found.items() if status == "pending"]
        given_up = sorted(seq for seq, status in found.items() if status == "failed")
        # Beyond the newest 1,000, the oldest (1 to 10) were given up, but not the 2 in flight.
        assert given_up == list(range(3, 11))
        assert len(waiting) == MAX_PENDING + 2 and {1, 2} <= set(waiting)
        logged = {
            int(row["seq"]): [(x.status_code, x.error) for x in log]
            for row, log in tables.deliveries(a, 2 * MAX_PENDING)
        }
        assert all(logged[seq] == [(None, QUEUE_FULL)] for seq in given_up)
        assert logged[MAX_PENDING + 10] == []
        # Nothing given up is claimed again.
        later = now + 20 * LEASE
        taken = {c.id for c in tables.claim(later, later + LEASE, "y", 10)}
        rows = tables.execute(
            "SELECT id, seq FROM cantstop_webhook_deliveries WHERE webhook_id = ?",
            (a,),
            fetch="all",
        )
        assert not {str(r["id"]) for r in rows if int(r["seq"]) in given_up} & taken


def test_a_failing_webhook_backs_off_whole_up_to_the_longest_interval_until_a_delivery(
    client: FlaskClient,
    app: Flask,
    receivers: Callable[..., Receiver],
) -> None:
    """FAILING_AFTER (20) attempts in a row fail: from then on each failure pauses the whole
    webhook for the next retry interval, up to the longest (10 h): none of its deliveries is
    due before the pause ends (those queued meanwhile neither), while another account's go at
    once. Then one delivery ends the pause, and all it held are due at once."""
    failing = {"on": True}

    def behave(handler: Any, receiver: Receiver) -> None:
        answer(500 if failing["on"] else 200)(handler, receiver)

    bad = receivers(behave)
    good = receivers()
    ann, bob = sign_up(client, "Ann"), sign_up(client, "Bob")
    hook = add_webhook(client, ann, bad.url())
    add_webhook(client, bob, good.url())
    rt = runtime_of(app)
    tables = rt.webhooks.tables
    clock = Clock()
    rt.webhooks.clock = clock  # (queued at the dispatcher's time)
    enqueue(rt.webhooks, *(notice("ann", n) for n in range(1, FAILING_AFTER + 6)))
    dispatcher = Dispatcher(rt.webhooks, clock=clock)

    def waiting() -> list[tuple[str, int]]:
        rows = tables.execute(
            "SELECT status, next_at FROM cantstop_webhook_deliveries WHERE webhook_id = ?",
            (hook["id"],),
            fetch="all",
        )
        return [(str(r["status"]), int(r["next_at"])) for r in rows]

    def settle(attempts: int) -> None:
        run_until(dispatcher, attempts)
        wait_until(lambda: dispatcher.busy == 0, 10, "the attempts under way to end")

    try:
        settle(FAILING_AFTER)  # 20 first attempts, each answered 500
        assert len(bad.received) >= FAILING_AFTER
        pauses = []
        for round_ in range(2 * len(SCHEDULE)):
            (row,) = rt.webhooks.of_account("ann")
            assert row.failures >= FAILING_AFTER
            pause = SCHEDULE[min(row.failures - FAILING_AFTER, len(SCHEDULE) - 1)]
            assert row.paused_until_us == micros(clock.now + dt.timedelta(seconds=pause))
            pauses.append(pause)
            # Nothing of its is due before the pause ends, not even a notice queued now.
            assert all(
                status == "pending" and at >= row.paused_until_us for status, at in waiting()
            )
            if round_ == 0:
                enqueue(rt.webhooks, notice("ann", 100), notice("bob", 1))
                assert min(at for _, at in waiting()) == row.paused_until_us
                attempted = dispatcher.attempted
                assert dispatcher.step() == 1  # Bob's
                settle(attempted + 1)
                assert len(good.received) == 1
            clock.now = clock.now + dt.timedelta(seconds=pause) - dt.timedelta(seconds=0.5)
            assert dispatcher.step() == 0
            if pause == max(SCHEDULE):
                break
            # On to its first delivery due (its own retry may come later than the pause).
            first = min(at for _, at in waiting())
            clock.now = dt.datetime.fromtimestamp(first / 1e6, dt.UTC)
            attempted = dispatcher.attempted
            assert 1 <= dispatcher.step() <= MAX_IN_FLIGHT
            settle(attempted + 1)
        # By steps (each round's 1 or 2 failures), from the first intervals to the longest.
        assert pauses[0] <= SCHEDULE[1] and len(pauses) >= len(SCHEDULE) // 2
        assert pauses[-1] == max(SCHEDULE) and pauses == sorted(pauses)
        # The receiver mended: the first delivery after the pause ends it.
        failing["on"] = False
        clock.advance(1)
        attempted = dispatcher.attempted
        assert 1 <= dispatcher.step() <= MAX_IN_FLIGHT
        settle(attempted + 1)
        (row,) = rt.webhooks.of_account("ann")
        assert (row.failures, row.paused_until_us) == (0, 0)

        # Every one left is due at once (the clock stands still), and is delivered.
        def all_delivered() -> bool:
            dispatcher.step()
            return {status for status, _ in waiting()} == {"delivered"}

        wait_until(all_delivered, 30, "every delivery of the mended receiver")
    finally:
        dispatcher.close()
    listed = deliveries(client, ann, hook["id"])
    assert len(listed) == FAILING_AFTER + 6
    assert all(d["status"] == "delivered" for d in listed)


# ------------------------------------------------------------- 2. lookups cannot be taken
def test_an_account_at_its_cap_is_refused_before_any_lookup(
    client: FlaskClient, app: Flask
) -> None:
    rt = runtime_of(app)
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return [PUBLIC_ADDRESS]

    rt.webhooks.resolver = resolver
    token = sign_up(client, "Ann")
    for n in range(rt.webhooks.config.max_per_account):
        add_webhook(client, token, f"https://h{n}.example/hook")
    assert len(asked) == rt.webhooks.config.max_per_account
    refused = client.post(
        "/v1/account/webhooks",
        json={"url": "https://never.slow.example/", "events": ["your_turn"]},
        headers=bearer(token),
    )
    assert (refused.status_code, refused.get_json()["code"]) == (409, "too_many_webhooks")
    assert len(asked) == rt.webhooks.config.max_per_account  # no lookup for it


def test_slow_name_servers_fill_creation_s_lookups_never_a_delivery_s(
    client: FlaskClient,
    app: Flask,
    receivers: Callable[..., Receiver],
) -> None:
    """Eight creations whose names never answer take creation's lookups (4 at work, 4
    queued): a ninth is refused at once (503 with Retry-After, not a 422 after 5 s), and a
    delivery to a good name still resolves and is delivered, within its deadline."""
    receiver = receivers()
    rt = runtime_of(app)
    hang = threading.Event()
    started: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        if host.endswith(".slow.example"):
            started.append(host)
            hang.wait(60)  # a name server that never answers (until the test ends)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return ["127.0.0.1"]

    rt.webhooks.resolver = resolver
    ann = sign_up(client, "Ann")
    hook = add_webhook(client, ann, receiver.url(host="good.example"))
    mallory = sign_up(client, "Mallory")
    outcomes: list[str] = []

    def create(n: int) -> None:
        try:
            rt.webhooks.create("mallory", f"https://m{n}.slow.example/", ["your_turn"])
            outcomes.append("created")
        except Exception as exc:
            outcomes.append(getattr(exc, "code", repr(exc)))

    threads = [threading.Thread(target=create, args=(n,), daemon=True) for n in range(8)]
    try:
        for thread in threads:
            thread.start()
        lookups = rt.webhooks.lookups
        wait_until(
            lambda: lookups.running == 4 and lookups.queued == 4, 10, "4 lookups stuck, 4 queued"
        )
        began = time.monotonic()
        busy = client.post(
            "/v1/account/webhooks",
            json={"url": "https://m9.slow.example/", "events": ["your_turn"]},
            headers=bearer(mallory),
        )
        assert time.monotonic() - began < RESOLVE_TIMEOUT / 2  # at once, not after the timeout
        assert (busy.status_code, busy.get_json()["code"]) == (503, "webhook_lookups_busy")
        assert busy.headers["Retry-After"] == "5"
        assert len(started) == 4  # the ninth was never looked up
        # A delivery meanwhile: its lookup is the dispatcher's, and answers at once.
        enqueue(rt.webhooks, notice("ann", 1))
        dispatched(rt.webhooks)
        (logged,) = deliveries(client, ann, hook["id"])
        assert logged["status"] == "delivered", logged
        assert len(receiver.received) == 1
    finally:
        hang.set()
        for thread in threads:
            thread.join(timeout=RESOLVE_TIMEOUT + 5)
    assert len(outcomes) == 8 and set(outcomes) <= {
        "webhook_url_not_public",
        "webhook_lookups_busy",
    }


def test_a_delivery_whose_lookup_finds_no_room_is_not_counted_against_it(
    client: FlaskClient,
    app: Flask,
    receivers: Callable[..., Receiver],
) -> None:
    """A dispatcher's lookups all taken by names that hang: a delivery is not attempted, and
    neither its attempts nor its webhook's failures in a row count it; due again shortly."""
    receiver = receivers()
    rt = runtime_of(app)
    hang = threading.Event()
    rt.webhooks.resolver = lambda host, port: ["127.0.0.1"]
    ann = sign_up(client, "Ann")
    hook = add_webhook(client, ann, receiver.url(host="good.example"))
    one = Webhooks(
        rt.webhooks.tables, WebhookConfig(allow_private=True, timeout=TIMEOUT, concurrency=1)
    )
    one.resolver = rt.webhooks.resolver
    enqueue(one, notice("ann", 1))
    clock = Clock()
    dispatcher = Dispatcher(one, clock=clock)
    stuck: list[Any] = []

    def hanging(host: str, port: int) -> list[str]:
        hang.wait(60)  # a name server that never answers (until the test ends)
        return []

    try:
        lookups = dispatcher.lookups  # 2 threads, 1 queued (concurrency 1)
        stuck = [lookups.submit(hanging, "x", 1) for _ in range(3)]
        run_until(dispatcher, 1)
        assert receiver.received == []
        (logged,) = deliveries(client, ann, hook["id"])
        assert (logged["status"], logged["attempts"]) == ("pending", [])
        (row,) = one.of_account("ann")
        assert row.failures == 0
        hang.set()
        wait_until(lambda: all(f.done() for f in stuck), 10, "the stuck lookups' end")
        clock.advance(BUSY_RETRY - 0.5)
        assert dispatcher.step() == 0  # not before its time
        clock.advance(1)
        run_until(dispatcher, 2)
    finally:
        hang.set()
        dispatcher.close()
    (logged,) = deliveries(client, ann, hook["id"])
    assert logged["status"] == "delivered"
    assert [a["attempt"] for a in logged["attempts"]] == [1]  # the first attempt made


# ------------------------------------------------------------ 3. the log tells no more
def test_a_refused_host_is_logged_alike_whether_it_resolves_privately_or_not_at_all(
    client: FlaskClient, app: Flask
) -> None:
    """One name CNAMEd to an internal host (10.0.0.5), another that does not resolve at all:
    the delivery log records the same error for both, as creation answers both alike."""
    rt = runtime_of(app)
    token = sign_up(client, "Ann")
    public = Webhooks(rt.webhooks.tables, WebhookConfig(timeout=TIMEOUT))
    delivering = {"on": False}

    def resolver(host: str, port: int) -> list[str]:
        if not delivering["on"]:
            return [PUBLIC_ADDRESS]  # public when created
        if host == "internal.example":
            return ["10.0.0.5"]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    public.resolver = resolver
    internal = public.create("ann", "https://internal.example/", ["your_turn"]).webhook.id
    absent = public.create("ann", "https://absent.example/", ["your_turn"]).webhook.id
    delivering["on"] = True
    enqueue(public, notice("ann", 1))
    dispatched(public, attempts=2)
    errors = []
    for webhook_id in (internal, absent):
        (logged,) = deliveries(client, token, webhook_id)
        (attempt,) = logged["attempts"]
        assert attempt["status_code"] is None and attempt["address"] is None
        errors.append(attempt["error"])
    assert errors[0] == errors[1], errors
    assert "10.0.0.5" not in errors[0] and "resolve (" not in errors[0]


# ------------------------------------------------------------ a store made before these
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_webhooks_table_made_before_gains_its_columns(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A store whose cantstop_webhooks has no ``failures`` nor ``paused_until`` (made by the
    version before): creating the tables adds them, its webhooks kept, healthy and not paused."""
    url = store_url(backend, request, tmp_path)
    with Runtime(Settings(database_url=url, extra_env=PRIVATE), create_tables=True) as rt:
        tables = rt.webhooks.tables
        tables.execute("DROP TABLE cantstop_webhooks")
        tables.execute(
            "CREATE TABLE cantstop_webhooks (id TEXT PRIMARY KEY, account TEXT NOT NULL, "
            "slot INTEGER NOT NULL, url TEXT NOT NULL, events TEXT NOT NULL, "
            "description TEXT NOT NULL, secret TEXT NOT NULL, created_at TEXT NOT NULL, "
            "created_us BIGINT NOT NULL, UNIQUE (account, slot))"
        )
        tables.execute(
            "INSERT INTO cantstop_webhooks VALUES ('wh_0123456789abcdef', 'ann', 0, "
            "'http://127.0.0.1:9/', '[\"your_turn\"]', '', 'whsec_x', "
            "'2024-01-01T00:00:00.000000Z', 1)"
        )
        again = Webhooks.of(rt.store, rt.webhooks.config, create=True)
        Webhooks.of(rt.store, rt.webhooks.config, create=True)  # (twice: nothing to add)
        (row,) = again.of_account("ann")
        assert (row.id, row.failures, row.paused_until_us) == ("wh_0123456789abcdef", 0, 0)
        enqueue(again, notice("ann", 1))
        now = now_us()
        assert [c.webhook_id for c in again.tables.claim(now, now + LEASE, "x", 10)] == [row.id]


def test_creating_webhooks_is_rate_limited_per_account_by_default(database_url: str) -> None:
    """Each creation looks a host name up: 30 an hour per account by default (three times the
    cap of 10), whatever CANTSTOP_RATE_LIMITS leaves off; then 429 with Retry-After."""
    from service.config import DEFAULT_WEBHOOK, Settings
    from service.http.app import create_app

    assert DEFAULT_WEBHOOK == "webhook=30/hour"
    app = create_app(Settings(database_url=database_url, extra_env=PRIVATE), create_tables=True)
    try:
        client = app.test_client()
        signed = client.post("/v1/accounts", json={"handle": "hooker", "password": "p" * 12})
        token = signed.get_json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        body = {"url": "https://127.0.0.1:9/hook", "events": ["your_turn"]}
        statuses = []
        for _ in range(30):
            made = client.post("/v1/account/webhooks", json=body, headers=headers)
            statuses.append(made.status_code)
            if made.status_code == 201:  # kept under the cap of 10: delete it again
                hook = made.get_json()["id"]
                client.delete(f"/v1/account/webhooks/{hook}", headers=headers)
        assert statuses == [201] * 30, statuses
        refused = client.post("/v1/account/webhooks", json=body, headers=headers)
        assert refused.status_code == 429 and refused.get_json()["code"] == "rate_limited"
        assert int(refused.headers["Retry-After"]) > 0
    finally:
        app.extensions["cantstop"].close()
