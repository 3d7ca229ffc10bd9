"""Configuration from the environment (README: Configuration)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

DEFAULT_DATABASE_URL = "sqlite:///var/cantstop.sqlite"
DEFAULT_MAX_BODY_BYTES = 256 * 1024


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    rate_limits: str = "off"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        return cls(
            database_url=env.get("CANTSTOP_DATABASE_URL") or DEFAULT_DATABASE_URL,
            redis_url=env.get("CANTSTOP_REDIS_URL") or None,
            rate_limits=env.get("CANTSTOP_RATE_LIMITS") or "off",
            max_body_bytes=int(env.get("CANTSTOP_MAX_BODY_BYTES") or DEFAULT_MAX_BODY_BYTES),
        )


def persistence_env(database_url: str, *, create_table: bool) -> dict[str, str]:
    """The eventsourcing settings for a ``sqlite:///path`` or ``postgresql://…`` URL."""
    url = urlsplit(database_url)
    create = "y" if create_table else "n"
    if url.scheme == "sqlite":
        # sqlite:///relative/path and sqlite:////absolute/path, as in SQLAlchemy.
        path = database_url[len("sqlite:///") :]
        if not path:
            raise ConfigError("a sqlite URL needs a file path: sqlite:///var/cantstop.sqlite")
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        return {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": path if path != ":memory:" else "file::memory:?cache=shared",
            "SQLITE_LOCK_TIMEOUT": "10",
            "CREATE_TABLE": create,
        }
    if url.scheme in ("postgresql", "postgres"):
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": unquote(url.path.lstrip("/")) or "postgres",
            "POSTGRES_HOST": url.hostname or "127.0.0.1",
            "POSTGRES_PORT": str(url.port or 5432),
            "POSTGRES_USER": unquote(url.username or "postgres"),
            "POSTGRES_PASSWORD": unquote(url.password or ""),
            "POSTGRES_POOL_SIZE": os.environ.get("CANTSTOP_PG_POOL_SIZE", "5"),
            "POSTGRES_MAX_OVERFLOW": os.environ.get("CANTSTOP_PG_MAX_OVERFLOW", "10"),
            "POSTGRES_CONNECT_TIMEOUT": "10",
            "POSTGRES_PRE_PING": "y",
            "CREATE_TABLE": create,
        }
        # A unix-socket directory may be given as ?host=/path (libpq style).
        for part in url.query.split("&"):
            key, _, value = part.partition("=")
            if key == "host" and value:
                env["POSTGRES_HOST"] = unquote(value)
        return env
    raise ConfigError(
        f"CANTSTOP_DATABASE_URL must start with sqlite:/// or postgresql://, not {url.scheme!r}"
    )
