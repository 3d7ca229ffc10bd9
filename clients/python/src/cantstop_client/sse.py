"""Server-sent events: a parser of the WHATWG format, and a stream that reconnects.

The service's streams (``/v1/games/{id}/stream``, ``/v1/account/stream``) send ``retry: <ms>``
once, comments (``: keep-alive`` every 15 s when idle), and messages of ``id:``, ``event:`` and
``data:`` lines ended by a blank line. A stream that drops is opened again after the server's
``retry`` delay with ``Last-Event-ID`` set to the last ``id`` received, and the server sends what
was missed first: nothing is lost and nothing comes twice.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import httpx

from cantstop_client.errors import ApiError, TransportError

T = TypeVar("T")


@dataclass(frozen=True)
class ServerSentEvent:
    event: str  # "message" when the server named no type
    data: str
    id: str | None  # the last event id as of this message


class Parser:
    """Feed it lines (without their line ends); it returns a message at each blank line that
    ends one. ``last_event_id`` and ``retry_ms`` are kept as the format says: an ``id`` holding
    NUL is ignored, ``retry`` only counts when it is all digits, comments are skipped."""

    def __init__(self, last_event_id: str | None = None) -> None:
        self.last_event_id = last_event_id
        self.retry_ms: int | None = None
        self.last_comment: str | None = None
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> ServerSentEvent | None:
        if line == "":
            if not self._data:
                self._event = ""
                return None
            message = ServerSentEvent(
                self._event or "message", "\n".join(self._data), self.last_event_id
            )
            self._event, self._data = "", []
            return message
        if line.startswith(":"):
            self.last_comment = line[1:].strip()  # keep-alives, greetings, "game over"
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = int(value)
        return None


class EventStream(Generic[T]):
    """An iterator over a stream's messages, each turned into ``T`` by ``convert`` (which may
    return None to skip one). It reconnects on a drop with ``Last-Event-ID``, waiting the
    server's ``retry`` delay, longer (doubling, up to ``max_delay``) while reconnecting fails,
    and what the server's ``Retry-After`` says on 429 and 503. It gives up, raising
    ``TransportError`` or the last ``ApiError``, after ``max_failures`` failed attempts in a row
    (None: never). A 4xx other than 429 is raised at once (a revoked token, an unknown game). It
    ends when the server answers 204 (the per-game stream of a finished game) or when ``close()``
    is called, from any thread. Close a stream you stop reading (or use it in a ``with``).

    ``on_open`` is called each time the stream is (re)opened, before its first message: the
    moment to catch up on what happened before it (a bot's games in progress, challenges
    pending), so that nothing falls between the catch-up and the stream.

    A read that waits ``read_timeout`` seconds with nothing, not even a keep-alive, counts as a
    drop: the connection is presumed dead and opened again.
    """

    def __init__(
        self,
        http: httpx.Client,
        path: str,
        convert: Callable[[ServerSentEvent], T | None],
        *,
        headers: dict[str, str],
        last_event_id: str | None = None,
        read_timeout: float = 45.0,
        max_failures: int | None = 10,
        max_delay: float = 30.0,
        on_open: Callable[[], None] | None = None,
    ) -> None:
        self._http = http
        self._path = path
        self._convert = convert
        self._headers = headers
        self.last_event_id = last_event_id
        self._read_timeout = read_timeout
        self._max_failures = max_failures
        self._max_delay = max_delay
        self._on_open = on_open
        self._closed = threading.Event()
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self.connections = 0  # how many times the stream was opened (1 + reconnections)
        self._iterator = self._messages()

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        return next(self._iterator)

    def __enter__(self) -> EventStream[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop: the iteration ends (a read in progress in another thread is woken)."""
        self._closed.set()
        with self._lock:
            sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        # Close the generator here and now, so its connection goes back to the pool in this
        # thread: left to the garbage collector, it would be closed whenever a collection
        # runs, perhaps inside another request holding the pool's lock (a deadlock). While
        # another thread is iterating, that thread wakes on the shut socket and closes it.
        with contextlib.suppress(ValueError):  # "generator already executing"
            self._iterator.close()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def _messages(self) -> Generator[T, None, None]:
        failures = 0
        retry_ms = 2000  # until the server says otherwise
        while not self._closed.is_set():
            wait: float | None = None
            try:
                headers = dict(self._headers, Accept="text/event-stream")
                if self.last_event_id is not None:
                    headers["Last-Event-ID"] = self.last_event_id
                timeout = httpx.Timeout(10.0, read=self._read_timeout)
                with self._http.stream("GET", self._path, headers=headers, timeout=timeout) as r:
                    if r.status_code == 204:
                        return  # nothing more will come (a finished game's stream)
                    if r.status_code in (429, 503):
                        r.read()
                        raise ApiError.from_response(r)
                    if r.is_error:
                        r.read()
                        raise ApiError.from_response(r)
                    self.connections += 1
                    self._remember_socket(r)
                    if self._on_open is not None:
                        self._on_open()
                    parser = Parser(self.last_event_id)
                    parser_received = 0
                    try:
                        for line in r.iter_lines():
                            message = parser.feed(line)
                            if parser.retry_ms is not None:
                                retry_ms = parser.retry_ms
                            if message is None:
                                continue
                            failures = 0  # the stream works: a later drop starts afresh
                            parser_received += 1
                            self.last_event_id = message.id
                            item = self._convert(message)
                            if item is not None:
                                yield item
                    finally:
                        self._remember_socket(None)
                if parser.last_comment == "game over":
                    return  # the per-game stream of a game that just finished: all was sent
                # The server ended the stream (a restart, a deploy): reconnect. An end before
                # any message counts as a failure, so a server that keeps doing it is backed off.
                if parser_received == 0:
                    failures += 1
                    if self._max_failures is not None and failures >= self._max_failures:
                        raise TransportError(f"the stream {self._path} keeps ending at once")
            except ApiError as exc:
                if exc.status not in (429, 503):
                    raise
                failures += 1
                if self._max_failures is not None and failures >= self._max_failures:
                    raise
                wait = exc.retry_after
            except httpx.TransportError as exc:
                if self._closed.is_set():
                    return
                failures += 1
                if self._max_failures is not None and failures >= self._max_failures:
                    raise TransportError(f"the stream {self._path} keeps failing: {exc!r}") from exc
            if wait is None:
                base = retry_ms / 1000 * (2 ** max(failures - 1, 0))
                wait = min(self._max_delay, base) * random.uniform(0.8, 1.0)
            self._closed.wait(wait)

    def _remember_socket(self, response: httpx.Response | None) -> None:
        sock = None
        if response is not None:
            stream = response.extensions.get("network_stream")
            get = getattr(stream, "get_extra_info", None)
            sock = get("socket") if get is not None else None
        with self._lock:
            self._socket = sock if isinstance(sock, socket.socket) else None
        if response is not None and self._closed.is_set():
            self.close()  # closed while this connection was being opened
