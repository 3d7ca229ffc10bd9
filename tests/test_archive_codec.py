"""A finished game's rows packed as one value (service/persistence/archive.py) read back exactly,
whatever their states' forms; a damaged value is ``ArchiveDamaged``, never a crash nor an
unbounded allocation."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.persistence import archive
from service.persistence.archive import ArchiveDamaged, Row
from service.persistence.compact import COMPACT, HEAD

TOPICS = st.sampled_from(["domain.game:Game.Created", "domain.game:Game.DiceRolled", "é:ü"])
HASHES = st.binary(min_size=32, max_size=32)


@st.composite
def games(draw: st.DrawFn) -> list[Row]:
    """Rows of one game: compact states chained as the service writes them, or not (a hash
    that is not the one before, a state in the JSON form, bytes of any kind between)."""
    count = draw(st.integers(min_value=1, max_value=40))
    version = draw(st.integers(min_value=1, max_value=10_000))
    tx, id_ = draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40))
    previous = draw(HASHES)
    rows = []
    for i in range(count):
        kind = draw(st.sampled_from(["chained", "unchained", "json", "bytes"]))
        digest = draw(HASHES)
        if kind in ("chained", "unchained"):
            prev = previous if kind == "chained" else draw(HASHES)
            head = HEAD.pack(
                COMPACT, draw(st.integers(0, 12)), draw(st.integers(-(2**40), 2**40)), prev, digest
            )
            state = head + draw(st.binary(max_size=200))
        elif kind == "json":
            state = b'{"hash": "' + digest.hex().encode() + b'"}'
        else:
            state = draw(st.binary(max_size=300))
        previous = digest
        tx += draw(st.integers(-5, 1_000))
        id_ += draw(st.integers(-5, 1_000))
        rows.append(Row(version + i, draw(TOPICS), state, max(tx, 0), max(id_, 0)))
    return rows


@given(games())
def test_packed_rows_read_back_exactly(rows: list[Row]) -> None:
    data = archive.pack(rows)
    assert archive.unpack(data) == rows
    assert archive.first(data) == rows[0]


def test_a_chained_game_leaves_out_each_prev_hash() -> None:
    """A game the service wrote (each compact state's ``prev_hash`` the hash before) packs its
    states 32 bytes an event smaller than as stored, before deflating."""
    hashes = [bytes([i]) * 32 for i in range(61)]
    rows = [
        Row(v, "t", HEAD.pack(COMPACT, 4, v, hashes[v - 1], hashes[v]) + b"[1,2]", 0, v)
        for v in range(1, 61)
    ]
    raw = zlib.decompress(archive.pack(rows))
    unchained = [
        r._replace(
            state=HEAD.pack(COMPACT, 4, r.version, b"\xff" * 32, hashes[r.version]) + b"[1,2]"
        )
        for r in rows
    ]
    assert len(zlib.decompress(archive.pack(unchained))) - len(raw) == 32 * 59
    assert archive.unpack(archive.pack(rows)) == rows


def test_rows_that_are_not_one_run_of_versions_are_refused() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        archive.pack([Row(1, "t", b"a", 0, 1), Row(3, "t", b"b", 0, 2)])
    with pytest.raises(ValueError):
        archive.pack([])


@given(games(), st.data())
def test_a_damaged_value_is_archive_damaged(rows: list[Row], data: st.DataObject) -> None:
    packed = archive.pack(rows)
    how = data.draw(st.sampled_from(["cut", "flip", "append", "foreign"]))
    if how == "cut":
        damaged = packed[: data.draw(st.integers(0, len(packed) - 1))]
    elif how == "flip":
        at = data.draw(st.integers(0, len(packed) - 1))
        damaged = (
            packed[:at] + bytes([packed[at] ^ data.draw(st.integers(1, 255))]) + packed[at + 1 :]
        )
    elif how == "append":
        damaged = packed + data.draw(st.binary(min_size=1, max_size=8))
    else:
        damaged = zlib.compress(data.draw(st.binary(max_size=64)))
    try:
        found = archive.unpack(damaged)
    except ArchiveDamaged:
        return
    # a flipped bit the checksum cannot see is impossible: adler32 catches any single byte
    assert found == rows and how not in ("cut", "append", "foreign")


def test_a_value_that_inflates_beyond_any_game_is_damaged_without_inflating_it_all() -> None:
    # one event whose state is 80 MiB of zeros: ~80 KB deflated
    head = (
        struct.pack("<BHH", archive.FORMAT, 1, 1)
        + b"t"
        + struct.pack("<QIHBIqq", 1, 1, 0, 0, 80 << 20, 0, 0)
    )
    bomb = zlib.compress(head + bytes(80 << 20))
    with pytest.raises(ArchiveDamaged, match="beyond"):
        archive.unpack(bomb)
    with pytest.raises(ArchiveDamaged, match="beyond"):
        archive.first(bomb)


def test_a_forged_count_of_events_is_judged_before_the_value_is_inflated() -> None:
    """``first`` reads the count of events from the value and inflates as far as their arrays
    go: a forged count (2**32 - 1, ~98 GB of arrays) made it inflate the whole value (a review:
    437 MiB at the peak for 200 MiB of zeros) before it found the value damaged."""
    import tracemalloc

    head = struct.pack("<BHH", archive.FORMAT, 1, 1) + b"t" + struct.pack("<QI", 1, 2**32 - 1)
    bomb = zlib.compress(head + bytes(8 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(ArchiveDamaged, match="beyond"):
            archive.first(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_a_deflated_state_that_inflates_beyond_any_game_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A snapshot's deflated JSON (compact.inflate) is inflated no further than
    ``MAX_INFLATED``: a damaged or forged row is an error, not an allocation without limit."""
    from service.persistence import compact

    monkeypatch.setattr(compact, "MAX_INFLATED", 1 << 20)
    state = b'{"a": "' + b"x" * (2 << 20) + b'"}'
    with pytest.raises(zlib.error):
        compact.inflate(bytes((compact.DEFLATED,)) + zlib.compress(state))
    with pytest.raises(zlib.error):  # cut short
        compact.inflate(bytes((compact.DEFLATED,)) + zlib.compress(b'{"a": 1}')[:-3])
    assert compact.inflate(compact.deflate(b'{"a": "' + b"y" * 4096 + b'"}')).startswith(b'{"a"')


@given(games(), st.sets(TOPICS))
def test_the_rows_of_some_topics_are_those_rows_exactly(rows: list[Row], topics: set[str]) -> None:
    """A reader of a few topics (a view rebuilt over archived games) makes only their rows,
    each as whole as unpacking everything gives it."""
    data = archive.pack(rows)
    assert archive.unpack(data, topics) == [row for row in rows if row.topic in topics]
