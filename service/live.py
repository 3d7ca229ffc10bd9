"""Live games: ``GET /v1/games/{id}/stream`` (server-sent events) and its per-process hub.

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
import math
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import redis
from flask import Blueprint, Flask, Response, current_app, request
from redis.backoff import NoBackoff
from redis.retry import Retry

from domain.game import Game, event_record
from service.app import problem
from service.config import ConfigError
from service.games import Games, ServiceError, parse_game_id
from service.schemas import EventSchema

log = logging.getLogger("cantstop.live")

CHANNEL_PREFIX = "cantstop:game:"
CHANNEL_PATTERN = CHANNEL_PREFIX + "*"
EXTENSION = "cantstop.live"
STORE_PAGE = 500
SCAN_PAGE = 1000
SCAN_MAX = 20 * SCAN_PAGE  # beyond this many new notifications, every stream simply re-reads
MAILBOX_LIMIT = 1000  # a stream this far behind drops its queue and reads the store instead
RECONNECT_MIN, RECONNECT_MAX = 0.1, 2.0
PING_EVERY, PONG_WAIT = 5.0, 5.0
RETRY_MS = 2000  # the EventSource reconnection delay announced to clients
LAST_EVENT_ID_MAX = 10**12

_EVENT_SCHEMA = EventSchema()


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
        threads = _number(env, "CANTSTOP_WORKER_THREADS", 0, integer=True)
        # Under gunicorn (gthread) a stream holds a thread: keep a quarter of them (at least 4) for
        # everything else, so open streams never starve actions.
        default_max = int(threads - max(4, threads // 4)) if threads else cls.max_streams
        return cls(
            keepalive=_number(env, "CANTSTOP_STREAM_KEEPALIVE", cls.keepalive),
            poll=_number(env, "CANTSTOP_STREAM_POLL", cls.poll),
            check=_number(env, "CANTSTOP_STREAM_CHECK", cls.check),
            max_streams=int(_number(env, "CANTSTOP_STREAM_MAX", max(1, default_max), integer=True)),
        )


def _number(env: Mapping[str, str], name: str, default: float, *, integer: bool = False) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise ConfigError(
            f"{name} must be a {'whole ' if integer else ''}number, not {raw!r}"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be greater than 0, not {raw!r}")
    return value


# ------------------------------------------------------------------------------------ redis
class RedisLink:
    """A Redis client with a circuit breaker, shared by the publisher, the limiter and /healthz.

    After a failure, callers that can do without Redis (publishing, rate limits) skip it for a
    short, growing while instead of paying a failed round trip on every request. No retries: the
    caller always has a fallback, and actions must not wait on Redis.
    """

    def __init__(self, url: str, *, timeout: float = 1.0) -> None:
        self.url = url
        self.timeout = timeout
        self.client = self.connect()
        self._lock = threading.Lock()
        self._failures = 0
        self._skip_until = 0.0

    def connect(self, *, read_timeout: float | None = None) -> redis.Redis:
        options: dict[str, Any] = {}
        if not self.url.startswith("unix:"):
            options["socket_keepalive"] = True  # TCP only
        return redis.Redis.from_url(
            self.url,
            socket_connect_timeout=self.timeout,
            socket_timeout=read_timeout or self.timeout,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
            **options,
        )

    def close(self) -> None:
        self.client.close()

    def available(self) -> bool:
        """False while the breaker is open after a recent failure."""
        return time.monotonic() >= self._skip_until

    def failed(self, what: str, exc: BaseException) -> None:
        with self._lock:
            self._failures += 1
            first = self._failures == 1
            pause = min(RECONNECT_MAX, RECONNECT_MIN * 2 ** (self._failures - 1))
            self._skip_until = time.monotonic() + pause
        if first:
            log.warning(
                "redis unavailable (%s: %s: %s); actions are still recorded, streams poll the "
                "store, rate limits count per process",
                what,
                type(exc).__name__,
                exc,
            )
        else:
            log.debug("redis still unavailable (%s: %s)", what, type(exc).__name__)

    def succeeded(self) -> None:
        if self._failures:
            with self._lock:
                recovered = self._failures > 0
                self._failures, self._skip_until = 0, 0.0
            if recovered:
                log.info("redis available again")

    def status(self) -> str:
        """``ok`` or ``down: <reason>``, from a PING (the breaker does not apply)."""
        try:
            self.client.ping()
        except Exception as exc:  # whatever the failure, Redis is not usable
            self.failed("ping", exc)
            return f"down: {type(exc).__name__}"
        self.succeeded()
        return "ok"


# --------------------------------------------------------------------------------- mailbox
@dataclass(frozen=True)
class Envelope:
    """One event as a stream sends it: the served JSON, serialized once."""

    version: int
    type: str
    text: str

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Envelope:
        served = _EVENT_SCHEMA.dump(record)
        text = json.dumps(served, ensure_ascii=False, separators=(",", ":"))
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
class TooManyStreams(ServiceError):
    status, code = 503, "too_many_streams"


class ShuttingDown(ServiceError):
    status, code = 503, "shutting_down"


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

    def redis_status(self) -> str:
        return "not configured" if self.link is None else self.link.status()

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
            envelopes = [Envelope.from_record(record) for record in records]
            for box in self._boxes_of(game_id):
                box.put(envelopes)
            if self.link is not None and self.link.available():
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
        position: int | None = None
        while not self._closing.is_set():
            self._poke_poller.wait(self.config.check if self._live else self.config.poll)
            self._poke_poller.clear()
            if self._closing.is_set():
                return
            if not self._count:
                position = None
                continue
            try:
                position = self._poll(position)
            except Exception as exc:  # the store may be briefly unavailable: try again later
                log.warning("live: polling the store failed: %s: %s", type(exc).__name__, exc)

    def _poll(self, position: int | None) -> int:
        top = self.games.recorder.max_notification_id() or 0
        if position is None or top - position > SCAN_MAX:
            for box in self._all_boxes():
                box.resync()
            return top
        newest: dict[uuid.UUID, int] = {}
        start = position + 1
        while start <= top:
            page = self.games.recorder.select_notifications(start=start, limit=SCAN_PAGE, stop=top)
            for notification in page:
                gid = uuid.UUID(str(notification.originator_id))
                newest[gid] = max(newest.get(gid, 0), notification.originator_version)
            if len(page) < SCAN_PAGE:
                break
            start = page[-1].id + 1
        for gid, version in newest.items():
            for box in self._boxes_of(gid):
                box.hint(version)
        return top


# ---------------------------------------------------------------------------------- stream
class GameStream:
    """The body of one stream: a WSGI iterable whose ``close`` always releases its mailbox."""

    def __init__(self, hub: Hub, box: Mailbox, after: int) -> None:
        self.hub = hub
        self.box = box
        self.after = after
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

    def _store(self, after: int) -> list[Envelope]:
        """Every stored event of the game after version ``after``, oldest first."""
        found: list[Envelope] = []
        store = self.hub.games.repository.event_store
        while True:
            page = list(store.get(self.box.game_id, gt=after or None, limit=STORE_PAGE))
            found.extend(
                Envelope.from_record(event_record(e)) for e in page if isinstance(e, Game.Event)
            )
            if len(page) < STORE_PAGE:
                return found
            after = page[-1].originator_version

    def _generate(self) -> Generator[bytes, None, None]:
        keepalive = self.hub.config.keepalive
        last = self.after
        yield (
            f"retry: {RETRY_MS}\n: cantstop game {self.box.game_id} after version {last}\n\n"
        ).encode()
        pending = self._store(last)
        ended = False
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
            batch = self.box.take(quiet_until - time.monotonic())
            if batch.closed:
                return
            pending = []
            expected = last + 1
            gap = batch.resync or batch.hint > last
            for envelope in batch.envelopes:
                if envelope.version < expected:
                    continue  # a duplicate: handed on locally and again by Redis, or resent
                if envelope.version > expected:
                    gap = True  # something was missed or reordered: the store has it
                    break
                pending.append(envelope)
                expected += 1
            if gap:
                pending = self._store(last)
            if not pending and time.monotonic() >= quiet_until:
                # Also how a closed connection is noticed: writing to it fails.
                yield b": keep-alive\n\n"
                quiet_until = time.monotonic() + keepalive


# ------------------------------------------------------------------------------- endpoints
live = Blueprint("live", __name__)


class InvalidStreamRequest(ServiceError):
    status, code = 422, "invalid_request"


def hub() -> Hub:
    found = current_app.extensions[EXTENSION]
    assert isinstance(found, Hub)
    return found


def redis_status() -> str:
    """For /healthz: ``ok``, ``down: <reason>`` or ``not configured``."""
    found = current_app.extensions.get(EXTENSION)
    return found.redis_status() if isinstance(found, Hub) else "not configured"


def _resume_point() -> int | None:
    """``Last-Event-ID`` (what an EventSource sends when it reconnects) wins over ``?after``."""
    for name, raw in (
        ("Last-Event-ID", request.headers.get("Last-Event-ID")),
        ("after", request.args.get("after")),
    ):
        if raw is None:
            continue
        raw = raw.strip()
        if not raw.isdigit() or not raw.isascii() or int(raw) > LAST_EVENT_ID_MAX:
            raise InvalidStreamRequest(f"{name} must be a version: a non-negative integer")
        return int(raw)
    return None


@live.get("/v1/games/<game_id>/stream")
def stream(game_id: str) -> Response:
    gid = parse_game_id(game_id)
    the_hub = hub()
    after = _resume_point()
    game = the_hub.games.game(gid)  # 404 not_found for an unknown game
    if after is None:
        after = game.version
    elif after > game.version:
        raise InvalidStreamRequest(
            f"the game is at version {game.version}; cannot resume after {after}",
            version=game.version,
        )
    if game.status == "finished" and after >= game.version:
        # Nothing will ever follow: 204 tells an EventSource not to reconnect.
        return Response(status=204)
    try:
        box = the_hub.open(gid)
    except (TooManyStreams, ShuttingDown) as exc:
        response = problem(exc.status, exc.code, exc.detail)
        response.headers["Retry-After"] = "5"
        return response
    response = Response(GameStream(the_hub, box, after), mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response


def init_app(app: Flask) -> Hub:
    """Register the stream route and this process's hub; hook publishing into ``Games``."""
    rt = app.extensions["cantstop"]
    settings = rt.settings
    link = RedisLink(settings.redis_url) if settings.redis_url else None
    the_hub = Hub(rt.games, link, LiveConfig.from_env())
    rt.games.on_recorded = the_hub.publish
    app.extensions[EXTENSION] = the_hub
    app.register_blueprint(live)
    return the_hub


def link_of(app: Flask) -> RedisLink | None:
    """The process's Redis link (for the rate limiter), if Redis is configured."""
    found = app.extensions.get(EXTENSION)
    return found.link if isinstance(found, Hub) else None


__all__ = [
    "Envelope",
    "GameStream",
    "Hub",
    "LiveConfig",
    "Mailbox",
    "RedisLink",
    "init_app",
    "link_of",
    "live",
    "redis_status",
]
