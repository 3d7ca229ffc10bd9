"""The live fan-out alone, in one process: the CPU a feed spends handing its events to N streams
(service/live/streams.py), per delivery (one event to one stream), on real sockets.

N streams of one feed, each on its own socket pair (the loop writes one end through the
service's ``SocketSink``; the other end is never read: the kernel's buffer holds what is sent),
then ``--events`` events delivered as the hub hands them on: ``--burst`` at a time, each in a
``deliver`` call of its own within one turn of the loop (a local hand-off and Redis's messages
arrive so), the next burst once every stream has all the bytes of the last one (``FIONREAD`` on
the other ends). Timed by ``time.process_time`` (this process's CPU: the figure of merit on a
shared machine whose wall clock drifts), from the first delivery to the last byte received.

Run it on any tree (it uses only ``Feed``, ``Stream``, ``Envelope``, ``LiveConfig`` and
``SocketSink``, which earlier trees have too): ``PYTHONPATH=TREE .venv/bin/python -m
bench.fanout [--streams 1000,5000] [--events 200] [--burst 1,3]``.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import fcntl
import json
import resource
import socket
import termios
import time
from collections.abc import Callable, Coroutine
from typing import Any

from service.live.sinks import SocketSink
from service.live.streams import Envelope, Feed, LiveConfig, Pacer, Stream


class Hub:
    """What the streams need of the process's hub: its loop, no store, no Redis."""

    def __init__(self) -> None:
        self.config = LiveConfig(keepalive=3600.0)
        self.pacer = Pacer()
        self.tasks: set[asyncio.Task[Any]] = set()

    async def read(self, feed: Feed, after: int, limit: int) -> list[Envelope]:
        return list(feed.reader(after, limit))

    async def verify(self, feed: Feed) -> None:
        """Its streams are game streams: no token to check (service/live/hub.py checks an
        account stream's)."""

    def left(self, stream: Stream) -> None:
        stream.feed.streams.discard(stream)

    def release(self, stream: Stream) -> None:
        pass

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def call(self, function: Callable[..., Any], *args: Any) -> None:
        self.spawn(function(*args))

    def call_soon(self, function: Callable[..., Any], *args: Any) -> None:
        asyncio.get_running_loop().call_soon(function, *args)


def waiting(sock: socket.socket) -> int:
    """Bytes received on ``sock`` and not read."""
    buffer = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, buffer)
    return buffer[0]


def envelope(version: int) -> Envelope:
    record = {"version": version, "type": "DiceRolled", "at": "2026-11-29T12:00:00.000000+00:00"}
    record["data"] = {"dice": [1, 2, 3, 4], "player": 0}
    record["hash"] = record["prev_hash"] = "0" * 64
    return Envelope(version, "DiceRolled", json.dumps(record))


async def measure(n: int, events: int, burst: int) -> float:
    """CPU microseconds per delivery."""
    hub = Hub()
    feed = Feed(hub, "bench", 0, lambda after, limit: [], name="bench")
    theirs = []
    for _ in range(n):
        ours, other = socket.socketpair()
        other.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sink = SocketSink()
        await sink.attach(asyncio.get_running_loop(), ours)
        stream = Stream(hub, feed, 0, finished=False, client="bench")
        feed.streams.add(stream)
        hub.spawn(stream.run(sink))
        theirs.append(other)
    await asyncio.sleep(0.2)  # every stream has written its opening and waits
    opened = [waiting(s) for s in theirs]
    frames = [envelope(v) for v in range(1, events + 1)]
    sizes = [len(f"id: {e.version}\nevent: {e.type}\ndata: {e.text}\n\n") for e in frames]
    started = time.process_time()
    sent = 0
    for first in range(0, events, burst):
        batch = frames[first : first + burst]
        for one in batch:
            feed.deliver([one])
        sent += sum(sizes[first : first + burst])
        while any(waiting(s) - o < sent for s, o in zip(theirs, opened, strict=True)):
            await asyncio.sleep(0.005)  # (a poll that costs little of the CPU timed)
    used = time.process_time() - started
    for stream in list(feed.streams):
        stream.end()
    while hub.tasks:
        await asyncio.sleep(0.01)
    for other in theirs:
        other.close()
    return used * 1e6 / (n * events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--streams", default="1000,5000")
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--burst", default="1,3")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # two sockets a stream
    for n in (int(s) for s in args.streams.split(",")):
        for burst in (int(b) for b in args.burst.split(",")):
            per = asyncio.run(measure(n, args.events, burst))
            print(f"{n:,} streams, {burst} event(s) a turn: {per:.2f} µs of CPU per delivery")


if __name__ == "__main__":
    main()
