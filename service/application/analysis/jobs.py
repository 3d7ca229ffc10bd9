"""Analysis as a job (contract 1.3): a queue of analyses in the store, worked by child processes
of ``cantstop worker`` on any host, never in a request's thread (docs/analysis.md, "Analysis as
a job").

**The queue** is ``cantstop_analysis_jobs``: one row per (game, version or ``FINAL``, expert's
``strategy_version``), created by a conditional insert, so two requests make one job. A row is
``queued``, ``running`` (with a ``progress`` 0..1 and a lease), ``done`` or ``failed``. A
finished game's whole analysis goes to ``cantstop_analyses`` (the analyst's kept answers); any
other version's answer is kept in the job's row (an old version never changes).

**Fair.** A client (an account, else an address) holds at most ``PER_CLIENT`` unfinished jobs:
each takes one of its ``slot`` numbers, unique among unfinished rows (a partial unique index),
so the cap holds under concurrency; one more is ``too_many_analyses``. A worker takes the oldest
job of the client served least recently, so a client that fills the queue waits its turn
behind each of the others' oldest job. Finished rated games are queued by the ``system``
client, without a cap (``AnalysisFeed``).

**Leased.** A worker claims a job for ``lease`` seconds (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, a conditional UPDATE on SQLite) and renews it with each progress report; a job
whose worker died is taken again once its lease ends (at most ``ATTEMPTS`` claims, then it
fails). Each job has a CPU deadline; a job past it fails, and a failed job is answered
``analysis_failed`` until ``COOL_DOWN`` has passed, when a new request queues it again.

**Bounded in bytes.** Each worker is a child process that exits once its resident memory
passes ``rss_bytes`` (the expert's caches and the games it follows included); its parent
(``Supervisor``) starts another.
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import IntegrityError
from eventsourcing.utils import get_topic

from domain.analysis import KEY as ANALYSIS_KEY
from domain.analysis import Analysis, AnalysisRefused
from domain.game import Game
from domain.strategies.turn import Shared
from service import collector
from service.application.errors import ApplicationError
from service.application.games.use_cases import Games
from service.application.players.standings import rated_game
from service.config import env_number
from service.persistence.errors import StoreUnavailable
from service.persistence.tables import SideTable, Sql
from service.persistence.views import View

log = logging.getLogger("cantstop.analysis")

FINAL = 0
"""The ``version`` of a finished game's whole analysis (versions start at 1)."""
MAX_VERSIONS = 1_000
"""The longest history analysed; longer is ``game_too_long``. At the dearest rate measured (43 ms
a version, docs/analysis.md) 1,000 versions take 43 s of CPU: within ``cpu_seconds``."""
PER_CLIENT = 4
"""Unfinished jobs a client may hold at once; one more is ``too_many_analyses``."""
COOL_DOWN = 600.0
"""Seconds a failed job is answered as failed before a new request may queue it again."""
ATTEMPTS = 3
"""Claims of a job whose workers keep dying before it fails."""
RETRY_AFTER = 2
"""The Retry-After of a 202, in seconds: a game of two is usually analysed by then."""
SYSTEM = "system"
"""The client of the jobs queued for finished rated games."""
KEEP = 3_600.0
"""Seconds a finished job's row is kept at least (a version's answer, or its failure; pruned
hourly): long enough to be fetched and to cool down, short enough that asking for every version
of long games, one after another, cannot fill the store (a version's answer is up to ~300 kB)."""
RUNNING = 8
"""Games a worker keeps following (their analyses go on from where they stood)."""
TICK = 0.5
"""Seconds between a running job's progress reports (each renews its lease)."""
HEADROOM = 256 * 1024 * 1024
"""Bytes past its budget at which a worker fails the job under way (checked at each report):
one job of at most ``MAX_VERSIONS`` needs far less (docs/analysis.md)."""

STATUSES = ("queued", "running", "done", "failed")
UNFINISHED = "('queued', 'running')"


VERSION_GONE = "version_gone"
"""A failed job's reason: its version is no longer in the store (it went back to a backup)."""


class VersionGone(Exception):
    """A job's version is past the history the store holds now."""

    def __init__(self, version: int) -> None:
        super().__init__(f"no version {version} in the store")
        self.version = version


class TooManyAnalyses(ApplicationError):
    code = "too_many_analyses"
    retry_after = RETRY_AFTER


class AnalysisFailed(ApplicationError):
    code = "analysis_failed"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


@dataclass(frozen=True)
class JobConfig:
    """The workers' settings (``CANTSTOP_ANALYSIS_*``)."""

    workers: int = 1
    """Analysis processes ``cantstop worker`` keeps (0: this host runs none)."""
    cpu_seconds: float = 60.0
    """A job's CPU deadline: a game of two takes 1 to 3 s, the dearest measured 43 ms a version."""
    rss_bytes: int = 384 * 1024 * 1024
    """A worker's resident memory past which it is replaced (checked after each job): it starts
    at about 60 MB and grows some 12 MB a game, mostly the expert's caches."""
    lease: float = 30.0
    """Seconds a claim holds without a progress report (renewed every ``TICK``)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobConfig:
        return cls(
            workers=int(env_number(env, "CANTSTOP_ANALYSIS_WORKERS", 1, high=64, integer=True)),
            cpu_seconds=env_number(env, "CANTSTOP_ANALYSIS_CPU_SECONDS", 60.0, low=0.1),
            rss_bytes=int(
                env_number(
                    env, "CANTSTOP_ANALYSIS_RSS_BYTES", 384 * 1024 * 1024, low=1, integer=True
                )
            ),
            lease=env_number(env, "CANTSTOP_ANALYSIS_LEASE", 30.0, low=1.0, high=3600),
        )


@dataclass(frozen=True)
class Job:
    game_id: uuid.UUID
    version: int  # FINAL, or the version analysed up to
    strategy_version: str
    status: str
    progress: float
    client: str
    worker: str | None
    attempts: int
    finished_at: float | None
    error: dict[str, Any] | None
    answer: str | None

    @property
    def key(self) -> tuple[str, int, str]:
        return (str(self.game_id), self.version, self.strategy_version)


def _job(row: Any) -> Job:
    return Job(
        game_id=uuid.UUID(row["game_id"]),
        version=int(row["version"]),
        strategy_version=str(row["strategy_version"]),
        status=str(row["status"]),
        progress=float(row["progress"]),
        client=str(row["client"]),
        worker=row["worker"],
        attempts=int(row["attempts"]),
        finished_at=None if row["finished_at"] is None else float(row["finished_at"]),
        error=None if row["error"] is None else json.loads(row["error"]),
        answer=row["answer"],
    )


KEY = "game_id = ? AND version = ? AND strategy_version = ?"
CLAIMABLE = "(status = 'queued' OR (status = 'running' AND lease_until < ?))"


class AnalysisJobs(SideTable):
    """The queue (``cantstop_analysis_jobs``)."""

    TABLE = "cantstop_analysis_jobs"

    def create_table(self) -> None:
        t = self.TABLE
        for sql in (
            f"CREATE TABLE IF NOT EXISTS {t} (game_id TEXT NOT NULL, version INTEGER NOT NULL, "
            "strategy_version TEXT NOT NULL, status TEXT NOT NULL, "
            "progress DOUBLE PRECISION NOT NULL DEFAULT 0, client TEXT NOT NULL, slot INTEGER, "
            "created_at DOUBLE PRECISION NOT NULL, claimed_at DOUBLE PRECISION, "
            "lease_until DOUBLE PRECISION, worker TEXT, attempts INTEGER NOT NULL DEFAULT 0, "
            "finished_at DOUBLE PRECISION, error TEXT, answer TEXT, "
            "PRIMARY KEY (game_id, version, strategy_version))",
            # the per-client cap: a slot is held by one unfinished job of its client at most
            f"CREATE UNIQUE INDEX IF NOT EXISTS {t}_slots ON {t} (client, slot) "
            f"WHERE status IN {UNFINISHED}",
            f"CREATE INDEX IF NOT EXISTS {t}_queue ON {t} (status, client, created_at)",
            f"CREATE INDEX IF NOT EXISTS {t}_served ON {t} (client, claimed_at)",
        ):
            self.execute(sql)

    # ------------------------------------------------------------------------------ requests
    def get(self, game_id: uuid.UUID, version: int) -> Job | None:
        row = self.execute(
            f"SELECT * FROM {self.TABLE} WHERE {KEY}",
            (str(game_id), version, ANALYSIS_KEY),
            fetch="one",
        )
        return None if row is None else _job(row)

    def enqueue(self, game_id: uuid.UUID, version: int, client: str, *, capped: bool = True) -> Job:
        """The job for (game, version), queued for ``client`` unless it exists: two requests
        make one job. TooManyAnalyses when the client holds ``PER_CLIENT`` unfinished ones."""
        found = self.get(game_id, version)
        if found is not None:
            return found
        key = (str(game_id), version, ANALYSIS_KEY)
        for slot in range(PER_CLIENT) if capped else [None]:
            try:
                self.execute(
                    f"INSERT INTO {self.TABLE} (game_id, version, strategy_version, status, "
                    "client, slot, created_at) VALUES (?, ?, ?, 'queued', ?, ?, ?) "
                    "ON CONFLICT (game_id, version, strategy_version) DO NOTHING",
                    (*key, client, slot, time.time()),
                )
            except IntegrityError:  # this slot is held by another of the client's jobs
                continue
            break
        found = self.get(game_id, version)
        if found is None:
            raise TooManyAnalyses(
                f"{PER_CLIENT} analyses asked for by this client are not finished yet; "
                f"retry in {RETRY_AFTER} s"
            )
        return found

    def requeue(self, job: Job, client: str) -> Job:
        """A failed (or lost) job queued again for ``client``, under the same cap."""
        for slot in range(PER_CLIENT):
            try:
                self.execute(
                    f"UPDATE {self.TABLE} SET status = 'queued', progress = 0, client = ?, "
                    "slot = ?, created_at = ?, attempts = 0, worker = NULL, error = NULL, "
                    f"finished_at = NULL, answer = NULL WHERE {KEY} AND status IN ('failed', "
                    "'done')",
                    (client, slot, time.time(), *job.key),
                )
            except IntegrityError:
                continue
            found = self.get(job.game_id, job.version)
            assert found is not None
            return found
        raise TooManyAnalyses(
            f"{PER_CLIENT} analyses asked for by this client are not finished yet; "
            f"retry in {RETRY_AFTER} s"
        )

    # ------------------------------------------------------------------------------ workers
    def claim(self, worker: str, lease: float) -> Job | None:
        """The next job, fairly (the oldest of the client served least recently), leased to
        ``worker``; None when nothing is waiting. (Its ``attempts`` count this claim: the
        worker fails a job claimed more than ``ATTEMPTS`` times.)"""
        now = time.time()
        order = (
            f"ORDER BY (SELECT coalesce(max(claimed_at), 0) FROM {self.TABLE} k "
            "WHERE k.client = j.client), created_at"
        )
        take = (
            f"UPDATE {self.TABLE} SET status = 'running', worker = ?, claimed_at = ?, "
            "lease_until = ?, attempts = attempts + 1"
        )
        # Read first, in one statement of its own: an idle worker asks four times a second,
        # and on PostgreSQL the claim's transaction is three round trips.
        waiting = self.execute(
            f"SELECT 1 FROM {self.TABLE} WHERE {CLAIMABLE} LIMIT 1", (now,), fetch="one"
        )
        if waiting is None:
            return None
        if not self.postgres:
            # One statement, which takes SQLite's write lock before it reads: no upgrade of a
            # read to a write that another writer could make fail.
            row = self.execute(
                f"{take} WHERE (game_id, version, strategy_version) = (SELECT game_id, "
                f"version, strategy_version FROM {self.TABLE} j WHERE {CLAIMABLE} {order} "
                f"LIMIT 1) AND {CLAIMABLE} RETURNING *",
                (worker, now, now + lease, now, now),
                fetch="one",
            )
            return None if row is None else _job(row)

        def work(sql: Sql) -> Job | None:
            candidates = sql.all(
                f"SELECT game_id, version, strategy_version FROM {self.TABLE} j "
                f"WHERE {CLAIMABLE} {order} LIMIT 16",
                [now],
            )
            for row in candidates:
                key = [row["game_id"], row["version"], row["strategy_version"]]
                locked = sql.one(
                    f"SELECT 1 FROM {self.TABLE} WHERE {KEY} AND {CLAIMABLE} "
                    "FOR UPDATE SKIP LOCKED",
                    [*key, now],
                )
                if locked is None:
                    continue  # another worker holds it
                claimed = sql.one(
                    f"{take} WHERE {KEY} RETURNING *", [worker, now, now + lease, *key]
                )
                return _job(claimed)
            return None

        return self.transaction(work)

    def report(self, job: Job, worker: str, progress: float, lease: float) -> bool:
        """Progress, and the lease renewed; False when the job is no longer this worker's."""

        def work(sql: Sql) -> bool:
            now = time.time()
            row = sql.one(
                f"UPDATE {self.TABLE} SET progress = ?, lease_until = ? WHERE {KEY} AND "
                "status = 'running' AND worker = ? RETURNING version",
                [progress, now + lease, *job.key, worker],
            )
            return row is not None

        return self.transaction(work)

    def finish(self, job: Job, worker: str, text: str) -> None:
        """Done: a finished game's analysis kept in ``cantstop_analyses``, any other version's
        in the row, in one transaction."""

        def work(sql: Sql) -> None:
            if job.version == FINAL:
                body = json.loads(text)
                sql.execute(
                    "INSERT INTO cantstop_analyses (game_id, strategy_version, version, "
                    "analysis) VALUES (?, ?, ?, ?) ON CONFLICT (game_id, strategy_version) "
                    "DO NOTHING",
                    [str(job.game_id), job.strategy_version, int(body["version"]), text],
                )
            sql.execute(
                f"UPDATE {self.TABLE} SET status = 'done', progress = 1, slot = NULL, "
                f"finished_at = ?, answer = ? WHERE {KEY} AND status = 'running' AND worker = ?",
                [time.time(), None if job.version == FINAL else text, *job.key, worker],
            )

        self.transaction(work)

    def fail(self, job: Job, worker: str, error: dict[str, Any]) -> None:
        self.execute(
            f"UPDATE {self.TABLE} SET status = 'failed', slot = NULL, finished_at = ?, "
            f"error = ? WHERE {KEY} AND status = 'running' AND worker = ?",
            (time.time(), json.dumps(error), *job.key, worker),
        )

    def release(self, worker: str) -> None:
        """A dead worker's jobs: their leases end now, for another worker to take."""
        self.execute(
            f"UPDATE {self.TABLE} SET lease_until = 0 WHERE status = 'running' AND worker = ?",
            (worker,),
        )

    def prune(self) -> None:
        """Finished rows older than ``KEEP`` (a finished game's answer stays in its table)."""
        self.execute(
            f"DELETE FROM {self.TABLE} WHERE status IN ('done', 'failed') AND finished_at < ?",
            (time.time() - KEEP,),
        )

    def counts(self) -> dict[str, int]:
        rows = self.execute(
            f"SELECT status, count(*) AS n FROM {self.TABLE} GROUP BY status", fetch="all"
        )
        return {str(row["status"]): int(row["n"]) for row in rows}


# ------------------------------------------------------------------------------ the worker
class CpuDeadline(Exception):
    """The job used its CPU time."""


class OverBudget(Exception):
    """The process passed its memory budget by more than ``HEADROOM`` during a job."""


def rss_bytes() -> int:
    """This process's resident memory, in bytes (Linux)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Worker:
    """Takes jobs from the queue and works them out, one at a time (one per process: the
    analysis is pure Python). ``step`` takes one job; ``run`` goes on until ``stop``, or until
    the process passes its memory budget."""

    def __init__(
        self, games: Games, jobs: AnalysisJobs, config: JobConfig, name: str | None = None
    ) -> None:
        self.games = games
        self.jobs = jobs
        self.config = config
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self._following: OrderedDict[uuid.UUID, Analysis] = OrderedDict()
        # the points' runners and children, from job to job (one job at a time): the next
        # game asks for mostly the same points; bounded (``SHARED_POINTS``), answers unchanged
        self._points = Shared()
        self.done = 0  # jobs this worker finished (tests read it)
        self.stepped = 0  # the game steps it replayed and valued (tests read it)

    def step(self) -> bool:
        """One job taken and worked out (done or failed); False when none was waiting."""
        job = self.jobs.claim(self.name, self.config.lease)
        if job is None:
            return False
        if job.attempts > ATTEMPTS:  # its workers kept dying (killed, or out of memory)
            self.jobs.fail(job, self.name, {"reason": "workers died"})
            return True
        try:
            text = self._work_out(job)
        except CpuDeadline:
            log.warning("game %s: analysis past its CPU deadline", job.game_id)
            self.jobs.fail(job, self.name, {"reason": "cpu deadline"})
            self._following.pop(job.game_id, None)
        except OverBudget:
            log.warning("game %s: analysis past the memory budget", job.game_id)
            self.jobs.fail(job, self.name, {"reason": "memory"})
            self._following.clear()
            self._points = Shared()
        except VersionGone as exc:
            # Queued for a version the store held then and holds no more (restored from a
            # backup): no damage; asked for again once the game is there, it is queued again
            # (Analyst._failed), not refused as a corrupt game for the cool-down.
            log.warning("game %s: no version %s to analyse any more", job.game_id, exc.version)
            self.jobs.fail(job, self.name, {"reason": VERSION_GONE, "version": exc.version})
        except AnalysisRefused as exc:
            self.jobs.fail(
                job,
                self.name,
                {"reason": "corrupt_game", "version": exc.version, "detail": exc.detail},
            )
        except StoreUnavailable:
            raise  # not the job's fault: its lease passes, and it is taken again
        except ApplicationError as exc:  # CorruptGame from the store, NotFound
            self.jobs.fail(
                job,
                self.name,
                {"reason": exc.code, "detail": exc.detail, **exc.extra},
            )
        else:
            if text is not None:
                self.jobs.finish(job, self.name, text)
                self.done += 1
        return True

    def run(self, stop: threading.Event, between: Callable[[], None] | None = None) -> str:
        """Jobs until ``stop`` or until this process passes its memory budget; why it ended.
        ``between``: called after each job (the CPU limit rearmed)."""
        while not stop.is_set():
            try:
                worked = self.step()
            except ApplicationError as exc:  # the store is away: try again soon
                log.warning("analysis worker: %s", exc.detail)
                worked = False
            except CpuDeadline:  # SIGXCPU again before the limit was rearmed
                worked = True
            if worked and between is not None:
                between()
            if rss_bytes() > self.config.rss_bytes:
                return "memory"
            if not worked:
                stop.wait(0.25)
        return "stopped"

    def _work_out(self, job: Job) -> str | None:
        """The analysis as JSON text; None when the job was taken from this worker."""
        started = time.process_time()
        deadline = started + self.config.cpu_seconds
        records = self.games.history(job.game_id)  # CorruptGame where a stored event is damaged
        # A finished game's analysis stops at MAX_VERSIONS: only the system queues one of a longer
        # game (a rated one, for its fair-play figures: AnalysisFeed), which the endpoint
        # still refuses as game_too_long (a kept row serves only its own version).
        upto = min(len(records), MAX_VERSIONS) if job.version == FINAL else job.version
        if len(records) < upto <= MAX_VERSIONS:
            raise VersionGone(upto)
        if not 1 <= upto <= min(len(records), MAX_VERSIONS):
            raise AnalysisRefused(upto, f"no version {upto} to analyse")
        running = self._following.pop(job.game_id, None)
        if running is None or running.records != records[: len(running.records)]:
            running = Analysis(shared=self._points)
        running.extend(records[len(running.records) :])
        steps = len(running.steps)
        reported = time.monotonic()
        with collector.paused():
            for version in range(max(1, running.reached + 1), upto + 1):
                running.advance(version)
                if time.process_time() > deadline:
                    raise CpuDeadline()
                if time.monotonic() - reported >= TICK:
                    reported = time.monotonic()
                    if rss_bytes() > self.config.rss_bytes + HEADROOM:
                        raise OverBudget()
                    if not self.jobs.report(job, self.name, version / upto, self.config.lease):
                        return None  # the lease passed to another worker
            running.advance(upto)
            answer = running.result(upto)
        self.stepped += len(running.steps) - steps
        self._following[job.game_id] = running
        while len(self._following) > RUNNING:
            self._following.popitem(last=False)
        log.info(
            "game %s: analysed to version %s in %.3f s of CPU",
            job.game_id,
            upto,
            time.process_time() - started,
        )
        return json.dumps(answer, separators=(",", ":"), allow_nan=False)


def arm_cpu_limit(config: JobConfig) -> None:
    """A worker process's backstop beside the deadline checked between steps (a single step
    could run long): SIGXCPU, which fails the job under way as past its deadline, once the
    process's CPU time passes what it has used plus ten jobs' deadlines; rearmed after each
    job. In a worker process's main thread only."""
    signal.signal(signal.SIGXCPU, _past_deadline)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    limit = math.ceil(usage.ru_utime + usage.ru_stime + 10 * config.cpu_seconds)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))


def _past_deadline(signum: int, frame: Any) -> None:
    raise CpuDeadline()


# ------------------------------------------------------------------------------ the parent
class Supervisor:
    """Keeps ``count`` worker processes running (``cantstop worker`` steps it at each poll): one
    that exits (its memory budget passed, or killed) is replaced, and the jobs it held are
    released to the others at once instead of after their lease."""

    PAUSE = 1.0  # seconds before replacing a worker that died within PAUSE of starting

    def __init__(
        self,
        start: Callable[[], subprocess.Popen[bytes]],
        count: int,
        jobs: AnalysisJobs | None = None,
    ) -> None:
        self.start = start
        self.count = count
        self.jobs = jobs
        self.children: list[tuple[subprocess.Popen[bytes], float]] = []
        self.replaced = 0  # workers started again (tests read it)
        self._pruned = 0.0
        self._resume = 0.0

    def step(self) -> None:
        now = time.monotonic()
        for child, since in list(self.children):
            if child.poll() is None:
                continue
            self.children.remove((child, since))
            self.replaced += 1
            if child.returncode != 0:
                log.warning("analysis worker %s exited (%s)", child.pid, child.returncode)
            if self.jobs is not None:  # what it held is taken again at once
                self.jobs.release(f"{socket.gethostname()}:{child.pid}")
            if now - since < self.PAUSE:  # died at once: not replaced in a tight loop
                self._resume = now + self.PAUSE
        while len(self.children) < self.count and now >= self._resume:
            self.children.append((self.start(), now))
        if self.jobs is not None and now - self._pruned > KEEP:
            self._pruned = now
            self.jobs.prune()

    def close(self, timeout: float = 10.0) -> None:
        for child, _ in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child, _ in self.children:
            try:
                child.wait(timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self.children = []


# ------------------------------------------------------------------------------ the feed
FINISHED = get_topic(Game.GameFinished)


class AnalysisFeed(View):
    """Queues each finished rated game played here (never an imported one) for its analysis
    as it finishes (as the ``system`` client): the fair-play figures read them. A game longer
    than ``MAX_VERSIONS`` is analysed up to there. No tables of its own: only its place in the
    log."""

    name = "analysis_feed"
    version = 1
    topics = (FINISHED,)
    heads_only = True
    # Only the live view queues (``applied``): a rebuild, which has no tables to fill, reads
    # the heads to the log's end and plans nothing (``summary``).
    summary_topics = (FINISHED,)

    def __init__(self, games: Games) -> None:
        self.games = games

    def summary(self, heads: list[Any]) -> list[str]:
        return []

    def prepare(self, items: list[Any], read: Sql) -> list[str]:
        found = []
        # Whether each was rated, from the creations read in one query (not two reads a game),
        # and whether a rated one was imported, for the batch at once too.
        store = self.games.store
        firsts = store.creations([head.originator_id for head in items])
        store.imported([game_id for game_id, first in firsts.items() if first.rated])
        for head in items:
            try:
                first = firsts.get(head.originator_id) or store.at_creation(head.originator_id)
                if not first.rated:
                    continue
                if store.is_imported(head.originator_id):
                    # Not played here (contract 1.3, "What is rated"), and importable again
                    # and again by anyone: the system's jobs are not capped per client, so
                    # each copy would be an analysis queued, worked out and kept for nobody.
                    continue
                game = self.games.game(head.originator_id)
                if rated_game(game, self.games.history(head.originator_id)) is None:
                    continue  # not a finished rated game
            except ApplicationError:
                continue
            # A game longer than MAX_VERSIONS is analysed up to there (Worker._work_out): its
            # first 1,000 versions still count in the fair-play figures, so play padded past
            # the maximum does not take a rated game out of them.
            found.append(str(head.originator_id))
        return found

    def apply(self, sql: Sql, prepared: list[str]) -> list[str]:
        return prepared

    def applied(self, sql: Sql, written: list[str]) -> None:
        version = ANALYSIS_KEY
        for game_id in written:
            sql.execute(
                f"INSERT INTO {AnalysisJobs.TABLE} (game_id, version, strategy_version, status, "
                "client, created_at) SELECT ?, ?, ?, 'queued', ?, ? WHERE NOT EXISTS (SELECT 1 "
                "FROM cantstop_analyses WHERE game_id = ? AND strategy_version = ?) "
                "ON CONFLICT (game_id, version, strategy_version) DO NOTHING",
                [game_id, FINAL, version, SYSTEM, time.time(), game_id, version],
            )
