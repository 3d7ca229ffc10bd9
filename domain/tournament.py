"""The ``Tournament`` aggregate (issue #45): Swiss rounds and arenas, whose tables are games.

Every public command checks first and raises a DomainError (recording nothing) when refused; then
it triggers explicit past-tense events whose ``update`` only assigns what the command computed.
The pairing of a Swiss round and the seating of an arena table are computed here, from the
aggregate's own state, by the pure rules below (``swiss_pairing``, ``arena_table``), so that the
audit (``audit_tournament``) recomputes each one from the events before it and compares.

The rules, as docs/tournaments.md tells players and auditors:

- Points: at a table of m players, place p (0 first; tied players share the average of their
  places' points) gives m-1-p points; a bye gives (players_per_table-1)/2; an aborted or abandoned
  table gives everyone 0 and counts as no game. Arena: a win after two wins in a row (in this
  tournament, aborted tables left aside) counts double.
- Swiss order: points, then rating at registration, then registration order. Byes: n mod k
  players, the lowest in that order among those with the fewest byes; fewer than k players sit at
  one short table. The others are split into tables of k with the fewest repeat meetings (pairs
  who met before, counted once per earlier table); among such splits, the first when tables are
  filled top-down, each opened by the highest unseated player with the companions earliest in the
  order. The search examines at most ``SEARCH_BUDGET`` candidate tables and keeps the best found.
- Seat order: each table is rotated so that seat 0 goes to the player who has sat first least
  often (ties: the higher in the order).
- Arena: the player waiting longest opens the next table with the waiting players closest in
  points, then rating.
- Standings (Swiss): points, opponents' points (Buchholz), wins, rating, registration order.
  Arena: points, wins, fewer games, registration order.
"""

from __future__ import annotations

import heapq
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from itertools import combinations
from typing import Any

from eventsourcing.domain import Aggregate

from domain import audit as game_audit
from domain import jsondoc
from domain.audit import Check, MalformedExport
from domain.commands import is_int
from domain.errors import (
    AlreadyRegistered,
    InvalidRequest,
    NotRegistered,
    TooManyPauses,
    TournamentFinished,
    TournamentFull,
    TournamentNotReady,
    TournamentStarted,
)
from domain.game import CANONICAL_JSON, check_clock, check_handle, format_at, parse_at, shown
from domain.ratings import finish_of, ranks
from domain.rules import normalize_rules

TABLE_NAMESPACE = uuid.UUID("5b0f3c2e-7d1a-5e8b-9c4f-2a6d8e1b3c70")
"""The namespace of tables' game ids: ``uuid5(TABLE_NAMESPACE, "<tournament>/<round>/<index>")``
(Swiss) or ``"<tournament>/arena/<n>"`` (arena): every host computes the same id, so a table's game
is created once however many schedulers race to create it."""

KINDS = ("swiss", "arena")
STATUSES = ("created", "started", "finished")
WITHDRAW_REASONS = ("withdrew", "account_closed", "excluded")
FINISH_REASONS = ("completed", "not_enough_players", "window_closed", "cancelled", "abandoned")
IDLE = timedelta(days=30)
"""A tournament its creator is to start (``starts_at`` null) that records no event for this long,
as far ahead as a start may be planned, is due to finish as ``abandoned``: else one never
started is listed as open for ever (its players, its page, the scheduler's index)."""
TABLE_SIZES = (2, 8)
MAX_ROUNDS = 50
MINUTES_RANGE = (1, 10_080)  # an arena's window: a minute to a week
MAX_PLAYERS = 512
MAX_TOURNAMENT_NAME = 80
SEARCH_BUDGET = 5_000
"""The Swiss search examines at most this many candidate tables per round, then keeps the best
split found (the first split, the top-down fill, is always complete): a round of hundreds of
players whose repeats are unavoidable costs a bounded time, here and in the audit."""
DEFAULT_RATING = 25.0
FIRE_STREAK = 2  # arena: a win after this many wins in a row counts double
MAX_ARENA_TABLES = 20_000
"""The most tables an arena seats; past it, its players wait for the window to close (the tables
under way finish and count). Each table records two events (seated, its result): 20,000 make
40,000, which beside the pauses' bound (51,200, ``MAX_PAUSES``) and 512 registrations keeps the
history under ``MAX_LINES``, so its export still audits. A day's arena of 512 players at tables of
two playing five-minute games would seat ~74,000. Of the rule: the audit's replay seats no table
past it either."""
MAX_PAUSES = 50
"""The most times an arena's entrant pauses in one tournament; one more pause is refused (409
``too_many_pauses``, nothing recorded), while resuming stays allowed, so a paused player can
always come back. An honest player pauses for a break: 50 is one every half hour through the
longest arena the service creates (a day). A pause and its resume are two events, each moving
the tournaments' view and every open tournament page (which reads the tournament again): without
a bound one account looping on them grew the history without end, and past ``MAX_LINES`` the
export no longer audits. With it, even 512 entrants (``MAX_PLAYERS``) pausing and resuming all
they may record 51,200 events, about half of ``MAX_LINES``. Counted from the ``Paused`` events
as they apply (``pauses``), so a replay counts as the live tournament did. Not a rule of the
recorded tournament: the audit replays the pauses recorded, those of tournaments stored before
the bound too."""


# ------------------------------------------------------------------------------ pure rules
def table_points(places: Mapping[str, int]) -> dict[str, float]:
    """Each player's points from a table's places: m-1-p at a table of m for place p (0 first);
    players tied at a place share the average of the places they cover."""
    m = len(places)
    counts: dict[int, int] = {}
    for place in places.values():
        counts[place] = counts.get(place, 0) + 1
    return {h: m - 1 - p - (counts[p] - 1) / 2 for h, p in places.items()}


def bye_points(players_per_table: int) -> float:
    return (players_per_table - 1) / 2


def places_problem(places: Any, players: Sequence[str]) -> str | None:
    """Why ``places`` is not a table's places for ``players`` (as domain.ratings.ranks gives
    them: 0 first, ties share a place and the next place counts them), or None."""
    if not isinstance(places, Mapping):
        return "places must be an object of handle to place"
    if sorted(places) != sorted(players):
        return f"places must name exactly the table's players: {', '.join(players)}"
    values = list(places.values())
    if not all(is_int(v) and 0 <= v < len(players) for v in values):
        return "each place is an integer from 0 to the table's size - 1"
    if any(v != sum(1 for w in values if w < v) for v in values):
        return "places are ranks: 0 first, tied players share a place, the next counts them"
    return None


Pair = frozenset[str]


def _repeats(table: Sequence[str], met: Mapping[Pair, int]) -> int:
    return sum(met.get(frozenset((a, b)), 0) for a, b in combinations(table, 2))


def rotate_seats(table: Sequence[str], firsts: Mapping[str, int]) -> list[str]:
    """The table rotated so seat 0 goes to the player who sat first least often (ties: the one
    earlier in ``table``); the others keep their cyclic order."""
    start = min(range(len(table)), key=lambda i: (firsts.get(table[i], 0), i))
    return [*table[start:], *table[:start]]


def split_tables(
    players: Sequence[str], size: int, met: Mapping[Pair, int], budget: int = SEARCH_BUDGET
) -> list[list[str]]:
    """``players`` (in order, best first; a multiple of ``size``) split into tables of ``size``
    with the fewest repeat meetings; among those, the first in the top-down order: each table
    opened by the highest unseated player, companions as early in the order as they can be.
    A depth-first search in exactly that order, pruned when it cannot beat the best found; it
    stops after ``budget`` candidate tables (the first split found is always complete)."""
    best: list[list[str]] = []
    best_cost = math.inf
    examined = 0

    def search(unseated: list[str], tables: list[list[str]], cost: int) -> None:
        nonlocal best, best_cost, examined
        if not unseated:
            best, best_cost = [list(t) for t in tables], cost
            return
        head, rest = unseated[0], unseated[1:]
        for companions in combinations(rest, size - 1):
            if best_cost == 0 or (best and examined >= budget):
                return
            examined += 1
            table = [head, *companions]
            added = cost + _repeats(table, met)
            if added >= best_cost:
                continue
            chosen = set(companions)
            tables.append(table)
            search([p for p in rest if p not in chosen], tables, added)
            tables.pop()

    search(list(players), [], 0)
    return best


def swiss_pairing(
    order: Sequence[str],
    size: int,
    byes_had: Mapping[str, int],
    met: Mapping[Pair, int],
    firsts: Mapping[str, int],
    budget: int = SEARCH_BUDGET,
) -> tuple[list[list[str]], list[str]]:
    """A Swiss round: the tables (seat order) and the byes, from the active players in
    ``order`` (points, rating, registration: best first). Needs two players or more."""
    n = len(order)
    if n < 2:
        raise ValueError("a round needs two players or more")
    if n < size:
        return [rotate_seats(order, firsts)], []
    count = n % size
    by_need = sorted(range(n), key=lambda i: (byes_had.get(order[i], 0), -i))
    bye_set = {order[i] for i in by_need[:count]}
    byes = [p for p in order if p in bye_set]
    seated = [p for p in order if p not in bye_set]
    tables = split_tables(seated, size, met, budget)
    return [rotate_seats(t, firsts) for t in tables], byes


def arena_table(
    waiting: Sequence[str],
    size: int,
    since: Mapping[str, int],
    points: Mapping[str, float],
    ratings: Mapping[str, float],
    firsts: Mapping[str, int],
) -> list[str] | None:
    """The next arena table from the players ``waiting`` (in registration order): the one
    waiting longest (``since``, then registration) and the waiting players closest to them in
    points, then in rating (ties: waiting longer, then registration). None when too few."""
    if len(waiting) < size:
        return None
    rank = {p: i for i, p in enumerate(waiting)}
    anchor = min(waiting, key=lambda p: (since[p], rank[p]))
    at_points, at_rating = points[anchor], ratings[anchor]
    others = heapq.nsmallest(  # the closest few: no sort of everyone waiting
        size - 1,
        (p for p in waiting if p != anchor),
        key=lambda p: (abs(points[p] - at_points), abs(ratings[p] - at_rating), since[p], rank[p]),
    )
    return rotate_seats([anchor, *others], firsts)


def new_stats() -> dict[str, Any]:
    return {
        "points": 0.0,
        "games": 0,
        "wins": 0,
        "byes": 0,
        "opponents": [],
        "streak": 0,
        "firsts": 0,
    }


def table_id(tournament_id: Any, key: str) -> str:
    return str(uuid.uuid5(TABLE_NAMESPACE, f"{tournament_id}/{key}"))


# ------------------------------------------------------------------------------ validation
def check_tournament_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest("a tournament's name must be a non-empty string")
    cleaned: str = name.strip()
    if not cleaned.isprintable():
        raise InvalidRequest("a tournament's name cannot hold line breaks or control characters")
    if len(cleaned) > MAX_TOURNAMENT_NAME:
        raise InvalidRequest(f"a tournament's name is at most {MAX_TOURNAMENT_NAME} characters")
    return cleaned


def _at_text(at: Any, what: str) -> str:
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise InvalidRequest(f"{what} must carry a time zone")
        return format_at(at)
    if not isinstance(at, str):
        raise InvalidRequest(f"{what} must be a time (YYYY-MM-DDTHH:MM:SS.ffffffZ)")
    try:
        return format_at(parse_at(at))
    except ValueError as exc:
        raise InvalidRequest(f"{what}: {exc}") from None


def check_settings(
    name: Any,
    kind: Any,
    rules: Any,
    players_per_table: Any,
    rounds: Any,
    minutes: Any,
    clock: Any,
    rated: Any,
    starts_at: Any,
    creator: Any,
) -> dict[str, Any]:
    """A tournament's settings, checked and normalized (InvalidRequest otherwise)."""
    if kind not in KINDS:
        raise InvalidRequest('kind must be "swiss" or "arena"')
    low, high = TABLE_SIZES
    if not is_int(players_per_table) or not low <= players_per_table <= high:
        raise InvalidRequest(f"players_per_table must be an integer from {low} to {high}")
    if kind == "swiss":
        if not is_int(rounds) or not 1 <= rounds <= MAX_ROUNDS:
            raise InvalidRequest(f"a Swiss tournament has 1 to {MAX_ROUNDS} rounds")
        if minutes is not None:
            raise InvalidRequest("minutes are for arenas; a Swiss tournament has rounds")
    else:
        first, last = MINUTES_RANGE
        if not is_int(minutes) or not first <= minutes <= last:
            raise InvalidRequest(f"an arena lasts {first} to {last} minutes")
        if rounds is not None:
            raise InvalidRequest("rounds are for Swiss tournaments; an arena has minutes")
    if clock is None:
        raise InvalidRequest('a tournament\'s tables have a clock: {"turn_seconds": T}')
    if not isinstance(rated, bool):
        raise InvalidRequest("rated must be true or false")
    return {
        "name": check_tournament_name(name),
        "kind": kind,
        "rules": normalize_rules(rules, players_per_table).to_dict(),
        "players_per_table": players_per_table,
        "rounds": rounds,
        "minutes": minutes,
        "clock": check_clock(clock, players_per_table),
        "rated": rated,
        "starts_at": None if starts_at is None else _at_text(starts_at, "starts_at"),
        "creator": check_handle(creator),
    }


def _key(handle: str) -> str:
    """Handles that differ only in case are one account's."""
    return handle.lower()


# ------------------------------------------------------------------------------ the aggregate

# The events that may move a standing: ``Tournament.standings`` reads only what these change
# (a pause, a resumption or an arena's table seated moves none).
STANDINGS_CHANGE = frozenset(
    {"Registered", "Withdrawn", "Started", "RoundPaired", "ResultRecorded", "Finished"}
)


class Tournament(Aggregate):
    # ---------------------------------------------------------------------------------- events
    class Event(Aggregate.Event):
        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Tournament)
            self.update(aggregate)

        def update(self, tournament: Tournament) -> None:
            raise NotImplementedError

    class Created(Event, Aggregate.Created):
        name: str
        kind: str
        rules: dict[str, Any]
        players_per_table: int
        rounds: int | None
        minutes: int | None
        clock: dict[str, int]
        rated: bool
        starts_at: str | None
        creator: str

        def update(self, tournament: Tournament) -> None:
            pass  # __init__ assigned it all

    class Registered(Event):
        handle: str
        rating: float

        def update(self, tournament: Tournament) -> None:
            key = _key(self.handle)
            tournament.entrants[key] = {
                "handle": self.handle,
                "rating": self.rating,
                "withdrawn": None,
                "paused": False,
            }
            tournament.stats[key] = new_stats()
            tournament.since[key] = self.originator_version
            tournament.order_of[key] = tournament.registrations
            tournament.registrations += 1
            tournament.idle[key] = None
            tournament.points_of[key] = 0.0
            tournament.firsts_of[key] = 0
            tournament.rating_of[key] = self.rating

    class Withdrawn(Event):
        handle: str
        reason: str

        def update(self, tournament: Tournament) -> None:
            key = _key(self.handle)
            tournament.idle.pop(key, None)
            if tournament.status == "created":  # before the start: as if never registered
                del tournament.entrants[key]
                del tournament.stats[key]
                tournament.since.pop(key, None)
            else:
                tournament.entrants[key]["withdrawn"] = self.reason

    class Started(Event):
        at: str

        def update(self, tournament: Tournament) -> None:
            tournament.status = "started"
            tournament.started_at = self.at

    class RoundPaired(Event):
        number: int
        tables: list[dict[str, Any]]
        byes: list[str]

        def update(self, tournament: Tournament) -> None:
            tournament.round_list.append(
                {"number": self.number, "tables": [t["game_id"] for t in self.tables]}
            )
            tournament.round_byes.append(list(self.byes))
            for handle in self.byes:
                row = tournament.stats[_key(handle)]
                row["byes"] += 1
                row["points"] += bye_points(tournament.players_per_table)
                tournament.points_of[_key(handle)] = row["points"]
            for table in self.tables:
                tournament.add_table(table["game_id"], table["players"], self.number)

    class TableSeated(Event):
        game_id: str
        players: list[str]

        def update(self, tournament: Tournament) -> None:
            tournament.add_table(self.game_id, self.players, None)

    class ResultRecorded(Event):
        game_id: str
        places: dict[str, int]
        last_hash: str
        finished_at: str
        aborted: bool

        def update(self, tournament: Tournament) -> None:
            tournament.results[self.game_id] = {
                "places": dict(self.places),
                "last_hash": self.last_hash,
                "finished_at": self.finished_at,
                "aborted": self.aborted,
                "version": self.originator_version,
            }
            tournament.open_ids.pop(self.game_id, None)
            players = tournament.tables[tournament.table_index[self.game_id]]["players"]
            for handle in players:
                key = _key(handle)
                tournament.busy.pop(key, None)
                tournament.since[key] = self.originator_version
                entrant = tournament.entrants[key]
                if entrant["withdrawn"] is None and not entrant["paused"]:
                    tournament.idle[key] = None
            if not self.aborted:
                tournament.count_result(players, self.places)

    class Paused(Event):
        handle: str

        def update(self, tournament: Tournament) -> None:
            key = _key(self.handle)
            tournament.entrants[key]["paused"] = True
            tournament.idle.pop(key, None)
            # (setdefault: a tournament restored from a snapshot taken before the count)
            counts = tournament.__dict__.setdefault("pause_counts", {})
            counts[key] = counts.get(key, 0) + 1

    class Resumed(Event):
        handle: str

        def update(self, tournament: Tournament) -> None:
            key = _key(self.handle)
            tournament.entrants[key]["paused"] = False
            tournament.since[key] = self.originator_version
            if key not in tournament.busy:
                tournament.idle[key] = None

    class Finished(Event):
        reason: str

        def update(self, tournament: Tournament) -> None:
            tournament.status = "finished"
            tournament.finish_reason = self.reason
            tournament.finished_at = format_at(self.timestamp)

    EVENT_TYPES = (
        "Created",
        "Registered",
        "Withdrawn",
        "Started",
        "RoundPaired",
        "TableSeated",
        "ResultRecorded",
        "Paused",
        "Resumed",
        "Finished",
    )

    def __init__(
        self,
        name: str,
        kind: str,
        rules: dict[str, Any],
        players_per_table: int,
        rounds: int | None,
        minutes: int | None,
        clock: dict[str, int],
        rated: bool,
        starts_at: str | None,
        creator: str,
    ) -> None:
        settings = check_settings(
            name, kind, rules, players_per_table, rounds, minutes, clock, rated, starts_at, creator
        )
        self.name: str = settings["name"]
        self.kind: str = settings["kind"]
        self.rules: dict[str, Any] = settings["rules"]
        self.players_per_table: int = settings["players_per_table"]
        self.rounds_planned: int | None = settings["rounds"]
        self.minutes: int | None = settings["minutes"]
        self.clock: dict[str, int] = settings["clock"]
        self.rated: bool = settings["rated"]
        self.starts_at: str | None = settings["starts_at"]
        self.creator: str = settings["creator"]
        self.status = "created"
        self.started_at: str | None = None
        self.finished_at: str | None = None
        self.finish_reason: str | None = None
        # key (lowercased handle) -> {"handle", "rating", "withdrawn", "paused"}, in
        # registration order (dicts keep it)
        self.entrants: dict[str, dict[str, Any]] = {}
        self.since: dict[str, int] = {}  # arena: the version at which each began to wait
        self.stats: dict[str, dict[str, Any]] = {}  # key -> new_stats(), kept as results come
        self.busy: dict[str, None] = {}  # the keys of the players at open tables (a set)
        self.idle: dict[str, None] = {}  # registered, not paused, withdrawn nor busy (a set)
        self.order_of: dict[str, int] = {}  # key -> registration number (0 first)
        self.registrations = 0
        # Flat copies of stats' points and firsts and of the ratings: the arena's seating reads
        # them for every waiting player at every table.
        self.points_of: dict[str, float] = {}
        self.firsts_of: dict[str, int] = {}
        self.rating_of: dict[str, float] = {}
        self.tables: list[dict[str, Any]] = []  # {"game_id", "players", "round"}, as seated
        self.table_index: dict[str, int] = {}
        self.open_ids: dict[str, None] = {}  # a set, as a dict: plain state for snapshots
        self.results: dict[str, dict[str, Any]] = {}  # game id -> the ResultRecorded fields
        self.round_list: list[dict[str, Any]] = []  # {"number", "tables": [game ids]}
        self.round_byes: list[list[str]] = []
        self.pause_counts: dict[str, int] = {}  # key -> its Paused events (``pauses``)

    @classmethod
    def create(
        cls,
        *,
        name: Any,
        kind: Any,
        rules: Any,
        players_per_table: Any,
        rounds: Any = None,
        minutes: Any = None,
        clock: Any,
        rated: Any = False,
        starts_at: Any = None,
        creator: Any,
        id: uuid.UUID | None = None,  # the library's name for it
        at: datetime | None = None,
    ) -> Tournament:
        """A new tournament whose Created event holds its settings normalized (InvalidRequest
        when they are not valid). ``id`` defaults to a new uuid4; ``at`` to now."""
        settings = check_settings(
            name, kind, rules, players_per_table, rounds, minutes, clock, rated, starts_at, creator
        )
        # The library's door for a given id (calling the class takes none): as Game.start does.
        return cls._create(cls.Created, id=id or uuid.uuid4(), timestamp=at, **settings)

    def add_table(self, game_id: str, players: Sequence[str], number: int | None) -> None:
        self.table_index[game_id] = len(self.tables)
        self.tables.append({"game_id": game_id, "players": list(players), "round": number})
        self.open_ids[game_id] = None
        self.busy.update((_key(h), None) for h in players)
        for handle in players:
            self.idle.pop(_key(handle), None)
        first = _key(players[0])
        self.stats[first]["firsts"] += 1
        self.firsts_of[first] = self.stats[first]["firsts"]

    def count_result(self, players: Sequence[str], places: Mapping[str, int]) -> None:
        """A table's points, wins and meetings added to its players' stats (arena: a win
        after ``FIRE_STREAK`` wins in a row counts double)."""
        points = table_points(places)
        for handle in players:
            row = self.stats[_key(handle)]
            won = places[handle] == 0
            gained = points[handle]
            if self.kind == "arena" and won and row["streak"] >= FIRE_STREAK:
                gained *= 2
            row["points"] += gained
            self.points_of[_key(handle)] = row["points"]
            row["games"] += 1
            row["wins"] += int(won)
            row["streak"] = row["streak"] + 1 if won else 0
            row["opponents"].extend(_key(o) for o in players if o != handle)

    # --------------------------------------------------------------------- recording events
    def _stamp(self, at: datetime | None) -> datetime:
        """The command's time, or now; never before the last event's (a clock stepped back must
        not date an event before the one it follows, which the audit refuses)."""
        stamp = at if at is not None else datetime.now(UTC)
        last: datetime = self.modified_on
        return stamp if stamp >= last else last

    def _trigger(self, event_class: type[Any], when: datetime | None, **kwargs: Any) -> None:
        self.trigger_event(event_class, timestamp=self._stamp(when), **kwargs)

    # ------------------------------------------------------------------------------- queries
    @property
    def players(self) -> list[str]:
        """Registered and not withdrawn, in registration order."""
        return [e["handle"] for e in self.entrants.values() if e["withdrawn"] is None]

    def _active(self) -> list[str]:
        return [k for k, e in self.entrants.items() if e["withdrawn"] is None]

    def entrant(self, handle: str) -> dict[str, Any] | None:
        return self.entrants.get(_key(handle))

    def pauses(self, handle: str) -> int:
        """How many times ``handle`` paused in this tournament: counted by the ``Paused`` events
        as they apply, so a replay of the events counts the same. A tournament restored from a
        snapshot taken before the count existed counts the pauses after that snapshot only (an
        arena under way when the bound came gives its players up to ``MAX_PAUSES`` more)."""
        counts: dict[str, int] = self.__dict__.get("pause_counts") or {}
        return counts.get(_key(handle), 0)

    @property
    def ends_at(self) -> str | None:
        """An arena's close: its start plus its minutes."""
        if self.kind != "arena" or self.started_at is None or self.minutes is None:
            return None
        return format_at(parse_at(self.started_at) + timedelta(minutes=self.minutes))

    def window_open(self, at: datetime) -> bool:
        ends = self.ends_at
        return self.status == "started" and ends is not None and at < parse_at(ends)

    def seats_more(self) -> bool:
        """Whether the arena may seat another table (``MAX_ARENA_TABLES``)."""
        return len(self.tables) < MAX_ARENA_TABLES

    def open_tables(self) -> list[str]:
        """The game ids of tables without a result, in the order they were seated."""
        return [t["game_id"] for t in self.tables if t["game_id"] in self.open_ids]

    def round_complete(self) -> bool:
        """Every table of the last round has its result (true before the first round)."""
        if not self.round_list:
            return True
        return not any(g in self.open_ids for g in self.round_list[-1]["tables"])

    def waiting(self) -> list[str]:
        """Arena: registered, neither paused nor withdrawn, and not at an open table."""
        return [self.entrants[k]["handle"] for k in self.waiting_keys()]

    def waiting_keys(self) -> list[str]:
        return sorted(self.idle, key=self.order_of.__getitem__)

    def table_of(self, game_id: str) -> dict[str, Any] | None:
        index = self.table_index.get(game_id)
        return None if index is None else self.tables[index]

    def scores(self) -> dict[str, dict[str, Any]]:
        """Per entrant (lowercased handle): points, games, wins, byes, opponents (keys, one per
        meeting), the current run of wins, and the times they sat first; kept up to date as
        events apply (results count in the order they were recorded: runs of wins depend on
        it). Read only."""
        return self.stats

    def met(self) -> dict[Pair, int]:
        """How often each pair of players sat at one table (seated, whatever the result)."""
        counts: dict[Pair, int] = {}
        for seated in self.tables:
            keys = [_key(h) for h in seated["players"]]
            for a, b in combinations(keys, 2):
                pair = frozenset((a, b))
                counts[pair] = counts.get(pair, 0) + 1
        return counts

    def standings(self) -> list[dict[str, Any]]:
        """Every player who took part (withdrawn ones too once the tournament started, marked
        so), best first, with the tie-break fields."""
        scores = self.scores()
        order = list(self.entrants)
        rows = []
        for position, key in enumerate(order):
            entrant, score = self.entrants[key], scores[key]
            row: dict[str, Any] = {
                "handle": entrant["handle"],
                "points": score["points"],
                "games": score["games"],
                "wins": score["wins"],
                "byes": score["byes"],
                "rating": entrant["rating"],
                "withdrawn": entrant["withdrawn"] is not None,
                "registered": position + 1,
            }
            if self.kind == "swiss":
                row["buchholz"] = sum(scores[o]["points"] for o in score["opponents"])
            else:
                row["streak"] = score["streak"]
            rows.append(row)
        rows.sort(key=self.standing_key)
        return [{"rank": rank, **row} for rank, row in enumerate(rows, start=1)]

    def standing_key(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        if self.kind == "swiss":
            return (
                -row["points"],
                -row["buchholz"],
                -row["wins"],
                -row["rating"],
                row["registered"],
            )
        return (-row["points"], -row["wins"], row["games"], row["registered"])

    def swiss_order(self, scores: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
        """The active players' keys, best first: points, rating, registration."""
        scores = scores or self.scores()
        position = {k: i for i, k in enumerate(self.entrants)}
        return sorted(
            self._active(),
            key=lambda k: (-scores[k]["points"], -self.entrants[k]["rating"], position[k]),
        )

    @property
    def rounds(self) -> list[dict[str, Any]]:
        """The Swiss rounds as the contract serves them: number, tables (game id, players, and
        the result when there is one), byes."""
        return [
            {
                "number": r["number"],
                "tables": [self.table_json(g) for g in r["tables"]],
                "byes": list(byes),
            }
            for r, byes in zip(self.round_list, self.round_byes, strict=True)
        ]

    def table_json(self, game_id: str) -> dict[str, Any]:
        seated = self.tables[self.table_index[game_id]]
        result = self.results.get(game_id)
        return {
            "game_id": game_id,
            "players": list(seated["players"]),
            "result": None
            if result is None
            else {
                "places": dict(result["places"]),
                "aborted": result["aborted"],
                "finished_at": result["finished_at"],
            },
        }

    def as_json(self) -> dict[str, Any]:
        """The contract's ``GET /v1/tournaments/{id}`` body."""
        return {
            "id": str(self.id),
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            "players": self.players,
            "rounds": self.rounds,
            "tables": [self.table_json(t["game_id"]) for t in self.tables],
            "standings": self.standings(),
            "rules": dict(self.rules),
            "players_per_table": self.players_per_table,
            "rounds_planned": self.rounds_planned,
            "minutes": self.minutes,
            "clock": dict(self.clock),
            "rated": self.rated,
            "starts_at": self.starts_at,
            "started_at": self.started_at,
            "ends_at": self.ends_at,
            "finished_at": self.finished_at,
            "creator": self.creator,
            "finish_reason": self.finish_reason,
            "version": self.version,
        }

    # ------------------------------------------------------------------------------ commands
    def _check_not_finished(self) -> None:
        if self.status == "finished":
            raise TournamentFinished("the tournament is finished")

    def register(
        self, handle: str, rating: float = DEFAULT_RATING, at: datetime | None = None
    ) -> None:
        """Register ``handle`` with its rating in the tournament's pool (its mu; 25.0 when none)."""
        check_handle(handle)
        if isinstance(rating, bool) or not isinstance(rating, int | float):
            raise InvalidRequest("a rating is a number")
        if not math.isfinite(rating):
            raise InvalidRequest("a rating is a finite number")
        self._check_not_finished()
        now = self._stamp(at)
        if self.status == "started":
            if self.kind == "swiss":
                raise TournamentStarted("the Swiss tournament has started: no more registrations")
            if not self.window_open(now):
                raise TournamentFinished("the arena's window has closed")
        found = self.entrant(handle)
        if found is not None:
            if found["withdrawn"] is not None:
                raise AlreadyRegistered(f"{found['handle']} withdrew and cannot come back")
            raise AlreadyRegistered(f"{found['handle']} is registered already")
        if len(self.entrants) >= MAX_PLAYERS:
            raise TournamentFull(f"a tournament holds at most {MAX_PLAYERS} players")
        self._trigger(self.Registered, now, handle=handle, rating=float(rating))

    def withdraw(self, handle: str, reason: str = "withdrew", at: datetime | None = None) -> None:
        """``handle`` leaves: never paired again; a game under way continues and counts."""
        if reason not in WITHDRAW_REASONS:
            raise InvalidRequest(f"a withdrawal's reason is one of {', '.join(WITHDRAW_REASONS)}")
        self._check_not_finished()
        found = self.entrant(handle)
        if found is None or found["withdrawn"] is not None:
            raise NotRegistered(f"{handle} is not a player of this tournament")
        self._trigger(self.Withdrawn, at, handle=found["handle"], reason=reason)

    def start(self, at: str | datetime | None = None) -> None:
        """Start now (or at ``at``). Fewer than two players: finished at once, for that reason."""
        self._check_not_finished()
        if self.status != "created":
            raise TournamentNotReady("the tournament has started already")
        when = parse_at(_at_text(at, "at")) if at is not None else self._stamp(None)
        when = self._stamp(when)
        self._trigger(self.Started, when, at=format_at(when))
        if len(self._active()) < 2:
            self._trigger(self.Finished, when, reason="not_enough_players")

    def _check_started(self) -> None:
        self._check_not_finished()
        if self.status != "started":
            raise TournamentNotReady("the tournament has not started")

    def pair_next_round(self, at: datetime | None = None) -> dict[str, Any] | None:
        """Swiss: pair the next round by the rule and record it; its tables' game ids are
        ``uuid5(TABLE_NAMESPACE, "<id>/<round>/<index>")``. Returns the round as ``rounds``
        serves it, or None when fewer than two players remain (the tournament then finishes)."""
        if self.kind != "swiss":
            raise InvalidRequest("an arena seats tables one by one, it has no rounds")
        self._check_started()
        if not self.round_complete():
            raise TournamentNotReady("a table of the last round has no result yet")
        assert self.rounds_planned is not None
        if len(self.round_list) >= self.rounds_planned:
            raise TournamentNotReady("every round has been played")
        scores = self.scores()
        order = self.swiss_order(scores)
        if len(order) < 2:
            self._trigger(self.Finished, at, reason="not_enough_players")
            return None
        byes_had = {k: scores[k]["byes"] for k in order}
        firsts = {k: scores[k]["firsts"] for k in order}
        tables, byes = swiss_pairing(order, self.players_per_table, byes_had, self.met(), firsts)
        number = len(self.round_list) + 1
        handle = {k: self.entrants[k]["handle"] for k in order}
        self._trigger(
            self.RoundPaired,
            at,
            number=number,
            tables=[
                {
                    "game_id": table_id(self.id, f"{number}/{index}"),
                    "players": [handle[k] for k in table],
                }
                for index, table in enumerate(tables)
            ],
            byes=[handle[k] for k in byes],
        )
        return self.rounds[-1]

    def seat_next_table(self, at: datetime | None = None) -> dict[str, Any] | None:
        """Arena: seat the next table from the players waiting now, by the rule; its game id is
        ``uuid5(TABLE_NAMESPACE, "<id>/arena/<n>")``. None when too few wait or the window is
        closed, or ``MAX_ARENA_TABLES`` are seated; else the table (game id, players)."""
        if self.kind != "arena":
            raise InvalidRequest("a Swiss tournament pairs whole rounds")
        self._check_started()
        now = self._stamp(at)
        if not self.window_open(now) or not self.seats_more():
            return None
        table = arena_table(
            self.waiting_keys(),
            self.players_per_table,
            self.since,
            self.points_of,
            self.rating_of,
            self.firsts_of,
        )
        if table is None:
            return None
        game_id = table_id(self.id, f"arena/{len(self.tables)}")
        players = [self.entrants[k]["handle"] for k in table]
        self._trigger(self.TableSeated, now, game_id=game_id, players=players)
        return {"game_id": game_id, "players": players}

    def record_result(
        self,
        game_id: str,
        places: Mapping[str, int] | None,
        last_hash: str,
        finished_at: str | datetime,
        aborted: bool = False,
        at: datetime | None = None,
    ) -> None:
        """The result of an open table: each player's place (domain.ratings.ranks, by handle),
        the game's last hash and finish time, and whether it was aborted or abandoned (then
        ``places`` may be empty: everyone gets 0). A Swiss tournament whose last round is
        complete, or an arena whose window closed with no table open, then finishes."""
        self._check_started()
        seated = self.table_of(game_id) if isinstance(game_id, str) else None
        if seated is None:
            raise TournamentNotReady(f"no table {game_id} in this tournament")
        if game_id not in self.open_ids:
            raise TournamentNotReady(f"table {game_id} has its result already")
        if not isinstance(aborted, bool):
            raise InvalidRequest("aborted must be true or false")
        given = {} if places is None else places
        if not (aborted and not given):
            problem = places_problem(given, seated["players"])
            if problem:
                raise InvalidRequest(problem)
        if not isinstance(last_hash, str) or not 0 < len(last_hash) <= 128:
            raise InvalidRequest("last_hash is the game's last event's hash")
        self._trigger(
            self.ResultRecorded,
            at,
            game_id=game_id,
            places={h: int(given[h]) for h in seated["players"] if h in given},
            last_hash=last_hash,
            finished_at=_at_text(finished_at, "finished_at"),
            aborted=aborted,
        )
        reason = self.finish_due(self.modified_on)
        if reason == "completed":
            self._trigger(self.Finished, at, reason=reason)

    def pause(self, handle: str, at: datetime | None = None, *, replay: bool = False) -> None:
        """Arena: ``handle`` is seated at no new table until they resume; at most
        ``MAX_PAUSES`` times in the tournament (not in a ``replay``: the audit replays the
        pauses recorded, those of tournaments stored before the bound too)."""
        found = self._arena_entrant(handle)
        if found["paused"]:
            raise TournamentNotReady(f"{found['handle']} is paused already")
        if not replay and self.pauses(found["handle"]) >= MAX_PAUSES:
            raise TooManyPauses(
                f"{found['handle']} has paused {MAX_PAUSES} times, the most in a tournament: "
                "play on, or withdraw"
            )
        self._trigger(self.Paused, at, handle=found["handle"])

    def resume(self, handle: str, at: datetime | None = None) -> None:
        found = self._arena_entrant(handle)
        if not found["paused"]:
            raise TournamentNotReady(f"{found['handle']} is not paused")
        self._trigger(self.Resumed, at, handle=found["handle"])

    def _arena_entrant(self, handle: str) -> dict[str, Any]:
        if self.kind != "arena":
            raise InvalidRequest("only an arena's players pause and resume")
        self._check_not_finished()
        found = self.entrant(handle)
        if found is None or found["withdrawn"] is not None:
            raise NotRegistered(f"{handle} is not a player of this tournament")
        return found

    def finish_due(self, at: datetime | None = None) -> str | None:
        """The reason the tournament should finish now, if it should: ``completed`` (Swiss:
        the last round has every result; arena: the window closed with no table open and some
        table played), ``window_closed`` (an arena that closed without a single table), or
        ``not_enough_players`` (a started Swiss with fewer than two players left and no table
        open), or ``abandoned`` (one its creator was to start, ``IDLE`` after its last event).
        The scheduler asks this and calls ``finish``."""
        if self.status == "created":
            now = at if at is not None else datetime.now(UTC)
            idle = self.starts_at is None and now >= self.modified_on + IDLE
            return "abandoned" if idle else None
        if self.status != "started" or self.open_ids:
            return None
        if self.kind == "swiss":
            if len(self.round_list) >= (self.rounds_planned or 0):
                return "completed"
            return "not_enough_players" if len(self._active()) < 2 else None
        now = at if at is not None else datetime.now(UTC)
        ends = self.ends_at
        if ends is None or now < parse_at(ends):
            return None
        return "completed" if self.tables else "window_closed"

    def finish(self, reason: str, at: datetime | None = None) -> None:
        """Finish for ``reason``: ``cancelled`` at any time; the others only when due
        (``finish_due``)."""
        if reason not in FINISH_REASONS:
            raise InvalidRequest(f"a finish's reason is one of {', '.join(FINISH_REASONS)}")
        self._check_not_finished()
        now = self._stamp(at)
        if reason != "cancelled":
            if self.status == "created" and reason == "not_enough_players":
                raise TournamentNotReady("a tournament not started finishes by starting it")
            due = self.finish_due(now)
            if due != reason:
                raise TournamentNotReady(
                    f"the tournament is not over ({reason}): "
                    + (f"it is due to finish as {due}" if due else "it goes on")
                )
        self._trigger(self.Finished, now, reason=reason)


# ------------------------------------------------------------------------------ records
BASE_FIELDS = frozenset({"originator_id", "originator_version", "timestamp", "originator_topic"})


def event_line(event: Any) -> dict[str, Any]:
    """A tournament event as exports and streams serve it: version, type, at, data."""
    if not isinstance(event, Tournament.Event):
        raise TypeError(f"not a tournament event: {type(event).__name__}")
    return {
        "version": event.originator_version,
        "type": type(event).__name__,
        "at": format_at(event.timestamp),
        "data": {k: v for k, v in event.__dict__.items() if k not in BASE_FIELDS},
    }


def replayed(events: Iterable[Any]) -> Tournament | None:
    """The aggregate its stored events build (through each event's public ``mutate``)."""
    tournament: Tournament | None = None
    for event in events:
        tournament = event.mutate(tournament)
    return tournament


# ------------------------------------------------------------------------------ export
EXPORT_FORMAT = "cantstop-tournament"
EXPORT_FORMAT_VERSION = 1
MAX_LINES = 100_000
"""An export of more lines is refused whole (MalformedExport), before any is parsed: the audit
of the largest accepted one costs a bounded time (docs/tournaments.md gives the figure)."""
MAX_DATA_DEPTH = 8
MAX_GAME_EXPORTS = 10_000


def export_header(
    tournament_id: Any, standings: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    header: dict[str, Any] = {
        "format": EXPORT_FORMAT,
        "format_version": EXPORT_FORMAT_VERSION,
        "tournament_id": str(tournament_id),
    }
    if standings is not None:
        header["standings"] = standings
    return header


def export_lines(tournament_id: Any, events: Iterable[Any]) -> list[dict[str, Any]]:
    """A tournament's export, line by line: the header (with the standings the events give, as
    served, which the audit recomputes) and then one ``{"version", "type", "at", "data"}`` per
    event. ``events`` are the aggregate's stored events (or lines already, as served)."""
    events = list(events)
    lines = [e if isinstance(e, Mapping) else event_line(e) for e in events]
    standings: list[dict[str, Any]] | None = None
    if events and all(isinstance(e, Tournament.Event) for e in events):
        built = replayed(events)
        standings = built.standings() if built is not None else None
    elif check_events(lines)[0].ok:
        rebuilt = _Replay(str(tournament_id), lines).run()
        standings = rebuilt.standings() if rebuilt is not None else None
    return [export_header(tournament_id, standings), *[dict(line) for line in lines]]


def parse_tournament_export(data: bytes) -> tuple[dict[str, Any], list[Any]]:
    """An export's header and records. A bad header (or more than ``MAX_LINES`` lines) is
    MalformedExport; a bad event line becomes ``{"version": <its line>, "unreadable": …}``,
    which the audit blames."""
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n", MAX_LINES + 1)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise MalformedExport("the file is empty")
    if len(lines) - 1 > MAX_LINES:
        raise MalformedExport(f"more than {MAX_LINES} events")
    try:
        header = jsondoc.loads(lines[0])
    except jsondoc.MalformedJson as exc:
        raise MalformedExport(f"the first line is not a JSON header ({exc})") from None
    problem = header_problem(header)
    if problem:
        raise MalformedExport(problem)
    records: list[Any] = []
    for number, line in enumerate(lines[1:], start=1):
        try:
            records.append(jsondoc.loads(line, MAX_DATA_DEPTH + 2))
        except jsondoc.MalformedJson as exc:
            records.append({"version": number, "unreadable": f"line {number + 1}: {exc}"})
    return header, records


def is_tournament_export(data: bytes) -> bool:
    """Whether ``data``'s first line is a header of the tournament export format (no parse of
    the rest), so ``cantstop audit`` can tell it from a game's export."""
    first = data.removeprefix(b"\xef\xbb\xbf").split(b"\n", 1)[0]
    if f'"{EXPORT_FORMAT}"'.encode() not in first:
        return False
    try:
        header = jsondoc.loads(first)
    except jsondoc.MalformedJson:
        return False
    return isinstance(header, dict) and header.get("format") == EXPORT_FORMAT


def header_problem(header: Any) -> str | None:
    expected = (
        f'the first line is not {{"format": "{EXPORT_FORMAT}", '
        f'"format_version": {EXPORT_FORMAT_VERSION}, "tournament_id": "…"}}'
    )
    if not isinstance(header, Mapping) or header.get("format") != EXPORT_FORMAT:
        return expected
    if (
        not is_int(header.get("format_version"))
        or header["format_version"] != EXPORT_FORMAT_VERSION
    ):
        return expected
    tid = header.get("tournament_id")
    if not isinstance(tid, str):
        return expected
    try:
        uuid.UUID(tid)
    except ValueError:
        return f"tournament_id {shown(tid)} is not a UUID"
    standings = header.get("standings")
    if standings is not None and not isinstance(standings, list):
        return "standings, when given, is a list"
    return None


# ------------------------------------------------------------------------------ the audit
_canonical = CANONICAL_JSON.encode
KNOWN_TYPES = frozenset(Tournament.EVENT_TYPES)
CATEGORY = {
    "Created": "events",
    "Started": "events",
    "Finished": "events",
    "Paused": "registrations",
    "Resumed": "registrations",
    "Registered": "registrations",
    "Withdrawn": "registrations",
    "RoundPaired": "pairings",
    "TableSeated": "pairings",
    "ResultRecorded": "results",
}
REPLAY_CHECKS = ("registrations", "pairings", "results")


class _Divergence(Exception):
    def __init__(self, version: int, category: str, detail: str) -> None:
        super().__init__(detail)
        self.version = version
        self.category = category
        self.detail = detail


def line_problem(record: Any, expected_version: int) -> str | None:
    """Why ``record`` is not a tournament event line as exported, or None."""
    if not isinstance(record, Mapping):
        return "not a JSON object"
    if "unreadable" in record:
        return f"unreadable: {shown(record['unreadable'])}"
    missing = [k for k in ("version", "type", "at", "data") if k not in record]
    if missing:
        return f"missing {', '.join(missing)}"
    if not is_int(record["version"]) or record["version"] != expected_version:
        return f"version {shown(record['version'])} where {expected_version} was due"
    if not isinstance(record["type"], str) or record["type"] not in KNOWN_TYPES:
        return f"{shown(record['type'])} is not a tournament event"
    if not isinstance(record["data"], Mapping):
        return "data is not an object"
    if jsondoc.depth(record["data"], MAX_DATA_DEPTH) > MAX_DATA_DEPTH:
        return f"data is nested more than {MAX_DATA_DEPTH} levels deep"
    if not isinstance(record["at"], str):
        return "at is not a string"
    try:
        parse_at(record["at"])
    except ValueError as exc:
        return str(exc)
    return None


def check_events(records: Sequence[Any]) -> tuple[Check, int]:
    """Readable lines, versions 1..n, known types, Created first and only first, times never
    going back. Returns the check and how many records lead up to the first bad one."""
    last: datetime | None = None
    for index, record in enumerate(records):
        version = index + 1
        problem = line_problem(record, version)
        if problem is None:
            if (record["type"] == "Created") != (index == 0):
                problem = "Created is the first event, and only the first"
            else:
                at = parse_at(record["at"])
                if last is not None and at < last:
                    problem = f"dated {record['at']}, before the event it follows"
                last = at
        if problem is not None:
            return Check("events", False, f"version {version}: {problem}", version), index
    if not records:
        return Check("events", False, "no events: a tournament begins with Created", 1), 0
    return Check("events", True, f"{len(records)} events, versions 1 to {len(records)}"), len(
        records
    )


def _same(produced: Mapping[str, Any], recorded: Mapping[str, Any]) -> str | None:
    for key in ("type", "at", "data"):
        if _canonical(produced[key]) != _canonical(recorded[key]):
            theirs, ours = shown(_canonical(recorded[key])), shown(_canonical(produced[key]))
            return f"{key} is {theirs}, the rules give {ours}"
    return None


class _Replay:
    """The tournament rebuilt by its own commands from the recorded events: every derived
    event (a round's pairing, an arena table, a finish) recomputed and compared."""

    def __init__(
        self, tournament_id: str, records: Sequence[Mapping[str, Any]], truncated: bool = False
    ) -> None:
        self.tournament_id = tournament_id
        self.records = records
        self.truncated = truncated  # the readable lines before a bad one, not the whole history
        self.tournament: Tournament | None = None
        self.position = 0

    def run(self) -> Tournament | None:
        """The rebuilt tournament, or None when the history diverges from the rules."""
        try:
            self.replay()
        except _Divergence:
            return None
        return self.tournament

    def replay(self) -> None:
        while self.position < len(self.records):
            record = self.records[self.position]
            try:
                produced = self.perform(record)
            except _Divergence:
                raise
            except Exception as exc:  # forged data reaching the rules: reported, never raised
                code = getattr(exc, "code", type(exc).__name__)
                detail = getattr(exc, "detail", str(exc))
                raise _Divergence(
                    record["version"],
                    CATEGORY[record["type"]],
                    f"version {record['version']} ({record['type']}): refused ({code}): {detail}",
                ) from None
            if not produced:
                raise _Divergence(
                    record["version"],
                    CATEGORY[record["type"]],
                    f"version {record['version']} ({record['type']}): nothing follows from it",
                )
            for offset, line in enumerate(produced):
                index = self.position + offset
                if index >= len(self.records):
                    if self.truncated:  # the events check blames the line that stopped it
                        self.position = len(self.records)
                        return
                    raise _Divergence(
                        record["version"],
                        CATEGORY[record["type"]],
                        f"version {record['version']}: the history ends before the "
                        f"{line['type']} that follows from it",
                    )
                recorded = self.records[index]
                problem = (
                    f"{recorded['type']} where the rules give {line['type']}"
                    if recorded["type"] != line["type"]
                    else _same(line, recorded)
                )
                if problem:
                    raise _Divergence(
                        recorded["version"],
                        CATEGORY[line["type"]],
                        f"version {recorded['version']} ({recorded['type']}): {problem}",
                    )
            self.position += len(produced)

    def perform(self, record: Mapping[str, Any]) -> list[dict[str, Any]]:
        kind, data = record["type"], record["data"]
        at = parse_at(record["at"])
        if kind == "Created":
            self.tournament = Tournament.create(
                **{k: data.get(k) for k in CREATED_FIELDS},
                id=uuid.UUID(self.tournament_id),
                at=at,
            )
            return [event_line(e) for e in self.tournament.collect_events()]
        tournament = self.tournament
        assert tournament is not None
        if kind == "Registered":
            tournament.register(data["handle"], data["rating"], at=at)
        elif kind == "Withdrawn":
            tournament.withdraw(data["handle"], data["reason"], at=at)
        elif kind == "Started":
            tournament.start(at=data["at"])
        elif kind == "RoundPaired":
            tournament.pair_next_round(at=at)
        elif kind == "TableSeated":
            tournament.seat_next_table(at=at)
        elif kind == "ResultRecorded":
            tournament.record_result(
                data["game_id"],
                data["places"],
                data["last_hash"],
                data["finished_at"],
                data["aborted"],
                at=at,
            )
        elif kind == "Paused":
            tournament.pause(data["handle"], at=at, replay=True)
        elif kind == "Resumed":
            tournament.resume(data["handle"], at=at)
        else:
            tournament.finish(data["reason"], at=at)
        return [event_line(e) for e in tournament.collect_events()]


CREATED_FIELDS = (
    "name",
    "kind",
    "rules",
    "players_per_table",
    "rounds",
    "minutes",
    "clock",
    "rated",
    "starts_at",
    "creator",
)


def _check_standings(header: Mapping[str, Any], tournament: Tournament | None) -> Check:
    if tournament is None:
        return Check("standings", False, "not recomputed: the replay did not reach the end")
    mine = tournament.standings()
    given = header.get("standings")
    if given is None:
        return Check("standings", True, f"recomputed for {len(mine)} players (none exported)")
    if _canonical(given) == _canonical(mine):
        return Check("standings", True, f"the exported standings of {len(mine)} players recomputed")
    for row, (theirs, ours) in enumerate(zip(given, mine, strict=False), start=1):
        if _canonical(theirs) != _canonical(ours):
            return Check(
                "standings",
                False,
                f"row {row} is {shown(_canonical(theirs))}; "
                f"the results give {shown(_canonical(ours))}",
            )
    return Check("standings", False, f"{len(given)} rows exported; the results give {len(mine)}")


def _game_problem(table: Mapping[str, Any], result: Mapping[str, Any], export: Any) -> str | None:
    """Why a table's game export does not hold its recorded result, or None."""
    if not isinstance(export, tuple | list) or len(export) != 2:
        return "no game export given"
    header, records = export
    if not isinstance(header, Mapping) or header.get("game_id") != table["game_id"]:
        return "the game export is another game's"
    if not isinstance(records, list):
        return "the game export has no events"
    verdict = game_audit.audit_records(records)
    if not verdict["valid"]:
        return f"the game's own audit fails at version {verdict['first_bad_version']}"
    game = game_audit.replayed(records)
    if game is None or game.status != "finished":
        return "the game is not finished"
    if game.accounts != list(table["players"]):
        seats = ", ".join(map(str, game.accounts))
        return f"its seats are {seats}, the table's {', '.join(table['players'])}"
    if records[-1]["hash"] != result["last_hash"]:
        last = records[-1]["hash"]
        return f"its last hash is {shown(last)}, the result's {shown(result['last_hash'])}"
    resigned = [r["data"]["seat"] for r in records if r["type"] == "PlayerResigned"]
    places = ranks(finish_of(game, resigned))
    aborted = game.finish_reason in ("aborted", "abandoned")
    if aborted != result["aborted"]:
        return (
            f"the game ended as {game.finish_reason}; the result says aborted={result['aborted']}"
        )
    if aborted:
        return None
    assert places is not None
    expected = {h: places[seat] for seat, h in enumerate(table["players"])}
    if expected != dict(result["places"]):
        theirs = _canonical(result["places"])
        return f"the game's places are {_canonical(expected)}, the result's {theirs}"
    return None


def _check_games(tournament: Tournament | None, games: Mapping[str, Any]) -> Check:
    if tournament is None:
        return Check("games", False, "not compared: the replay did not reach the end")
    if len(games) > MAX_GAME_EXPORTS:
        return Check("games", False, f"more than {MAX_GAME_EXPORTS} game exports")
    checked = 0
    for game_id, result in tournament.results.items():
        table = tournament.table_of(game_id)
        assert table is not None
        problem = _game_problem(table, result, games.get(game_id))
        if problem:
            return Check("games", False, f"table {game_id}: {problem}", result["version"])
        checked += 1
    return Check("games", True, f"{checked} tables' games hold their recorded results")


def audit_tournament(
    header: Mapping[str, Any],
    records: Sequence[Any],
    games: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The verdict on a tournament's export, in the style of domain.audit's: ``valid``, the
    ``checks`` (format, events, registrations, pairings, results, standings, and games when
    the tables' game exports are given as ``{game_id: (header, records)}``), the first version
    blamed, and the standings the events give. Never raises on bad input."""
    checks: list[Check] = []
    problem = header_problem(header)
    checks.append(
        Check("format", problem is None, problem or "a cantstop-tournament export, version 1")
    )
    tournament: Tournament | None = None
    if len(records) > MAX_LINES:
        checks.append(Check("events", False, f"more than {MAX_LINES} events", MAX_LINES + 1))
    elif problem is None:
        events, readable = check_events(records)
        checks.append(events)
        replay = _Replay(str(header["tournament_id"]), records[:readable], not events.ok)
        failed: _Divergence | None = None
        try:
            replay.replay()
        except _Divergence as exc:
            failed = exc
        if failed is not None and failed.category == "events":
            checks[-1] = (
                Check("events", False, failed.detail, failed.version) if events.ok else events
            )
        for name in REPLAY_CHECKS:
            if failed is not None and failed.category == name:
                checks.append(Check(name, False, failed.detail, failed.version))
            else:
                reach = failed.version - 1 if failed else readable
                checks.append(Check(name, True, f"replayed versions 1 to {reach} by the rules"))
        tournament = None if failed is not None or not events.ok else replay.tournament
        checks.append(_check_standings(header, tournament))
        if games is not None:
            checks.append(_check_games(tournament, games))
    blamed = [c.version for c in checks if c.version is not None]
    return {
        "valid": all(c.ok for c in checks),
        "checks": [c.to_dict() for c in checks],
        "first_bad_version": min(blamed) if blamed else None,
        "standings": tournament.standings() if tournament is not None else None,
    }
