"""Live streams: the per-process hub behind ``GET /v1/games/{id}/stream``, ``/v1/account/stream``
and ``/v1/tournaments/{id}/stream`` (server-sent events).

A stream does not hold a thread. Each worker process runs one asyncio event loop (``Hub``'s
thread) that serves every stream of the process: under `cantstop serve`, once the request is
judged (the game exists, the resume point is valid, the limits allow it), its connection is handed
to the loop by the service's worker (``service/server.py``: the request's thread goes back to the
pool at once), and the loop writes the answer and the events on that socket until the game ends,
the client hangs up or the worker stops. Where the socket cannot be handed over (another WSGI
server, the test client) the same stream is written into a queue that the request's thread reads:
one implementation, two sinks.

How an event reaches every stream, whichever worker or host recorded it:

* ``Store.save`` (service/application/store.py) stores the events, then calls ``Hub.publish``
  (its ``on_recorded`` hook). The hub
  hands them to this process's feed of that game, if it has one, and, with Redis, publishes each
  one to the channel ``cantstop:game:<id>``. A failed publish is logged and swallowed: the action
  stays recorded.
* **Fan-out by interest.** A process subscribes to the channel of a game only while it has a stream
  of that game (``SUBSCRIBE``/``UNSUBSCRIBE`` as the first opens and the last ends): its work grows
  with its viewers, not with all play. A subscription that is confirmed, or one restored after
  Redis came back, makes the feed read the store once (what was published before is there).
* One ``Feed`` per game with streams in the process: it keeps the newest version it handed on, drops
  duplicates (a local hand-off and then Redis), and when something is missing (a gap, a hint of a
  newer version, Redis lost) it reads the store **once** for all its streams.
* The loop polls the store's notification log (the record of truth) every ``poll`` seconds while
  Redis is not live (no Redis configured, or Redis down), every ``check`` seconds while it is, to
  catch a message Redis dropped, and hints each feed of the newest version of its game.
* Each stream keeps the last version it sent: an event already sent is ignored, one that skips
  ahead makes it read what it lacks from the store. So every client sees every event once, in order,
  and a lost Redis message only delays an event, never loses it.
* A client that stops reading is dropped once what waits for it passes ``MAX_BUFFERED`` bytes: its
  events never pile up in memory. A client that hangs up is noticed at once (its socket reads as
  ended). A worker that is stopped closes its streams at once: clients reconnect elsewhere with
  ``Last-Event-ID`` and miss nothing.

An account stream answers to the personal token that opened it, which may be revoked, or its
account closed, on any worker or host while the stream is open (contract 1.2: "from the next
request on that token is refused"). The hub checks the tokens in the store, where revocation
and closure are written, never one query per stream per notice:

* before an account's notices are handed to its streams, once for all that account's streams
  in the process (``Feed._verified_flush``), and before a stream writes what it read from the
  store itself: a notice made after the token died never reaches its stream;
* every ``TOKEN_CHECK`` seconds, every open account stream of the process, in queries of
  ``TOKEN_PAGE`` ids: a stream with nothing to send ends too.

A stream whose token died ends as a stopped worker's do, after the comment ``: ended:
unauthorized`` (its reconnection is 401, which stops an ``EventSource``).

A stream ends cleanly after the events of a finished game (the save that finishes a game is
atomic, so once ``GameFinished`` is sent, what follows it is already in the store). Asked again for
a finished game with nothing left to send, the stream answers 204 No Content, which tells an
``EventSource`` to stop reconnecting.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import redis
import redis.asyncio

from service.application.games.use_cases import Games
from service.application.notify.notices import Notice, Notices
from service.live.redis_link import RECONNECT_MAX, RECONNECT_MIN, RedisLink
from service.live.sinks import MAX_BUFFERED, ClientGone, QueueSink, SocketSink
from service.live.streams import (
    ACCOUNT_CHANNEL_PREFIX,
    Envelope,
    Feed,
    LiveConfig,
    Pacer,
    ShuttingDown,
    Stream,
    StreamBody,
    TooManyClientStreams,
    TooManyStreams,
)
from service.live.streams import CHANNEL_PREFIX as STREAM_CHANNEL_PREFIX
from service.persistence.log import LogReader

log = logging.getLogger("cantstop.live")
CHANNEL_PREFIX = STREAM_CHANNEL_PREFIX
HEARTBEAT_CHANNEL = "cantstop:live"  # always subscribed: the connection's pub/sub mode and health
SCAN_PAGE = 1000
SCAN_MAX = 20 * SCAN_PAGE  # beyond this many new notifications, every feed simply re-reads
PING_EVERY, PONG_WAIT = 5.0, 5.0
# The notices are looked at no more often than this: moving their view and reading its newest
# batch are two queries, where the games' log is one, so they keep the scheduler's own pace
# while the games' log is polled every ``poll`` (0.1 s).
NOTICES_POLL = 0.25
STORE_THREADS = 4  # the loop's reads of the store run on these threads
# The bound on an open account stream outliving its token: every TOKEN_CHECK seconds the hub
# reads, in one query per TOKEN_PAGE streams, which of its account streams' tokens are still
# good (revoked: by DELETE /v1/account/tokens/{id}, or by DELETE /v1/account, which revokes
# every token of the account), and ends the others. A stream whose token was revoked, on any
# worker or host, therefore ends within TOKEN_CHECK seconds plus that query's time, while the
# store answers (a sweep that fails is tried again at the next; a notice is never handed on
# unchecked: ``Hub.verify`` ends the streams it cannot check). 8000 streams, the most a worker
# holds, are 16 queries of an indexed key every 2 s.
TOKEN_CHECK = 2.0
TOKEN_PAGE = 500
UNAUTHORIZED_NOTE = b": ended: unauthorized\n\n"
UNCHECKED_NOTE = b": ended: store_unavailable\n\n"


class Hub:
    """One per process: its event loop (a thread, started with the first stream, so after
    gunicorn forks), the feeds and streams, the Redis subscriber and the store poller."""

    def __init__(self, games: Games, link: RedisLink | None, config: LiveConfig) -> None:
        self.games = games
        self.link = link
        self.config = config
        self.pacer = Pacer()  # the feeds' flush gap (on the loop)
        self._lock = threading.Lock()  # the counts, from request threads and the loop
        self._count = 0
        self._per_client: dict[str, int] = {}
        self._live = False
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.notices: Notices | None = None  # the accounts' notices (set by the runtime)
        # On the loop only:
        self._feeds: dict[str, Feed] = {}  # by channel
        self._stamp = -1  # the newest batch of notices the poller has seen (-1: none yet)
        self._notices_polled = 0.0  # when the poller last looked at the notices (monotonic)
        self._watched: frozenset[str] = frozenset()  # the feeds' channels, for publish()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pubsub: Any = None
        self._poke: asyncio.Event | None = None

    # ----------------------------------------------------------------------------- state
    @property
    def live(self) -> bool:
        """True while the Redis subscription is confirmed and healthy."""
        return self._live

    @property
    def open_streams(self) -> int:
        return self._count

    # --------------------------------------------------------------------------- streams
    def stream(
        self, game_id: uuid.UUID, after: int, *, version: int, finished: bool, client: str
    ) -> StreamBody:
        """A stream of the game's events after ``after`` (``version``: the game's now), counted
        against the limits: 503 beyond the worker's, 429 beyond the client's."""
        return self._records_stream(
            f"game {game_id}",
            f"{CHANNEL_PREFIX}{game_id}",
            lambda after, limit: self.games.history(game_id, after=after, limit=limit),
            after,
            version=version,
            finished=finished,
            client=client,
        )

    def tournament_stream(
        self,
        tournament_id: uuid.UUID,
        after: int,
        *,
        version: int,
        finished: bool,
        client: str,
        records: Callable[[int, int], list[dict[str, Any]]],
    ) -> StreamBody:
        """A stream of a tournament's events after version ``after``, as ``records`` serves
        them. Its channel is named as a game's: the store poller hints it from the log's heads
        (a tournament's events are not published to Redis), within ``CANTSTOP_STREAM_CHECK``
        with Redis, ``CANTSTOP_STREAM_POLL`` without."""
        return self._records_stream(
            f"tournament {tournament_id}",
            f"{CHANNEL_PREFIX}{tournament_id}",
            records,
            after,
            version=version,
            finished=finished,
            client=client,
        )

    def _records_stream(
        self,
        name: str,
        channel: str,
        records: Callable[[int, int], list[dict[str, Any]]],
        after: int,
        *,
        version: int,
        finished: bool,
        client: str,
    ) -> StreamBody:
        """A stream of numbered records (a game's events, a tournament's) after ``after``,
        read a page at a time by ``records(after, limit)``."""

        def reader(after: int, limit: int) -> list[Envelope]:
            return [Envelope.from_record(record) for record in records(after, limit)]

        return self._open(
            lambda: Feed(self, channel, version, reader, name=name),
            channel,
            version,
            after,
            finished=finished,
            client=client,
        )

    def account_stream(
        self, account: str, after: int, *, latest: int, client: str, token_id: str | None = None
    ) -> StreamBody:
        """A stream of the account's notices after number ``after`` (``latest``: its newest
        now), counted against the same limits as a game's streams. ``token_id``: the personal
        token it was opened with, whose death (revoked, account closed) ends it."""
        notices = self.notices
        assert notices is not None, "the runtime gives the hub the accounts' notices"
        key = account.lower()
        channel = f"{ACCOUNT_CHANNEL_PREFIX}{key}"

        def reader(after: int, limit: int) -> list[Envelope]:
            return [Envelope.from_notice(n) for n in notices.after(key, after, limit)]

        return self._open(
            lambda: Feed(
                self,
                channel,
                latest,
                reader,
                name=f"account {key}",
                position="id",
                verify_tokens=True,
            ),
            channel,
            latest,
            after,
            finished=False,
            client=client,
            token_id=token_id,
        )

    def _count_in(self, client: str) -> None:
        """Take a place in the counts for a new stream (refused beyond the limits)."""
        limit = self.config.max_per_client
        with self._lock:
            if self._closing:
                raise ShuttingDown("this worker is shutting down; reconnect")
            if self._count >= self.config.max_streams:
                raise TooManyStreams(
                    f"this worker already serves {self._count} streams; retry shortly "
                    "(another worker or host may have room)"
                )
            if limit and self._per_client.get(client, 0) >= limit:
                raise TooManyClientStreams(
                    f"this worker already serves {limit} streams to your address; close one"
                )
            self._count += 1
            self._per_client[client] = self._per_client.get(client, 0) + 1
            if self._thread is None:
                self._start()

    def _open(
        self,
        make_feed: Callable[[], Feed],
        channel: str,
        version: int,
        after: int,
        *,
        finished: bool,
        client: str,
        token_id: str | None = None,
    ) -> StreamBody:
        self._count_in(client)
        holder: dict[str, Stream] = {}

        def make() -> None:
            feed = self._feeds.get(channel)
            if feed is None:
                feed = self._feeds[channel] = make_feed()
                self._watched = frozenset(self._feeds)
                if self._pubsub is not None:
                    self.spawn(self._subscribe(feed))
            else:
                # The store holds ``version`` (read for the new stream): if the feed is behind
                # (another worker or host recorded events this process has not been told of),
                # it reads them once for every stream. Moving ``feed.last`` on instead would
                # make it skip them: the streams already open would lack them until the next
                # event, and for ever if none came.
                feed.hint(version)
            stream = Stream(self, feed, after, finished=finished, client=client)
            stream.token_id = token_id
            feed.streams.add(stream)
            holder["stream"] = stream

        self._run_soon(make).result(timeout=10)
        return StreamBody(self, holder["stream"])

    def release(self, stream: Stream) -> None:
        """From any thread, once per stream: its place in the counts is free."""
        with self._lock:
            if not stream.counted:
                return
            stream.counted = False
            self._count -= 1
            left = self._per_client.get(stream.client, 1) - 1
            if left:
                self._per_client[stream.client] = left
            else:
                self._per_client.pop(stream.client, None)

    def left(self, stream: Stream) -> None:
        """On the loop: a stream ended (or never ran)."""
        self.release(stream)
        feed = stream.feed
        if stream not in feed.streams:
            return
        feed.streams.discard(stream)
        if not feed.streams and self._feeds.get(feed.channel) is feed:
            del self._feeds[feed.channel]
            self._watched = frozenset(self._feeds)
            if self._pubsub is not None:
                self.spawn(self._unsubscribe(feed.channel))

    async def read(self, feed: Feed, after: int, limit: int) -> list[Envelope]:
        """What the store holds of the feed after ``after`` (a page), read on the store's
        threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, feed.reader, after, limit)

    # ------------------------------------------------------------------------ tokens
    async def verify(self, feed: Feed) -> None:
        """On the loop: end the feed's streams whose personal token is no longer good (one
        query for all of them). If the store cannot tell, they end too (a notice is never
        sent to a token not checked since it came); their clients reconnect with
        ``Last-Event-ID`` and miss nothing."""
        await self._check_tokens(
            [s for s in feed.streams if s.token_id is not None], on_error=UNCHECKED_NOTE
        )

    async def _check_tokens(self, streams: list[Stream], *, on_error: bytes | None) -> None:
        """End those of ``streams`` whose token was revoked (closing an account revokes its
        tokens); if the store fails, end them all with ``on_error``, or (None) leave them."""
        if not streams:
            return
        ids = sorted({s.token_id for s in streams if s.token_id is not None})
        loop = asyncio.get_running_loop()
        try:
            alive = await loop.run_in_executor(self._executor, self._alive_tokens, ids)
        except Exception as exc:  # the store may be briefly unavailable
            log.warning(
                "live: checking %d tokens failed: %s: %s", len(ids), type(exc).__name__, exc
            )
            if on_error is not None:
                for stream in streams:
                    stream.end(on_error)
            return
        for stream in streams:
            if stream.token_id not in alive:
                stream.end(UNAUTHORIZED_NOTE)

    def _alive_tokens(self, ids: list[str]) -> set[str]:
        """On a store thread: those of the personal tokens ``ids`` that are not revoked, in
        queries of at most ``TOKEN_PAGE`` ids (by the tokens table's primary key)."""
        credentials = self.games.store.credentials()
        alive: set[str] = set()
        for start in range(0, len(ids), TOKEN_PAGE):
            alive |= credentials.alive(ids[start : start + TOKEN_PAGE])
        return alive

    async def _token_loop(self) -> None:
        """Every ``TOKEN_CHECK`` seconds: the tokens of every account stream of the process
        (the bound on a stream outliving its token, when no notice comes to check it)."""
        while not self._closing:
            await asyncio.sleep(TOKEN_CHECK)
            streams = [
                stream
                for channel, feed in list(self._feeds.items())
                if channel.startswith(ACCOUNT_CHANNEL_PREFIX)
                for stream in feed.streams
                if stream.token_id is not None
            ]
            await self._check_tokens(streams, on_error=None)

    # ------------------------------------------------------------------------ publishing
    def publish(self, game_id: uuid.UUID, records: list[dict[str, Any]]) -> None:
        """The ``Store.on_recorded`` hook: called after the events are stored. Never raises."""
        try:
            if self.link is None and not self._watched:
                return  # no stream in this process and no Redis: no channel name to make
            channel = f"{CHANNEL_PREFIX}{game_id}"
            local = channel in self._watched and self._loop is not None
            to_redis = self.link is not None and self.link.available()
            if not local and not to_redis:
                return  # nobody to tell in this process, and no Redis to tell the others
            envelopes = [Envelope.from_record(record) for record in records]
            if local:
                self.call_soon(self._deliver, channel, envelopes)
            if to_redis:
                self._publish_redis({channel: envelopes})
        except Exception:  # a notification must never turn a recorded action into an error
            log.exception("could not hand on the events of game %s", game_id)

    def publish_notices(self, notices: list[Notice]) -> None:
        """The notices view's listener: called after a batch of notices is stored, in the
        process that wrote it (the scheduler's, most often). Never raises."""
        try:
            by_channel: dict[str, list[Envelope]] = {}
            for notice in notices:
                by_channel.setdefault(f"{ACCOUNT_CHANNEL_PREFIX}{notice.account}", []).append(
                    Envelope.from_notice(notice)
                )
            if self._loop is not None:
                for channel, envelopes in by_channel.items():
                    if channel in self._watched:
                        self.call_soon(self._deliver, channel, envelopes)
            if self.link is not None and self.link.available():
                self._publish_redis(by_channel)
        except Exception:
            log.exception("could not hand on %d notices", len(notices))

    def _deliver(self, channel: str, envelopes: list[Envelope]) -> None:
        feed = self._feeds.get(channel)
        if feed is not None:
            feed.deliver(envelopes)

    def _publish_redis(self, by_channel: dict[str, list[Envelope]]) -> None:
        assert self.link is not None
        try:
            pipe = self.link.client.pipeline(transaction=False)
            for channel, envelopes in by_channel.items():
                for envelope in envelopes:
                    pipe.publish(channel, envelope.text)
            pipe.execute()
        except Exception as exc:  # logged and swallowed: the events are stored
            self.link.failed("publish", exc)
        else:
            self.link.succeeded()

    # ------------------------------------------------------------------------------ loop
    def _start(self) -> None:
        """Start the loop's thread (with the first stream, so after gunicorn forks). Holds
        _lock."""
        self._executor = concurrent.futures.ThreadPoolExecutor(
            STORE_THREADS, thread_name_prefix="cantstop-live-store"
        )
        loop = self._loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            self._poke = asyncio.Event()
            self.spawn(self._poll_loop())
            self.spawn(self._token_loop())
            if self.link is not None:
                self.spawn(self._subscribe_loop())
            loop.call_soon(started.set)
            try:
                loop.run_forever()
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="cantstop-live", daemon=True)
        self._thread.start()
        started.wait(timeout=10)

    def spawn(self, coroutine: Any) -> None:
        """On the loop: run ``coroutine`` as a task, kept until it ends."""
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error("live: a task failed: %s", exc, exc_info=exc)

    def call(self, function: Callable[..., Any], *args: Any) -> None:
        """From any thread: run the coroutine ``function(*args)`` on the loop."""
        self.call_soon(lambda: self.spawn(function(*args)))

    def call_soon(self, function: Callable[..., Any], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: nothing to tell
                loop.call_soon_threadsafe(function, *args)

    def _run_soon(self, function: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """From a request thread: ``function()`` on the loop, its result as a future."""
        assert self._loop is not None
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(function())
            except BaseException as exc:
                future.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return future

    def shutdown(self) -> None:
        """End every stream now and refuse new ones (the worker is stopping). Does not block:
        called in a signal handler."""
        with self._lock:
            self._closing = True
        self.call_soon(self._end_all)

    def _end_all(self) -> None:
        for feed in list(self._feeds.values()):
            for stream in list(feed.streams):
                stream.end()

    def close(self) -> None:
        """End every stream and stop the loop."""
        self.shutdown()
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._stop(), loop).result(timeout=3)
            thread.join(timeout=3)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self.link is not None:
            self.link.close()

    async def _stop(self) -> None:
        self._end_all()
        await asyncio.sleep(0.05)  # the streams write their last bytes and close
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        asyncio.get_running_loop().call_soon(asyncio.get_running_loop().stop)

    def _resync_all(self) -> None:
        for feed in self._feeds.values():
            feed.resync()

    def _set_live(self, live: bool) -> None:
        changed = live != self._live
        self._live = live
        if not changed:
            return
        if live:
            log.info("live: subscribed to redis; streams are pushed")
        else:
            log.warning("live: redis subscription lost; streams poll the store until it returns")
        # Whatever fell between the two modes is in the store: every feed re-reads it.
        self._resync_all()
        if self._poke is not None:
            self._poke.set()

    # ------------------------------------------------------------------------------ Redis
    async def _subscribe(self, feed: Feed) -> None:
        pubsub = self._pubsub
        if pubsub is None:
            return
        try:
            await pubsub.subscribe(feed.channel)  # its confirmation makes the feed re-read
        except Exception as exc:  # the subscriber's loop notices and reconnects
            log.debug("live: subscribing to %s failed: %s", feed.channel, exc)

    async def _unsubscribe(self, channel: str) -> None:
        pubsub = self._pubsub
        if pubsub is None:
            return
        try:
            await pubsub.unsubscribe(channel)
        except Exception as exc:
            log.debug("live: unsubscribing from %s failed: %s", channel, exc)

    async def _subscribe_loop(self) -> None:
        assert self.link is not None
        pause = RECONNECT_MIN
        while not self._closing:
            client = None
            try:
                client = redis.asyncio.Redis.from_url(
                    self.link.url,
                    socket_connect_timeout=self.link.timeout,
                    health_check_interval=0,
                )
                pubsub = client.pubsub()
                await pubsub.subscribe(HEARTBEAT_CHANNEL)
                channels = [feed.channel for feed in self._feeds.values()]
                if channels:
                    await pubsub.subscribe(*channels)
                self._pubsub = pubsub
                await self._listen(pubsub)
                pause = RECONNECT_MIN
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: drop to polling, reconnect later
                log.debug("live: subscriber error %s: %s", type(exc).__name__, exc)
            finally:
                self._pubsub = None
                self._set_live(False)
                if client is not None:
                    with contextlib.suppress(Exception):
                        await client.aclose()
            if self._closing:
                return
            await asyncio.sleep(pause)
            pause = min(RECONNECT_MAX, pause * 2)

    async def _listen(self, pubsub: Any) -> None:
        """Hand on messages until closing; raises when the connection fails or goes silent."""
        next_ping = time.monotonic() + PING_EVERY
        ping_sent: float | None = None
        while not self._closing:
            message = await pubsub.get_message(timeout=1.0)
            now = time.monotonic()
            if message is not None:
                kind = message["type"]
                channel = message["channel"]
                name = channel.decode() if isinstance(channel, bytes) else str(channel)
                if kind == "message":
                    self._hand_on(name, message["data"])
                elif kind == "subscribe":
                    if name == HEARTBEAT_CHANNEL:
                        assert self.link is not None
                        self.link.succeeded()
                        self._set_live(True)
                    else:  # published before the subscription: in the store
                        feed = self._feeds.get(name)
                        if feed is not None:
                            feed.resync()
                elif kind == "pong":
                    ping_sent = None
            if ping_sent is not None and now - ping_sent > PONG_WAIT:
                raise redis.ConnectionError("redis did not answer a PING in time")
            if now >= next_ping:
                await pubsub.ping()
                ping_sent = ping_sent or now
                next_ping = now + PING_EVERY

    def _hand_on(self, channel: str, payload: bytes | str) -> None:
        feed = self._feeds.get(channel)
        if feed is None:
            return
        envelope = Envelope.from_message(payload, feed.position)
        if envelope is None:
            log.warning("live: ignored a malformed message on %s", channel)
            return
        feed.deliver([envelope])

    # ------------------------------------------------------------------------------ store
    async def _poll_loop(self) -> None:
        reader: LogReader | None = None  # None: not following the log (no stream open)
        loop = asyncio.get_running_loop()
        assert self._poke is not None
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                wait = self.config.check if self._live else self.config.poll
                await asyncio.wait_for(self._poke.wait(), timeout=wait)
            self._poke.clear()
            if not self._feeds:
                reader = None
                continue
            try:
                if reader is None:  # every stream reads the store itself once: start from here
                    reader = LogReader(self.games.recorder)
                    await loop.run_in_executor(self._executor, reader.skip_to_end)
                    self._resync_all()
                    continue
                newest = await loop.run_in_executor(self._executor, self._scan, reader)
            except Exception as exc:  # the store may be briefly unavailable: try again later
                log.warning("live: polling the store failed: %s: %s", type(exc).__name__, exc)
                continue
            if newest is None:  # far behind: every feed simply re-reads
                self._resync_all()
                continue
            self._hint(CHANNEL_PREFIX, newest)
            now = time.monotonic()
            if now - self._notices_polled >= NOTICES_POLL:
                self._notices_polled = now
                await self._poll_notices()

    async def _poll_notices(self) -> None:
        """With account streams open: move the notices view on (no scheduler may be running
        beside this process) and hint each account's feed of its newest notice."""
        notices = self.notices
        if notices is None or not any(
            channel.startswith(ACCOUNT_CHANNEL_PREFIX) for channel in self._feeds
        ):
            self._stamp = -1
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, notices.move_on)
            stamp, newest = await loop.run_in_executor(self._executor, notices.changed, self._stamp)
        except Exception as exc:  # the store may be briefly unavailable: try again later
            log.warning("live: polling the notices failed: %s: %s", type(exc).__name__, exc)
            return
        # No baseline yet, or the count went back: the view was rebuilt, and a rebuild counts
        # its batches afresh (fewer, larger ones), so stamps before and after do not compare.
        first = self._stamp < 0 or stamp < self._stamp
        self._stamp = stamp
        if first:  # whatever came before it, each account's feed reads once
            for channel, feed in self._feeds.items():
                if channel.startswith(ACCOUNT_CHANNEL_PREFIX):
                    feed.resync()
            return
        self._hint(ACCOUNT_CHANNEL_PREFIX, newest)

    def _hint(self, prefix: str, newest: Mapping[Any, int]) -> None:
        """Tell each feed here of the newest number the store holds of it (by the key after
        the channel's ``prefix``: a game's id, an account's handle)."""
        for key, number in newest.items():
            feed = self._feeds.get(f"{prefix}{key}")
            if feed is not None:
                feed.hint(number)

    @staticmethod
    def _scan(reader: LogReader) -> dict[uuid.UUID, int] | None:
        """The newest version of each game in what the log recorded since the last scan; None
        when that is more than ``SCAN_MAX`` events (then the reader skips to the end)."""
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
                return newest
            if scanned >= SCAN_MAX:
                reader.skip_to_end()
                return None


__all__ = [
    "MAX_BUFFERED",
    "ClientGone",
    "Envelope",
    "Feed",
    "Hub",
    "LiveConfig",
    "QueueSink",
    "ShuttingDown",
    "SocketSink",
    "Stream",
    "StreamBody",
    "TooManyClientStreams",
    "TooManyStreams",
]
