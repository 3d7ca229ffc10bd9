"""Webhooks (contract 1.2): registration and its refusals (SSRF), Standard Webhooks signatures
checked with the library's own verifier, retries with back-off, the delivery log, and receivers
that hang, answer slowly, redirect or answer gigabytes — against a real store and real local
HTTP(S) receivers, with no mocks. (Where a test needs a name that resolves to a chosen address,
it gives the service a stand-in resolver: this machine has no DNS server of ours.)"""

from __future__ import annotations

import datetime as dt
import http.server
import ssl
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from flask import Flask
from flask.testing import FlaskClient
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from service.application.notify.delivery import SCHEDULE, Dispatcher
from service.application.notify.webhooks import (
    EVENT_TYPES,
    MAX_IN_FLIGHT,
    TooManyWebhooks,
    WebhookConfig,
    Webhooks,
    is_public,
    system_resolver,
)
from service.config import Settings
from service.http.app import create_app
from service.persistence.webhooks import WebhookTables
from service.runtime import Runtime
from tests.support import webhooks as support
from tests.support.http import bearer
from tests.support.polling import poll, wait_until
from tests.support.webhooks import (
    PASSWORD,
    PRIVATE,
    PUBLIC_ADDRESS,
    TIMEOUT,
    Clock,
    Receiver,
    add_webhook,
    answer,
    deliveries,
    dispatched,
    drip,
    enqueue,
    gigabyte,
    hang,
    huge_headers,
    notice,
    parse,
    run_until,
    runtime_of,
    sign_up,
    store_url,
)

# The module's fixtures, from tests/support/webhooks.py (bound by name, as pytest finds them):
receivers = support.receivers  # real local HTTP(S) receivers
settings = support.settings  # SQLite, private receivers allowed, a short deadline

Json = dict[str, Any]


def test_create_list_read_delete_scopes_and_cap(client: FlaskClient, app: Flask) -> None:
    token = sign_up(client, "Ann")
    created = add_webhook(client, token, "http://127.0.0.1:9/hook", ["challenge", "your_turn"])
    assert created["secret"].startswith("whsec_")
    Webhook(created["secret"])  # the library reads it
    assert created["events"] == ["challenge", "your_turn"]
    listed = client.get("/v1/account/webhooks", headers=bearer(token)).get_json()["webhooks"]
    assert [hook["id"] for hook in listed] == [created["id"]]
    assert "secret" not in str(listed)  # served once, at creation
    one = client.get(f"/v1/account/webhooks/{created['id']}", headers=bearer(token))
    assert one.status_code == 200 and "secret" not in one.get_json()
    assert deliveries(client, token, created["id"]) == []
    # Scope `account`: a token with `play` only is 403; no token 401; others' webhooks 404.
    play = client.post(
        "/v1/tokens", json={"handle": "ann", "password": PASSWORD, "scopes": ["play"]}
    ).get_json()["token"]
    refused = client.get("/v1/account/webhooks", headers=bearer(play))
    assert (refused.status_code, refused.get_json()["code"]) == (403, "insufficient_scope")
    assert client.get("/v1/account/webhooks").status_code == 401
    bob = sign_up(client, "Bob")
    theirs = client.get(f"/v1/account/webhooks/{created['id']}/deliveries", headers=bearer(bob))
    assert theirs.status_code == 404
    assert (
        client.delete(f"/v1/account/webhooks/{created['id']}", headers=bearer(bob)).status_code
        == 404
    )
    # Bad bodies: 422 invalid_request.
    for body in (
        {"url": "http://127.0.0.1:9/", "events": []},
        {"url": "http://127.0.0.1:9/", "events": ["everything"]},
        {"url": "http://127.0.0.1:9/", "events": ["your_turn"], "extra": 1},
        {"url": "ftp://127.0.0.1/", "events": ["your_turn"]},
        {"url": "http://user:pw@127.0.0.1/", "events": ["your_turn"]},
        {"url": "http:///nohost", "events": ["your_turn"]},
        {"url": "http://127.0.0.1:99999/", "events": ["your_turn"]},
        {"url": "http://exa mple.com/", "events": ["your_turn"]},
    ):
        bad = client.post("/v1/account/webhooks", json=body, headers=bearer(token))
        assert (bad.status_code, bad.get_json()["code"]) == (422, "invalid_request"), body
    # A cap per account: the 11th is 409 too_many_webhooks.
    for _ in range(9):
        add_webhook(client, token, "http://127.0.0.1:9/more")
    full = client.post(
        "/v1/account/webhooks",
        json={"url": "http://127.0.0.1:9/", "events": ["your_turn"]},
        headers=bearer(token),
    )
    assert (full.status_code, full.get_json()["code"]) == (409, "too_many_webhooks")
    # Deleting one makes room; a deleted one is gone.
    gone = client.delete(f"/v1/account/webhooks/{created['id']}", headers=bearer(token))
    assert gone.status_code == 204
    assert (
        client.delete(f"/v1/account/webhooks/{created['id']}", headers=bearer(token)).status_code
        == 404
    )
    add_webhook(client, token, "http://127.0.0.1:9/again")


def test_closing_the_account_deletes_its_webhooks(client: FlaskClient, app: Flask) -> None:
    token = sign_up(client, "Ann")
    add_webhook(client, token, "http://127.0.0.1:9/hook")
    add_webhook(client, sign_up(client, "Bob"), "http://127.0.0.1:9/hook")
    assert client.delete("/v1/account", headers=bearer(token)).status_code == 204
    webhooks = runtime_of(app).webhooks
    assert webhooks.of_account("ann") == [] and len(webhooks.of_account("bob")) == 1


def test_the_cap_holds_when_requests_race(app: Flask) -> None:
    rt = runtime_of(app)
    errors: list[str] = []

    def create() -> None:
        try:
            rt.webhooks.create("racer", "http://127.0.0.1:9/", ["your_turn"])
        except Exception as exc:
            errors.append(getattr(exc, "code", repr(exc)))

    threads = [threading.Thread(target=create) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(rt.webhooks.of_account("racer")) == 10
    assert errors == ["too_many_webhooks"] * 6


@pytest.fixture
def public_client(client: FlaskClient, tmp_path: Path) -> Iterator[FlaskClient]:
    """A client of a server without CANTSTOP_WEBHOOK_ALLOW_PRIVATE (checked against
    openapi.yaml like ``client``)."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'public.sqlite'}")
    app = create_app(settings, create_tables=True)
    app.test_client_class = type(client)
    checked = app.test_client()
    checked.spec = client.spec  # type: ignore[attr-defined]
    yield checked
    runtime_of(app).close()


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hook",
        "https://127.1.2.3:8443/hook",
        "https://10.1.2.3/hook",
        "https://172.16.0.1/",
        "https://192.168.1.1/",
        "https://169.254.169.254/latest/meta-data/",
        "https://100.64.0.1/",
        "https://0.0.0.0/",
        "https://224.0.0.1/",
        "https://[::1]/hook",
        "https://[::ffff:127.0.0.1]/",
        "https://[fe80::1]/",
        "https://[fd00::1]/",
        "https://[64:ff9b::a00:1]/",
        "https://localhost/hook",
        "https://LocalHost/hook",
    ],
)
def test_a_non_public_address_is_refused(public_client: FlaskClient, url: str) -> None:
    token = sign_up(public_client, "Ann")
    refused = public_client.post(
        "/v1/account/webhooks", json={"url": url, "events": ["your_turn"]}, headers=bearer(token)
    )
    assert refused.status_code == 422
    assert refused.mimetype == "application/problem+json"
    assert refused.get_json()["code"] == "webhook_url_not_public"


def test_plain_http_and_names_that_resolve_badly_are_refused(public_client: FlaskClient) -> None:
    token = sign_up(public_client, "Ann")
    rt = runtime_of(public_client.application)
    table = {"hooks.example": [PUBLIC_ADDRESS], "mixed.example": [PUBLIC_ADDRESS, "10.0.0.7"]}
    rt.webhooks.resolver = lambda host, port: table[host]

    def create(url: str) -> Any:
        return public_client.post(
            "/v1/account/webhooks",
            json={"url": url, "events": ["your_turn"]},
            headers=bearer(token),
        )

    insecure = create(f"http://{PUBLIC_ADDRESS}/hook")
    assert (insecure.status_code, insecure.get_json()["code"]) == (422, "webhook_url_not_https")
    assert create("http://hooks.example/hook").get_json()["code"] == "webhook_url_not_https"
    # A name any of whose addresses is not public is refused whole.
    mixed = create("https://mixed.example/hook")
    assert (mixed.status_code, mixed.get_json()["code"]) == (422, "webhook_url_not_public")
    assert "10.0.0.7" not in mixed.get_json()["detail"]  # the address is not told
    # A name that resolves only to public addresses, and a public literal, are taken.
    assert create("https://hooks.example/hook").status_code == 201
    assert create(f"https://{PUBLIC_ADDRESS}:8443/hook?x=1").status_code == 201
    # The real resolver: a name that does not resolve.
    rt.webhooks.resolver = system_resolver
    nowhere = create("https://nowhere.invalid/hook")
    assert (nowhere.status_code, nowhere.get_json()["code"]) == (422, "webhook_url_not_public")


def test_the_flag_allows_http_and_private_addresses(client: FlaskClient) -> None:
    token = sign_up(client, "Ann")
    for url in ("http://127.0.0.1:8080/hook", "http://localhost:8080/", "https://10.0.0.1/"):
        add_webhook(client, token, url)


def test_what_counts_as_public() -> None:
    assert is_public(PUBLIC_ADDRESS) and is_public("2606:2800:220:1:248:1893:25c8:1946")
    for address in (
        "127.0.0.1",
        "10.0.0.1",
        "169.254.1.1",
        "::1",
        "fe80::1",
        "::ffff:10.0.0.1",
        "2002:7f00:1::1",
        "2001:db8::1",
        "198.18.0.1",
        "255.255.255.255",
        "::",
    ):
        assert not is_public(address), address


# ----------------------------------------------------------------------------- delivering
def test_a_delivery_is_signed_by_standard_webhooks(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    token = sign_up(client, "Ann")
    hook = add_webhook(client, token, receiver.url("/in?x=1"), ["your_turn"])
    rt = runtime_of(app)
    sent = notice("ann", 1, "your_turn", game_id="g", version=7, seat=0)
    enqueue(rt.webhooks, sent, notice("ann", 2, "challenge"), notice("bob", 1, "your_turn"))
    dispatched(rt.webhooks)
    assert len(receiver.received) == 1  # only the type it subscribed to, only its account
    got = receiver.received[0]
    assert got.path == "/in?x=1"
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["Host"] == f"127.0.0.1:{receiver.port}"
    verified = Webhook(hook["secret"]).verify(got.body, got.headers)
    assert verified == {"type": "your_turn", "timestamp": sent.at, "data": sent.data}
    with pytest.raises(WebhookVerificationError, match="signature"):
        Webhook(add_webhook(client, token, receiver.url())["secret"]).verify(got.body, got.headers)
    # The log: delivered at the first attempt, to the address resolved.
    (logged,) = deliveries(client, token, hook["id"])
    assert logged["id"] == got.headers["webhook-id"] and logged["status"] == "delivered"
    assert logged["event"] == {"id": 1, "type": "your_turn"}
    (attempt,) = logged["attempts"]
    assert attempt["status_code"] == 200 and attempt["error"] is None
    assert attempt["address"] == "127.0.0.1"
    # The same notice again (a view catching up twice cannot, but a hook might): no second row.
    enqueue(rt.webhooks, sent)
    assert len(deliveries(client, token, hook["id"])) == 1


def test_a_failing_receiver_is_retried_with_back_off_then_given_up(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(answer(500))
    token = sign_up(client, "Ann")
    hook = add_webhook(client, token, receiver.url())
    rt = runtime_of(app)
    enqueue(rt.webhooks, notice("ann", 1))
    clock = Clock()
    dispatcher = Dispatcher(rt.webhooks, clock=clock)
    try:
        for number in range(1, len(SCHEDULE) + 2):
            run_until(dispatcher, number)
            (logged,) = deliveries(client, token, hook["id"])
            attempt = logged["attempts"][-1]
            assert (attempt["attempt"], attempt["status_code"]) == (number, 500)
            assert attempt["error"] == "answered 500"
            if number <= len(SCHEDULE):
                assert logged["status"] == "pending"
                delay = (parse(logged["next_attempt_at"]) - parse(attempt["at"])).total_seconds()
                assert SCHEDULE[number - 1] <= delay <= SCHEDULE[number - 1] * 1.1 + 0.001
                # Not due before its time; due after.
                clock.advance(delay - 0.5)
                assert dispatcher.step() == 0
                clock.advance(0.5)
        assert logged["status"] == "failed" and logged["next_attempt_at"] is None
        assert len(logged["attempts"]) == 1 + len(SCHEDULE) == 9
        assert SCHEDULE[0] < 10  # the first retry within 10 seconds (contract)
    finally:
        dispatcher.close()
    # Every attempt was one message: the same webhook-id, each signed anew.
    assert len(receiver.received) == 9
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1
    clock.advance(10**6)
    assert dispatcher.tables.claim(10**18, 10**18, "x", 10) == []  # nothing left to do


def test_the_first_retry_comes_within_ten_seconds(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    """In real time: a receiver that fails once gets the delivery again within 10 s."""
    calls: list[float] = []

    def once_then_ok(handler: http.server.BaseHTTPRequestHandler, receiver: Receiver) -> None:
        calls.append(time.monotonic())
        answer(503 if len(calls) == 1 else 204)(handler, receiver)

    receiver = receivers(once_then_ok)
    token = sign_up(client, "Ann")
    hook = add_webhook(client, token, receiver.url())
    rt = runtime_of(app)
    enqueue(rt.webhooks, notice("ann", 1))
    stop = threading.Event()
    dispatcher = Dispatcher(rt.webhooks)
    thread = threading.Thread(target=dispatcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        logged = poll(
            lambda: [
                d for d in deliveries(client, token, hook["id"]) if d["status"] == "delivered"
            ],
            12,
        )[0]
    finally:
        stop.set()
        thread.join(timeout=10)
        dispatcher.close()
    assert [a["status_code"] for a in logged["attempts"]] == [503, 204]
    assert calls[1] - calls[0] < 10


@pytest.mark.parametrize("behave", [hang, drip], ids=["hangs", "drips"])
def test_a_receiver_that_hangs_or_drips_is_cut_at_the_deadline(
    client: FlaskClient,
    app: Flask,
    receivers: Callable[..., Receiver],
    behave: Callable[..., None],
) -> None:
    receiver = receivers(behave)
    token = sign_up(client, "Ann")
    hook = add_webhook(client, token, receiver.url())
    rt = runtime_of(app)
    enqueue(rt.webhooks, notice("ann", 1))
    dispatcher = Dispatcher(rt.webhooks)
    started = time.monotonic()
    try:
        run_until(dispatcher, 1, seconds=TIMEOUT + 5)
    finally:
        dispatcher.close()
    assert time.monotonic() - started < TIMEOUT + 1.5
    (attempt,) = deliveries(client, token, hook["id"])[0]["attempts"]
    assert attempt["error"] == f"no answer within {TIMEOUT:g} s"
    assert TIMEOUT * 1000 - 50 <= attempt["duration_ms"] <= TIMEOUT * 1000 + 1500  # as above


def test_a_gigabyte_answer_costs_64_kib(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(gigabyte)
    token = sign_up(client, "Ann")
    hook = add_webhook(client, token, receiver.url())
    rt = runtime_of(app)
    enqueue(rt.webhooks, notice("ann", 1))
    dispatcher = Dispatcher(rt.webhooks)
    tracemalloc.start()
    try:
        run_until(dispatcher, 1, seconds=TIMEOUT + 5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        dispatcher.close()
    (logged,) = deliveries(client, token, hook["id"])
    assert logged["status"] == "delivered"  # a 2xx: what follows changes nothing
    assert logged["attempts"][0]["duration_ms"] < TIMEOUT * 1000
    assert peak < 4 * 2**20, peak  # memory bounded (the whole process, receiver included)
    wait_until(receiver.done.is_set, 10, "the receiver to stop sending on the closed socket")
    assert receiver.sent < 64 * 2**20  # what the sockets' buffers took, not a gigabyte


def test_headers_without_end_are_cut_at_64_kib(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(huge_headers)
    token = sign_up(client, "Ann")
    hook = add_webhook(client, token, receiver.url())
    rt = runtime_of(app)
    enqueue(rt.webhooks, notice("ann", 1))
    dispatched(rt.webhooks, seconds=TIMEOUT + 5)
    (logged,) = deliveries(client, token, hook["id"])
    assert logged["status"] == "pending"
    assert logged["attempts"][0]["error"] == (
        "the answer's status line and headers are over 65536 bytes"
    )


def test_a_redirect_is_not_followed(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    elsewhere = receivers()
    receiver = receivers(answer(307, {"Location": elsewhere.url("/private")}))
    token = sign_up(client, "Ann")
    hook = add_webhook(client, token, receiver.url())
    rt = runtime_of(app)
    enqueue(rt.webhooks, notice("ann", 1))
    dispatched(rt.webhooks)
    (logged,) = deliveries(client, token, hook["id"])
    attempt = logged["attempts"][0]
    assert (attempt["status_code"], logged["status"]) == (307, "pending")
    assert attempt["error"] == "redirected (307): redirects are not followed"
    assert len(receiver.received) == 1 and elsewhere.received == []


def test_a_webhook_deleted_during_an_attempt_leaves_no_log_behind(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(hang)
    token = sign_up(client, "Ann")
    hook = add_webhook(client, token, receiver.url())
    rt = runtime_of(app)
    enqueue(rt.webhooks, notice("ann", 1))
    dispatcher = Dispatcher(rt.webhooks)
    try:
        assert dispatcher.step() == 1
        wait_until(lambda: len(receiver.received) == 1, 5, "the attempt to arrive")
        assert (
            client.delete(f"/v1/account/webhooks/{hook['id']}", headers=bearer(token)).status_code
            == 204
        )
        wait_until(lambda: dispatcher.attempted == 1, TIMEOUT + 5, "the attempt's end")
    finally:
        dispatcher.close()
    left = rt.webhooks.tables.execute(
        "SELECT count(*) AS n FROM cantstop_webhook_attempts", fetch="one"
    )
    assert left["n"] == 0


def test_one_lookup_per_attempt_and_the_connection_goes_to_its_address(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    """The name is resolved once per attempt and the connection made to that address (the
    Host header keeps the name); a name that resolves to a private address by delivery time
    (DNS rebinding) is refused without connecting, where private addresses are not allowed."""
    receiver = receivers()
    token = sign_up(client, "Ann")
    rt = runtime_of(app)
    lookups: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"] if host == "hooks.example" else []

    rt.webhooks.resolver = resolver
    add_webhook(client, token, receiver.url(host="hooks.example"))
    enqueue(rt.webhooks, notice("ann", 1))
    lookups.clear()
    dispatched(rt.webhooks)
    assert lookups == ["hooks.example"]
    assert receiver.received[0].headers["Host"] == f"hooks.example:{receiver.port}"

    # Rebinding: public when created, loopback when delivered, private not allowed.
    public = Webhooks(rt.webhooks.tables, WebhookConfig(timeout=TIMEOUT))
    answers = iter([[PUBLIC_ADDRESS], ["127.0.0.1"]])
    public.resolver = lambda host, port: next(answers)
    created = public.create("ann", f"https://rebind.example:{receiver.port}/", ["challenge"])
    enqueue(public, notice("ann", 2, "challenge"))
    dispatched(public)
    (logged,) = deliveries(client, token, created.webhook.id)
    assert "not public" in logged["attempts"][0]["error"]
    assert logged["attempts"][0]["status_code"] is None
    assert len(receiver.received) == 1  # nothing more reached the receiver


def make_certificates(tmp_path: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for ``name`` it signed: (ca.pem, cert.pem, key.pem)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (tmp_path / f"ca-{name}.pem", tmp_path / f"{name}.pem", tmp_path / f"{name}.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


@pytest.mark.parametrize("certified", ["hooks.example", "other.example"])
def test_tls_names_the_host_and_checks_its_certificate_on_the_address_resolved(
    client: FlaskClient,
    app: Flask,
    receivers: Callable[..., Receiver],
    tmp_path: Path,
    certified: str,
) -> None:
    ca, cert, key = make_certificates(tmp_path, certified)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    receiver = receivers(tls=server_tls)
    token = sign_up(client, "Ann")
    rt = runtime_of(app)
    rt.webhooks.resolver = lambda host, port: ["127.0.0.1"]
    hook = add_webhook(client, token, receiver.url(host="hooks.example", scheme="https"))
    enqueue(rt.webhooks, notice("ann", 1))
    dispatched(rt.webhooks, ssl_context=ssl.create_default_context(cafile=ca))
    (logged,) = deliveries(client, token, hook["id"])
    attempt = logged["attempts"][0]
    assert attempt["address"] == "127.0.0.1"
    wait_until(lambda: receiver.server_names == ["hooks.example"], 2, "the handshake's SNI")
    if certified == "hooks.example":
        assert logged["status"] == "delivered", attempt
        assert Webhook(hook["secret"]).verify(
            receiver.received[0].body, receiver.received[0].headers
        )
    else:
        assert logged["status"] == "pending" and attempt["status_code"] is None
        assert attempt["error"].startswith("TLS: "), attempt
        assert "hostname" in attempt["error"].lower() or "match" in attempt["error"].lower()
        assert receiver.received == []


# --------------------------------------------------------------- races, leases, the action
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_dispatchers_on_two_hosts_deliver_each_once(
    backend: str,
    tmp_path: Path,
    receivers: Callable[..., Receiver],
    request: pytest.FixtureRequest,
) -> None:
    url = (
        request.getfixturevalue("postgres_url")
        if backend == "postgres"
        else f"sqlite:///{tmp_path / 'shared.sqlite'}"
    )
    runtimes: list[Runtime] = []
    ok = answer(200)

    both_seen = threading.Event()

    def both_at_work(handler: http.server.BaseHTTPRequestHandler, receiver: Receiver) -> None:
        # Each delivery is held (within its deadline) until both dispatchers hold one: a
        # dispatcher that claimed first cannot take them all, so both take part, every run.
        # (Until they were once seen both at work: one webhook has at most MAX_IN_FLIGHT
        # deliveries under way, which one dispatcher may hold, and each hold then costs
        # the whole bound.)
        held_until = time.monotonic() + TIMEOUT / 2
        while not both_seen.is_set() and time.monotonic() < held_until:
            if all(rt.dispatcher().busy for rt in runtimes):
                both_seen.set()
            else:
                time.sleep(0.005)  # (no more than the bound: the last deliveries find one idle)
        ok(handler, receiver)

    receiver = receivers(both_at_work)
    first = Runtime(Settings(database_url=url, extra_env=PRIVATE), create_tables=True)
    second = Runtime(Settings(database_url=url, extra_env=PRIVATE), create_tables=False)
    runtimes += [first, second]
    try:
        created = first.webhooks.create("ann", receiver.url(), list(EVENT_TYPES))
        count = 60
        enqueue(first.webhooks, *(notice("ann", n) for n in range(1, count + 1)))
        stop = threading.Event()
        threads = [
            threading.Thread(target=rt.dispatcher().run, args=(stop,), kwargs={"poll": 0.01})
            for rt in (first, second)
        ]
        for thread in threads:
            thread.start()
        try:
            wait_until(lambda: len(receiver.received) >= count, 30, f"{count} deliveries")
            wait_until(
                lambda: first.dispatcher().busy + second.dispatcher().busy == 0, 5, "the ends"
            )
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=10)
        ids = [r.headers["webhook-id"] for r in receiver.received]
        assert len(ids) == len(set(ids)) == count
        seqs = sorted(
            Webhook(created.secret).verify(r.body, r.headers)["data"]["id"]
            for r in receiver.received
        )
        assert seqs == list(range(1, count + 1))
        # Both took part (claims are race-free, not exclusive; the receiver saw to it).
        assert first.dispatcher().attempted > 0 and second.dispatcher().attempted > 0
        found = first.webhooks.tables.deliveries(created.webhook.id, 100)
        outcomes = [(row["status"], [a.error for a in log]) for row, log in found]
        assert outcomes == [("delivered", [None])] * count
    finally:
        second.close()
        first.close()


def test_a_dead_claimers_deliveries_return_when_its_lease_ends(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    token = sign_up(client, "Ann")
    hook = add_webhook(client, token, receiver.url())
    rt = runtime_of(app)
    enqueue(rt.webhooks, notice("ann", 1))
    clock = Clock()
    now = int(clock().timestamp() * 1e6)
    # A claimer takes it and dies before attempting it.
    assert len(rt.webhooks.tables.claim(now, now + 60_000_000, "dead", 10)) == 1
    dispatcher = Dispatcher(rt.webhooks, clock=clock)
    try:
        assert dispatcher.step() == 0  # leased
        clock.advance(61)
        run_until(dispatcher, 1)
    finally:
        dispatcher.close()
    (logged,) = deliveries(client, token, hook["id"])
    assert logged["status"] == "delivered"
    assert [a["attempt"] for a in logged["attempts"]] == [2]  # the dead claimer's counted


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_claim_passes_over_a_hook_deleted_after_its_deliveries_were_claimed(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    receivers: Callable[..., Receiver],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The claim is one statement; the hooks of what it claimed are read after it. A hook
    deleted in between took its deliveries with it: they are passed over, the others handed
    out. With nothing due the claim is that one statement, on PostgreSQL outside any
    transaction (the scheduler's loop asks at every pass)."""
    url = store_url(backend, request, tmp_path)
    with Runtime(Settings(database_url=url, extra_env=PRIVATE), create_tables=True) as rt:
        tables = rt.webhooks.tables
        kept = rt.webhooks.create("ann", receivers().url(), ["your_turn"]).webhook.id
        gone = rt.webhooks.create("bob", receivers().url(), ["your_turn"]).webhook.id
        opened: list[str] = []
        transaction = WebhookTables.transaction

        def counted(self: WebhookTables, work: Any) -> Any:
            opened.append("transaction")
            return transaction(self, work)

        monkeypatch.setattr(WebhookTables, "transaction", counted)
        now = int(Clock()().timestamp() * 1e6)
        assert tables.claim(now, now + 60_000_000, "idle", 10) == []
        assert opened == ([] if backend == "postgres" else ["transaction"])
        enqueue(rt.webhooks, notice("ann", 1), notice("bob", 1))
        now = int(Clock()().timestamp() * 1e6)  # both due
        execute = WebhookTables.execute

        def deleting_between(self: WebhookTables, sql: str, *args: Any, **kwargs: Any) -> Any:
            if sql.startswith("SELECT id, url, secret"):  # the claim's second statement
                assert tables.delete("bob", gone)
            return execute(self, sql, *args, **kwargs)

        monkeypatch.setattr(WebhookTables, "execute", deleting_between)
        claimed = tables.claim(now, now + 60_000_000, "x", 10)
        monkeypatch.undo()
        assert [c.webhook_id for c in claimed] == [kept]
        assert tables.deliveries(gone, 10) == []  # went with its hook


def test_actions_answer_while_a_receiver_hangs(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    """Delivery is the scheduler's: an action answers while every delivery thread waits on a
    receiver that hangs (before any of those attempts reaches its deadline). (A webhook has at
    most MAX_IN_FLIGHT deliveries under way: enough webhooks to take every thread.)"""
    receiver = receivers(hang)
    token = sign_up(client, "Ann")
    rt = runtime_of(app)
    concurrency = rt.webhooks.config.concurrency
    for _ in range(-(-concurrency // MAX_IN_FLIGHT)):
        add_webhook(client, token, receiver.url(), list(EVENT_TYPES))
    enqueue(rt.webhooks, *(notice("ann", n) for n in range(1, 3 * concurrency)))
    scheduler = rt.scheduler()
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(receiver.received) >= concurrency, 10, "the receiver to hang")
        game = client.post("/v1/games", json={"players": ["Ann", "Bob"]}).get_json()
        seat = game["game"]["turn"]["player"]
        reply = client.post(
            f"/v1/games/{game['game']['id']}/actions",
            json={"type": "roll"},
            headers=bearer(game["seats"][seat]["token"]),
        )
        assert reply.status_code == 200
        # Answered while every delivery still hangs: none has ended, not even at its deadline.
        assert rt.dispatcher().attempted == 0
        assert rt.dispatcher().busy <= concurrency  # the threads it may have, no more
    finally:
        stop.set()
        thread.join(timeout=10)


def test_a_game_s_notices_reach_the_webhook_as_the_stream_serves_them(
    client: FlaskClient, app: Flask, receivers: Callable[..., Receiver]
) -> None:
    """End to end: a game between two accounts starts; the scheduler's loop moves the notices
    view on, which queues the deliveries in its transaction, and its dispatcher delivers
    them, each the notice exactly as the account stream serves it."""
    receiver = receivers()
    ann, bob = sign_up(client, "Ann"), sign_up(client, "Bob")
    hook = add_webhook(client, ann, receiver.url(), ["game_started", "your_turn"])
    rt = runtime_of(app)
    scheduler = rt.scheduler()
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()
    try:
        lobby = client.post("/v1/games", json={"seats": 2}, headers=bearer(ann)).get_json()
        game_id = lobby["game"]["id"]
        joined = client.post(f"/v1/games/{game_id}/players", json={}, headers=bearer(bob))
        assert joined.status_code == 201, joined.get_json()
        wait_until(lambda: len(receiver.received) >= 1, 10, "a delivery")
        wait_until(
            lambda: all(d["status"] != "pending" for d in deliveries(client, ann, hook["id"])),
            10,
            "every delivery settled",
        )
    finally:
        stop.set()
        thread.join(timeout=10)
    payloads = [Webhook(hook["secret"]).verify(r.body, r.headers) for r in receiver.received]
    kinds = [p["type"] for p in payloads]
    # (Deliveries run in parallel: their order is not the notices'; data.id gives it.)
    assert "game_started" in kinds and set(kinds) <= {"game_started", "your_turn"}
    served = {n.seq: n.data for n in rt.notices.after("ann", 0, 100)}
    for sent in payloads:
        assert sent["data"] == served[sent["data"]["id"]]
        assert sent["timestamp"] == sent["data"]["at"]
        assert sent["data"]["game_id"] == game_id


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_the_queue_and_its_log_on_each_store(
    backend: str,
    tmp_path: Path,
    receivers: Callable[..., Receiver],
    request: pytest.FixtureRequest,
) -> None:
    """Every statement of the tables on SQLite and PostgreSQL: the cap, enqueueing, claiming,
    a failure and a delivery logged, the listing, pruning and deleting."""
    url = store_url(backend, request, tmp_path)
    statuses = iter([500, 200, 200])

    def behave(handler: http.server.BaseHTTPRequestHandler, receiver: Receiver) -> None:
        answer(next(statuses))(handler, receiver)

    receiver = receivers(behave)
    settings = Settings(
        database_url=url, extra_env=PRIVATE | {"CANTSTOP_WEBHOOK_MAX_PER_ACCOUNT": "2"}
    )
    with Runtime(settings, create_tables=True) as rt:
        created = rt.webhooks.create("ann", receiver.url(), ["your_turn"], "mine")
        rt.webhooks.create("ann", receiver.url(), ["challenge"])
        with pytest.raises(TooManyWebhooks, match="2 webhooks"):
            rt.webhooks.create("ann", receiver.url(), ["challenge"])
        enqueue(rt.webhooks, notice("ann", 1), notice("ann", 2), notice("ann", 3, "game_started"))
        clock = Clock()
        dispatcher = Dispatcher(rt.webhooks, clock=clock, schedule=(1,))
        try:
            run_until(dispatcher, 2)
            clock.advance(2)
            run_until(dispatcher, 3)
        finally:
            dispatcher.close()
        found = rt.webhooks.deliveries("ann", created.webhook.id, 10)
        logs = {
            int(row["seq"]): (row["status"], [(a.status_code, a.error) for a in log])
            for row, log in found
        }
        assert [int(row["seq"]) for row, _ in found] == [2, 1]  # newest first
        assert sorted(map(tuple, logs[1][1] + logs[2][1])) == sorted(
            [(500, "answered 500"), (200, None), (200, None)]
        )
        assert {logs[1][0], logs[2][0]} == {"delivered"}
        assert rt.webhooks.tables.prune(10**18) == 2  # settled, and older than the cut
        assert rt.webhooks.deliveries("ann", created.webhook.id, 10) == []
        rt.webhooks.delete("ann", created.webhook.id)
        assert [row.id for row in rt.webhooks.of_account("ann")] != [created.webhook.id]
        assert len(rt.webhooks.of_account("ann")) == 1
