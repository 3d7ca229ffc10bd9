"""What concerns each account, in order: the notices the account stream (``GET
/v1/account/stream``) and webhooks deliver (contract 1.2).

A view (``NoticesView``) of the log: from games' events and challenges' it writes each account's
notices, numbered 1, 2, 3… per account (the stream's ``id:``, so ``Last-Event-ID`` resumes on any
worker or host: the numbers are in the store, not in a process). Like every view it is moved on
exactly once per event (service/persistence/views.py); the scheduler moves it at each poll, and a
process with account streams open moves it too, so a notice follows its event within a poll.

Notices (``data`` is the JSON served; each also has ``id``, ``type`` and ``at``):

* ``challenge`` (to the challenged), ``challenge_accepted``, ``challenge_declined`` (to the
  challenger), ``challenge_canceled`` (to the challenged), ``challenge_expired`` (to both, when
  the scheduler records that it expired unanswered): ``{"challenge": {...}}``;
* ``seek_expired`` (to the seek's account, when it expired unpaired): ``{"seek": {...}}``;
* ``game_started`` (to every account seated, when the turn order is decided): ``game_id``,
  ``version``, ``seat``, ``rated``, ``accounts`` (each seat's handle or null);
* ``your_turn`` (to the account whose turn begins): ``game_id``, ``version``, ``seat``;
* ``game_finished`` (to every account seated): ``game_id``, ``version``, ``seat``, ``winner``,
  ``reason``.

Built-in bots get none (the scheduler plays them). After the batch's transaction commits, the
process that wrote it tells the live hub (``committed``), which hands the notices to its own
streams and, through Redis, to every other process's.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import orjson
from eventsourcing.utils import get_topic

from domain.game import Game, format_at, format_time
from service.application.aggregates import IMPORT_TOPICS, ImportedGame
from service.application.matchmaking.challenges import CHALLENGE_TOPICS, Challenge
from service.application.matchmaking.seeks import SEEK_EXPIRED_TOPICS
from service.application.players.accounts import BOTS
from service.application.store import GameEventMapper, Store
from service.persistence.compact import micros_of, time_of
from service.persistence.sqlite import in_chunks
from service.persistence.views import Sql, View, Views

NOTICE_TYPES = (
    "challenge",
    "challenge_accepted",
    "challenge_declined",
    "challenge_canceled",
    "challenge_expired",
    "seek_expired",
    "game_started",
    "your_turn",
    "game_finished",
)
"""Every type of notice (webhooks subscribe to these; openapi.yaml's ``Notice`` maps them)."""
RETAIN = timedelta(days=7)  # how long notices are kept for a stream to resume from
KEEP = 10_000
"""At most each account's newest this many notices are kept, whatever their age: an account
seated in thousands of games a week (a third party's bot) would otherwise keep a row for every
turn of theirs, ~250,000 a week for each of ``bench.rebuild --accounts``'s ten, and a rebuild
would make each one (docs/scaling.md). A stream that resumes from further back resumes from the
oldest kept, as from past the retention."""
PRUNE_EVERY = 3600.0  # seconds
TURN_ENDS = (Game.TurnStopped, Game.TurnBusted, Game.TurnTimedOut)
SEAT_CHANGES = (Game.SeatJoined, Game.SeatLeft)
# Events that make notices only for a game's accounts, and change nothing in a game without any.
QUIET = frozenset(
    get_topic(cls) for cls in (*TURN_ENDS, Game.TurnOrderDecided, Game.PlayerResigned)
)


class TurnEnd(NamedTuple):
    """What the notices read of a turn's end (a stop, a bust, a turn timed out): most of the
    log where accounts sit in most games. Read from the compact row without the event made
    whole (its hashes, its other fields), ~0.4 of the instructions (docs/performance.md); its
    time kept as a count of microseconds, made a ``datetime`` only for a notice written."""

    originator_id: uuid.UUID
    originator_version: int
    micros: int  # since the epoch
    next_player: int | None

    @property
    def timestamp(self) -> datetime:
        return time_of(self.micros)


# A ``TurnEnd`` of its four fields, made without the named tuple's ``__new__`` (a Python call).
_turn_end = functools.partial(tuple.__new__, TurnEnd)


def turn_end(notification: Any, mapper: GameEventMapper) -> TurnEnd:
    """A turn's end as the notices read it (``View.narrow_reads``): from the compact form, or
    from the event decoded whole for a row in another form (a store written before it)."""
    found = mapper.micros_and_field(notification, "next_player")
    if found is not None:
        originator_id: Any = notification.originator_id
        if type(originator_id) is not uuid.UUID:
            originator_id = uuid.UUID(originator_id)
        return _turn_end((originator_id, notification.originator_version, *found))
    event = mapper.to_domain_event(notification)
    if not isinstance(event, TURN_ENDS):
        raise ValueError(f"not a turn's end: {type(event).__name__}")
    return TurnEnd(
        event.originator_id, event.originator_version, micros_of(event.timestamp), event.next_player
    )


CREATED = get_topic(Game.GameCreated)


class Seating(NamedTuple):
    """What a rebuild's first pass reads of a game's creation or a seat taken (``View.
    follow_reads``): whether it seats an account. Read from the compact row without the event
    made whole, as a turn's end is: ~250,000 of them at 100,000 games."""

    originator_id: uuid.UUID
    seated: bool


def seating(notification: Any, mapper: GameEventMapper) -> Seating:
    """A creation's or seat's ``Seating``: from the compact form, or from the event decoded
    whole for a row in another form (a store written before it)."""
    created = notification.topic == CREATED
    found = mapper.micros_and_field(notification, "accounts" if created else "account")
    if found is not None:
        originator_id: Any = notification.originator_id
        if type(originator_id) is not uuid.UUID:
            originator_id = uuid.UUID(originator_id)
        value = found[1]
        return Seating(originator_id, any(value or ()) if created else value is not None)
    event = mapper.to_domain_event(notification)
    if isinstance(event, Game.GameCreated):
        return Seating(event.originator_id, any(event.accounts or ()))
    if isinstance(event, Game.SeatJoined):
        return Seating(event.originator_id, event.account is not None)
    raise ValueError(f"not a creation nor a seat taken: {type(event).__name__}")


@dataclass(slots=True)
class Notice:
    account: str  # lowercase handle
    seq: int  # the account's own numbering: 1, 2, 3…
    type: str
    at: str
    data: dict[str, Any]  # the JSON served, ``id``, ``type`` and ``at`` included
    text: str = ""
    """``data`` as compact JSON, what the store keeps and the stream sends (made if not given).
    Not frozen: a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``,
    ~1 µs a notice, and a rebuild makes millions."""

    def __post_init__(self) -> None:
        if not self.text:
            self.text = orjson.dumps(self.data).decode()


def seated_accounts(row: dict[str, Any]) -> list[str | None]:
    """The accounts seated in a game of the batch (a row of ``{games}``), its column's JSON
    read once a batch."""
    accounts: list[str | None] = row.get("seated") or json.loads(row["accounts"])
    row["seated"] = accounts
    return accounts


Fields = dict[str, Any] | tuple[str, int, int]
# A batch's events, and what a challenge's or seek's notice shows by its event's place among them.
Prepared = tuple[list[Any], dict[int, dict[str, Any]]]


def notice_data(seq: int, kind: str, at: str, fields: Fields) -> dict[str, Any]:
    """A notice's JSON as served: its number, type and time, then its own fields. A
    ``your_turn``'s are passed as (game id, version, seat) until the notice is made: most
    notices, held by the million in a rebuild that makes few of them."""
    if type(fields) is tuple:
        key, version, seat = fields
        return {"id": seq, "type": kind, "at": at, "game_id": key, "version": version, "seat": seat}
    return {"id": seq, "type": kind, "at": at, **fields}  # type: ignore[dict-item]


def prune(sql: Sql, now: datetime, keep: int = KEEP) -> None:
    """Forget the notices older than ``RETAIN`` at ``now``, and each account's beyond its newest
    ``keep`` (at least 1): never an account's newest (its number goes on from it)."""
    sql.execute(
        "DELETE FROM {notices} WHERE at < ? AND seq < "
        "(SELECT h.seq FROM {heads} h WHERE h.account = {notices}.account)",
        [format_at(now - RETAIN)],
    )
    # the accounts with more than ``keep`` ever (few): a range of the key each
    sql.execute(
        "DELETE FROM {notices} WHERE account IN (SELECT account FROM {heads} WHERE seq > ?) "
        "AND seq <= (SELECT h.seq FROM {heads} h WHERE h.account = {notices}.account) - ?",
        [keep, keep],
    )


class Rebuilt:
    """What a rebuild's fill of the notices keeps from batch to batch (``Sql.carried``).

    Each account's notices numbered and not yet written, as (number, type, time in
    microseconds, fields). What ``settle``'s prune would delete is dropped unmade: an aged
    notice once another of its account follows it, and any notice once ``keep`` newer ones of
    its account follow it (the deque's bound). Held at most ``keep`` an account that had that
    many, else until its batch ends: so at most the notices kept are held, a few hundred bytes
    each.

    And the games' rows as they stand (``games``, None once finished; ``keys``, each game's id
    as text by its ``int``), which only this fill writes: kept here and written once, as the
    fill settles, not read and written back at every batch (a turn's end changes its game's
    row: ~5,000 rows a batch, ~800,000 at 100,000 games)."""

    def __init__(self, before: datetime, keep: int) -> None:
        self.before = micros_of(before)
        self.keep = keep
        self.imports_known = False  # whether the first pass read the log's import markers
        self.imported: set[uuid.UUID] = set()  # the games they mark, imported
        self.held: dict[str, deque[tuple[int, str, int, Fields]]] = {}
        self.games: dict[str, dict[str, Any] | None] = {}
        self.keys: dict[int, str] = {}
        self.written = 0  # notices written (tests count them)

    def hold(self, account: str, seq: int, kind: str, micros: int, fields: Fields) -> None:
        held = self.held.get(account)
        if held is None:
            held = self.held[account] = deque(maxlen=self.keep)
        elif held and held[-1][2] < self.before:
            held.pop()  # aged, and no longer its account's newest
        held.append((seq, kind, micros, fields))

    def write_games(self, sql: Sql) -> None:
        """The rows of the games not finished, as the fill left them."""
        sql.many(
            "INSERT INTO {games} (game_id, seats, rated, accounts, current) VALUES (?, ?, ?, ?, ?)",
            [
                (key, row["seats"], row["rated"], row["accounts"], row["current"])
                for key, row in self.games.items()
                if row is not None
            ],
        )

    def release(self, sql: Sql, accounts: list[str] | None = None) -> None:
        """Write the notices held for ``accounts`` (None: every account, as the fill ends),
        but those of an account that had ``keep`` or more: they wait for the fill's end."""
        rows = []
        everyone = accounts is None
        for account in list(self.held) if accounts is None else accounts:
            held = self.held.get(account)
            if not held or (not everyone and held[-1][0] >= self.keep):
                continue
            last = held[-1][0]
            for seq, kind, micros, fields in held:
                if seq != last and micros < self.before:
                    continue  # aged (another of its account follows): the prune's
                text = format_time(time_of(micros))
                body = orjson.dumps(notice_data(seq, kind, text, fields)).decode()
                rows.append((account, seq, kind, text, body))
            held.clear()
        self.written += len(rows)
        sql.many(
            "INSERT INTO {notices} (account, seq, type, at, body) VALUES (?, ?, ?, ?, ?)", rows
        )


class Changes:
    """What a batch of the notices view changes, gathered as its events are read and written at
    its end: the notices (one ``executemany``), each account's newest number (read once a batch
    per account, written once), the games' rows (created, changed and deleted by a statement
    each a batch, not each an event: a rebuild met ~3.5 a game, each a call into the store).

    In a rebuild (``Rebuilt``), the games' rows are the fill's own, carried from batch to
    batch and written as it settles; a notice the rebuild's ``settle`` would prune is
    numbered but never made nor written. ``settle`` prunes as the hourly chore does: every
    notice older than the retention (``before``) and each account's beyond its newest ``keep``,
    but each account's newest. So each account's notices are held (numbered, not made) and
    written at the batch's end, but an aged one followed by another; an account that has had
    ``keep`` or more holds its newest ``keep`` until the fill ends. On a store whose games span
    months most notices are past the retention; on one of busy accounts most are past ``keep``
    (tests/test_rebuilds.py)."""

    def __init__(
        self,
        games: dict[str, dict[str, Any] | None],
        keys: dict[int, str],
        rebuilt: Rebuilt | None = None,
    ) -> None:
        self.games = games  # the batch's rows of {games}, as they stand
        self.keys = keys  # each game's id as text (the rows' key) by its ``int``, made once a batch
        # (in a rebuild, the fill's: every row there is, so a game not known has none)
        self.rebuilt = rebuilt
        self.heads: dict[str, int] = {}  # account: its newest notice's number
        self.new_heads: set[str] = set()  # accounts without a row in {heads} yet
        self.changed: set[str] = set()  # games whose turn passed or whose seats changed
        self.created: list[tuple[str, int, int, str]] = []  # rows to add, unless there
        self.finished: list[str] = []  # games whose rows go
        self.written: list[Notice] = []

    def key(self, originator_id: uuid.UUID) -> str:
        """A game's id as text, the key of its row (made once a batch, or once a rebuild)."""
        key = self.keys.get(originator_id.int)
        if key is None:
            key = self.keys[originator_id.int] = str(originator_id)
        return key

    def turn(self, row: dict[str, Any], key: str, seat: int | None) -> str | None:
        """The game's turn passes to ``seat`` (None: nobody's): the account to tell, if any."""
        row["current"] = seat
        self.changed.add(key)
        return None if seat is None else row["seated"][seat]

    def your_turn(
        self, row: dict[str, Any], key: str, seat: int | None, game: dict[str, Any]
    ) -> list[tuple[str | None, str, dict[str, Any]]]:
        """``turn``, and a ``your_turn`` to the account of ``seat`` if there is one."""
        account = self.turn(row, key, seat)
        return [] if account is None else [(account, "your_turn", {**game, "seat": seat})]

    def notice(self, sql: Sql, seated: str, kind: str, micros: int, fields: Fields) -> None:
        """A notice to the account ``seated`` (as a game's row names it), by its lowercase
        handle, of an event at ``micros`` (since the epoch); none to the server's own bots."""
        account = seated.lower()
        if account in BOTS:
            return
        seq = self.heads.get(account)
        if seq is None:
            head = sql.one("SELECT seq FROM {heads} WHERE account = ?", [account])
            seq = head["seq"] if head else 0
            if not head:
                self.new_heads.add(account)
        seq = self.heads[account] = seq + 1
        if self.rebuilt is not None:
            self.rebuilt.hold(account, seq, kind, micros, fields)
            return
        at = format_at(time_of(micros))
        self.written.append(Notice(account, seq, kind, at, notice_data(seq, kind, at, fields)))

    def write(self, sql: Sql, stamp: int) -> list[Notice]:
        """The batch's changes, in a few statements; the notices written (none in a rebuild:
        its own are written as ``Rebuilt`` releases them)."""
        heads = self.heads.items()
        rebuilt = self.rebuilt
        if rebuilt is not None:
            rebuilt.release(sql, [account for account, seq in heads])
        sql.many(
            "INSERT INTO {notices} (account, seq, type, at, body) VALUES (?, ?, ?, ?, ?)",
            [(n.account, n.seq, n.type, n.at, n.text) for n in self.written],
        )
        sql.many(
            "INSERT INTO {heads} (account, seq, stamp) VALUES (?, ?, ?)",
            [(a, seq, stamp) for a, seq in heads if a in self.new_heads],
        )
        sql.many(
            "UPDATE {heads} SET seq = ?, stamp = ? WHERE account = ?",
            [(seq, stamp, a) for a, seq in heads if a not in self.new_heads],
        )
        if rebuilt is not None:
            return self.written  # the games' rows as the fill settles (``Rebuilt.write_games``)
        # The games' rows in the order their events changed them one by one: added (a row
        # there already stays), changed as they stand now, then deleted. A row only ever
        # changes to its game's latest state, so each ends as the events one by one left it.
        games = self.games
        sql.many(
            "INSERT INTO {games} (game_id, seats, rated, accounts, current) "
            "VALUES (?, ?, ?, ?, NULL) ON CONFLICT (game_id) DO NOTHING",
            self.created,
        )
        sql.many(
            "UPDATE {games} SET accounts = ?, current = ? WHERE game_id = ?",
            [
                (row["accounts"], row["current"], key)
                for key in sorted(self.changed)
                if (row := games[key]) is not None
            ],
        )
        sql.many("DELETE FROM {games} WHERE game_id = ?", [(key,) for key in self.finished])
        return self.written


class NoticesView(View):
    name = "notices"
    version = 1
    topics = (
        *(
            get_topic(cls)
            for cls in (
                Game.GameCreated,
                Game.SeatJoined,
                Game.SeatLeft,
                Game.TurnOrderDecided,
                *TURN_ENDS,
                Game.PlayerResigned,
                Game.GameFinished,
            )
        ),
        *CHALLENGE_TOPICS,
        *sorted(SEEK_EXPIRED_TOPICS),
    )
    tables = {  # noqa: RUF012 (the View's declaration)
        "notices": [
            "CREATE TABLE IF NOT EXISTS {notices} (account TEXT NOT NULL, seq BIGINT NOT NULL, "
            "type TEXT NOT NULL, at TEXT NOT NULL, body TEXT NOT NULL, "
            "PRIMARY KEY (account, seq))",
            "CREATE INDEX IF NOT EXISTS {notices}_at ON {notices} (at)",
        ],
        # Each account's newest notice, and the batch that wrote it (``stamp``): what a poller
        # reads to learn which accounts have new notices.
        "heads": [
            "CREATE TABLE IF NOT EXISTS {heads} (account TEXT PRIMARY KEY, seq BIGINT NOT NULL, "
            "stamp BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {heads}_stamp ON {heads} (stamp)",
        ],
        "batches": [
            "CREATE TABLE IF NOT EXISTS {batches} (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)"
        ],
        # The games not finished: who sits where (accounts), and whose turn it is.
        "games": [
            "CREATE TABLE IF NOT EXISTS {games} (game_id TEXT PRIMARY KEY, "
            "seats INTEGER NOT NULL, rated INTEGER NOT NULL, accounts TEXT NOT NULL, "
            "current INTEGER)"
        ],
    }

    # A turn's end: its version, time and next player, not the event made whole (``TurnEnd``).
    narrow_reads = {get_topic(cls): turn_end for cls in TURN_ENDS}  # noqa: RUF012 (a View's)

    # The scratch build only adds notices (``settle``'s prune reads them once, by a scan): no
    # key nor index on them there, two B-trees fewer per notice (the store's table has both).
    scratch_tables = {  # noqa: RUF012 (the View's declaration)
        "notices": [
            "CREATE TABLE IF NOT EXISTS {notices} (account TEXT NOT NULL, seq BIGINT NOT NULL, "
            "type TEXT NOT NULL, at TEXT NOT NULL, body TEXT NOT NULL)"
        ],
    }

    def __init__(self, store: Store, keep: int = KEEP) -> None:
        self.store = store
        self.keep = keep  # each account's newest notices kept, whatever their age (``KEEP``)
        self.hooks: list[Callable[[Sql, list[Notice]], None]] = []
        """Called inside the batch's transaction, on the live view only (webhooks' queue)."""
        self.listeners: list[Callable[[list[Notice]], None]] = []
        """Called after the batch committed, in the process that wrote it (the live hub)."""

    # ---------------------------------------------------------------------------- writing
    # A rebuild reads the turns (most of the log) of only the games that ever seated an account:
    # in the others they make no notice and change no row (``_notices``: no account).
    narrow_topics = tuple(sorted(QUIET))
    # (and the markers of imported games, which send nothing: read here, where there are few,
    # their games are not asked about in a query per page of the second pass: ~6 s of the
    # rebuild's wall clock at 100,000 games on PostgreSQL, the server's index probes)
    follow_topics = (CREATED, get_topic(Game.SeatJoined), *IMPORT_TOPICS)
    follow_reads = {CREATED: seating, get_topic(Game.SeatJoined): seating}  # noqa: RUF012

    def settle(self, sql: Sql) -> None:
        """A rebuild copies no notice the hourly prune would delete at once: on a server whose
        games span months, or of busy accounts, most of them."""
        rebuilt = sql.carried.get(self.name)
        if rebuilt is not None:
            rebuilt.release(sql)
            rebuilt.write_games(sql)
        prune(sql, datetime.now(UTC), self.keep)

    def rebuilt(self, sql: Sql) -> Rebuilt:
        """What the rebuild filling ``sql``'s scratch tables keeps from batch to batch."""
        rebuilt: Rebuilt | None = sql.carried.get(self.name)
        if rebuilt is None:
            rebuilt = sql.carried[self.name] = Rebuilt(datetime.now(UTC) - RETAIN, self.keep)
        return rebuilt

    def followed(self, events: list[tuple[int, Any]], sql: Sql) -> set[uuid.UUID]:
        """The games that these creations and seats seat an account in; the imported games
        the markers name are kept for the second pass (whose creations all come before the
        first pass's end, each with its marker: one transaction saves both)."""
        rebuilt = self.rebuilt(sql)
        rebuilt.imports_known = True
        found = set()
        for _, event in events:
            if type(event) is Seating:  # a creation or a seat (``follow_reads``)
                if event.seated:
                    found.add(event.originator_id)
            elif isinstance(event, ImportedGame.Recorded):  # type: ignore[attr-defined]
                game_id = event.game_id
                rebuilt.imported.add(game_id if type(game_id) is uuid.UUID else uuid.UUID(game_id))
        return found

    def prepare(self, items: list[Any], read: Sql) -> Prepared:
        """The events, and a challenge's or seek's state as of its event (what its notice
        shows) by the event's place among them (no pair made for each of millions of turns)."""
        out: list[Any] = []
        shown_at: dict[int, dict[str, Any]] = {}
        rebuilt = read.carried.get(self.name) if read.scratch else None
        imported: set[uuid.UUID]
        if rebuilt is not None and rebuilt.imports_known:
            imported = rebuilt.imported
        else:
            imported = self.store.imported(
                [
                    event.originator_id
                    for _, event in items
                    if type(event) is not TurnEnd and isinstance(event, Game.GameCreated)
                ]
            )
        for _, event in items:
            if type(event) is TurnEnd:  # most of the log: nothing to look up
                out.append(event)
                continue
            if isinstance(event, Game.GameCreated) and event.originator_id in imported:
                continue  # an imported game sends nothing (1.3): without its row, nor do its events
            shown = None
            if get_topic(type(event)) in SEEK_EXPIRED_TOPICS:
                seek: Any = self.store.repository.get(
                    event.originator_id, version=event.originator_version
                )
                shown = {"seek": seek.as_json(event.timestamp)}
            elif get_topic(type(event)) in CHALLENGE_TOPICS:
                found: Any = self.store.repository.get(
                    event.originator_id, version=event.originator_version
                )
                if isinstance(found, Challenge):
                    shown = found.as_json(event.timestamp)
            if shown is not None:
                shown_at[len(out)] = shown
            out.append(event)
        return out, shown_at

    def apply(self, sql: Sql, prepared: Prepared) -> list[Notice]:
        """The batch's notices. What changes in the tables is gathered as the events are read
        and written at the end in a few statements (``Changes``), not three or four an event: a
        rebuild where accounts sit in most games writes a notice for most turns."""
        found = sql.one("SELECT n FROM {batches} WHERE id = 1")
        stamp = (found["n"] if found else 0) + 1
        if found:
            sql.execute("UPDATE {batches} SET n = ? WHERE id = 1", [stamp])
        else:
            sql.execute("INSERT INTO {batches} (id, n) VALUES (1, ?)", [stamp])
        # a rebuild's scratch: no notice made that ``settle`` would prune, the games' rows its own
        if sql.scratch:
            rebuilt = self.rebuilt(sql)
            changes = Changes(rebuilt.games, rebuilt.keys, rebuilt)
        else:
            changes = Changes(*self._games(sql, prepared))
        events, shown_at = prepared
        for at, event in enumerate(events):
            if type(event) is TurnEnd:  # most of the log
                self._turn_ended(sql, changes, event)
                continue
            made = self._notices(changes, event, shown_at.get(at))
            if made:
                micros = micros_of(event.timestamp)
                for account, kind, fields in made:
                    if account is not None:
                        changes.notice(sql, account, kind, micros, fields)
        return changes.write(sql, stamp)

    def applied(self, sql: Sql, written: list[Notice]) -> None:
        if written:
            for hook in self.hooks:
                hook(sql, written)

    def committed(self, written: list[Notice]) -> None:
        if written:
            for listener in self.listeners:
                listener(written)

    @staticmethod
    def _games(
        sql: Sql, prepared: Prepared
    ) -> tuple[dict[str, dict[str, Any] | None], dict[int, str]]:
        """The rows of ``{games}`` for every game the batch's events are of, read at once
        (None where there is none), which ``_notices`` then keeps as it changes the table: a
        statement a batch instead of one a turn (most of the worker's statements on
        PostgreSQL, each a round trip: docs/performance.md, levers). With each game's id as
        text, made once for the batch rather than once an event, found by the id's ``int``
        (a ``UUID`` hashes in Python: ~0.1 µs, twice an event)."""
        events, shown_at = prepared
        ids = {
            event.originator_id.int: event for at, event in enumerate(events) if at not in shown_at
        }
        keys = {number: str(event.originator_id) for number, event in ids.items()}
        found: dict[str, dict[str, Any] | None] = dict.fromkeys(sorted(keys.values()))
        for chunk, marks in in_chunks(list(found)):
            query = "SELECT game_id, rated, accounts, current FROM {games} WHERE game_id IN "
            for row in sql.all(query + f"({marks})", chunk):
                found[row["game_id"]] = {
                    "rated": row["rated"],
                    "accounts": row["accounts"],
                    "current": row["current"],
                }
        return found, keys

    def _notices(
        self,
        changes: Changes,
        event: Any,
        shown: dict[str, Any] | None,
    ) -> list[tuple[str | None, str, dict[str, Any]]]:
        """(account, type, fields) of each notice the event makes. ``changes.games``: the rows
        of ``{games}`` as they stand (``_games``), kept up to date here and written at the
        batch's end (``Changes.write``)."""
        if shown is not None and "seek" in shown:
            return [(shown["seek"]["account"], "seek_expired", shown)]
        if shown is not None:
            return self._challenge_notices(event, shown)
        games = changes.games
        key = changes.key(event.originator_id)
        version = event.originator_version
        if isinstance(event, Game.GameCreated):
            # Every game not finished has a row (an account may join a lobby later).
            seats = list(event.accounts or [None] * event.seats)
            rated, accounts_text = int(bool(event.rated)), json.dumps(seats)
            changes.created.append((key, event.seats, rated, accounts_text))
            if games.get(key) is None:  # as the table: a row there already stays
                games[key] = {
                    "seats": event.seats,
                    "rated": rated,
                    "accounts": accounts_text,
                    "current": None,
                    "seated": seats,
                }
            return []
        row = games.get(key)
        if row is None:
            return []  # finished, or created before this view existed
        accounts = seated_accounts(row)
        if isinstance(event, SEAT_CHANGES):
            accounts[event.seat] = event.account if isinstance(event, Game.SeatJoined) else None
            row["accounts"] = json.dumps(accounts)
            changes.changed.add(key)  # its row written at the batch's end
            return []
        if isinstance(event, Game.GameFinished):
            changes.finished.append(key)
            games[key] = None
        if not any(accounts):
            return []
        game = {"game_id": key, "version": version}
        seated = [(seat, handle) for seat, handle in enumerate(accounts) if handle is not None]
        if isinstance(event, Game.TurnOrderDecided):
            started = {**game, "rated": bool(row["rated"]), "accounts": list(accounts)}
            out: list[tuple[str | None, str, dict[str, Any]]] = [
                (handle, "game_started", {**started, "seat": seat}) for seat, handle in seated
            ]
            return out + changes.your_turn(row, key, event.first_player, game)
        if isinstance(event, Game.PlayerResigned):
            if event.next_player is None or row["current"] == event.seat:
                return changes.your_turn(row, key, event.next_player, game)
            return []
        if isinstance(event, Game.GameFinished):
            return [
                (
                    handle,
                    "game_finished",
                    {**game, "seat": seat, "winner": event.winner, "reason": event.reason},
                )
                for seat, handle in seated
            ]
        return []

    @staticmethod
    def _turn_ended(sql: Sql, changes: Changes, event: TurnEnd) -> None:
        """A turn's end, most of the log: the turn passes, with a ``your_turn`` to the next
        player's account; what ``_notices`` and ``Changes.turn`` do, without the calls, lists,
        tuples and dicts they hand on (a rebuild reads millions of these)."""
        key = changes.keys.get(event.originator_id.int) or changes.key(event.originator_id)
        row = changes.games.get(key)
        if row is None:  # finished, or created before this view
            return
        accounts = row.get("seated") or seated_accounts(row)
        if not any(accounts):
            return
        seat = event.next_player
        row["current"] = seat
        changes.changed.add(key)
        if seat is not None and (account := accounts[seat]) is not None:
            fields = (key, event.originator_version, seat)
            changes.notice(sql, account, "your_turn", event.micros, fields)

    @staticmethod
    def _challenge_notices(
        event: Any, shown: dict[str, Any]
    ) -> list[tuple[str | None, str, dict[str, Any]]]:
        body = {"challenge": shown}
        if isinstance(event, Challenge.Issued):  # type: ignore[attr-defined]
            return [(shown["to"], "challenge", body)]
        if isinstance(event, Challenge.Accepted):  # type: ignore[attr-defined]
            return [(shown["from"], "challenge_accepted", body)]
        if isinstance(event, Challenge.Declined):  # type: ignore[attr-defined]
            return [(shown["from"], "challenge_declined", body)]
        if isinstance(event, Challenge.Expired):  # type: ignore[attr-defined]
            return [
                (shown["from"], "challenge_expired", body),
                (shown["to"], "challenge_expired", body),
            ]
        return [(shown["to"], "challenge_canceled", body)]


class Notices:
    """Reading the notices view."""

    def __init__(self, views: Views, view: NoticesView) -> None:
        self.views = views
        self.view = view
        self._next_prune = 0.0

    def latest(self, account: str, *, fresh: bool = True) -> int:
        """The account's newest notice's number (0: none yet)."""

        def run(sql: Sql) -> int:
            row = sql.one("SELECT seq FROM {heads} WHERE account = ?", [account.lower()])
            return int(row["seq"]) if row else 0

        result: int = self.views.read(self.view, run, fresh=fresh)
        return result

    def first_kept(self, account: str) -> int:
        """The number of the account's oldest notice still kept (older ones are pruned), by
        its handle in any case (the stream asks by the handle as registered)."""

        def run(sql: Sql) -> int:
            row = sql.one(
                "SELECT min(seq) AS s FROM {notices} WHERE account = ?", [account.lower()]
            )
            return int(row["s"]) if row and row["s"] is not None else 0

        result: int = self.views.read(self.view, run, fresh=False)
        return result

    def after(self, account: str, after: int, limit: int) -> list[Notice]:
        """The account's notices after number ``after``, oldest first, at most ``limit``."""

        def run(sql: Sql) -> list[Any]:
            return sql.all(
                "SELECT * FROM {notices} WHERE account = ? AND seq > ? ORDER BY seq LIMIT ?",
                [account.lower(), after, limit],
            )

        return [
            Notice(
                r["account"], int(r["seq"]), r["type"], r["at"], json.loads(r["body"]), r["body"]
            )
            for r in self.views.read(self.view, run, fresh=False)
        ]

    def changed(self, stamp: int) -> tuple[int, dict[str, int]]:
        """The accounts with notices written after batch ``stamp``, each with its newest
        number, and the newest batch's stamp (start with -1 for just the stamp)."""

        def run(sql: Sql) -> tuple[int, dict[str, int]]:
            row = sql.one("SELECT n FROM {batches} WHERE id = 1")
            newest = int(row["n"]) if row else 0
            if stamp < 0 or newest <= stamp:
                return newest, {}
            rows = sql.all("SELECT account, seq FROM {heads} WHERE stamp > ?", [stamp])
            return newest, {r["account"]: int(r["seq"]) for r in rows}

        result: tuple[int, dict[str, int]] = self.views.read(self.view, run, fresh=False)
        return result

    def prune(self, now: datetime | None = None) -> None:
        """Forget notices older than ``RETAIN``, and each account's beyond its newest ``KEEP``
        (each account's newest is kept: its number goes on from there)."""
        self.views.write(
            self.view, lambda sql: prune(sql, now or datetime.now(UTC), self.view.keep)
        )

    def prune_now_and_then(self) -> None:
        """``prune``, at most once an hour per process (the scheduler's chore)."""
        now = time.monotonic()
        if now < self._next_prune:
            return
        self._next_prune = now + PRUNE_EVERY
        self.prune()

    def move_on(self) -> None:
        """Catch the view up (a process with account streams and no scheduler of its own)."""
        self.views.catch_up(self.view, deadline=time.monotonic() + 1.0, lazy=True)
