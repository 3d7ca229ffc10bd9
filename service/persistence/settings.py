"""The store's settings (eventsourcing's environment) for ``CANTSTOP_DATABASE_URL``, and why a
PostgreSQL URL fails."""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from service.config import ConfigError, Settings
from service.persistence.guard import (
    CONNECT_TIMEOUT,
    LIBPQ_CONNECT_TIMEOUT,
    SQLITE_LOCK_TIMEOUT,
    URL_FIELDS,
)
from service.persistence.postgres import PostgresStore
from service.persistence.sqlite import SQLiteStore, _owner_only

log = logging.getLogger("cantstop.store")


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
    # TCP keepalives, so that a connection to a host or server that vanished without closing
    # it (a partition, a power cut) is found dead within ~25 s, on both ends: the server then
    # ends the session (and its transaction), the pool replaces the connection. The URL's own
    # keepalive options win.
    options.setdefault("keepalives", "1")
    options.setdefault("keepalives_idle", str(settings.pg_keepalives_idle))
    options.setdefault("keepalives_interval", "5")
    options.setdefault("keepalives_count", "3")
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
        "CANTSTOP_PG_OPTIONS": json.dumps(options),
        "CANTSTOP_PG_QUERY_TIMEOUT": str(settings.pg_query_timeout),
        "CANTSTOP_PG_IDLE_IN_TRANSACTION_TIMEOUT": str(settings.pg_idle_in_transaction),
        "CREATE_TABLE": create,
    }


def postgres_connect_error(settings: Settings) -> str | None:
    """Why one connection with the pool's own parameters fails, in libpq's words (the first
    line, such as 'database "x" does not exist'), or None when it succeeds or the store is not
    PostgreSQL. For a failure at start: the pool reports only that it timed out."""
    params = postgres_params(settings)
    if params is None:
        return None
    try:
        with psycopg.connect(**params):
            return None
    except psycopg.Error as exc:
        lines = str(exc).strip().splitlines()
        return lines[0] if lines else type(exc).__name__


def postgres_params(settings: Settings) -> dict[str, Any] | None:
    """``psycopg.connect``'s arguments for one connection with the pool's own parameters, or
    None when the store is not PostgreSQL."""
    if not settings.database_url.startswith(("postgresql:", "postgres:")):
        return None
    env = persistence_env(settings, create_table=False)
    params: dict[str, Any] = json.loads(env["CANTSTOP_PG_OPTIONS"])
    if env["POSTGRES_PASSWORD"]:
        params["password"] = env["POSTGRES_PASSWORD"]
    params.update(
        dbname=env["POSTGRES_DBNAME"],
        host=env["POSTGRES_HOST"],
        port=env["POSTGRES_PORT"],
        user=env["POSTGRES_USER"],
    )
    return params
