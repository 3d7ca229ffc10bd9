"""``GET /v1/games/{id}/analysis``: what was luck and what was play (domain/analysis.py), kept.

**Kept in a table filled on first request, not in a view.** The analysis is a pure function of a
game's events and of the expert's version, and it is dear: about two seconds of CPU for a game
of two players, three to seven for eight-sided dice (docs/analysis.md). A ``View`` filled by the
scheduler on ``GameFinished`` would spend that on every finished game whether anyone looks, and a
``cantstop projections rebuild`` would redo it for every game in the store: about 40 hours of
CPU for 100,000 games, during which new games wait behind the old. Here a finished game is
analysed when somebody first asks (its player's page asks as the game ends), and its answer
is kept in ``cantstop_analyses``, keyed by game and by the expert's ``strategy_version``: a new
expert makes old rows unread (they are recomputed on demand, as asked for), and nothing ever
needs a rebuild. The row is written with ``ON CONFLICT DO NOTHING``: two workers that analyse
the same game at once write the same answer, and the first one stays.

**A game in progress**, or a finished game's past version (``?version=N``), is analysed up to
that version and the answer kept in this process's memory per (game, version), a few thousand
answers: an old version never changes. The analysis itself is kept running per game
(``domain.analysis.Analysis``, the last ``RUNNING`` games asked about): the next version costs
only the steps since the last one asked (0.4 ms at the median, 20 to 50 ms at a roll, where
the whole game again cost a second or more), and any earlier version costs nothing more.

**Bounded.** Answers in memory and rows in the table are read at once, never behind a
computation. At most ``COMPUTING`` analyses are worked out at once in a process (they are pure
Python: the GIL would serialise them anyway), each in the thread of the request that asked
first; requests for the same (game, version) share its one computation. At most ``WAITING``
requests wait for a computation, each at most ``WAIT`` seconds: beyond either bound the answer
is 503 ``analysis_busy`` with Retry-After, so analyses never tie up more than a few of a
worker's threads (the ones that also serve the games' actions). A request that gives up
leaves the computation it waited for to finish and keep its answer for the retry.

**What it reveals**: only the events up to the version, which ``/events`` serves already; never
the seed, and nothing about dice to come (the values are expectations over every roll). A
history the rules refuse, or a stored event that cannot be read, is ``corrupt_game`` at its
version; an unknown game or version is the same 404 as ``/advice``'s.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any

from domain.analysis import Analysis, AnalysisRefused
from domain.strategies.expert import ExpertStrategy
from service.application.errors import ApplicationError
from service.application.games import Games
from service.persistence.errors import CorruptGame
from service.persistence.sqlite import SQLiteStore
from service.persistence.tables import SideTable

log = logging.getLogger("cantstop.analysis")

CACHE = 2_000
"""Answers kept in memory, by (game, version)."""
RUNNING = 32
"""Games whose analysis is kept running (least recently asked about dropped first): about
1.5 MB each, mostly the expert's planner of the turn under way."""
COMPUTING = 1
"""Analyses worked out at once in a process."""
WAITING = 8
"""Requests that may wait at once for an analysis to be worked out; more are analysis_busy."""
WAIT = 3.0
"""Seconds a request waits for its analysis to be worked out before it is analysis_busy: about
a whole game of two players analysed from scratch (1.3 to 2.6 s, docs/analysis.md)."""
RETRY_AFTER = 5
"""The Retry-After of analysis_busy, in seconds: by then the analysis asked for is usually kept."""


class AnalysisBusy(ApplicationError):
    """Too many analyses are being worked out or waited for in this process: retry later."""

    code = "analysis_busy"
    retry_after = RETRY_AFTER


class _Flight:
    """One analysis being worked out, which the requests for the same (game, version) share."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: dict[str, Any] | None = None
        self.error: Exception | None = None


class StoredAnalyses(SideTable):
    """Finished games' analyses, beside the events (``cantstop_analyses``)."""

    TABLE = "cantstop_analyses"

    def create_table(self) -> None:
        self.execute(
            f"CREATE TABLE IF NOT EXISTS {self.TABLE} (game_id TEXT NOT NULL, "
            "strategy_version TEXT NOT NULL, version INTEGER NOT NULL, analysis TEXT NOT NULL, "
            "PRIMARY KEY (game_id, strategy_version))"
        )

    def get(self, game_id: uuid.UUID, strategy_version: str) -> tuple[int, str] | None:
        row = self.execute(
            f"SELECT version, analysis FROM {self.TABLE} "
            "WHERE game_id = ? AND strategy_version = ?",
            (str(game_id), strategy_version),
            fetch="one",
        )
        return None if row is None else (int(row["version"]), str(row["analysis"]))

    def put(self, game_id: uuid.UUID, strategy_version: str, version: int, text: str) -> None:
        self.execute(
            f"INSERT INTO {self.TABLE} (game_id, strategy_version, version, analysis) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (game_id, strategy_version) DO NOTHING",
            (str(game_id), strategy_version, version, text),
        )


class Analyst:
    def __init__(self, games: Games, *, create_tables: bool) -> None:
        self.games = games
        datastore = getattr(games.recorder, "datastore", None)
        dialect = "sqlite" if isinstance(games.factory, SQLiteStore) else "postgres"
        self.stored = StoredAnalyses(datastore, dialect) if datastore is not None else None
        if self.stored is not None and create_tables:
            self.stored.create_table()
        self._answers: OrderedDict[tuple[uuid.UUID, int], dict[str, Any]] = OrderedDict()
        self._running: OrderedDict[uuid.UUID, Analysis] = OrderedDict()
        self._flights: dict[tuple[uuid.UUID, int], _Flight] = {}
        self._waiting = 0
        self._lock = threading.Lock()  # held only to read and change the above, never to work
        self._computing = threading.BoundedSemaphore(COMPUTING)
        self.computed = 0  # analyses this process worked out (tests read it)
        self.stepped = 0  # the game steps they replayed and valued (tests read it)

    def analysis(self, game_id: uuid.UUID, version: int | None = None) -> dict[str, Any]:
        """The analysis of the game up to ``version`` (default: the latest). AnalysisBusy when
        it would wait too long, or behind too many others, for it to be worked out."""
        state = self.games.state(game_id, version)  # NotFound for an unknown game or version
        at = int(state["version"])
        latest = version is None or at == int(self.games.state(game_id)["version"])
        kept = self.stored is not None and state["status"] == "finished" and latest
        key = (game_id, at)
        with self._lock:
            known = self._known(key)
        if known is None and kept:
            known = self._from_store(game_id, at)
            if known is not None:
                self._keep(key, known)
        if known is not None:
            return known
        deadline = time.monotonic() + WAIT
        with self._lock:
            known = self._known(key)  # worked out meanwhile
            if known is not None:
                return known
            flight = self._flights.get(key)
            if flight is None:
                flight = self._flights[key] = _Flight()
                leader = True
            else:  # being worked out: wait for that answer
                if self._waiting >= WAITING:
                    raise self._busy(game_id, at)
                self._waiting += 1
                leader = False
        if leader:
            return self._lead(flight, key, kept, deadline)
        try:
            done = flight.done.wait(max(0.0, deadline - time.monotonic()))
        finally:
            with self._lock:
                self._waiting -= 1
        if not done or isinstance(flight.error, AnalysisBusy):
            raise self._busy(game_id, at)
        if flight.error is not None:
            raise flight.error
        assert flight.answer is not None
        return flight.answer

    def _lead(
        self, flight: _Flight, key: tuple[uuid.UUID, int], kept: bool, deadline: float
    ) -> dict[str, Any]:
        """Works the analysis out in this thread, once a computation's place is free."""
        game_id, at = key
        try:
            if not self._computing.acquire(blocking=False):
                with self._lock:
                    if self._waiting >= WAITING:
                        raise self._busy(game_id, at)
                    self._waiting += 1
                try:
                    free = self._computing.acquire(timeout=max(0.0, deadline - time.monotonic()))
                finally:
                    with self._lock:
                        self._waiting -= 1
                if not free:
                    raise self._busy(game_id, at)
            try:
                answer = self._work_out(game_id, at)
            finally:
                self._computing.release()
            if kept:
                assert self.stored is not None
                text = json.dumps(answer, separators=(",", ":"), allow_nan=False)
                self.stored.put(game_id, ExpertStrategy.version, at, text)
            self._keep(key, answer)
            flight.answer = answer
            return answer
        except Exception as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()

    def _known(self, key: tuple[uuid.UUID, int]) -> dict[str, Any] | None:
        """The answer kept in memory (the caller holds the lock)."""
        known = self._answers.get(key)
        if known is not None:
            self._answers.move_to_end(key)
        return known

    def _keep(self, key: tuple[uuid.UUID, int], answer: dict[str, Any]) -> None:
        with self._lock:
            self._answers[key] = answer
            self._answers.move_to_end(key)
            if len(self._answers) > CACHE:
                self._answers.popitem(last=False)

    @staticmethod
    def _busy(game_id: uuid.UUID, version: int) -> AnalysisBusy:
        return AnalysisBusy(
            f"the analysis of game {game_id} to version {version} would wait behind others "
            f"being worked out; retry in {RETRY_AFTER} s"
        )

    def _from_store(self, game_id: uuid.UUID, version: int) -> dict[str, Any] | None:
        assert self.stored is not None
        row = self.stored.get(game_id, ExpertStrategy.version)
        if row is None or row[0] != version:
            return None
        found: dict[str, Any] = json.loads(row[1])
        return found

    def _work_out(self, game_id: uuid.UUID, version: int) -> dict[str, Any]:
        records = self.games.history(game_id)  # CorruptGame where a stored event is damaged
        started = time.perf_counter()
        with self._lock:  # taken out while it is worked on: no other computation touches it
            running = self._running.pop(game_id, None)
        if running is None or running.records != records[: len(running.records)]:
            running = Analysis()  # new, or its history is not the one it followed: afresh
        steps = len(running.steps)
        try:
            running.extend(records[len(running.records) :])
            running.advance(version)
            answer = running.result(version)
        except AnalysisRefused as exc:
            log.error("game %s: no analysis: %s", game_id, exc.detail)
            raise CorruptGame(
                f"game {game_id} is damaged: the rules refuse its history at version "
                f"{exc.version} (see its /audit)",
                version=exc.version,
            ) from None
        with self._lock:
            self.computed += 1
            self.stepped += len(running.steps) - steps
            other = self._running.get(game_id)
            if other is None or other.reached < running.reached:
                self._running[game_id] = running
            self._running.move_to_end(game_id)
            if len(self._running) > RUNNING:
                self._running.popitem(last=False)
        log.info(
            "game %s: analysed to version %s in %.3f s (%d new steps)",
            game_id,
            version,
            time.perf_counter() - started,
            len(running.steps) - steps,
        )
        return answer
