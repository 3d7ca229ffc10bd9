"""Where a live stream's bytes go: the client's socket, handed to the hub's loop (``SocketSink``),
or a queue that a request's thread reads as a WSGI body where the socket cannot be handed over
(``QueueSink``). Both refuse to hold more than ``MAX_BUFFERED`` bytes for a client that does not
read: the stream ends there instead of keeping its events in memory."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import deque

MAX_BUFFERED = 256 * 1024  # bytes waiting for a client that does not read: then it is dropped
# A stream catching up from the store writes faster than a client reads: past DRAIN_ABOVE bytes
# waiting, it waits for the client to read half of them, for DRAIN_WAIT seconds at most.
DRAIN_ABOVE = 64 * 1024
DRAIN_WAIT = 60.0


class ClientGone(Exception):
    """The client hung up, or stopped reading for too long: the stream ends."""


class Sink:
    """Where a stream's bytes go. ``write`` raises ClientGone; ``gone`` is set when the client
    hung up (or the stream must end for another reason)."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def pending(self) -> int:
        """Bytes written and not yet taken by the client."""
        raise NotImplementedError

    async def drained(self) -> None:
        """Wait until the client has read most of what waits for it (ClientGone if it hangs up
        or reads nothing for ``DRAIN_WAIT`` seconds)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_WAIT
        while self.pending() > DRAIN_ABOVE // 2:
            if self.gone.is_set():
                raise ClientGone("hung up")
            if loop.time() > deadline:
                raise ClientGone("does not read")
            await asyncio.sleep(0.01)

    def close(self) -> None:
        raise NotImplementedError


class _SocketProtocol(asyncio.Protocol):
    def __init__(self, sink: SocketSink) -> None:
        self.sink = sink

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.sink.transport = transport

    def data_received(self, data: bytes) -> None:
        pass  # a client says nothing more on a stream: anything it sends is ignored

    def eof_received(self) -> bool:
        self.sink.gone.set()
        return False  # close the connection

    def connection_lost(self, exc: Exception | None) -> None:
        self.sink.gone.set()


class SocketSink(Sink):
    """A client's socket, handed over by the request's thread: the loop writes the answer."""

    def __init__(self) -> None:
        super().__init__()
        self.transport: asyncio.Transport | None = None

    async def attach(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        await loop.connect_accepted_socket(lambda: _SocketProtocol(self), sock=sock)

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing() or self.gone.is_set():
            raise ClientGone("hung up")
        if transport.get_write_buffer_size() > MAX_BUFFERED:
            raise ClientGone("does not read")
        transport.write(data)

    def pending(self) -> int:
        transport = self.transport
        return 0 if transport is None else transport.get_write_buffer_size()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # what was written is sent first


class QueueSink(Sink):
    """A queue that the request's thread reads (a WSGI body): where the socket cannot be handed
    over. Bounded as a socket's buffer is."""

    END = b""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()
        self._chunks: deque[bytes] = deque()
        self._size = 0

    def write(self, data: bytes) -> None:
        if self.gone.is_set():
            raise ClientGone("hung up")
        with self._cond:
            if self._size + len(data) > MAX_BUFFERED:
                raise ClientGone("does not read")
            self._chunks.append(data)
            self._size += len(data)
            self._cond.notify()

    def pending(self) -> int:
        return self._size

    def close(self) -> None:
        with self._cond:
            self._chunks.append(self.END)
            self._cond.notify()

    def take(self) -> bytes:
        """The next chunk (END once the stream is over), waiting as long as it takes."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._chunks))
            chunk = self._chunks.popleft()
            self._size -= len(chunk)
            return chunk
