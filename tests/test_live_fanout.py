"""The fan-out of a feed to its streams (service/live/streams.py): everything delivered in one
turn of the loop reaches a caught-up stream in one write, without waking its task; whatever the
deliveries (duplicates, gaps, out of order, split across turns, while a stream is still
catching up from the store), every stream sends each event once, in order; a client that
cannot take a direct write is dropped.

A busy feed writes at most once per gap, which its hub's pacer sets from the loop's load.

The feed and streams run on a real asyncio loop, over a store of synthetic events that grows as
events are "recorded"; the hub is bench/fanout.py's small one, which implements what the
streams need of it (the ``Hub`` protocol of service/live/streams.py), and the sink records each
write as it comes (the ``Sink`` interface of service/live/sinks.py).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.fanout import Hub
from service.live import streams as streams_module
from service.live.sinks import ClientGone, Sink
from service.live.streams import Envelope, Feed, LiveConfig, Pacer, Stream


class LoopHub(Hub):
    """What the streams need of a hub, on the running loop (bench/fanout.py's), with each read
    of the store taking a turn of the loop and the streams that ended kept."""

    def __init__(self) -> None:
        super().__init__()
        self.config = LiveConfig(keepalive=30.0)
        self.gone: list[Stream] = []

    async def read(self, feed: Feed, after: int, limit: int) -> list[Envelope]:
        await asyncio.sleep(0)  # a read of the store takes at least a turn of the loop
        return feed.reader(after, limit)

    def left(self, stream: Stream) -> None:
        self.gone.append(stream)
        super().left(stream)


class RecordingSink(Sink):
    """Each write, as written; ``full``: the client takes nothing more (ClientGone)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.full = False
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.full or self.gone.is_set():
            raise ClientGone("does not read")
        self.writes.append(data)

    def pending(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True

    def versions(self) -> list[int]:
        return [
            int(line[4:]) for line in b"".join(self.writes).split(b"\n") if line.startswith(b"id: ")
        ]

    def event_writes(self) -> list[bytes]:
        return [w for w in self.writes if w.startswith(b"id: ")]


def envelope(version: int) -> Envelope:
    kind = "MovePlayed"
    return Envelope(version, kind, json.dumps({"version": version, "type": kind}))


class Store:
    """The events recorded so far (1…head), read as a feed reads them."""

    def __init__(self, head: int) -> None:
        self.head = head

    def read(self, after: int, limit: int) -> list[Envelope]:
        return [envelope(v) for v in range(after + 1, min(self.head, after + limit) + 1)]


async def until(check: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


def holds(sink: RecordingSink, count: int) -> Callable[[], bool]:
    return lambda: len(sink.versions()) >= count


def open_stream(hub: LoopHub, feed: Feed, after: int) -> tuple[Stream, RecordingSink]:
    stream = Stream(hub, feed, after, finished=False, client="test")
    feed.streams.add(stream)
    sink = RecordingSink()
    hub.spawn(stream.run(sink))
    return stream, sink


def test_what_is_delivered_in_one_turn_reaches_a_caught_up_stream_in_one_write() -> None:
    async def run() -> None:
        hub, store = LoopHub(), Store(0)
        feed = Feed(hub, "test", 0, store.read, name="test")
        stream, sink = open_stream(hub, feed, 0)
        await until(lambda: stream.direct, "the stream to wait")
        store.head = 3
        # A local hand-off, then Redis's three messages, the first two again: one turn.
        feed.deliver([envelope(1), envelope(2)])
        for version in (1, 2, 3):
            feed.deliver([envelope(version)])
        await until(lambda: sink.versions() == [1, 2, 3], "the three events")
        assert sink.event_writes() == [envelope(1).sse + envelope(2).sse + envelope(3).sse]
        assert stream.direct  # written by the feed: the task was not woken
        store.head = 4
        feed.deliver([envelope(4)])  # the next turn: a write of its own
        await until(lambda: sink.versions() == [1, 2, 3, 4], "the fourth event")
        assert len(sink.event_writes()) == 2
        stream.end()
        await until(lambda: not hub.tasks, "the stream to end")

    asyncio.run(run())


def loop_busy(pacer: Pacer, share: float, seconds: float, start: float) -> float:
    """``seconds`` of a loop that flushes ``share`` of its time, in flushes of 10 ms."""
    now, flush = start, 0.01
    for _ in range(round(seconds * share / flush)):
        now += flush / share
        pacer.spent(flush, now)
    return now


def test_the_flush_gap_grows_while_flushes_take_the_loop_and_comes_back_when_they_do_not() -> None:
    pacer = Pacer(now=0.0)
    now = loop_busy(pacer, streams_module.FLUSH_BUSY / 2, 3.0, 0.0)
    assert pacer.gap == streams_module.FLUSH_GAP  # a loop with time to spare: the least gap
    now = loop_busy(pacer, 0.8, 1.5, now)  # one judgement, of this second only
    grown = pacer.gap
    assert streams_module.FLUSH_GAP < grown < streams_module.FLUSH_GAP_MAX
    assert grown == pytest.approx(streams_module.FLUSH_GAP * 0.8 / streams_module.FLUSH_BUSY, 0.1)
    now = loop_busy(pacer, 0.8, 5.0, now)
    assert pacer.gap == streams_module.FLUSH_GAP_MAX  # never more
    loop_busy(pacer, 0.01, 3.0, now)
    assert pacer.gap == streams_module.FLUSH_GAP  # the loop is idle again: the least gap


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 0.5), st.floats(0.0, 2.0)), max_size=60))
def test_the_flush_gap_stays_within_its_bounds(flushes: list[tuple[float, float]]) -> None:
    pacer, now = Pacer(now=0.0), 0.0
    for seconds, after in flushes:
        now += seconds + after
        pacer.spent(seconds, now)
        assert streams_module.FLUSH_GAP <= pacer.gap <= streams_module.FLUSH_GAP_MAX


def test_a_feed_waits_its_pacers_gap_between_flushes() -> None:
    """After a quiet spell an event goes at once; what follows within the pacer's gap of that
    write, over several turns of the loop, goes together in the next one, not before."""

    async def run() -> None:
        hub, store = LoopHub(), Store(0)
        hub.pacer.gap = 0.3
        feed = Feed(hub, "test", 0, store.read, name="test")
        stream, sink = open_stream(hub, feed, 0)
        await until(lambda: stream.direct, "the stream to wait")
        store.head = 3
        feed.deliver([envelope(1)])
        await until(lambda: sink.versions() == [1], "the first event, at once")
        written = time.monotonic()
        feed.deliver([envelope(2)])
        for _ in range(3):  # a few turns of the loop, well within the gap
            await asyncio.sleep(0)
        feed.deliver([envelope(3)])
        assert sink.versions() == [1]  # held back: within the gap
        await until(lambda: sink.versions() == [1, 2, 3], "the next two")
        assert time.monotonic() - written >= 0.3 - 0.01
        assert sink.event_writes() == [envelope(1).sse, envelope(2).sse + envelope(3).sse]
        stream.end()
        await until(lambda: not hub.tasks, "the stream to end")

    asyncio.run(run())


class SlowSink(RecordingSink):
    """A write that takes a while (a loaded loop's ``send``), noting whether a request thread
    waiting on the pacer had gone on meanwhile."""

    def __init__(self, went_on: threading.Event) -> None:
        super().__init__()
        self.went_on = went_on
        self.seen: list[bool] = []

    def write(self, data: bytes) -> None:
        if data.startswith(b"id: "):  # an event's (not the stream's opening lines)
            time.sleep(0.02)
            self.seen.append(self.went_on.is_set())
        super().write(data)


def test_a_request_waits_for_the_flush_under_way_and_only_for_it() -> None:
    async def run() -> None:
        hub, store = LoopHub(), Store(0)
        feed = Feed(hub, "test", 0, store.read, name="test")
        went_on = threading.Event()
        sinks = []
        for _ in range(5):
            stream = Stream(hub, feed, 0, finished=False, client="test")
            feed.streams.add(stream)
            sink = SlowSink(went_on)
            sinks.append(sink)
            hub.spawn(stream.run(sink))
        await until(lambda: all(s.direct for s in feed.streams), "the streams to wait")
        hub.pacer.wait()  # no flush under way: at once
        store.head = 1

        def request() -> None:
            deadline = time.monotonic() + 5
            while not hub.pacer.gate.locked():  # the flush has begun
                if time.monotonic() > deadline:
                    return  # the flush never held the gate: the test fails below
                time.sleep(0.001)
            hub.pacer.wait()
            went_on.set()

        thread = threading.Thread(target=request, daemon=True)
        thread.start()
        while not thread.is_alive():
            await asyncio.sleep(0.001)
        feed.deliver([envelope(1)])
        await until(went_on.is_set, "the request to go on")
        thread.join(timeout=5)
        assert [s.seen for s in sinks] == [[False]] * 5  # every write before the request
        assert [s.versions() for s in sinks] == [[1]] * 5
        for stream in list(feed.streams):
            stream.end()
        await until(lambda: not hub.tasks, "the streams to end")

    asyncio.run(run())


def test_a_client_that_cannot_take_a_direct_write_is_dropped() -> None:
    async def run() -> None:
        hub, store = LoopHub(), Store(0)
        feed = Feed(hub, "test", 0, store.read, name="test")
        stream, sink = open_stream(hub, feed, 0)
        other, other_sink = open_stream(hub, feed, 0)
        await until(lambda: stream.direct and other.direct, "the streams to wait")
        sink.full = True  # this client stopped reading long ago
        store.head = 1
        feed.deliver([envelope(1)])
        await until(lambda: stream in hub.gone, "the stream to end")
        assert sink.closed and feed.streams == {other}
        assert other_sink.versions() == [1]  # the others are not held up
        other.end()
        await until(lambda: not hub.tasks, "the other stream to end")

    asyncio.run(run())


# A turn: the store's head moves on, then batches of versions are delivered (any order, with
# duplicates, and versions skipped: a lost message).
turns = st.lists(
    st.tuples(
        st.integers(0, 6),
        st.lists(st.lists(st.integers(-3, 0), max_size=4), max_size=3),
        st.integers(0, 3),  # turns of the loop let go by before the next
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(0, 4), afters=st.lists(st.integers(0, 4), min_size=1, max_size=3), turns=turns
)
def test_every_stream_sends_each_event_once_in_order_whatever_the_deliveries(
    start: int, afters: list[int], turns: list[tuple[int, list[list[int]], int]]
) -> None:
    async def run() -> None:
        hub, store = LoopHub(), Store(start)
        feed = Feed(hub, "test", start, store.read, name="test")
        opened = [(after, *open_stream(hub, feed, min(after, start))) for after in afters]
        for grow, batches, pause in turns:
            store.head += grow
            for batch in batches:  # versions relative to the head: recorded ones only
                feed.deliver([envelope(store.head + v) for v in batch if store.head + v > 0])
            for _ in range(pause):
                await asyncio.sleep(0)
        feed.hint(store.head)  # the store check: whatever was lost is read once
        for after, _, sink in opened:
            expected = list(range(min(after, start) + 1, store.head + 1))
            await until(holds(sink, len(expected)), "the events")
            assert sink.versions() == expected
        for _, stream, _ in opened:
            stream.end()
        await until(lambda: not hub.tasks, "the streams to end")

    asyncio.run(run())
