"""A live stream of one game (``Stream``), the streams of one game in a process (``Feed``), and the
stream view's body (``StreamBody``): how each client sees every event once, in order. They run
on the hub's loop (service/live/hub.py), which says how events reach them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from service.application.errors import ApplicationError
from service.application.notify.notices import Notice
from service.config import env_int, env_number
from service.live.sinks import DRAIN_ABOVE, ClientGone, QueueSink, Sink, SocketSink


class Hub(Protocol):
    """What the streams need of the process's hub (service/live/hub.py)."""

    config: LiveConfig
    pacer: Pacer

    async def read(self, feed: Feed, after: int, limit: int) -> list[Envelope]: ...
    async def verify(self, feed: Feed) -> None: ...
    def left(self, stream: Stream) -> None: ...
    def release(self, stream: Stream) -> None: ...
    def spawn(self, coroutine: Any) -> None: ...
    def call(self, function: Callable[..., Any], *args: Any) -> None: ...
    def call_soon(self, function: Callable[..., Any], *args: Any) -> None: ...


log = logging.getLogger("cantstop.live")

CHANNEL_PREFIX = "cantstop:game:"
ACCOUNT_CHANNEL_PREFIX = "cantstop:account:"
STORE_PAGE = 500
INBOX_LIMIT = 1000  # a stream this far behind drops its inbox and reads the store instead
RETRY_MS = 2000  # the EventSource reconnection delay announced to clients
# A feed hands on to its streams at most once in a gap: what comes meanwhile goes with the next
# write. A busy game's fan-out then costs at most one write per stream per gap, however fast its
# events come, and leaves the worker's CPU to the actions (the streams may lag by this much; an
# event after a quiet spell goes at once). The gap is FLUSH_GAP while the loop's flushes take
# less than FLUSH_BUSY of its time, and grows in proportion past that, to FLUSH_GAP_MAX at most
# (``Pacer``): a write costs the same for one event or ten, so when thousands of streams watch
# games played as fast as bots play, fewer and larger writes keep up where more fall behind.
FLUSH_GAP = 0.1
FLUSH_GAP_MAX = 0.5
FLUSH_BUSY = 0.25
PACE_EVERY = 1.0  # seconds between the pacer's judgements


class Pacer:
    """The flush gap of one loop's feeds, judged every ``PACE_EVERY`` seconds from the share of
    that time the loop spent flushing (docs/scaling.md, "Live streams by the thousand")."""

    def __init__(self, now: float | None = None) -> None:
        self.gap = FLUSH_GAP
        self._since = time.monotonic() if now is None else now
        self._spent = 0.0
        # Held by the loop while it flushes: the worker's request threads wait for it before
        # they begin a request (``wait``, from ``service/server.py``), so the flush's writes,
        # each a system call that lets go of the GIL, get it back at once rather than after a
        # request thread's turn. A request waits one flush at most, and the pacer keeps the
        # flushes to a share of the loop's time.
        self.gate = threading.Lock()

    def wait(self) -> None:
        """On a request thread: return once the loop's flush under way, if any, is done."""
        gate = self.gate
        if gate.locked():
            with gate:
                pass

    def spent(self, seconds: float, now: float) -> None:
        """A flush ended at ``now`` (time.monotonic) after ``seconds``."""
        self._spent += seconds
        elapsed = now - self._since
        if elapsed >= PACE_EVERY:
            busy = self._spent / elapsed
            self.gap = max(FLUSH_GAP, min(FLUSH_GAP_MAX, self.gap * busy / FLUSH_BUSY))
            self._since = now
            self._spent = 0.0


# ---------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class LiveConfig:
    """Stream settings, from the environment (README: Configuration). ``max_streams`` and
    ``max_per_client`` are per worker process: a host of N workers holds N times as many."""

    keepalive: float = 15.0
    poll: float = 0.1
    check: float = 1.0
    max_streams: int = 8000
    max_per_client: int = 500

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LiveConfig:
        env = os.environ if environ is None else environ
        return cls(
            keepalive=env_number(env, "CANTSTOP_STREAM_KEEPALIVE", cls.keepalive, low=0.01),
            poll=env_number(env, "CANTSTOP_STREAM_POLL", cls.poll, low=0.01),
            check=env_number(env, "CANTSTOP_STREAM_CHECK", cls.check, low=0.01),
            max_streams=env_int(env, "CANTSTOP_STREAM_MAX", cls.max_streams, low=1),
            max_per_client=env_int(
                env, "CANTSTOP_STREAM_MAX_PER_CLIENT", cls.max_per_client, low=0
            ),
        )


# -------------------------------------------------------------------------------- envelope
FINAL_TYPES = frozenset({"GameFinished", "Finished"})  # a game's end, a tournament's


@dataclass(frozen=True)
class Envelope:
    """One event as a stream sends it: the served JSON serialized once, and its SSE frame
    encoded once, whatever the number of streams it goes to."""

    version: int
    type: str
    text: str

    @functools.cached_property
    def sse(self) -> bytes:
        """The frame, made on first use: on the hub's loop, not on the action's thread that
        published the event."""
        return f"id: {self.version}\nevent: {self.type}\ndata: {self.text}\n\n".encode()

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Envelope:
        text = orjson.dumps(record).decode("utf-8")
        return cls(int(record["version"]), str(record["type"]), text)

    @classmethod
    def from_notice(cls, notice: Notice) -> Envelope:
        """An account's notice, numbered by the account's own count."""
        return cls(notice.seq, notice.type, notice.text)

    @classmethod
    def from_message(cls, payload: bytes | str, position: str = "version") -> Envelope | None:
        """A message from Redis: a served event (its ``version``), or an account's notice
        (``position`` "id": its number)."""
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
        try:
            data = json.loads(text)
            version, kind = data[position], data["type"]
        except (ValueError, TypeError, KeyError):
            return None
        if not isinstance(version, int) or not isinstance(kind, str) or "\n" in text:
            return None
        return cls(version, kind, text)

    @property
    def final(self) -> bool:
        return self.type in FINAL_TYPES


# ---------------------------------------------------------------------------------- streams
class TooManyStreams(ApplicationError):
    code = "too_many_streams"


class TooManyClientStreams(ApplicationError):
    code = "too_many_client_streams"


class ShuttingDown(ApplicationError):
    code = "shutting_down"


class Stream:
    """One client's stream of one game: the events after ``after``, then what comes, once each,
    in order. Runs as a task on the hub's loop."""

    def __init__(
        self, hub: Hub, feed: Feed, after: int, *, finished: bool, client: str, head: bytes = b""
    ) -> None:
        self.hub = hub
        self.feed = feed
        self.after = after
        self.finished = finished
        self.client = client
        self.head = head
        self.sink: Sink | None = None
        self.last = after  # the newest version sent
        self.sent_at = 0.0  # when the last bytes were written (time.monotonic)
        # True while the task waits with nothing of its own to send: the feed may then write
        # the next events on the sink itself (``Feed.flush``), with no wake-up of the task.
        self.direct = False
        self._inbox: deque[Envelope] = deque()
        self._gap = False
        self._wake = asyncio.Event()
        self._ended = False
        self._note = b""  # written last when the stream is ended on purpose (``end``)
        self.counted = True  # held a place in the hub's counts until released
        # An account stream's personal token (its id), checked again by the hub before the
        # stream is sent anything and every TOKEN_CHECK seconds (service/live/hub.py): the
        # stream ends once the token is revoked or its account closed. None: a public stream.
        self.token_id: str | None = None

    # called on the loop by the feed
    def offer(self, envelopes: list[Envelope]) -> None:
        """Events for the task to send itself (it is busy, behind, or they end the game)."""
        self.direct = False  # what follows must wait behind these
        if len(self._inbox) + len(envelopes) > INBOX_LIMIT:
            self._inbox.clear()
            self._gap = True
        else:
            self._inbox.extend(envelopes)
        self._wake.set()

    def dropped(self) -> None:
        """The feed's write found the client gone or not reading: the task ends the stream."""
        self.direct = False
        self._ended = True
        self._wake.set()

    def end(self, note: bytes = b"") -> None:
        """Stop now, sending nothing more but ``note`` (an SSE comment saying why): the worker
        is stopping (the client reconnects elsewhere), or the stream's token died (its
        reconnection is refused)."""
        self.direct = False
        self._ended = True
        self._note = self._note or note
        self._wake.set()

    async def _pages(self, after: int) -> AsyncIterator[list[Envelope]]:
        """Everything stored of the feed after ``after``, a page at a time as it is written."""
        while True:
            page = await self.hub.read(self.feed, after, STORE_PAGE)
            yield page
            if len(page) < STORE_PAGE:
                return
            after = page[-1].version

    async def run(self, sink: Sink) -> None:
        self.sink = sink
        try:
            await self._run(sink)
            if self._note:
                sink.write(self._note)
        except ClientGone:
            pass
        except ApplicationError as exc:  # the store failed mid-stream: say why, and end
            log.warning("live: stream of %s ended: %s", self.feed.name, exc.detail)
            with contextlib.suppress(ClientGone):
                sink.write(f": ended: {exc.code}\n\n".encode())
        except Exception:
            log.exception("live: stream of %s failed", self.feed.name)
        finally:
            sink.close()
            self.hub.left(self)

    async def _run(self, sink: Sink) -> None:
        keepalive = self.hub.config.keepalive
        if self.head:
            sink.write(self.head)
        sink.write(
            f"retry: {RETRY_MS}\n: cantstop {self.feed.name} after {self.after}\n\n".encode()
        )
        self.last, ended = await self._from_store(sink, self.after, self.finished)
        self.sent_at = time.monotonic()
        gone = asyncio.ensure_future(sink.gone.wait())
        try:
            while True:
                if ended:
                    # The save that finished the game is atomic: what follows GameFinished
                    # is stored.
                    self.last, _ = await self._from_store(sink, self.last, True)
                    sink.write(b": game over\n\n")
                    return
                if not self._wake.is_set():
                    # Nothing of its own to send: until the next wake-up, the feed writes
                    # what comes straight on the sink (the common case, and the cheap one).
                    self.direct = True
                    waiting = asyncio.ensure_future(self._wake.wait())
                    done, _ = await asyncio.wait(
                        {waiting, gone},
                        timeout=max(0.0, self.sent_at + keepalive - time.monotonic()),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    waiting.cancel()
                    self.direct = False
                    if gone in done:
                        return
                if self._ended:
                    return
                self._wake.clear()
                envelopes, gap = list(self._inbox), self._gap
                self._inbox.clear()
                self._gap = False
                last = self.last
                for envelope in envelopes:
                    if envelope.version <= last:
                        continue  # already sent
                    if envelope.version > last + 1:
                        gap = True  # something was missed: the store has it
                        break
                    sink.write(envelope.sse)
                    last = self.last = envelope.version
                    self.sent_at = time.monotonic()
                    ended = ended or envelope.final
                if gap:
                    self.last, ended = await self._from_store(sink, last, ended)
                if time.monotonic() >= self.sent_at + keepalive:
                    sink.write(b": keep-alive\n\n")
                    self.sent_at = time.monotonic()
        finally:
            self.direct = False
            gone.cancel()

    async def _from_store(self, sink: Sink, last: int, ended: bool) -> tuple[int, bool]:
        """Send what the store holds after ``last``, a page at a time, at the client's pace:
        a long history is never all waiting in memory for a slow reader."""
        async for page in self._pages(last):
            if self.token_id is not None:  # read after the token was last checked: again
                await self.hub.verify(self.feed)
            if self._ended:
                break
            for envelope in page:
                if envelope.version != last + 1:
                    continue
                sink.write(envelope.sse)
                last = self.last = envelope.version
                self.sent_at = time.monotonic()
                ended = ended or envelope.final
                if sink.pending() > DRAIN_ABOVE:
                    await sink.drained()
        return last, ended


Reader = Callable[[int, int], list[Envelope]]
"""What a feed reads from the store: (after, limit) -> the next envelopes, in order."""


class Feed:
    """The streams of one game, or of one account's notices, in this process, and the newest
    number handed to them. Either is numbered 1, 2, 3… without gaps (a game's versions, an
    account's notices), which is how a stream knows it missed something."""

    def __init__(
        self,
        hub: Hub,
        channel: str,
        version: int,
        reader: Reader,
        *,
        name: str,
        position: str = "version",
        verify_tokens: bool = False,
    ) -> None:
        self.hub = hub
        self.channel = channel  # also its key in the hub
        self.name = name  # for logs and the stream's first comment: "game <id>"
        self.reader = reader
        self.position = position  # the number's field in a Redis message
        # An account's feed: what it hands on waits for its streams' tokens to be checked
        # (``_verified_flush``).
        self.verify_tokens = verify_tokens
        self._verifying = False
        self.last = version
        self.streams: set[Stream] = set()
        self._reading = False
        self._again = False
        self._ready: list[Envelope] = []  # handed on at the next flush
        self._flushed = 0.0  # when the last flush began (time.monotonic)

    def deliver(self, envelopes: list[Envelope]) -> None:
        """New events (local, or from Redis): handed on in order, each once; a gap is read from
        the store, once for every stream. Everything delivered in one turn of the loop (or
        within the pacer's gap of the last flush) goes to each stream in one write (``flush``)."""
        fresh = self._ready
        first = not fresh
        for envelope in sorted(envelopes, key=lambda e: e.version):
            if envelope.version <= self.last:
                continue
            if envelope.version > self.last + 1:
                self.hint(envelope.version)
                break
            fresh.append(envelope)
            self.last = envelope.version
        if fresh and first:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on a loop (a test's direct call): at once
                self.flush()
                return
            wait = self._flushed + self.hub.pacer.gap - time.monotonic()
            if wait > 0:
                loop.call_later(wait, self.flush)
            else:
                loop.call_soon(self.flush)

    def flush(self) -> None:
        """Hand on what was delivered this turn. The fan-out's cost per stream is here, so it
        is kept small: the frames are joined once for all streams, and a stream whose task
        waits with nothing of its own to send (``Stream.direct``) and is exactly where these
        begin gets them in one write on its sink, without waking its task. Any other stream
        (busy, behind, or ahead) is offered them, and its task sorts them out."""
        ready = self._ready
        if not ready:
            return
        if self.verify_tokens:
            if not self._verifying:  # (one under way hands these on too)
                self._verifying = True
                self.hub.spawn(self._verified_flush())
            return
        self._ready = []
        self._hand_on(ready)

    async def _verified_flush(self) -> None:
        """An account's notices go to its streams only once their tokens were checked after
        the notices came (``Hub.verify``: one query for all the feed's streams, not one per
        stream): a stream whose token was revoked, or whose account was closed, before a
        notice was made ends without it. What comes during a check waits for the next."""
        try:
            while self._ready:
                taken = len(self._ready)
                await self.hub.verify(self)
                ready = self._ready[:taken]
                del self._ready[:taken]
                self._hand_on(ready)
        finally:
            self._verifying = False

    def _hand_on(self, ready: list[Envelope]) -> None:
        self._flushed = time.monotonic()
        first = ready[0].version - 1
        final = any(envelope.final for envelope in ready)
        data = ready[0].sse if len(ready) == 1 else b"".join(e.sse for e in ready)
        newest = ready[-1].version
        gate = self.hub.pacer.gate
        gate.acquire()
        now = time.monotonic()
        try:
            self._write(data, first, newest, final, ready, now)
        finally:
            gate.release()
        ended = time.monotonic()
        self.hub.pacer.spent(ended - now, ended)

    def _write(
        self, data: bytes, first: int, newest: int, final: bool, ready: list[Envelope], now: float
    ) -> None:
        for stream in self.streams:
            sink = stream.sink
            if stream.direct and stream.last == first and not final and sink is not None:
                try:
                    sink.write(data)
                except ClientGone:
                    stream.dropped()
                    continue
                stream.last = newest
                stream.sent_at = now
            elif stream.last < newest:  # (a stream that already sent them has nothing to do)
                stream.offer(ready)

    def hint(self, version: int) -> None:
        """The store holds ``version`` of the game."""
        if version > self.last:
            self.resync()

    def resync(self) -> None:
        """Read the store once: something may have been missed."""
        if self._reading:
            self._again = True
            return
        self._reading = True
        self.hub.spawn(self._read())

    async def _read(self) -> None:
        try:
            while True:
                self._again = False
                page = await self.hub.read(self, self.last, STORE_PAGE)
                self.deliver(page)
                if len(page) < STORE_PAGE and not self._again:
                    return
        except Exception as exc:  # the streams read the store themselves at their next gap
            log.warning("live: reading %s for its streams failed: %s", self.name, exc)
        finally:
            self._reading = False


# -------------------------------------------------------------------------------------- hub
class StreamBody:
    """What the stream view answers: a WSGI body for servers that iterate it (the request's
    thread then waits on the queue), or, under the service's worker, a stream whose socket is
    handed to the loop (``adopt``) and whose body is never iterated."""

    def __init__(self, hub: Hub, stream: Stream) -> None:
        self.hub = hub
        self.stream = stream
        self.adopted = False
        self._sink: QueueSink | None = None
        self._closed = False

    def adopt(self, sock: socket.socket, head: bytes) -> None:
        """Serve the stream on ``sock`` (a duplicate of the connection's socket, already the
        loop's), writing ``head`` (the HTTP status line and headers) first."""
        self.adopted = True
        self.stream.head = head
        self.hub.call(self._adopted, sock)

    async def _adopted(self, sock: socket.socket) -> None:
        sink = SocketSink()
        try:
            await sink.attach(asyncio.get_running_loop(), sock)
        except OSError:
            sock.close()
            self.hub.left(self.stream)
            return
        await self.stream.run(sink)

    def __iter__(self) -> Iterator[bytes]:
        sink = self._sink = QueueSink()
        self.hub.call(self.stream.run, sink)
        while True:
            chunk = sink.take()
            if chunk == QueueSink.END:
                return
            yield chunk

    def close(self) -> None:
        """The server is done with the body (the client hung up, or it was handed over)."""
        if self._closed or self.adopted:
            return
        self._closed = True
        self.hub.release(self.stream)  # at once: the place is free for the next request
        sink = self._sink
        if sink is None:  # never iterated: the stream never ran
            self.hub.call_soon(self.hub.left, self.stream)
        else:
            self.hub.call_soon(sink.gone.set)
