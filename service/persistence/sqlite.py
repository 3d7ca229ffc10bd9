"""SQLite: the library's recorders on an owner-only file in WAL mode, writers one at a time."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eventsourcing.persistence import (
    AggregateRecorder,
    DatabaseError,
    IntegrityError,
    OperationalError,
    PersistenceError,
)
from eventsourcing.sqlite import (
    SQLiteAggregateRecorder,
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteFactory,
)

from service.errors import ApplicationError
from service.persistence.errors import WritersQueued
from service.persistence.guard import (
    ROWS_PER_STATEMENT,
    SQLITE_BREAKER,
    SQLITE_LOCK_TIMEOUT,
    _Guarded,
    _GuardedLog,
    _plain,
    guarded,
    guarded_write,
)

log = logging.getLogger("cantstop.store")


class _SQLitePool(SQLiteConnectionPool):
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
    levers: the writers' queue)."""

    synchronous = "NORMAL"
    writers_fd: int | None = None
    # Pages in the WAL before a commit copies them back into the database (SQLite's default is
    # 1,000). A checkpoint syncs the WAL and then the database file (two fsyncs, under NORMAL
    # too) and writes each page once however often the WAL holds it, and actions rewrite the
    # same few hot pages, so fewer checkpoints save the kernel's work of syncing and rewriting
    # them (a WAL file of ~40 MB at 4 KiB pages; docs/performance.md, levers). Every connection
    # sets it:
    # any committing connection checkpoints. Durability: under FULL every commit is synced, as
    # before; under NORMAL a commit survives any process's crash, as before, and a power cut
    # may lose what the WAL held unsynced: up to 10,000 pages instead of 1,000 (~2 s of the
    # bench's load instead of ~0.2 s, at ~2.9 pages per action; the kernel writes dirty pages
    # back within ~30 s anyway).
    wal_autocheckpoint = 10_000

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.write_lock = threading.Lock()  # this process's writers, one at a time
        self._writer: sqlite3.Connection | None = None

    # library hook: see service/hooks.py
    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        cursor = connection.cursor()
        for pragma in self.pragmas():
            cursor.execute(pragma)
        return connection

    def pragmas(self) -> list[str]:
        return [
            f"PRAGMA synchronous={self.synchronous}",
            f"PRAGMA wal_autocheckpoint={self.wal_autocheckpoint}",
        ]

    def queue_writers(self, path: str) -> None:
        self.writers_fd = os.open(f"{path}.writers", os.O_CREAT | os.O_RDWR, 0o600)

    def _begin_writing(self) -> None:
        """The right to write: first among this process's threads, then among the processes.
        A thread waits for the others of its process no longer than SQLite waits for a lock
        (``lock_timeout``): behind a writer that waits for a database locked from outside (a
        backup tool's exclusive transaction), each writer queued here waited for all those
        before it, 20, 30, 40 s, where a 503 is promised within about 2 s."""
        if not self.write_lock.acquire(timeout=self.lock_timeout or SQLITE_LOCK_TIMEOUT):
            queued = WritersQueued("database is locked: this process's writers wait for it already")
            raise _library_sqlite_error(queued) from queued
        if self.writers_fd is not None:
            try:
                fcntl.flock(self.writers_fd, fcntl.LOCK_EX)
            except BaseException:
                self.write_lock.release()
                raise

    def _end_writing(self) -> None:
        if self.writers_fd is not None:
            fcntl.flock(self.writers_fd, fcntl.LOCK_UN)
        self.write_lock.release()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        self._begin_writing()
        try:
            yield
        finally:
            self._end_writing()

    # library hook: see service/hooks.py
    def get_connection(
        self, timeout: float | None = None, *, is_writer: bool | None = None
    ) -> SQLiteConnection:
        """The library's own writes (table creation, the aggregate recorder) queue the same way."""
        if not is_writer:
            return super().get_connection(timeout, is_writer=is_writer)
        self._begin_writing()  # held until put_connection
        try:
            return super().get_connection(timeout, is_writer=is_writer)
        except BaseException:
            self._end_writing()
            raise

    # library hook: see service/hooks.py
    def put_connection(self, conn: SQLiteConnection) -> None:
        was_writer = conn.is_writer
        try:
            super().put_connection(conn)
        finally:
            if was_writer:
                self._end_writing()

    def writer(self) -> sqlite3.Connection:
        """The connection that inserts a command's events (held under ``writing``): the pool's
        bookkeeping costs more than the insert itself on the hot path."""
        if self._writer is None:
            self._writer = sqlite3.connect(
                self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,
                timeout=self.lock_timeout or SQLITE_LOCK_TIMEOUT,
            )
            for pragma in self.pragmas():
                self._writer.execute(pragma)
        return self._writer

    def close(self) -> None:
        super().close()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.writers_fd is not None:
            os.close(self.writers_fd)
            self.writers_fd = None


QUEUED_SYNCHRONOUS = frozenset({"FULL", "EXTRA"})


class GuardedSQLiteAggregateRecorder(_Guarded, SQLiteAggregateRecorder):
    breaker = SQLITE_BREAKER


class GuardedSQLiteApplicationRecorder(_GuardedLog, SQLiteApplicationRecorder):
    breaker = SQLITE_BREAKER

    # library hook: see service/hooks.py
    def insert_events(self, stored_events: Any, **kwargs: Any) -> Any:
        pool = self.datastore.pool
        if not isinstance(pool, _SQLitePool) or pool.is_sqlite_memory_mode or not _plain(kwargs):
            return super().insert_events(stored_events, **kwargs)
        return guarded_write(
            lambda: self._insert(pool, stored_events), breaker=self.breaker, writes=self.writes
        )

    def insert_with_snapshots(
        self, stored_events: Any, snapshots: AggregateRecorder, stored_snapshots: Any
    ) -> Any:
        """Insert events, then the snapshots they make due, each in one statement: a snapshot is
        never stored without its events. Once the events are stored the action is done, so a
        failed snapshot is logged, not raised (a rebuild then reads a few more events). A
        snapshot is derived from its events, so a stray row at its version (left by damage: no
        events were there) is replaced, not a reason to refuse the events.

        (One transaction for both held SQLite's lock across four calls into SQLite and the
        waits for the GIL between them; with two statements, each holds it inside one call:
        2-7% less CPU per action, the trees served at once, docs/performance.md.)"""
        assert isinstance(snapshots, SQLiteAggregateRecorder)
        pool = self.datastore.pool
        if not isinstance(pool, _SQLitePool) or pool.is_sqlite_memory_mode:
            ids = self.insert_events(stored_events)
            snapshots.insert_events(stored_snapshots)
            return ids
        ids = guarded_write(
            lambda: self._insert(pool, stored_events), breaker=self.breaker, writes=self.writes
        )
        table = snapshots.events_table_name
        try:
            guarded(lambda: self._replace(pool, table, stored_snapshots), breaker=self.breaker)
        except (ApplicationError, IntegrityError) as exc:
            log.warning("a snapshot was not stored (its events were): %s", exc)
        return ids

    def _insert(self, pool: _SQLitePool, stored_events: Any) -> list[int]:
        """The events on the writer connection, in one statement: the new notification ids.
        More rows than one statement may bind (an import) go in one transaction, in chunks."""
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
            raise _library_sqlite_error(exc) from exc
        finally:
            pool._end_writing()

    @staticmethod
    def _replace(pool: _SQLitePool, table: str, stored: Any) -> None:
        """Rows into ``table`` (snapshots), replacing any at the same versions, in one
        statement."""
        values = [value for row in stored for value in _row(row)]
        rows = ",".join(["(?,?,?,?)"] * len(stored))
        # library hook: see service/hooks.py
        statement = f"INSERT OR REPLACE INTO {table} VALUES {rows}"
        with pool.writing(), _sqlite_errors():
            pool.writer().execute(statement, values)

    def _insert_alone(self, db: sqlite3.Connection, stored_events: Any) -> list[int]:
        """Events in one multi-row ``INSERT`` on the autocommit connection: its own transaction
        (all rows or none) unless inside one, one call into SQLite instead of three. Each call
        lets go of the GIL, and under load every let-go is a switch between threads. The rowids
        (the notification ids) are consecutive: the writer holds the write lock, so the table's
        largest rowid grows by one per row."""
        rows = [value for event in stored_events for value in _row(event)]
        count = len(stored_events)
        # library hook: see service/hooks.py
        statement = self.insert_events_statement + ",(?,?,?,?)" * (count - 1)
        last = db.execute(statement, rows).lastrowid or 0
        return list(range(last - count + 1, last + 1))


@contextlib.contextmanager
def _sqlite_errors() -> Iterator[None]:
    """sqlite3's errors as the library's, which ``guarded`` judges (retry, 503, conflict)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise _library_sqlite_error(exc) from exc


def _library_sqlite_error(exc: sqlite3.Error) -> PersistenceError:
    if isinstance(exc, sqlite3.IntegrityError):
        return IntegrityError(exc)
    if isinstance(exc, sqlite3.OperationalError):
        return OperationalError(exc)
    return DatabaseError(exc)


def _row(event: Any) -> tuple[Any, ...]:
    """A stored event as the library's insert statements take it."""
    originator_id = event.originator_id
    return (
        originator_id.hex if isinstance(originator_id, uuid.UUID) else originator_id,
        event.originator_version,
        event.topic,
        event.state,
    )


class SQLiteStore(SQLiteFactory):
    """eventsourcing's SQLite factory: an owner-only file, WAL, the chosen ``synchronous``, a
    longer WAL between checkpoints (``_SQLitePool.wal_autocheckpoint``)."""

    aggregate_recorder_class = GuardedSQLiteAggregateRecorder
    application_recorder_class = GuardedSQLiteApplicationRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        # The library's pool has not connected yet: replace it with one that sets the pragmas.
        # library hook: see service/hooks.py
        library_pool = self.datastore.pool
        pool = _SQLitePool(db_name=library_pool.db_name, lock_timeout=library_pool.lock_timeout)
        pool.synchronous = (self.env.get("CANTSTOP_SQLITE_SYNCHRONOUS") or "normal").upper()
        if not pool.is_sqlite_memory_mode and pool.synchronous in QUEUED_SYNCHRONOUS:
            pool.queue_writers(library_pool.db_name)
        library_pool.close()
        self.datastore.pool = pool


def _owner_only(path: str) -> None:
    """Create the SQLite file readable and writable by its owner only (it holds secrets)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)
