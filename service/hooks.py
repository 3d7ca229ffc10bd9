"""Every private part of a library that the service overrides, replaces or reaches into, with why.

Pure data, importing nothing (the bottom of the service). tests/test_library_hooks.py checks each
hook against the installed library: the attribute exists, each callable still has the signature
recorded here, the functions whose behaviour the service relies on still have the source recorded
here (a SHA-256 of ``inspect.getsource``), and that source still says what ``contains`` quotes.
An upgrade that moves or edits any of them fails that test, naming the hook, the version
installed, where the service uses it and what to re-check. When it does: re-read the library's
code, check the use still holds (and run tests/test_fast_paths.py for the fast paths), then record
the new values the failure prints. pyproject.toml gives every library named here an upper bound.

A hook's ``path`` is the library's attribute, dotted from its module; ``instance`` marks one
that only instances have (set in ``__init__``: a check quotes the assignment). ``used_in``
names ``module:qualname`` places of the service. ``proven_by`` names the tests showing that a
fast path stores exactly what the library's own path stores.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """What must still hold of one library object (``target``, dotted from its module)."""

    target: str
    signature: str | None = None  # str(inspect.signature(target)) as recorded
    sha256: str | None = None  # of inspect.getsource(target), as recorded
    contains: tuple[str, ...] = ()  # text its source must still contain


@dataclass(frozen=True)
class Hook:
    path: str
    distribution: str  # the package that ships it (as pyproject.toml names it)
    used_in: tuple[str, ...]
    why: str
    recheck: str
    checks: tuple[Check, ...]
    instance: bool = False
    proven_by: tuple[str, ...] = ()


PG = "service.persistence.postgres"
SQ = "service.persistence.sqlite"
GU = "service.gunicorn_settings"
FAST = "tests/test_fast_paths.py"

HOOKS: tuple[Hook, ...] = (
    # ---------------------------------------------------------------- eventsourcing: the guard
    Hook(
        path="eventsourcing.utils.retry",
        distribution="eventsourcing",
        used_in=("service.persistence.guard:_Guarded._inherited",),
        why=(
            "The library retries a failed PostgreSQL operation ten times, 0.2 s apart, each "
            "waiting for the connect timeout: a stopped database held every request ~100 s. The "
            "recorders call the undecorated method (``__wrapped__``, set by functools.wraps) "
            "once per try through ``guarded``: two tries, then 503, and a breaker."
        ),
        recheck=(
            "that retry still wraps with functools.wraps (``__wrapped__`` is the undecorated "
            "function, taking self first), and which recorder methods it decorates"
        ),
        checks=(
            Check(
                "eventsourcing.utils.retry",
                signature=(
                    "(exc: 'type[Exception] | tuple[type[Exception]"
                    ", ...]' = <class 'Exception'>, max_attempts: 'int' = 1"
                    ", wait: 'float' = 0, stall: 'float' = 0) -> 'Callable[[Any]"
                    ", Any]'"
                ),
                sha256="bd2bcbd7bb27acd4545523828eb5ce6dcc0c8c46b9951ee629aef00ca93a4e88",
                contains=("@wraps(func)",),
            ),
            Check(
                "eventsourcing.postgres.PostgresAggregateRecorder.insert_events.__wrapped__",
                signature=(
                    "(self, stored_events: 'Sequence[StoredEvent]'"
                    ", **kwargs: 'Any') -> 'Sequence[int] | None'"
                ),
            ),
            Check(
                "eventsourcing.postgres.PostgresAggregateRecorder.select_events.__wrapped__",
                signature=(
                    "(self, originator_id: 'UUID | str', *"
                    ", gt: 'int | None' = None, lte: 'int | None' = None"
                    ", desc: 'bool' = False"
                    ", limit: 'int | None' = None) -> 'Sequence[StoredEvent]'"
                ),
            ),
            Check(
                "eventsourcing.postgres.PostgresApplicationRecorder.insert_events.__wrapped__",
                signature=(
                    "(self, stored_events: 'Sequence[StoredEvent]'"
                    ", **kwargs: 'Any') -> 'Sequence[int] | None'"
                ),
            ),
            Check(
                "eventsourcing.postgres.PostgresApplicationRecorder.select_notifications.__wrapped__",
                signature=(
                    "(self, start: 'int | None', limit: 'int'"
                    ", stop: 'int | None' = None, topics: 'Sequence[str]' = (), *"
                    ", inclusive_of_start: 'bool' = True) -> 'Sequence[Notification]'"
                ),
            ),
            Check(
                "eventsourcing.postgres.PostgresApplicationRecorder.max_notification_id.__wrapped__",
                signature="(self) -> 'int | None'",
            ),
        ),
    ),
    # ----------------------------------------------------------- eventsourcing: PostgreSQL
    Hook(
        path="eventsourcing.postgres.PostgresApplicationRecorder.insert_events",
        distribution="eventsourcing",
        used_in=(
            f"{PG}:GuardedPostgresApplicationRecorder.insert_events",
            f"{PG}:GuardedPostgresApplicationRecorder._insert",
            f"{PG}:GuardedPostgresApplicationRecorder._execute_prepared",
            f"{PG}:GuardedPostgresApplicationRecorder._execute",
            f"{PG}:_values_insert",
        ),
        why=(
            "Replaced by a fast path writing the library's table by hand: one INSERT ... "
            "RETURNING notification_id on an autocommit connection (~0.7 -> ~0.33 ms per "
            "insert), plain VALUES built once per shape (~185 -> ~130 us), a command's through "
            "libpq prepared once per session (instr. -7.4%); docs/performance.md, levers."
        ),
        recheck=(
            "that the events table's columns, key and notification id are still those "
            "_values_insert writes, and that the library's insert stores nothing more"
        ),
        checks=(
            Check(
                "eventsourcing.postgres.PostgresApplicationRecorder.insert_events",
                signature=(
                    "(self, stored_events: 'Sequence[StoredEvent]'"
                    ", **kwargs: 'Any') -> 'Sequence[int] | None'"
                ),
                sha256="f1a98da0239e3ea7462c6b725cd66d0c932fc533814c92e04bf9802ac81ebddf",
            ),
            Check(
                "eventsourcing.postgres.PostgresApplicationRecorder.__init__",
                sha256="db36fb3de49a5292adbe422c79bfc1ef22658df8f60915befa85d16949b3fa9e",
                contains=("notification_id bigserial", 'SQL(" RETURNING notification_id")'),
            ),
            Check(
                "eventsourcing.postgres.PostgresAggregateRecorder.__init__",
                sha256="78adbde8e22843caf9a353dacbe9ebfa3f9e047e6a7cce05d50067d510e1a4a7",
                contains=("originator_id, originator_version, topic, state",),
            ),
        ),
        proven_by=(f"{FAST}::test_postgres_insert_stores_what_the_library_stores",),
    ),
    Hook(
        path="eventsourcing.postgres.PostgresAggregateRecorder.insert_events",
        distribution="eventsourcing",
        used_in=(
            f"{PG}:GuardedPostgresApplicationRecorder.insert_with_snapshots",
            f"{PG}:GuardedPostgresApplicationRecorder._text",
        ),
        why=(
            "The snapshots an action makes due go in the same statement as its events (a "
            "data-modifying WITH ... ON CONFLICT (originator_id, originator_version)), not "
            "through the snapshot recorder's insert: all rows or none, one round trip."
        ),
        recheck="that the snapshots table's columns and primary key are still those _text writes",
        checks=(
            Check(
                "eventsourcing.postgres.PostgresAggregateRecorder.insert_events",
                signature=(
                    "(self, stored_events: 'Sequence[StoredEvent]'"
                    ", **kwargs: 'Any') -> 'Sequence[int] | None'"
                ),
                sha256="fa7b8ee510243733cf6a6fb8e138cae23c2c83fa738e64731741280707e64e99",
            ),
            Check(
                "eventsourcing.postgres.PostgresAggregateRecorder._insert_stored_events",
                sha256="80327aa859e4cc55ebc5f2756a31f9fb26f36ef29c7d5a99c0061b9a0e2a6135",
            ),
            Check(
                "eventsourcing.postgres.PostgresAggregateRecorder.__init__",
                sha256="78adbde8e22843caf9a353dacbe9ebfa3f9e047e6a7cce05d50067d510e1a4a7",
                contains=("(originator_id, originator_version))",),
            ),
        ),
        proven_by=(f"{FAST}::test_postgres_insert_with_snapshots_stores_what_the_library_stores",),
    ),
    Hook(
        path="eventsourcing.postgres.PostgresDatastore.get_connection",
        distribution="eventsourcing",
        used_in=(f"{PG}:GuardedPostgresApplicationRecorder._insert", f"{PG}:_LIBRARY_ERRORS"),
        why=(
            "Bypassed on the command path: the pool's connection is taken straight (instr. "
            "-2.8%, docs/performance.md), and psycopg's errors are mapped as this method maps "
            "them (_LIBRARY_ERRORS)."
        ),
        recheck=(
            "that it does nothing more per connection than open the pool and register the "
            "composite types (unused by the fast path), and that _LIBRARY_ERRORS maps psycopg's "
            "errors as it does"
        ),
        checks=(
            Check(
                "eventsourcing.postgres.PostgresDatastore.get_connection",
                signature="(self) -> 'Iterator[Connection[DictRow]]'",
                sha256="8837a84cf3a8492e1611e2c1c1b9042fd7655fe4365a11a4fe5a9e5a7badf7d4",
            ),
        ),
    ),
    Hook(
        path="eventsourcing.postgres.PostgresDatastore.pool",
        distribution="eventsourcing",
        instance=True,
        used_in=(
            f"{PG}:PostgresStore.__init__",
            f"{PG}:GuardedPostgresApplicationRecorder._insert",
        ),
        why=(
            "The factory builds a psycopg_pool pool that is not opened yet; PostgresStore gives "
            "it the URL's libpq options and the connection class with the query deadline before "
            "it first connects, and the fast path takes its connections (getconn, putconn)."
        ),
        recheck="that the pool is still built closed (open=False), in autocommit, with dict rows",
        checks=(
            Check(
                "eventsourcing.postgres.PostgresDatastore.__init__",
                signature=(
                    "(self, dbname: 'str', host: 'str', port: 'str | int'"
                    ", user: 'str', password: 'str', *"
                    ", connect_timeout: 'float' = 5.0"
                    ", idle_in_transaction_session_timeout: 'float' = 0"
                    ", pool_size: 'int' = 1, max_overflow: 'int' = 0"
                    ", max_waiting: 'int' = 0, conn_max_age: 'float' = 3600.0"
                    ", pre_ping: 'bool' = False, lock_timeout: 'int' = 0"
                    ", schema: 'str' = ''"
                    ", pool_open_timeout: 'float | None' = None"
                    ", get_password_func: 'Callable[[], str] | None' = None"
                    ", single_row_tracking: 'bool' = True"
                    ", originator_id_type: \"Literal['uuid', 'text']\" = 'uuid'"
                    ", enable_db_functions: 'bool' = False)"
                ),
                sha256="e68d5fed5a405ca0bb648b3029c8ed36968a90610bbab9528ba36dd39aa66111",
                contains=("self.pool = ConnectionPool(", "open=False", '"row_factory": dict_row'),
            ),
            Check(
                "eventsourcing.postgres.PostgresDatastore.after_connect_func",
                sha256="1d3fb7c29d1a3190a53806917fc8058fb68229893f7bbeaba13f7fec46b32933",
                contains=("conn.autocommit = True",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.postgres.PostgresDatastore.schema",
        distribution="eventsourcing",
        instance=True,
        used_in=(
            f"{PG}:_values_insert",
            f"{PG}:GuardedPostgresApplicationRecorder.create_table",
            "service.persistence.log:LogReader",
        ),
        why="The schema of the library's tables, for the statements the service writes itself.",
        recheck="that the tables are still created in this schema",
        checks=(
            Check(
                "eventsourcing.postgres.PostgresDatastore.__init__",
                sha256="e68d5fed5a405ca0bb648b3029c8ed36968a90610bbab9528ba36dd39aa66111",
                contains=('self.schema = schema.strip() or "public"',),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.postgres.PostgresDatastore.originator_id_type",
        distribution="eventsourcing",
        instance=True,
        used_in=(f"{PG}:GuardedPostgresApplicationRecorder.__init__", f"{PG}:_params"),
        why="libpq's parameters send the originator id as a binary uuid: asserted to be 'uuid'.",
        recheck="that the column type still follows this setting",
        checks=(
            Check(
                "eventsourcing.postgres.PostgresDatastore.__init__",
                sha256="e68d5fed5a405ca0bb648b3029c8ed36968a90610bbab9528ba36dd39aa66111",
                contains=("self.originator_id_type = originator_id_type.lower()",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.postgres.PostgresAggregateRecorder.events_table_name",
        distribution="eventsourcing",
        instance=True,
        used_in=(
            f"{PG}:_values_insert",
            f"{PG}:GuardedPostgresApplicationRecorder._statement",
            f"{PG}:GuardedPostgresApplicationRecorder.create_table",
            "service.persistence.log:LogReader",
        ),
        why="The name of the library's table, for the statements the service writes itself.",
        recheck="that it is still the table's name, unqualified",
        checks=(
            Check(
                "eventsourcing.postgres.PostgresAggregateRecorder.__init__",
                sha256="78adbde8e22843caf9a353dacbe9ebfa3f9e047e6a7cce05d50067d510e1a4a7",
                contains=("self.events_table_name = events_table_name",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.postgres.PostgresDatastore.transaction",
        distribution="eventsourcing",
        used_in=(
            f"{PG}:GuardedPostgresApplicationRecorder.create_table",
            "service.persistence.log:LogReader",
            "service.persistence.commitments:SeedCommitments._execute",
            "service.persistence.views:Views",
        ),
        why=(
            "A cursor in a transaction on a pooled connection, rows by column name: the "
            "service's own statements (the tx column, the log by transaction, seed commitments)."
        ),
        recheck="that it still yields a dict-row cursor and commits only when asked",
        checks=(
            Check(
                "eventsourcing.postgres.PostgresDatastore.transaction",
                signature="(self, *, commit: 'bool' = False) -> 'Iterator[Cursor[DictRow]]'",
                sha256="d098b7d088420577be479d496a6f7b9e75047b83d06f8b7078bab9c641a803ef",
                contains=("force_rollback=not commit",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.postgres.PostgresApplicationRecorder.create_table",
        distribution="eventsourcing",
        used_in=(
            f"{PG}:GuardedPostgresApplicationRecorder.create_table",
            f"{PG}:GuardedPostgresAggregateRecorder.create_table",
        ),
        why=(
            "Extended: the events table gets a column tx (the writing transaction, by default) "
            "and an index (tx, notification_id), which LogReader reads the log by, since the "
            "service's insert takes no table lock; creation runs without the query deadline "
            "(the ALTER rewrites an existing table once)."
        ),
        recheck=(
            "that the library's table has no column tx of its own and names its insert's columns"
        ),
        checks=(
            Check(
                "eventsourcing.postgres.PostgresRecorder.create_table",
                signature="(self) -> 'None'",
                sha256="112d77b968e2da3c4292b87a61c0d25981d835aee32aa18853a560c6527ff953",
            ),
            Check(
                "eventsourcing.postgres.PostgresApplicationRecorder.__init__",
                sha256="db36fb3de49a5292adbe422c79bfc1ef22658df8f60915befa85d16949b3fa9e",
            ),
        ),
    ),
    # ----------------------------------------------------------------- psycopg, psycopg_pool
    Hook(
        path="psycopg_pool.ConnectionPool.kwargs",
        distribution="psycopg-pool",
        instance=True,
        used_in=(f"{PG}:PostgresStore.__init__",),
        why=(
            "The URL's libpq options (sslmode, sslrootcert, a socket directory, ...) are added to "
            "the keyword arguments of the library's pool before it first connects: the library "
            "passes only dbname, host, port, user and password."
        ),
        recheck="that the pool still reads self.kwargs at each connect, as a dict",
        checks=(
            Check(
                "psycopg_pool.ConnectionPool.__init__",
                signature=(
                    "(self, conninfo: 'ConninfoParam' = '', *"
                    ", connection_class: 'type[CT]' = <class 'psycopg.Connection'>"
                    ", kwargs: 'KwargsParam | None' = None, min_size: 'int' = 4"
                    ", max_size: 'int | None' = None, open: 'bool | None' = None"
                    ", configure: 'ConnectionCB[CT] | None' = None"
                    ", check: 'ConnectionCB[CT] | None' = None"
                    ", reset: 'ConnectionCB[CT] | None' = None"
                    ", name: 'str | None' = None, close_returns: 'bool' = False"
                    ", timeout: 'float' = 30.0, max_waiting: 'int' = 0"
                    ", max_lifetime: 'float' = 3600.0, max_idle: 'float' = 600.0"
                    ", reconnect_timeout: 'float' = 300.0"
                    ", reconnect_failed: 'ConnectFailedCB | None' = None"
                    ", num_workers: 'int' = 3)"
                ),
                contains=("self.kwargs = kwargs",),
            ),
            Check(
                "psycopg_pool.ConnectionPool._connect",
                signature="(self, timeout: 'float | None' = None) -> 'CT'",
                sha256="a592be31ab629db362def47e1c362cfca088fbd3243cc6ff763e3567f116f1ff",
                contains=("self._resolve_kwargs()",),
            ),
        ),
    ),
    Hook(
        path="psycopg_pool.ConnectionPool.connection_class",
        distribution="psycopg-pool",
        instance=True,
        used_in=(f"{PG}:PostgresStore.__init__", f"{PG}:DeadlineConnection.bounded"),
        why=(
            "Replaced before the pool first connects by DeadlineConnection (the query deadline, "
            "CANTSTOP_PG_QUERY_TIMEOUT): the library's factory offers no way to choose it."
        ),
        recheck="that the pool still connects through self.connection_class.connect",
        checks=(
            Check(
                "psycopg_pool.ConnectionPool.__init__",
                contains=("self.connection_class = connection_class",),
            ),
            Check(
                "psycopg_pool.ConnectionPool._connect",
                sha256="a592be31ab629db362def47e1c362cfca088fbd3243cc6ff763e3567f116f1ff",
                contains=("self.connection_class.connect(",),
            ),
        ),
    ),
    Hook(
        path="psycopg.Connection.wait",
        distribution="psycopg",
        used_in=(f"{PG}:DeadlineConnection.wait",),
        why=(
            "Overridden to give every wait for the server the query deadline: a server that "
            "stops answering without closing its connections hung every request past 140 s. "
            "Costs 1.013, instr. +1.1% (docs/performance.md, levers)."
        ),
        recheck=(
            "that every statement, commit and rollback still waits through Connection.wait, "
            "and that an expired timeout is still an OperationalError"
        ),
        checks=(
            Check(
                "psycopg.Connection.wait",
                signature=(
                    "(self, gen: 'PQGen[RV]', interval: 'float' = 0.1"
                    ", timeout: 'float | None' = None) -> 'RV'"
                ),
                sha256="602ce5e47fca2ec9e9f6e536e994c9cd1c2cbe7d79c9cb52fe910c25ccd56726",
            ),
            Check(
                "psycopg.Cursor.execute",
                sha256="52457036956736cb79790c593fe55f59697ec42cde9489034beac9524feb1d82",
                contains=("self._conn.wait(",),
            ),
            Check(
                "psycopg.errors._WaitTimeout", contains=("class _WaitTimeout(OperationalError):",)
            ),
        ),
    ),
    Hook(
        path="psycopg.Connection.pgconn",
        distribution="psycopg",
        instance=True,
        used_in=(
            f"{PG}:GuardedPostgresApplicationRecorder._execute_prepared",
            f"{PG}:_exchange",
            f"{PG}:_raise_for",
        ),
        why=(
            "A command's insert goes through libpq itself (psycopg.pq), prepared once per "
            "session: psycopg's cursor, prepared-statement manager and adapters cost twice the "
            "CPU of the call (~63 against ~29 us per single-row insert); 0.909, instr. -7.4% "
            "(docs/performance.md, levers)."
        ),
        recheck=(
            "psycopg.pq's PGconn and PGresult methods used by _execute_prepared, _exchange and "
            "_raise_for (send_prepare, send_query_prepared, is_busy, consume_input, "
            "get_result, socket, status; status, error_field, error_message, ntuples, get_value)"
        ),
        checks=(
            Check(
                "psycopg._connection_base.BaseConnection.__init__",
                contains=("self.pgconn = pgconn",),
            ),
            Check(
                "psycopg.pq.abc.PGconn.send_prepare",
                signature=(
                    "(self, name: 'bytes', command: 'bytes'"
                    ", param_types: 'Sequence[int] | None' = None) -> 'None'"
                ),
            ),
            Check(
                "psycopg.pq.abc.PGconn.send_query_prepared",
                signature=(
                    "(self, name: 'bytes'"
                    ", param_values: 'Sequence[Buffer | None] | None'"
                    ", param_formats: 'Sequence[int] | None' = None"
                    ", result_format: 'int' = <Format.TEXT: 0>) -> 'None'"
                ),
            ),
            Check("psycopg.pq.abc.PGconn.is_busy", signature="(self) -> 'int'"),
            Check("psycopg.pq.abc.PGconn.consume_input", signature="(self) -> 'None'"),
            Check("psycopg.pq.abc.PGconn.get_result", signature="(self) -> 'PGresult | None'"),
            Check("psycopg.pq.abc.PGconn.socket"),
            Check("psycopg.pq.abc.PGconn.status"),
            Check("psycopg.pq.abc.PGresult.status"),
            Check(
                "psycopg.pq.abc.PGresult.error_field",
                signature="(self, fieldcode: 'int') -> 'bytes | None'",
            ),
            Check("psycopg.pq.abc.PGresult.error_message"),
            Check("psycopg.pq.abc.PGresult.ntuples"),
            Check(
                "psycopg.pq.abc.PGresult.get_value",
                signature="(self, row_number: 'int', column_number: 'int') -> 'bytes | None'",
            ),
            Check("psycopg.pq.PGconn.send_prepare"),
            Check("psycopg.pq.PGconn.send_query_prepared"),
            Check("psycopg.pq.PGconn.is_busy"),
            Check("psycopg.pq.PGconn.consume_input"),
            Check("psycopg.pq.PGconn.get_result"),
            Check("psycopg.pq.PGconn.socket"),
            Check("psycopg.pq.PGresult.error_field"),
            Check("psycopg.pq.PGresult.get_value"),
        ),
        proven_by=(f"{FAST}::test_postgres_insert_stores_what_the_library_stores",),
    ),
    # -------------------------------------------------------------- eventsourcing: SQLite
    Hook(
        path="eventsourcing.sqlite.SQLiteDatastore.pool",
        distribution="eventsourcing",
        instance=True,
        used_in=(f"{SQ}:SQLiteStore.__init__",),
        why=(
            "The library's pool has no hook for pragmas or a writers' lock: SQLiteStore replaces "
            "it, before it connects, by _SQLitePool (synchronous, wal_autocheckpoint 10,000: "
            "0.961 and 0.982; the writers' flock under FULL; docs/performance.md, levers)."
        ),
        recheck=(
            "that the factory still builds the pool from db_name and lock_timeout only, that "
            "nothing connects before SQLiteStore replaces it, and that the datastore reads "
            "self.pool at each use"
        ),
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteDatastore.__init__",
                sha256="6f70a3c7d7e9d8ae4d0ca38acb51a89efc1a64a14b00392272cb22c04b7b48ef",
                contains=("self.pool = SQLiteConnectionPool(",),
            ),
            Check(
                "eventsourcing.sqlite.SQLiteDatastore.get_connection",
                sha256="539e5e7632ab275805b088de832a80206ad33978767f7eb03ecd1d36eeb0404a",
                contains=(
                    "self.pool.get_connection(is_writer=commit)",
                    "self.pool.put_connection(conn)",
                ),
            ),
            Check(
                "eventsourcing.sqlite.SQLiteFactory.__init__",
                sha256="31a496bb9dab899aae17d9e347683c19449f66f8eb2a434e0267f00f40d66b67",
            ),
            Check(
                "eventsourcing.sqlite.SQLiteConnectionPool.__init__",
                signature=(
                    "(self, *, db_name: 'str', lock_timeout: 'int | None' = None"
                    ", pool_size: 'int' = 5, max_overflow: 'int' = 10"
                    ", pool_timeout: 'float' = 5.0"
                    ", max_age: 'float | None' = None, pre_ping: 'bool' = False)"
                ),
                sha256="1184ff2a58d323c801ef9805804a2f2473403c60d83640cda7b3390c32924144",
            ),
        ),
    ),
    Hook(
        path="eventsourcing.sqlite.SQLiteConnectionPool._create_connection",
        distribution="eventsourcing",
        used_in=(f"{SQ}:_SQLitePool._create_connection",),
        why=(
            "Overridden to set the pragmas (synchronous, wal_autocheckpoint) on every pooled "
            "connection: the library sets WAL and nothing else."
        ),
        recheck=(
            "that it is still where every pooled connection is made, in autocommit, rows by name"
        ),
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteConnectionPool._create_connection",
                signature="(self) -> 'SQLiteConnection'",
                sha256="4635cb356e9ae4ec242c34f322390bc2fa6057f53a2d3e1a1eb70bc114921101",
                contains=("c.row_factory = sqlite3.Row",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.persistence.ConnectionPool.get_connection",
        distribution="eventsourcing",
        used_in=(f"{SQ}:_SQLitePool.get_connection",),
        why=(
            "Overridden so that the library's own writes (table creation, the snapshots' "
            "recorder) take the same write lock as the fast path's writer connection."
        ),
        recheck="that is_writer still marks a writer's connection until put_connection",
        checks=(
            Check(
                "eventsourcing.persistence.ConnectionPool.get_connection",
                signature=(
                    "(self, timeout: 'float | None' = None, *"
                    ", is_writer: 'bool | None' = None) -> 'TConnection'"
                ),
                sha256="8d832b8a573df8ab69f699ce60af225b23d67a1c2da7efcc5239e71f3c4c0ca4",
                contains=("conn.is_writer = is_writer",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.persistence.ConnectionPool.put_connection",
        distribution="eventsourcing",
        used_in=(f"{SQ}:_SQLitePool.put_connection",),
        why="Overridden to let go of the write lock get_connection took for a writer.",
        recheck="that is_writer is still read and reset here",
        checks=(
            Check(
                "eventsourcing.persistence.ConnectionPool.put_connection",
                signature="(self, conn: 'TConnection') -> 'None'",
                sha256="9900649c321fbb6cacdb4d22609f16923b61a341395d70fdcd0c78f38f6c2160",
                contains=("is_writer, conn.is_writer = conn.is_writer, None",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.sqlite.SQLiteConnectionPool.is_sqlite_memory_mode",
        distribution="eventsourcing",
        instance=True,
        used_in=(
            f"{SQ}:GuardedSQLiteApplicationRecorder.insert_events",
            f"{SQ}:GuardedSQLiteApplicationRecorder.insert_with_snapshots",
            f"{SQ}:SQLiteStore.__init__",
        ),
        why=(
            "An in-memory database takes the library's path (its writer connection would be "
            "another database)."
        ),
        recheck="that it still tells an in-memory database",
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteConnectionPool.__init__",
                contains=("self.is_sqlite_memory_mode = self.detect_memory_mode(db_name)",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.sqlite.SQLiteConnectionPool.db_name",
        distribution="eventsourcing",
        instance=True,
        used_in=(f"{SQ}:_SQLitePool.writer", f"{SQ}:SQLiteStore.__init__"),
        why="The file the writer connection opens, and the replacing pool's.",
        recheck="that it is still the name sqlite3.connect is given, as a URI",
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteConnectionPool.__init__",
                contains=("self.db_name = db_name",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.sqlite.SQLiteConnectionPool.lock_timeout",
        distribution="eventsourcing",
        instance=True,
        used_in=(
            f"{SQ}:_SQLitePool.writer",
            f"{SQ}:_SQLitePool._begin_writing",
            f"{SQ}:SQLiteStore.__init__",
        ),
        why="SQLITE_LOCK_TIMEOUT, for the writer connection and the wait for the write lock.",
        recheck="that it is still the seconds sqlite3.connect waits for a lock",
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteConnectionPool.__init__",
                contains=("self.lock_timeout = lock_timeout",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.sqlite.SQLiteAggregateRecorder.insert_events_statement",
        distribution="eventsourcing",
        instance=True,
        used_in=(f"{SQ}:GuardedSQLiteApplicationRecorder._insert_alone",),
        why="Extended by ',(?,?,?,?)' per row into one multi-row INSERT.",
        recheck="that it still ends with VALUES (?,?,?,?) in the table's column order",
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteAggregateRecorder.__init__",
                sha256="88895a2823b5a2d2f890deebd39eef5e7872ef7f7aeab8686ce4a93c4513ed1c",
                contains=('f"INSERT INTO {self.events_table_name} VALUES (?,?,?,?)"',),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.sqlite.SQLiteApplicationRecorder.insert_events",
        distribution="eventsourcing",
        used_in=(
            f"{SQ}:GuardedSQLiteApplicationRecorder.insert_events",
            f"{SQ}:GuardedSQLiteApplicationRecorder._insert",
            f"{SQ}:GuardedSQLiteApplicationRecorder._insert_alone",
        ),
        why=(
            "Replaced by a fast path: an action's events in one multi-row INSERT on a dedicated "
            "autocommit writer connection (1.38 -> 1.24 ms CPU per action under load; the "
            "write lock without two generator context managers, instr. -1.5%; "
            "docs/performance.md, levers). Its notification ids are the rowids, consecutive "
            "under the write lock."
        ),
        recheck=(
            "that the events table is still a rowid table whose rowid is the notification id, "
            "and that the library's insert stores nothing more"
        ),
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteAggregateRecorder.insert_events",
                signature=(
                    "(self, stored_events: 'Sequence[StoredEvent]'"
                    ", **kwargs: 'Any') -> 'Sequence[int] | None'"
                ),
                sha256="32f60619a2ca6e6a68cc63612d17c5e2e64defa63baa14cb1800f8e7d872eed5",
            ),
            Check(
                "eventsourcing.sqlite.SQLiteApplicationRecorder._insert_events",
                sha256="413cdf219c7bae6361386b240f477256549c5675adc02089fed33453160f1611",
                contains=("returning.append(c.lastrowid)",),
            ),
            Check(
                "eventsourcing.sqlite.SQLiteApplicationRecorder.construct_create_table_statements",
                sha256="0e52bba3d0092d396b69895e25c8e8637ab658834eb098d0bcc6080414455881",
            ),
            Check(
                "eventsourcing.sqlite.SQLiteApplicationRecorder.select_notifications",
                sha256="7769734dcf32b811da9ba0315ec38c70a52c523f976bb10a005e690805484d0d",
                contains=('id=row["rowid"]',),
            ),
        ),
        proven_by=(
            f"{FAST}::test_sqlite_insert_stores_what_the_library_stores",
            f"{FAST}::test_sqlite_insert_refused_stores_nothing_as_the_librarys",
        ),
    ),
    Hook(
        path="eventsourcing.sqlite.SQLiteAggregateRecorder.insert_events",
        distribution="eventsourcing",
        used_in=(
            f"{SQ}:GuardedSQLiteApplicationRecorder.insert_with_snapshots",
            f"{SQ}:GuardedSQLiteApplicationRecorder._replace",
        ),
        why=(
            "The snapshots an action makes due go in after its events in one INSERT OR REPLACE "
            "on the writer connection, not through the snapshot recorder's pooled insert: "
            "0.931-0.979 (docs/performance.md, levers)."
        ),
        recheck="that the snapshots table's columns are still, in order, those of VALUES (?,?,?,?)",
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteAggregateRecorder.construct_create_table_statements",
                sha256="940bfe1e379e780ff7ba80a52e85a8a70d5ea17b578a77f495f21c65a927b64e",
            ),
            Check(
                "eventsourcing.sqlite.SQLiteAggregateRecorder._insert_events",
                sha256="452435d1ad175fa082947bee3e3b82bd8f17cff80d78713d296ef6be5a64a58b",
            ),
        ),
        proven_by=(f"{FAST}::test_sqlite_insert_with_snapshots_stores_what_the_library_stores",),
    ),
    Hook(
        path="eventsourcing.sqlite.SQLiteAggregateRecorder.events_table_name",
        distribution="eventsourcing",
        instance=True,
        used_in=(
            f"{SQ}:GuardedSQLiteApplicationRecorder.insert_with_snapshots",
            "service.persistence.log:LogReader",
        ),
        why="The name of the library's table, for the statements the service writes itself.",
        recheck="that it is still the table's name",
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteAggregateRecorder.__init__",
                contains=("self.events_table_name = events_table_name",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.sqlite.SQLiteDatastore.transaction",
        distribution="eventsourcing",
        used_in=(
            "service.persistence.log:LogReader",
            "service.persistence.commitments:SeedCommitments._execute",
            "service.persistence.views:Views",
        ),
        why=(
            "A cursor in a transaction on a pooled connection (a writer's for commit=True), rows "
            "by name."
        ),
        recheck="that it still yields a cursor of sqlite3.Row rows and commits only when asked",
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteDatastore.transaction",
                signature="(self, *, commit: 'bool') -> 'Iterator[SQLiteCursor]'",
                sha256="20e2038a98e68bdd51cad3b4b950be6140b1dbe8173caae3b7c564a9e04ce79d",
            ),
        ),
    ),
    Hook(
        path="eventsourcing.sqlite.SQLiteDatastore.get_connection",
        distribution="eventsourcing",
        used_in=("service.persistence.views:Views",),
        why=(
            "A writer's pooled connection (held under the write lock, _SQLitePool.get_connection) "
            "on which a view's transaction begins IMMEDIATE, so that it holds the lock from its "
            "first read; committed or rolled back through the library's connection."
        ),
        recheck="that commit=True still gives a writer's connection, in autocommit, until put back",
        checks=(
            Check(
                "eventsourcing.sqlite.SQLiteDatastore.get_connection",
                signature="(self, *, commit: 'bool') -> 'Iterator[SQLiteConnection]'",
                sha256="539e5e7632ab275805b088de832a80206ad33978767f7eb03ecd1d36eeb0404a",
            ),
            Check(
                "eventsourcing.sqlite.SQLiteConnection.cursor", signature="(self) -> 'SQLiteCursor'"
            ),
            Check(
                "eventsourcing.sqlite.SQLiteConnection.commit",
                signature="(self) -> 'None'",
                sha256="32188db999c7e9babffab3f52325298f9439d00d3505b809f8505727a87750fb",
            ),
            Check(
                "eventsourcing.sqlite.SQLiteConnection.rollback",
                signature="(self) -> 'None'",
                sha256="81ac15ce0a35f575d1654d7f7cc405e1473b5a22986cb238d54072971cf366fb",
            ),
        ),
    ),
    # --------------------------------------------------------- eventsourcing: the application
    Hook(
        path="eventsourcing.application.Application.save",
        distribution="eventsourcing",
        used_in=("service.persistence.guard:_plain",),
        why=(
            "The fast insert paths take a call with only tracking=None, as save passes it (only "
            "a process application tracks): a game's creation must not take the library's "
            "slower path."
        ),
        recheck="that save (through _record and the event store) still passes tracking=None",
        checks=(
            Check(
                "eventsourcing.application.Application._record",
                sha256="104c6186b29d50595198443b697de23b0dab4344c50d4dca54688b32fce52340",
                contains=("tracking=processing_event.tracking",),
            ),
        ),
    ),
    # --------------------------------------------------------------------------- gunicorn
    Hook(
        path="gunicorn.util.write_error",
        distribution="gunicorn",
        used_in=(f"{GU}:write_problem",),
        why=(
            "Replaced (in the master, before the workers fork) so that what gunicorn answers "
            "itself (a request it cannot parse) is problem+json with a stable code, not HTML."
        ),
        recheck=(
            "that every worker class still answers its errors through util.write_error(sock, "
            "status, reason, mesg)"
        ),
        checks=(
            Check(
                "gunicorn.util.write_error",
                signature="(sock, status_int, reason, mesg)",
                sha256="bd0143a03c15a2c8b068301eb546e703406dd2e32699cf3aeba8036a263b30b2",
            ),
            Check(
                "gunicorn.workers.base.Worker.handle_error",
                sha256="75426448389bbac95cdc9c308c5be1a1f0277ebc18c36f86d8295b90e77cb343",
                contains=("util.write_error(client, status_int, reason, mesg)",),
            ),
            Check("gunicorn.util.write_nonblock", signature="(sock, data, chunked=False)"),
        ),
    ),
    Hook(
        path="gunicorn.glogging.Logger.atoms",
        distribution="gunicorn",
        used_in=(f"{GU}:ServerLogger.atoms",),
        why=(
            "Overridden so that the access log shows only the API's own query values (a seat "
            "token in a URL is never logged)."
        ),
        recheck="that the access log's %(r)s and %(q)s still come from atoms()",
        checks=(
            Check(
                "gunicorn.glogging.Logger.atoms",
                signature="(self, resp, req, environ, request_time)",
                sha256="01225e5e5f3ce6c28e24b1fc83d0faf4233770829587650d86942691009326e2",
            ),
        ),
    ),
    Hook(
        path="gunicorn.glogging.Logger.exception",
        distribution="gunicorn",
        used_in=(f"{GU}:ServerLogger.exception", f"{GU}:when_ready"),
        why=(
            "Overridden so that a connection closed for sending nothing mid-request (the read "
            "timeout set on the listening sockets fails the read with BlockingIOError) is one "
            "line, not a traceback: gthread logs that socket error through log.exception."
        ),
        recheck=(
            "that gthread still logs a failed read through self.log.exception inside its except"
        ),
        checks=(
            Check("gunicorn.glogging.Logger.exception", signature="(self, msg, *args, **kwargs)"),
            Check(
                "gunicorn.workers.gthread.ThreadWorker.handle",
                sha256="ca85c9be3df75da40ba6cd55181ef75a78b67c461b2a553455a40e676f4cce7f",
                contains=('self.log.exception("Socket error processing request.")',),
            ),
        ),
    ),
    Hook(
        path="gunicorn.workers.gthread.ThreadWorker.handle_exit",
        distribution="gunicorn",
        used_in=(f"{GU}:post_fork",),
        why=(
            "Wrapped per worker (after the fork, before init_signals installs it for SIGTERM) to "
            "end the worker's streams at once instead of holding a restart for graceful_timeout."
        ),
        recheck=(
            "that post_fork still runs before init_signals, which installs self.handle_exit for "
            "SIGTERM"
        ),
        checks=(
            Check(
                "gunicorn.workers.gthread.ThreadWorker.handle_exit",
                signature="(self, sig, frame)",
                sha256="b4e7decd4f9203acd39837777497cac17de32d1237b2fdf2b7336873b13e4f57",
            ),
            Check(
                "gunicorn.workers.base.Worker.init_signals",
                sha256="65442e0602b05f37cbb29b378247ca3140e5a7df8315a01b9c4401f261b2b40d",
                contains=("signal.signal(signal.SIGTERM, self.handle_exit)",),
            ),
            Check(
                "gunicorn.arbiter.Arbiter.spawn_worker",
                sha256="6abc0d90b0b9f80b476a9aa8bbb47a7564f444f017384d1db8fb0ce36b916aea",
                contains=("self.cfg.post_fork(self, worker)", "worker.init_process()"),
            ),
        ),
    ),
    Hook(
        path="gunicorn.workers.base.Worker.wsgi",
        distribution="gunicorn",
        instance=True,
        used_in=(f"{GU}:post_worker_init", f"{GU}:_end_streams"),
        why=(
            "Wrapped in post_worker_init so that a 408 or 413 (a body left unread) makes gunicorn "
            "say Connection: close: it closes such a connection but said keep-alive, and a "
            "client's next request on it was lost."
        ),
        recheck="that gthread still calls self.wsgi per request, after post_worker_init",
        checks=(
            Check(
                "gunicorn.workers.base.Worker.init_process",
                sha256="114caccd7a0e3c21628648ee9487353e49e4e9cd9d9c4b75016d6f86aa18ad5b",
                contains=("self.load_wsgi()", "self.cfg.post_worker_init(self)"),
            ),
            Check(
                "gunicorn.workers.gthread.ThreadWorker.handle_request",
                sha256="6d0de5b919102efcfde7a8dc83e48268298072d65d88f5f26c858b239696a4d3",
                contains=(
                    "self.wsgi(environ, resp.start_response)",
                    "self.cfg.pre_request(self, req)",
                ),
            ),
        ),
    ),
    Hook(
        path="gunicorn.http.message.Request.must_close",
        distribution="gunicorn",
        instance=True,
        used_in=(f"{GU}:pre_request", f"{GU}:post_worker_init"),
        why=(
            "Set on the request answered 408 or 413 so that gunicorn writes Connection: close "
            "(Worker.wsgi)."
        ),
        recheck=(
            "that Response.should_close still asks req.should_close(), which reads must_close, "
            "and sets the header"
        ),
        checks=(
            Check("gunicorn.http.message.Message.__init__", contains=("self.must_close = False",)),
            Check(
                "gunicorn.http.message.Request.should_close",
                sha256="37c454bfb3e36316a738f9bd587002b626d280142bcf91c6c8fc1689e531f01b",
                contains=("if self.must_close:",),
            ),
            Check(
                "gunicorn.http.wsgi.Response.should_close",
                sha256="3888d47a96e289b3d9b834013ab4bb52bb70020f90043db4e41c4ef379ce7d7c",
                contains=("self.req.should_close()",),
            ),
            Check(
                "gunicorn.http.wsgi.Response.default_headers",
                sha256="cb490cea5d6f54089293c2adf46190cf3b5fb92335e620bb93710412aa26c6c6",
                contains=("elif self.should_close():",),
            ),
        ),
    ),
    Hook(
        path="gunicorn.arbiter.Arbiter.LISTENERS",
        distribution="gunicorn",
        used_in=(f"{GU}:when_ready",),
        why=(
            "The listening sockets, given the read timeout (SO_RCVTIMEO) that every accepted "
            "connection inherits."
        ),
        recheck="that it still holds the listeners, each with its socket as .sock",
        checks=(
            Check(
                "gunicorn.sock.BaseSocket.__init__",
                contains=("self.sock = self.set_options(sock, bound=bound)",),
            ),
        ),
    ),
    Hook(
        path="gunicorn.arbiter.Arbiter.WORKERS",
        distribution="gunicorn",
        used_in=(f"{GU}:pre_fork",),
        why="The live workers, to choose the CPU a new worker keeps to (CANTSTOP_CPU_AFFINITY).",
        recheck="that it still maps pids to the worker objects",
        checks=(
            Check(
                "gunicorn.arbiter.Arbiter.spawn_worker", contains=("self.WORKERS[pid] = worker",)
            ),
        ),
    ),
    Hook(
        path="gunicorn.http.wsgi.default_environ",
        distribution="gunicorn",
        used_in=(f"{GU}:_adoptable", f"{GU}:_hand_over"),
        why=(
            "environ['gunicorn.socket'], the client's socket: a live stream's is detached and "
            "handed to the worker's live loop, so that the stream holds no thread."
        ),
        recheck="that the environ still carries the connection's socket as gunicorn.socket",
        checks=(
            Check(
                "gunicorn.http.wsgi.default_environ",
                signature="(req, sock, cfg)",
                contains=('"gunicorn.socket": sock',),
            ),
        ),
    ),
    Hook(
        path="gunicorn.http.wsgi.Response.headers_sent",
        distribution="gunicorn",
        instance=True,
        used_in=(f"{GU}:_hand_over",),
        why=(
            "A live stream's answer is written by the live loop: gunicorn's Response (the "
            "start_response it passes, bound to it) is marked as having sent its head, not "
            "chunked, and closing, so that gunicorn writes nothing more and lets the "
            "connection go."
        ),
        recheck=(
            "that start_response is still the Response's bound method, that close() writes "
            "nothing once headers_sent is set and chunked is not, and that force_close() still "
            "makes the worker drop the connection"
        ),
        checks=(
            Check(
                "gunicorn.http.wsgi.Response.start_response",
                signature="(self, status, headers, exc_info=None)",
            ),
            Check(
                "gunicorn.http.wsgi.Response.close",
                contains=("if not self.headers_sent:", "if self.chunked:"),
            ),
            Check("gunicorn.http.wsgi.Response.force_close", contains=("self.must_close = True",)),
            Check(
                "gunicorn.http.wsgi.Response.__init__",
                contains=("self.headers_sent = False", "self.chunked = False"),
            ),
        ),
    ),
    Hook(
        path="gunicorn.util.close_graceful",
        distribution="gunicorn",
        used_in=(f"{GU}:_hand_over",),
        why=(
            "gthread ends a closing connection with shutdown(SHUT_WR), which would end a stream's "
            "connection for every copy of its socket: the socket object gunicorn keeps is "
            "detached instead, and its shutdown fails with OSError, on which gunicorn stops."
        ),
        recheck="that a failed shutdown still ends close_graceful without closing anything",
        checks=(
            Check(
                "gunicorn.util.close_graceful",
                contains=("sock.shutdown(socket.SHUT_WR)", "except OSError:\n            return"),
            ),
            Check("gunicorn.util.close", contains=("sock.close()", "except OSError:")),
        ),
    ),
    Hook(
        path="gunicorn.app.base.Application.load_config_from_file",
        distribution="gunicorn",
        used_in=("service.cli:cmd_serve",),
        why=(
            "`cantstop serve` runs gunicorn in process with the settings file shipped in the "
            "package."
        ),
        recheck="that it still loads a settings file by path into self.cfg",
        checks=(
            Check(
                "gunicorn.app.base.Application.load_config_from_file", signature="(self, filename)"
            ),
        ),
    ),
    Hook(
        path="gunicorn.http.errors.ParseException",
        distribution="gunicorn",
        used_in=("service.http.core:install_error_handlers",),
        why=(
            "gunicorn reads a chunked body as the app asks for it: a bad chunk is raised by the "
            "view's read, as one of these, and answered 400 malformed_request, not 500."
        ),
        recheck="that a bad chunk is still raised from wsgi.input.read as a ParseException",
        checks=(
            Check(
                "gunicorn.http.errors.InvalidChunkSize",
                contains=("class InvalidChunkSize(ParseException):",),
            ),
        ),
    ),
    # ------------------------------------------------------------------ Werkzeug, Flask, ...
    Hook(
        path="werkzeug.wrappers.request.Request._cached_data",
        distribution="werkzeug",
        instance=True,
        used_in=("service.http.core:_sized_body",),
        why=(
            "A body with a Content-Length is read from the server's stream in one read and left "
            "where get_data reads it first: no stream wrapper on every action (with the body "
            "limit as an attribute, the request read once and no session: instr. -6.6%, "
            "docs/performance.md, levers)."
        ),
        recheck="that get_data still returns _cached_data when it is set",
        checks=(
            Check(
                "werkzeug.wrappers.request.Request.get_data",
                signature=(
                    "(self, cache: 'bool' = True, as_text: 'bool' = False"
                    ", parse_form_data: 'bool' = False) -> 'bytes | str'"
                ),
                sha256="ce2b5f4a4451d3c10f7e72e9a06b0dc832d4e3512d12a26e822f051b914ddbdb",
                contains=('rv = getattr(self, "_cached_data", None)',),
            ),
        ),
    ),
    Hook(
        path="werkzeug.local.LocalProxy._get_current_object",
        distribution="werkzeug",
        instance=True,
        used_in=("service.http.core:this_request",),
        why=(
            "The request itself, not the context proxy, for a view that reads it often: each "
            "read through the proxy resolves a context variable (instr. -1.9%, "
            "docs/performance.md, levers). Documented by Werkzeug despite the underscore."
        ),
        recheck="that a LocalProxy still has _get_current_object",
        checks=(
            Check(
                "werkzeug.local.LocalProxy.__init__",
                contains=('object.__setattr__(self, "_get_current_object", _get_current_object)',),
            ),
        ),
    ),
    Hook(
        path="flask.wrappers.Request.max_content_length",
        distribution="flask",
        used_in=("service.http.core:request_class",),
        why=(
            "Flask's property, which reads the app's config through the context on every read, "
            "is replaced by a plain class attribute (CANTSTOP_MAX_BODY_BYTES), as Werkzeug has "
            "it (instr. -6.6% with _cached_data, docs/performance.md, levers)."
        ),
        recheck=(
            "that Werkzeug still reads self.max_content_length and a view may still set it per "
            "request"
        ),
        checks=(
            Check(
                "flask.wrappers.Request.max_content_length.fget",
                sha256="9a5760c214e021c800d06dbc93a3d71e92035aed017554d9b6bdf341b0ee5cc4",
            ),
            Check(
                "werkzeug.wrappers.request.Request.stream.fget",
                sha256="364cb4d7807688325355a79e37094a79097732a60df14e5d590197f3f68d988e",
                contains=("max_content_length=self.max_content_length",),
            ),
        ),
    ),
    Hook(
        path="flask.wrappers.Request.routing_exception",
        distribution="flask",
        used_in=("service.http.core:request_class",),
        why=(
            "Set as the request is built (a doubled slash, an over-long request line or header "
            "block) and raised by Flask in place of the view, as for a route that does not "
            "match: no before_request hook (instr. -1.7%, docs/performance.md, levers)."
        ),
        recheck=(
            "that routing leaves it alone when it matches, and dispatch_request still raises it"
        ),
        checks=(
            Check(
                "flask.ctx.RequestContext.match_request",
                sha256="919ccbf8eafa1cce9c10473ad1d46e7884a55a5c1ed3e3dd347b708a1927c661",
            ),
            Check(
                "flask.app.Flask.dispatch_request",
                sha256="62c7e9d15772724aeb88c4791f5b935855709f153ec6d606b9b0c6966ccff1ff",
                contains=("if req.routing_exception is not None:",),
            ),
        ),
    ),
    Hook(
        path="flask_limiter.Limiter._Limiter__inject_headers",
        distribution="flask-limiter",
        used_in=("service.http.limits:init_app",),
        why=(
            "Flask-Limiter puts Retry-After on every answer of a limited endpoint; an "
            "after_request hook registered before init_app registers this one runs after it "
            "and keeps Retry-After only on a 429 or 503."
        ),
        recheck="that init_app still registers this method as an after_request hook",
        checks=(
            Check(
                "flask_limiter.Limiter.init_app",
                sha256="d4f415977155cf90c9c265f606ddef4043788e9eaf7fb7bbd5c01d9cdc4c79f9",
                contains=("app.after_request(partial(Limiter.__inject_headers, self))",),
            ),
            Check(
                "flask_limiter.Limiter._Limiter__inject_headers",
                signature=(
                    "(self, response: 'flask.wrappers.Response') -> 'flask.wrappers.Response'"
                ),
                sha256="aa6d828bc55063a1525eff3d853151ab3133ec4a644327a6e29af9c008b222bd",
            ),
        ),
    ),
    Hook(
        path="marshmallow.fields.Field._deserialize",
        distribution="marshmallow",
        used_in=(
            "service.http.schemas:_StrictBoolean._deserialize",
            "service.http.schemas:ColumnsToWin._deserialize",
            "service.http.schemas:PlayerField._deserialize",
        ),
        why=(
            "Custom fields, as marshmallow documents them (strict booleans, an integer or "
            "'by_players', a player)."
        ),
        recheck="that deserialize still calls _deserialize(value, attr, data, **kwargs)",
        checks=(
            Check(
                "marshmallow.fields.Field._deserialize",
                signature=(
                    "(self, value: 'typing.Any', attr: 'str | None'"
                    ", data: 'typing.Mapping[str, typing.Any] | None'"
                    ", **kwargs) -> '_InternalT'"
                ),
            ),
            Check(
                "marshmallow.fields.Field.deserialize",
                contains=("self._deserialize(value, attr, data, **kwargs)",),
            ),
        ),
    ),
)
