"""The event stream in process: framing, resuming, ending, gaps and duplicates, Redis and polling.

Two Flask apps on one store stand for two worker processes. Whole-server tests are in test_live.py.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from flask import Flask
from flask.testing import FlaskClient

from service.config import ConfigError, Settings
from service.http.app import create_app
from service.live import sinks as sinks_module
from service.live import streams as streams_module
from service.live.hub import Envelope, Feed, Hub, LiveConfig, Stream
from tests.support.games import UNKNOWN
from tests.support.sse import frame_fields

Json = dict[str, Any]
Frames = Iterator[bytes]


@pytest.fixture(autouse=True)
def fast_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANTSTOP_STREAM_KEEPALIVE", "0.2")
    monkeypatch.setenv("CANTSTOP_STREAM_POLL", "0.05")
    monkeypatch.setenv("CANTSTOP_STREAM_CHECK", "300")  # only Redis or polling carry events here


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Callable[..., Flask]]:
    apps: list[Flask] = []

    def make(**settings: Any) -> Flask:
        options: Json = {"database_url": f"sqlite:///{tmp_path / 'live.sqlite'}"} | settings
        app = create_app(Settings(**options), create_tables=True)
        apps.append(app)
        return app

    yield make
    for app in apps:
        hub_of(app).close()
        app.extensions["cantstop"].close()


def hub_of(app: Flask) -> Hub:
    found = app.extensions["cantstop"].hub
    assert isinstance(found, Hub)
    return found


def create(client: FlaskClient) -> tuple[str, list[str]]:
    response = client.post("/v1/games", json={"players": ["Ann", "Bob"]})
    assert response.status_code == 201
    body = response.get_json()
    return body["game"]["id"], [seat["token"] for seat in body["seats"]]


def play(client: FlaskClient, game_id: str, tokens: list[str], action: Json | None = None) -> Json:
    game = client.get(f"/v1/games/{game_id}").get_json()
    if action is None:
        choice = game["legal_actions"][0]
        action = {"type": choice["type"]} | ({"sums": choice["sums"]} if "sums" in choice else {})
    seat = game["turn"]["player"] if action["type"] != "resign" else action.pop("seat")
    headers = {"Authorization": f"Bearer {tokens[seat]}"}
    response = client.post(f"/v1/games/{game_id}/actions", json=action, headers=headers)
    assert response.status_code == 200, response.get_json()
    result: Json = response.get_json()
    return result


def history(client: FlaskClient, game_id: str) -> list[Json]:
    events: list[Json] = client.get(f"/v1/games/{game_id}/events?limit=1000").get_json()["events"]
    return events


class Reader:
    """Reads a stream's frames (a write may hold several: the events of one turn of the loop);
    each read returns within the keep-alive interval."""

    def __init__(self, frames: Frames) -> None:
        self.frames = frames
        self.events: list[tuple[int, str, Json]] = []
        self.comments: list[str] = []
        self.chunks: list[bytes] = []  # as written, each write one chunk
        self.ended = False
        self._rest = ""

    def read_until(self, done: Callable[[Reader], bool], timeout: float = 5) -> Reader:
        deadline = time.monotonic() + timeout
        while not done(self):
            assert time.monotonic() < deadline, f"timed out; got {self.events}"
            try:
                chunk = next(self.frames)
            except StopIteration:
                self.ended = True
                return self
            self.chunks.append(chunk)
            *frames, self._rest = (self._rest + chunk.decode("utf-8")).split("\n\n")
            for frame in frames:
                self._parse(frame)
        return self

    def _parse(self, frame: str) -> None:
        fields = frame_fields(frame, self.comments)
        if "data" in fields:
            self.events.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))

    def up_to(self, version: int, timeout: float = 5) -> Reader:
        return self.read_until(lambda r: bool(r.events) and r.events[-1][0] >= version, timeout)

    def to_the_end(self, timeout: float = 5) -> Reader:
        return self.read_until(lambda r: r.ended, timeout)


def open_stream(client: FlaskClient, game_id: str, **headers: str) -> tuple[Any, Reader]:
    query = headers.pop("query", "")
    response = client.get(f"/v1/games/{game_id}/stream{query}", headers=headers, buffered=False)
    assert response.status_code == 200, response.get_data()
    assert response.mimetype == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache"
    reader = Reader(iter(cast(Iterable[bytes], response.response)))  # a WSGI body: bytes
    reader.read_until(lambda r: bool(r.comments))  # the opening comment: the stream is live
    return response, reader


def assert_exactly(reader: Reader, expected: list[Json]) -> None:
    assert [(v, t) for v, t, _ in reader.events] == [(e["version"], e["type"]) for e in expected]
    assert [data for _, _, data in reader.events] == expected


# ---------------------------------------------------------------------------------- tests
def test_each_event_is_sent_as_id_event_and_the_data_that_events_serves(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app().test_client()
    game_id, tokens = create(client)
    response, reader = open_stream(client, game_id, query="?after=0")
    for _ in range(4):
        play(client, game_id, tokens)
    everything = history(client, game_id)
    assert_exactly(reader.up_to(everything[-1]["version"]), everything)
    assert reader.comments[0].startswith(": cantstop game ")
    reader.read_until(lambda r: ": keep-alive" in r.comments, timeout=2)
    response.close()
    assert hub_of(client.application).open_streams == 0


def test_a_stream_reads_the_store_a_page_at_a_time_as_it_writes(
    make_app: Callable[..., Flask], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stream from the start of a long game holds one page of it, not the whole game.
    monkeypatch.setattr(streams_module, "STORE_PAGE", 3)
    client = make_app().test_client()
    game_id, tokens = create(client)
    for _ in range(10):
        play(client, game_id, tokens)
    everything = history(client, game_id)
    games = hub_of(client.application).games
    pages: list[int] = []
    read = games.history

    def counted(game: uuid.UUID, after: int = 0, limit: int | None = None) -> list[Json]:
        pages.append(after)
        return read(game, after=after, limit=limit)

    monkeypatch.setattr(games, "history", counted)
    response, reader = open_stream(client, game_id, query="?after=0")
    assert_exactly(reader.up_to(everything[-1]["version"]), everything)
    paged = list(range(0, len(everything), 3))
    assert pages[: len(paged)] == paged and len(paged) > 3
    # Later reads (the feed's, when the store poller starts) read only what follows the end.
    assert all(after >= paged[-1] for after in pages[len(paged) :])
    response.close()


def test_without_a_resume_point_the_stream_starts_after_the_current_version(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app().test_client()
    game_id, tokens = create(client)
    play(client, game_id, tokens)
    response, reader = open_stream(client, game_id)
    play(client, game_id, tokens)
    everything = history(client, game_id)
    assert_exactly(reader.up_to(everything[-1]["version"]), everything[3:])
    response.close()


def test_last_event_id_resends_the_missed_events_and_wins_over_after(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app().test_client()
    game_id, tokens = create(client)
    for _ in range(3):
        play(client, game_id, tokens)
    everything = history(client, game_id)
    response, reader = open_stream(client, game_id, query="?after=0", **{"Last-Event-ID": "2"})
    assert_exactly(reader.up_to(everything[-1]["version"]), everything[2:])
    response.close()


def test_the_stream_ends_after_the_final_events_then_answers_204(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app().test_client()
    game_id, tokens = create(client)
    response, reader = open_stream(client, game_id)
    play(client, game_id, tokens)
    play(client, game_id, tokens, {"type": "resign", "seat": 1})
    everything = history(client, game_id)
    assert [e["type"] for e in everything[-2:]] == ["GameFinished", "SeedRevealed"]
    assert_exactly(reader.to_the_end(), everything[2:])
    assert reader.comments[-1] == ": game over"
    response.close()
    # A client that missed the end gets it, then the stream ends; after that, 204 (stop trying).
    response, reader = open_stream(client, game_id, **{"Last-Event-ID": "3"})
    assert_exactly(reader.to_the_end(), everything[3:])
    response.close()
    last = str(everything[-1]["version"])
    assert (
        client.get(f"/v1/games/{game_id}/stream", headers={"Last-Event-ID": last}).status_code
        == 204
    )
    ended = client.get(f"/v1/games/{game_id}/stream")
    assert ended.status_code == 204 and "Content-Type" not in ended.headers
    # An empty Last-Event-ID is no resume point (not a 422): ?after= decides, here the start.
    response, reader = open_stream(client, game_id, query="?after=1", **{"Last-Event-ID": ""})
    assert_exactly(reader.to_the_end(), everything[1:])
    response.close()


def test_an_imported_game_in_progress_streams_its_events_then_ends(
    make_app: Callable[..., Flask],
) -> None:
    """Nothing can ever follow in an imported game: its stream ends like a finished game's,
    where it stayed open for ever, holding a stream place (found by a black-box review)."""
    client = make_app().test_client()
    game_id, tokens = create(client)
    play(client, game_id, tokens)
    exported = client.get(f"/v1/games/{game_id}/export").get_data()
    imported = client.post(
        "/v1/games/import", data=exported, content_type="application/x-ndjson"
    ).get_json()["game"]
    assert imported["status"] == "in_progress"
    response, reader = open_stream(client, imported["id"], query="?after=0")
    assert_exactly(reader.to_the_end(), history(client, imported["id"]))
    assert reader.comments[-1] == ": game over"
    response.close()
    assert client.get(f"/v1/games/{imported['id']}/stream").status_code == 204


@pytest.mark.parametrize(
    ("path", "headers", "status"),
    [
        (f"/v1/games/{UNKNOWN}/stream", {}, 404),
        ("/v1/games/not-a-game/stream", {}, 404),
        ("{game}/stream?after=x", {}, 422),
        # ASCII digits only, as every query's integers (a blank was read past: ?after=%201)
        ("{game}/stream?after=%201", {}, 422),
        ("{game}/stream?after=+1", {}, 422),
        ("{game}/stream?after=", {}, 422),
        ("{game}/stream", {"Last-Event-ID": "-1"}, 422),
        ("{game}/stream", {"Last-Event-ID": "99"}, 422),
        ("{game}/stream?after=3", {}, 422),
    ],
)
def test_bad_stream_requests_are_problems(
    make_app: Callable[..., Flask], path: str, headers: dict[str, str], status: int
) -> None:
    client = make_app().test_client()
    game_id, _ = create(client)
    response = client.get(path.format(game=f"/v1/games/{game_id}"), headers=headers)
    assert response.status_code == status
    assert response.mimetype == "application/problem+json"
    assert response.get_json()["code"] == {404: "not_found", 422: "invalid_request"}[status]


def test_gaps_are_filled_from_the_store_and_duplicates_are_ignored(
    make_app: Callable[..., Flask],
) -> None:
    app = make_app()
    client = app.test_client()
    game_id, tokens = create(client)
    hub = hub_of(app)
    app.extensions["cantstop"].games.store.on_recorded = None  # nothing is handed on by itself here
    body = hub.stream(uuid.UUID(game_id), 2, version=2, finished=False, client="test")
    reader = Reader(iter(body))
    reader.read_until(lambda r: bool(r.comments))
    for _ in range(3):
        play(client, game_id, tokens)
    everything = history(client, game_id)
    newest = everything[-1]
    # Only the newest event arrives (the ones before it were "lost"): the rest come from the store.
    hub.publish(uuid.UUID(game_id), [newest])
    assert_exactly(reader.up_to(newest["version"]), everything[2:])
    # Duplicates (a local hand-off and then Redis, say) are not sent again: the next new event,
    # published after them, is the first thing the stream sends after what it had.
    hub.publish(uuid.UUID(game_id), everything[1:])
    play(client, game_id, tokens)
    after = history(client, game_id)[len(everything) :]
    hub.publish(uuid.UUID(game_id), after)
    assert_exactly(reader.up_to(after[-1]["version"]), everything[2:] + after)
    body.close()
    deadline = time.monotonic() + 5
    while hub.open_streams:
        assert time.monotonic() < deadline, "the stream was not released"
        time.sleep(0.01)


def test_a_stream_too_far_behind_drops_its_inbox_and_reads_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams_module, "INBOX_LIMIT", 2)
    record = {
        "version": 1,
        "type": "GameCreated",
        "at": "",
        "data": {},
        "prev_hash": "",
        "hash": "",
    }
    envelope = Envelope.from_record(record)
    hub = cast(Hub, None)
    stream = Stream(hub, cast(Feed, None), 0, finished=False, client="test")
    stream.offer([envelope, envelope])
    assert not stream._gap and len(stream._inbox) == 2
    stream.offer([envelope])
    assert stream._gap and not stream._inbox


def test_malformed_redis_messages_are_ignored() -> None:
    assert Envelope.from_message(b"not json") is None
    assert Envelope.from_message(b'{"version": "1", "type": "X"}') is None
    assert Envelope.from_message(b'{"type": "X"}') is None
    good = Envelope.from_message(b'{"version": 4, "type": "MovePlayed"}')
    assert good is not None and good.version == 4 and not good.final


@pytest.mark.redis
def test_events_reach_another_process_through_redis(
    make_app: Callable[..., Flask], redis_url: str
) -> None:
    first, second = make_app(redis_url=redis_url), make_app(redis_url=redis_url)
    game_id, tokens = create(first.test_client())
    response, reader = open_stream(second.test_client(), game_id)
    deadline = time.monotonic() + 5
    while not hub_of(second).live:
        assert time.monotonic() < deadline, "the subscriber did not connect"
        time.sleep(0.01)
    for _ in range(3):
        play(first.test_client(), game_id, tokens)  # recorded by the other "process"
    everything = history(first.test_client(), game_id)
    assert_exactly(reader.up_to(everything[-1]["version"], timeout=3), everything[2:])
    assert first.test_client().get("/healthz").get_json()["checks"]["redis"] == "ok"
    response.close()


def test_without_redis_another_process_polls_the_store(make_app: Callable[..., Flask]) -> None:
    first, second = make_app(), make_app()
    game_id, tokens = create(first.test_client())
    response, reader = open_stream(second.test_client(), game_id)
    for _ in range(3):
        play(first.test_client(), game_id, tokens)
    everything = history(first.test_client(), game_id)
    assert_exactly(reader.up_to(everything[-1]["version"], timeout=3), everything[2:])
    response.close()


def test_without_redis_reachable_actions_are_recorded_and_healthz_says_down(
    make_app: Callable[..., Flask],
) -> None:
    app = make_app(redis_url="redis://127.0.0.1:9/0")  # the discard port: nothing listens
    client = app.test_client()
    game_id, tokens = create(client)
    response, reader = open_stream(client, game_id)
    play(client, game_id, tokens)
    everything = history(client, game_id)
    assert_exactly(reader.up_to(everything[-1]["version"]), everything[2:])  # the local hand-off
    health = client.get("/healthz")
    assert health.status_code == 200
    assert health.get_json()["status"] == "degraded"
    assert health.get_json()["checks"]["redis"].startswith("down")
    response.close()


def test_a_failing_hook_never_fails_a_recorded_action(make_app: Callable[..., Flask]) -> None:
    app = make_app()
    client = app.test_client()
    game_id, tokens = create(client)

    def broken(game_id: uuid.UUID, records: list[Json]) -> None:
        raise RuntimeError("boom")

    app.extensions["cantstop"].games.store.on_recorded = broken
    result = play(client, game_id, tokens)
    assert history(client, game_id)[-1] == result["events"][-1]
    hub_of(app).publish(uuid.UUID(game_id), [{"no": "version"}])  # swallowed and logged


def test_a_worker_refuses_streams_beyond_its_cap(
    make_app: Callable[..., Flask], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CANTSTOP_STREAM_MAX", "1")
    client = make_app().test_client()
    game_id, _ = create(client)
    response, _ = open_stream(client, game_id)
    refused = client.get(f"/v1/games/{game_id}/stream")
    assert refused.status_code == 503
    assert refused.get_json()["code"] == "too_many_streams"
    assert refused.headers["Retry-After"] == "5"
    response.close()
    response, _ = open_stream(client, game_id)
    response.close()


def test_stream_settings_come_from_the_environment() -> None:
    assert (LiveConfig.from_env({}).max_streams, LiveConfig.from_env({}).max_per_client) == (
        8000,
        500,
    )
    config = LiveConfig.from_env(
        {"CANTSTOP_STREAM_MAX_PER_CLIENT": "0", "CANTSTOP_STREAM_KEEPALIVE": "2.5"}
    )
    assert (config.max_per_client, config.keepalive) == (0, 2.5)
    assert LiveConfig.from_env({"CANTSTOP_STREAM_MAX": "7"}).max_streams == 7
    for bad in ({"CANTSTOP_STREAM_POLL": "soon"}, {"CANTSTOP_STREAM_MAX": "0"}):
        with pytest.raises(ConfigError):
            LiveConfig.from_env(bad)


def test_stream_answers_other_than_the_stream_match_openapi(client: FlaskClient) -> None:
    """The ``client`` fixture validates every /v1/ response against openapi.yaml."""
    game_id, tokens = create(client)
    assert client.get(f"/v1/games/{uuid.uuid4()}/stream").status_code == 404
    assert client.get(f"/v1/games/{game_id}/stream?after=99").status_code == 422
    play(client, game_id, tokens, {"type": "resign", "seat": 0})
    assert client.get(f"/v1/games/{game_id}/stream").status_code == 204


@pytest.mark.redis
def test_a_process_subscribes_only_to_the_games_its_clients_watch(
    make_app: Callable[..., Flask], redis_url: str
) -> None:
    """Fan-out by interest: the channel of a game is subscribed while a stream of it is open
    here, and only then; other games' messages never reach this process."""
    import redis

    app = make_app(redis_url=redis_url)
    client = app.test_client()
    watched, _ = create(client)
    create(client)  # another game, played but watched by nobody
    server = redis.Redis.from_url(redis_url)

    def channels() -> set[str]:
        found = server.pubsub_channels("cantstop:game:*")
        return {c.decode() if isinstance(c, bytes) else str(c) for c in found}

    assert channels() == set()
    response, _ = open_stream(client, watched)
    deadline = time.monotonic() + 5
    while channels() != {f"cantstop:game:{watched}"}:
        assert time.monotonic() < deadline, f"subscribed to {channels()}"
        time.sleep(0.02)
    response.close()
    while channels():
        assert time.monotonic() < deadline, f"still subscribed to {channels()}"
        time.sleep(0.02)


def test_a_client_that_stops_reading_is_dropped_without_its_events_piling_up() -> None:
    """The loop's socket sink refuses to hold more than MAX_BUFFERED bytes for a client whose
    socket does not drain: the stream ends there instead of keeping its events in memory."""
    import asyncio
    import socket

    async def run() -> tuple[int, bool]:
        ours, theirs = socket.socketpair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sink = sinks_module.SocketSink()
        await sink.attach(asyncio.get_running_loop(), ours)
        frame = b"data: " + b"x" * 1000 + b"\n\n"
        written = 0
        try:
            for _ in range(10_000):  # 10 MB: far more than the sink may hold
                sink.write(frame)
                written += len(frame)
                await asyncio.sleep(0)
        except sinks_module.ClientGone:
            dropped = True
        else:
            dropped = False
        sink.close()
        theirs.close()
        return written, dropped

    written, dropped = asyncio.run(run())
    assert dropped
    assert written <= sinks_module.MAX_BUFFERED + 64 * 1024  # what the kernel took, at most


def test_a_slow_reader_catching_up_is_waited_for_not_dropped() -> None:
    """A stream catching up writes a long history faster than its client reads: past
    DRAIN_ABOVE bytes waiting it waits for the client, so a client that reads, however slowly,
    gets everything, and what waits for it stays bounded."""
    import asyncio
    import socket
    import threading

    ours, theirs = socket.socketpair()
    received = bytearray()

    def slow_reader() -> None:
        while True:
            chunk = theirs.recv(8192)
            if not chunk:
                return
            received.extend(chunk)
            time.sleep(0.001)

    reader = threading.Thread(target=slow_reader, daemon=True)
    reader.start()

    async def write_history() -> int:
        sink = sinks_module.SocketSink()
        await sink.attach(asyncio.get_running_loop(), ours)
        frame = b"data: " + b"x" * 1000 + b"\n\n"
        most = 0
        for _ in range(2000):  # 2 MB: eight times what may wait for a client
            sink.write(frame)
            most = max(most, sink.pending())
            if sink.pending() > sinks_module.DRAIN_ABOVE:
                await sink.drained()
        deadline = time.monotonic() + 30
        while sink.pending():
            assert time.monotonic() < deadline, "the sink did not drain"
            await asyncio.sleep(0.01)
        sink.close()
        return most

    most = asyncio.run(write_history())
    reader.join(timeout=30)
    theirs.close()
    assert len(received) == 2000 * 1008
    assert most <= sinks_module.DRAIN_ABOVE + 1008


def test_account_feeds_read_again_when_the_notices_view_was_rebuilt() -> None:
    """The poller compares the notices view's batch stamps; a rebuild counts its batches afresh
    (fewer, larger), so the stamp goes back: every account feed then reads the store once,
    instead of waiting until the count passes the stamp it remembered."""

    class Notices:
        def __init__(self) -> None:
            self.answers: list[tuple[int, dict[str, int]]] = []

        def move_on(self) -> None:
            pass

        def changed(self, stamp: int) -> tuple[int, dict[str, int]]:
            return self.answers.pop(0)

    class AccountFeed:
        def __init__(self) -> None:
            self.resyncs = 0
            self.hints: list[int] = []

        def resync(self) -> None:
            self.resyncs += 1

        def hint(self, number: int) -> None:
            self.hints.append(number)

    notices = Notices()
    hub = Hub(cast(Any, None), None, LiveConfig())
    hub.notices = cast(Any, notices)
    feed = AccountFeed()
    hub._feeds[f"{streams_module.ACCOUNT_CHANNEL_PREFIX}ann"] = cast(Any, feed)

    def poll(answer: tuple[int, dict[str, int]]) -> None:
        notices.answers.append(answer)
        asyncio.run(hub._poll_notices())

    poll((40, {}))  # the first poll: a baseline, and one read
    assert feed.resyncs == 1
    poll((41, {"ann": 7}))  # a new notice: a hint
    assert feed.hints == [7] and feed.resyncs == 1
    poll((3, {}))  # rebuilt: batch 3 of the new view, after batch 41 of the old one
    assert feed.resyncs == 2
    poll((4, {"ann": 8}))  # and it goes on from the new count
    assert feed.hints == [7, 8]


def test_a_new_viewer_never_makes_the_open_streams_skip_what_another_host_recorded(
    make_app: Callable[..., Flask], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Redis and no poll within the test: another host records an event this process was not
    told of, then a new viewer opens a stream here (having read the newer version from the
    store). The streams already open get that event at once, and the new one starts after it.
    (Opening moved the feed's newest version on to the store's, so the open streams skipped the
    event until the next one came, and for ever if none came.)"""
    monkeypatch.setenv("CANTSTOP_STREAM_POLL", "300")
    here, elsewhere = make_app(), make_app()
    game_id, tokens = create(here.test_client())
    response, reader = open_stream(here.test_client(), game_id)
    play(elsewhere.test_client(), game_id, tokens)  # this process is not told
    everything = history(here.test_client(), game_id)
    newest = everything[-1]["version"]
    late, late_reader = open_stream(here.test_client(), game_id)
    assert_exactly(reader.up_to(newest, timeout=3), everything[2:])
    play(here.test_client(), game_id, tokens)
    after = history(here.test_client(), game_id)
    assert_exactly(late_reader.up_to(after[-1]["version"], timeout=3), after[newest:])
    assert_exactly(reader.up_to(after[-1]["version"], timeout=3), after[2:])
    late.close()
    response.close()
