"""Reading the notification log (every event of every game) in commit order."""

from __future__ import annotations

import logging
import uuid
from typing import Any, NamedTuple

from eventsourcing.persistence import (
    Notification,
)
from eventsourcing.postgres import (
    PostgresApplicationRecorder,
)

from service.persistence.guard import guarded

log = logging.getLogger("cantstop.store")


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
