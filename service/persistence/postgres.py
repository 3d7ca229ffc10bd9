"""PostgreSQL: the service's own recorders (eventsourcing's public recorder interfaces) on
psycopg and a ``psycopg_pool.ConnectionPool`` the service builds itself: bounded waits, every
option of the URL, and writers that do not queue behind one another.

The tables are the ones eventsourcing's own PostgreSQL recorders make (``<app>_events`` with a
``notification_id``, ``<app>_snapshots``), plus the ``tx`` column and index the log reads by
(``log.py``): a store written by either is read and written by the other
(tests/test_fast_paths.py compares them row by row).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import heapq
import json
import logging
import os
import select
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any

import psycopg
import psycopg_pool
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
from psycopg.rows import dict_row, tuple_row
from psycopg.sql import Identifier

from service.config import Settings
from service.persistence.archive import (
    ARCHIVE_LOCK,
    ArchiveSpan,
    Row,
    archived_events,
    first_archived,
    pack,
    readable,
    unpack_game,
)
from service.persistence.errors import NoAnswer
from service.persistence.guard import (
    BREAKER,
    ROWS_PER_STATEMENT,
    WriteHealth,
    guarded,
    guarded_write,
)

log = logging.getLogger("cantstop.store")

CANCEL_TIMEOUT = 1.0  # seconds to ask the server to cancel a statement that took too long
# The server ends a session left idle inside a transaction this long (by default; the setting
# CANTSTOP_PG_IDLE_IN_TRANSACTION_TIMEOUT): a process that stopped mid-transaction (frozen,
# cut off between its insert and its commit) holds no lock, and holds back no other session's
# snapshot horizon, for longer.
IDLE_IN_TRANSACTION_TIMEOUT = 5.0
# Inside this, statements have no deadline: creating the tables, whose migration (the ``tx``
# column added to an existing table of events) rewrites the table and takes what it takes.
_UNBOUNDED: contextvars.ContextVar[bool] = contextvars.ContextVar("unbounded", default=False)


@contextlib.contextmanager
def _unbounded() -> Iterator[None]:
    token = _UNBOUNDED.set(True)
    try:
        yield
    finally:
        _UNBOUNDED.reset(token)


# ------------------------------------------------------------------------ the query deadline
class _Wait:
    """One wait for the server on one connection, watched by ``Deadlines``."""

    __slots__ = ("conn", "due", "expired", "lock", "over")

    def __init__(self, conn: Any, due: float) -> None:
        self.conn = conn
        self.due = due
        self.lock = threading.Lock()  # held while the wait is ended, and to finish it
        self.over = False  # the waiter has finished (its connection may serve another)
        self.expired = False

    def __lt__(self, other: _Wait) -> bool:
        return self.due < other.due


class Deadlines:
    """Ends every wait for the server that passes its deadline (``CANTSTOP_PG_QUERY_TIMEOUT``).

    A server that stops answering without closing its connections (a stopped or frozen process,
    a network that drops packets) is otherwise waited for as long as the kernel keeps the
    connection, which for a stopped process is for ever: every request that reads or writes,
    and /healthz, hung (docs/performance.md, levers: the query deadline). psycopg offers no
    deadline of its own for a statement, so one thread per process watches the waits: at a
    wait's deadline it asks the server to cancel the statement (``Connection.cancel_safe``: a
    locked or busy server stops it; a stopped one is given ``CANCEL_TIMEOUT``), and if the
    statement still has not returned, shuts the connection's socket down (``Connection.fileno``),
    which ends libpq's wait with an error. The waiter then closes the connection (the pool
    replaces it) and raises ``NoAnswer``. Watching a wait costs a clock read and a heap push."""

    def __init__(self) -> None:
        self._reset()
        # A child process has none of its parent's threads: it starts its own when it waits.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._heap: list[_Wait] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._next = float("inf")  # when the thread wakes next (inf: it sleeps until told)
        self._thread: threading.Thread | None = None

    def watch(self, conn: Any, deadline: float) -> _Wait:
        wait = _Wait(conn, time.monotonic() + deadline)
        with self._lock:
            heapq.heappush(self._heap, wait)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pg-deadlines", daemon=True)
                self._thread.start()
        if wait.due < self._next:
            self._wake.set()
        return wait

    @staticmethod
    def finish(wait: _Wait) -> bool:
        """The wait is over: whether it passed its deadline (its connection must go)."""
        with wait.lock:
            wait.over = True
            return wait.expired

    def _run(self) -> None:
        while True:
            now = time.monotonic()
            due: list[_Wait] = []
            with self._lock:
                heap = self._heap
                while heap and (heap[0].over or heap[0].due <= now):
                    wait = heapq.heappop(heap)
                    if not wait.over:
                        due.append(wait)
                self._next = heap[0].due if heap else float("inf")
                self._wake.clear()
            for wait in due:
                threading.Thread(target=self._end, args=(wait,), daemon=True).start()
            if self._next == float("inf"):
                self._wake.wait()
            else:
                self._wake.wait(max(0.0, self._next - time.monotonic()))

    @staticmethod
    def _end(wait: _Wait) -> None:
        with wait.lock:
            if wait.over:
                return
            wait.expired = True
            with contextlib.suppress(Exception):
                wait.conn.cancel_safe(timeout=CANCEL_TIMEOUT)
        time.sleep(0.05)  # a cancelled statement returns at once
        with wait.lock:
            if wait.over:
                return
            # A duplicate of the descriptor: shutting the socket down ends libpq's wait on it;
            # the waiter closes the connection itself.
            with contextlib.suppress(Exception):
                _shut_down(wait.conn.fileno())


def _shut_down(fd: int) -> None:
    with socket.socket(fileno=os.dup(fd)) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)


DEADLINES = Deadlines()


class _Bounded:
    """Waits for the server on ``conn`` inside it end within ``deadline`` seconds."""

    __slots__ = ("conn", "deadline", "wait")

    def __init__(self, conn: Any, deadline: float | None) -> None:
        self.conn = conn
        self.deadline = None if _UNBOUNDED.get() else deadline
        self.wait: _Wait | None = None

    def __enter__(self) -> None:
        if self.deadline is not None:
            self.wait = DEADLINES.watch(self.conn, self.deadline)

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self.wait is None or not DEADLINES.finish(self.wait):
            return
        assert self.deadline is not None
        error = _give_up(self.conn, self.deadline, cancel=False)
        if exc is not None:  # else the answer came after all, as the connection was ended
            raise error from exc


class BoundedCursor(psycopg.Cursor[Any]):
    """psycopg's cursor whose every statement waits for the server at most ``deadline``
    seconds (set per datastore by ``bounded``)."""

    deadline: float | None = None

    @classmethod
    def bounded(cls, deadline: float | None) -> type[psycopg.Cursor[Any]]:
        if deadline is None:
            return psycopg.Cursor
        return _bounded_cursor(deadline)

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        with _Bounded(self.connection, self.deadline):
            return super().execute(query, params, **kwargs)


@functools.cache
def _bounded_cursor(deadline: float) -> type[BoundedCursor]:
    """One class per deadline, not one per datastore: a class is a reference cycle (its
    ``__mro__`` holds it), left for the cyclic collector when its datastore goes."""
    return type("BoundedCursor", (BoundedCursor,), {"deadline": deadline})


def _give_up(conn: Any, deadline: float, *, cancel: bool = True) -> NoAnswer:
    """Cancel ``conn``'s statement if the server still listens, close ``conn``: the error."""
    if cancel:
        with contextlib.suppress(Exception):
            conn.cancel_safe(timeout=CANCEL_TIMEOUT)
    with contextlib.suppress(Exception):
        conn.close()
    log.warning("the database did not answer within %g s: connection closed", deadline)
    return NoAnswer(f"the database did not answer within {deadline:g} s")


def _exchange(conn: Any, deadline: float | None) -> Any:
    """The last result of the statement just sent on ``conn``'s libpq connection (what
    ``PQexec`` returns), waited for within ``deadline`` seconds (libpq's non-blocking calls,
    psycopg.pq, and poll: no other thread is involved)."""
    pgconn = conn.pgconn
    end = None if deadline is None else time.monotonic() + deadline
    poller = None
    last = None
    while True:
        while pgconn.is_busy():
            if poller is None:
                poller = select.poll()
                poller.register(pgconn.socket, select.POLLIN)
            wait_ms = None if end is None else max(0.0, end - time.monotonic()) * 1000
            if not poller.poll(wait_ms):
                assert deadline is not None
                raise _give_up(conn, deadline)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            if last is None:
                raise psycopg.OperationalError("the database answered nothing")
            return last
        last = result


# psycopg's errors as eventsourcing's (which ``guarded`` judges: retry, 503, conflict), as
# eventsourcing's own PostgreSQL datastore maps them; the first that matches.
_LIBRARY_ERRORS: tuple[tuple[type[psycopg.Error], type[PersistenceError]], ...] = (
    (psycopg.InterfaceError, InterfaceError),
    (psycopg.OperationalError, OperationalError),
    (psycopg.DataError, DataError),
    (psycopg.IntegrityError, IntegrityError),
    (psycopg.InternalError, InternalError),
    (psycopg.ProgrammingError, ProgrammingError),
    (psycopg.NotSupportedError, NotSupportedError),
    (psycopg.DatabaseError, DatabaseError),
)


def _library_error(exc: psycopg.Error) -> PersistenceError:
    for theirs, ours in _LIBRARY_ERRORS:
        if isinstance(exc, theirs):
            return ours(str(exc))
    return PersistenceError(str(exc))


# ------------------------------------------------------------------------------ the datastore
class PostgresDatastore:
    """The pool (psycopg_pool's, built here: every option of the URL, autocommit connections
    whose cursors have the deadline), and transactions on it: what the recorders, the views and
    the side tables (service/persistence/tables.py) read and write through."""

    dialect = "postgres"

    def __init__(
        self,
        params: dict[str, Any],
        *,
        schema: str = "",
        pool_size: int = 5,
        max_overflow: int = 10,
        connect_timeout: float = 30,
        max_waiting: int = 0,
        conn_max_age: float = 3600.0,
        deadline: float | None = None,
        idle_in_transaction: float = IDLE_IN_TRANSACTION_TIMEOUT,
    ) -> None:
        self.schema = schema.strip() or "public"
        self.deadline = deadline or None
        kwargs = dict(params)
        idle = f"-c idle_in_transaction_session_timeout={int(idle_in_transaction * 1000)}"
        kwargs["options"] = f"{kwargs['options']} {idle}" if kwargs.get("options") else idle
        kwargs.update(
            autocommit=True,
            row_factory=dict_row,
            cursor_factory=BoundedCursor.bounded(self.deadline),
        )
        self.pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            kwargs=kwargs,
            min_size=pool_size,
            max_size=pool_size + max_overflow,
            open=False,  # on first use: a process that never touches the store never connects
            timeout=connect_timeout,
            max_waiting=max_waiting,
            max_lifetime=conn_max_age,
        )
        self._opening = threading.Lock()

    def bounded(self, conn: Any) -> _Bounded:
        """A block whose waits on ``conn`` end within the deadline (the cursors' own are)."""
        return _Bounded(conn, self.deadline)

    def open(self) -> None:
        if self.pool.closed:
            with self._opening:
                if self.pool.closed:
                    self.pool.open(wait=False)

    @contextlib.contextmanager
    def get_connection(self) -> Iterator[Any]:
        """A connection of the pool; psycopg's errors as the library's."""
        try:
            self.open()
            with self.pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise _library_error(exc) from exc

    @contextlib.contextmanager
    def transaction(self, *, commit: bool = False) -> Iterator[Any]:
        """A cursor (rows by column name) in one transaction, committed at the end with
        ``commit``, else rolled back."""
        with self.get_connection() as conn:
            transaction = conn.transaction(force_rollback=not commit)
            with self.bounded(conn):
                transaction.__enter__()
            try:
                yield conn.cursor()
            except BaseException as exc:
                with self.bounded(conn), contextlib.suppress(psycopg.Error):
                    transaction.__exit__(type(exc), exc, exc.__traceback__)
                raise
            with self.bounded(conn):
                transaction.__exit__(None, None, None)

    @contextlib.contextmanager
    def autocommit(self) -> Iterator[Any]:
        """A cursor whose every statement is a transaction of its own (the pool's connections
        are in autocommit): one statement needs no ``BEGIN`` and ``COMMIT`` around it."""
        with self.get_connection() as conn:
            yield conn.cursor()

    def reading(self) -> contextlib.AbstractContextManager[Any]:
        """A cursor for reads, each statement a transaction of its own (``autocommit``). Under
        READ COMMITTED a read-only transaction gives each of its statements a snapshot of its
        own too, so they read the same rows; without its BEGIN and ROLLBACK, two round trips (a
        pass of the worker makes some thirty such reads: docs/performance.md, levers). Not for
        a server-side cursor or ``SET LOCAL``, which need the transaction."""
        return self.autocommit()

    def close(self) -> None:
        self.pool.close()


# --------------------------------------------------------------------------- the recorders
def _columns(event: Any) -> tuple[Any, ...]:
    return (event.originator_id, event.originator_version, event.topic, event.state)


def _values_insert(
    recorder: GuardedPostgresAggregateRecorder, rows: int, *, numbered: bool, first: int = 1
) -> str:
    """``INSERT INTO <recorder's table> (…) VALUES (…), …`` for ``rows`` stored events, with
    psycopg's ``%s`` placeholders or libpq's ``$1``, ``$2``, … from ``first``."""
    table = recorder.table
    if numbered:
        values = ",".join(
            "({},{},{},{})".format(*(f"${n}" for n in range(first + 4 * i, first + 4 * i + 4)))
            for i in range(rows)
        )
    else:
        values = ",".join(["(%s,%s,%s,%s)"] * rows)
    return f"INSERT INTO {table} (originator_id, originator_version, topic, state) VALUES {values}"


# A write of at most this many events (a command's few) goes through libpq itself, its
# statement prepared once per session and kept there: at most 2 x 16 shapes per session. A
# larger one (an import) goes through psycopg, whose prepared statements are bounded.
PREPARED_ROWS = 16
# The parameters' types, as the columns have them (uuid, bigint, text, bytea): the uuid and the
# bytea go in binary, the others as text.
_PARAM_TYPES = (2950, 20, 25, 17)
_PARAM_FORMATS = (1, 0, 0, 1)
_NO_SUCH_STATEMENT = b"26000"  # invalid_sql_statement_name: not prepared in this session
# duplicate_prepared_statement: prepared already in this session (by an earlier client of a
# pooled server connection); a name is its text's hash, so it is the same statement.
_SAME_STATEMENT = b"42P05"
# The storage parameters eventsourcing's PostgreSQL recorders give their tables.
_TABLE_WITH = (
    "WITH (autovacuum_enabled = true, autovacuum_vacuum_threshold = 100000000, "
    "autovacuum_vacuum_scale_factor = 0.5, autovacuum_analyze_threshold = 1000, "
    "autovacuum_analyze_scale_factor = 0.01)"
)


def _params(rows: Iterable[Any]) -> list[bytes]:
    """Stored events (or snapshots) as libpq parameters: 16 bytes of uuid, the version in
    decimal, the topic in UTF-8, the state as it is."""
    params: list[bytes] = []
    for row in rows:
        originator_id = row.originator_id
        if not isinstance(originator_id, uuid.UUID):
            originator_id = uuid.UUID(str(originator_id))
        params += (
            originator_id.bytes,
            b"%d" % row.originator_version,
            row.topic.encode(),
            bytes(row.state),
        )
    return params


def _stored(rows: list[Any]) -> list[StoredEvent]:
    """Rows of the events table (as dicts) as the library's stored events."""
    return [
        StoredEvent(
            originator_id=row["originator_id"],
            originator_version=row["originator_version"],
            topic=row["topic"],
            state=bytes(row["state"]),
        )
        for row in rows
    ]


def _raise_for(pgconn: Any, result: Any) -> None:
    """A failed libpq result as the psycopg error psycopg would raise for it."""
    message = result.error_message.decode(errors="replace") or "the statement failed"
    if pgconn.status != psycopg.pq.ConnStatus.OK:
        raise psycopg.OperationalError(message)
    sqlstate = result.error_field(psycopg.pq.DiagnosticField.SQLSTATE)
    try:
        error = psycopg.errors.lookup(sqlstate.decode()) if sqlstate else psycopg.DatabaseError
    except KeyError:
        error = psycopg.DatabaseError
    raise error(message)


def _no_tracking(kwargs: dict[str, Any]) -> None:
    """The library's ``Application.save`` passes ``tracking=None``; only a process
    application tracks, and the service keeps its views' positions itself (views.py)."""
    if kwargs.get("tracking") is not None:
        raise NotImplementedError("the service's recorders do not record tracking")


class GuardedPostgresAggregateRecorder(AggregateRecorder):
    """Stored events of one table (snapshots), each operation through ``guarded``: at most two
    tries, then 503, and the breaker."""

    dialect = "postgres"
    breaker = BREAKER

    def __init__(self, datastore: PostgresDatastore, events_table_name: str) -> None:
        if len(events_table_name) > 63:  # PostgreSQL would truncate it
            raise ProgrammingError(f"Identifier too long: {events_table_name}")
        self.datastore = datastore
        self.events_table_name = events_table_name
        self.table = Identifier(datastore.schema, events_table_name).as_string()
        self.writes = WriteHealth()

    def create_table_statements(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} (originator_id uuid NOT NULL, "
            "originator_version bigint NOT NULL, topic text, state bytea, "
            f"PRIMARY KEY (originator_id, originator_version)) {_TABLE_WITH}"
        ]

    def create_table(self) -> None:
        with _unbounded(), self.datastore.transaction(commit=True) as curs:
            for statement in self.create_table_statements():
                curs.execute(statement, prepare=False)

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        _no_tracking(kwargs)
        if not stored_events:
            return None
        return guarded_write(
            lambda: self._insert_plain(stored_events), breaker=self.breaker, writes=self.writes
        )

    def _insert_plain(self, stored_events: Sequence[StoredEvent]) -> None:
        params = [value for row in stored_events for value in _columns(row)]
        statement = _values_insert(self, len(stored_events), numbered=False)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, params)

    def thin_out(self, originator_id: uuid.UUID, keep_every: int) -> None:
        """Delete the originator's rows but those at multiples of ``keep_every`` (snapshots a
        finished game no longer needs: Store.KEPT_WHEN_FINISHED)."""
        statement = (
            f"DELETE FROM {self.table} WHERE originator_id = %s AND originator_version %% %s <> 0"
        )

        def delete() -> None:  # one statement on an autocommit connection: one round trip
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(statement, (originator_id, keep_every))

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
        statement, params = self._events_query(originator_id, gt, lte, desc, limit)

        def select() -> list[StoredEvent]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(statement, params, prepare=True)
                return _stored(curs.fetchall())

        return guarded(select, breaker=self.breaker)

    def _events_query(
        self,
        originator_id: uuid.UUID | str,
        gt: int | None,
        lte: int | None,
        desc: bool,
        limit: int | None,
    ) -> tuple[str, list[Any]]:
        """``select_events``' query of the table's rows, and its parameters."""
        statement = (
            "SELECT originator_id, originator_version, topic, state "
            f"FROM {self.table} WHERE originator_id = %s"
        )
        params: list[Any] = [originator_id]
        if gt is not None:
            params.append(gt)
            statement += " AND originator_version > %s"
        if lte is not None:
            params.append(lte)
            statement += " AND originator_version <= %s"
        statement += " ORDER BY originator_version" + (" DESC" if desc else " ASC")
        if limit is not None:
            params.append(limit)
            statement += " LIMIT %s"
        return statement, params

    def stored_among(self, originator_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Those of ``originator_ids`` with any event stored (one query)."""
        statement = f"SELECT DISTINCT originator_id FROM {self.table} WHERE originator_id = ANY(%s)"

        def select() -> set[uuid.UUID]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(statement, [list(originator_ids)])
                return {row["originator_id"] for row in curs.fetchall()}

        return guarded(select, breaker=self.breaker) if originator_ids else set()

    def first_events(self, originator_ids: Sequence[uuid.UUID]) -> list[StoredEvent]:
        """The first event (version 1) of each of ``originator_ids`` that has one (one query)."""
        statement = (
            "SELECT originator_id, originator_version, topic, state FROM "
            f"{self.table} WHERE originator_id = ANY(%s) AND originator_version = 1"
        )

        def select() -> list[StoredEvent]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(statement, [list(originator_ids)])
                return _stored(curs.fetchall())

        return guarded(select, breaker=self.breaker) if originator_ids else []


class GuardedPostgresApplicationRecorder(GuardedPostgresAggregateRecorder, ApplicationRecorder):
    """Writers to different games do not queue behind one another.

    eventsourcing's own recorder locks the whole events table on every insert (and sends a
    NOTIFY, which takes a global lock at commit), so that notification ids are committed in
    order and a reader of the log never passes over an id that commits later. Measured here
    (docs/performance.md), that lock halved what two workers could write. This insert
    (``_insert``) takes no such lock and sends no NOTIFY. Instead, every row records the
    transaction that wrote it (column ``tx``), and ``LogReader`` reads the log by transaction:
    only rows of transactions that have all finished (below the snapshot's xmin), so none is
    passed over."""

    def __init__(self, datastore: PostgresDatastore, events_table_name: str) -> None:
        super().__init__(datastore, events_table_name)
        # finished games' events, archived (archive.py): a game archived has no rows left
        self.archive_table = Identifier(
            datastore.schema, events_table_name + "_archive"
        ).as_string()
        self.archive_topics = Identifier(
            datastore.schema, events_table_name + "_archive_topics"
        ).as_string()
        self._statements: dict[tuple[int, str, int, bool], tuple[bytes, bytes]] = {}
        # The statements each pooled connection's session has prepared, by connection.
        self._prepared: weakref.WeakKeyDictionary[Any, set[bytes]] = weakref.WeakKeyDictionary()
        self._prepared_lock = threading.Lock()

    def create_table_statements(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table} (originator_id uuid NOT NULL, "
            "originator_version bigint NOT NULL, topic text, state bytea, "
            "notification_id bigserial, "
            f"PRIMARY KEY (originator_id, originator_version)) {_TABLE_WITH}",
            "CREATE UNIQUE INDEX IF NOT EXISTS "
            f"{Identifier(self.events_table_name + '_notification_id_idx').as_string()} "
            f"ON {self.table} (notification_id ASC)",
            f"CREATE TABLE IF NOT EXISTS {self.archive_table} (originator_id uuid PRIMARY KEY, "
            "last_version bigint NOT NULL, first_tx xid8 NOT NULL, first_id bigint NOT NULL, "
            "last_tx xid8 NOT NULL, last_id bigint NOT NULL, "
            "data bytea NOT NULL)",
            "CREATE INDEX IF NOT EXISTS "
            f"{Identifier(self.events_table_name + '_archive_last').as_string()} "
            f"ON {self.archive_table} (last_tx, last_id)",
            # every topic any archive holds: a reader of none of them reads no archive
            f"CREATE TABLE IF NOT EXISTS {self.archive_topics} (topic text PRIMARY KEY)",
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
        """As the library's, of rows or of an archive, in one statement (one snapshot: rows are
        deleted in the transaction that writes their archive). A game read up to its last
        version reads no archive (``last_version``)."""
        rows_query, params = self._events_query(originator_id, gt, lte, desc, limit)
        statement = (
            f"({rows_query}) UNION ALL (SELECT originator_id, -1, NULL, data "
            f"FROM {self.archive_table} WHERE originator_id = %s"
        )
        params.append(originator_id)
        if gt is not None:
            params.append(gt)
            statement += " AND last_version > %s"
        statement += ")"

        def select() -> list[Any]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(statement, params, prepare=True)
                return list(curs.fetchall())

        rows = guarded(select, breaker=self.breaker)
        if rows and rows[-1]["originator_version"] == -1:
            data = bytes(rows.pop()["state"])
            if not rows:
                key = (
                    originator_id
                    if isinstance(originator_id, uuid.UUID)
                    else uuid.UUID(originator_id)
                )
                return archived_events(key, data, gt=gt, lte=lte, desc=desc, limit=limit)
        return _stored(rows)

    def last_row(self, originator_id: uuid.UUID) -> StoredEvent | None:
        """The originator's last event in rows (None: it has none, unknown or archived),
        without reading an archive."""
        found = super().select_events(originator_id, desc=True, limit=1)
        return found[0] if found else None

    def stored_among(self, originator_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Those of ``originator_ids`` with any event stored, in rows or archived."""
        statement = (
            f"SELECT originator_id FROM {self.table} WHERE originator_id = ANY(%s) UNION "
            f"SELECT originator_id FROM {self.archive_table} WHERE originator_id = ANY(%s)"
        )

        def select() -> set[uuid.UUID]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(statement, [list(originator_ids)] * 2)
                return {row["originator_id"] for row in curs.fetchall()}

        return guarded(select, breaker=self.breaker) if originator_ids else set()

    def first_events(self, originator_ids: Sequence[uuid.UUID]) -> list[StoredEvent]:
        """The first event (version 1) of each of ``originator_ids`` that has one, in rows or
        archived (one query)."""
        statement = (
            "SELECT originator_id, originator_version, topic, state FROM "
            f"{self.table} WHERE originator_id = ANY(%s) AND originator_version = 1 UNION ALL "
            f"SELECT originator_id, -1, NULL, data FROM {self.archive_table} "
            "WHERE originator_id = ANY(%s)"
        )

        def select() -> list[Any]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(statement, [list(originator_ids)] * 2)
                return list(curs.fetchall())

        if not originator_ids:
            return []
        rows = guarded(select, breaker=self.breaker)
        found = _stored([row for row in rows if row["originator_version"] != -1])
        have = {event.originator_id for event in found}
        return found + first_archived(
            (row["originator_id"], bytes(row["state"]))
            for row in rows
            if row["originator_version"] == -1 and row["originator_id"] not in have
        )

    def archive(self, originator_id: uuid.UUID, last_version: int, behind: str) -> str:
        """Replace a finished game's rows with one archive row, in one transaction, if its rows
        are exactly versions 1 to ``last_version``, every position in the table ``behind`` (the
        views' tracking rows, rebuilds' included) is at or past its last row, and that row is
        not the log's newest (/healthz's and ``LogReader.newest``'s would move back). Under
        ``ARCHIVE_LOCK`` taken at once or not at all (``busy``): a view's tracking row made at
        the start of the log waits for it (views.py), so a reader from the start never misses
        a game archived while it began. What happened: ``archived``, or why not."""

        return self._locked(
            lambda curs: self._archive_in(curs, originator_id, last_version, behind)
        )

    def restore(self, originator_id: uuid.UUID, behind: str) -> str:
        """Put an archived game's rows back, each at its place in the log (its transaction and
        notification id), and drop its archive, in one transaction under ``ARCHIVE_LOCK``, if
        every position in ``behind`` is at or past its last row (no reader of the log is then
        between its rows): what a release before archives reads. ``restored``, or why not
        (``not archived``, ``not read``, ``busy``)."""
        return self._locked(lambda curs: self._restore_in(curs, originator_id, behind))

    def _locked(self, work: Callable[[Any], str]) -> str:
        """``work`` in one transaction under ``ARCHIVE_LOCK``, taken at once or not at all."""

        def run() -> str:
            with self.datastore.transaction(commit=True) as curs:
                curs.execute("SELECT pg_try_advisory_xact_lock(%s) AS got", [ARCHIVE_LOCK])
                if not curs.fetchone()["got"]:
                    return "busy"
                return work(curs)

        return guarded_write(run, breaker=self.breaker, writes=self.writes)

    def _restore_in(self, curs: Any, originator_id: uuid.UUID, behind: str) -> str:
        curs.execute(
            f"SELECT data, last_tx::text AS lt, last_id FROM {self.archive_table} "
            "WHERE originator_id = %s",
            [originator_id],
        )
        found = curs.fetchone()
        if found is None:
            return "not archived"
        if not self._read_past(curs, behind, (int(found["lt"]), found["last_id"])):
            return "not read"
        rows = unpack_game(originator_id, bytes(found["data"]))
        curs.executemany(
            f"INSERT INTO {self.table} (originator_id, originator_version, topic, state, "
            "notification_id, tx) VALUES (%s, %s, %s, %s, %s, %s::text::xid8)",
            [
                (originator_id, row.version, row.topic, row.state, row.id, str(row.tx))
                for row in rows
            ],
        )
        curs.execute(f"DELETE FROM {self.archive_table} WHERE originator_id = %s", [originator_id])
        return "restored"

    @staticmethod
    def _read_past(curs: Any, behind: str, last: tuple[int, int]) -> bool:
        """Every position in ``behind`` (the views' tracking rows) is at or past ``last`` (tx,
        notification id): no reader of the log is between a game's rows that end there."""
        curs.execute(f"SELECT tx, position FROM {behind} ORDER BY tx, position LIMIT 1")
        oldest = curs.fetchone()
        return oldest is not None and (oldest["tx"], oldest["position"]) >= last

    def archived_ids(self, limit: int) -> list[uuid.UUID]:
        """Some archived games (up to ``limit``)."""

        def select() -> list[uuid.UUID]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(f"SELECT originator_id FROM {self.archive_table} LIMIT %s", [limit])
                return [row["originator_id"] for row in curs.fetchall()]

        return guarded(select, breaker=self.breaker)

    def _archive_in(
        self, curs: Any, originator_id: uuid.UUID, last_version: int, behind: str
    ) -> str:
        curs.execute(
            "SELECT originator_version, topic, state, tx::text AS tx, notification_id AS id "
            f"FROM {self.table} WHERE originator_id = %s ORDER BY originator_version",
            [originator_id],
        )
        rows = [
            Row(r["originator_version"], r["topic"], bytes(r["state"]), int(r["tx"]), r["id"])
            for r in curs.fetchall()
        ]
        if not rows:
            return "no rows"
        if [row.version for row in rows] != list(range(1, last_version + 1)):
            return "not its versions"
        places = sorted((row.tx, row.id) for row in rows)
        curs.execute(  # by the column, not by its text (``LogReader.newest``)
            f"SELECT tx::text AS tx_text, notification_id FROM {self.table} "
            "ORDER BY tx DESC, notification_id DESC LIMIT 1"
        )
        newest = curs.fetchone()
        if (int(newest["tx_text"]), newest["notification_id"]) == places[-1]:
            return "the newest"
        if not self._read_past(curs, behind, places[-1]):
            return "not read"
        curs.execute(
            f"INSERT INTO {self.archive_table} VALUES "
            "(%s, %s, %s::text::xid8, %s, %s::text::xid8, %s, %s)",
            [
                originator_id,
                last_version,
                str(places[0][0]),
                places[0][1],
                str(places[-1][0]),
                places[-1][1],
                pack(rows),
            ],
        )
        curs.execute(
            f"INSERT INTO {self.archive_topics} SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING",
            [sorted({row.topic for row in rows})],
        )
        curs.execute(f"DELETE FROM {self.table} WHERE originator_id = %s", [originator_id])
        return "archived"

    def archives_after(
        self, position: tuple[int, int], topics: Sequence[str] = ()
    ) -> list[ArchiveSpan]:
        """The archives holding an event after ``position`` in the log, by their first event's
        place: what a reader of the log from there must merge with the rows (log.py). None for
        a reader of ``topics`` of which no archive holds any."""
        statement = (
            "SELECT originator_id, first_tx::text AS ft, first_id, last_tx::text AS lt, last_id "
            f"FROM {self.archive_table} WHERE (last_tx, last_id) > (%s::text::xid8, %s)"
        )
        params: list[Any] = [str(position[0]), position[1]]
        if topics:
            statement += f" AND EXISTS (SELECT 1 FROM {self.archive_topics} WHERE topic = ANY(%s))"
            params.append(list(topics))

        def select() -> list[ArchiveSpan]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(statement + " ORDER BY first_tx, first_id", params)
                return [
                    ArchiveSpan(
                        r["originator_id"],
                        (int(r["ft"]), r["first_id"]),
                        (int(r["lt"]), r["last_id"]),
                    )
                    for r in curs.fetchall()
                ]

        return guarded(select, breaker=self.breaker)

    def archived_rows(
        self, originator_ids: Sequence[uuid.UUID], topics: Collection[str] | None = None
    ) -> dict[uuid.UUID, list[Row]]:
        """The archived rows of these games (those archived; of ``topics``, if given), each
        game's in version order."""
        statement = (
            f"SELECT originator_id, data FROM {self.archive_table} WHERE originator_id = ANY(%s)"
        )

        def select() -> list[Any]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(statement, [list(originator_ids)])
                return list(curs.fetchall())

        if not originator_ids:
            return {}
        rows = guarded(select, breaker=self.breaker)
        return readable(((row["originator_id"], bytes(row["data"])) for row in rows), topics)

    def create_table(self) -> None:
        with _unbounded():  # the ALTER below rewrites an existing table, once
            super().create_table()
            index = Identifier(self.datastore.schema, f"{self.events_table_name}_tx").as_string()
            with self.datastore.transaction(commit=True) as curs:
                # Run only when missing: IF NOT EXISTS still takes the table's lock first (the
                # ALTER's blocks reads too), so a host starting beside a long transaction on
                # the table would stall every request until it ends (deploy/README.md).
                curs.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass "
                    "AND attname = 'tx' AND NOT attisdropped) AS has_column, "
                    "to_regclass(%s) IS NOT NULL AS has_index",
                    (self.table, index),
                )
                found = curs.fetchone() or {}
                if not found.get("has_column"):
                    curs.execute(
                        f"ALTER TABLE {self.table} ADD COLUMN IF NOT EXISTS tx xid8 NOT NULL "
                        "DEFAULT pg_current_xact_id()"
                    )
                if not found.get("has_index"):
                    curs.execute(
                        f'CREATE INDEX IF NOT EXISTS "{self.events_table_name}_tx" '
                        f"ON {self.table} (tx, notification_id)"
                    )

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        _no_tracking(kwargs)
        if not stored_events:
            return None  # as eventsourcing's recorder answers nothing inserted
        return guarded_write(
            lambda: self._insert(stored_events), breaker=self.breaker, writes=self.writes
        )

    def insert_with_snapshots(
        self,
        stored_events: Any,
        snapshots: AggregateRecorder,
        stored_snapshots: Any,
    ) -> Any:
        """Insert events and the snapshots they make due in one statement (a data-modifying
        ``WITH``): all rows or none, one round trip. As on SQLite, a stray snapshot row at the
        same version is replaced."""
        assert isinstance(snapshots, GuardedPostgresAggregateRecorder)
        return guarded_write(
            lambda: self._insert(stored_events, (snapshots, stored_snapshots)),
            breaker=self.breaker,
            writes=self.writes,
        )

    def _insert(
        self, stored_events: Any, with_snapshots: tuple[Any, Any] | None = None
    ) -> list[int]:
        """The events in one statement on an autocommit connection: its own transaction, all
        rows or none, in one round trip. (eventsourcing's insert pipelines BEGIN, the INSERT, a
        sync and COMMIT: about eleven waits on the socket, and twice the CPU in this process;
        docs/performance.md.) The rows are plain ``VALUES`` (psycopg dumps uuid, integer, text
        and bytea in C), and the statement is text built once per shape, so psycopg parses it
        once and the server runs it prepared; a command's goes through libpq itself
        (``_execute_prepared``)."""
        snapshots, stored_snapshots = with_snapshots or (None, ())
        events = list(stored_events)
        datastore = self.datastore
        pool = datastore.pool
        if len(events) <= PREPARED_ROWS and not pool.closed:
            # The pool's connection straight, not through get_connection and the pool's
            # connection(): two generator context managers on the hottest path
            # (docs/performance.md, levers). The pool checks the connection when it is given
            # back, as there.
            try:
                conn = pool.getconn()
                try:
                    return self._execute_prepared(conn, events, snapshots, stored_snapshots)
                finally:
                    pool.putconn(conn)
            except psycopg.Error as exc:
                raise _library_error(exc) from exc
        # A pool not opened yet (get_connection opens it), or more events than a command makes
        # (an import).
        with datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as curs:
            if len(events) <= ROWS_PER_STATEMENT:
                return self._execute(curs, events, snapshots, stored_snapshots, prepare=True)
            # More rows than one statement may bind (an import): one transaction, in chunks.
            ids: list[int] = []
            transaction = conn.transaction()
            with datastore.bounded(conn):
                transaction.__enter__()
            try:
                for start in range(0, len(events), ROWS_PER_STATEMENT):
                    chunk = events[start : start + ROWS_PER_STATEMENT]
                    first = stored_snapshots if start == 0 else ()
                    ids += self._execute(curs, chunk, snapshots, first, prepare=False)
            except BaseException as exc:
                with datastore.bounded(conn), contextlib.suppress(psycopg.Error):
                    transaction.__exit__(type(exc), exc, exc.__traceback__)
                raise
            with datastore.bounded(conn):
                transaction.__exit__(None, None, None)
            return ids

    def _execute_prepared(
        self, conn: Any, events: list[Any], snapshots: Any, stored_snapshots: Any
    ) -> list[int]:
        """The statement through libpq itself (psycopg.pq, on ``Connection.pgconn``), prepared
        once per session: psycopg's cursor, its prepared-statement manager and its adapters
        cost as much again as the call itself (docs/performance.md, levers). It is sent, and
        its answer waited for within the deadline (``_exchange``), letting go of the GIL
        meanwhile, as psycopg does. ``conn`` is this thread's alone (the pool's); it is in
        autocommit, so the statement is its own transaction."""
        name, text = self._statement(len(events), snapshots, len(stored_snapshots), True)
        pgconn = conn.pgconn
        deadline = None if _UNBOUNDED.get() else self.datastore.deadline
        with self._prepared_lock:
            prepared = self._prepared.setdefault(conn, set())
        params = _params(stored_snapshots) + _params(events)
        count = len(params) // 4
        for attempt in (1, 2):
            if name not in prepared:
                pgconn.send_prepare(name, text, _PARAM_TYPES * count)
                result = _exchange(conn, deadline)
                if result.status != psycopg.pq.ExecStatus.COMMAND_OK and (
                    result.error_field(psycopg.pq.DiagnosticField.SQLSTATE) != _SAME_STATEMENT
                ):
                    _raise_for(pgconn, result)
                prepared.add(name)
            pgconn.send_query_prepared(name, params, _PARAM_FORMATS * count)
            result = _exchange(conn, deadline)
            if result.status == psycopg.pq.ExecStatus.TUPLES_OK:
                return sorted(int(result.get_value(i, 0)) for i in range(result.ntuples))
            sqlstate = result.error_field(psycopg.pq.DiagnosticField.SQLSTATE)
            if attempt == 1 and sqlstate == _NO_SUCH_STATEMENT:
                prepared.discard(name)  # the session lost it (DISCARD ALL, a pooler): again
                continue
            _raise_for(pgconn, result)
        raise AssertionError("unreachable")

    def _execute(
        self, curs: Any, events: list[Any], snapshots: Any, stored_snapshots: Any, *, prepare: bool
    ) -> list[int]:
        _, statement = self._statement(len(events), snapshots, len(stored_snapshots), False)
        params = [value for row in (*stored_snapshots, *events) for value in _columns(row)]
        curs.execute(statement, params, prepare=prepare)
        return sorted(notification_id for (notification_id,) in curs.fetchall())

    def _statement(
        self, events: int, snapshots: Any, rows: int, numbered: bool
    ) -> tuple[bytes, bytes]:
        """A name for libpq, and the statement of ``_text`` with libpq's ``$n`` placeholders
        (``numbered``) or psycopg's, built once per shape."""
        key = (events, snapshots.events_table_name if snapshots is not None else "", rows, numbered)
        found = self._statements.get(key)
        if found is None:
            text = self._text(events, snapshots, rows, numbered)
            # Named by its text: threads building statements at once agree on every name.
            name = f"cantstop_insert_{hashlib.sha256(text).hexdigest()[:24]}".encode()
            found = self._statements[key] = (name, text)
        return found

    def _text(self, events: int, snapshots: Any, rows: int, numbered: bool) -> bytes:
        """``INSERT … VALUES (…), … RETURNING notification_id`` for ``events`` rows, after a
        ``WITH`` inserting ``rows`` snapshot rows into ``snapshots``' table (if any): their
        parameters come first."""
        first = 4 * rows + 1 if snapshots is not None and rows else 1
        text = f"{_values_insert(self, events, numbered=numbered, first=first)}"
        text += " RETURNING notification_id"
        if snapshots is not None and rows:
            text = (
                f"WITH snapshots AS ({_values_insert(snapshots, rows, numbered=numbered)} "
                "ON CONFLICT (originator_id, originator_version) "
                "DO UPDATE SET topic = EXCLUDED.topic, state = EXCLUDED.state) " + text
            )
        return text.encode()

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
            where.append("notification_id >= %s" if inclusive_of_start else "notification_id > %s")
            params.append(start)
        if stop is not None:
            where.append("notification_id <= %s")
            params.append(stop)
        if topics:
            where.append("topic = ANY(%s)")
            params.append(list(topics))
        statement = f"SELECT * FROM {self.table}"
        if where:
            statement += " WHERE " + " AND ".join(where)
        statement += " ORDER BY notification_id LIMIT %s"
        params.append(limit)

        def select() -> list[Notification]:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(statement, params, prepare=True)
                rows = curs.fetchall()
            return [
                Notification(
                    id=row["notification_id"],
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in rows
            ]

        return guarded(select, breaker=self.breaker)

    def max_notification_id(self) -> int | None:
        def select() -> int | None:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(f"SELECT MAX(notification_id) AS max FROM {self.table}")
                row = curs.fetchone()
            return None if row is None or row["max"] is None else int(row["max"])

        return guarded(select, breaker=self.breaker)

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        """Not offered: followers read the log by ``log.LogReader``."""
        raise NotImplementedError("the service's followers read the log by LogReader")


class PostgresStore(InfrastructureFactory[TrackingRecorder]):
    """The service's infrastructure on PostgreSQL (``PERSISTENCE_MODULE``, settings.py): the
    pool with every option of the URL and the deadline. Events and snapshots only: the service
    keeps the positions of its views itself (views.py), so no tracking or process recorder."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        get = self.env.get
        params: dict[str, Any] = json.loads(get("CANTSTOP_PG_OPTIONS") or "{}")
        params.update(
            dbname=get("POSTGRES_DBNAME") or "postgres",
            host=get("POSTGRES_HOST") or "127.0.0.1",
            port=get("POSTGRES_PORT") or "5432",
            user=get("POSTGRES_USER") or "postgres",
        )
        if get("POSTGRES_PASSWORD"):
            params["password"] = get("POSTGRES_PASSWORD")
        deadline = float(get("CANTSTOP_PG_QUERY_TIMEOUT") or Settings.pg_query_timeout)
        self.datastore = PostgresDatastore(
            params,
            schema=get("POSTGRES_SCHEMA") or "",
            pool_size=int(get("POSTGRES_POOL_SIZE") or 5),
            max_overflow=int(get("POSTGRES_MAX_OVERFLOW") or 10),
            connect_timeout=float(get("POSTGRES_CONNECT_TIMEOUT") or 30),
            max_waiting=int(get("POSTGRES_MAX_WAITING") or 0),
            conn_max_age=float(get("POSTGRES_CONN_MAX_AGE") or 3600),
            deadline=deadline if deadline > 0 else None,
            idle_in_transaction=float(
                get("CANTSTOP_PG_IDLE_IN_TRANSACTION_TIMEOUT") or IDLE_IN_TRANSACTION_TIMEOUT
            ),
        )

    def _create_table(self) -> bool:
        return bool(strtobool(self.env.get("CREATE_TABLE") or "yes"))

    def _prefix(self) -> str:
        # As eventsourcing's factory names them: the application's name, lower case.
        return self.env.name.lower() or "stored"

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        name = f"{self._prefix()}_{purpose}"
        recorder = GuardedPostgresAggregateRecorder(self.datastore, name)
        if self._create_table():
            recorder.create_table()
        return recorder

    def application_recorder(self) -> ApplicationRecorder:
        recorder = GuardedPostgresApplicationRecorder(self.datastore, f"{self._prefix()}_events")
        if self._create_table():
            recorder.create_table()
        return recorder

    def tracking_recorder(self, tracking_recorder_class: Any = None) -> TrackingRecorder:
        raise NotImplementedError("the service tracks its views itself (views.py)")

    def process_recorder(self) -> ProcessRecorder:
        raise NotImplementedError("the service tracks its views itself (views.py)")

    def close(self) -> None:
        self.datastore.close()
