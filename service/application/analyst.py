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
that version on each request and kept in this process's memory per (game, version), a few
thousand answers: the next version is a new answer, and an old version never changes. Only one
analysis runs at a time in a process (they are pure Python: the GIL would serialise them anyway,
and a second request for the same answer waits for the first and reads it).

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

from domain.analysis import AnalysisRefused, analyse
from domain.strategies.expert import ExpertStrategy
from service.application.games import Games
from service.persistence.errors import CorruptGame
from service.persistence.sqlite import SQLiteStore
from service.persistence.tables import SideTable

log = logging.getLogger("cantstop.analysis")

CACHE = 2_000


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
        self._lock = threading.Lock()
        self.computed = 0  # analyses this process worked out (tests read it)

    def analysis(self, game_id: uuid.UUID, version: int | None = None) -> dict[str, Any]:
        """The analysis of the game up to ``version`` (default: the latest)."""
        state = self.games.state(game_id, version)  # NotFound for an unknown game or version
        at = int(state["version"])
        latest = version is None or at == int(self.games.state(game_id)["version"])
        kept = self.stored is not None and state["status"] == "finished" and latest
        key = (game_id, at)
        with self._lock:  # one analysis at a time; the same one is worked out once
            known = self._answers.get(key)
            if known is not None:
                self._answers.move_to_end(key)
                return known
            answer = self._from_store(game_id, at) if kept else None
            if answer is None:
                answer = self._work_out(game_id, at)
                if kept:
                    assert self.stored is not None
                    text = json.dumps(answer, separators=(",", ":"), allow_nan=False)
                    self.stored.put(game_id, ExpertStrategy.version, at, text)
            self._answers[key] = answer
            if len(self._answers) > CACHE:
                self._answers.popitem(last=False)
        return answer

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
        try:
            answer = analyse(records, version)
        except AnalysisRefused as exc:
            log.error("game %s: no analysis: %s", game_id, exc.detail)
            raise CorruptGame(
                f"game {game_id} is damaged: the rules refuse its history at version "
                f"{exc.version} (see its /audit)",
                version=exc.version,
            ) from None
        self.computed += 1
        log.info(
            "game %s: analysed to version %s in %.2f s",
            game_id,
            version,
            time.perf_counter() - started,
        )
        return answer
