"""SQLite: the service's own recorders (eventsourcing's public recorder interfaces) on an
owner-only file in WAL mode, writers one at a time, on stdlib ``sqlite3``.

The tables are the ones eventsourcing's own SQLite recorders make (``stored_events`` with its
rowid as the notification id, ``stored_snapshots`` without one): a store written by either is
read and written by the other (tests/test_fast_paths.py compares them row by row).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DatabaseError,
    DataError,
    InfrastructureFactory,
    IntegrityError,
    InterfaceError,
    InternalError,
    Notification,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProcessRecorder,
    ProgrammingError,
    StoredEvent,
    Subscription,
    TrackingRecorder,
)
from eventsourcing.utils import strtobool

from service.errors import ApplicationError
from service.persistence.archive import (
    ArchiveSpan,
    Row,
    archived_events,
    first_archived,
    pack,
    readable,
    unpack_game,
)
from service.persistence.errors import WritersQueued
from service.persistence.guard import (
    ROWS_PER_STATEMENT,
    SQLITE_BREAKER,
    SQLITE_LOCK_TIMEOUT,
    WriteHealth,
    guarded,
    guarded_write,
)

log = logging.getLogger("cantstop.store")

QUEUED_SYNCHRONOUS = frozenset({"FULL", "EXTRA"})
IDLE_CONNECTIONS = 15  # readers' connections kept open between reads (as the library's pool)
# Values a query's ``IN (...)`` names at most: well under SQLite's limit on bound variables
# (32,766 since 3.32, 999 before).
IN_LIST_MAX = 500


def in_chunks(values: Sequence[Any]) -> Iterator[tuple[list[Any], str]]:
    """``values`` in chunks of ``IN_LIST_MAX``, each with its placeholders ("?,?,…") for an
    ``IN (...)``."""
    for start in range(0, len(values), IN_LIST_MAX):
        chunk = list(values[start : start + IN_LIST_MAX])
        yield chunk, ",".join("?" * len(chunk))


class _Connection(sqlite3.Connection):
    """A pooled connection that knows whether it was lent to a writer."""

    is_writer = False


class SQLitePool:
    """Connections with the chosen ``synchronous``; a process's writers one at a time, and, when
    commits are long, the writers of every process queued.

    SQLite makes a writer that finds the database locked sleep and retry (1 ms, 2 ms, 5 ms, …).
    Under ``synchronous=FULL`` a commit waits for the disk, so the writers of every process on
    the host queue on an advisory lock on ``<database>.writers`` instead, each woken as the one
    before it finishes (the kernel drops the lock of a process that dies). Under ``NORMAL`` (the
    default) an action's events are one statement (``_insert_alone``) that holds SQLite's lock
    only inside one call into SQLite, tens of microseconds, and the queue's two extra system
    calls cost more than the rare retry: each lets go of the GIL, and while a writer waits to
    take it back, it holds the queue. So the queue is taken under FULL only, where it keeps the
    tail latency down, and not under NORMAL, where it costs CPU per action (docs/performance.md,
    levers: the writers' queue).

    An in-memory database (shared cache) locks tables between connections instead of waiting:
    there every connection is lent one at a time (``memory_lock``)."""

    # Pages in the WAL before a commit copies them back into the database (SQLite's default is
    # 1,000). A checkpoint syncs the WAL and then the database file (two fsyncs, under NORMAL
    # too) and writes each page once however often the WAL holds it, and actions rewrite the
    # same few hot pages, so fewer checkpoints save the kernel's work of syncing and rewriting
    # them (a WAL file of ~40 MB at 4 KiB pages; docs/performance.md, levers). Every connection
    # sets it: any committing connection checkpoints. Durability: under FULL every commit is
    # synced, as before; under NORMAL a commit survives any process's crash, as before, and a
    # power cut may lose what the WAL held unsynced: up to 10,000 pages instead of 1,000 (~2 s
    # of the bench's load instead of ~0.2 s, at ~2.9 pages per action; the kernel writes dirty
    # pages back within ~30 s anyway).
    wal_autocheckpoint = 10_000

    def __init__(
        self, db_name: str, *, lock_timeout: float = SQLITE_LOCK_TIMEOUT, synchronous: str = ""
    ) -> None:
        self.db_name = db_name
        self.lock_timeout = lock_timeout
        self.synchronous = (synchronous or "normal").upper()
        self.is_memory = ":memory:" in db_name or "mode=memory" in db_name
        self.write_lock = threading.Lock()  # this process's writers, one at a time
        self.memory_lock = threading.RLock() if self.is_memory else None
        self.writers_fd: int | None = None
        if not self.is_memory and self.synchronous in QUEUED_SYNCHRONOUS:
            self.writers_fd = os.open(f"{db_name}.writers", os.O_CREAT | os.O_RDWR, 0o600)
        self._idle: list[_Connection] = []
        self._writer: sqlite3.Connection | None = None
        self._wal = self.is_memory  # whether WAL mode is known to be set (not for memory)
        self.closed = False

    def pragmas(self) -> list[str]:
        return [
            f"PRAGMA synchronous={self.synchronous}",
            f"PRAGMA wal_autocheckpoint={self.wal_autocheckpoint}",
        ]

    def _connect(self) -> _Connection:
        try:
            conn = sqlite3.connect(
                self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,  # autocommit: transactions begin explicitly
                timeout=self.lock_timeout,
                factory=_Connection,
            )
        except (sqlite3.Error, TypeError) as exc:
            raise InterfaceError(exc) from exc
        assert isinstance(conn, _Connection)
        if not self._wal:
            # WAL is a property of the file: set once, every connection then uses it.
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            self._wal = True
        conn.row_factory = sqlite3.Row
        for pragma in self.pragmas():
            conn.execute(pragma)
        return conn

    def _begin_writing(self) -> None:
        """The right to write: first among this process's threads, then among the processes.
        A thread waits for the others of its process no longer than SQLite waits for a lock
        (``lock_timeout``): behind a writer that waits for a database locked from outside (a
        backup tool's exclusive transaction), each writer queued here waited for all those
        before it, 20, 30, 40 s, where a 503 is promised within about 2 s."""
        if self.memory_lock is not None:
            self.memory_lock.acquire()
        if not self.write_lock.acquire(timeout=self.lock_timeout):
            if self.memory_lock is not None:
                self.memory_lock.release()
            queued = WritersQueued("database is locked: this process's writers wait for it already")
            raise library_error(queued) from queued
        if self.writers_fd is not None:
            try:
                fcntl.flock(self.writers_fd, fcntl.LOCK_EX)
            except BaseException:
                self.write_lock.release()
                if self.memory_lock is not None:
                    self.memory_lock.release()
                raise

    def _end_writing(self) -> None:
        if self.writers_fd is not None:
            fcntl.flock(self.writers_fd, fcntl.LOCK_UN)
        self.write_lock.release()
        if self.memory_lock is not None:
            self.memory_lock.release()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        self._begin_writing()
        try:
            yield
        finally:
            self._end_writing()

    def get_connection(self, timeout: float | None = None, *, is_writer: bool = False) -> Any:
        """A pooled connection (give it back with ``put_connection``); a writer's holds the
        right to write until then. ``timeout`` is accepted as the library's pools take it."""
        if is_writer:
            self._begin_writing()
        elif self.memory_lock is not None:
            self.memory_lock.acquire()
        try:
            try:
                conn = self._idle.pop()
            except IndexError:
                conn = self._connect()
            conn.is_writer = is_writer
            return conn
        except BaseException:
            self._release(is_writer)
            raise

    def put_connection(self, conn: Any) -> None:
        was_writer = conn.is_writer
        try:
            if conn.in_transaction:
                conn.rollback()  # a block that left its transaction open
            if self.closed or len(self._idle) >= IDLE_CONNECTIONS:
                conn.close()
            else:
                self._idle.append(conn)
        except sqlite3.Error:
            conn.close()
        finally:
            self._release(was_writer)

    def _release(self, writer: bool) -> None:
        if writer:
            self._end_writing()
        elif self.memory_lock is not None:
            self.memory_lock.release()

    def writer(self) -> sqlite3.Connection:
        """The connection that inserts a command's events (held under ``writing``): a pool's
        bookkeeping costs more than the insert itself on the hot path."""
        if self._writer is None:
            self._writer = sqlite3.connect(
                self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,
                timeout=self.lock_timeout,
            )
            for pragma in self.pragmas():
                self._writer.execute(pragma)
        return self._writer

    def close(self) -> None:
        self.closed = True
        while self._idle:
            self._idle.pop().close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.writers_fd is not None:
            os.close(self.writers_fd)
            self.writers_fd = None


# sqlite3's errors as eventsourcing's (which ``guarded`` judges: retry, 503, conflict), in the
# order eventsourcing's own SQLite recorders map them; the first that matches.
_LIBRARY_ERRORS: tuple[tuple[type[sqlite3.Error], type[PersistenceError]], ...] = (
    (sqlite3.InterfaceError, InterfaceError),
    (sqlite3.DataError, DataError),
    (sqlite3.OperationalError, OperationalError),
    (sqlite3.IntegrityError, IntegrityError),
    (sqlite3.InternalError, InternalError),
    (sqlite3.ProgrammingError, ProgrammingError),
    (sqlite3.NotSupportedError, NotSupportedError),
    (sqlite3.DatabaseError, DatabaseError),
)


def library_error(exc: sqlite3.Error) -> PersistenceError:
    for theirs, ours in _LIBRARY_ERRORS:
        if isinstance(exc, theirs):
            return ours(exc)
    return PersistenceError(exc)


@contextlib.contextmanager
def _sqlite_errors() -> Iterator[None]:
    """sqlite3's errors as the library's."""
    try:
        yield
    except sqlite3.Error as exc:
        raise library_error(exc) from exc


class SQLiteDatastore:
    """The pool, and transactions on it: what the recorders, the views and the side tables
    (service/persistence/tables.py) read and write through."""

    dialect = "sqlite"

    def __init__(self, pool: SQLitePool) -> None:
        self.pool = pool

    @contextlib.contextmanager
    def get_connection(self, *, commit: bool) -> Iterator[Any]:
        """A connection of the pool (a writer's holds the right to write meanwhile)."""
        conn = self.pool.get_connection(is_writer=commit)
        try:
            yield conn
        finally:
            self.pool.put_connection(conn)

    @contextlib.contextmanager
    def transaction(self, *, commit: bool) -> Iterator[sqlite3.Cursor]:
        """A cursor (rows by index or column name) in one transaction, committed at the end
        with ``commit``, else rolled back; sqlite3's errors as the library's."""
        with self.get_connection(commit=commit) as conn:
            cursor = conn.cursor()
            try:
                cursor.execute("BEGIN")
                yield cursor
                if commit:
                    conn.commit()
                else:
                    conn.rollback()
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.rollback()
                raise library_error(exc) from exc
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.rollback()
                raise
            finally:
                cursor.close()

    def reading(self) -> contextlib.AbstractContextManager[sqlite3.Cursor]:
        """A cursor for reads: one read transaction (on SQLite a snapshot for all its
        statements; PostgreSQL's ``reading`` has none to give)."""
        return self.transaction(commit=False)

    def close(self) -> None:
        self.pool.close()


def _row(event: Any) -> tuple[Any, ...]:
    """A stored event as the table's columns take it."""
    originator_id = event.originator_id
    return (
        originator_id.hex if isinstance(originator_id, uuid.UUID) else originator_id,
        event.originator_version,
        event.topic,
        event.state,
    )


def _no_tracking(kwargs: dict[str, Any]) -> None:
    """The library's ``Application.save`` passes ``tracking=None``; only a process
    application tracks, and the service keeps its views' positions itself (views.py)."""
    if kwargs.get("tracking") is not None:
        raise NotImplementedError("the service's recorders do not record tracking")


class GuardedSQLiteAggregateRecorder(AggregateRecorder):
    """Stored events of one table (snapshots), each operation through ``guarded``: at most two
    tries, then 503 (on SQLite no breaker: a file cannot go down as a server can)."""

    dialect = "sqlite"
    breaker = SQLITE_BREAKER

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str) -> None:
        self.datastore = datastore
        self.events_table_name = events_table_name
        self.writes = WriteHealth()
        self.insert_events_statement = f"INSERT INTO {events_table_name} VALUES (?,?,?,?)"

    def create_table_statements(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {self.events_table_name} (originator_id TEXT, "
            "originator_version INTEGER, topic TEXT, state BLOB, "
            "PRIMARY KEY (originator_id, originator_version)) WITHOUT ROWID"
        ]

    def create_table(self) -> None:
        with self.datastore.transaction(commit=True) as cursor:
            for statement in self.create_table_statements():
                cursor.execute(statement)

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        _no_tracking(kwargs)
        pool = self.datastore.pool
        return guarded_write(
            lambda: self._insert(pool, stored_events), breaker=self.breaker, writes=self.writes
        )

    def _insert(self, pool: SQLitePool, stored_events: Any) -> Any:
        self._insert_rows(pool, stored_events)
        return None

    def _insert_rows(self, pool: SQLitePool, stored_events: Any) -> list[int]:
        """The events on the writer connection, in one statement: the new rowids. More rows
        than one statement may bind (an import) go in one transaction, in chunks."""
        events = list(stored_events)
        if not events:
            return []
        # What ``writing`` and ``_sqlite_errors`` do, spelled out: two generator context
        # managers on the command path, the hottest (docs/performance.md, levers).
        pool._begin_writing()
        try:
            db = pool.writer()
            if len(events) <= ROWS_PER_STATEMENT:
                return self._insert_alone(db, events)
            ids: list[int] = []
            db.execute("BEGIN IMMEDIATE")
            try:
                for start in range(0, len(events), ROWS_PER_STATEMENT):
                    ids += self._insert_alone(db, events[start : start + ROWS_PER_STATEMENT])
                db.execute("COMMIT")
            finally:
                if db.in_transaction:
                    db.execute("ROLLBACK")
            return ids
        except sqlite3.Error as exc:
            raise library_error(exc) from exc
        finally:
            pool._end_writing()

    def _insert_alone(self, db: sqlite3.Connection, stored_events: Any) -> list[int]:
        """Events in one multi-row ``INSERT`` on the autocommit connection: its own transaction
        (all rows or none) unless inside one, one call into SQLite instead of three. Each call
        lets go of the GIL, and under load every let-go is a switch between threads. The rowids
        (the notification ids) are consecutive: the writer holds the write lock, so the table's
        largest rowid grows by one per row."""
        rows = [value for event in stored_events for value in _row(event)]
        count = len(stored_events)
        statement = self.insert_events_statement + ",(?,?,?,?)" * (count - 1)
        last = db.execute(statement, rows).lastrowid or 0
        return list(range(last - count + 1, last + 1))

    def thin_out(self, originator_id: uuid.UUID, keep_every: int) -> None:
        """Delete the originator's rows but those at multiples of ``keep_every`` (snapshots a
        finished game no longer needs: Store.KEPT_WHEN_FINISHED)."""
        statement = (
            f"DELETE FROM {self.events_table_name} "
            "WHERE originator_id=? AND originator_version % ? != 0"
        )
        params = (originator_id.hex, keep_every)
        pool = self.datastore.pool

        def delete() -> None:  # one statement on the writer's connection: its own transaction
            with pool.writing(), _sqlite_errors():
                pool.writer().execute(statement, params)

        guarded(delete, breaker=self.breaker)

    def select_events(
        self,
        originator_id: uuid.UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        statement = f"SELECT * FROM {self.events_table_name} WHERE originator_id=? "
        params: list[Any] = [
            originator_id.hex if isinstance(originator_id, uuid.UUID) else originator_id
        ]
        if gt is not None:
            statement += "AND originator_version>? "
            params.append(gt)
        if lte is not None:
            statement += "AND originator_version<=? "
            params.append(lte)
        statement += "ORDER BY originator_version " + ("DESC " if desc else "ASC ")
        if limit is not None:
            statement += "LIMIT ? "
            params.append(limit)
        return guarded(lambda: self._select(statement, params), breaker=self.breaker)

    def stored_among(self, originator_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Those of ``originator_ids`` with any event stored (a query per ``IN_LIST_MAX``)."""
        keys = [originator_id.hex for originator_id in originator_ids]
        rows = self._among(self.events_table_name, "DISTINCT originator_id", keys)
        return {uuid.UUID(row[0]) for row in rows}

    def _among(self, table: str, columns: str, keys: list[str]) -> list[Any]:
        """``columns`` of the rows of ``table`` whose originator is among ``keys`` (hex), a
        query per ``IN_LIST_MAX``."""

        def select() -> list[Any]:
            found: list[Any] = []
            with self.datastore.get_connection(commit=False) as conn, _sqlite_errors():
                for chunk, marks in in_chunks(keys):
                    statement = f"SELECT {columns} FROM {table} WHERE originator_id IN ({marks})"
                    found += conn.execute(statement, chunk).fetchall()
            return found

        return guarded(select, breaker=self.breaker) if keys else []

    def first_events(self, originator_ids: Sequence[uuid.UUID]) -> list[StoredEvent]:
        """The first event (version 1) of each of ``originator_ids`` that has one (a query per
        ``IN_LIST_MAX``)."""
        keys = [originator_id.hex for originator_id in originator_ids]
        found: list[StoredEvent] = []
        for chunk, marks in in_chunks(keys):
            statement = (
                f"SELECT * FROM {self.events_table_name} WHERE originator_version = 1 "
                f"AND originator_id IN ({marks})"
            )
            found += guarded(partial(self._select, statement, chunk), breaker=self.breaker)
        return found

    def _select(self, statement: str, params: list[Any]) -> list[StoredEvent]:
        # One SELECT is a transaction of its own: no BEGIN and ROLLBACK around it.
        with self.datastore.get_connection(commit=False) as conn, _sqlite_errors():
            rows = conn.execute(statement, params).fetchall()
        ids: dict[str, uuid.UUID] = {}
        return [
            StoredEvent(
                originator_id=ids.get(row[0]) or ids.setdefault(row[0], uuid.UUID(row[0])),
                originator_version=row[1],
                topic=row[2],
                state=row[3],
            )
            for row in rows
        ]


class GuardedSQLiteApplicationRecorder(GuardedSQLiteAggregateRecorder, ApplicationRecorder):
    """The game events' table, whose rowid is the notification id (the log, ``log.py``), and
    the archive of finished games' events (``archive.py``): a game archived has no rows left,
    and every read of its events reads its archive instead."""

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str) -> None:
        super().__init__(datastore, events_table_name)
        self.archive_table = events_table_name + "_archive"

    def create_table_statements(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {self.events_table_name} (originator_id TEXT, "
            "originator_version INTEGER, topic TEXT, state BLOB, "
            "PRIMARY KEY (originator_id, originator_version))",
            # A rowid table: a value of a few KB in a ``WITHOUT ROWID`` table's leaves would
            # spill into mostly empty overflow pages (compact.py).
            f"CREATE TABLE IF NOT EXISTS {self.archive_table} (originator_id TEXT PRIMARY KEY, "
            "last_version INTEGER NOT NULL, first_tx INTEGER NOT NULL, "
            "first_id INTEGER NOT NULL, last_tx INTEGER NOT NULL, last_id INTEGER NOT NULL, "
            "data BLOB NOT NULL)",
            f"CREATE INDEX IF NOT EXISTS {self.archive_table}_last "
            f"ON {self.archive_table} (last_tx, last_id)",
            # every topic any archive holds: a reader of none of them reads no archive
            f"CREATE TABLE IF NOT EXISTS {self.archive_table}_topics (topic TEXT PRIMARY KEY)",
        ]

    def select_events(
        self,
        originator_id: uuid.UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """As the library's, of rows or of an archive. The rows first, then, if none matched,
        the archive (one more statement, only then): rows are deleted in the transaction that
        writes their archive, and an archive is never deleted, so a read that finds no rows
        finds the archive if there is one, whichever of the two it met."""
        found = super().select_events(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
        if found:
            return found
        key = originator_id.hex if isinstance(originator_id, uuid.UUID) else originator_id
        statement = f"SELECT data FROM {self.archive_table} WHERE originator_id=?"
        params: list[Any] = [key]
        if gt is not None:  # a game read up to its last version finds nothing newer
            statement += " AND last_version>?"
            params.append(gt)

        def select() -> bytes | None:
            with self.datastore.get_connection(commit=False) as conn, _sqlite_errors():
                row = conn.execute(statement, params).fetchone()
            return None if row is None else bytes(row[0])

        data = guarded(select, breaker=self.breaker)
        if data is None:
            return found
        return archived_events(uuid.UUID(key), data, gt=gt, lte=lte, desc=desc, limit=limit)

    def last_row(self, originator_id: uuid.UUID) -> StoredEvent | None:
        """The originator's last event in rows (None: it has none, unknown or archived),
        without reading an archive."""
        found = super().select_events(originator_id, desc=True, limit=1)
        return found[0] if found else None

    def stored_among(self, originator_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        found = super().stored_among(originator_ids)
        keys = [i.hex for i in originator_ids if i not in found]
        rows = self._among(self.archive_table, "originator_id", keys)
        return found | {uuid.UUID(row[0]) for row in rows}

    def first_events(self, originator_ids: Sequence[uuid.UUID]) -> list[StoredEvent]:
        found = super().first_events(originator_ids)
        have = {event.originator_id for event in found}
        keys = [i.hex for i in originator_ids if i not in have]
        rows = self._among(self.archive_table, "originator_id, data", keys)
        return found + first_archived((uuid.UUID(key), bytes(data)) for key, data in rows)

    def archive(self, originator_id: uuid.UUID, last_version: int, behind: str) -> str:
        """Replace a finished game's rows with one archive row, in one write transaction, if
        its rows are exactly versions 1 to ``last_version``, every position in the table
        ``behind`` (the views' tracking rows, rebuilds' included) is at or past its last row,
        and that row is not the log's newest (SQLite would give its rowid to the next row).
        What happened: ``archived``, or why not (``no rows``, ``not its versions``, ``the
        newest``, ``not read``)."""
        key = originator_id.hex
        return self._writing_one(lambda db: self._archive_in(db, key, last_version, behind))

    def restore(self, originator_id: uuid.UUID, behind: str) -> str:
        """Put an archived game's rows back, each at its place in the log (its rowid), and drop
        its archive, in one write transaction, if every position in ``behind`` is at or past
        its last row (no reader of the log is then between its rows): what a release before
        archives reads. ``restored``, or why not (``not archived``, ``not read``)."""
        key = originator_id.hex
        return self._writing_one(lambda db: self._restore_in(db, originator_id, key, behind))

    def _writing_one(self, work: Callable[[sqlite3.Connection], str]) -> str:
        """``work`` in one write transaction, committed if it says it did what it was for."""
        pool = self.datastore.pool

        def run() -> str:
            with pool.writing(), _sqlite_errors():
                db = pool.writer()
                db.execute("BEGIN IMMEDIATE")
                try:
                    outcome = work(db)
                    db.execute("COMMIT" if outcome in ("archived", "restored") else "ROLLBACK")
                    return outcome
                finally:
                    if db.in_transaction:
                        db.execute("ROLLBACK")

        return guarded_write(run, breaker=self.breaker, writes=self.writes)

    def _restore_in(
        self, db: sqlite3.Connection, originator_id: uuid.UUID, key: str, behind: str
    ) -> str:
        found = db.execute(
            f"SELECT data, last_id FROM {self.archive_table} WHERE originator_id=?", [key]
        ).fetchone()
        if found is None:
            return "not archived"
        if not self._read_past(db, behind, found[1]):
            return "not read"
        rows = unpack_game(originator_id, bytes(found[0]))
        db.executemany(
            f"INSERT INTO {self.events_table_name} "
            "(rowid, originator_id, originator_version, topic, state) VALUES (?,?,?,?,?)",
            [(row.id, key, row.version, row.topic, row.state) for row in rows],
        )
        db.execute(f"DELETE FROM {self.archive_table} WHERE originator_id=?", [key])
        return "restored"

    @staticmethod
    def _read_past(db: sqlite3.Connection, behind: str, last: int) -> bool:
        """Every position in ``behind`` (the views' tracking rows) is at or past ``last``: no
        reader of the log is between a game's rows that end there."""
        oldest = db.execute(f"SELECT min(position) FROM {behind}").fetchone()[0]
        return oldest is not None and oldest >= last

    def archived_ids(self, limit: int) -> list[uuid.UUID]:
        """Some archived games (up to ``limit``)."""
        statement = f"SELECT originator_id FROM {self.archive_table} LIMIT ?"

        def select() -> list[uuid.UUID]:
            with self.datastore.get_connection(commit=False) as conn, _sqlite_errors():
                return [uuid.UUID(row[0]) for row in conn.execute(statement, [limit])]

        return guarded(select, breaker=self.breaker)

    def _archive_in(self, db: sqlite3.Connection, key: str, last_version: int, behind: str) -> str:
        table = self.events_table_name
        rows = db.execute(
            f"SELECT rowid, originator_version, topic, state FROM {table} "
            "WHERE originator_id=? ORDER BY originator_version",
            [key],
        ).fetchall()
        if not rows:
            return "no rows"
        if [r[1] for r in rows] != list(range(1, last_version + 1)):
            return "not its versions"
        last = max(r[0] for r in rows)
        if db.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] == last:
            return "the newest"
        if not self._read_past(db, behind, last):
            return "not read"
        data = pack([Row(r[1], r[2], bytes(r[3]), 0, r[0]) for r in rows])
        first = min(r[0] for r in rows)
        db.execute(
            f"INSERT INTO {self.archive_table} VALUES (?,?,?,?,?,?,?)",
            [key, last_version, 0, first, 0, last, data],
        )
        db.executemany(
            f"INSERT OR IGNORE INTO {self.archive_table}_topics VALUES (?)",
            [(topic,) for topic in {r[2] for r in rows}],
        )
        db.execute(f"DELETE FROM {table} WHERE originator_id=?", [key])
        return "archived"

    def archives_after(
        self, position: tuple[int, int], topics: Sequence[str] = ()
    ) -> list[ArchiveSpan]:
        """The archives holding an event after ``position`` in the log, by their first event's
        place: what a reader of the log from there must merge with the rows (log.py). None for
        a reader of ``topics`` of which no archive holds any."""
        statement = (
            f"SELECT originator_id, first_tx, first_id, last_tx, last_id "
            f"FROM {self.archive_table} WHERE (last_tx, last_id) > (?, ?)"
        )
        params: list[Any] = list(position)
        if topics:
            statement += (
                f" AND EXISTS (SELECT 1 FROM {self.archive_table}_topics "
                f"WHERE topic IN ({','.join('?' * len(topics))}))"
            )
            params += topics

        def select() -> list[ArchiveSpan]:
            with self.datastore.get_connection(commit=False) as conn, _sqlite_errors():
                rows = conn.execute(statement + " ORDER BY first_tx, first_id", params).fetchall()
            return [ArchiveSpan(uuid.UUID(r[0]), (r[1], r[2]), (r[3], r[4])) for r in rows]

        return guarded(select, breaker=self.breaker)

    def archived_rows(
        self, originator_ids: Sequence[uuid.UUID], topics: Collection[str] | None = None
    ) -> dict[uuid.UUID, list[Row]]:
        """The archived rows of these games (those archived; of ``topics``, if given), each
        game's in version order."""
        keys = [i.hex for i in originator_ids]
        rows = self._among(self.archive_table, "originator_id, data", keys)
        return readable(((uuid.UUID(key), bytes(data)) for key, data in rows), topics)

    def _insert(self, pool: SQLitePool, stored_events: Any) -> Any:
        return self._insert_rows(pool, stored_events)

    def insert_with_snapshots(
        self,
        stored_events: Any,
        snapshots: AggregateRecorder,
        stored_snapshots: Any,
    ) -> Any:
        """Insert events, then the snapshots they make due, each in one statement: a snapshot is
        never stored without its events. Once the events are stored the action is done, so a
        failed snapshot is logged, not raised (a rebuild then reads a few more events). A
        snapshot is derived from its events, so a stray row at its version (left by damage: no
        events were there) is replaced, not a reason to refuse the events.

        (One transaction for both held SQLite's lock across four calls into SQLite and the
        waits for the GIL between them; with two statements, each holds it inside one call:
        2-7% less CPU per action, the trees served at once, docs/performance.md.)"""
        assert isinstance(snapshots, GuardedSQLiteAggregateRecorder)
        pool = self.datastore.pool
        ids = guarded_write(
            lambda: self._insert(pool, stored_events), breaker=self.breaker, writes=self.writes
        )
        table = snapshots.events_table_name
        try:
            guarded(lambda: self._replace(pool, table, stored_snapshots), breaker=self.breaker)
        except (ApplicationError, IntegrityError) as exc:
            log.warning("a snapshot was not stored (its events were): %s", exc)
        return ids

    @staticmethod
    def _replace(pool: SQLitePool, table: str, stored: Any) -> None:
        """Rows into ``table`` (snapshots), replacing any at the same versions, in one
        statement."""
        values = [value for row in stored for value in _row(row)]
        rows = ",".join(["(?,?,?,?)"] * len(stored))
        statement = f"INSERT OR REPLACE INTO {table} VALUES {rows}"
        with pool.writing(), _sqlite_errors():
            pool.writer().execute(statement, values)

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        where: list[str] = []
        params: list[Any] = []
        if start is not None:
            where.append("rowid>=?" if inclusive_of_start else "rowid>?")
            params.append(start)
        if stop is not None:
            where.append("rowid<=?")
            params.append(stop)
        if topics:
            where.append(f"topic IN ({','.join('?' * len(topics))})")
            params += list(topics)
        statement = f"SELECT rowid, * FROM {self.events_table_name} "
        if where:
            statement += "WHERE " + " AND ".join(where) + " "
        statement += "ORDER BY rowid LIMIT ?"
        params.append(limit)

        def select() -> list[Notification]:
            with self.datastore.get_connection(commit=False) as conn, _sqlite_errors():
                rows = conn.execute(statement, params).fetchall()
            return [
                Notification(
                    id=row[0],
                    originator_id=uuid.UUID(row[1]),
                    originator_version=row[2],
                    topic=row[3],
                    state=row[4],
                )
                for row in rows
            ]

        return guarded(select, breaker=self.breaker)

    def max_notification_id(self) -> int | None:
        def select() -> int | None:
            with self.datastore.get_connection(commit=False) as conn, _sqlite_errors():
                found = conn.execute(f"SELECT MAX(rowid) FROM {self.events_table_name}")
                value = found.fetchone()[0]
            return None if value is None else int(value)

        return guarded(select, breaker=self.breaker)

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        """Not offered: followers read the log by ``log.LogReader``."""
        raise NotImplementedError("the service's followers read the log by LogReader")


class SQLiteStore(InfrastructureFactory[TrackingRecorder]):
    """The service's infrastructure on SQLite (``PERSISTENCE_MODULE``, settings.py): an
    owner-only file, WAL, the chosen ``synchronous``, a longer WAL between checkpoints
    (``SQLitePool.wal_autocheckpoint``). Events and snapshots only: the service keeps the
    positions of its views itself (views.py), so no tracking or process recorder."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        db_name = self.env.get("SQLITE_DBNAME")
        if not db_name:
            raise OSError("SQLite database name not found in environment (SQLITE_DBNAME)")
        lock_timeout = float(self.env.get("SQLITE_LOCK_TIMEOUT") or SQLITE_LOCK_TIMEOUT)
        pool = SQLitePool(
            db_name,
            lock_timeout=lock_timeout,
            synchronous=self.env.get("CANTSTOP_SQLITE_SYNCHRONOUS") or "normal",
        )
        self.datastore = SQLiteDatastore(pool)

    def _create_table(self) -> bool:
        return bool(strtobool(self.env.get("CREATE_TABLE") or "yes"))

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        recorder = GuardedSQLiteAggregateRecorder(self.datastore, "stored_" + purpose)
        if self._create_table():
            recorder.create_table()
        return recorder

    def application_recorder(self) -> ApplicationRecorder:
        recorder = GuardedSQLiteApplicationRecorder(self.datastore, "stored_events")
        if self._create_table():
            recorder.create_table()
        return recorder

    def tracking_recorder(self, tracking_recorder_class: Any = None) -> TrackingRecorder:
        raise NotImplementedError("the service tracks its views itself (views.py)")

    def process_recorder(self) -> ProcessRecorder:
        raise NotImplementedError("the service tracks its views itself (views.py)")

    def close(self) -> None:
        self.datastore.close()


def _owner_only(path: str) -> None:
    """Create the SQLite file readable and writable by its owner only (it holds secrets)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)
