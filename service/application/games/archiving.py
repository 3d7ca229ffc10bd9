"""Finished games archived: each one's events kept as one value instead of a row each, a while
after it ended (``CANTSTOP_ARCHIVE_AFTER``, a day by default; service/persistence/archive.py
says what is kept and how every read finds it; docs/scaling.md, "Bytes per game").

``ArchiveQueue`` is a view: it queues each game as it finishes (its place in the log is tracked
like every view's, so no end is missed and none is queued twice, on any number of hosts). The
scheduler's chore (``Archiver.step``) takes the oldest ends, a few at a time, and asks the store
to archive each game that ended longer ago than the delay (``Store.archive``), which does it
only once every view has read the game to its end; a game that cannot be archived yet stays
queued. The delay
keeps a game just finished in rows while its players and watchers read it, and covers a host
whose live streams' reader fell behind (a host frozen for less than the delay misses none of
a game's events)."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from eventsourcing.utils import get_topic

from domain.game import Game
from service.application.store import Store
from service.persistence.log import Head
from service.persistence.views import Sql, View, Views

log = logging.getLogger("cantstop")

FINISHED = get_topic(Game.GameFinished)
STEP = 50  # games tried in one pass of the scheduler
# What ends a game's stay in the queue: archived, or nothing left to archive (archived by
# another host, or unknown); any other outcome (not read by every view yet, the log's newest
# row, another archiver at work) is tried again at a later pass.
DONE = frozenset({"archived", "no rows", "not finished", "damaged"})


class ArchiveQueue(View):
    """The finished games not archived yet, with when each was queued."""

    name = "archive_queue"
    version = 1
    topics = (FINISHED,)
    heads_only = True
    summary_topics = (FINISHED,)  # a rebuild queues the finished games from their heads
    tables: ClassVar[dict[str, list[str]]] = {
        "queue": [
            # seq: the end's place in the log, so the oldest ends come first
            "CREATE TABLE IF NOT EXISTS {queue} (game_id TEXT PRIMARY KEY, seq BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {queue}_seq ON {queue} (seq)",
        ]
    }

    def prepare(self, items: list[Head], read: Sql) -> list[tuple[str, int]]:
        return self.summary(items)

    def summary(self, heads: list[Head]) -> list[tuple[str, int]]:
        """The finished games of ``heads`` to queue: not those whose end was read from their
        archive (a rebuild, or a view caught up from the log's start, over games archived
        already: queued, each would only leave the queue again at the archiver's look)."""
        return [(str(head.originator_id), head.id) for head in heads if not head.archived]

    def apply(self, sql: Sql, prepared: list[tuple[str, int]]) -> None:
        sql.many(
            "INSERT INTO {queue} (game_id, seq) VALUES (?, ?) ON CONFLICT (game_id) DO NOTHING",
            prepared,
        )


class Archiver:
    """The scheduler's chore: archives the games queued ``after`` seconds ago or more (None:
    none is archived; the queue still fills, so turning it on later finds them all)."""

    def __init__(
        self, store: Store, views: Views, queue: ArchiveQueue, after: float | None
    ) -> None:
        self.store = store
        self.views = views
        self.queue = queue
        self.after = after

    def step(self, limit: int = STEP, *, fresh: bool = True) -> dict[str, int]:
        """One pass: how many games ended with each outcome. The oldest ends first; the pass
        stops at the first game that ended less than ``after`` seconds ago. ``fresh``: the
        queue caught up to the log's end first; not so for the scheduler's chore
        (``chore``), whose pass has just moved it on."""
        if self.after is None:
            return {}
        ended_before = datetime.now(UTC) - timedelta(seconds=self.after)

        def oldest(sql: Sql) -> list[Any]:
            return sql.all("SELECT game_id FROM {queue} ORDER BY seq LIMIT ?", [limit])

        outcomes: dict[str, int] = {}
        done = []
        for row in self.views.read(self.queue, oldest, fresh=fresh):
            try:
                outcome = self.store.archive(uuid.UUID(row["game_id"]), ended_before)
            except Exception as exc:  # one game's trouble never stops the others
                log.warning("archiving game %s failed: %s", row["game_id"], exc)
                continue
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if outcome in DONE:
                done.append([row["game_id"]])
            elif outcome == "too recent":
                break
        if done:
            self.views.write(
                self.queue, lambda sql: sql.many("DELETE FROM {queue} WHERE game_id = ?", done)
            )
        if outcomes.get("archived"):
            log.info("archived %s finished games", outcomes["archived"])
        return outcomes

    def chore(self) -> dict[str, int]:
        """``step`` as the scheduler's chore: the queue as its pass left it (``Views.move_on``
        moved it on just before), not caught up again: at rest that was two statements a pass
        (the view's tracking row, the log's newest event) of ~14."""
        return self.step(fresh=False)

    def drain(self, limit: int = 500) -> dict[str, int]:
        """Passes one after another until one archives nothing and finds nothing archived
        already (``cantstop archive``, bench.bytes): how many games ended with each outcome."""
        totals: dict[str, int] = {}
        while True:
            outcomes = self.step(limit)
            for outcome, count in outcomes.items():
                totals[outcome] = totals.get(outcome, 0) + count
            if not outcomes.get("archived") and not outcomes.get("no rows"):
                return totals
