"""``GET /v1/accounts/{handle}/fair-play`` (contract 1.3): per account and pool, how often its
contested decisions in finished rated games matched the expert's, its mean loss on them, and
the pool's distribution of match rates beside them (what the figures mean: domain/fairplay.py
and docs/ratings.md, "Fair-play figures").

**A summary table, one row per (game, seat)** (``cantstop_fair_play``): a finished rated game's
kept analysis (``cantstop_analyses``, analysis/analyst.py) is read once and summed into a few
numbers per seat. The games come from the ratings view's own table, so a game counts
here exactly when it counts in the ratings: never an imported, unrated or aborted one (its
``places`` are NULL). Rows are written with ``ON CONFLICT DO NOTHING``: two processes that
summarise one game at once write the same rows, and the first stay.

**Catching up** (``catch_up``) finds the rated games with a kept analysis and no rows yet, a few
at a time: the scheduler's loop does it (``poll``), and so does the endpoint before it reads
(``step``, fewer games), so the figures follow the analyses without anyone asking. The search
scans the ratings' games (about 60 ms for 100,000 on SQLite), so a process runs it at most once
every ``SCAN_EVERY`` seconds, at once again while a backlog remains.

**Cheap to read.** An account's figures are one indexed ``GROUP BY`` over its own rows. A pool's
distribution (over every account of the pool with at least ``POOL_MINIMUM`` contested
decisions, bot accounts left out: it describes people's play) is cached in the process for
``POOL_TTL`` seconds, so a thousand requests cost one scan of the pool a minute.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

from domain.analysis import KEY as ANALYSIS_KEY
from domain.fairplay import CONTESTED, percentile, seat_figures
from domain.strategies.expert import ExpertStrategy
from service.application.analysis.analyst import Analyst, StoredAnalyses
from service.application.analysis.jobs import MAX_VERSIONS
from service.application.errors import ApplicationError, NotFound
from service.application.games.use_cases import Games
from service.application.players.accounts import Accounts
from service.application.players.standings import RatingsView
from service.persistence.errors import StoreUnavailable
from service.persistence.tables import SideTable
from service.persistence.views import Sql, Views

log = logging.getLogger("cantstop.fairplay")

POOL_MINIMUM = 100
"""Contested decisions an account needs to count in its pool's distribution: about five games of
two (a seat has about 22 a game). The rule of 28's match rate is 0.70 to 1.00 over one game,
0.76 to 0.85 over five (docs/ratings.md)."""
POOL_TTL = 60.0
"""Seconds a process keeps a pool's distribution."""
SCAN_EVERY = 1.0
"""Seconds between a process's searches for games to summarise, unless a backlog remains."""
POLL_LIMIT = 200
"""Games the scheduler's loop summarises at each search."""
REQUEST_LIMIT = 20
"""Games a request summarises before it reads (a few ms each: the analysis is parsed)."""
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


class FairPlayTable(SideTable):
    TABLE = "cantstop_fair_play"

    def create_table(self) -> None:
        def create(sql: Sql) -> None:
            sql.execute(
                f"CREATE TABLE IF NOT EXISTS {self.TABLE} (game_id TEXT NOT NULL, "
                "seat INTEGER NOT NULL, account TEXT NOT NULL, pool TEXT NOT NULL, "
                "bot INTEGER NOT NULL, decisions INTEGER NOT NULL, contested INTEGER NOT NULL, "
                "matched INTEGER NOT NULL, loss DOUBLE PRECISION NOT NULL, "
                "strategy_version TEXT NOT NULL, PRIMARY KEY (game_id, seat))"
            )
            sql.execute(
                f"CREATE INDEX IF NOT EXISTS {self.TABLE}_account ON {self.TABLE} (account, pool)"
            )
            sql.execute(
                f"CREATE INDEX IF NOT EXISTS {self.TABLE}_pool ON {self.TABLE} (pool, account)"
            )

        self.transaction(create)


class FairPlay:
    def __init__(
        self,
        games: Games,
        views: Views,
        ratings: RatingsView,
        accounts: Accounts,
        analyst: Analyst,
        *,
        create_tables: bool,
    ) -> None:
        self.views = views
        self.ratings = ratings
        self.accounts = accounts
        self.analyst = analyst
        self.games = games
        stored = analyst.stored  # the analyses' store is this table's
        self.table = FairPlayTable(stored.datastore, "postgres" if stored.postgres else "sqlite")
        if create_tables:
            self.table.create_table()
        self._lock = threading.Lock()  # held only for the fields below, never for work
        self._next_scan = 0.0
        self._pools: dict[str, tuple[float, dict[str, Any]]] = {}
        self._passed: set[str] = set()  # games this process cannot summarise (logged once)
        self.summarised = 0  # games this process summarised (tests read these three)
        self.searches = 0  # searches for games to summarise
        self.pool_reads = 0  # pools' distributions read from the table

    # ------------------------------------------------------------------------------ writing
    def step(self, limit: int = REQUEST_LIMIT, *, fresh: bool = True) -> int:
        """``catch_up(limit)`` unless this process searched less than ``SCAN_EVERY`` seconds
        ago and found no backlog then; how many games it summarised."""
        with self._lock:
            now = time.monotonic()
            if now < self._next_scan:
                return 0
            self._next_scan = now + SCAN_EVERY
        done = self.catch_up(limit, fresh=fresh)
        if done >= limit:  # more may wait: the next step searches again at once
            with self._lock:
                self._next_scan = 0.0
        return done

    def poll(self) -> None:
        """The scheduler's chore (its loop has just moved the ratings view on)."""
        self.step(POLL_LIMIT, fresh=False)

    def catch_up(self, limit: int = POLL_LIMIT, *, fresh: bool = True) -> int:
        """Summarise up to ``limit`` finished rated games that have a kept analysis and no
        rows yet; how many were summarised. ``fresh``: the ratings view caught up first."""
        version = ANALYSIS_KEY

        def find(sql: Sql) -> list[Any]:
            return sql.all(
                f"SELECT g.game_id, g.pool, g.accounts FROM {{games}} g "
                f"WHERE g.places IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "
                f"{FairPlayTable.TABLE} f WHERE f.game_id = g.game_id) AND EXISTS (SELECT 1 "
                f"FROM {StoredAnalyses.TABLE} a WHERE a.game_id = g.game_id "
                "AND a.strategy_version = ?) LIMIT ?",
                [version, limit + len(self._passed)],
            )

        with self._lock:
            self.searches += 1
        found = self.views.read(self.ratings, find, fresh=fresh)
        rows = [r for r in found if r["game_id"] not in self._passed]
        done = 0
        for row in rows[:limit]:
            try:
                if self._summarise(row["game_id"], row["pool"], json.loads(row["accounts"])):
                    done += 1
            except StoreUnavailable as exc:  # the next search tries again
                log.warning("fair play: game %s: %s", row["game_id"], exc.detail)
                break
            except ApplicationError as exc:  # a damaged game: the others go on
                self._pass(row["game_id"], exc.detail)
        return done

    def _summarise(self, game_id: str, pool: str, accounts: list[str]) -> bool:
        analysis = self._kept(uuid.UUID(game_id))
        if analysis is None:
            return False
        if self.games.store.is_imported(uuid.UUID(game_id)):  # never rated: kept out here too
            self._pass(game_id, "an imported game")
            return False
        try:
            figures = seat_figures(analysis, len(accounts))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            self._pass(game_id, f"its kept analysis gives no figures: {exc}")
            return False
        bots = {handle.lower(): self._bot(handle) for handle in set(accounts)}
        strategy = str(analysis.get("strategy_version", ExpertStrategy.version))

        def write(sql: Sql) -> None:
            for seat in figures:
                handle = accounts[seat.seat].lower()
                sql.execute(
                    f"INSERT INTO {FairPlayTable.TABLE} (game_id, seat, account, pool, bot, "
                    "decisions, contested, matched, loss, strategy_version) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (game_id, seat) DO NOTHING",
                    [
                        game_id,
                        seat.seat,
                        handle,
                        pool,
                        int(bots[handle]),
                        seat.decisions,
                        seat.contested,
                        seat.matched,
                        seat.loss,
                        strategy,
                    ],
                )

        self.table.transaction(write)
        with self._lock:
            self.summarised += 1
            self._pools.pop(pool, None)  # this process's readers see the game at once
        return True

    def _bot(self, handle: str) -> bool:
        try:
            return self.accounts.account(handle).bot
        except NotFound:  # not an account (never in a rated game): counted as a person
            return False

    def _pass(self, game_id: str, why: str) -> None:
        with self._lock:
            if game_id in self._passed:
                return
            self._passed.add(game_id)
        log.warning("fair play: game %s is not summarised: %s", game_id, why)

    def _kept(self, game_id: uuid.UUID) -> dict[str, Any] | None:
        """The finished game's kept analysis, or None; never computed here. A game longer than
        ``MAX_VERSIONS`` is kept analysed up to there, not to its finish (jobs.AnalysisFeed):
        its first ``MAX_VERSIONS`` versions count."""
        found = self.analyst.kept(game_id)
        if found is None:
            return None
        return found if found.get("finished") or found.get("version") == MAX_VERSIONS else None

    # ------------------------------------------------------------------------------ reading
    def figures(self, handle: str) -> dict[str, Any]:
        """The account's figures per pool (NotFound for an unknown account)."""
        self.accounts.account(handle)
        self.step()
        rows = self.table.execute(
            "SELECT pool, count(*) AS games, sum(decisions) AS decisions, "
            "sum(contested) AS contested, sum(matched) AS matched, sum(loss) AS loss "
            f"FROM {FairPlayTable.TABLE} WHERE account = ? GROUP BY pool ORDER BY pool",
            [handle.lower()],
            fetch="all",
        )
        pools = []
        for row in rows:
            contested, matched = int(row["contested"]), int(row["matched"])
            pools.append(
                {
                    "pool": row["pool"],
                    "games": int(row["games"]),
                    "decisions": int(row["decisions"]),
                    "contested": contested,
                    "matched": matched,
                    "match_rate": matched / contested if contested else None,
                    "mean_loss": float(row["loss"]) / contested if contested else None,
                    **self.pool(row["pool"]),
                }
            )
        return {"threshold": CONTESTED, "pool_minimum": POOL_MINIMUM, "pools": pools}

    def pool(self, pool: str) -> dict[str, Any]:
        """The pool's distribution of match rates (``pool_match_rate``, and how many accounts it
        is over), kept ``POOL_TTL`` seconds."""
        now = time.monotonic()
        with self._lock:
            cached = self._pools.get(pool)
        if cached is not None and cached[0] > now:
            return cached[1]
        rows = self.table.execute(
            "SELECT sum(contested) AS contested, sum(matched) AS matched "
            f"FROM {FairPlayTable.TABLE} WHERE pool = ? AND bot = 0 GROUP BY account "
            "HAVING sum(contested) >= ?",
            [pool, POOL_MINIMUM],
            fetch="all",
        )
        rates = sorted(int(r["matched"]) / int(r["contested"]) for r in rows)
        with self._lock:
            self.pool_reads += 1
        found = {
            "pool_match_rate": {k: percentile(rates, q) for k, q in QUANTILES.items()},
            "pool_accounts": len(rates),
        }
        with self._lock:
            self._pools[pool] = (now + POOL_TTL, found)
        return found


__all__ = ["FairPlay", "FairPlayTable"]
