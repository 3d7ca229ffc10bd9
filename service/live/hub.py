"""Live games: the per-process hub behind ``GET /v1/games/{id}/stream`` (server-sent events).

How an event reaches every stream, whichever worker or host recorded it:

* ``Games.save`` stores the events, then calls ``Hub.publish`` (its ``on_recorded`` hook). The hub
  hands them at once to this process's streams of that game and, with Redis, publishes each one to
  the channel ``cantstop:game:<id>``. A failed publish is logged and swallowed: the action stays
  recorded.
* One subscriber thread per process (``PSUBSCRIBE cantstop:game:*``) hands what it hears to the
  streams of this process. It reconnects with backoff when Redis goes away.
* One poller thread per process watches the store's notification log (the record of truth): every
  ``poll`` seconds while Redis is not live (no Redis configured, or Redis down), every ``check``
  seconds while it is, to catch a message Redis dropped. It tells each stream the newest version of
  its game that the store holds.
* Each stream keeps the last version it sent. An event it already sent is ignored; one that skips
  ahead, a hint of a newer version, a full mailbox or a change of Redis state make it read what it
  lacks from the store. So every client sees every event once, in order, and a lost Redis message
  only delays an event, never loses it.

A stream ends cleanly after the events of a finished game (the save that finishes a game is
atomic, so once ``GameFinished`` is sent, what follows it is already in the store). Asked again for
a finished game with nothing left to send, the stream answers 204 No Content, which tells an
``EventSource`` to stop reconnecting.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from service.application.errors import ApplicationError
from service.application.games import Games
from service.config import env_int, env_number
from service.live.redis_link import RECONNECT_MAX, RECONNECT_MIN, RedisLink
from service.persistence.log import LogReader

log = logging.getLogger("cantstop.live")

CHANNEL_PREFIX = "cantstop:game:"
CHANNEL_PATTERN = CHANNEL_PREFIX + "*"
STORE_PAGE = 500
SCAN_PAGE = 1000
SCAN_MAX = 20 * SCAN_PAGE  # beyond this many new notifications, every stream simply re-reads
MAILBOX_LIMIT = 1000  # a stream this far behind drops its queue and reads the store instead
PING_EVERY, PONG_WAIT = 5.0, 5.0
RETRY_MS = 2000  # the EventSource reconnection delay announced to clients
HANGUP_CHECK = 1.0  # seconds: how often a quiet stream asks whether its client hung up


# ---------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class LiveConfig:
    """Stream settings, from the environment (README: Configuration)."""

    keepalive: float = 15.0
    poll: float = 0.5
    check: float = 5.0
    max_streams: int = 1000

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LiveConfig:
        env = os.environ if environ is None else environ
        threads = env_int(env, "CANTSTOP_WORKER_THREADS", 0, low=1)
        # Under gunicorn (gthread) a stream holds a thread: keep a quarter of them (at least 4) for
        # everything else, so open streams never starve actions.
        default_max = int(threads - max(4, threads // 4)) if threads else cls.max_streams
        return cls(
            keepalive=env_number(env, "CANTSTOP_STREAM_KEEPALIVE", cls.keepalive, low=0.01),
            poll=env_number(env, "CANTSTOP_STREAM_POLL", cls.poll, low=0.01),
            check=env_number(env, "CANTSTOP_STREAM_CHECK", cls.check, low=0.01),
            max_streams=env_int(env, "CANTSTOP_STREAM_MAX", max(1, default_max), low=1),
        )


# --------------------------------------------------------------------------------- mailbox
@dataclass(frozen=True)
class Envelope:
    """One event as a stream sends it: the served JSON, serialized once."""

    version: int
    type: str
    text: str

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Envelope:
        text = orjson.dumps(record).decode("utf-8")
        return cls(int(record["version"]), str(record["type"]), text)

    @classmethod
    def from_message(cls, payload: bytes | str) -> Envelope | None:
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
        try:
            data = json.loads(text)
            version, kind = data["version"], data["type"]
        except (ValueError, TypeError, KeyError):
            return None
        if not isinstance(version, int) or not isinstance(kind, str) or "\n" in text:
            return None
        return cls(version, kind, text)

    @property
    def final(self) -> bool:
        return self.type == "GameFinished"

    def frame(self) -> bytes:
        return f"id: {self.version}\nevent: {self.type}\ndata: {self.text}\n\n".encode()


@dataclass
class Batch:
    envelopes: list[Envelope]
    hint: int
    resync: bool
    closed: bool


class Mailbox:
    """What the hub's threads hand to one stream; the stream's thread takes it."""

    def __init__(self, game_id: uuid.UUID, limit: int = MAILBOX_LIMIT) -> None:
        self.game_id = game_id
        self.limit = limit
        self._cond = threading.Condition()
        self._queue: deque[Envelope] = deque()
        self._hint = 0
        self._resync = False
        self._closed = False

    def put(self, envelopes: list[Envelope]) -> None:
        with self._cond:
            if len(self._queue) + len(envelopes) > self.limit:
                self._queue.clear()
                self._resync = True
            else:
                self._queue.extend(envelopes)
            self._cond.notify()

    def hint(self, version: int) -> None:
        """The store holds ``version`` of this game."""
        with self._cond:
            if version > self._hint:
                self._hint = version
                self._cond.notify()

    def resync(self) -> None:
        """Read the store: something may have been missed."""
        with self._cond:
            self._resync = True
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def take(self, timeout: float) -> Batch:
        with self._cond:
            self._cond.wait_for(
                lambda: bool(self._queue) or self._resync or self._hint > 0 or self._closed,
                timeout=max(0.0, timeout),
            )
            batch = Batch(list(self._queue), self._hint, self._resync, self._closed)
            self._queue.clear()
            self._hint, self._resync = 0, False
            return batch


# -------------------------------------------------------------------------------------- hub
class TooManyStreams(ApplicationError):
    code = "too_many_streams"


class ShuttingDown(ApplicationError):
    code = "shutting_down"


class Hub:
    """One per process: the streams open here, the Redis subscriber and the store poller."""

    def __init__(self, games: Games, link: RedisLink | None, config: LiveConfig) -> None:
        self.games = games
        self.link = link
        self.config = config
        self._lock = threading.Lock()
        self._boxes: dict[uuid.UUID, set[Mailbox]] = {}
        self._count = 0
        self._live = False
        self._closing = threading.Event()
        self._poke_poller = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pause = RECONNECT_MIN

    # ----------------------------------------------------------------------------- state
    @property
    def live(self) -> bool:
        """True while the Redis subscription is confirmed and healthy."""
        return self._live

    @property
    def open_streams(self) -> int:
        return self._count

    # --------------------------------------------------------------------------- streams
    def open(self, game_id: uuid.UUID) -> Mailbox:
        box = Mailbox(game_id)
        with self._lock:
            if self._closing.is_set():
                raise ShuttingDown("this worker is shutting down; reconnect")
            if self._count >= self.config.max_streams:
                raise TooManyStreams(
                    f"this worker already serves {self._count} streams; retry shortly "
                    "(another worker or host may have room)"
                )
            self._boxes.setdefault(game_id, set()).add(box)
            self._count += 1
            if not self._threads:
                self._start()
        return box

    def release(self, box: Mailbox) -> None:
        with self._lock:
            boxes = self._boxes.get(box.game_id)
            if boxes is None or box not in boxes:
                return
            boxes.discard(box)
            if not boxes:
                del self._boxes[box.game_id]
            self._count -= 1

    def _boxes_of(self, game_id: uuid.UUID) -> list[Mailbox]:
        with self._lock:
            return list(self._boxes.get(game_id, ()))

    def _all_boxes(self) -> list[Mailbox]:
        with self._lock:
            return [box for boxes in self._boxes.values() for box in boxes]

    # ------------------------------------------------------------------------ publishing
    def publish(self, game_id: uuid.UUID, records: list[dict[str, Any]]) -> None:
        """The ``Games.on_recorded`` hook: called after the events are stored. Never raises."""
        try:
            boxes = self._boxes_of(game_id)
            to_redis = self.link is not None and self.link.available()
            if not boxes and not to_redis:
                return  # nobody to tell in this process, and no Redis to tell the others
            envelopes = [Envelope.from_record(record) for record in records]
            for box in boxes:
                box.put(envelopes)
            if to_redis:
                self._publish_redis(game_id, envelopes)
        except Exception:  # a notification must never turn a recorded action into an error
            log.exception("could not hand on the events of game %s", game_id)

    def _publish_redis(self, game_id: uuid.UUID, envelopes: list[Envelope]) -> None:
        assert self.link is not None
        channel = f"{CHANNEL_PREFIX}{game_id}"
        try:
            pipe = self.link.client.pipeline(transaction=False)
            for envelope in envelopes:
                pipe.publish(channel, envelope.text)
            pipe.execute()
        except Exception as exc:  # logged and swallowed: the events are stored
            self.link.failed("publish", exc)
        else:
            self.link.succeeded()

    # --------------------------------------------------------------------------- threads
    def _start(self) -> None:
        """Start the threads (with the first stream, so after gunicorn forks). Holds _lock."""
        targets = [self._poll_loop]
        if self.link is not None:
            targets.append(self._subscribe_loop)
        for target in targets:
            thread = threading.Thread(target=target, name=f"cantstop-{target.__name__}")
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def shutdown(self) -> None:
        """End every stream now and refuse new ones (the worker is stopping). Does not block."""
        self._closing.set()
        self._poke_poller.set()
        for box in self._all_boxes():
            box.close()

    def close(self) -> None:
        """End every stream and stop the threads."""
        self.shutdown()
        for thread in self._threads:
            thread.join(timeout=3)
        if self.link is not None:
            self.link.close()

    def _set_live(self, live: bool) -> None:
        with self._lock:
            changed = live != self._live
            self._live = live
        if not changed:
            return
        if live:
            log.info("live: subscribed to redis; streams are pushed")
        else:
            log.warning("live: redis subscription lost; streams poll the store until it returns")
        # Whatever fell between the two modes is in the store: every stream re-reads it.
        for box in self._all_boxes():
            box.resync()
        self._poke_poller.set()

    def _subscribe_loop(self) -> None:
        assert self.link is not None
        while not self._closing.is_set():
            pubsub = None
            try:
                pubsub = self.link.connect(read_timeout=PONG_WAIT).pubsub()  # type: ignore[no-untyped-call]
                pubsub.psubscribe(CHANNEL_PATTERN)
                self._listen(pubsub)
            except Exception as exc:  # any failure: drop to polling, reconnect later
                self._set_live(False)
                log.debug("live: subscriber error %s: %s", type(exc).__name__, exc)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:
                        log.debug("live: closing the subscription failed", exc_info=True)
            self._closing.wait(self._pause)
            self._pause = min(RECONNECT_MAX, self._pause * 2)
        self._set_live(False)

    def _listen(self, pubsub: Any) -> None:
        """Hand on messages until closing; raises when the connection fails or goes silent."""
        next_ping = time.monotonic() + PING_EVERY
        ping_sent: float | None = None
        while not self._closing.is_set():
            message = pubsub.get_message(timeout=1.0)
            now = time.monotonic()
            if message is not None:
                kind = message["type"]
                if kind == "pmessage":
                    self._hand_on(message["channel"], message["data"])
                elif kind == "psubscribe":
                    assert self.link is not None
                    self.link.succeeded()
                    self._pause = RECONNECT_MIN
                    self._set_live(True)
                elif kind == "pong":
                    ping_sent = None
            if ping_sent is not None and now - ping_sent > PONG_WAIT:
                raise redis.ConnectionError("redis did not answer a PING in time")
            if now >= next_ping:
                pubsub.ping()
                ping_sent = ping_sent or now
                next_ping = now + PING_EVERY

    def _hand_on(self, channel: bytes | str, payload: bytes | str) -> None:
        name = channel.decode() if isinstance(channel, bytes) else channel
        try:
            game_id = uuid.UUID(name[len(CHANNEL_PREFIX) :])
        except ValueError:
            return
        boxes = self._boxes_of(game_id)
        if not boxes:
            return
        envelope = Envelope.from_message(payload)
        if envelope is None:
            log.warning("live: ignored a malformed message on %s", name)
            return
        for box in boxes:
            box.put([envelope])

    def _poll_loop(self) -> None:
        reader: LogReader | None = None  # None: not following the log (no stream open)
        while not self._closing.is_set():
            self._poke_poller.wait(self.config.check if self._live else self.config.poll)
            self._poke_poller.clear()
            if self._closing.is_set():
                return
            if not self._count:
                reader = None
                continue
            try:
                if reader is None:  # every stream reads the store itself once: start from here
                    reader = LogReader(self.games.recorder)
                    reader.skip_to_end()
                    for box in self._all_boxes():
                        box.resync()
                    continue
                self._poll(reader)
            except Exception as exc:  # the store may be briefly unavailable: try again later
                log.warning("live: polling the store failed: %s: %s", type(exc).__name__, exc)

    def _poll(self, reader: LogReader) -> None:
        """Hint each stream of the newest version of its game that the log shows; far behind,
        every stream simply reads the store again."""
        newest: dict[uuid.UUID, int] = {}
        scanned = 0
        while True:
            page = reader.heads(SCAN_PAGE)  # without the events' states
            for head in page:
                newest[head.originator_id] = max(
                    newest.get(head.originator_id, 0), head.originator_version
                )
            scanned += len(page)
            if len(page) < SCAN_PAGE:
                break
            if scanned >= SCAN_MAX:
                reader.skip_to_end()
                for box in self._all_boxes():
                    box.resync()
                return
        for gid, version in newest.items():
            for box in self._boxes_of(gid):
                box.hint(version)


# ---------------------------------------------------------------------------------- stream
class GameStream:
    """The body of one stream: a WSGI iterable whose ``close`` always releases its mailbox."""

    def __init__(
        self,
        hub: Hub,
        box: Mailbox,
        after: int,
        *,
        finished: bool = False,
        hung_up: Callable[[], bool] | None = None,
    ) -> None:
        """``finished``: the game was already over when the stream was asked for, so once the
        stored events after ``after`` are sent, nothing more will ever come. ``hung_up``: whether
        the client has closed its connection (asked at least every ``HANGUP_CHECK`` seconds);
        without it, a closed connection is noticed only when a write fails, at the next
        keep-alive, and until then the stream holds one of the worker's stream places."""
        self.hub = hub
        self.box = box
        self.after = after
        self.finished = finished
        self.hung_up = hung_up
        self._frames = self._generate()
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        return self._frames

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.box.close()  # wakes the generator if another thread is waiting in it
            # Running in another thread: the closed mailbox ends it.
            with contextlib.suppress(ValueError):
                self._frames.close()
            self.hub.release(self.box)

    def _store(self, after: int) -> Iterator[Envelope]:
        """Every stored event of the game after version ``after``, oldest first, read a page at
        a time as the stream is written: a stream from the start of a long game holds one page
        of it, not the whole game (twenty such streams of a 72,000-event game once held ~300 MB)."""
        while True:
            page = self.hub.games.history(self.box.game_id, after=after, limit=STORE_PAGE)
            yield from (Envelope.from_record(record) for record in page)
            if len(page) < STORE_PAGE:
                return
            after = page[-1]["version"]

    def _generate(self) -> Generator[bytes, None, None]:
        """The frames; a store that fails mid-stream ends it with a comment saying why (the
        client reconnects with Last-Event-ID and misses nothing)."""
        try:
            yield from self._frames_of_game()
        except ApplicationError as exc:
            log.warning("live: stream of game %s ended: %s", self.box.game_id, exc.detail)
            yield f": ended: {exc.code}\n\n".encode()

    def _frames_of_game(self) -> Generator[bytes, None, None]:
        keepalive = self.hub.config.keepalive
        last = self.after
        yield (
            f"retry: {RETRY_MS}\n: cantstop game {self.box.game_id} after version {last}\n\n"
        ).encode()
        pending: Iterable[Envelope] = self._store(last)
        ended = self.finished
        quiet_until = time.monotonic() + keepalive
        while True:
            for envelope in pending:
                if envelope.version != last + 1:  # already sent
                    continue
                yield envelope.frame()
                last = envelope.version
                ended = ended or envelope.final
                quiet_until = time.monotonic() + keepalive
            if ended:
                # The save that finished the game is atomic: what follows GameFinished is stored.
                for envelope in self._store(last):
                    yield envelope.frame()
                    last = envelope.version
                yield b": game over\n\n"
                return
            wait = quiet_until - time.monotonic()
            batch = self.box.take(wait if self.hung_up is None else min(wait, HANGUP_CHECK))
            if batch.closed or (self.hung_up is not None and self.hung_up()):
                return
            fresh: list[Envelope] = []
            pending = fresh
            expected = last + 1
            gap = batch.resync or batch.hint > last
            for envelope in batch.envelopes:
                if envelope.version < expected:
                    continue  # a duplicate: handed on locally and again by Redis, or resent
                if envelope.version > expected:
                    gap = True  # something was missed or reordered: the store has it
                    break
                fresh.append(envelope)
                expected += 1
            if gap:
                pending = self._store(last)
            if not (gap or fresh) and time.monotonic() >= quiet_until:
                # Also how a closed connection is noticed: writing to it fails.
                yield b": keep-alive\n\n"
                quiet_until = time.monotonic() + keepalive
