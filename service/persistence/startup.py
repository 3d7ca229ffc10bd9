"""Start-up DDL one process at a time, so a fleet that starts together comes up whole.

Every ``cantstop serve``, ``migrate`` (and the other commands that create tables) runs its
``CREATE … IF NOT EXISTS`` and ``ALTER … IF NOT EXISTS`` at start.
PostgreSQL's ``IF NOT EXISTS`` is no guard between sessions: run at once, they collide in the
catalog (``duplicate key value violates unique constraint "pg_type_typname_nsp_index"`` on an
empty database, ``tuple concurrently updated`` on a migrated one) and the process exits 1.
``schema_lock`` makes them take turns: a session-level advisory lock with a fixed key, held on a
connection of its own for the whole start-up and released when it closes (or when the process
dies: the server ends its session). On SQLite, an exclusive ``flock`` on ``<database>.schema``
(the kernel drops it when the process dies): its writers do take turns on the file, but each
statement waits at most ``SQLITE_LOCK_TIMEOUT`` (2 s), and eight processes creating some fifty
tables a statement at a time, on a loaded host, left five of them past it ("database is
locked", tests/test_fleet_start.py, once in a CI run).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
from eventsourcing.persistence import OperationalError

from service.config import Settings
from service.persistence.backup import sqlite_path
from service.persistence.settings import postgres_params

log = logging.getLogger("cantstop.store")

# pg_advisory_lock's key (a bigint), the same in every release of the service.
SCHEMA_LOCK_KEY = int.from_bytes(hashlib.sha256(b"cantstop schema").digest()[:8], signed=True)


@contextlib.contextmanager
def schema_lock(settings: Settings) -> Iterator[None]:
    """Held while this process creates or alters tables."""
    params = postgres_params(settings)
    if params is None:
        with _file_lock(settings.database_url):
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


@contextlib.contextmanager
def _file_lock(url: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``<database>.schema`` beside an SQLite file (none in memory)."""
    path = sqlite_path(url)
    if path is None:
        yield
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{path}.schema", os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:  # a folder that cannot be written: the store's own error says so
        raise OperationalError(str(exc)) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing it releases the lock
