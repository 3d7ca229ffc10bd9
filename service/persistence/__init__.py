"""The event store: SQLite (the default) or PostgreSQL (production), and how it fails; the views
kept beside it.

eventsourcing keeps what it is made for (aggregates, events, the application, the mapper); the
persistence is the service's own, as eventsourcing's extension projects give theirs: an
infrastructure factory per database (``sqlite.SQLiteStore``, ``postgres.PostgresStore``, named by
``PERSISTENCE_MODULE``) whose recorders implement the library's public ``AggregateRecorder`` and
``ApplicationRecorder`` on the public APIs of ``sqlite3``, ``psycopg`` and ``psycopg_pool``, on
the library's own table layout (plus the ``tx`` column the log reads by on PostgreSQL).

One module a concern: ``errors`` (what failures look like), ``guard`` (bounded waits, the
breaker), ``postgres`` and ``sqlite`` (the stores), ``settings`` (the URL as the factory's
settings), ``commitments`` (seeds committed before their games), ``log`` (the notification log
in commit order), ``views`` (cross-game views in tables, with tracking), ``startup`` (hosts
starting together take turns at the DDL).

- **Bounded waits.** Each operation is tried at most twice, a pooled PostgreSQL connection is
  waited for at most ``CONNECT_TIMEOUT`` seconds, and a process-wide circuit breaker answers at
  once (503 ``store_unavailable`` with ``Retry-After``) for ``COOLDOWN`` seconds after a
  failure, so waiting requests never pile up. The pool reconnects in the background, so service
  resumes within seconds of the database returning. A PostgreSQL server that stops answering
  without closing its connections is waited for at most ``CANTSTOP_PG_QUERY_TIMEOUT`` seconds
  per statement (``postgres.Deadlines``).
- **Every connection option of the URL** (``?sslmode=require``, ``sslrootcert``,
  ``application_name``, a socket directory as ``?host=``) reaches libpq, as psycopg parses it.
- **SQLite**: the file is created readable by its owner only (it holds unrevealed seeds), in WAL
  mode, with ``synchronous`` = ``NORMAL`` by default (a commit survives the crash of any process;
  ``CANTSTOP_SQLITE_SYNCHRONOUS=full`` also survives a power cut, at a cost measured in
  docs/performance.md). A file cannot go down as a server can: its errors answer 503 too, but open
  no breaker (``cooldown`` 0).
"""
