"""A copy of a live SQLite store, taken while it serves (docs/reliability.md, "Backups").

SQLite's online backup API copies the database page by page. Done in one step, the copy is one
read transaction: in WAL mode it blocks no writer, and it is a consistent snapshot (events,
snapshots, secrets and the views with their tracking, all as of one commit). Done in several
steps, any write by another connection restarts it, so under constant play it might never end.
The copy is written beside its destination and renamed into place once checked, so a file at
the destination is always a whole backup; it is readable by its owner only, as the store is,
since it holds unrevealed seeds. PostgreSQL is backed up with its own tools (pg_dump), as the
same document says.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


class BackupError(Exception):
    """The backup could not be taken; nothing was left at the destination."""


def sqlite_path(database_url: str) -> str | None:
    """The file of a ``sqlite:///…`` URL, or None for another store (or an in-memory one)."""
    if not database_url.startswith("sqlite:///"):
        return None
    path = database_url[len("sqlite:///") :]
    return None if path == ":memory:" else path


def backup_sqlite(source: str, destination: Path) -> int:
    """Copy the store at ``source`` into ``destination`` (which must not exist); the copy's size
    in bytes. Raises BackupError when the source is missing or the copy fails its check."""
    if not Path(source).is_file():
        raise BackupError(f"no SQLite store at {source}")
    if destination.exists():
        raise BackupError(f"{destination} exists: a backup never overwrites a file")
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(f".{destination.name}.partial-{os.getpid()}")
    fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)  # owner-only from birth
    os.close(fd)
    try:
        # mode=ro: a backup never writes to the store it copies.
        with (
            sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=10) as live,
            sqlite3.connect(partial) as copy,
        ):
            live.backup(copy)  # pages=-1: one step, one snapshot
            # The copy leaves WAL mode (a single file); a restored store turns it on again.
            copy.execute("PRAGMA journal_mode=DELETE")
            verdict = copy.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise BackupError(f"the copy failed SQLite's quick_check: {verdict}")
        os.replace(partial, destination)
    except sqlite3.Error as exc:
        raise BackupError(f"SQLite could not copy the store: {exc}") from exc
    finally:
        if partial.exists():
            partial.unlink()
    return destination.stat().st_size
