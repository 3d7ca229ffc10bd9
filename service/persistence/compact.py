"""The compact stored form of a game's events, and of large states (snapshots).

The library's JSON form of an event repeats every field's name, writes its hashes as 64
characters of hex and its time as a 60-character object: ~300 bytes for a roll of the dice, of
which ~110 say something. The compact form keeps the same values, losslessly:

    0x01 | schema (1 byte) | time: µs since 1970 UTC (8 bytes, signed, big-endian)
         | prev_hash (32 bytes) | hash (32 bytes) | the other fields' values: a JSON array

where the schema is the event's field names in order (``SCHEMAS``: its index there). A state
that does not fit one exactly (another order or set of fields, a time not in UTC, a hash that
is not 64 lowercase hex characters, a value JSON does not hold as it is) is stored in the JSON
form, which is read as before: a store written before this form existed is read as it is, row
by row, whatever form each row has.

A large state in the JSON form (a snapshot: ~1.3 KB) is stored deflated: ``0x02 | zlib``. On
SQLite a row of its snapshots' table (``WITHOUT ROWID``) over ~1 KB spills into overflow pages,
most of each left empty: ~4.7 KB on disk per snapshot instead of ~0.7 KB.

JSON begins with ``{``: the first byte tells the forms apart.

``SCHEMAS`` only grows: a schema's index is written in stored rows, so none is ever changed
or removed (tests/test_compact_store.py checks that every event of a game has one).
"""

from __future__ import annotations

import struct
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

COMPACT = 0x01
DEFLATED = 0x02
DEFLATE_FROM = 512  # bytes of JSON: smaller states (every event) are stored as they are
# zlib's level 1 with a 4 KiB window and a smaller hash (memLevel 5): a snapshot of ~1.4 KB in
# ~180k instructions instead of ~267k at zlib's defaults (level 6, 32 KiB, memLevel 8, most
# of it setting up the larger tables), ~20 bytes larger. Any zlib stream inflates alike: rows
# deflated at the defaults before read as they did.
DEFLATE_LEVEL = 1
DEFLATE_WBITS = 12
DEFLATE_MEMLEVEL = 5

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
HEAD = struct.Struct(">BBq32s32s")  # marker, schema, time, prev_hash, hash
TIME = struct.Struct(">BBq")  # what ``HEAD`` starts with: marker, schema, time
FIXED = ("timestamp", "prev_hash", "hash")

# Each game event's fields, in the order its class declares them (and so stores them), without
# the originator's id and version (the row's columns). Append only: see the module's docstring.
SCHEMAS: tuple[tuple[str, ...], ...] = (
    # 0: GameCreated
    (
        "timestamp",
        "originator_topic",
        "prev_hash",
        "hash",
        "players",
        "seats",
        "rules",
        "dice",
        "first_player",
        "client_seed",
        "seed_commitment",
        "seed_committed_at",
        "clock",
        "bots",
        "rematch_of",
        "accounts",
        "rated",
        "abortable",
    ),
    ("timestamp", "prev_hash", "hash", "seat", "name", "bot", "account"),  # 1: SeatJoined
    ("timestamp", "prev_hash", "hash", "seat"),  # 2: SeatLeft
    ("timestamp", "prev_hash", "hash", "first_player", "draws"),  # 3: TurnOrderDecided
    ("timestamp", "prev_hash", "hash", "seat", "dice", "nonce", "moves", "entropy"),  # 4
    ("timestamp", "prev_hash", "hash", "seat", "sums", "runners"),  # 5: MovePlayed
    (  # 6: TurnStopped
        "timestamp",
        "prev_hash",
        "hash",
        "seat",
        "markers",
        "progress",
        "claimed",
        "removed",
        "next_player",
    ),
    ("timestamp", "prev_hash", "hash", "seat", "lost", "wiped", "next_player"),  # 7: TurnBusted
    (  # 8: TurnTimedOut
        "timestamp",
        "prev_hash",
        "hash",
        "seat",
        "deadline",
        "lost",
        "in_a_row",
        "next_player",
    ),
    (  # 9: PlayerResigned
        "timestamp",
        "prev_hash",
        "hash",
        "seat",
        "removed",
        "next_player",
        "reason",
    ),
    ("timestamp", "prev_hash", "hash", "winner", "reason", "turns", "rating"),  # 10: GameFinished
    ("timestamp", "prev_hash", "hash", "idle_since", "after"),  # 11: GameAbandoned
    ("timestamp", "prev_hash", "hash", "server_seed"),  # 12: SeedRevealed
)

SCHEMA_IDS: dict[tuple[str, ...], int] = {names: index for index, names in enumerate(SCHEMAS)}
# Each schema's other fields: their names, in order, and how many.
OTHERS: tuple[tuple[str, ...], ...] = tuple(
    tuple(name for name in names if name not in FIXED) for names in SCHEMAS
)
# Where each schema keeps each of its other fields: a lookup, not a search (``micros_and_field``).
FIELD_AT: tuple[dict[str, int], ...] = tuple(
    {name: at for at, name in enumerate(names)} for names in OTHERS
)
# Where each schema's last other field is (``micros_and_field``).
LAST: tuple[int, ...] = tuple(len(names) - 1 for names in OTHERS)
# Whether a schema's names start with the fixed fields, in ``FIXED``'s order.
LEADING: tuple[bool, ...] = tuple(names[: len(FIXED)] == FIXED for names in SCHEMAS)
assert all(set(FIXED) <= set(names) for names in SCHEMAS)
assert len(SCHEMAS) < 256

# orjson writes datetimes and dataclasses of its own accord: refused here, like anything else
# that is not a JSON value (a value that would not read back as it was).
_PLAIN = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _hash_bytes(value: Any) -> bytes | None:
    """A hash's 32 bytes, if it is 64 lowercase hex characters (what reads back the same)."""
    if type(value) is not str or len(value) != 64:
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return raw if raw.hex() == value else None


def encode_event(state: dict[str, Any]) -> bytes | None:
    """``state`` (an event's fields, its originator's id and version taken out) in the compact
    form, or None if it does not fit a schema exactly (then the JSON form stores it)."""
    schema = SCHEMA_IDS.get(tuple(state))
    if schema is None:
        return None
    timestamp = state["timestamp"]
    if type(timestamp) is not datetime or timestamp.tzinfo is not UTC:
        return None
    prev_hash = _hash_bytes(state["prev_hash"])
    digest = _hash_bytes(state["hash"])
    if prev_hash is None or digest is None:
        return None
    try:
        others = orjson.dumps([state[name] for name in OTHERS[schema]], option=_PLAIN)
    except TypeError:  # orjson.JSONEncodeError: not JSON values
        return None
    micros = (timestamp - EPOCH) // MICROSECOND
    return HEAD.pack(COMPACT, schema, micros, prev_hash, digest) + others


def decode_event(data: bytes) -> dict[str, Any]:
    """An event's fields from the compact form, in its schema's order; ValueError (or another
    error) for data that is not a whole compact event.

    Every log read decodes through here (a view's rebuild, millions of events): where the
    schema starts with the fixed fields, as all but ``GameCreated``'s do, the state is one
    ``dict(zip(...))`` rather than a lookup name by name."""
    _, schema, micros, prev_hash, digest = HEAD.unpack_from(data)
    others = orjson.loads(data[HEAD.size :])
    names = OTHERS[schema]
    if type(others) is not list or len(others) != len(names):
        raise ValueError("a compact event's fields do not match its schema")
    timestamp = EPOCH + micros * MICROSECOND
    if LEADING[schema]:
        return dict(
            zip(SCHEMAS[schema], (timestamp, prev_hash.hex(), digest.hex(), *others), strict=True)
        )
    fixed = {"timestamp": timestamp, "prev_hash": prev_hash.hex(), "hash": digest.hex()}
    values = iter(others)
    return {name: fixed[name] if name in fixed else next(values) for name in SCHEMAS[schema]}


def micros_and_field(data: bytes, name: str) -> tuple[int, Any]:
    """A compact event's time (microseconds since the epoch) and the value of one of its other
    fields (``name``), without its hashes, its time nor its state made: what a view that reads
    only those needs, of every event of its topics (``View.narrow_reads``; a turn's end's next
    player, millions of them in a rebuild). ValueError for data that is not a whole compact
    event, or a schema without that field.

    The schema's last field, if it is one digit or null (a seat), is read from the text's tail
    (``[…,2]``) without the rest parsed: a turn's markers and progress made into dicts were
    half the read's time. So a row damaged elsewhere than its time and that field reads as
    they are (the game's own reads judge its whole: its hash chain, its audit). Anything else
    there is parsed whole, as any other field is."""
    _, schema, micros = TIME.unpack_from(data)
    at = FIELD_AT[schema].get(name)
    if at is not None and at == LAST[schema] and data[-1] == 93 and data[HEAD.size] == 91:
        comma = data.rfind(b",", HEAD.size)  # "[…,2]": a digit, or null
        if comma > HEAD.size:
            tail = data[comma + 1 : -1]
            if len(tail) == 1 and tail.isdigit():
                return micros, tail[0] - 48
            if tail == b"null":
                return micros, None
    others = orjson.loads(data[HEAD.size :])
    if at is None or type(others) is not list or len(others) != len(OTHERS[schema]):
        raise ValueError("a compact event's fields do not match its schema")
    return micros, others[at]


def time_of(micros: int) -> datetime:
    """The time of ``micros`` microseconds since the epoch, as events hold it (UTC)."""
    return EPOCH + micros * MICROSECOND


def micros_of(timestamp: datetime) -> int:
    """``time_of``'s inverse, for an event's time (aware, UTC)."""
    return (timestamp - EPOCH) // MICROSECOND


def deflate(data: bytes) -> bytes:
    """A JSON state, deflated if large enough to gain (``DEFLATE_FROM``)."""
    if len(data) < DEFLATE_FROM:
        return data
    deflater = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, DEFLATE_WBITS, DEFLATE_MEMLEVEL)
    return bytes((DEFLATED,)) + deflater.compress(data) + deflater.flush()


MAX_INFLATED = 64 << 20
"""The most a deflated state inflates to (a snapshot of a game is tens of kilobytes): a damaged
or forged row cannot make a reader allocate without limit."""


def inflate(data: bytes) -> bytes:
    """A deflated state's JSON (``deflate``'s inverse); zlib.error for one that is not whole or
    inflates beyond ``MAX_INFLATED``."""
    inflater = zlib.decompressobj()
    found = inflater.decompress(data[1:], MAX_INFLATED)
    if inflater.unconsumed_tail or not inflater.eof:
        raise zlib.error("a deflated state cut short, or inflating beyond any game's")
    return found
