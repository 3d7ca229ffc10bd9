"""The event store: SQLite (the default) or PostgreSQL (production), and how it fails.

``persistence_env`` turns ``CANTSTOP_DATABASE_URL`` into the eventsourcing settings, naming the
factories below, which adapt the library's own:

- **Bounded waits.** eventsourcing retries a failed PostgreSQL operation ten times, each waiting for
  the connect timeout: a stopped database held every request for ~100 s. Here each operation is
  tried at most twice, a connection is waited for at most ``CONNECT_TIMEOUT`` seconds, and a
  process-wide circuit breaker answers at once (503 ``store_unavailable`` with ``Retry-After``) for
  ``COOLDOWN`` seconds after a failure, so waiting requests never pile up. The pool reconnects in
  the background, so service resumes within seconds of the database returning. A PostgreSQL
  server that stops answering without closing its connections is waited for at most
  ``CANTSTOP_PG_QUERY_TIMEOUT`` seconds per statement (``DeadlineConnection``).
- **Every connection option of the URL** (``?sslmode=require``, ``sslrootcert``,
  ``application_name``, a socket directory as ``?host=``) reaches libpq, as psycopg parses it.
- **SQLite**: the file is created readable by its owner only (it holds unrevealed seeds), in WAL
  mode, with ``synchronous`` = ``NORMAL`` by default (a commit survives the crash of any process;
  ``CANTSTOP_SQLITE_SYNCHRONOUS=full`` also survives a power cut, at a cost measured in
  docs/performance.md). A file cannot go down as a server can: its errors answer 503 too, but open
  no breaker (``cooldown`` 0).
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import hashlib
import json
import logging
import os
import select
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import psycopg
from eventsourcing.persistence import (
    AggregateRecorder,
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    Notification,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
)
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresFactory,
)
from eventsourcing.sqlite import (
    SQLiteAggregateRecorder,
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteFactory,
)
from psycopg.abc import PQGen
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row
from psycopg.sql import Identifier

from service.application.errors import ApplicationError
from service.config import ConfigError, Settings

log = logging.getLogger("cantstop.store")

CONNECT_TIMEOUT = 1  # seconds to wait for a pooled PostgreSQL connection (an integer)
LIBPQ_CONNECT_TIMEOUT = 2  # seconds for libpq to open one (its minimum is 2)
ATTEMPTS = 2
RETRY_PAUSE = 0.05
COOLDOWN = 1.0
# Seconds a SQLite statement waits for a lock another connection holds. Commits hold it for
# microseconds (WAL, synchronous=NORMAL; under FULL the processes' writers queue on a file
# lock first), so only a lock taken from outside (a backup tool's exclusive transaction) waits
# this long, and the request then gets its 503 within about 2 s, as promised.
SQLITE_LOCK_TIMEOUT = 2
URL_FIELDS = ("dbname", "host", "port", "user", "password")

T = TypeVar("T")


class StoreUnavailable(ApplicationError):
    """The event store cannot be reached (or is busy beyond its lock timeout): try again soon."""

    code = "store_unavailable"
    retry_after = 2


class CorruptGame(ApplicationError):
    """A game whose stored events cannot be read: reported with the first bad version."""

    code = "corrupt_game"


# ------------------------------------------------------------------------------ the breaker
class Breaker:
    """Opens for ``cooldown`` seconds after a failed store operation: meanwhile every operation
    fails at once instead of waiting for a database that just failed."""

    def __init__(self, cooldown: float = COOLDOWN) -> None:
        self.cooldown = cooldown
        self._open_until = 0.0
        self._lock = threading.Lock()
        self.last_error = ""

    @property
    def is_open(self) -> bool:
        return time.monotonic() < self._open_until

    def check(self) -> None:
        if self.is_open:
            raise StoreUnavailable(f"the event store is unavailable ({self.last_error}); retry")

    def trip(self, exc: BaseException) -> None:
        with self._lock:
            first = not self.last_error
            self.last_error = type(exc).__name__
            self._open_until = time.monotonic() + self.cooldown
        if first:
            log.warning("event store unavailable: %s: %s", type(exc).__name__, exc)

    def reset(self) -> None:
        if self.last_error:
            with self._lock:
                was, self.last_error = self.last_error, ""
            if was:
                log.info("event store available again")


BREAKER = Breaker()
TRANSIENT = (InterfaceError, OperationalError)


def guarded(call: Callable[[], T], *, breaker: Breaker = BREAKER) -> T:
    """Run one store operation: at most ``ATTEMPTS`` tries, then StoreUnavailable (503)."""
    breaker.check()
    for attempt in range(ATTEMPTS):
        try:
            result = call()
        except TRANSIENT as exc:
            # A server that did not answer in time is not asked again at once: that would
            # double the wait of every request while it is down.
            if attempt + 1 < ATTEMPTS and not breaker.is_open and not _no_answer(exc):
                time.sleep(RETRY_PAUSE)
                continue
            breaker.trip(exc)
            raise StoreUnavailable(
                f"the event store is unavailable ({type(exc).__name__}); retry"
            ) from exc
        except IntegrityError:
            raise
        except (DatabaseError, PersistenceError) as exc:  # e.g. not a database file at all
            log.error("event store error: %s: %s", type(exc).__name__, exc)
            raise StoreUnavailable(f"the event store failed ({type(exc).__name__})") from exc
        breaker.reset()
        return result
    raise AssertionError("unreachable")


class WriteHealth:
    """How a recorder's last write of events went, for /healthz: a store can go on answering
    reads while it refuses every write (a full disk), and a read is all the health check itself
    does."""

    def __init__(self) -> None:
        self.failed_at: float | None = None  # wall-clock seconds (time.time) of the first failure
        self.reason = ""  # the last failure's kind (the message, which may name hosts, is logged)

    def failed(self, exc: BaseException) -> None:
        self.reason = type(exc.__cause__ or exc).__name__
        if self.failed_at is None:
            self.failed_at = time.time()

    def succeeded(self) -> None:
        if self.failed_at is not None:
            self.failed_at, self.reason = None, ""


def guarded_write(call: Callable[[], T], *, breaker: Breaker, writes: WriteHealth) -> T:
    """``guarded`` for a write, whose outcome is kept in ``writes``. A conflict
    (IntegrityError) says the store works, and changes nothing there."""
    try:
        result = guarded(call, breaker=breaker)
    except StoreUnavailable as exc:
        writes.failed(exc)
        raise
    writes.succeeded()
    return result


def _plain(kwargs: dict[str, Any]) -> bool:
    """Whether an ``insert_events`` call asks for nothing but the events: the library's
    ``Application.save`` passes ``tracking=None`` (only a process application tracks), which
    must not send a game's creation down the library's slower path."""
    return not kwargs or kwargs == {"tracking": None}


def _no_answer(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it: the library wraps psycopg's errors) is ``NoAnswer``,
    or SQLite's lock that stayed taken for the whole lock timeout: asking again at once would
    only wait as long again."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, NoAnswer | WritersQueued):
            return True
        if isinstance(cause, sqlite3.OperationalError) and getattr(
            cause, "sqlite_errorname", ""
        ) in ("SQLITE_BUSY", "SQLITE_LOCKED"):
            return True
        cause = cause.__cause__
    return False


class _Guarded:
    """Recorder methods through ``guarded``, without eventsourcing's own ten retries."""

    breaker = BREAKER

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes = WriteHealth()

    def _inherited(self, name: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
        """The library's method ``name`` with these arguments, to call once: without
        eventsourcing.utils.retry's wrapper (its ten retries), where it has one."""
        inherited = getattr(super(), name)
        raw = getattr(inherited, "__wrapped__", None)
        if raw is not None:
            return lambda: raw(self, *args, **kwargs)
        return lambda: inherited(*args, **kwargs)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return guarded(self._inherited(name, *args, **kwargs), breaker=self.breaker)

    def insert_events(self, *args: Any, **kwargs: Any) -> Any:
        call = self._inherited("insert_events", *args, **kwargs)
        return guarded_write(call, breaker=self.breaker, writes=self.writes)

    def select_events(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("select_events", *args, **kwargs)


class _GuardedLog(_Guarded):
    def select_notifications(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("select_notifications", *args, **kwargs)

    def max_notification_id(self) -> Any:
        return self._call("max_notification_id")


# ------------------------------------------------------------------------------ PostgreSQL
CANCEL_TIMEOUT = 1.0  # seconds to ask the server to cancel a statement that took too long
# Inside this, statements have no deadline: creating the tables, whose migration (the ``tx``
# column added to an existing table of events) rewrites the table and takes what it takes.
_UNBOUNDED: contextvars.ContextVar[bool] = contextvars.ContextVar("unbounded", default=False)
R = TypeVar("R")


@contextlib.contextmanager
def _unbounded() -> Iterator[None]:
    token = _UNBOUNDED.set(True)
    try:
        yield
    finally:
        _UNBOUNDED.reset(token)


def _deadline_of(conn: Any) -> float | None:
    """How long ``conn`` waits for the server now: its deadline (``DeadlineConnection``), or no
    bound for another connection or inside ``_unbounded``."""
    return None if _UNBOUNDED.get() else getattr(conn, "deadline", None)


class WritersQueued(sqlite3.OperationalError):
    """This process's writers waited for one another past SQLite's lock timeout."""


class NoAnswer(psycopg.OperationalError):
    """The database did not answer within the deadline. The statement's outcome is unknown
    (a write may still commit); the connection was closed; ``guarded`` answers 503 without
    trying again at once."""


class DeadlineConnection(psycopg.Connection[Any]):
    """A pooled PostgreSQL connection whose every wait for the server ends after ``deadline``
    seconds (``CANTSTOP_PG_QUERY_TIMEOUT``; subclassed with it by ``bounded``).

    A server that stops answering without closing its connections (a stopped or frozen process,
    a network that drops packets) is otherwise waited for as long as the kernel keeps the
    connection, which for a stopped process is for ever: every request that reads or writes,
    and /healthz, hung (measured in docs/performance.md, the tenth set). psycopg waits for every
    statement, commit and rollback through ``wait``; given no timeout of its own, this one gives
    it the deadline (``wait`` takes a timeout since psycopg 3.3.6, which pyproject.toml asks
    for). On expiry the server is asked to cancel the statement (a locked or busy server stops
    it; a stopped one is given ``CANCEL_TIMEOUT``), the connection is closed (the pool replaces
    it) and ``NoAnswer`` is raised."""

    deadline: float | None = None

    @classmethod
    def bounded(cls, deadline: float) -> type[DeadlineConnection]:
        return type("DeadlineConnection", (cls,), {"deadline": deadline})

    def wait(self, gen: PQGen[R], interval: float = 0.1, timeout: float | None = None) -> R:
        deadline = _deadline_of(self)
        if timeout is not None or deadline is None:
            return super().wait(gen, interval, timeout)
        started = time.monotonic()
        try:
            return super().wait(gen, interval, deadline)
        except psycopg.OperationalError as exc:
            if time.monotonic() - started < deadline:
                raise  # the connection failed before the deadline: psycopg has judged it
            raise _give_up(self, deadline) from exc


def _give_up(conn: Any, deadline: float) -> NoAnswer:
    """Cancel ``conn``'s statement if the server still listens, close ``conn``: the error."""
    with contextlib.suppress(Exception):
        conn.cancel_safe(timeout=CANCEL_TIMEOUT)
    with contextlib.suppress(Exception):
        conn.close()
    log.warning("the database did not answer within %g s: connection closed", deadline)
    return NoAnswer(f"the database did not answer within {deadline:g} s")


def _exchange(conn: Any) -> Any:
    """The last result of the statement just sent on ``conn``'s libpq connection (what
    ``PQexec`` returns), waited for within ``conn``'s deadline (``DeadlineConnection``)."""
    pgconn = conn.pgconn
    deadline = _deadline_of(conn)
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


class GuardedPostgresAggregateRecorder(_Guarded, PostgresAggregateRecorder):
    def create_table(self) -> None:
        with _unbounded():
            super().create_table()


# Rows in one multi-row INSERT: actions have a few; an import's thousands go in chunks of this
# many, in one transaction (SQLite binds at most 32,766 values per statement, PostgreSQL 65,535).
ROWS_PER_STATEMENT = 200


# psycopg's errors as eventsourcing's PostgresDatastore.get_connection turns them into the
# library's (which ``guarded`` judges: retry, 503, conflict); the first that matches.
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


def _columns(event: Any) -> tuple[Any, ...]:
    return (event.originator_id, event.originator_version, event.topic, event.state)


def _values_insert(
    recorder: PostgresAggregateRecorder, rows: int, *, numbered: bool, first: int = 1
) -> str:
    """``INSERT INTO <recorder's table> (…) VALUES (…), …`` for ``rows`` stored events, with
    psycopg's ``%s`` placeholders or libpq's ``$1``, ``$2``, … from ``first``."""
    table = Identifier(recorder.datastore.schema, recorder.events_table_name).as_string()
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


class GuardedPostgresApplicationRecorder(_GuardedLog, PostgresApplicationRecorder):
    """Writers to different games do not queue behind one another.

    eventsourcing locks the whole events table on every insert (and sends a NOTIFY, which takes
    a global lock at commit), so that notification ids are committed in order and a reader of
    the log never passes over an id that commits later. Measured here (docs/performance.md), that
    lock halved what two workers could write. Instead, every row records the transaction that
    wrote it (column ``tx``), and ``LogReader`` reads the log by transaction: only rows of
    transactions that have all finished (below the snapshot's xmin), so none is passed over."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._statements: dict[tuple[int, str, int, bool], tuple[bytes, bytes]] = {}
        # The statements each pooled connection's session has prepared, by connection.
        self._prepared: weakref.WeakKeyDictionary[Any, set[bytes]] = weakref.WeakKeyDictionary()
        self._prepared_lock = threading.Lock()
        # libpq's parameters are built for the library's default column types (``_params``).
        assert self.datastore.originator_id_type == "uuid"

    def insert_events(self, stored_events: Any, **kwargs: Any) -> Any:
        if not _plain(kwargs) or not stored_events:
            return super().insert_events(stored_events, **kwargs)
        return guarded_write(
            lambda: self._insert(stored_events), breaker=self.breaker, writes=self.writes
        )

    def insert_with_snapshots(
        self, stored_events: Any, snapshots: AggregateRecorder, stored_snapshots: Any
    ) -> Any:
        """Insert events and the snapshots they make due in one statement (a data-modifying
        ``WITH``): all rows or none, one round trip. As on SQLite, a stray snapshot row at the
        same version is replaced."""
        assert isinstance(snapshots, PostgresAggregateRecorder)
        return guarded_write(
            lambda: self._insert(stored_events, (snapshots, stored_snapshots)),
            breaker=self.breaker,
            writes=self.writes,
        )

    def _insert(
        self, stored_events: Any, with_snapshots: tuple[Any, Any] | None = None
    ) -> list[int]:
        """The events in one statement on an autocommit connection: its own transaction, all
        rows or none, in one round trip. (The library's insert pipelines BEGIN, the INSERT, a
        sync and COMMIT: about eleven waits on the socket, and twice the CPU in this process;
        docs/performance.md.) The rows are plain ``VALUES`` (psycopg dumps uuid, integer, text
        and bytea in C), and the statement is text built once per shape, so psycopg parses it
        once and the server runs it prepared; a command's goes through libpq itself
        (``_execute_prepared``)."""
        snapshots, stored_snapshots = with_snapshots or (None, ())
        events = list(stored_events)
        pool = self.datastore.pool
        if len(events) <= PREPARED_ROWS and not pool.closed:
            # The pool's connection straight, not through the library's get_connection and the
            # pool's connection(): two generator context managers, 3% of an action's
            # instructions. Errors become the library's, as there; the pool checks the
            # connection when it is given back, as there.
            try:
                conn = pool.getconn()
                try:
                    assert conn.autocommit  # else putconn would roll the insert back
                    return self._execute_prepared(conn, events, snapshots, stored_snapshots)
                finally:
                    pool.putconn(conn)
            except psycopg.Error as exc:
                raise _library_error(exc) from exc
        # The library's way: a pool not opened yet (get_connection opens it), or more events
        # than a command makes (an import).
        with (
            self.datastore.get_connection() as conn,
            conn.cursor(row_factory=tuple_row) as curs,
        ):
            assert conn.autocommit
            if len(events) <= ROWS_PER_STATEMENT:
                return self._execute(curs, events, snapshots, stored_snapshots, prepare=True)
            # More rows than one statement may bind (an import): one transaction, in chunks.
            ids: list[int] = []
            with conn.transaction():
                for start in range(0, len(events), ROWS_PER_STATEMENT):
                    chunk = events[start : start + ROWS_PER_STATEMENT]
                    first = stored_snapshots if start == 0 else ()
                    ids += self._execute(curs, chunk, snapshots, first, prepare=False)
            return ids

    def _execute_prepared(
        self, conn: Any, events: list[Any], snapshots: Any, stored_snapshots: Any
    ) -> list[int]:
        """The statement through libpq itself, prepared once per session: psycopg's cursor,
        its prepared-statement manager and its adapters cost twice the CPU of the call (in a
        loop, ~63 against ~29 µs per single-row insert; docs/performance.md). It is sent, and
        its answer waited for within the connection's deadline (``_exchange``), letting go of
        the GIL meanwhile, as psycopg does. ``conn`` is this thread's alone (the pool's); it is
        in autocommit, so the statement is its own transaction."""
        name, text = self._statement(len(events), snapshots, len(stored_snapshots), True)
        pgconn = conn.pgconn
        with self._prepared_lock:
            prepared = self._prepared.setdefault(conn, set())
        params = _params(stored_snapshots) + _params(events)
        count = len(params) // 4
        for attempt in (1, 2):
            if name not in prepared:
                pgconn.send_prepare(name, text, _PARAM_TYPES * count)
                result = _exchange(conn)
                if result.status != psycopg.pq.ExecStatus.COMMAND_OK and (
                    result.error_field(psycopg.pq.DiagnosticField.SQLSTATE) != _SAME_STATEMENT
                ):
                    _raise_for(pgconn, result)
                prepared.add(name)
            pgconn.send_query_prepared(name, params, _PARAM_FORMATS * count)
            result = _exchange(conn)
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

    def _lock_table(self, curs: Any) -> None:
        pass

    def _notify_channel(self, curs: Any) -> None:
        pass  # nobody LISTENs: readers poll through LogReader

    def create_table(self) -> None:
        with _unbounded():  # the ALTER below rewrites an existing table, once
            super().create_table()
            table = f'"{self.datastore.schema}"."{self.events_table_name}"'
            with self.datastore.transaction(commit=True) as curs:
                curs.execute(
                    f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS tx xid8 NOT NULL "
                    "DEFAULT pg_current_xact_id()"
                )
                curs.execute(
                    f'CREATE INDEX IF NOT EXISTS "{self.events_table_name}_tx" ON {table} '
                    "(tx, notification_id)"
                )


class PostgresStore(PostgresFactory):
    """eventsourcing's PostgreSQL factory with bounded waits and every option of the URL."""

    aggregate_recorder_class = GuardedPostgresAggregateRecorder
    application_recorder_class = GuardedPostgresApplicationRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        options = json.loads(self.env.get("CANTSTOP_PG_OPTIONS") or "{}")
        # The pool has not connected yet: it opens on first use, with these.
        pool = self.datastore.pool
        kwargs = pool.kwargs
        assert isinstance(kwargs, dict)
        kwargs.update(options)
        deadline = float(self.env.get("CANTSTOP_PG_QUERY_TIMEOUT") or Settings.pg_query_timeout)
        if deadline > 0:
            pool.connection_class = DeadlineConnection.bounded(deadline)


# ------------------------------------------------------------------------------ SQLite
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
    take it back, it holds the queue. Measured under the bench's 8 clients, alternating:
    without the queue under NORMAL, 1,176 against 1,042 actions/s and 1.25 against 1.37 ms of
    CPU per action, the same p99; under FULL, the queue keeps p99 at 28-32 ms against 45-68 ms
    without it (docs/performance.md)."""

    synchronous = "NORMAL"
    writers_fd: int | None = None
    # Pages in the WAL before a commit copies them back into the database (SQLite's default is
    # 1,000). A checkpoint syncs the WAL and then the database file (two fsyncs, under NORMAL
    # too) and writes each page once however often the WAL holds it, and actions rewrite the
    # same few hot pages: with 10,000 (a WAL file of ~40 MB at 4 KiB pages), 2-4% less CPU per
    # action and 6-9% more actions/s, the trees served at once; the same instructions in
    # process: what it saves is the kernel's (docs/performance.md). Every connection sets it:
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


SQLITE_BREAKER = Breaker(cooldown=0)
# The synchronous settings whose commits wait for the disk: writers queue across processes.
QUEUED_SYNCHRONOUS = frozenset({"FULL", "EXTRA"})


class GuardedSQLiteAggregateRecorder(_Guarded, SQLiteAggregateRecorder):
    breaker = SQLITE_BREAKER


class GuardedSQLiteApplicationRecorder(_GuardedLog, SQLiteApplicationRecorder):
    breaker = SQLITE_BREAKER

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
        # managers cost ~3% of an action's instructions on the command path.
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


def persistence_env(settings: Settings, *, create_table: bool) -> dict[str, str]:
    """The eventsourcing settings for ``settings.database_url``."""
    url = settings.database_url
    create = "y" if create_table else "n"
    if url.startswith("sqlite:///"):
        # sqlite:///relative/path and sqlite:////absolute/path, as in SQLAlchemy.
        path = url[len("sqlite:///") :]
        if path != ":memory:":
            _owner_only(path)
        return {
            "PERSISTENCE_MODULE": f"{SQLiteStore.__module__}:{SQLiteStore.__qualname__}",
            "SQLITE_DBNAME": path if path != ":memory:" else "file::memory:?cache=shared",
            "SQLITE_LOCK_TIMEOUT": str(SQLITE_LOCK_TIMEOUT),
            "CANTSTOP_SQLITE_SYNCHRONOUS": settings.sqlite_synchronous,
            "CREATE_TABLE": create,
        }
    try:
        conninfo = conninfo_to_dict(url)
    except Exception as exc:  # psycopg's ProgrammingError: a URL libpq cannot parse
        raise ConfigError(
            f"CANTSTOP_DATABASE_URL is not a PostgreSQL URL libpq accepts: {exc}"
        ) from None
    options = {k: v for k, v in conninfo.items() if k not in URL_FIELDS}
    options.setdefault("connect_timeout", str(LIBPQ_CONNECT_TIMEOUT))
    return {
        "PERSISTENCE_MODULE": f"{PostgresStore.__module__}:{PostgresStore.__qualname__}",
        "POSTGRES_DBNAME": str(conninfo.get("dbname") or "postgres"),
        "POSTGRES_HOST": str(conninfo.get("host") or "127.0.0.1"),
        "POSTGRES_PORT": str(conninfo.get("port") or 5432),
        "POSTGRES_USER": str(conninfo.get("user") or "postgres"),
        "POSTGRES_PASSWORD": str(conninfo.get("password") or ""),
        "POSTGRES_POOL_SIZE": str(settings.pg_pool_size),
        "POSTGRES_MAX_OVERFLOW": str(settings.pg_max_overflow),
        "POSTGRES_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
        "POSTGRES_PRE_PING": "n",  # a dead pooled connection fails once; guarded() retries
        "CANTSTOP_PG_OPTIONS": json.dumps(options),
        "CANTSTOP_PG_QUERY_TIMEOUT": str(settings.pg_query_timeout),
        "CREATE_TABLE": create,
    }


def postgres_connect_error(settings: Settings) -> str | None:
    """Why one connection with the pool's own parameters fails, in libpq's words (the first
    line, such as 'database "x" does not exist'), or None when it succeeds or the store is not
    PostgreSQL. For a failure at start: the library's pool reports only that it timed out."""
    if not settings.database_url.startswith(("postgresql:", "postgres:")):
        return None
    env = persistence_env(settings, create_table=False)
    options = json.loads(env["CANTSTOP_PG_OPTIONS"])
    if env["POSTGRES_PASSWORD"]:
        options["password"] = env["POSTGRES_PASSWORD"]
    try:
        with psycopg.connect(
            dbname=env["POSTGRES_DBNAME"],
            host=env["POSTGRES_HOST"],
            port=env["POSTGRES_PORT"],
            user=env["POSTGRES_USER"],
            **options,
        ):
            return None
    except psycopg.Error as exc:
        lines = str(exc).strip().splitlines()
        return lines[0] if lines else type(exc).__name__


# ------------------------------------------------------------------------------ commitments
class SeedCommitments:
    """Seeds drawn before a game exists, known to clients only by their commitment (contract 1.1:
    Fairness that no one can grind). Kept in a table of their own beside the events: a row is
    deleted when a game takes it (atomically: ``DELETE … RETURNING``, so two games can never share
    one) or once it has expired, and the seed moves into the game's vault."""

    TABLE = "cantstop_seed_commitments"

    def __init__(self, datastore: Any, dialect: str) -> None:
        self.datastore = datastore
        self.mark = "?" if dialect == "sqlite" else "%s"

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        def run() -> Any:
            try:
                with self.datastore.transaction(commit=True) as cursor:
                    cursor.execute(sql.replace("?", self.mark), params)
                    return cursor.fetchone() if "RETURNING" in sql else None
            except (PersistenceError, IntegrityError):
                raise
            except Exception as exc:  # sqlite3 / psycopg errors, as the recorders map them
                raise OperationalError(str(exc)) from exc

        return guarded(run, breaker=SQLITE_BREAKER if self.mark == "?" else BREAKER)

    def create_table(self) -> None:
        self._execute(
            f"CREATE TABLE IF NOT EXISTS {self.TABLE} "
            "(commitment CHAR(64) PRIMARY KEY, seed CHAR(64) NOT NULL, "
            "created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL)"
        )

    def put(self, commitment: str, seed: str, created_at: float, expires_at: float) -> None:
        self._execute(
            f"INSERT INTO {self.TABLE} (commitment, seed, created_at, expires_at) "
            "VALUES (?, ?, ?, ?)",
            (commitment, seed, created_at, expires_at),
        )

    def take(self, commitment: str, now: float) -> tuple[str, float] | None:
        """The seed and the time it was committed, removed; None if unknown, used or expired."""
        row = self._execute(
            f"DELETE FROM {self.TABLE} WHERE commitment = ? AND expires_at > ? "
            "RETURNING seed, created_at",
            (commitment, now),
        )
        if row is None:
            return None
        return str(row["seed"]), float(row["created_at"])

    def purge(self, now: float) -> None:
        self._execute(f"DELETE FROM {self.TABLE} WHERE expires_at <= ?", (now,))


# ------------------------------------------------------------------------------ the log
class Head(NamedTuple):
    """A notification without its event's state: where it is in the log, whose, and what."""

    id: int
    originator_id: uuid.UUID
    originator_version: int
    topic: str


class LogReader:
    """Follows the application's notification log (every event of every game) in commit order,
    so that a projection sees every event exactly once.

    SQLite writes one transaction at a time, so notification ids are committed in order and the
    position is simply the last id read. PostgreSQL commits concurrent inserts in any order, so
    there the reader moves through windows of *finished* transactions: it reads the rows written
    by transactions from its watermark up to the current snapshot's xmin (every transaction below
    it has committed or aborted, so no row can still appear there), then moves the watermark."""

    def __init__(self, recorder: Any, topics: tuple[str, ...] = ()) -> None:
        self.recorder = recorder
        self.topics = list(topics)
        self.postgres = isinstance(recorder, PostgresApplicationRecorder)
        self.position = 0  # SQLite: the last id read; PostgreSQL: the transaction watermark
        self._window: int | None = None  # PostgreSQL: the xmin of the window being read
        self._after = 0  # PostgreSQL: the last id read inside the window

    def read(self, limit: int) -> list[Notification]:
        """The next notifications (at most ``limit``); fewer means the log is read to its end."""
        if not self.postgres:
            found = self.recorder.select_notifications(
                start=self.position + 1, limit=limit, topics=self.topics
            )
            if found:
                self.position = found[-1].id
            return list(found)
        return guarded(lambda: self._read_postgres(limit))

    def heads(self, limit: int) -> list[Head]:
        """As ``read``, without the events' states: for a follower that needs only whose event
        each is, its version and its topic (the scheduler, the live streams' store poller), the
        states are neither copied nor wrapped."""
        if self.postgres:
            return guarded(lambda: self._read_postgres(limit, heads=True))
        found = guarded(lambda: self._heads_sqlite(limit))
        if found:
            self.position = found[-1].id
        return found

    def _heads_sqlite(self, limit: int) -> list[Head]:
        table = self.recorder.events_table_name
        statement = f"SELECT rowid, originator_id, originator_version, topic FROM {table} "
        statement += "WHERE rowid > ? "
        if self.topics:
            statement += f"AND topic IN ({','.join('?' * len(self.topics))}) "
        statement += "ORDER BY rowid LIMIT ?"
        with self.recorder.datastore.transaction(commit=False) as cursor:
            cursor.execute(statement, [self.position, *self.topics, limit])
            rows = cursor.fetchall()
        ids: dict[str, uuid.UUID] = {}  # each game's hex parsed once a page, not once a row
        return [
            Head(
                row[0], ids.get(row[1]) or ids.setdefault(row[1], uuid.UUID(row[1])), row[2], row[3]
            )
            for row in rows
        ]

    def _read_postgres(self, limit: int, *, heads: bool = False) -> list[Any]:
        table = f'"{self.recorder.datastore.schema}"."{self.recorder.events_table_name}"'
        with self.recorder.datastore.transaction(commit=False) as curs:
            if self._window is None:
                curs.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS x")
                self._window, self._after = int(curs.fetchone()["x"]), 0
            columns = (
                "notification_id, originator_id, originator_version, topic"
                if heads
                else "notification_id, originator_id, originator_version, topic, state"
            )
            query = (
                f"SELECT {columns} "
                f"FROM {table} WHERE tx >= %s::text::xid8 AND tx < %s::text::xid8 "
                "AND notification_id > %s"
            )
            params: list[Any] = [self.position, self._window, self._after]
            if self.topics:
                query += " AND topic = ANY(%s)"
                params.append(self.topics)
            curs.execute(query + " ORDER BY notification_id LIMIT %s", [*params, limit])
            rows = curs.fetchall()
        found: list[Any] = (
            [
                Head(
                    row["notification_id"],
                    row["originator_id"],
                    row["originator_version"],
                    row["topic"],
                )
                for row in rows
            ]
            if heads
            else [
                Notification(
                    id=row["notification_id"],
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in rows
            ]
        )
        if len(found) < limit:  # the window is read: the next read starts a new one
            self.position, self._window = self._window, None
        else:
            self._after = found[-1].id
        return found

    def skip_to_end(self) -> None:
        """From now on, only what is recorded from here on."""
        if not self.postgres:
            self.position = self.recorder.max_notification_id() or 0
            return

        def xmin() -> int:
            with self.recorder.datastore.transaction(commit=False) as curs:
                curs.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS x")
                return int(curs.fetchone()["x"])

        self.position, self._window = guarded(xmin), None
