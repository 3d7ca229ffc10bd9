"""The stream bench's reader (bench/streams.py) reads every event id of a stream whatever the
chunks its bytes come in: its figures of missing, repeated and disordered events rest on it."""

from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.streams import StreamRecord

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"


def frame(version: int) -> bytes:
    data = json.dumps({"version": version, "type": "MovePlayed", "note": "id: 7\nid: 8"})
    return f"id: {version}\nevent: MovePlayed\ndata: {json.dumps(data)}\n\n".encode()


@settings(max_examples=80, deadline=None)
@given(
    versions=st.integers(0, 30),
    cuts=st.lists(st.integers(1, 4000), max_size=25),
)
def test_the_reader_reads_every_event_id_whatever_the_chunks(
    versions: int, cuts: list[int]
) -> None:
    stream = (
        HEAD
        + b": cantstop game 0 after 4\n\n"
        + b"".join(frame(v) for v in range(5, 5 + versions))
        + b": keep-alive\n\n"
    )
    points = sorted({min(c, len(stream)) for c in cuts} | {len(stream)})

    async def run() -> StreamRecord:
        record = StreamRecord(0)
        start = 0
        for point in points:
            if point > start:
                record.data_received(stream[start:point])
                start = point
        return record

    record = asyncio.run(run())
    assert record.status == 200 and record.after == 4
    assert list(record.versions) == list(range(5, 5 + versions))
    assert len(record.times) == versions
