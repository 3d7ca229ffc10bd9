"""PostgreSQL: the library's recorders with bounded waits, every option of the URL, and writers
that do not queue behind one another."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import logging
import select
import threading
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import psycopg
from eventsourcing.persistence import (
    AggregateRecorder,
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
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
from psycopg.abc import PQGen
from psycopg.rows import tuple_row
from psycopg.sql import Identifier

from service.config import Settings
from service.persistence.errors import NoAnswer
from service.persistence.guard import (
    ROWS_PER_STATEMENT,
    _Guarded,
    _GuardedLog,
    _plain,
    guarded_write,
)

log = logging.getLogger("cantstop.store")

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


class DeadlineConnection(psycopg.Connection[Any]):
    """A pooled PostgreSQL connection whose every wait for the server ends after ``deadline``
    seconds (``CANTSTOP_PG_QUERY_TIMEOUT``; subclassed with it by ``bounded``).

    A server that stops answering without closing its connections (a stopped or frozen process,
    a network that drops packets) is otherwise waited for as long as the kernel keeps the
    connection, which for a stopped process is for ever: every request that reads or writes,
    and /healthz, hung (docs/performance.md, levers: the query deadline). psycopg waits for every
    statement, commit and rollback through ``wait``; given no timeout of its own, this one gives
    it the deadline (``wait`` takes a timeout since psycopg 3.3.6, which pyproject.toml asks
    for). On expiry the server is asked to cancel the statement (a locked or busy server stops
    it; a stopped one is given ``CANCEL_TIMEOUT``), the connection is closed (the pool replaces
    it) and ``NoAnswer`` is raised."""

    deadline: float | None = None

    @classmethod
    def bounded(cls, deadline: float) -> type[DeadlineConnection]:
        return type("DeadlineConnection", (cls,), {"deadline": deadline})

    # library hook: see service/hooks.py
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
    # library hook: see service/hooks.py
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
    # library hook: see service/hooks.py
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
    lock halved what two workers could write. The service's own insert (``_insert``) takes no
    such lock and sends no NOTIFY; the library's path, which does, is taken only for what the
    service never asks (an insert with tracking). Instead, every row records the transaction that
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

    # library hook: see service/hooks.py
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
        # library hook: see service/hooks.py
        pool = self.datastore.pool
        if len(events) <= PREPARED_ROWS and not pool.closed:
            # The pool's connection straight, not through the library's get_connection and the
            # pool's connection(): two generator context managers on the hottest path
            # (docs/performance.md, levers). Errors become the library's, as there; the pool
            # checks the connection when it is given back, as there.
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
        its prepared-statement manager and its adapters cost as much again as the call itself
        (docs/performance.md, levers). It is sent, and
        its answer waited for within the connection's deadline (``_exchange``), letting go of
        the GIL meanwhile, as psycopg does. ``conn`` is this thread's alone (the pool's); it is
        in autocommit, so the statement is its own transaction."""
        name, text = self._statement(len(events), snapshots, len(stored_snapshots), True)
        # library hook: see service/hooks.py
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

    # library hook: see service/hooks.py
    def create_table(self) -> None:
        with _unbounded():  # the ALTER below rewrites an existing table, once
            super().create_table()
            table = f'"{self.datastore.schema}"."{self.events_table_name}"'
            index = f'"{self.datastore.schema}"."{self.events_table_name}_tx"'
            with self.datastore.transaction(commit=True) as curs:
                # Run only when missing: IF NOT EXISTS still takes the table's lock first (the
                # ALTER's blocks reads too), so a host starting beside a long transaction on
                # the table would stall every request until it ends (deploy/README.md).
                curs.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass "
                    "AND attname = 'tx' AND NOT attisdropped) AS has_column, "
                    "to_regclass(%s) IS NOT NULL AS has_index",
                    (table, index),
                )
                found = curs.fetchone() or {}
                if not found.get("has_column"):
                    curs.execute(
                        f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS tx xid8 NOT NULL "
                        "DEFAULT pg_current_xact_id()"
                    )
                if not found.get("has_index"):
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
        # library hook: see service/hooks.py
        kwargs = pool.kwargs
        assert isinstance(kwargs, dict)
        kwargs.update(options)
        deadline = float(self.env.get("CANTSTOP_PG_QUERY_TIMEOUT") or Settings.pg_query_timeout)
        if deadline > 0:
            # library hook: see service/hooks.py
            pool.connection_class = DeadlineConnection.bounded(deadline)
