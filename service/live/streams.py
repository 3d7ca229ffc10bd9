"""A live stream of one game (``Stream``), the streams of one game in a process (``Feed``), and the
stream view's body (``StreamBody``): how each client sees every event once, in order. They run
on the hub's loop (service/live/hub.py), which says how events reach them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
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

    async def read(self, feed: Feed, after: int, limit: int) -> list[Envelope]: ...
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


# ---------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class LiveConfig:
    """Stream settings, from the environment (README: Configuration). ``max_streams`` and
    ``max_per_client`` are per worker process: a host of N workers holds N times as many."""

    keepalive: float = 15.0
    poll: float = 0.25
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
    """One event as a stream sends it: the served JSON, serialized once."""

    version: int
    type: str
    text: str

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

    def frame(self) -> bytes:
        return f"id: {self.version}\nevent: {self.type}\ndata: {self.text}\n\n".encode()


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
        self._inbox: deque[Envelope] = deque()
        self._gap = False
        self._wake = asyncio.Event()
        self._ended = False
        self.counted = True  # held a place in the hub's counts until released

    # called on the loop by the feed
    def offer(self, envelopes: list[Envelope]) -> None:
        if len(self._inbox) + len(envelopes) > INBOX_LIMIT:
            self._inbox.clear()
            self._gap = True
        else:
            self._inbox.extend(envelopes)
        self._wake.set()

    def end(self) -> None:
        """Stop now (the worker is stopping): the client reconnects elsewhere."""
        self._ended = True
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
        last, ended = await self._from_store(sink, self.after, self.finished)
        quiet_until = time.monotonic() + keepalive
        gone = asyncio.ensure_future(sink.gone.wait())
        try:
            while True:
                if ended:
                    # The save that finished the game is atomic: what follows GameFinished
                    # is stored.
                    last, _ = await self._from_store(sink, last, True)
                    sink.write(b": game over\n\n")
                    return
                waiting = asyncio.ensure_future(self._wake.wait())
                done, _ = await asyncio.wait(
                    {waiting, gone},
                    timeout=max(0.0, quiet_until - time.monotonic()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                waiting.cancel()
                if gone in done or self._ended:
                    return
                self._wake.clear()
                envelopes, gap = list(self._inbox), self._gap
                self._inbox.clear()
                self._gap = False
                sent = False
                for envelope in envelopes:
                    if envelope.version <= last:
                        continue  # already sent
                    if envelope.version > last + 1:
                        gap = True  # something was missed: the store has it
                        break
                    sink.write(envelope.frame())
                    last, sent = envelope.version, True
                    ended = ended or envelope.final
                if gap:
                    before = last
                    last, ended_now = await self._from_store(sink, last, ended)
                    ended, sent = ended_now, sent or last > before
                if sent:
                    quiet_until = time.monotonic() + keepalive
                elif time.monotonic() >= quiet_until:
                    sink.write(b": keep-alive\n\n")
                    quiet_until = time.monotonic() + keepalive
        finally:
            gone.cancel()

    async def _from_store(self, sink: Sink, last: int, ended: bool) -> tuple[int, bool]:
        """Send what the store holds after ``last``, a page at a time, at the client's pace:
        a long history is never all waiting in memory for a slow reader."""
        async for page in self._pages(last):
            for envelope in page:
                if envelope.version != last + 1:
                    continue
                sink.write(envelope.frame())
                last = envelope.version
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
    ) -> None:
        self.hub = hub
        self.channel = channel  # also its key in the hub
        self.name = name  # for logs and the stream's first comment: "game <id>"
        self.reader = reader
        self.position = position  # the number's field in a Redis message
        self.last = version
        self.streams: set[Stream] = set()
        self._reading = False
        self._again = False

    def deliver(self, envelopes: list[Envelope]) -> None:
        """New events (local, or from Redis): handed on in order, each once; a gap is read from
        the store, once for every stream."""
        fresh: list[Envelope] = []
        for envelope in sorted(envelopes, key=lambda e: e.version):
            if envelope.version <= self.last:
                continue
            if envelope.version > self.last + 1:
                self.hint(envelope.version)
                break
            fresh.append(envelope)
            self.last = envelope.version
        if fresh:
            for stream in self.streams:
                stream.offer(fresh)

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
