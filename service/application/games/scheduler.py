"""Who records what happens without a request (timeouts, computer players' turns, abandonment):
one loop per scheduling process, over the due-index kept in the store.

The due-index is a view (``DueIndex``): one row per game that is not finished, with when
something is next due in it. Like every view it is moved on once per event from the log, with a
tracking position, so a scheduler that starts reads where the index stands and goes on; it keeps
nothing per game in memory. Each event it reads makes it plan that game again
(``Timekeeper.due_at``); at each poll the loop asks ``Timekeeper.tick`` to do what is due by now.
Several such processes may run, on several hosts: the store lets exactly one of them record each
change (the game's next version), so a deadline gives one ``TurnTimedOut`` and a bot's turn one
action, whoever was first; the others read the change in the log and plan again. Redis is not
needed.

Most games are between people without a clock: there, the only thing ever due is abandonment,
and every new event only pushes it later. So such a game ("plain") is not read again for each
event: its plan stays as it was (early, never late), and when that time comes ``tick`` finds
nothing due and plans the true time. Only events that may seat a computer player (a creation,
a seat taken or given back) plan a plain game again; a finished game is dropped unread.

The loop also moves every other view on at each poll (``Runtime.moved_views``), so that a
request rarely finds its view behind, and then does its chores (pairing open seeks, moving
tournaments on, recording expired challenges and seeks, pruning old notices, delivering
webhooks, summing up finished rated games' analyses).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from eventsourcing.utils import get_topic

from domain.game import Game
from service import metrics
from service.application.errors import ApplicationError, describe
from service.application.games.timekeeper import Timekeeper
from service.application.games.use_cases import Games
from service.application.store import GAME_TOPICS
from service.persistence.errors import CorruptGame
from service.persistence.views import Sql, View, Views

log = logging.getLogger("cantstop.scheduler")

POLL = 0.25  # seconds between reads of the log
DUE_PAGE = 100  # due games done per query
# A game whose step failed stays in the index, due again after this many seconds: dropping it
# (as the loop once did) lost its deadline until someone acted in it. A refusal of the store
# (unavailable, no answer in time) is retried soon; an unexpected error, less often, since it
# is logged each time.
RETRY = 2.0
RETRY_BUG = 30.0
# After these, a game without a clock or computer players may have one: plan it again.
CREATED = get_topic(Game.GameCreated)
REPLAN = frozenset({CREATED, *(get_topic(c) for c in (Game.SeatJoined, Game.SeatLeft))})
# After these, nothing more is due in the game.
FINAL = frozenset(get_topic(c) for c in (Game.GameFinished, Game.GameAbandoned))


def utcnow() -> datetime:
    return datetime.now(UTC)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def _at(micros: int) -> datetime:
    """A due time as the index keeps it (whole microseconds since the epoch: exact, unlike a
    float of seconds) back as a time."""
    return EPOCH + micros * MICROSECOND


def _micros(at: datetime) -> int:
    return (at - EPOCH) // MICROSECOND


class DueIndex(View):
    """When something is next due in each game that is not finished."""

    name = "due"
    version = 1
    topics = tuple(sorted(GAME_TOPICS))
    heads_only = True  # whose event each is and its type: the states are not read
    # A rebuild reads only these heads, and plans only the games not finished (``summary``).
    summary_topics = tuple(sorted(REPLAN | FINAL))
    tables = {  # noqa: RUF012 (the View's declaration)
        "due": [
            "CREATE TABLE IF NOT EXISTS {due} (game_id TEXT PRIMARY KEY, "
            "due_at BIGINT NOT NULL, plain INTEGER NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {due}_at ON {due} (due_at)",
        ]
    }

    def __init__(self, games: Games, timekeeper: Timekeeper) -> None:
        self.games = games
        self.timekeeper = timekeeper
        self.planned = 0  # games planned by this process (tests read it)

    def prepare(self, items: list[Any], read: Sql) -> list[tuple[str, int | None, bool]]:
        """Plan again each game the batch touched (a plain game only after an event that may
        seat a computer player): (game id, due time or None, plain) for each."""
        touched: dict[uuid.UUID, set[str]] = {}
        for head in items:
            touched.setdefault(head.originator_id, set()).add(head.topic)
        plain: set[str] = set()
        keys = [str(game_id) for game_id in touched]
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = read.all(
                f"SELECT game_id FROM {{due}} WHERE plain = 1 AND game_id IN ({marks})", chunk
            )
            plain.update(row["game_id"] for row in rows)
        replanned = [
            (game_id, topics & REPLAN == {CREATED})
            for game_id, topics in touched.items()
            if not topics & FINAL and (str(game_id) not in plain or topics & REPLAN)
        ]
        # The creations planned from, read in one query (not two reads a game).
        firsts = self.games.store.creations([game_id for game_id, new in replanned if new])
        plans: list[tuple[str, int | None, bool]] = [
            (str(game_id), None, False) for game_id, topics in touched.items() if topics & FINAL
        ]
        for game_id, created in replanned:
            due, is_plain = self.plan(game_id, created=created, first=firsts.get(game_id))
            plans.append((str(game_id), due, is_plain))
        return plans

    def summary(self, heads: list[Any]) -> list[tuple[str, int | None, bool]]:
        """The index as planning every batch of the log up to the last of ``heads`` leaves it,
        planning only the games not finished, each once. Batch by batch, a finished game's
        row goes with its final event. A game's plan reads the game as it is now, whatever
        the batch: so every plan of a game gives the same, but for a plain game's plan from
        its creation alone, which stands while no seat is taken or given back (``prepare``).
        Hence: a game with such an event is planned from its state; one without, as at its
        creation (and from its state if that plans nothing, as its next batch would)."""
        created: list[uuid.UUID] = []
        seated: set[uuid.UUID] = set()
        finished: set[uuid.UUID] = set()
        for head in heads:
            if head.topic == CREATED:
                created.append(head.originator_id)
            elif head.topic in FINAL:
                finished.add(head.originator_id)
            else:
                seated.add(head.originator_id)
        plans: list[tuple[str, int | None, bool]] = []
        for game_id in created:
            if game_id in finished:
                continue
            due, plain = self.plan(game_id, created=game_id not in seated)
            if due is None and game_id not in seated:
                due, plain = self.plan(game_id)
            plans.append((str(game_id), due, plain))
        return plans

    def plan(
        self, game_id: uuid.UUID, *, created: bool = False, first: Game | None = None
    ) -> tuple[int | None, bool]:
        """The game's next due time (epoch microseconds) and whether it is plain. ``created``: its
        creation is among what was just read, and no seat was taken or given back since. Then
        the game as created (``first``, if read already) says whether it is plain, and a plain
        game's plan from its first event is early, never late (as any plain game's is): the
        rest of it is not read."""
        self.planned += 1
        plain = False
        try:
            if created and first is None:
                first = self.games.store.at_creation(game_id)
            if first is not None and self.timekeeper.only_abandonment(first):
                due, plain = self.timekeeper.due_at(first), True
            else:
                with self.games.store.owned(game_id) as game:
                    due = self.timekeeper.due_at(game)
                    plain = self.timekeeper.only_abandonment(game)
        except ApplicationError as exc:  # a damaged or vanished game: nothing to plan
            log.warning("scheduler: cannot plan game %s: %s", game_id, exc.detail)
            due = None
        return (None if due is None else _micros(due)), plain and due is not None

    def apply(self, sql: Sql, prepared: list[tuple[str, int | None, bool]]) -> None:
        """The plans, a game each (``prepare`` and ``summary`` plan each game once): the
        rows that go in one statement, the rows planned in another (on PostgreSQL a statement
        an event was a round trip each of the worker's)."""
        sql.many(
            "DELETE FROM {due} WHERE game_id = ?",
            [(game_id,) for game_id, due, _ in prepared if due is None],
        )
        sql.many(
            "INSERT INTO {due} (game_id, due_at, plain) VALUES (?, ?, ?) "
            "ON CONFLICT (game_id) DO UPDATE SET due_at = excluded.due_at, "
            "plain = excluded.plain",
            [(game_id, due, int(plain)) for game_id, due, plain in prepared if due is not None],
        )


class Scheduler:
    def __init__(
        self,
        games: Games,
        timekeeper: Timekeeper,
        views: Views,
        *,
        others: Sequence[View] = (),
        chores: Sequence[Callable[[], Any]] = (),
        poll: float = POLL,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.games = games
        self.timekeeper = timekeeper
        self.views = views
        self.index = DueIndex(games, timekeeper)
        self.others = tuple(others)
        self.chores = tuple(chores)  # run at each poll after the views moved on (seeks paired)
        self.poll = poll
        self.clock = clock
        # (the next due time,) as ``run_due`` last read it having done nothing; None: unknown
        self.upcoming: tuple[datetime | None] | None = None

    # ------------------------------------------------------------------------------ planning
    def refresh(self) -> int:
        """Move the due-index on to the log's end (planning again the games it touched); how
        many games were planned."""
        before = self.index.planned
        self.views.catch_up(self.index, lazy=True)
        return self.index.planned - before

    def planned(self, game_id: uuid.UUID) -> tuple[datetime, bool] | None:
        """When the game is next due, and whether it is plain; None if nothing is."""

        def run(sql: Sql) -> Any:
            return sql.one("SELECT due_at, plain FROM {due} WHERE game_id = ?", [str(game_id)])

        row = self.views.read(self.index, run, fresh=False)
        return None if row is None else (_at(row["due_at"]), bool(row["plain"]))

    @property
    def next_due(self) -> datetime | None:
        def run(sql: Sql) -> Any:
            return sql.one("SELECT min(due_at) AS due FROM {due}")

        row = self.views.read(self.index, run, fresh=False)
        return None if row is None or row["due"] is None else _at(row["due"])

    # ------------------------------------------------------------------------------ running
    def run_due(self) -> int:
        """Do everything due by now; how many steps were taken. Where nothing is due, the read
        that found so gives the first thing due (``upcoming``), which the loop then need not
        read again (a statement a poll on a host at rest)."""
        steps = 0
        while True:
            now = _micros(self.clock())

            def run(sql: Sql, now: int = now) -> list[Any]:
                # What is due by now, or else (nothing is) the first thing due: the ties of the
                # index's first time, one range of the index, a row or so at rest. (SQLite's
                # max() of NULL, an empty index, is NULL: no row, nothing due.)
                greatest = "GREATEST" if sql.postgres else "max"
                return sql.all(
                    f"SELECT game_id, due_at FROM {{due}} WHERE due_at <= {greatest}(?, "
                    "(SELECT min(due_at) FROM {due})) ORDER BY due_at LIMIT ?",
                    [now, DUE_PAGE],
                )

            rows = self.views.read(self.index, run, fresh=False)
            due = [row for row in rows if int(row["due_at"]) <= now]
            for row in due:
                self._tick(uuid.UUID(row["game_id"]), int(row["due_at"]))
            steps += len(due)
            if len(due) < DUE_PAGE:
                if not steps:  # the index as read: its first row, if any, not due yet
                    self.upcoming = (_at(rows[0]["due_at"]) if rows else None,)
                return steps

    def _tick(self, game_id: uuid.UUID, was: int) -> None:
        try:
            after = self.timekeeper.tick(game_id, self.clock())
        except CorruptGame as exc:  # nothing can be done in it until someone repairs the store
            log.warning("scheduler: game %s: %s", game_id, exc.detail)
            after = None
        except ApplicationError as exc:  # e.g. the store did not answer: the deadline stays
            log.warning("scheduler: game %s: %s; again in %s s", game_id, exc.detail, RETRY)
            after = self.clock() + timedelta(seconds=RETRY)
        except Exception as exc:  # one game's trouble never stops the others, nor is forgotten
            log.exception(
                "scheduler: game %s failed: %s; again in %s s", game_id, describe(exc), RETRY_BUG
            )
            after = self.clock() + timedelta(seconds=RETRY_BUG)
        metrics.scheduler_late((_micros(self.clock()) - was) / 1e6)  # due to done (if on)
        key = str(game_id)

        # Only if the plan is still the one that was due: if the index planned the game again
        # meanwhile (from events another process recorded), that plan is newer than this one.
        def change(sql: Sql) -> None:
            if after is None:
                sql.execute("DELETE FROM {due} WHERE game_id = ? AND due_at = ?", [key, was])
            else:
                sql.execute(
                    "UPDATE {due} SET due_at = ?, plain = 0 WHERE game_id = ? AND due_at = ?",
                    [_micros(after), key, was],
                )

        self.views.write(self.index, change)

    def run(self, stop: threading.Event) -> None:
        """Follow the log and do what is due, until ``stop`` is set."""
        log.info("scheduler: following the log")
        while not stop.is_set():
            stop.wait(self.step())

    def step(self) -> float:
        """One pass: the views moved on, what is due done, then the chores (seeks paired, …);
        how long to wait before the next (``poll``, or less when something falls due sooner)."""
        self.upcoming = None
        try:
            # The due-index first: what is due is done with every game planned anew.
            self.views.move_on((self.index, *self.others))
            self.run_due()
        except ApplicationError as exc:  # e.g. the store is unavailable: try again soon
            log.warning("scheduler: %s", exc.detail)
        for chore in self.chores:
            try:
                chore()
            except ApplicationError as exc:
                log.warning("scheduler: %s", exc.detail)
            except Exception as exc:  # one chore's trouble never stops the loop
                log.exception("scheduler: a chore failed: %s", describe(exc))
        wait = self.poll
        seen = self.upcoming
        if seen is not None:
            due = seen[0]
        else:  # something was done, or run_due did not run to its end
            try:
                due = self.next_due
            except ApplicationError:
                due = None
        if due is not None:
            wait = min(wait, max(0.0, (due - self.clock()).total_seconds()))
        return wait
