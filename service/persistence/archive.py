"""A finished game's stored events as one value: what the store keeps of a game once nothing
reads its events one row at a time any more (issue #44: bytes per game; docs/scaling.md,
"Bytes per game").

``pack`` takes a game's rows in version order, each with its place in the log (on PostgreSQL
the transaction that wrote it and its notification id; on SQLite 0 and its rowid), and gives
one deflated value that ``unpack`` turns back into the very same rows, byte for byte: the
export, the hash chain, the audit and the receipts read what they read before. What it leaves
out is what the rows repeat:

- the topic of each event: a table of the game's topics, and an index into it;
- the version: the first one, then each the one before plus one (a game's versions are
  contiguous; ``pack`` refuses rows that are not);
- the place in the log: each the difference from the one before;
- in a compact state (service/persistence/compact.py) its ``prev_hash``, when it is the hash of
  the event before (as in every game the service wrote): 32 bytes an event.

Before deflating (zlib's level 6; packing runs once a game, off any request), little-endian:

    FORMAT (u8) | n topics (u16) | each topic's length (u16) | the topics, UTF-8
    | the first version (u64) | n events (u32)
    | per event, in arrays: topic index (u16) | kind (u8) | length (u32)
    | tx difference (i64) | id difference (i64)
    | the states (or bodies), one after another

``kind`` 0 for a state as stored, 1 for a compact state without its ``prev_hash``. The
per-event fields are arrays of fixed width, so a reader takes each in one ``struct`` call rather
than a varint at a time, and makes only the rows it wants (a game of ~150 events read whole in
~0.16 ms, inflating included; the rows of three topics in ~0.05 ms); deflate makes the arrays'
zeros cost next to nothing.

The arrays and the first event (the game's creation) come first in the stream, so ``first``
inflates only as much as it needs (~4 KB, not the game). A value that does not inflate, or
does not parse to whole rows, is ``ArchiveDamaged``; the inflated size is bounded
(``MAX_INFLATED``), so a damaged or forged value cannot make a reader allocate without limit.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import struct
import uuid
import zlib
from collections.abc import Collection, Iterable, Sequence
from typing import NamedTuple

from eventsourcing.persistence import StoredEvent

from service.persistence.compact import COMPACT, HEAD

log = logging.getLogger(__name__)

FORMAT = 1
# pg_advisory_xact_lock's key: an archiver takes it alone, whatever makes a view's tracking row
# at the start of the log shares it (PostgreSQL; SQLite's writers take turns anyway).
ARCHIVE_LOCK = int.from_bytes(hashlib.sha256(b"cantstop archive").digest()[:8], signed=True)
LEVEL = 6
MAX_INFLATED = 64 << 20  # a game of 100,000 events of ~600 bytes: far beyond any played
_AS_STORED, _CHAINED = 0, 1
# In a compact state: marker, schema and time (10 bytes), prev_hash (32), hash (32), the rest.
_PREV = slice(HEAD.size - 64, HEAD.size - 32)
_HASH = slice(HEAD.size - 32, HEAD.size)


class ArchiveDamaged(ValueError):
    """The value cannot be read back as a game's rows (a damaged or foreign value)."""


class Row(NamedTuple):
    """One stored event and its place in the log (``tx`` 0 on SQLite)."""

    version: int
    topic: str
    state: bytes
    tx: int
    id: int


_HEAD = struct.Struct("<QI")  # the first version, how many events


def pack(rows: Sequence[Row]) -> bytes:
    """The rows (one game's, in version order) as one deflated value. ValueError if they are
    not one run of contiguous versions, or there are none."""
    if not rows:
        raise ValueError("no rows to pack")
    topics: dict[str, int] = {}
    kinds, bodies = bytearray(), []
    previous: bytes | None = None  # the hash of the event before, if it was compact
    for expected, row in enumerate(rows, start=rows[0].version):
        if row.version != expected:
            raise ValueError(f"versions are not contiguous at {row.version}")
        topics.setdefault(row.topic, len(topics))
        state = bytes(row.state)
        compact = len(state) >= HEAD.size and state[0] == COMPACT
        if compact and previous is not None and state[_PREV] == previous:
            kinds.append(_CHAINED)
            bodies.append(state[: _PREV.start] + state[_PREV.stop :])
        else:
            kinds.append(_AS_STORED)
            bodies.append(state)
        previous = state[_HASH] if compact else None
    count = len(rows)
    names = [topic.encode("utf-8") for topic in topics]
    places = [(0, 0), *((row.tx, row.id) for row in rows)]
    out = [
        struct.pack(f"<BH{len(names)}H", FORMAT, len(names), *map(len, names)),
        *names,
        _HEAD.pack(rows[0].version, count),
        struct.pack(f"<{count}H", *(topics[row.topic] for row in rows)),
        bytes(kinds),
        struct.pack(f"<{count}I", *map(len, bodies)),
        struct.pack(f"<{count}q", *(b[0] - a[0] for a, b in itertools.pairwise(places))),
        struct.pack(f"<{count}q", *(b[1] - a[1] for a, b in itertools.pairwise(places))),
        *bodies,
    ]
    return zlib.compress(b"".join(out), LEVEL)


def _inflated(data: bytes, enough: int | None = None) -> bytes:
    """The value inflated: whole (its end and checksum checked), or at least its first
    ``enough`` bytes (fewer if there are no more)."""
    inflater = zlib.decompressobj()
    if enough is None:
        found = inflater.decompress(data, MAX_INFLATED)
        if inflater.unconsumed_tail:
            raise ArchiveDamaged("the archive inflates beyond any game")
        if not inflater.eof or inflater.unused_data:
            raise ArchiveDamaged("the archive is cut short, or holds more than its stream")
        return found
    parts, have, source = [], 0, data
    while have < enough and source and not inflater.eof:
        chunk = inflater.decompress(source, enough - have)
        source = inflater.unconsumed_tail
        parts.append(chunk)
        have += len(chunk)
        if not chunk and not source:
            break
    return b"".join(parts)


class _Layout(NamedTuple):
    topics: list[str]
    version: int
    events: int
    at: int  # where the per-event arrays begin


def _layout(buffer: bytes) -> _Layout:
    if not buffer or buffer[0] != FORMAT:
        raise ArchiveDamaged("not an archive of this format")
    (n,) = struct.unpack_from("<H", buffer, 1)
    lengths = struct.unpack_from(f"<{n}H", buffer, 3)
    at = 3 + 2 * n
    topics = []
    for length in lengths:
        topics.append(buffer[at : at + length].decode("utf-8"))
        at += length
    version, count = _HEAD.unpack_from(buffer, at)
    return _Layout(topics, version, count, at + _HEAD.size)


def _rows(
    buffer: bytes,
    layout: _Layout,
    limit: int | None = None,
    wanted: Collection[str] | None = None,
) -> list[Row]:
    """The rows (the first ``limit``; only those of the ``wanted`` topics): the arrays taken in
    a few C calls, and only the rows handed out made (a view of a few topics, rebuilt over
    archived games, makes a few rows a game, not ~150)."""
    topics, version, count, at = layout
    indexes = struct.unpack_from(f"<{count}H", buffer, at)
    at += 2 * count
    kinds = buffer[at : at + count]
    at += count
    lengths = struct.unpack_from(f"<{count}I", buffer, at)
    at += 4 * count
    txs = list(itertools.accumulate(struct.unpack_from(f"<{count}q", buffer, at)))
    at += 8 * count
    ids = list(itertools.accumulate(struct.unpack_from(f"<{count}q", buffer, at)))
    at += 8 * count
    starts = list(itertools.accumulate(lengths, initial=at))  # each state's, then the end
    if limit is None and starts[-1] != len(buffer):
        raise ArchiveDamaged("the archive's states do not fill it")
    chosen: Iterable[int] = range(count if limit is None else min(limit, count))
    if wanted is not None:
        keep = {i for i, topic in enumerate(topics) if topic in wanted}
        chosen = [i for i in chosen if indexes[i] in keep]
    rows = []
    split = _PREV.start
    for i in chosen:
        start, end = starts[i], starts[i + 1]
        if end > len(buffer):
            raise ArchiveDamaged("the archive ends inside a row")
        kind = kinds[i]
        if kind == _CHAINED:
            state = buffer[start : start + split] + _hash_of(buffer, kinds, starts, i - 1)
            state += buffer[start + split : end]
        elif kind == _AS_STORED:
            state = buffer[start:end]
        else:
            raise ArchiveDamaged(f"an unknown kind of state: {kind}")
        rows.append(Row(version + i, topics[indexes[i]], state, txs[i], ids[i]))
    return rows


def _hash_of(buffer: bytes, kinds: bytes, starts: list[int], i: int) -> bytes:
    """The hash of event ``i`` (the one a chained state leaves out as its ``prev_hash``)."""
    if i < 0:
        raise ArchiveDamaged("a chained state without the hash before it")
    start, end = starts[i], starts[i + 1]
    if kinds[i] == _CHAINED:  # its state less its prev_hash: the hash follows the time
        at = start + _PREV.start
    elif end - start >= HEAD.size and buffer[start] == COMPACT:
        at = start + _HASH.start
    else:
        raise ArchiveDamaged("a chained state after one that is not compact")
    if at + 32 > end:
        raise ArchiveDamaged("a state too short for its hash")
    return buffer[at : at + 32]


def unpack(data: bytes, topics: Collection[str] | None = None) -> list[Row]:
    """``pack``'s rows, exactly (only those of ``topics``, if given); ArchiveDamaged for a value
    that is not whole."""
    try:
        buffer = _inflated(data)
        return _rows(buffer, _layout(buffer), wanted=topics)
    except ArchiveDamaged:
        raise
    except (zlib.error, struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        raise ArchiveDamaged(f"the archive cannot be read: {exc}") from None


def first(data: bytes) -> Row:
    """The first row alone (a game's creation), inflating no more of the value than it needs:
    its header, the per-event arrays and the first state."""
    try:
        buffer = _inflated(data, 4096)
        layout = _layout(buffer)
        arrays = layout.at + 23 * layout.events  # 2 + 1 + 4 + 8 + 8 bytes an event
        if arrays > MAX_INFLATED:  # (a count read from the value: judged before inflating)
            raise ArchiveDamaged("the archive inflates beyond any game")
        length_at = layout.at + 3 * layout.events
        if len(buffer) < arrays:
            buffer = _inflated(data, arrays)
        (length,) = struct.unpack_from("<I", buffer, length_at)
        if arrays + length > MAX_INFLATED:
            raise ArchiveDamaged("the archive inflates beyond any game")
        if len(buffer) < arrays + length:
            buffer = _inflated(data, arrays + length)
        found = _rows(buffer, layout, limit=1)
        if not found:
            raise ArchiveDamaged("an archive of no rows")
        return found[0]
    except ArchiveDamaged:
        raise
    except (zlib.error, struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        raise ArchiveDamaged(f"the archive cannot be read: {exc}") from None


# ------------------------------------------------------------------------- the recorders'
class ArchiveSpan(NamedTuple):
    """An archived game and where its first and last events stand in the log (tx, id)."""

    originator_id: uuid.UUID
    first: tuple[int, int]
    last: tuple[int, int]


def unpack_game(
    originator_id: uuid.UUID, data: bytes, topics: Collection[str] | None = None
) -> list[Row]:
    """``unpack``, its error naming the game."""
    try:
        return unpack(data, topics)
    except ArchiveDamaged as exc:
        raise ArchiveDamaged(f"game {originator_id}: {exc}") from None


def archived_events(
    originator_id: uuid.UUID,
    data: bytes,
    *,
    gt: int | None = None,
    lte: int | None = None,
    desc: bool = False,
    limit: int | None = None,
) -> list[StoredEvent]:
    """An archived game's events as the library's ``select_events`` selects rows."""
    rows = unpack_game(originator_id, data)
    chosen = [
        StoredEvent(originator_id, row.version, row.topic, row.state)
        for row in rows
        if (gt is None or row.version > gt) and (lte is None or row.version <= lte)
    ]
    if desc:
        chosen.reverse()
    return chosen if limit is None else chosen[:limit]


def readable(
    found: Iterable[tuple[uuid.UUID, bytes]], topics: Collection[str] | None = None
) -> dict[uuid.UUID, list[Row]]:
    """Archived games' rows (of ``topics``, if given), by game; a damaged archive is left out
    and logged: a reader of the whole log (a view's rebuild) goes on without that game, whose
    own reads report it."""
    games = {}
    for originator_id, data in found:
        try:
            games[originator_id] = unpack_game(originator_id, data, topics)
        except ArchiveDamaged as exc:
            log.error("an archive is left out of the log read: %s", exc)
    return games


def first_archived(found: Iterable[tuple[uuid.UUID, bytes]]) -> list[StoredEvent]:
    """The first event of each archived game (read as far as it needs); a damaged archive is
    left out, for a reader of the one game to report (``select_events``)."""
    events = []
    for originator_id, data in found:
        try:
            row = first(data)
        except ArchiveDamaged:
            continue
        events.append(StoredEvent(originator_id, row.version, row.topic, row.state))
    return events
