"""Cross-game views kept in tables of the event store's own database, each updated exactly once
per event, with a tracking position, resumable after any crash.

A ``View`` says which event types it follows and what its tables are; ``Views`` keeps every view's
place in the log in one table (``cantstop_views``: the view's name, the version of its code that
built it, the generation of its tables and its ``Position``) and moves it on:

- **Exactly once.** A batch of events is read outside any transaction; then, in one write
  transaction, the view's tracking row is locked (PostgreSQL: ``FOR UPDATE``; SQLite: ``BEGIN
  IMMEDIATE``), and only if it still stands where the batch was read from are the batch's changes
  written and the position moved, together. A crash anywhere before the commit leaves both as they
  were; another process that got there first makes this one read again. Two processes never both
  apply one event.
- **Any process moves a view on.** The scheduler's loop catches every view up at each poll; a
  request that reads a view first catches it up to the end of the log as it stood when the request
  came (``fresh``), so a client sees its own writes in the listing on its next request, whichever
  worker or host answers. Nothing is rebuilt when a process starts: it reads the tracking row.
- **Rebuilds beside the live view.** ``rebuild`` fills a new generation of the view's tables from
  the start of the log while the old one keeps serving, then switches the tracking row to it in one
  transaction and drops the old tables. It builds the new generation first in a scratch SQLite
  file of its own (the view's SQL is the same on both stores), reading the log in large pages, and
  copies the tables into the store in one transaction (PostgreSQL: ``COPY``) with the position it
  reached: a statement per event costs microseconds in the scratch file, where on PostgreSQL it
  is a round trip. A view may also say how it is built from a summary of the log
  (``View.summary``: the due-index plans only the games not finished). A view whose code changed
  (its ``version``) is served as it stands and not moved on until that command rebuilds it:
  never silently at a start.
- **Damage is passed over.** An event that cannot be decoded is logged and skipped; the view goes
  on for everyone (the game's own reads report it as ``corrupt_game``).

Why not the library's ``ProjectionRunner`` and ``TrackingRecorder``: they track one notification
id, which is a complete position only when ids commit in order; on PostgreSQL the service gives up
the table lock that made them so (``postgres.py``), and the log is read by finished transaction
(``log.py``), so a position is two numbers. Why not update the views in the action's own
transaction: see the README, "Views across games".
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, cast

import psycopg
from eventsourcing.persistence import Notification, OperationalError

from service import collector
from service.errors import describe
from service.persistence.archive import ARCHIVE_LOCK
from service.persistence.errors import StoreUnavailable
from service.persistence.guard import caused_by, guarded
from service.persistence.log import START, Head, LogReader, Position, ahead
from service.persistence.sqlite import library_error
from service.persistence.tables import Sql

log = logging.getLogger("cantstop.views")

TRACKING = "cantstop_views"
BATCH = 500
PAGE = 20_000  # events a rebuild reads and applies at a time in its scratch file
SWEEP_EVERY = 8
"""Pages a rebuild of a view that leaves cycles (``View.leaves_cycles``) applies between sweeps
of the collector's youngest generation. A sweep walks every object made since the last one and
still alive: on PostgreSQL chiefly the next page, read ahead meanwhile (~80,000 objects, 16–50
ms), whatever the pages left for it (a few cycles a rated game). A sweep a page was a tenth of
the notices' rebuild at 100,000 games; the others are swept once after each pass."""
FRESH_BUDGET = 1.0  # seconds a read waits for its view to reach the log's end, then answers
REBUILD = "#rebuild"  # the suffix of a rebuild's tracking row
SCRATCH = "cantstop_scratch"  # a rebuild's scratch file, attached to copy from (SQLite)
# Seconds a follower (``catch_up(lazy=True)``) may read past events of no concern to a view
# without storing the view's position: where it read to is kept in the process meanwhile.
PASSED_KEPT = 10.0


def is_index(statement: str) -> bool:
    """A view's statement that makes an index (``CREATE [UNIQUE] INDEX IF NOT EXISTS``), not a
    table: a rebuild makes them once the copy is in."""
    words = statement.split(None, 3)
    return words[:2] == ["CREATE", "INDEX"] or words[:3] == ["CREATE", "UNIQUE", "INDEX"]


class TablesGone(StoreUnavailable):
    """A view's tables were not there: dropped by a rebuild's switch since its tracking row was
    read (read the row again), or missing from a damaged store (a 503 naming them). Not a lock
    to wait for, nor a store that went down: no breaker counts it."""


class Tracking(NamedTuple):
    name: str
    version: int
    generation: int
    position: Position

    @classmethod
    def of(cls, name: str, row: Any) -> Tracking:
        """From a row of the tracking table."""
        position = Position(int(row["tx"]), int(row["position"]))
        return cls(name, int(row["version"]), int(row["generation"]), position)


def _missing_table(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.errors.UndefinedTable) or (
        isinstance(exc, sqlite3.OperationalError) and str(exc).startswith("no such table")
    )


class View:
    """A view across games. Subclasses name it, give its tables and how events change them.

    ``tables`` maps each table's short name to its ``CREATE`` statements, written with
    ``{name}`` for the table's name in the store (which carries the view's generation) and
    ``?`` placeholders; the same SQL runs on SQLite and PostgreSQL. Bump ``version`` whenever the
    code changes what the tables hold: the view is then rebuilt by ``cantstop projections
    rebuild``, not silently."""

    name: ClassVar[str]
    version: ClassVar[int] = 1
    topics: ClassVar[tuple[str, ...]] = ()
    heads_only: ClassVar[bool] = False  # True: the events' states are not read (Head rows)
    by_head: ClassVar[frozenset[str]] = frozenset()
    """Topics whose events the view tells by their heads alone (``Head``: whose event, which
    kind): handed to it as heads, their states not decoded (~25 µs an event)."""
    narrow_reads: ClassVar[dict[str, Callable[[Notification, Any], Any]]] = {}
    """Topics whose events the view reads through a function of its own rather than decoded
    whole: given the stored notification and the application's mapper (which decodes a row
    whole), it returns what the view needs of the event (the notices: a turn's end's version,
    time and next player, of millions in a rebuild)."""
    tables: ClassVar[dict[str, list[str]]] = {}
    scratch_tables: ClassVar[dict[str, list[str]]] = {}
    """A rebuild's scratch tables where they differ from ``tables``: the same columns in the same
    order, without the indexes and keys the scratch build never reads by (each costs a B-tree
    written per row, and the store's tables have them all). Tables not named here are as in
    ``tables``."""

    def prepare(self, items: list[Any], read: Sql) -> Any:
        """What the batch will write, worked out before the write transaction (it may read the
        view's tables and the games). ``items``: (notification id, event) pairs, or ``Head``
        rows for a ``heads_only`` view. By default, the items themselves."""
        return items

    def apply(self, sql: Sql, prepared: Any) -> Any:
        """Write what ``prepare`` worked out, inside the transaction that moves the position;
        what it returns is handed to ``applied`` and ``committed``."""
        raise NotImplementedError

    def applied(self, sql: Sql, written: Any) -> None:
        """Inside the same transaction, after ``apply``, on the live view only (never while
        a rebuild refills a new generation): work that must happen exactly once with the
        batch, such as queueing deliveries of what it wrote."""

    def committed(self, written: Any) -> None:
        """After the transaction committed, on the live view only, in the process that moved
        it: tell others (best effort; what was written is in the store either way)."""

    narrow_topics: ClassVar[tuple[str, ...]] = ()
    """A rebuild's shortcut, if not empty: of these of its ``topics`` it reads the events of only
    the games ``followed`` names, judged by a first pass over the events of ``follow_topics``
    (the notices: the turns, most of the log, of only the games that ever seated an account).
    The events left out must change nothing, whatever the tables hold when they come."""
    follow_topics: ClassVar[tuple[str, ...]] = ()
    follow_reads: ClassVar[dict[str, Callable[[Notification, Any], Any]]] = {}
    """As ``narrow_reads``, for the first pass only (what ``followed`` needs of an event)."""

    def followed(self, events: list[tuple[int, Any]], sql: Sql) -> set[uuid.UUID]:
        """Of events of ``follow_topics`` (a page of the first pass, in no particular order), the
        games whose events of ``narrow_topics`` a rebuild reads. ``sql``: the rebuild's scratch,
        whose ``carried`` may keep what else the first pass tells the view."""
        raise NotImplementedError

    leaves_cycles: ClassVar[bool] = False
    """Whether applying the log may leave reference cycles for the collector (the ratings:
    openskill's): a rebuild then sweeps them every ``SWEEP_EVERY`` pages, else after each pass.
    tests/test_rebuilds.py holds every view that says no to leaving none."""

    def settle(self, sql: Sql) -> None:
        """A rebuild's last step on its scratch tables, before they are copied into the store:
        drop what the live view would have dropped by now (the notices past their retention),
        so it is not copied. By default, nothing."""

    summary_topics: ClassVar[tuple[str, ...]] = ()
    """A rebuild's shortcut, if not empty: the rebuild reads only the heads of these topics from
    the start of the log and hands them to ``summary``, instead of every event of ``topics``."""

    def summary(self, heads: list[Head]) -> Any:
        """What ``apply`` writes to empty tables to leave them as applying every event of the
        log up to the last of ``heads`` would (every head of ``summary_topics`` up there, in the
        log's order)."""
        raise NotImplementedError


class Views:
    """Every view's tracking row and tables, in the event store's database."""

    def __init__(self, recorder: Any, mapper: Any, *, create: bool = True) -> None:
        self.recorder = recorder
        self.datastore = recorder.datastore
        self.postgres = recorder.dialect == "postgres"
        self.mapper = mapper  # the application's: ``to_domain_event``, and views' narrow reads
        self.to_domain_event: Callable[[Any], Any] = mapper.to_domain_event
        self.create = create
        self.processed = 0  # events this process applied to views (tests read it)
        # Per live view: its tracking row as stored, how far this process read past it finding
        # nothing for the view, and since when (``catch_up(lazy=True)``).
        self._passed: dict[str, tuple[Tracking, Position, float]] = {}
        self._readers: dict[str, LogReader] = {}  # per tracking row: its last batch's reader
        self._ready: set[str] = set()
        # Each live view's generation as this process last read its tracking row: what a read
        # that need not catch up (``read(fresh=False)``) reads, without reading the row again.
        # A rebuild's switch since then drops those tables, which the read finds out
        # (``TablesGone``): it reads the row then, and the new tables.
        self._generation: dict[str, int] = {}
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    # ---------------------------------------------------------------------- transactions
    @contextlib.contextmanager
    def _reading(self) -> Iterator[Any]:
        with self.datastore.reading() as cursor:
            yield cursor

    @contextlib.contextmanager
    def _writing(self, attached: Path | None = None) -> Iterator[Any]:
        """One write transaction. On SQLite it takes the write lock at its start (``BEGIN
        IMMEDIATE``): a deferred one that read first could not take it later once another
        process had written. ``attached`` (SQLite): a database file the transaction also reads,
        under the name ``SCRATCH`` (attached before it begins, detached after it ends)."""
        if self.postgres:
            assert attached is None
            with self.datastore.transaction(commit=True) as cursor:
                yield cursor
            return
        with self.datastore.get_connection(commit=True) as conn:
            cursor = conn.cursor()
            if attached is not None:
                cursor.execute(f"ATTACH DATABASE ? AS {SCRATCH}", [str(attached)])
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    yield cursor
                except BaseException:
                    conn.rollback()
                    raise
                conn.commit()
            finally:
                if attached is not None:
                    cursor.execute(f"DETACH DATABASE {SCRATCH}")

    def _on_tables(self, tables: dict[str, str], work: Callable[[Sql], Any]) -> Any:
        """``work`` on a view's tables of one generation, in a read."""
        try:
            with self._reading() as cursor:
                return work(Sql(cursor, tables, self.postgres))
        except Exception as exc:
            # Not a lock to wait for nor a store gone (``guarded`` would retry the first, then
            # open the breaker, and answer 503 to the second): the tables a rebuild's switch
            # dropped since the tracking row was read.
            if caused_by(exc, _missing_table):
                raise TablesGone(
                    "a view's tables are missing (a rebuild switched them, or the store is "
                    "damaged); retry"
                ) from exc
            raise

    def _run(self, call: Callable[[], Any]) -> Any:
        """A store operation through ``guarded`` (bounded tries, then 503), with the drivers'
        errors as the library's."""

        def run() -> Any:
            try:
                return call()
            except sqlite3.Error as exc:
                raise library_error(exc) from exc
            except psycopg.OperationalError as exc:
                raise OperationalError(str(exc)) from exc

        return guarded(run)

    # ------------------------------------------------------------------------- tracking
    def _tables(self, view: View, generation: int) -> dict[str, str]:
        return {short: f"cantstop_view_{view.name}_{short}_g{generation}" for short in view.tables}

    def _create_tables(
        self, cursor: Any, view: View, generation: int, *, indexes: bool = True
    ) -> None:
        """The view's tables of that generation; their secondary indexes too, or (``indexes``
        False) only their tables, keys included: ``_create_indexes`` makes the rest."""
        sql = Sql(cursor, self._tables(view, generation), self.postgres)
        for statements in view.tables.values():
            for statement in statements:
                if indexes or not is_index(statement):
                    sql.execute(statement)

    def _create_indexes(self, cursor: Any, view: View, generation: int) -> None:
        sql = Sql(cursor, self._tables(view, generation), self.postgres)
        for statements in view.tables.values():
            for statement in statements:
                if is_index(statement):
                    sql.execute(statement)

    def _drop_tables(self, cursor: Any, view: View, generation: int) -> None:
        sql = Sql(cursor, {}, self.postgres)
        for table in self._tables(view, generation).values():
            sql.execute(f"DROP TABLE IF EXISTS {table}")

    def _row(self, cursor: Any, name: str, *, lock: bool = False) -> Tracking | None:
        sql = Sql(cursor, {}, self.postgres)
        statement = f"SELECT version, generation, tx, position FROM {TRACKING} WHERE name = ?"
        row = sql.one(statement + (" FOR UPDATE" if lock and self.postgres else ""), [name])
        return None if row is None else Tracking.of(name, row)

    def _hold_archiving(self, cursor: Any) -> None:
        """Before a tracking row at the start of the log: no game is archived meanwhile. An
        archiver moves a game's rows only once every tracking row has passed them, and its
        reading of the rows and its move are one transaction under ``ARCHIVE_LOCK``; this row
        waits for it, so the reader that follows from the start finds every archive made
        before (log.py looks up the archives ahead once, at a reader's first read). SQLite's
        writers take turns already."""
        if self.postgres:
            Sql(cursor, {}, True).execute("SELECT pg_advisory_xact_lock_shared(?)", [ARCHIVE_LOCK])

    def _advance(self, cursor: Any, track: Tracking, position: Position) -> bool:
        """Move the tracking row from ``track`` (as read before the batch) to ``position``, if it
        still is ``track``: False if another process moved it meanwhile (and nothing changed).
        One conditional ``UPDATE``, which takes the row's lock as a read ``FOR UPDATE`` does (on
        PostgreSQL a writer that waited for another's commit judges the row as committed), in
        the place of that read and an upsert after the batch's writes (or a rebuild's copy), in
        the same transaction: a statement less for each view at each pass of the worker
        (docs/performance.md)."""
        Sql(cursor, {}, self.postgres).execute(
            f"UPDATE {TRACKING} SET tx = ?, position = ? WHERE name = ? AND version = ? "
            "AND generation = ? AND tx = ? AND position = ?",
            [
                position.tx,
                position.id,
                track.name,
                track.version,
                track.generation,
                track.position.tx,
                track.position.id,
            ],
        )
        return bool(cursor.rowcount == 1)

    def _put(self, cursor: Any, track: Tracking) -> None:
        Sql(cursor, {}, self.postgres).execute(
            f"INSERT INTO {TRACKING} (name, version, generation, tx, position) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET version = excluded.version, "
            "generation = excluded.generation, tx = excluded.tx, position = excluded.position",
            [track.name, track.version, track.generation, track.position.tx, track.position.id],
        )

    def setup(self, views: Sequence[View]) -> None:
        """Create the tracking table and every view that has no tables yet (empty, at the start
        of the log: the first catch-up fills it). Run once before the workers start."""

        def create() -> None:
            with self._writing() as cursor:
                Sql(cursor, {}, self.postgres).execute(
                    f"CREATE TABLE IF NOT EXISTS {TRACKING} (name TEXT PRIMARY KEY, "
                    "version INTEGER NOT NULL, generation INTEGER NOT NULL, "
                    "tx BIGINT NOT NULL, position BIGINT NOT NULL)"
                )
                for view in views:
                    if self._row(cursor, view.name, lock=True) is None:
                        self._hold_archiving(cursor)
                        self._create_tables(cursor, view, 1)
                        self._put(cursor, Tracking(view.name, view.version, 1, START))

        self._run(create)
        self._ready.update(view.name for view in views)

    def tracking(self, view: View, name: str | None = None) -> Tracking:
        """The view's tracking row (created with its tables if missing and allowed)."""
        if view.name not in self._ready and self.create:
            self.setup([view])

        def read() -> Tracking | None:
            with self._reading() as cursor:
                return self._row(cursor, name or view.name)

        found: Tracking | None = self._run(read)
        if found is None:
            raise LookupError(f"view {name or view.name} has no tables: run cantstop serve once")
        if found.name == view.name:
            self._generation[view.name] = found.generation
        return found

    def _every_tracking(self) -> dict[str, Tracking]:
        """Every tracking row, in one statement, by name."""

        def read() -> dict[str, Tracking]:
            with self._reading() as cursor:
                rows = Sql(cursor, {}, self.postgres).all(
                    f"SELECT name, version, generation, tx, position FROM {TRACKING}"
                )
            return {row["name"]: Tracking.of(row["name"], row) for row in rows}

        found: dict[str, Tracking] = self._run(read)
        self._generation.update(
            (name, track.generation) for name, track in found.items() if REBUILD not in name
        )
        return found

    def stale(self, view: View) -> str | None:
        """Why the view is not moved on (its code changed since it was built), or None."""
        track = self.tracking(view)
        if track.version == view.version:
            return None
        return (
            f"view {view.name} was built by version {track.version} of its code and the code is "
            f"version {view.version}: it is served as it stands until `cantstop projections "
            f"rebuild {view.name}`"
        )

    # ------------------------------------------------------------------------- catching up
    def move_on(self, views: Sequence[View]) -> int:
        """Catch each of ``views`` up as ``catch_up(lazy=True)`` does (the scheduler's loop, at
        each poll): how many events were applied. Where the log's newest event stands and every
        tracking row are read once, in two statements, and a view that has read past it (or,
        lazily, whose reading in this process has) is not read at all. Reading each view's row
        and its page of the log at every poll was three statements a view (on PostgreSQL ~200 a
        second a host at rest, with the worker's 49 ms of CPU a second: docs/scaling.md)."""
        end = LogReader(self.recorder).newest()
        known = self._every_tracking()
        applied = 0
        for view in views:
            track = known.get(view.name)
            if track is not None and track.version == view.version and self._read_to(track) >= end:
                continue  # nothing committed since this view last read to the end
            applied += self.catch_up(view, lazy=True, known=track)
        return applied

    def catch_up(
        self,
        view: View,
        *,
        until: Position | None = None,
        deadline: float | None = None,
        name: str | None = None,
        progress: Callable[[Position], None] | None = None,
        lazy: bool = False,
        known: Tracking | None = None,
    ) -> int:
        """Apply what was recorded since the view's position, batch by batch, until the log's
        end (or ``until``, or the monotonic ``deadline``): how many events were applied.

        ``lazy`` (a follower that comes back, the scheduler's loop): a read that finds nothing
        for the view does not store its position, for up to ``PASSED_KEPT`` seconds; the
        process remembers where it read to and reads on from there while the stored row is
        unchanged. Storing it was a write transaction per view and poll: on PostgreSQL, every
        view's position moved at every poll (each poll's own commits move the log's end), 55
        rows written a second on a host at rest (docs/performance.md, levers). ``known``: the
        view's tracking row as just read (``move_on``), not read again for the first batch: if
        another process moved the view meanwhile, that batch's write finds it out and reads
        again."""
        name = name or view.name
        lazy = lazy and until is None and name == view.name
        applied = 0
        while True:
            track = known if known is not None else self.tracking(view, name)
            known = None
            if track.version != view.version:
                self._warn_stale(view)
                return applied
            if until is not None and track.position >= until:
                return applied
            step = self._step(view, track, lazy=lazy)
            if step is None:  # nothing new (on PostgreSQL, perhaps a transaction still open)
                return applied
            count, short, position = step
            applied += count
            if progress is not None:
                progress(position)
            if short and (until is None or position >= until):
                return applied
            if deadline is not None and time.monotonic() > deadline:
                return applied

    def _read_to(self, track: Tracking) -> Position:
        """Where this process has read the view's log to: its stored position, or further where
        a lazy read found nothing for the view up there while the row stayed as it is."""
        passed = self._passed.get(track.name)
        if passed is not None and passed[0] == track:
            return max(track.position, passed[1])
        return track.position

    def _step(
        self, view: View, track: Tracking, *, lazy: bool = False
    ) -> tuple[int, bool, Position] | None:
        """One batch: read it, then write it and move the position in one transaction, if no
        other process moved the view meanwhile. None if there was nothing to read. ``lazy``:
        as ``catch_up`` says."""
        start = self._read_to(track) if lazy else track.position
        passed = self._passed.get(track.name) if lazy else None
        # The reader of the last batch, if it stands where this one starts: what it knows of
        # the archives ahead (log.py) is read once, not at every batch.
        reader = self._readers.pop(track.name, None)
        if reader is None or reader.position != start or reader.topics != list(view.topics):
            reader = LogReader(self.recorder, view.topics, start)
        items: list[Any] = reader.heads(BATCH) if view.heads_only else reader.read(BATCH)
        if reader.position == start:
            self._readers[track.name] = reader
            return None
        if lazy and not items:
            self._readers[track.name] = reader
            now = time.monotonic()
            since = passed[2] if passed is not None and passed[0] == track else now
            if now - since < PASSED_KEPT:
                self._passed[track.name] = (track, reader.position, since)
                return 0, True, reader.position
        decoded = items if view.heads_only else self._decode(view, items)
        tables = self._tables(view, track.generation)

        def prepare() -> Any:
            return self._on_tables(tables, lambda sql: view.prepare(decoded, sql))

        try:
            prepared = self._run(prepare)
        except TablesGone:
            if self.tracking(view, track.name).generation == track.generation:
                raise  # no switch: a damaged store, reported
            return 0, False, track.position  # a rebuild switched meanwhile: read on from it

        live = track.name == view.name
        written: list[Any] = [None]

        def write() -> bool:
            with self._writing() as cursor:
                if not self._advance(cursor, track, reader.position):
                    return False  # another process applied this batch: read on from there
                sql = Sql(cursor, tables, self.postgres)
                written[0] = view.apply(sql, prepared)
                if live:
                    view.applied(sql, written[0])
                return True

        if self._run(write):
            self._passed.pop(track.name, None)
            self._readers[track.name] = reader
            if live:
                try:
                    view.committed(written[0])
                except Exception:  # what was written is stored: telling others is best effort
                    log.exception("view %s: telling others of a batch failed", view.name)
            with self._lock:
                self.processed += len(decoded)
            return len(decoded), len(items) < BATCH, reader.position
        return 0, False, track.position

    def _decode(
        self,
        view: View,
        notifications: list[Notification],
        narrow: dict[str, Callable[[Notification, Any], Any]] | None = None,
    ) -> list[tuple[int, Any]]:
        """The events of ``notifications``, decoded whole, as heads (``View.by_head``) or read
        narrow (``narrow``, else ``View.narrow_reads``), each with its place in the log."""
        decoded: list[tuple[int, Any]] = []
        by_head = view.by_head
        if narrow is None:
            narrow = view.narrow_reads
        for notification in notifications:
            if notification.topic in by_head:
                head = Head(
                    notification.id,
                    cast(uuid.UUID, notification.originator_id),  # the log reader's
                    notification.originator_version,
                    notification.topic,
                )
                decoded.append((notification.id, head))
                continue
            read = narrow.get(notification.topic)
            try:
                event = (
                    self.to_domain_event(notification)
                    if read is None
                    else read(notification, self.mapper)
                )
                decoded.append((notification.id, event))
            except Exception as exc:  # a damaged row: passed over here, reported by reads
                log.error(
                    "view %s: passed over notification %s of %s: %s",
                    view.name,
                    notification.id,
                    notification.originator_id,
                    describe(exc),
                )
        return decoded

    def _warn_stale(self, view: View) -> None:
        if view.name not in self._warned:
            self._warned.add(view.name)
            log.warning("%s", self.stale(view))

    def fresh(self, view: View, budget: float = FRESH_BUDGET) -> Tracking:
        """Catch the view up to the newest event committed now (read your writes), within
        ``budget`` seconds; its tracking row then. On PostgreSQL a transaction still open when
        the request came may hold the end back for a few milliseconds: it is waited for."""
        target = LogReader(self.recorder).last()
        deadline = time.monotonic() + budget
        track = self.tracking(view)  # a view at its target already (most reads): read once
        while track.position < target and track.version == view.version:
            self.catch_up(view, until=target, deadline=deadline, known=track)
            track = self.tracking(view)
            if track.position >= target:
                break
            if time.monotonic() > deadline:
                log.warning("view %s: not at the log's end within %g s", view.name, budget)
                break
            time.sleep(0.005)
        if track.version != view.version:
            self._warn_stale(view)
        return track

    def read(self, view: View, query: Callable[[Sql], Any], *, fresh: bool = True) -> Any:
        """``query`` on the view's current tables (caught up first, unless not ``fresh``). A
        rebuild that switched tables meanwhile makes it read again, from the new ones. Not
        ``fresh``: from the tables of the generation this process last knew, if it knows one
        (no statement to read the tracking row)."""
        generation: int | None = None
        for attempt in (1, 2):
            if fresh:
                generation = self.fresh(view).generation
            elif generation is None:
                known = self._generation.get(view.name)
                generation = known if known is not None else self.tracking(view).generation
            tables = self._tables(view, generation)

            def run(tables: dict[str, str] = tables) -> Any:
                return self._on_tables(tables, query)

            try:
                return self._run(run)
            except Exception:
                if attempt == 2:
                    raise
                now = self.tracking(view).generation
                if now == generation:
                    raise
                generation = now
        raise AssertionError("unreachable")

    def write(self, view: View, change: Callable[[Sql], Any]) -> Any:
        """``change`` on the view's current tables in one write transaction, without moving
        its position (the scheduler's plans after doing what was due)."""

        def run() -> Any:
            with self._writing() as cursor:
                track = self._row(cursor, view.name, lock=True)
                assert track is not None
                return change(Sql(cursor, self._tables(view, track.generation), self.postgres))

        self.tracking(view)
        return self._run(run)

    # ---------------------------------------------------------------------------- rebuilds
    def rebuild(self, view: View, progress: Callable[[Position], None] | None = None) -> int:
        """Fill a new generation of the view's tables from the start of the log while the live
        one serves, then switch to it in one transaction: how many events it applied. A rebuild
        that stops half-way leaves the live view serving, and is resumed by the next."""
        live = self.tracking(view)
        shadow = view.name + REBUILD

        def begin() -> Tracking:
            with self._writing() as cursor:
                found = self._row(cursor, shadow, lock=True)
                if found is not None and found.version == view.version:
                    return found  # resumed where it stopped
                if found is not None:
                    self._drop_tables(cursor, view, found.generation)
                self._hold_archiving(cursor)
                generation = max(live.generation, found.generation if found else 0) + 1
                self._drop_tables(cursor, view, generation)
                # the indexes once the rows are in (below): one sort each, not a B-tree written
                # per row of the copy (the notices' at 100,000 games: ~3 M rows)
                self._create_tables(cursor, view, generation, indexes=False)
                track = Tracking(shadow, view.version, generation, START)
                self._put(cursor, track)
                return track

        built = self._run(begin)
        applied = 0
        if built.position == START:
            applied = self._build(view, built, progress)

        def index() -> None:  # also when resumed: each is made if it is not there yet
            with self._writing() as cursor:
                self._create_indexes(cursor, view, built.generation)

        self._run(index)
        applied += self.catch_up(view, name=shadow, progress=progress)

        def switch() -> None:
            with self._writing() as cursor:
                now = self._row(cursor, view.name, lock=True)
                done = self._row(cursor, shadow, lock=True)
                assert now is not None and done is not None
                self._put(cursor, done._replace(name=view.name))
                Sql(cursor, {}, self.postgres).execute(
                    f"DELETE FROM {TRACKING} WHERE name = ?", [shadow]
                )
                if now.generation != done.generation:
                    self._drop_tables(cursor, view, now.generation)

        self._run(switch)
        self._warned.discard(view.name)
        log.info("view %s rebuilt: generation %s, %s events", view.name, built.generation, applied)
        return applied + self.catch_up(view)

    def _build(
        self, view: View, track: Tracking, progress: Callable[[Position], None] | None
    ) -> int:
        """Fill the rebuild's new, empty tables from the start of the log to about its end: in a
        scratch SQLite file, then copied in one transaction that also moves the rebuild's
        position (only if no other process moved it meanwhile). How many events it applied."""
        tables = self._tables(view, track.generation)
        with tempfile.TemporaryDirectory(prefix="cantstop-rebuild-") as folder:
            path = Path(folder) / "view.sqlite"
            scratch = sqlite3.connect(path, isolation_level=None)
            try:
                scratch.row_factory = sqlite3.Row
                scratch.execute("PRAGMA journal_mode=OFF")  # a scratch copy: no crash to survive
                scratch.execute("PRAGMA synchronous=OFF")
                cursor = scratch.cursor()
                sql = Sql(cursor, tables, False, scratch=True)
                for short, statements in view.tables.items():
                    for statement in view.scratch_tables.get(short, statements):
                        sql.execute(statement)
                # The cyclic collector paused while the log is read, decoded and applied: pages
                # of 20,000 events and what they make are freed by reference counts, and its
                # passes over them were a third of a rebuild's CPU (service/collector.py)
                with collector.paused():
                    applied, position = self._fill(view, sql, progress)
                if position == START:
                    return 0
                sql.cursor.execute("BEGIN")  # (one transaction, not one per row it writes)
                view.settle(sql)
                sql.cursor.execute("COMMIT")
                columns = {
                    short: [row["name"] for row in scratch.execute(f"PRAGMA table_info({name})")]
                    for short, name in tables.items()
                }

                def copy() -> bool:
                    # SQLite: the store reads the scratch file itself (``INSERT … SELECT``), no
                    # row through Python; PostgreSQL: ``COPY`` from the scratch's rows
                    with self._writing(None if self.postgres else path) as cur:
                        if not self._advance(cur, track, position):
                            return False  # another rebuild moved it: catching up goes on from there
                        for short, name in tables.items():
                            self._copy(cur, name, columns[short], scratch)
                        return True

                return applied if self._run(copy) else 0
            finally:
                scratch.close()

    def _fill(
        self, view: View, sql: Sql, progress: Callable[[Position], None] | None
    ) -> tuple[int, Position]:
        """Apply the log from its start to the scratch tables of ``sql``: how many events, and
        the position reached."""
        if view.summary_topics:
            reader = LogReader(self.recorder, view.summary_topics, START)
            heads: list[Head] = []
            for page in reader.scan(PAGE, heads=True):
                heads += page
            sql.cursor.execute("BEGIN")
            view.apply(sql, view.summary(heads))
            sql.cursor.execute("COMMIT")
            collector.sweep()
            if progress is not None:
                progress(reader.position)
            return len(heads), reader.position
        reader = LogReader(self.recorder, view.topics, START)
        if view.narrow_topics:
            first = LogReader(self.recorder, view.follow_topics, START)
            followed: set[uuid.UUID] = set()
            for page in self._pages(first.scan(PAGE, ordered=False), view):
                followed |= view.followed(self._decode(view, page, view.follow_reads), sql)
            # The second pass ends where the first did: a game seated after it is judged by
            # the catch-up that follows, event by event.
            reader = LogReader(
                self.recorder,
                view.topics,
                START,
                narrow=(view.narrow_topics, followed),
                until=first.position,
            )
        applied = 0
        for items in self._pages(reader.scan(PAGE, heads=view.heads_only), view):
            decoded: list[Any] = items if view.heads_only else self._decode(view, items)
            sql.cursor.execute("BEGIN")
            view.apply(sql, view.prepare(decoded, sql))
            sql.cursor.execute("COMMIT")
            del decoded
            applied += len(items)
            if progress is not None:
                progress(reader.position)
        return applied, reader.position

    def _pages(self, pages: Iterator[list[Any]], view: View) -> Iterator[list[Any]]:
        """A rebuild's pages of the log: on PostgreSQL each read while the one before is
        applied (``ahead``); on SQLite, where reading is this process's own work, as they come.
        What the pages left for the collector is swept after the last one, and after every
        ``SWEEP_EVERY`` for a view that leaves cycles (service/collector.py)."""
        every = SWEEP_EVERY if view.leaves_cycles else 0
        for n, page in enumerate(ahead(pages) if self.postgres else pages, 1):
            yield page
            if every and n % every == 0:
                collector.sweep()
        collector.sweep()

    def _copy(
        self, cursor: Any, table: str, columns: list[str], scratch: sqlite3.Connection
    ) -> None:
        """The scratch table's rows into the store's table of that name, in bulk (on SQLite,
        the scratch file attached to the transaction of ``cursor``: ``_writing``)."""
        names = ", ".join(columns)
        if self.postgres:
            rows = scratch.cursor()
            rows.row_factory = None  # plain tuples, as ``write_row`` takes them
            rows.execute(f"SELECT {names} FROM {table}")
            with cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                write = copy.write_row
                for row in rows:
                    write(row)
            return
        cursor.execute(f"INSERT INTO main.{table} ({names}) SELECT {names} FROM {SCRATCH}.{table}")

    def end(self) -> Position:
        return LogReader(self.recorder).end()


__all__ = ["BATCH", "Head", "Position", "Sql", "Tracking", "View", "Views"]
