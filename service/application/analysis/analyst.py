"""``GET /v1/games/{id}/analysis``: what was luck and what was play (domain/analysis.py), kept,
and worked out as a job (service/application/analysis/jobs.py, contract 1.3).

**Never in a request's thread.** A request answers what is kept (this process's memory, a
finished game's row in ``cantstop_analyses``, a version's answer in its job's row), or queues
the job and answers how it stands (202 with its progress); the workers of ``cantstop worker``
work it out. The analysis is dear (two to seven seconds of CPU for a whole game, docs/
analysis.md) and anyone may ask for it: in a request thread it tied up the threads that serve
the games' actions, and its caches grew a worker by hundreds of megabytes.

**Kept in a table, not a view.** The analysis is a pure function of a game's events and of the
expert's version: a View filled on every ``GameFinished`` would spend it on every finished game,
and a rebuild would redo them all. A finished game is analysed when somebody first asks (its
player's page asks as the game ends), or as it finishes when it was rated (the fair-play
figures read them); its answer is kept in ``cantstop_analyses``, keyed by game and by the
expert's ``strategy_version``: a new expert makes old rows unread (they are worked out again on
demand), and nothing ever needs a rebuild.

**Bounded in bytes.** This process keeps the answers it served, as JSON text, up to
``CACHE_BYTES`` (least recently served dropped first); nothing of the analysis itself.

**What it reveals**: only the events up to the version, which ``/events`` serves already; never
the seed, and nothing about dice to come (the values are expectations over every roll). A
history the rules refuse, or a stored event that cannot be read, is ``corrupt_game`` at its
version; an unknown game or version is the same 404 as ``/advice``'s.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from domain.analysis import KEY as ANALYSIS_KEY
from service.application.analysis.jobs import (
    COOL_DOWN,
    FINAL,
    MAX_VERSIONS,
    RETRY_AFTER,
    VERSION_GONE,
    AnalysisFailed,
    AnalysisJobs,
    Job,
    JobConfig,
    Worker,
)
from service.application.errors import GameTooLong
from service.application.games.use_cases import Games
from service.persistence.errors import CorruptGame
from service.persistence.sqlite import SQLiteStore
from service.persistence.tables import SideTable

log = logging.getLogger("cantstop.analysis")

CACHE_BYTES = 32 * 1024 * 1024
"""Answers kept in this process's memory, as JSON text, in bytes (a whole game of two is 50 to
150 kB: a few hundred answers)."""


@dataclass(frozen=True)
class Kept:
    """An analysis as it is answered: its version and its JSON text."""

    version: int
    text: str


@dataclass(frozen=True)
class Pending:
    """An analysis being worked out: 202 with how its job stands."""

    status: str
    progress: float
    retry_after: int = RETRY_AFTER


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
    def __init__(
        self, games: Games, *, create_tables: bool, config: JobConfig | None = None
    ) -> None:
        self.games = games
        self.config = config or JobConfig()
        datastore = getattr(games.store.recorder, "datastore", None)
        dialect = "sqlite" if isinstance(games.store.factory, SQLiteStore) else "postgres"
        if datastore is None:  # an in-memory store (a few tests): nowhere to queue
            raise RuntimeError("the analysis needs a stored event store")
        self.stored = StoredAnalyses(datastore, dialect)
        self.jobs = AnalysisJobs(datastore, dialect)
        if create_tables:
            self.stored.create_table()
            self.jobs.create_table()
        self._answers: OrderedDict[tuple[uuid.UUID, int], Kept] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def analysis(
        self, game_id: uuid.UUID, version: int | None = None, client: str = "anonymous"
    ) -> Kept | Pending:
        """The analysis of the game up to ``version`` (default: the latest) when it is kept,
        else how its job stands (queued for ``client`` if there was none)."""
        state = self.games.state(game_id, version)  # NotFound for an unknown game or version
        at = int(state["version"])
        latest = version is None or at == int(self.games.state(game_id)["version"])
        final = state["status"] == "finished" and latest
        key = (game_id, at)
        with self._lock:
            known = self._answers.get(key)
            if known is not None:
                self._answers.move_to_end(key)
                return known
        if final:
            stored = self._from_store(game_id, at)
            if stored is not None:
                return self._keep(key, stored)
        if at > MAX_VERSIONS:  # (one kept before the maximum is served)
            raise GameTooLong(
                f"game {game_id} has {at} versions; the analysis takes games of at most "
                f"{MAX_VERSIONS}"
            )
        job = self.jobs.get(game_id, FINAL if final else at)
        if job is None:
            job = self.jobs.enqueue(game_id, FINAL if final else at, client)
        if job.status == "done":
            text = self._from_store(game_id, at) if final else job.answer
            if text is not None:
                return self._keep(key, text)
            job = self.jobs.requeue(job, client)  # its answer is gone: worked out again
        if job.status == "failed":
            job = self._failed(job, client)
        return Pending(job.status, job.progress)

    def kept(self, game_id: uuid.UUID) -> dict[str, Any] | None:
        """A finished game's analysis as kept, without working anything out (None when it is
        not kept yet: a rated game's is queued as it finishes)."""
        row = self.stored.get(game_id, ANALYSIS_KEY)
        if row is None:
            return None
        found: dict[str, Any] = json.loads(row[1])
        return found

    def worker(self, name: str | None = None) -> Worker:
        """A worker of this process's queue (the analysis processes run one each; tests step
        one in process)."""
        return Worker(self.games, self.jobs, self.config, name)

    def _failed(self, job: Job, client: str) -> Job:
        """A failed job: answered as failed while it cools down, then queued again; at once if
        it failed for a version the store held no more (a backup restored), since the caller
        has just read that version."""
        assert job.finished_at is not None
        if (job.error or {}).get("reason") == VERSION_GONE:
            return self.jobs.requeue(job, client)
        left = job.finished_at + COOL_DOWN - time.time()
        if left <= 0:
            return self.jobs.requeue(job, client)
        error = job.error or {}
        if error.get("reason") == "corrupt_game":
            raise CorruptGame(
                str(error.get("detail", f"game {job.game_id} is damaged")),
                version=error.get("version"),
            )
        detail = {
            "cpu deadline": f"it ran past its CPU deadline ({self.config.cpu_seconds:g} s)",
            "memory": "it ran past its worker's memory budget",
        }.get(str(error.get("reason")), "its workers stopped before it was done")
        raise AnalysisFailed(
            f"the analysis of game {job.game_id} failed: {detail}; it may be asked for again "
            f"in {math.ceil(left)} s",
            retry_after=math.ceil(left),
        )

    def _keep(self, key: tuple[uuid.UUID, int], text: str) -> Kept:
        answer = Kept(key[1], text)
        with self._lock:
            if key not in self._answers and len(text) <= CACHE_BYTES:  # ASCII: one byte each
                self._answers[key] = answer
                self._bytes += len(text)
                while self._bytes > CACHE_BYTES:
                    _, dropped = self._answers.popitem(last=False)
                    self._bytes -= len(dropped.text)
        return answer

    def _from_store(self, game_id: uuid.UUID, version: int) -> str | None:
        row = self.stored.get(game_id, ANALYSIS_KEY)
        if row is None or row[0] != version:
            return None
        return row[1]
