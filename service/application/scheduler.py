"""Who records what happens without a request (timeouts, computer players' turns, abandonment):
one loop per scheduling process, following the notification log.

The loop keeps, in memory, when something is next due in every game that is not finished (a
due-index, rebuilt from the log whenever the process starts, so nothing is lost when one dies):
each event it reads makes it plan that game again (``Timekeeper.due_at``), and when a time comes
it asks ``Timekeeper.tick`` to do what is due. Several such processes may run, on several hosts:
the store lets exactly one of them record each change (the game's next version), so a deadline
gives one ``TurnTimedOut`` and a bot's turn one action, whoever was first; the others read the
change in the log and plan again. Redis is not needed.

Most games are between people without a clock: there, the only thing ever due is abandonment,
and every new event only pushes it later. So such a game ("plain") is not read again for each
event: its plan stays as it was (early, never late), and when that time comes ``tick`` finds
nothing due and plans the true time. Only events that may seat a computer player (a creation,
a seat taken or given back) plan a plain game again; a finished game is dropped unread.
"""

from __future__ import annotations

import heapq
import logging
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from eventsourcing.utils import get_topic

from domain.game import Game
from service.application.errors import ApplicationError, describe
from service.application.games import GAME_TOPICS, Games
from service.persistence.log import LogReader
from service.application.timekeeper import Timekeeper

log = logging.getLogger("cantstop.scheduler")

POLL = 0.25  # seconds between reads of the log
PAGE = 1000
# After these, a game without a clock or computer players may have one: plan it again.
CREATED = get_topic(Game.GameCreated)
REPLAN = frozenset({CREATED, *(get_topic(c) for c in (Game.SeatJoined, Game.SeatLeft))})
# After these, nothing more is due in the game.
FINAL = frozenset(get_topic(c) for c in (Game.GameFinished, Game.GameAbandoned))


def utcnow() -> datetime:
    return datetime.now(UTC)


class Scheduler:
    def __init__(
        self,
        games: Games,
        timekeeper: Timekeeper,
        *,
        poll: float = POLL,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.games = games
        self.timekeeper = timekeeper
        self.poll = poll
        self.clock = clock
        self.reader = LogReader(games.recorder, tuple(GAME_TOPICS))
        self._heap: list[tuple[datetime, str]] = []
        self._planned: dict[uuid.UUID, datetime] = {}
        self._plain: set[uuid.UUID] = set()  # planned, no clock, no computer player

    # ------------------------------------------------------------------------------ planning
    def refresh(self) -> int:
        """Read what was recorded since the last read, and plan those games again (a plain
        game only after an event that may seat a computer player); how many were planned."""
        touched: dict[uuid.UUID, set[str]] = {}
        while True:
            page = self.reader.heads(PAGE)  # whose each event is and its topic, no state
            for head in page:
                touched.setdefault(head.originator_id, set()).add(head.topic)
            if len(page) < PAGE:
                break
        planned = 0
        for game_id, topics in touched.items():
            if topics & FINAL:
                self._schedule(game_id, None)
            elif game_id not in self._plain or topics & REPLAN:
                self.plan(game_id, created=topics & REPLAN == {CREATED})
                planned += 1
        return planned

    def plan(self, game_id: uuid.UUID, *, created: bool = False) -> None:
        """Plan the game's next due time. ``created``: its creation is among what was just read,
        and no seat was taken or given back since. Then the game as created says whether it is
        plain, and a plain game's plan from its first event is early, never late (as any plain
        game's is): the rest of it is not read."""
        plain = False
        try:
            first = self.games.at_creation(game_id) if created else None
            if first is not None and self.timekeeper.only_abandonment(first):
                due, plain = self.timekeeper.due_at(first), True
            else:
                with self.games.owned(game_id) as game:
                    due = self.timekeeper.due_at(game)
                    plain = self.timekeeper.only_abandonment(game)
        except ApplicationError as exc:  # a damaged or vanished game: nothing to plan
            log.warning("scheduler: cannot plan game %s: %s", game_id, exc.detail)
            due = None
        self._schedule(game_id, due)
        if plain and due is not None:
            self._plain.add(game_id)

    def _schedule(self, game_id: uuid.UUID, due: datetime | None) -> None:
        self._plain.discard(game_id)  # planned again: plain again only if plan() says so
        if due is None:
            self._planned.pop(game_id, None)
            return
        if self._planned.get(game_id) == due:
            return
        self._planned[game_id] = due
        heapq.heappush(self._heap, (due, str(game_id)))

    @property
    def next_due(self) -> datetime | None:
        while self._heap:
            due, key = self._heap[0]
            if self._planned.get(uuid.UUID(key)) == due:
                return due
            heapq.heappop(self._heap)  # replaced by a later plan
        return None

    # ------------------------------------------------------------------------------ running
    def run_due(self) -> int:
        """Do everything due by now; how many steps were taken."""
        steps = 0
        while (due := self.next_due) is not None and due <= self.clock():
            _, key = heapq.heappop(self._heap)
            game_id = uuid.UUID(key)
            del self._planned[game_id]
            try:
                after = self.timekeeper.tick(game_id, self.clock())
            except ApplicationError as exc:
                log.warning("scheduler: game %s: %s", game_id, exc.detail)
                after = None
            except Exception as exc:  # one game's trouble never stops the others
                log.exception("scheduler: game %s failed: %s", game_id, describe(exc))
                after = None
            self._schedule(game_id, after)
            steps += 1
        return steps

    def run(self, stop: threading.Event) -> None:
        """Follow the log and do what is due, until ``stop`` is set."""
        log.info("scheduler: following the log")
        while not stop.is_set():
            try:
                self.refresh()
                self.run_due()
            except ApplicationError as exc:  # e.g. the store is unavailable: try again soon
                log.warning("scheduler: %s", exc.detail)
            wait = self.poll
            due = self.next_due
            if due is not None:
                wait = min(wait, max(0.0, (due - self.clock()).total_seconds()))
            stop.wait(wait)
