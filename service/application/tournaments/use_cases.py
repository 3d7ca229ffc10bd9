"""Tournaments' use cases (issue #45, contract 1.3) and the scheduler's chore that runs them.

The rules (pairing, seating, points, standings, when a tournament finishes) are the domain's
(domain/tournament.py); this module judges requests, binds accounts, and saves. Every change is
one save of the tournament at its next version, which the store accepts once: two requests
registering the same account, two hosts' schedulers pairing the same round, record one and
refuse the other (``IntegrityError``), which then reads the tournament again and finds the work
done. A round's (or an arena table's) games are saved in the same transaction as the event that
seats them (``Games.create_many``), their ids derived from the tournament's by the domain: a
table's game exists exactly when its table does, once.

The scheduler's chore (``poll``) reads the tournaments due by now from the view (views.py) and
steps each: starts it at its time; records the result of each table whose game ended (places by
``domain.ratings``: the contract's order of a finished game; an aborted or abandoned game gives
no points); pairs the next Swiss round once the last is complete, or finishes it after the last;
seats arena tables from the players waiting while the window is open, and finishes it once the
window closed and its last table ended.
"""

from __future__ import annotations

import builtins
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError

from domain import ratings as order
from domain.commands import NewGame
from domain.errors import DomainError, InvalidRequest
from domain.game import format_at, parse_at
from domain.rules import normalize_rules
from domain.tournament import STANDINGS_CHANGE, Tournament, event_line, export_lines
from service.application.errors import ApplicationError, ConcurrentAction, NotFound
from service.application.games.use_cases import Games
from service.application.players.accounts import Accounts, Principal
from service.application.players.standings import RatingsView, resignations
from service.application.store import Store
from service.application.tournaments.views import (
    NOW,
    TournamentsView,
    at_micros,
    micros,
)
from service.persistence.views import Sql, Views

log = logging.getLogger("cantstop.tournaments")

KINDS = ("swiss", "arena")
NAME_MAX = 80
MAX_ROUNDS = 20
MAX_MINUTES = 24 * 60  # an arena's window: a day at most
MAX_AHEAD = timedelta(days=30)  # how far ahead a tournament may be set to start
DEFAULT_MU = 25.0  # OpenSkill's default: an account new to the pool
ATTEMPTS = 8  # saves retried when another request or scheduler changed the tournament first
DUE_PAGE = 50  # tournaments stepped per poll
BACKOFF = timedelta(seconds=5)  # a due tournament in which nothing could be done: look later
LIST_LIMIT = (50, 100)  # default, most


class NotYourRegistration(ApplicationError):
    """Withdrawing, pausing or resuming another account's registration."""

    code = "not_your_registration"


class NotCreator(ApplicationError):
    """Starting a tournament one did not create."""

    code = "not_tournament_creator"


class AccountExcluded(ApplicationError):
    """An account excluded by an operator cannot register (service/cli.py accounts exclude)."""

    code = "account_excluded"


def utcnow() -> datetime:
    return datetime.now(UTC)


class Tournaments:
    def __init__(
        self,
        store: Store,
        games: Games,
        accounts: Accounts,
        views: Views,
        ratings: RatingsView,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.games = games
        self.accounts = accounts
        self.views = views
        self.ratings = ratings
        self.view = TournamentsView(store)
        self.clock = clock
        self.created_tables = 0  # table games this process created (tests read it)

    # ---------------------------------------------------------------------------- requests
    def create(self, principal: Principal, data: Mapping[str, Any]) -> dict[str, Any]:
        """A new tournament, judged as the games it will make (422 when one could not start)."""
        principal.require("play")
        name = data.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
            raise InvalidRequest(f"name must be 1 to {NAME_MAX} characters")
        if any(not ch.isprintable() for ch in name):
            raise InvalidRequest("name must be printable text")
        kind = data.get("kind")
        if kind not in KINDS:
            raise InvalidRequest('kind must be "swiss" or "arena"')
        per_table = data.get("players_per_table")
        if isinstance(per_table, bool) or not isinstance(per_table, int) or not 2 <= per_table <= 8:
            raise InvalidRequest("players_per_table must be 2 to 8")
        rounds = data.get("rounds")
        minutes = data.get("minutes")
        if kind == "swiss":
            if minutes is not None:
                raise InvalidRequest("minutes is for an arena; a Swiss has rounds")
            if isinstance(rounds, bool) or not isinstance(rounds, int):
                raise InvalidRequest(f"a Swiss needs rounds: 1 to {MAX_ROUNDS}")
            if not 1 <= rounds <= MAX_ROUNDS:
                raise InvalidRequest(f"rounds must be 1 to {MAX_ROUNDS}")
        else:
            if rounds is not None:
                raise InvalidRequest("rounds is for a Swiss; an arena has minutes")
            minutes = self._minutes(minutes)
        clock = data.get("clock")
        if clock is None:
            raise InvalidRequest(
                'a tournament needs a turn clock ("clock": {"turn_seconds": T}): a table whose '
                "player never moves must end by its clock"
            )
        rated = data.get("rated", False)
        if not isinstance(rated, bool):
            raise InvalidRequest("rated must be true or false")
        rules = normalize_rules(data.get("rules"), per_table).to_dict()
        seats = [f"player-{i}" for i in range(per_table)]
        for size in sorted({2, per_table}):  # a short table, and a full one, must both start
            self.games.judge(self._setup(seats[:size], rules, rated, clock))
        now = self.clock()
        starts_at = data.get("starts_at")
        if starts_at is not None:
            try:  # RFC 3339, with a time zone (Z or an offset), fractions of seconds or not
                at = datetime.fromisoformat(starts_at)
                if at.tzinfo is None:
                    raise ValueError("no time zone")
                at = at.astimezone(UTC)
            except (TypeError, ValueError, OverflowError):  # year 1 or 9999 past UTC: overflow
                raise InvalidRequest(
                    "starts_at must be an RFC 3339 time, e.g. 2026-05-01T18:00:00Z"
                ) from None
            if at <= now:
                raise InvalidRequest("starts_at must be in the future (null: when you start it)")
            if at > now + MAX_AHEAD:
                raise InvalidRequest(f"starts_at must be within {MAX_AHEAD.days} days")
            starts_at = format_at(at)
        tournament = Tournament.create(
            name=name.strip(),
            kind=kind,
            rules=rules,
            players_per_table=per_table,
            rounds=rounds if kind == "swiss" else None,
            minutes=minutes if kind == "arena" else None,
            clock=dict(clock),
            rated=rated,
            starts_at=starts_at,
            creator=principal.handle,
            at=now,
        )
        self.store.save(tournament)
        return self.read(tournament.id)

    @staticmethod
    def _minutes(minutes: Any) -> int:
        if isinstance(minutes, bool) or not isinstance(minutes, int):
            raise InvalidRequest(f"an arena needs minutes: a whole number, 1 to {MAX_MINUTES}")
        if not 1 <= minutes <= MAX_MINUTES:
            raise InvalidRequest(f"minutes must be 1 to {MAX_MINUTES}")
        return minutes

    def start(self, principal: Principal, tournament_id: uuid.UUID) -> dict[str, Any]:
        """Start it now (its creator only): a Swiss pairs its first round at once."""
        principal.require("play")

        def change(tournament: Any) -> None:
            if tournament.creator.lower() != principal.handle.lower():
                raise NotCreator("only the tournament's creator may start it")
            tournament.start(self.clock())

        self._change(tournament_id, change)
        self.step(tournament_id)
        return self.read(tournament_id)

    def register(self, principal: Principal, tournament_id: uuid.UUID) -> dict[str, Any]:
        """Register the caller's account (409 already_registered, tournament_started for a
        Swiss under way; an arena takes players while its window is open)."""
        principal.require("play")
        account = self.accounts.account(principal.handle)
        if account.closed:
            raise NotFound(f"no account {principal.handle!r}")
        if account.excluded:
            raise AccountExcluded("an excluded account cannot register in tournaments")
        rating: builtins.list[float] = []

        def change(tournament: Any) -> None:
            if not rating:
                rating.append(self._mu(account.handle, tournament.rules, tournament))
            tournament.register(account.handle, rating[0], self.clock())

        self._change(tournament_id, change)
        return self.read(tournament_id)

    def withdraw(
        self, principal: Principal, tournament_id: uuid.UUID, handle: str, reason: str = "withdrew"
    ) -> None:
        """Withdraw ``handle`` (the caller's own account only); idempotent."""
        principal.require("play")
        if handle.lower() != principal.handle.lower():
            self._tournament(tournament_id)  # 404 for no tournament first
            raise NotYourRegistration("you may withdraw your own account only")
        self.withdraw_account(tournament_id, principal.handle, reason)

    def withdraw_account(self, tournament_id: uuid.UUID, handle: str, reason: str) -> bool:
        """Withdraw the account if it plays on there: whether it was withdrawn now."""
        done: builtins.list[bool] = []

        def change(tournament: Any) -> None:
            done.clear()
            if tournament.status == "finished" or not _plays(tournament, handle):
                return
            tournament.withdraw(_registered(tournament, handle), reason, self.clock())
            done.append(True)

        self._change(tournament_id, change)
        if done:
            self.step(tournament_id)
        return bool(done)

    def pause(self, principal: Principal, tournament_id: uuid.UUID, handle: str) -> None:
        self._pausing(principal, tournament_id, handle, pause=True)

    def resume(self, principal: Principal, tournament_id: uuid.UUID, handle: str) -> None:
        self._pausing(principal, tournament_id, handle, pause=False)

    def _pausing(
        self, principal: Principal, tournament_id: uuid.UUID, handle: str, *, pause: bool
    ) -> None:
        principal.require("play")
        if handle.lower() != principal.handle.lower():
            self._tournament(tournament_id)
            raise NotYourRegistration("you may pause or resume your own account only")

        def change(tournament: Any) -> None:
            if not _plays(tournament, handle):
                raise NotFound(f"{handle} plays in no such tournament")
            registered = _registered(tournament, handle)
            if pause:
                tournament.pause(registered, self.clock())
            else:
                tournament.resume(registered, self.clock())

        self._change(tournament_id, change)

    # ------------------------------------------------------------------------------- reads
    def read(self, tournament_id: uuid.UUID) -> dict[str, Any]:
        """The contract's ``GET /v1/tournaments/{id}``, its standings from the view."""
        body: dict[str, Any] = self._tournament(tournament_id).as_json()
        body["standings"] = self.standings(tournament_id)
        return body

    def standings(self, tournament_id: uuid.UUID) -> builtins.list[dict[str, Any]]:
        """Best first, from the view (caught up to the log's end first)."""
        key = str(tournament_id)

        def run(sql: Sql) -> builtins.list[Any]:
            return sql.all(
                "SELECT entry FROM {standings} WHERE tournament_id = ? ORDER BY rank, handle_key",
                [key],
            )

        return [json.loads(row["entry"]) for row in self.views.read(self.view, run)]

    def list(
        self, status: str | None = None, limit: int | None = None, cursor: int | None = None
    ) -> dict[str, Any]:
        """Tournaments newest first (by ``status``), ``limit`` a page, then ``next_cursor``."""
        size = LIST_LIMIT[0] if limit is None else max(1, min(limit, LIST_LIMIT[1]))
        clauses: builtins.list[str] = []
        params: builtins.list[Any] = []
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        if cursor is not None:
            clauses.append("created_seq < ?")
            params.append(cursor)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""

        def run(sql: Sql) -> builtins.list[Any]:
            return sql.all(
                f"SELECT * FROM {{list}}{where} ORDER BY created_seq DESC LIMIT ?",
                [*params, size + 1],
            )

        rows = [dict(r) for r in self.views.read(self.view, run)]
        more = len(rows) > size
        rows = rows[:size]
        return {
            "tournaments": [
                {
                    "id": r["tournament_id"],
                    "name": r["name"],
                    "kind": r["kind"],
                    "status": r["status"],
                    "starts_at": r["starts_at"],
                    "players": int(r["players"]),
                }
                for r in rows
            ],
            "next_cursor": str(rows[-1]["created_seq"]) if more else None,
        }

    def export(self, tournament_id: uuid.UUID) -> builtins.list[dict[str, Any]]:
        """The tournament's own events as export lines (a header with the standings they give,
        then one line per event): what ``cantstop audit`` checks."""
        self._tournament(tournament_id)
        events = list(self.store.events.get(tournament_id))
        return export_lines(tournament_id, events)

    def records(
        self, tournament_id: uuid.UUID, after: int, limit: int
    ) -> builtins.list[dict[str, Any]]:
        """Events after version ``after`` as its stream serves them: the export's lines, the
        last of the page that may move the standings (``STANDINGS_CHANGE``) with the standings
        as they stood after it. Only the last: the earlier ones' standings are superseded by
        it, and a page of 500 registrations read from the start, each with the standings of
        up to 512 players, cost ~1 s of CPU and ~15 MB to anyone who opened the stream and hung
        up (tests/test_tournament_abuse.py). A live event is the last of its page, so a
        client following along still gets the standings with each change. The tournament as
        it stood at ``after`` is read from its nearest snapshot (every ``SNAPSHOT_INTERVALS``
        events), then only the page's events are replayed onto it: a stream of an arena of
        thousands of results read from the start, page by page, had replayed the whole
        tournament for every page (tests/test_tournaments.py
        ``test_a_stream_page_replays_from_the_nearest_snapshot``)."""
        self._tournament(tournament_id)
        page: builtins.list[Any] = list(
            self.store.events.get(tournament_id, gt=max(after, 0), limit=limit)
        )[:limit]
        last = max(
            (i for i, event in enumerate(page) if type(event).__name__ in STANDINGS_CHANGE),
            default=-1,
        )
        out: builtins.list[dict[str, Any]] = []
        replay: Any = None
        if last >= 0 and after > 0:  # a copy of its own, never the cache's: it is mutated below
            replay = self.store.repository.get(tournament_id, version=after)
        for index, event in enumerate(page):
            record = event_line(event)
            if index <= last:
                replay = event.mutate(replay)  # the library's public door, as domain.tournament
            if index == last:
                record["standings"] = replay.standings()
            out.append(record)
        return out

    def version(self, tournament_id: uuid.UUID) -> tuple[int, bool]:
        """The tournament's version and whether it is finished (nothing will follow)."""
        tournament = self._tournament(tournament_id)
        return int(tournament.version), tournament.status == "finished"

    def of_account(self, handle: str) -> builtins.list[uuid.UUID]:
        """The tournaments not finished in which the account is registered (the view)."""

        def run(sql: Sql) -> builtins.list[Any]:
            return sql.all(
                "SELECT s.tournament_id FROM {standings} s JOIN {list} l "
                "ON l.tournament_id = s.tournament_id "
                "WHERE s.handle_key = ? AND l.status <> 'finished'",
                [handle.lower()],
            )

        return [uuid.UUID(r["tournament_id"]) for r in self.views.read(self.view, run)]

    def withdraw_everywhere(self, handle: str, reason: str) -> int:
        """An account closed or excluded: withdrawn from every tournament it plays on in."""
        withdrawn = 0
        for tournament_id in self.of_account(handle):
            try:
                withdrawn += self.withdraw_account(tournament_id, handle, reason)
            except (ApplicationError, DomainError) as exc:
                log.warning("withdrawing %s from %s: %s", handle, tournament_id, exc)
        return withdrawn

    # -------------------------------------------------------------------------- scheduling
    def poll(self) -> int:
        """The scheduler's chore: step every tournament due by now; how many changed."""
        now = micros(self.clock())

        def run(sql: Sql) -> builtins.list[Any]:
            return sql.all(
                "SELECT tournament_id, seq FROM {list} WHERE due_at <= ? ORDER BY due_at LIMIT ?",
                [now, DUE_PAGE],
            )

        changed = 0
        for row in self.views.read(self.view, run, fresh=False):
            tournament_id = uuid.UUID(row["tournament_id"])
            try:
                moved = self.step(tournament_id)
            except (ApplicationError, DomainError) as exc:
                log.warning("tournament %s: %s", tournament_id, exc)
                moved = False
            if moved:
                changed += 1
            else:  # nothing could be done (the view is behind, or a game unreadable): later
                self._later(row["tournament_id"], int(row["seq"]))
        return changed

    def _later(self, key: str, seq: int) -> None:
        """Look at it again after ``BACKOFF`` unless an event moved it meanwhile (``seq``)."""
        later = micros(self.clock() + BACKOFF)

        def change(sql: Sql) -> None:
            sql.execute(
                "UPDATE {list} SET due_at = ? WHERE tournament_id = ? AND seq = ? "
                "AND due_at IS NOT NULL AND due_at < ?",
                [later, key, seq, later],
            )

        self.views.write(self.view, change)

    def step(self, tournament_id: uuid.UUID) -> bool:
        """Do what is due in the tournament now; whether this process recorded anything. Racing
        processes: one save is taken, the others read again and find it done."""
        for _ in range(ATTEMPTS):
            tournament = self._tournament(tournament_id)
            before = tournament.version
            tables = self._advance(tournament)
            if tournament.version == before:
                return False
            try:
                if tables:
                    self.games.create_many(
                        [
                            (
                                self._setup(
                                    list(t["players"]),
                                    tournament.rules,
                                    tournament.rated,
                                    tournament.clock,
                                ),
                                uuid.UUID(str(t["game_id"])),
                            )
                            for t in tables
                        ],
                        also=[tournament],
                    )
                    self.created_tables += len(tables)
                else:
                    self.store.save(tournament)
            except IntegrityError:
                continue  # another process changed it first: read again
            return True
        return False

    def _advance(self, tournament: Any) -> builtins.list[dict[str, Any]]:
        """Apply what is due to ``tournament`` (not saved): the tables newly seated."""
        now = self.clock()
        if tournament.status == "created":
            starts = tournament.starts_at
            if starts is None:  # its creator starts it: unless left untouched too long
                if tournament.finish_due(now) == "abandoned":
                    tournament.finish("abandoned", now)
                return []
            if parse_at(starts) > now:
                return []
            tournament.start(now)  # fewer than 2 players: finished at once
        if tournament.status != "started":
            return []
        for game_id in tournament.open_tables():
            self._record(tournament, uuid.UUID(str(game_id)), now)
            if tournament.status != "started":  # the last result finished it
                return []
        reason = tournament.finish_due(now)
        if reason is not None:
            tournament.finish(reason, now)
            return []
        if tournament.kind == "swiss":
            if tournament.open_tables():
                return []  # its games are under way: their ends wake it
            paired = tournament.pair_next_round(now)
            return [] if paired is None else list(paired["tables"])
        seated: builtins.list[dict[str, Any]] = []
        while True:
            table = tournament.seat_next_table(now)
            if table is None:
                return seated
            seated.append(table)

    def _record(self, tournament: Any, game_id: uuid.UUID, now: datetime) -> None:
        """Record the table's result if its game ended."""
        try:
            game = self.games.game(game_id)
        except NotFound:
            log.warning("tournament %s: table %s has no game", tournament.id, game_id)
            return
        if game.status != "finished":
            return
        records = self.games.history(game_id, after=0, limit=game.version)
        finished = next((r for r in records if r["type"] == "GameFinished"), records[-1])
        aborted = game.finish_reason in ("aborted", "abandoned")
        places: dict[str, int] = {}
        if not aborted:
            ranked = order.ranks(order.finish_of(game, resignations(records)))
            if ranked is None:
                aborted = True
            else:
                places = {
                    str(game.accounts[seat]): place
                    for seat, place in enumerate(ranked)
                    if game.accounts[seat] is not None
                }
        tournament.record_result(
            str(game_id),
            places,
            str(records[-1]["hash"]),
            str(finished["at"]),
            aborted,
            now,
        )

    # ------------------------------------------------------------------------------ helpers
    def _tournament(self, tournament_id: uuid.UUID) -> Any:
        try:
            found: Any = self.store.repository.get(tournament_id)
        except AggregateNotFoundError:
            found = None
        if not isinstance(found, Tournament):
            raise NotFound(f"no tournament {tournament_id}")
        return found

    def _change(self, tournament_id: uuid.UUID, change: Callable[[Any], None]) -> None:
        """Apply ``change`` to the latest tournament and save it: on a race, read and apply
        again (a refusal then is the answer: already registered, started...)."""
        for _ in range(ATTEMPTS):
            tournament = self._tournament(tournament_id)
            before = tournament.version
            change(tournament)
            if tournament.version == before:
                return
            try:
                self.store.save(tournament)
            except IntegrityError:
                continue
            return
        raise ConcurrentAction("the tournament changed too often meanwhile; retry")

    def _mu(self, handle: str, rules: dict[str, Any], tournament: Any) -> float:
        wanted = order.pool(rules, tournament.players_per_table)
        for rating in self.ratings.of_account(self.views, handle):
            if rating["pool"] == wanted:
                return float(rating["mu"])
        return DEFAULT_MU

    @staticmethod
    def _setup(handles: Sequence[str], rules: dict[str, Any], rated: bool, clock: Any) -> NewGame:
        """A table's game: its seats bound to the players' accounts, in the table's order."""
        return NewGame(
            players=list(handles),
            rules=rules,
            clock=dict(clock) if clock is not None else None,
            accounts=list(handles),
            rated=rated,
        )


def _plays(tournament: Any, handle: str) -> bool:
    return any(p.lower() == handle.lower() for p in tournament.players)


def _registered(tournament: Any, handle: str) -> str:
    return str(next(p for p in tournament.players if p.lower() == handle.lower()))


__all__ = ["NOW", "Tournaments", "TournamentsView", "at_micros"]
