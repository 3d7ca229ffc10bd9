"""Seeks (contract 1.2): an account asks for a game of some rules and number of players with
anyone; compatible seeks are paired into a game, the closest in rating first.

Each seek is an aggregate in the event store; the open ones are a view (``SeekPool``). Pairing is
race-free across workers and hosts: the game's id is derived from the ids of the seeks it pairs,
and the seeks' ``Paired`` events are saved with the game in one transaction, so a seek is paired
at most once whoever tries, and a seek withdrawn meanwhile makes the pairing fail as a whole.

Who pairs: the request that places a seek tries at once (it catches the view up first, so it sees
every seek placed before it); two seeks placed at the same moment on two workers may each miss the
other, so the scheduler's loop also pairs what is open at each poll (every quarter second): two
compatible seeks become a game within a second of the later one, well inside the contract's 2 s.

Compatible: the same normalized rules, number of players, ``rated`` and clock, and different
accounts. Among compatible seeks the oldest is served first, with the seeks closest to its
account's rating (the pool's ``mu``; 25, OpenSkill's default, for an account new to the pool).
A seek not paired within ``TTL`` expires: it is served as ``expired`` and is no longer paired
from then on, and the scheduler records its ``Expired`` (once, whichever scheduler is first),
which announces it on the account's stream (``seek_expired``).

One open seek per account and kind of game, and at most ``MAX_OPEN`` in all, held by slots
(``persistence.slots``, as challenges' cap): both are taken in one conditional write before the
seek is recorded and given back when it is paired, withdrawn or expired, so that identical
seeks racing on several hosts make one seek, never eight.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import IntegrityError
from eventsourcing.utils import get_topic

from domain.commands import NewGame
from domain.errors import InvalidRequest
from domain.game import format_at, parse_at
from domain.ratings import pool as pool_of
from domain.rules import normalize_rules
from service.application.aggregates import moved_topics
from service.application.errors import ApplicationError, NotFound
from service.application.games.use_cases import Games
from service.application.matchmaking.challenges import slots_of
from service.application.players.accounts import Principal
from service.application.players.standings import RatingsView
from service.application.store import Store
from service.persistence.views import Sql, View, Views

log = logging.getLogger("cantstop.seeks")

TTL = timedelta(minutes=10)
MAX_OPEN = 10  # open seeks one account may have at a time
DEFAULT_MU = 25.0  # OpenSkill's default mu: an account with no rating in the pool
ATTEMPTS = 5
SEEK_GAME_NAMESPACE = uuid.UUID("5e2a9d47-0c3b-4f18-b6e4-7a1d9c2e5f83")
EXPIRE_BATCH = 100  # expired seeks recorded per poll


class SeekNotOpen(ApplicationError):
    code = "seek_not_open"


class TooManySeeks(ApplicationError):
    code = "too_many_seeks"


def seek_game_id(seek_ids: list[uuid.UUID]) -> uuid.UUID:
    return uuid.uuid5(SEEK_GAME_NAMESPACE, ",".join(sorted(str(s) for s in seek_ids)))


def compatibility(
    rules: dict[str, Any], players: int, rated: bool, clock: dict[str, Any] | None
) -> str:
    """Seeks with the same key can be paired."""
    canonical = json.dumps(
        {"rules": rules, "players": players, "rated": rated, "clock": clock}, sort_keys=True
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


class Seek(Aggregate):
    @event("Placed")
    def __init__(
        self,
        account: str,
        rules: dict[str, Any],
        players: int,
        rated: bool,
        clock: dict[str, Any] | None,
        mu: float,
        expires_at: str,
    ) -> None:
        self.account = account
        self.rules = rules
        self.players = players
        self.rated = rated
        self.clock = clock
        self.mu = mu
        self.expires_at = expires_at
        self.status = "open"
        self.game_id: str | None = None

    @event("Paired")
    def pair(self, game_id: str) -> None:
        self.status = "paired"
        self.game_id = game_id

    @event("Withdrawn")
    def withdraw(self) -> None:
        self.status = "withdrawn"

    @event("Expired")
    def expire(self) -> None:
        self.status = "expired"

    @property
    def key(self) -> str:
        return compatibility(self.rules, self.players, self.rated, self.clock)

    def status_at(self, now: datetime) -> str:
        if self.status == "open" and parse_at(self.expires_at) <= now:
            return "expired"
        return str(self.status)

    def as_json(self, now: datetime | None = None) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "status": self.status_at(now or datetime.now(UTC)),
            "account": self.account,
            "rules": self.rules,
            "players": self.players,
            "rated": self.rated,
            "clock": self.clock,
            "created_at": format_at(self.created_on),
            "expires_at": self.expires_at,
            "game_id": self.game_id,
        }


_EVENTS: tuple[type[Any], ...] = (
    Seek.Placed,  # type: ignore[attr-defined]
    Seek.Paired,  # type: ignore[attr-defined]
    Seek.Withdrawn,  # type: ignore[attr-defined]
    Seek.Expired,  # type: ignore[attr-defined]
)
# Seek lived in service.application.seeks before: its stored rows keep that topic.
OLD_TOPICS = moved_topics("service.application.seeks", Seek, _EVENTS)
SEEK_TOPICS = (*(get_topic(cls) for cls in _EVENTS), *OLD_TOPICS)
SEEK_EXPIRED_TOPICS = frozenset(
    {get_topic(Seek.Expired), "service.application.seeks:Seek.Expired"}  # type: ignore[attr-defined]
)  # (notices show a seek's expiry)


class SeekPool(View):
    """The seeks still open, by compatibility."""

    name = "seeks"
    version = 1
    topics = SEEK_TOPICS
    tables = {  # noqa: RUF012 (the View's declaration)
        "open": [
            "CREATE TABLE IF NOT EXISTS {open} (seek_id TEXT PRIMARY KEY, account TEXT NOT NULL, "
            "compat TEXT NOT NULL, players INTEGER NOT NULL, mu DOUBLE PRECISION NOT NULL, "
            "expires DOUBLE PRECISION NOT NULL, seq BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {open}_compat ON {open} (compat, seq)",
            "CREATE INDEX IF NOT EXISTS {open}_account ON {open} (account)",
        ]
    }

    def apply(self, sql: Sql, prepared: list[tuple[int, Any]]) -> None:
        for seq, event_ in prepared:
            key = str(event_.originator_id)
            if isinstance(event_, Seek.Placed):  # type: ignore[attr-defined]
                sql.execute(
                    "INSERT INTO {open} (seek_id, account, compat, players, mu, expires, seq) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (seek_id) DO NOTHING",
                    [
                        key,
                        event_.account.lower(),
                        compatibility(event_.rules, event_.players, event_.rated, event_.clock),
                        event_.players,
                        event_.mu,
                        parse_at(event_.expires_at).timestamp(),
                        seq,
                    ],
                )
            else:
                sql.execute("DELETE FROM {open} WHERE seek_id = ?", [key])


class Seeks:
    def __init__(self, store: Store, games: Games, views: Views, ratings: RatingsView) -> None:
        self.store = store
        self.games = games
        self.views = views
        self.ratings = ratings
        self.pool = SeekPool()
        self.slots = slots_of(store)
        self.paired = 0  # games made by this process (tests and logs)

    # ---------------------------------------------------------------------------- requests
    def place(
        self,
        principal: Principal,
        rules: dict[str, Any] | None,
        players: int,
        rated: bool,
        clock: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """A new seek, judged as the game it would make; paired at once if it can be."""
        if isinstance(players, bool) or not isinstance(players, int) or players < 2:
            raise InvalidRequest("a seek is for a game of 2 or more players")
        normalized = normalize_rules(rules, players).to_dict()
        handles = [principal.handle] + [f"seeker-{i}" for i in range(1, players)]
        self.games.judge(self._setup(handles, normalized, rated, clock))
        key = compatibility(normalized, players, rated, clock)
        mu = self._mu(principal.handle, normalized, players)
        now = datetime.now(UTC)
        seek = Seek(principal.handle, normalized, players, rated, clock, mu, format_at(now + TTL))
        holder = str(seek.id)
        refused = self.slots.take(
            principal.handle.lower(),
            holder,
            (now + TTL).timestamp(),
            now.timestamp(),
            [("seek-kind", [key]), ("seek", [str(i) for i in range(MAX_OPEN)])],
        )
        if refused == 0:
            raise InvalidRequest(
                "you already have an open seek for such a game: withdraw it or wait"
            )
        if refused is not None:
            raise TooManySeeks(f"you have {MAX_OPEN} open seeks: withdraw one first")
        try:
            self.store.save(seek)
        except BaseException:
            self.slots.release([holder])  # nothing recorded: nothing held
            raise
        self.pair(key)
        return self._seek(seek.id).as_json()

    def get(self, principal: Principal, seek_id: uuid.UUID) -> Seek:
        found = self._seek(seek_id)
        if found.account.lower() != principal.handle.lower():
            raise NotFound(f"no seek {seek_id} of yours")
        return found

    def withdraw(self, principal: Principal, seek_id: uuid.UUID) -> None:
        seek = self.get(principal, seek_id)
        status = seek.status_at(datetime.now(UTC))
        if status == "withdrawn":
            return  # DELETE is idempotent
        if status != "open":
            raise SeekNotOpen(f"seek {seek_id} is {status}: it cannot be withdrawn")
        seek.withdraw()
        try:
            self.store.save(seek)
        except IntegrityError:
            raise SeekNotOpen(f"seek {seek_id} was paired meanwhile: see its game") from None
        self.slots.release([str(seek.id)])

    def withdraw_all(self, principal: Principal) -> None:
        """An account closing: its open seeks are withdrawn (best effort: one paired meanwhile
        stays paired, and its game is resigned like the account's others)."""
        for row in self._open_of(principal.handle):
            with contextlib.suppress(ApplicationError):
                self.withdraw(principal, uuid.UUID(row["seek_id"]))

    # ----------------------------------------------------------------------------- pairing
    def pair_all(self) -> int:
        """Pair every group of compatible open seeks (the scheduler, at each poll, after moving
        the views on): games made."""
        now = time.time()

        def run(sql: Sql) -> list[Any]:
            return sql.all(
                "SELECT compat, players, count(*) AS n FROM {open} WHERE expires > ? "
                "GROUP BY compat, players",
                [now],
            )

        made = 0
        # Not ``fresh``: the scheduler's loop, its only caller, has just moved the pool on.
        for row in self.views.read(self.pool, run, fresh=False):
            if row["n"] >= row["players"]:
                made += self.pair(row["compat"], fresh=False)
        return made

    def pair(self, key: str, *, fresh: bool = True) -> int:
        """Make games of the open seeks with compatibility ``key``: how many were made."""
        made = 0
        skip: set[str] = set()
        for _ in range(ATTEMPTS * 4):
            rows = [r for r in self._open(key, fresh=fresh) if r["seek_id"] not in skip]
            group = self._choose(rows)
            if group is None:
                return made
            seeks: list[Seek] = []
            for row in group:
                seek = self._seek(uuid.UUID(row["seek_id"]))
                if seek.status_at(datetime.now(UTC)) != "open":
                    skip.add(row["seek_id"])  # the view is behind: leave it out
                else:
                    seeks.append(seek)
            if len(seeks) < len(group):
                continue
            try:
                self._make(seeks)
                made += 1
            except IntegrityError:  # paired or withdrawn meanwhile by another: read again
                fresh = True
            except ApplicationError as exc:  # the game could not be made: leave these out
                log.warning("seeks %s: no game: %s", [str(s.id) for s in seeks], exc.detail)
                skip.update(str(s.id) for s in seeks)
        return made

    @staticmethod
    def _choose(rows: list[Any]) -> list[Any] | None:
        """The oldest open seek and the others closest to its rating, of other accounts; None
        when no group is complete."""
        for anchor in rows:  # oldest first
            need = int(anchor["players"]) - 1
            taken = {anchor["account"]}
            others = sorted(
                (r for r in rows if r["account"] != anchor["account"]),
                key=lambda r: (abs(float(r["mu"]) - float(anchor["mu"])), r["seq"]),
            )
            chosen = []
            for row in others:
                if row["account"] not in taken:
                    chosen.append(row)
                    taken.add(row["account"])
                if len(chosen) == need:
                    return [anchor, *sorted(chosen, key=lambda r: r["seq"])]
        return None

    def _make(self, seeks: list[Seek]) -> None:
        game_id = seek_game_id([s.id for s in seeks])
        for seek in seeks:
            seek.pair(str(game_id))
        first = seeks[0]
        setup = self._setup([s.account for s in seeks], first.rules, first.rated, first.clock)
        self.games.create(setup, game_id=game_id, also=seeks)
        self.slots.release([str(s.id) for s in seeks])
        self.paired += 1

    def expire_due(self) -> int:
        """Record ``Expired`` on open seeks whose time is up (the scheduler, at each poll):
        how many this process recorded. Racing schedulers, a pairing or a withdrawal at the same
        moment are refused by the store: each seek gets one ending."""
        now = datetime.now(UTC)

        def run(sql: Sql) -> list[Any]:
            return sql.all(
                "SELECT seek_id FROM {open} WHERE expires <= ? ORDER BY seq LIMIT ?",
                [now.timestamp(), EXPIRE_BATCH],
            )

        expired = 0
        for row in self.views.read(self.pool, run, fresh=False):
            try:
                seek = self._seek(uuid.UUID(row["seek_id"]))
            except NotFound:
                continue
            if seek.status != "open" or seek.status_at(now) != "expired":
                continue  # ended already (the view is behind), or not yet due
            seek.expire()
            try:
                self.store.save(seek)
            except IntegrityError:
                continue  # expired by another scheduler, paired or withdrawn, first
            self.slots.release([str(seek.id)])
            expired += 1
        return expired

    # ------------------------------------------------------------------------------- reads
    def _seek(self, seek_id: uuid.UUID) -> Seek:
        try:
            found: Any = self.store.repository.get(seek_id)
        except AggregateNotFoundError:
            found = None
        if not isinstance(found, Seek):
            raise NotFound(f"no seek {seek_id}")
        return found

    def _open(self, key: str, *, fresh: bool) -> list[Any]:
        now = time.time()

        def run(sql: Sql) -> list[Any]:
            return sql.all(
                "SELECT * FROM {open} WHERE compat = ? AND expires > ? ORDER BY seq", [key, now]
            )

        return [dict(r) for r in self.views.read(self.pool, run, fresh=fresh)]

    def _open_of(self, handle: str) -> list[Any]:
        now = time.time()

        def run(sql: Sql) -> list[Any]:
            return sql.all(
                "SELECT * FROM {open} WHERE account = ? AND expires > ?", [handle.lower(), now]
            )

        return [dict(r) for r in self.views.read(self.pool, run)]

    def _mu(self, handle: str, rules: dict[str, Any], players: int) -> float:
        wanted = pool_of(rules, players)
        for rating in self.ratings.of_account(self.views, handle):
            if rating["pool"] == wanted:
                return float(rating["mu"])
        return DEFAULT_MU

    @staticmethod
    def _setup(
        handles: list[str], rules: dict[str, Any], rated: bool, clock: dict[str, Any] | None
    ) -> NewGame:
        return NewGame(
            players=list(handles), rules=rules, clock=clock, accounts=list(handles), rated=rated
        )
