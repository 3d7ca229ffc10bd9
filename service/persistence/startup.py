"""Start-up DDL one process at a time, so a fleet that starts together comes up whole.

Every ``cantstop serve``, ``migrate`` (and the other commands that create tables) runs its
``CREATE … IF NOT EXISTS``, ``CREATE OR REPLACE FUNCTION`` and ``ALTER … IF NOT EXISTS`` at start.
PostgreSQL's ``IF NOT EXISTS`` is no guard between sessions: run at once, they collide in the
catalog (``duplicate key value violates unique constraint "pg_type_typname_nsp_index"`` on an
empty database, ``tuple concurrently updated`` on a migrated one) and the process exits 1.
``schema_lock`` makes them take turns: a session-level advisory lock with a fixed key, held on a
connection of its own for the whole start-up and released when it closes (or when the process
dies: the server ends its session). SQLite needs none: its writers already take turns on the
file, each statement waiting ``SQLITE_LOCK_TIMEOUT`` for the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator

import psycopg
from eventsourcing.persistence import OperationalError

from service.config import Settings
from service.persistence.settings import postgres_params

log = logging.getLogger("cantstop.store")

# pg_advisory_lock's key (a bigint), the same in every release of the service.
SCHEMA_LOCK_KEY = int.from_bytes(hashlib.sha256(b"cantstop schema").digest()[:8], signed=True)


@contextlib.contextmanager
def schema_lock(settings: Settings) -> Iterator[None]:
    """Held while this process creates or alters tables (PostgreSQL only)."""
    params = postgres_params(settings)
    if params is None:
        yield
        return
    try:
        conn = psycopg.connect(**params, autocommit=True)
    except psycopg.Error as exc:  # as the store's own errors: the command says why in one line
        raise OperationalError(str(exc)) from exc
    with conn:
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (SCHEMA_LOCK_KEY,)).fetchone()
            if not (row and row[0]):
                log.info("another host is creating the tables: waiting for it to finish")
                conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK_KEY,))
        except psycopg.Error as exc:
            raise OperationalError(str(exc)) from exc
        try:
            yield
        finally:
            with contextlib.suppress(psycopg.Error):  # closing the session releases it anyway
                conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK_KEY,))
