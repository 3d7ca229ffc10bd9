"""Reading the notification log (every event of every game) in commit order.

A reader's place in the log is a ``Position``, two integers that a view stores beside its rows
(``service.persistence.views``), so that it resumes where it stopped after any restart.

SQLite writes one transaction at a time, so notification ids are committed in order: the
position is ``(0, last id read)``. PostgreSQL commits concurrent inserts in any order (the
service gives up the library's table lock: ``postgres.py``), so there every row records the
transaction that wrote it (column ``tx``) and the log is read in the order of the index
``(tx, notification_id)``, only below the current snapshot's ``xmin``: every transaction below it
has committed or aborted, so no row can still appear there, and the position is the pair
``(tx, notification_id)`` of the last row read. A page is one range of that index, from the
position up to ``xmin``: the planner reads it as an index range (``EXPLAIN`` in
tests/test_views.py `test_the_log_poll_reads_an_index_range_on_postgresql`), not from the start
of the log as the earlier query (by ``notification_id`` alone, with ``tx`` as a filter) made it
do.
"""

from __future__ import annotations

import functools
import heapq
import json
import queue
import threading
import uuid
from collections.abc import Collection, Generator, Iterator
from operator import itemgetter
from typing import Any, NamedTuple, cast

from eventsourcing.persistence import Notification
from psycopg.rows import tuple_row

from service.persistence.archive import ArchiveSpan, Row
from service.persistence.guard import guarded

ARCHIVES_READ_AT_ONCE = 200  # archived games read in one query as a reader meets them


class Position(NamedTuple):
    """Where a reader is in the log: everything at or before it has been read. On SQLite ``tx``
    is 0 and ``id`` the last notification id read; on PostgreSQL, the last row's transaction
    id and notification id, or the end of the window read (``(xmin, 0)``, or the reader's
    ``until`` if earlier) once a read returned fewer rows than it asked for: nothing more can
    appear below ``xmin``."""

    tx: int
    id: int


START = Position(0, 0)


class Head(NamedTuple):
    """A notification without its event's state: where it is in the log, whose, and what."""

    id: int
    originator_id: uuid.UUID
    originator_version: int
    topic: str
    archived: bool = False
    """Read from its game's archive (archive.py), not from a row: the game is archived. Set on
    the heads a reader hands out (``heads``, ``scan(heads=True)``); a view's ``by_head`` makes
    its heads from notifications, and they say False."""


_new = object.__new__
_set = object.__setattr__


def notification(
    id: int, originator_id: Any, originator_version: int, topic: str, state: bytes
) -> Notification:
    """The library's ``Notification`` of a row, its fields set at once: a rebuild reads millions,
    and the frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, four
    times the time (2.4 against 0.6 µs a row, timeit on a slow VM; docs/performance.md,
    levers). The same object (tests/test_log_reader.py checks it against the class's own
    fields)."""
    made = _new(Notification)
    _set(
        made,
        "__dict__",
        {
            "originator_id": originator_id,
            "originator_version": originator_version,
            "topic": topic,
            "state": state,
            "id": id,
        },
    )
    return made


class ScannedRow(tuple):  # type: ignore[type-arg]
    """A notification as a rebuild's scan reads it (``LogReader.scan``): the row's own values
    (id, game, version, topic, the transaction as text or None on SQLite, state), read as the
    library's ``Notification`` is, by its fields' names. A rebuild reads millions: made by
    ``tuple.__new__`` without a Python call (``scanned``), one object where a ``Notification``
    is two (itself and its ``__dict__``), made and freed while the thread that applies the
    pages waits for the interpreter's lock (docs/scaling.md)."""

    __slots__ = ()
    id = property(itemgetter(0))
    originator_id = property(itemgetter(1))
    originator_version = property(itemgetter(2))
    topic = property(itemgetter(3))
    state = property(itemgetter(5))


scanned = functools.partial(tuple.__new__, ScannedRow)
"""A ``ScannedRow`` of a row's tuple (the scan's query's columns, in its order)."""


class LogReader:
    """Follows the application's notification log (every event of every game) in commit order,
    so that a follower sees every event exactly once, from ``position`` on.

    A read that returns fewer rows than asked has read the log to its end as it stood: the
    position then moves to that end even if no row there matched the topics, so that a view
    can tell it is up to date (``views.Views.fresh``)."""

    def __init__(
        self,
        recorder: Any,
        topics: tuple[str, ...] = (),
        position: Position = START,
        *,
        narrow: tuple[tuple[str, ...], Collection[uuid.UUID]] | None = None,
        until: Position | None = None,
    ) -> None:
        """``narrow``: (some topics, some games): of those topics, only those games' events
        (left out by the database, unread). ``until``: no further than that position (one
        another reader reached); the reader's end then."""
        self.recorder = recorder
        self.topics = list(topics)
        self.postgres = recorder.dialect == "postgres"
        self.position = position
        self.narrow = narrow
        self.until = until
        self._narrow_json: str | None = None  # ``narrow``'s games as SQLite reads them, made once
        # Finished games' archived events (archive.py), merged into the log's order: the
        # archives after the reader's first position, looked up at its first read (one index
        # range: none for a reader at the log's end, as a game is archived only once every
        # view's tracked position has passed its last event), read as the reader meets them.
        self._spans: list[ArchiveSpan] | None = None
        self._next_span = 0
        self._pending: list[tuple[Position, int, uuid.UUID, Row]] = []  # a heap, by place

    def read(self, limit: int) -> list[Notification]:
        """The next notifications (at most ``limit``); fewer means the log is read to its end."""
        return guarded(lambda: self._read(limit, heads=False))

    def heads(self, limit: int) -> list[Head]:
        """As ``read``, without the events' states: for a follower that needs only whose event
        each is, its version and its topic (the scheduler, the live streams' store poller), the
        states are neither copied nor wrapped."""
        return guarded(lambda: self._read(limit, heads=True))

    def scan(self, page: int, *, heads: bool = False, ordered: bool = True) -> Iterator[list[Any]]:
        """The log from the position to its end as it stands now, ``page`` items at a time (as
        ``read``, or ``heads``), the position moved past each page as it is handed out; the
        last page has fewer than ``page``. In one pass on either store: one query in one
        transaction, its rows handed out as ``ScannedRow``, rather than a query per page. On
        PostgreSQL read through a server-side cursor, ordered once (the planner reads the whole
        table and sorts the rows that match), not an index range a page walked past every row
        of other topics; on SQLite in rowid order (``_scan_sqlite``). For a rebuild: its
        transaction stays open until the last page, however long the follower takes over each.

        ``ordered=False``: the same items, in no particular order on PostgreSQL (the server's
        own, a sequential scan of the table rather than its rows found in the log's order
        through an index: 3.4 against 7.6 s for the creations and seats at 100,000 games), for
        a follower that gathers a set (a rebuild's first pass); the archived events come after
        the rows, in the last page (which may then hold more than ``page``), and the position
        moves only then, to the window's end."""
        if not self.postgres:
            yield from self._scan_sqlite(page, heads=heads)
            return
        yield from self._scan_postgres(page, heads=heads, ordered=ordered)

    def end(self) -> Position:
        """The log's end now: a reader at or past it has read every event committed before this
        call returned (what a client that just acted expects a view to show)."""
        return guarded(self._end)

    def newest(self) -> Position:
        """Where the newest event a reader could read now stands (``START`` in an empty log):
        a reader at or past it would find nothing. Unlike ``end``, on PostgreSQL it moves only
        with the log's own rows, not with every transaction of the server (a view's position
        written, any other database's writes), and it is one statement: the index on
        ``(tx, notification_id)`` read backwards from the snapshot's xmin, one row."""
        return guarded(self._newest)

    def last(self) -> Position:
        """Where the newest event committed before this call stands (``START`` in an empty
        log). A reader at or past it has read every event committed before this call returned,
        as one past ``end`` has; but on PostgreSQL a reader that has read everything is past it
        already, where ``end`` (the snapshot's xmax) moves with every transaction of the server:
        a view read at rest was read again, and its position written, at every request. A
        reader stops below the oldest transaction still open, so past an event committed after
        one that is still open it reaches this only once that one ends. One statement: the
        index on ``(tx, notification_id)`` read backwards, one row."""
        return guarded(functools.partial(self._newest, below_xmin=False))

    def _newest_query(self, *, below_xmin: bool = True) -> str:
        # Ordered by the columns, not by ``tx_text`` (a sort of the whole table as text).
        bound = "WHERE tx < pg_snapshot_xmin(pg_current_snapshot()) " if below_xmin else ""
        return (
            f"SELECT tx::text AS tx_text, notification_id FROM {self._table()} "
            f"{bound}ORDER BY tx DESC, notification_id DESC LIMIT 1"
        )

    def _newest(self, *, below_xmin: bool = True) -> Position:
        if not self.postgres:
            return self._end()
        with self.recorder.datastore.reading() as curs:
            curs.execute(self._newest_query(below_xmin=below_xmin))
            row = curs.fetchone()
        if row is None:
            return START
        return Position(int(row["tx_text"]), int(row["notification_id"]))

    def skip_to_end(self) -> None:
        """From now on, only what is recorded from here on (on PostgreSQL, with what the
        transactions still open may yet commit: never less)."""

        def xmin() -> Position:
            with self.recorder.datastore.reading() as curs:
                curs.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS x")
                return Position(int(curs.fetchone()["x"]), 0)

        self.position = guarded(xmin) if self.postgres else self.end()

    # ----------------------------------------------------------------------------- SQLite
    def _read(self, limit: int, *, heads: bool) -> list[Any]:
        if self.postgres:
            return self._read_postgres(limit, heads=heads)
        with self.recorder.datastore.transaction(commit=False) as cursor:
            # In one read transaction: the end is the end of what the page was read from.
            query, params, end = self._window_sqlite(cursor, heads=heads)
            cursor.execute(query + " LIMIT ?", [*params, limit])
            rows = cursor.fetchall()
        found = self._items_sqlite(rows, heads=heads)
        if self._archives():
            places = [Position(0, item.id) for item in found]
            upto = places[-1] if len(found) == limit else Position(0, end)
            return self._merged(found, places, upto, limit, heads)
        if len(found) < limit:
            self.position = Position(0, max(end, self.position.id))
        elif found:
            self.position = Position(0, found[-1].id)
        return found

    def _scan_sqlite(self, page: int, *, heads: bool) -> Iterator[list[Any]]:
        """``scan`` on SQLite: one statement, in one read transaction, read ``page`` rows at a
        time, as on PostgreSQL. A statement a page started each page afresh: the narrowed games'
        list (``json_each``, ~65,000 games at 100,000) made into a table again, ~40 ms, 18% of a
        notices' rebuild (docs/scaling.md). Its read transaction stays open until the last
        page, so the WAL is not checkpointed past it meanwhile: it grows by what is written
        during the scan, as any long read lets it."""
        with self.recorder.datastore.transaction(commit=False) as cursor:
            cursor.row_factory = None  # plain tuples, as PostgreSQL's scan reads
            query, params, end = self._window_sqlite(cursor, heads=heads)
            cursor.execute(query, params)
            while True:
                rows = cursor.fetchmany(page)
                found = self._items_sqlite(rows, heads=heads, scanning=True)
                if self._archives():  # a page may then hold more than ``page``
                    places = [Position(0, item.id) for item in found]
                    upto = places[-1] if len(rows) == page else Position(0, end)
                    found = self._merged(found, places, upto, None, heads)
                else:
                    if found:
                        self.position = Position(0, found[-1].id)
                    if len(rows) < page:  # read to the window's end, as ``read`` says
                        self.position = Position(0, max(end, self.position.id))
                yield found
                if len(rows) < page:
                    return

    def _window_sqlite(self, cursor: Any, *, heads: bool) -> tuple[str, list[Any], int]:
        """The query of what follows the position in the log up to its end as ``cursor``'s
        transaction sees it (or ``until``), in the log's order; its parameters; that end."""
        table = self.recorder.events_table_name
        columns = "rowid, originator_id, originator_version, topic" + ("" if heads else ", state")
        where = "rowid > ?"
        params: list[Any] = [self.position.id]
        if self.topics:
            where += f" AND topic IN ({','.join('?' * len(self.topics))})"
            params += self.topics
        if self.narrow is not None:
            topics, games = self.narrow
            where += (
                f" AND (topic NOT IN ({','.join('?' * len(topics))}) "
                "OR originator_id IN (SELECT value FROM json_each(?)))"
            )
            if self._narrow_json is None:  # the library's form, made once a reader: a rebuild's
                # pages read ~65,000 games (made a page, 11% of its CPU on SQLite)
                self._narrow_json = json.dumps([game.hex for game in games])
            params += [*topics, self._narrow_json]
        cursor.execute(f"SELECT coalesce(max(rowid), 0) FROM {table}")
        end = int(cursor.fetchone()[0])
        if self.until is not None:
            end = min(end, self.until.id)
        query = f"SELECT {columns} FROM {table} WHERE {where} AND rowid <= ? ORDER BY rowid"
        return query, [*params, end], end

    @staticmethod
    def _items_sqlite(rows: list[Any], *, heads: bool, scanning: bool = False) -> list[Any]:
        """The notifications (or heads) of SQLite's rows; ``scanning``, as ``ScannedRow``."""
        ids: dict[str, uuid.UUID] = {}  # each game's hex parsed once a page, not once a row
        found: list[Any] = []
        for row in rows:
            hexed = row[1]
            originator_id = ids.get(hexed) or ids.setdefault(hexed, uuid.UUID(hexed))
            if heads:
                found.append(Head(row[0], originator_id, row[2], row[3]))
            elif scanning:
                found.append(scanned((row[0], originator_id, row[2], row[3], None, row[4])))
            else:
                found.append(notification(row[0], originator_id, row[2], row[3], row[4]))
        return found

    # ------------------------------------------------------------------------- PostgreSQL
    def _table(self) -> str:
        return f'"{self.recorder.datastore.schema}"."{self.recorder.events_table_name}"'

    def _window(
        self, curs: Any, *, heads: bool, ordered: bool = True
    ) -> tuple[str, list[Any], int]:
        """The query of what follows the position in the log, up to the snapshot's xmin (what
        no transaction still open can write below), in the log's order if ``ordered``; its
        parameters; xmin, read by a statement of its own first (a scan's transaction reads on
        with snapshots of its own: every transaction below that xmin had ended before they were
        taken)."""
        curs.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS x")
        xmin = int(curs.fetchone()["x"])
        query, params = self._window_query(heads=heads, xmin=xmin, ordered=ordered)
        return query, params, xmin

    def _window_query(
        self, *, heads: bool, xmin: int | None, ordered: bool = True
    ) -> tuple[str, list[Any]]:
        """The query of what follows the position in the log below ``xmin`` (None: below the
        column ``w.x`` of the statement it is part of, its own snapshot's xmin), in the log's
        order if ``ordered``, and its parameters. The row comparison on (tx, notification_id),
        bounded by xmin, is one range of their index, read in its order (unordered, the
        planner scans the table instead)."""
        columns = "notification_id, originator_id, originator_version, topic, tx::text AS tx_text"
        if not heads:
            columns += ", state"
        below = "w.x" if xmin is None else "%s::text::xid8"
        query = (
            f"SELECT {columns} FROM {self._table()} "
            f"WHERE (tx, notification_id) > (%s::text::xid8, %s) AND tx < {below}"
        )
        params: list[Any] = [str(self.position.tx), self.position.id]
        if xmin is not None:
            params.append(str(xmin))
        if self.topics:
            query += " AND topic = ANY(%s)"
            params.append(self.topics)
        if self.narrow is not None:
            # A subquery, which the planner hashes once (an array's ANY may be searched through
            # for each row: millions of turns against thousands of games).
            query += " AND (topic <> ALL(%s) OR originator_id IN (SELECT unnest(%s::uuid[])))"
            params += [list(self.narrow[0]), list(self.narrow[1])]
        if self.until is not None:
            query += " AND (tx, notification_id) <= (%s::text::xid8, %s)"
            params += [str(self.until.tx), self.until.id]
        return (query + " ORDER BY tx, notification_id" if ordered else query), params

    def _page_query(self, *, heads: bool) -> tuple[str, list[Any]]:
        """``_read_postgres``'s statement (its page's size the last parameter, to add) and its
        parameters: the page below the statement's own xmin, joined to the xmin's one row."""
        query, params = self._window_query(heads=heads, xmin=None)
        return (
            "SELECT w.x::text AS xmin_text, page.* FROM "
            "(SELECT pg_snapshot_xmin(pg_current_snapshot()) AS x) AS w "
            f"LEFT JOIN LATERAL ({query} LIMIT %s) AS page ON true"
        ), params

    def _window_end(self, xmin: int) -> Position:
        """Where a reader stands once it has read its window to the end."""
        end = Position(xmin, 0)
        return end if self.until is None else min(end, self.until)

    def _read_postgres(self, limit: int, *, heads: bool) -> list[Any]:
        # One statement: its snapshot's xmin, and the page below it. Every transaction below
        # a snapshot's xmin had ended when the snapshot was taken, so the statement reads all
        # of their rows. (The xmin read by a statement of its own first was a round trip more
        # for every view at every pass of the worker: docs/performance.md, levers.) The page
        # joined to the xmin's one row, so that an empty page still gives the xmin.
        query, params = self._page_query(heads=heads)
        with self.recorder.datastore.reading() as curs:
            curs.execute(query, [*params, limit])  # no sort; the LIMIT stops the index's range
            rows = curs.fetchall()
        xmin = int(rows[0]["xmin_text"])
        if rows[0]["notification_id"] is None:  # the xmin's row alone: an empty page
            rows = []
        found: list[Any] = [
            Head(
                row["notification_id"],
                row["originator_id"],
                row["originator_version"],
                row["topic"],
            )
            if heads
            else notification(
                row["notification_id"],
                row["originator_id"],
                row["originator_version"],
                row["topic"],
                bytes(row["state"]),
            )
            for row in rows
        ]
        if self._archives():
            places = [Position(int(row["tx_text"]), row["notification_id"]) for row in rows]
            upto = places[-1] if len(found) == limit else self._window_end(xmin)
            return self._merged(found, places, upto, limit, heads)
        if len(found) < limit:  # read to the window's end: nothing more can appear below xmin
            self.position = max(self.position, self._window_end(xmin))
        elif rows:
            self.position = Position(int(rows[-1]["tx_text"]), rows[-1]["notification_id"])
        return found

    def _scan_postgres(self, page: int, *, heads: bool, ordered: bool) -> Iterator[list[Any]]:
        with self.recorder.datastore.transaction(commit=False) as curs:
            # The follower's work between pages leaves the transaction idle for a while.
            curs.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
            query, params, xmin = self._window(curs, heads=heads, ordered=ordered)
            # Rows as tuples: a rebuild reads millions, and a dict a row costs microseconds.
            with curs.connection.cursor(name="cantstop_log_scan", row_factory=tuple_row) as scan:
                scan.itersize = page
                scan.execute(query, params)
                while True:
                    rows = scan.fetchmany(page)
                    found: list[Any]
                    if heads:
                        found = [Head(r[0], r[1], r[2], r[3]) for r in rows]
                    else:
                        found = list(map(scanned, rows))
                    if not ordered:  # the position moves at the end, the archived last
                        if len(rows) < page:
                            end = self._window_end(xmin)
                            if self._archives():
                                found += self._merged([], [], end, None, heads)
                            self.position = max(self.position, end)
                    elif self._archives():  # a page may then hold more than ``page``
                        places = [Position(int(r[4]), r[0]) for r in rows]
                        upto = places[-1] if len(rows) == page else self._window_end(xmin)
                        found = self._merged(found, places, upto, None, heads)
                    else:
                        if rows:
                            self.position = Position(int(rows[-1][4]), rows[-1][0])
                        if len(rows) < page:  # read to the window's end, as ``read`` says
                            self.position = max(self.position, self._window_end(xmin))
                    yield found
                    if len(rows) < page:
                        return

    # --------------------------------------------------------------- archived games' events
    def _archives(self) -> bool:
        """Whether archived events may still come in this reader's reads (the archives after
        its starting place are looked up at its first read)."""
        if self._spans is None:
            self._spans = guarded(
                lambda: self.recorder.archives_after(tuple(self.position), self.topics)
            )
        if self._next_span < len(self._spans) or self._pending:
            return True
        self._spans, self._next_span = [], 0  # all met: what a far reader held is let go
        return False

    def _merged(
        self,
        found: list[Any],
        places: list[Position],
        upto: Position,
        limit: int | None,
        heads: bool,
    ) -> list[Any]:
        """The rows read (``found``, at ``places``: everything of the log up to ``upto`` not
        archived) with the archived events after the position up to ``upto``, in the log's
        order; at most ``limit`` of them, the position moved past the last handed out."""
        spans, pending = cast("list[ArchiveSpan]", self._spans), self._pending
        while self._next_span < len(spans) and spans[self._next_span].first <= upto:
            batch: list[uuid.UUID] = []
            while (
                self._next_span < len(spans)
                and spans[self._next_span].first <= upto
                and len(batch) < ARCHIVES_READ_AT_ONCE
            ):
                batch.append(spans[self._next_span].originator_id)
                self._next_span += 1
            games = self._archived(batch)
            for game_id, rows in games.items():
                for row in rows:
                    if self._wanted(game_id, row):
                        heapq.heappush(pending, (Position(row.tx, row.id), row.id, game_id, row))
        merged: list[tuple[Position, Any, Any]] = [
            (place, item, None) for place, item in zip(places, found, strict=True)
        ]
        taken = 0
        while pending and pending[0][0] <= upto:
            waiting = heapq.heappop(pending)
            place, _, game_id, row = waiting
            item = (
                Head(row.id, game_id, row.version, row.topic, True)
                if heads
                else notification(row.id, game_id, row.version, row.topic, row.state)
            )
            merged.append((place, item, waiting))
            taken += 1
        if taken:
            merged.sort(key=lambda entry: entry[0])
        if limit is not None and len(merged) > limit:
            # archived events not handed out wait their turn again; rows are read again
            for _, _, waiting in merged[limit:]:
                if waiting is not None:
                    heapq.heappush(pending, waiting)
            merged = merged[:limit]
            self.position = merged[-1][0]
        else:
            self.position = max(self.position, upto)
        return [item for _, item, _ in merged]

    def _archived(self, games: list[uuid.UUID]) -> dict[uuid.UUID, list[Row]]:
        """These archived games' rows of the reader's topics (all, if it names none); of a game
        ``narrow`` leaves out, only those of the topics it does not narrow."""
        read = self.recorder.archived_rows
        if self.narrow is None:
            return guarded(functools.partial(read, games, self.topics or None))
        narrowed, followed = self.narrow
        kept = [game for game in games if game in followed]
        others = [game for game in games if game not in followed]
        found = guarded(functools.partial(read, kept, self.topics or None)) if kept else {}
        left = [topic for topic in self.topics if topic not in narrowed]
        if others and (left or not self.topics):
            # no topics named: every topic, the narrowed ones left out by ``_wanted``
            found.update(guarded(functools.partial(read, others, left or None)))
        return found

    def _wanted(self, game_id: uuid.UUID, row: Row) -> bool:
        """Whether this reader reads an archived event: after its position, no further than
        ``until``, of its topics, and of a game ``narrow`` keeps."""
        place = Position(row.tx, row.id)
        if place <= self.position or (self.until is not None and place > self.until):
            return False
        if self.topics and row.topic not in self.topics:
            return False
        if self.narrow is not None:
            topics, games = self.narrow
            if row.topic in topics and game_id not in games:
                return False
        return True

    def newest_plan(self, *, below_xmin: bool = True) -> str:
        """PostgreSQL's plan for ``newest`` (``last`` if not ``below_xmin``): what tests check,
        one row of the index, read backwards, never the table."""
        with self.recorder.datastore.reading() as curs:
            curs.execute("EXPLAIN " + self._newest_query(below_xmin=below_xmin))
            return "\n".join(next(iter(row.values())) for row in curs.fetchall())

    def plan(self, limit: int = 500) -> str:
        """PostgreSQL's plan for a page from the current position, the statement a read runs
        (what tests check)."""
        query, params = self._page_query(heads=False)
        with self.recorder.datastore.reading() as curs:
            curs.execute("EXPLAIN " + query, [*params, limit])
            return "\n".join(next(iter(row.values())) for row in curs.fetchall())

    def _end(self) -> Position:
        if not self.postgres:
            table = self.recorder.events_table_name
            with self.recorder.datastore.transaction(commit=False) as cursor:
                cursor.execute(f"SELECT coalesce(max(rowid), 0) FROM {table}")
                return Position(0, int(cursor.fetchone()[0]))
        # Every transaction that committed before now has an id below the snapshot's xmax; a
        # reader is past all of them once it has read to an xmin at least that high.
        with self.recorder.datastore.reading() as curs:
            curs.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS x")
            return Position(int(curs.fetchone()["x"]), 0)


def ahead(pages: Iterator[list[Any]]) -> Generator[list[Any], None, None]:
    """``pages`` (a ``scan``), each read in a thread of its own while the caller works on the one
    before: on PostgreSQL the server finds and sends the next page (and the driver waits for it,
    the GIL let go) meanwhile, where a rebuild waited for each page in turn (~15 s of the
    notices' 90 at 100,000 games). One page is held ahead; the scan's own position moves as it
    hands each page to the thread, so it may be a page past what the caller has worked on until
    the last is taken. Errors reach the caller with the page they stopped; a caller that stops
    early (an error of its own) ends the scan, in its thread, before going on."""
    handed: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def hand(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                handed.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for page in pages:
                if not hand(("page", page)):
                    break
        except BaseException as exc:  # the caller raises it
            hand(("error", exc))
        else:
            hand(("end", None))
        finally:
            if isinstance(pages, Generator):
                pages.close()  # the scan's cursor and transaction, in the thread that opened them

    reader = threading.Thread(target=read, name="cantstop-log-ahead", daemon=True)
    reader.start()
    try:
        while True:
            kind, item = handed.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item
    finally:
        stop.set()
        reader.join()
