"""The webhooks tests' receivers, fixtures and helpers (tests/test_webhooks.py and
tests/test_webhooks_attacker.py: a test module imports no other)."""

from __future__ import annotations

import datetime as dt
import http.server
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.application.notify.delivery import Dispatcher
from service.application.notify.notices import Notice
from service.application.notify.webhooks import (
    Webhooks,
)
from service.config import Settings
from service.runtime import Runtime
from tests.support.http import bearer
from tests.support.polling import wait_until

Json = dict[str, Any]


PASSWORD = "correct horse battery"
TIMEOUT = 1.5  # CANTSTOP_WEBHOOK_TIMEOUT in these tests: one attempt's deadline
PRIVATE = {"CANTSTOP_WEBHOOK_ALLOW_PRIVATE": "true", "CANTSTOP_WEBHOOK_TIMEOUT": str(TIMEOUT)}
PUBLIC_ADDRESS = "93.184.215.14"  # a public address (never connected to in these tests)


# ------------------------------------------------------------------------------ receivers
@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """A real HTTP(S) server on 127.0.0.1 in threads; ``behave`` answers each POST (default
    200). Every request is recorded; ``release`` ends handlers that hang."""

    def __init__(
        self,
        behave: Callable[[http.server.BaseHTTPRequestHandler, Receiver], None] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.received: list[Received] = []
        self.release = threading.Event()
        self.behave = behave or answer(200)
        self.sent = 0  # bytes a handler managed to send (the gigabyte receiver)
        self.done = threading.Event()  # the gigabyte receiver's handler has stopped sending
        self.server_names: list[str | None] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                receiver.received.append(Received(self.path, dict(self.headers.items()), body))
                receiver.behave(self, receiver)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 128  # (socketserver's 5 drops connections under load)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:

            def sni(sock: Any, name: str | None, context: Any) -> None:
                self.server_names.append(name)

            tls.sni_callback = sni
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        port: int = self.server.server_address[1]
        return port

    def url(self, path: str = "/hook", host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def answer(status: int, headers: dict[str, str] | None = None) -> Callable[..., None]:
    def behave(handler: http.server.BaseHTTPRequestHandler, receiver: Receiver) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", "2")
        handler.end_headers()
        handler.wfile.write(b"ok")

    return behave


def hang(handler: http.server.BaseHTTPRequestHandler, receiver: Receiver) -> None:
    receiver.release.wait(30)


def drip(handler: http.server.BaseHTTPRequestHandler, receiver: Receiver) -> None:
    """A status line, then a header a byte every 0.1 s, for ever (until released)."""
    handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    for _ in range(300):
        if receiver.release.is_set():
            return
        try:
            handler.wfile.write(b"a")
            handler.wfile.flush()
        except OSError:
            return
        time.sleep(0.1)


def gigabyte(handler: http.server.BaseHTTPRequestHandler, receiver: Receiver) -> None:
    """200 with a body of 1 GiB, sent until the client stops reading."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(2**30))
    handler.end_headers()
    chunk = b"\0" * 65536
    try:
        for _ in range(2**30 // len(chunk)):
            try:
                handler.wfile.write(chunk)
            except OSError:
                return
            receiver.sent += len(chunk)
    finally:
        receiver.done.set()


def huge_headers(handler: http.server.BaseHTTPRequestHandler, receiver: Receiver) -> None:
    """A status line, then 40 headers of 60 kB each (2.4 MB before any body)."""
    try:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for n in range(40):
            handler.wfile.write(f"X-Filler-{n}: {'x' * 60000}\r\n".encode())
            receiver.sent += 60000
        handler.wfile.write(b"\r\n")
    except OSError:
        return


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    made: list[Receiver] = []

    def make(*args: Any, **kwargs: Any) -> Receiver:
        made.append(Receiver(*args, **kwargs))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


# -------------------------------------------------------------------------------- the app
@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """(Overrides conftest's: SQLite, private receivers allowed, a short deadline.)"""
    return Settings(database_url=f"sqlite:///{tmp_path / 'cantstop.sqlite'}", extra_env=PRIVATE)


def runtime_of(app: Flask) -> Runtime:
    rt: Runtime = app.extensions["cantstop"]
    return rt


def sign_up(client: FlaskClient, handle: str) -> str:
    response = client.post("/v1/accounts", json={"handle": handle, "password": PASSWORD})
    assert response.status_code == 201, response.get_json()
    token: str = response.get_json()["token"]
    return token


def add_webhook(client: FlaskClient, token: str, url: str, events: list[str] | None = None) -> Json:
    response = client.post(
        "/v1/account/webhooks",
        json={"url": url, "events": events or ["your_turn", "game_finished"]},
        headers=bearer(token),
    )
    assert response.status_code == 201, response.get_json()
    created: Json = response.get_json()
    return created


def notice(account: str, seq: int, kind: str = "your_turn", **fields: Any) -> Notice:
    at = dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return Notice(account, seq, kind, at, {"id": seq, "type": kind, "at": at, **fields})


def enqueue(webhooks: Webhooks, *notices: Notice) -> None:
    """The hook, as the notices view calls it: inside a write transaction of the store."""
    webhooks.tables.transaction(lambda sql: webhooks.on_notices(sql, list(notices)))


def deliveries(client: FlaskClient, token: str, webhook_id: str) -> list[Json]:
    response = client.get(f"/v1/account/webhooks/{webhook_id}/deliveries", headers=bearer(token))
    assert response.status_code == 200, response.get_json()
    found: list[Json] = response.get_json()["deliveries"]
    return found


class Clock:
    """When deliveries are due, moved by the test (signatures keep the real time)."""

    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


def run_until(dispatcher: Dispatcher, attempts: int, seconds: float = 10) -> None:
    """Step the dispatcher until it has finished ``attempts`` attempts in all."""

    def done() -> bool:
        dispatcher.step()
        return dispatcher.attempted >= attempts

    wait_until(done, seconds, f"{attempts} attempts")


def dispatched(webhooks: Webhooks, attempts: int = 1, seconds: float = 10, **options: Any) -> None:
    """A dispatcher of ``webhooks`` stepped until ``attempts`` attempts ended, then closed."""
    dispatcher = Dispatcher(webhooks, **options)
    try:
        run_until(dispatcher, attempts, seconds)
    finally:
        dispatcher.close()


def parse(at: str) -> dt.datetime:
    return dt.datetime.fromisoformat(at)


# ------------------------------------------------------------------------- registration


def store_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store of the backend a test is parametrized with: PostgreSQL's test server, or a
    SQLite file of the test's own."""
    if backend == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return f"sqlite:///{tmp_path / 'store.sqlite'}"
