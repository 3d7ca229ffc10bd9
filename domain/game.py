"""The ``Game`` aggregate: commands that check the rules, then record explicit past-tense events.

Every public command validates first and raises a DomainError (recording nothing) when refused;
then it triggers events whose ``apply`` only assigns what the command computed. Dice never come
from inside an event body: manual dice are passed in, server dice come from a
``draw(nonce, count, faces)`` callable, and the event records them, so replaying the events
reproduces every position exactly.

Each event carries ``prev_hash`` and ``hash``: the tamper-evident chain of the contract (Fairness),
computed once, when the event is triggered, and stored with it.

State is kept in plain lists and string-free structures indexed by column, so snapshots round-trip.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from eventsourcing.domain import Aggregate

from domain.commands import Command, NewGame, Roll, Stop
from domain.commands import Move as MoveCommand
from domain.errors import (
    AlreadySeated,
    GameOver,
    IllegalAction,
    InvalidDice,
    InvalidRequest,
    NotYourTurn,
    TimedOut,
    TooManySeatChanges,
)
from domain.fairness import commitment
from domain.moves import UNCLAIMED, Board, Sums
from domain.rules import DICE_FACES, SOLITAIRE_TARGETS, Rules, normalize_rules, solitaire_rating

ZERO_HASH = "0" * 64
MAX_NAME_LENGTH = 40
DICE_MODES = ("server", "manual")
CLOCK_RANGE = (5, 604_800)  # a turn's time: 5 seconds to a week
TIMEOUTS_TO_RESIGN = 3
MAX_SEAT_CHANGES = 100
"""The seat changes (``SeatJoined`` and ``SeatLeft``: a person or an account joining or
leaving, a bot's seat added or removed, a rematch's seat claimed) after which a game gives no
seat back (409 ``too_many_seat_changes``, recording nothing). A seat is still taken: each join
fills one, so without leaves the lobby fills and starts, and its changes stay under this plus
its seats. Only leaves are refused, so that nobody freezes someone else's open lobby by joining
and leaving it a hundred times (refused joins would shut it until abandoned). Far above any
honest lobby: eight seats each taken, given back and taken again a few times is under 50. Far
below what would push a game near the longest history analysed (``MAX_VERSIONS``, 1,000, in
service/application/analysis/jobs.py): a played game is ~130 events, so 108 changes before it
starts leave it ~760 versions, where joining and leaving for ever (the creator of a rated lobby
left and rejoined 500 times) made a rated game too long to analyse, out of the fair-play
figures, and grew any open lobby's history without end. Counted by the events themselves
(``seat_changes``), so a replay counts as the live game did. Not a rule of the recorded game:
a replay (the audit) replays the changes recorded, and an account that is closing gives its
seat back whatever the count (``leave``), once per account."""

OPTIONAL_FIELDS = frozenset(
    {
        "entropy",
        "seed_committed_at",
        "clock",
        "bots",
        "rematch_of",
        "bot",
        "reason",
        "accounts",
        "rated",
        "account",
        "abortable",
    }
)
"""Event fields added after 1.0: absent from an event's data (and its hash) when unset, so events
recorded before they existed read, hash and replay exactly as they were recorded."""


class Draw(Protocol):
    """``draw(nonce, count, faces, entropy)``: ``count`` dice of ``faces`` faces for draw
    ``nonce``, with a player's ``entropy`` mixed in when given (domain.fairness)."""

    def __call__(
        self, nonce: int, count: int, faces: int, entropy: str | None = None
    ) -> list[int]: ...


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` without the optional ones that are unset."""
    return {k: v for k, v in fields.items() if v is not None or k not in OPTIONAL_FIELDS}


AT_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
AT_PATTERN = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def format_time(timestamp: datetime) -> str:
    """An event's time as served: UTC, microseconds, ``Z`` (``AT_FORMAT``; isoformat is the
    same text for years 1000 to 9999, in less time). A time in UTC already (every event's) is
    written as it is, its ``+00:00`` replaced; with microseconds, isoformat writes them
    unasked, in about three quarters of the time it takes asked (a time on the second asks).
    ``format_at`` keeps the last few."""
    if timestamp.tzinfo is UTC:
        if timestamp.microsecond:
            return timestamp.isoformat()[:-6] + "Z"
        return timestamp.isoformat(timespec="microseconds")[:-6] + "Z"
    utc = timestamp.astimezone(UTC).replace(tzinfo=None)
    return utc.isoformat(timespec="microseconds") + "Z"


format_at = functools.lru_cache(maxsize=256)(format_time)
"""``format_time``, the last 256 times kept: each is written about three times (its hash, the
answer, the stream), and equal times are the same instant, so the same text. Work that meets
each time once (a view's rebuild) calls ``format_time``: a miss costs ~0.3 µs more."""


def parse_at(at: str) -> datetime:
    """An event's served time back to a datetime (UTC); ValueError unless in the served form."""
    if not AT_PATTERN.fullmatch(at):
        raise ValueError(f"{at!r} is not a time as served (YYYY-MM-DDTHH:MM:SS.ffffffZ)")
    try:  # the pattern fixed the form; this checks the ranges, ~15x faster than strptime
        return datetime.fromisoformat(at[:-1]).replace(tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"{at!r} is not a time: {exc}") from None


# The contract's canonical JSON: sorted keys, no spaces, UTF-8 as is. One encoder, built once.
CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_bytes(value: Any) -> bytes:
    """``value`` in the contract's canonical JSON, as UTF-8: what an event's hash covers."""
    return CANONICAL_JSON.encode(value).encode("utf-8")


def chain_hash(
    prev_hash: str,
    version: int,
    type_: str,
    at: str,
    data: Mapping[str, Any],
    encode: Callable[[Any], bytes] = canonical_bytes,
) -> str:
    """sha256(bytes(prev_hash) + canonical JSON of the served event), as the contract defines it.
    ``encode``: another encoder of the same bytes (``own_events_encoder``)."""
    body = encode({"version": version, "type": type_, "at": at, "data": data})
    return hashlib.sha256(bytes.fromhex(prev_hash) + body).hexdigest()


_own_encoder: Callable[[Any], bytes] = canonical_bytes


def own_events_encoder(encode: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """How a game encodes its own new events for their hashes, from now on in this process:
    ``canonical_bytes`` unless an adapter gives a faster encoder of the same bytes for every
    value a game's event holds (integers, strings, booleans, null, lists and maps keyed by
    strings; the service gives orjson's: service/application/store.py). An audit always hashes
    by ``canonical_bytes``, the contract's definition, so an encoder that differed would be
    found by every audit of a game it wrote. The encoder it replaces is returned."""
    global _own_encoder
    before, _own_encoder = _own_encoder, encode
    return before


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest("a player's name must be a non-empty string")
    cleaned: str = name.strip()
    if not cleaned.isprintable():
        raise InvalidRequest("a player's name cannot hold line breaks or control characters")
    if len(cleaned) > MAX_NAME_LENGTH:
        raise InvalidRequest(f"a player's name is at most {MAX_NAME_LENGTH} characters")
    return cleaned


def player_spec(player: Any) -> tuple[str, str | None]:
    """A player as given at creation: a name, or ``{"name": …, "bot": <id>}``."""
    if isinstance(player, Mapping):
        unknown = sorted(set(player) - {"name", "bot"})
        if unknown:
            raise InvalidRequest(f"a player has a name and perhaps a bot, not {', '.join(unknown)}")
        bot = player.get("bot")
        if bot is not None and (not isinstance(bot, str) or not bot):
            raise InvalidRequest("a player's bot is the id of a computer player, e.g. expert")
        return check_name(player.get("name")), bot
    return check_name(player), None


def check_clock(clock: Any, players: int) -> dict[str, int] | None:
    """``{"turn_seconds": T}`` with T from 5 to 604800, for games of two or more players."""
    if clock is None:
        return None
    low, high = CLOCK_RANGE
    if not isinstance(clock, Mapping) or set(clock) != {"turn_seconds"}:
        raise InvalidRequest('clock must be {"turn_seconds": T}')
    seconds = clock["turn_seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not low <= seconds <= high:
        raise InvalidRequest(f"clock.turn_seconds must be an integer from {low} to {high}")
    if players < 2:
        raise InvalidRequest("clocks are for games of two or more players")
    return {"turn_seconds": seconds}


HANDLE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{1,19}")


def check_handle(handle: Any) -> str:
    """An account's handle (contract 1.2): 2 to 20 ASCII letters, digits, ``_`` and ``-``,
    beginning with a letter. (Handles that differ only in case are one account's.)"""
    if not isinstance(handle, str) or not HANDLE.fullmatch(handle):
        raise InvalidRequest(
            "a handle is 2 to 20 ASCII letters, digits, _ and -, beginning with a letter"
        )
    return handle


BOTS_ALONE_ARE_NOT_RATED = (
    "a rated game seats at least one person's account: built-in bots alone play unrated games"
)


def check_accounts(
    setup: Any, seats: int, named: bool, bots: Mapping[str, str], *, replay: bool = False
) -> tuple[list[str | None] | None, bool]:
    """Each seat's account (None where anonymous; a bot's seat plays as the bot's account once
    any seat has one) and whether the game is rated, as ``setup`` asks (contract 1.2).

    A rated game of built-in bots only is refused: nobody's rating is at stake, and anyone could
    move the bots' ratings, the baseline everyone is rated against, at will. A rule for games
    made from now on: a ``replay`` (the audit) creates the game its history recorded."""
    rated = setup.rated
    if not isinstance(rated, bool):
        raise InvalidRequest("rated must be true or false")
    given = setup.accounts
    if given is None:
        accounts: list[str | None] = [None] * seats
    else:
        if not isinstance(given, list | tuple) or len(given) != seats:
            raise InvalidRequest(
                f"accounts must name one account or null for each of {seats} seats"
            )
        accounts = [None if a is None else check_handle(a) for a in given]
        if not named and any(a is not None for a in accounts[1:]):
            raise InvalidRequest("a lobby seats its creator's account only; others join")
    if any(a is not None for a in accounts) or rated:
        for seat, bot in bots.items():
            accounts[int(seat)] = accounts[int(seat)] or bot
    held = [a.lower() for a in accounts if a is not None]
    if len(held) != len(set(held)):
        raise AlreadySeated("an account holds at most one seat of a game")
    if rated:
        if setup.dice != "server":
            raise InvalidRequest("a rated game uses server dice")
        if seats < 2:
            raise InvalidRequest("a rated game has two or more seats")
        if named and any(a is None for a in accounts):
            raise InvalidRequest("in a rated game every seat is an account or a built-in bot")
        if named and len(bots) >= seats and not replay:
            raise InvalidRequest(BOTS_ALONE_ARE_NOT_RATED)
    return (accounts if any(a is not None for a in accounts) else None), rated


# Each column's key as served ("7"), for every column of every board (up to 2 x 8 with d8s).
COLUMN_KEYS = tuple(str(column) for column in range(2 * max(DICE_FACES) + 1))


def position_map(positions: Sequence[int]) -> dict[str, int]:
    """Column-indexed positions as the contract serves them: ``{"7": 3}``, absent when 0."""
    return {COLUMN_KEYS[column]: at for column, at in enumerate(positions) if at}


class Game(Aggregate):
    # ---------------------------------------------------------------------------------- events
    class Event(Aggregate.Event):
        prev_hash: str
        hash: str

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Game)
            aggregate.last_hash = self.hash
            turn = (getattr(aggregate, "turn_number", 0), getattr(aggregate, "current", None))
            self.update(aggregate)
            if (aggregate.turn_number, aggregate.current) != turn:
                aggregate._turn_started_at = self.timestamp  # a turn starts when one ends

        def update(self, game: Game) -> None:
            raise NotImplementedError

    class GameCreated(Event, Aggregate.Created):
        players: list[str] | None
        seats: int
        rules: dict[str, Any]
        dice: str
        first_player: int | None
        client_seed: str | None
        seed_commitment: str | None
        seed_committed_at: str | None = None  # 1.1: when a pre-drawn seed was committed
        clock: dict[str, int] | None = None  # 1.1: {"turn_seconds": T}
        bots: dict[str, str] | None = None  # 1.1: seat (decimal string) -> bot id
        rematch_of: str | None = None  # 1.1: the finished game this one replays
        accounts: list[str | None] | None = None  # 1.2: each seat's account handle, if any
        rated: bool | None = None  # 1.2: True for a rated game (absent otherwise)
        abortable: bool | None = None  # 1.3: True for a rated game that aborts (_finish)

        def update(self, game: Game) -> None:
            faces = self.rules["dice_faces"]
            n_cols = 2 * faces + 1
            game.rules = dict(self.rules)
            game.dice_mode = self.dice
            game.seats = self.seats
            game.names = list(self.players) if self.players else [None] * self.seats
            game.resigned = [False] * self.seats
            game.markers = [[0] * n_cols for _ in range(self.seats)]
            game.claimed = [UNCLAIMED] * n_cols
            game.runners = [0] * n_cols
            game.status = "waiting"
            game.first_player = self.first_player
            game.current = None
            game.turn_number = 0
            game.phase = None
            game.dice = None
            game.options = []
            game.winner = None
            game.finish_reason = None
            game.rating = None
            game.turns_completed = 0
            game.next_nonce = 0
            game.client_seed = self.client_seed
            game.seed_commitment = self.seed_commitment
            game.server_seed = None
            game._clock = self.clock["turn_seconds"] if self.clock else None
            game._bots = dict(self.bots or {})
            game._rematch_of = self.rematch_of
            game._accounts = list(self.accounts) if self.accounts else [None] * self.seats
            game._rated = bool(self.rated)
            game._abortable = bool(self.abortable)
            game._played = [False] * self.seats
            game._timeouts = [0] * self.seats
            game._turn_started_at = None
            game._seat_changes = 0

    class SeatJoined(Event):
        seat: int
        name: str
        bot: str | None = None  # 1.1: the strategy that plays this seat
        account: str | None = None  # 1.2: the account that holds this seat

        def update(self, game: Game) -> None:
            game.names[self.seat] = self.name
            if self.account is not None or game.accounts[self.seat] is not None:
                accounts = list(game.accounts)
                accounts[self.seat] = self.account
                game._accounts = accounts
            if self.bot is not None:
                game._bots = {**game.bots, str(self.seat): self.bot}
            game._seat_changes = game.seat_changes + 1

    class SeatLeft(Event):
        """A player gave their lobby seat back before the game started (or a bot was removed)."""

        seat: int

        def update(self, game: Game) -> None:
            game.names[self.seat] = None
            game._bots = {k: v for k, v in game.bots.items() if k != str(self.seat)}
            if game.accounts[self.seat] is not None:
                accounts = list(game.accounts)
                accounts[self.seat] = None
                game._accounts = accounts
            game._seat_changes = game.seat_changes + 1

    class TurnOrderDecided(Event):
        first_player: int
        draws: list[dict[str, Any]]

        def update(self, game: Game) -> None:
            game.status = "in_progress"
            game.first_player = self.first_player
            game.next_nonce += len(self.draws)
            game._begin_turn(self.first_player)

    class DiceRolled(Event):
        seat: int
        dice: list[int]
        nonce: int | None
        moves: list[list[int]]
        entropy: str | None = None  # 1.1: the player's text mixed into the draw

        def update(self, game: Game) -> None:
            game.dice = list(self.dice)
            game.options = [tuple(m) for m in self.moves]
            game.phase = "move"
            if self.nonce is not None:
                game.next_nonce = self.nonce + 1

    class MovePlayed(Event):
        seat: int
        sums: list[int]
        runners: dict[str, int]

        def update(self, game: Game) -> None:
            game.runners = [0] * len(game.runners)
            for column, at in self.runners.items():
                game.runners[int(column)] = at
            game.dice = None
            game.options = []
            game.phase = "roll_or_stop"

    class TurnStopped(Event):
        seat: int
        markers: dict[str, int]
        progress: dict[str, int]
        claimed: list[int]
        removed: dict[str, list[int]]
        next_player: int | None

        def update(self, game: Game) -> None:
            own = game.markers[self.seat]
            for key, at in self.markers.items():
                own[int(key)] = at
            for column in self.claimed:
                game.claimed[column] = self.seat
            for seat, cols in self.removed.items():
                for column in cols:
                    game.markers[int(seat)][column] = 0
            game.turns_completed += 1
            game._ended_in_time(self.seat)
            game._begin_turn(self.next_player)

    class TurnBusted(Event):
        seat: int
        lost: dict[str, int]
        wiped: list[int]
        next_player: int

        def update(self, game: Game) -> None:
            for column in self.wiped:
                game.markers[self.seat][column] = 0
            game.turns_completed += 1
            game._ended_in_time(self.seat)
            game._begin_turn(self.next_player)

    class TurnTimedOut(Event):
        """The player to act let the turn's deadline pass: the turn ends as a bust would."""

        seat: int
        deadline: str
        lost: dict[str, int]
        in_a_row: int
        next_player: int

        def update(self, game: Game) -> None:
            game.turns_completed += 1
            game._timeouts = [
                self.in_a_row if s == self.seat else game.timeouts_of(s) for s in range(game.seats)
            ]
            game._begin_turn(self.next_player)

    class PlayerResigned(Event):
        seat: int
        removed: list[int]
        next_player: int | None
        reason: str | None = None  # 1.1: "inactivity" when timeouts resigned the player

        def update(self, game: Game) -> None:
            game.resigned[self.seat] = True
            for column in self.removed:
                game.markers[self.seat][column] = 0
            if game.current == self.seat or self.next_player is None:
                game._begin_turn(self.next_player)

    class GameFinished(Event):
        winner: int | None
        reason: str
        turns: int
        rating: str | None

        def update(self, game: Game) -> None:
            game.status = "finished"
            game.winner = self.winner
            game.finish_reason = self.reason
            game.rating = self.rating
            game._begin_turn(None)

    class GameAbandoned(Event):
        """Nothing was recorded for ``after`` seconds since ``idle_since``: the game ends."""

        idle_since: str
        after: int

        def update(self, game: Game) -> None:
            pass  # GameFinished follows

    class SeedRevealed(Event):
        server_seed: str

        def update(self, game: Game) -> None:
            game.server_seed = self.server_seed

    def __init__(self) -> None:
        # Bare declarations: GameCreated.update assigns them all; typed here for readers and mypy.
        self.rules: dict[str, Any]
        self.dice_mode: str
        self.seats: int
        self.names: list[str | None]
        self.resigned: list[bool]
        self.markers: list[list[int]]
        self.claimed: list[int]
        self.runners: list[int]
        self.status: str
        self.first_player: int | None
        self.current: int | None
        self.turn_number: int
        self.phase: str | None
        self.dice: list[int] | None
        self.options: list[Sums]
        self.winner: int | None
        self.finish_reason: str | None
        self.rating: str | None
        self.turns_completed: int
        self.next_nonce: int
        self.client_seed: str | None
        self.seed_commitment: str | None
        self.server_seed: str | None
        self.last_hash: str
        # Contract 1.1; read through the properties below, which also answer for games restored
        # from snapshots taken before these existed.
        self._clock: int | None
        self._bots: dict[str, str]
        self._rematch_of: str | None
        self._accounts: list[str | None]
        self._rated: bool
        self._abortable: bool
        self._played: list[bool]
        self._timeouts: list[int]
        self._turn_started_at: datetime | None
        self._replay_times: deque[datetime] | None
        self._seat_changes: int

    @property
    def clock_seconds(self) -> int | None:
        """The clock's time per turn, in seconds, or None."""
        found: int | None = self.__dict__.get("_clock")
        return found

    @property
    def bots(self) -> dict[str, str]:
        """Seat (decimal string) -> the strategy that plays it. Replaced, never changed."""
        found: dict[str, str] = self.__dict__.get("_bots") or {}
        return found

    @property
    def rematch_of(self) -> str | None:
        found: str | None = self.__dict__.get("_rematch_of")
        return found

    @property
    def accounts(self) -> list[str | None]:
        """Each seat's account handle (contract 1.2), or None for an anonymous seat. Replaced,
        never changed."""
        found: list[str | None] | None = self.__dict__.get("_accounts")
        return found if found is not None else [None] * self.seats

    @property
    def rated(self) -> bool:
        return bool(self.__dict__.get("_rated"))

    @property
    def abortable(self) -> bool:
        """A rated game created under contract 1.3: it is aborted if it ends before every seat
        has played a turn (``aborts``). Older rated games replay as they were recorded."""
        return bool(self.__dict__.get("_abortable"))

    @property
    def played(self) -> list[bool]:
        """Each seat: whether it has ended a turn of its own (stop or bust). Replaced, never
        changed."""
        found: list[bool] | None = self.__dict__.get("_played")
        return found if found is not None else [False] * self.seats

    def seat_of_account(self, handle: str) -> int | None:
        """The seat that account ``handle`` holds (handles are the same whatever their case)."""
        wanted = handle.lower()
        for seat, held in enumerate(self.accounts):
            if held is not None and held.lower() == wanted:
                return seat
        return None

    @property
    def seat_changes(self) -> int:
        """How many seat changes (``SeatJoined``, ``SeatLeft``) the game has recorded: counted by
        those events as they apply, so a replay of any store counts the same. A game restored
        from a snapshot taken before the count existed counts its versions after the first while
        it waits: every event a lobby (or a rematch) records until it starts is a seat change.
        (Only a waiting game's count decides anything: seats change only then.)"""
        found: int | None = self.__dict__.get("_seat_changes")
        if found is not None:
            return found
        return self.version - 1 if self.status == "waiting" else 0

    def _check_seat_changes(self) -> None:
        """Refuse to give a seat back once ``MAX_SEAT_CHANGES`` are recorded (not in a replay:
        the changes recorded are replayed, those of games stored before the rule too)."""
        if self.seat_changes >= MAX_SEAT_CHANGES and not self.replay_times:
            raise TooManySeatChanges(
                f"the seats of this game have changed {self.seat_changes} times, the most after "
                f"which one is given back ({MAX_SEAT_CHANGES}): its seats are still taken, and "
                "the game starts once they all are"
            )

    @property
    def timeouts(self) -> list[int]:
        found: list[int] = self.__dict__.get("_timeouts") or []
        return found

    @property
    def turn_started_at(self) -> datetime | None:
        found: datetime | None = self.__dict__.get("_turn_started_at")
        return found

    @property
    def replay_times(self) -> deque[datetime] | None:
        """The audit's replay sets the recorded times here, so replayed events carry them."""
        found: deque[datetime] | None = self.__dict__.get("_replay_times")
        return found

    # ----------------------------------------------------------------- the hash chain, recorded
    def _timestamp(self, event_class: type[Any], given: datetime | None) -> datetime:
        """The recorded time in a replay; else the command's time (``given``), or now, but never
        before the last event's: a clock stepped back (NTP, or another host's clock a little
        behind) must not date an event before the one it follows, which the audit refuses."""
        if self.replay_times:
            return self.replay_times.popleft()
        stamp: datetime = (
            given or self.__dict__.get("_command_at") or event_class.create_timestamp()
        )
        last: datetime = self.modified_on
        return stamp if stamp >= last else last

    @classmethod
    def _create(cls, event_class: type[Any], *, id: Any = None, **kwargs: Any) -> Game:
        timestamp = kwargs.pop("timestamp", None) or event_class.create_timestamp()
        kwargs = _present(kwargs)
        digest = chain_hash(
            ZERO_HASH, 1, event_class.__name__, format_at(timestamp), kwargs, _own_encoder
        )
        game = super()._create(
            event_class, id=id, timestamp=timestamp, prev_hash=ZERO_HASH, hash=digest, **kwargs
        )
        assert isinstance(game, Game)
        return game

    def trigger_event(self, event_class: type[Any], **kwargs: Any) -> None:
        timestamp = self._timestamp(event_class, kwargs.pop("timestamp", None))
        kwargs = _present(kwargs)
        digest = chain_hash(
            self.last_hash,
            self.version + 1,
            event_class.__name__,
            format_at(timestamp),
            kwargs,
            _own_encoder,
        )
        super().trigger_event(
            event_class, timestamp=timestamp, prev_hash=self.last_hash, hash=digest, **kwargs
        )

    # ------------------------------------------------------------------------------ creation
    @classmethod
    def start(
        cls,
        game_id: Any,
        setup: NewGame,
        *,
        server_seed: str | None = None,
        draw: Draw | None = None,
        seed_committed_at: str | None = None,
        rematch_of: str | None = None,
        times: deque[datetime] | None = None,
    ) -> Game:
        """Create a game with named ``players`` (it starts at once) or ``seats`` (a lobby).

        A player is a name, or ``{"name": …, "bot": <strategy id>}`` for a computer player
        (server dice only; the service checks the id). Server dice need ``server_seed`` (only its
        commitment is recorded) and ``draw`` for the opening roll; ``seed_committed_at`` says when
        that commitment was published, if it was drawn before the game (contract 1.1). A rematch
        (``rematch_of``) is a lobby whose seats are kept for the players of the game before.
        ``times``: the recorded times of a replay (the audit), used for the events in order.
        """
        players, seats, rules = setup.players, setup.seats, setup.rules
        dice, first_player, client_seed = setup.dice, setup.first_player, setup.client_seed
        if (players is None) == (seats is None):
            raise InvalidRequest("give either players (their names) or seats (a number)")
        bots: dict[str, str] = {}
        if players is not None:
            if not isinstance(players, list | tuple):
                raise InvalidRequest("players must be a list of names")
            named: list[str] = []
            for seat, player in enumerate(players):
                name, bot = player_spec(player)
                named.append(name)
                if bot is not None:
                    bots[str(seat)] = bot
            names: list[str] | None = named
            n = len(players)
        else:
            if isinstance(seats, bool) or not isinstance(seats, int) or not 2 <= seats <= 8:
                raise InvalidRequest("seats must be an integer from 2 to 8")
            names, n = None, seats
        normalized = normalize_rules(rules, n)
        if dice not in DICE_MODES:
            raise InvalidRequest('dice must be "server" or "manual"')
        if bots and dice != "server":
            raise InvalidRequest("computer players play server-dice games only")
        clock = check_clock(setup.clock, n)
        accounts, rated = check_accounts(
            setup, n, names is not None, bots, replay=times is not None
        )
        abortable = rated if setup.abortable is None else setup.abortable
        if not isinstance(abortable, bool) or (abortable and not rated):
            raise InvalidRequest("abortable is true for a rated game only")
        if dice == "server":
            # The contract's example shows the default (0) beside server dice: sending it is
            # leaving it out. Another seat cannot be honoured: the opening roll decides.
            if first_player is not None and (isinstance(first_player, bool) or first_player != 0):
                raise InvalidRequest(
                    "first_player is only for manual dice: with server dice the opening roll "
                    "decides who starts (leave it out, or send the default, 0)"
                )
            first_player = None
            if server_seed is None:
                raise InvalidRequest("server dice need a server seed")
            client_seed = str(game_id) if client_seed is None else client_seed
            seed_commitment: str | None = commitment(server_seed)
        else:
            if client_seed is not None:
                raise InvalidRequest("client_seed is only for server dice")
            first_player = 0 if first_player is None else first_player
            if (
                isinstance(first_player, bool)
                or not isinstance(first_player, int)
                or not 0 <= first_player < n
            ):
                raise InvalidRequest(f"first_player must be a seat from 0 to {n - 1}")
            seed_commitment = None
        game = cls._create(
            cls.GameCreated,
            id=game_id,
            timestamp=times.popleft() if times else None,
            players=names,
            seats=n,
            rules=normalized.to_dict(),
            dice=dice,
            first_player=first_player,
            client_seed=client_seed,
            seed_commitment=seed_commitment,
            seed_committed_at=seed_committed_at if dice == "server" else None,
            clock=clock,
            bots=bots or None,
            rematch_of=rematch_of,
            accounts=accounts,
            rated=rated or None,
            abortable=abortable or None,
        )
        game._replay_times = times
        if names is not None:
            game._decide_turn_order(draw)
        return game

    def join(
        self,
        name: str,
        draw: Draw | None = None,
        bot: str | None = None,
        account: str | None = None,
    ) -> int:
        """Take the first open lobby seat; the game starts when the last seat is taken. An
        account (its handle) holds at most one seat; a rated game seats accounts only (a bot
        plays as its own account, named by its id)."""
        name = check_name(name)
        if self.status == "finished":
            raise GameOver("the game is finished: nobody joins it any more")
        if self.status != "waiting" or None not in self.names:
            raise IllegalAction("this game has no open seat")
        if self.rematch_of is not None:
            raise IllegalAction(
                f"the seats of this rematch are kept for the players of game {self.rematch_of}"
            )
        if bot is not None and account is None and (self.rated or any(self.accounts)):
            account = bot
        account = self._seat_account(account, " join with a personal token")
        return self._seat(self.names.index(None), name, draw, bot, account)

    def claim(
        self,
        seat: int,
        name: str,
        draw: Draw | None = None,
        bot: str | None = None,
        account: str | None = None,
    ) -> int:
        """Take seat ``seat`` of a rematch (the service checks who may), held by ``account``
        if the old game's seat was: the same players, so the rematch is in their histories."""
        if self.status == "finished":
            raise GameOver("the game is finished: nobody joins it any more")
        if self.status != "waiting" or self.rematch_of is None:
            raise IllegalAction("only the seats of a rematch waiting for its players are claimed")
        if not 0 <= seat < self.seats or self.names[seat] is not None:
            raise IllegalAction(f"seat {seat} is not open")
        account = self._seat_account(account, " the old game's account claims it")
        return self._seat(seat, check_name(name), draw, bot, account)

    def _seat_account(self, account: str | None, how: str) -> str | None:
        """The account that is to hold a seat (its checked handle), or None for a person with
        no account: an account holds at most one seat, and a rated game seats accounts only."""
        if account is not None:
            account = check_handle(account)
            if self.seat_of_account(account) is not None:
                raise AlreadySeated(f"the account {account} already holds a seat of this game")
        elif self.rated:
            raise InvalidRequest(f"a rated game seats accounts only:{how}")
        return account

    def _seat(
        self, seat: int, name: str, draw: Draw | None, bot: str | None, account: str | None = None
    ) -> int:
        if bot is not None and self.dice_mode != "server":
            raise InvalidRequest("computer players play server-dice games only")
        if (
            self.rated
            and bot is not None
            and self.names.count(None) == 1
            and len(self.bots) == self.seats - 1
            and not self.replay_times
        ):
            raise InvalidRequest(BOTS_ALONE_ARE_NOT_RATED)
        self.trigger_event(self.SeatJoined, seat=seat, name=name, bot=bot, account=account)
        if None not in self.names:
            self._decide_turn_order(draw)
        return seat

    def check_leave(self, seat: int, *, closing: bool = False) -> None:
        """Whether seat ``seat`` can be given back now (IllegalAction if not; once the game
        has recorded ``MAX_SEAT_CHANGES``, TooManySeatChanges unless its account is
        ``closing``)."""
        if self.status == "finished":
            raise GameOver("the game is finished: there is no seat to give back")
        if self.status != "waiting":
            raise IllegalAction("the game has started: a player leaves it by resigning")
        if not isinstance(seat, int) or not 0 <= seat < self.seats:
            last = self.seats - 1
            raise IllegalAction(f"this game has no seat {seat}: its seats are 0 to {last}")
        if self.names[seat] is None:
            raise IllegalAction(f"seat {seat} is not taken")
        if not closing:
            self._check_seat_changes()

    def leave(self, seat: int, *, closing: bool = False) -> None:
        """Give a lobby seat back before the game starts: it is open again. ``closing``: the
        seat's account is closing, and the contract gives its seats back, whatever the count
        of seat changes (``MAX_SEAT_CHANGES``; an account closes once)."""
        self.check_leave(seat, closing=closing)
        self.trigger_event(self.SeatLeft, seat=seat)

    def is_bot(self, seat: int | None) -> bool:
        return seat is not None and str(seat) in self.bots

    def _decide_turn_order(self, draw: Draw | None) -> None:
        """The opening roll (server dice): all roll two dice; the tied highest roll again."""
        draws: list[dict[str, Any]] = []
        if self.dice_mode == "manual" or self.seats == 1:
            first = self.first_player or 0
        else:
            if draw is None:
                raise TypeError("server dice need a draw function")
            contenders = list(range(self.seats))
            round_ = 0
            while len(contenders) > 1:
                totals = {}
                for seat in contenders:
                    nonce = self.next_nonce + len(draws)
                    dice = draw(nonce, 2, self.rules["dice_faces"])
                    draws.append({"round": round_, "seat": seat, "nonce": nonce, "dice": dice})
                    totals[seat] = sum(dice)
                best = max(totals.values())
                contenders = [s for s in contenders if totals[s] == best]
                round_ += 1
            first = contenders[0]
        self.trigger_event(self.TurnOrderDecided, first_player=first, draws=draws)

    # ------------------------------------------------------------------------------ commands
    @property
    def rules_obj(self) -> Rules:
        return Rules.from_dict(self.rules)

    def _check_active(self, seat: int, *, turn: bool = True) -> None:
        """Contract order: game in progress, then the turn. A seat whose last turn timed out is
        refused as late (``turn_timed_out``), not as out of turn: its action came after that
        turn's deadline, whether the timeout was recorded by this action or before it."""
        if self.status == "finished":
            raise GameOver("the game is finished")
        if self.status != "in_progress":
            raise IllegalAction("the game has not started: seats are still open")
        if not isinstance(seat, int) or not 0 <= seat < self.seats:
            raise NotYourTurn(f"there is no seat {seat}")
        if turn and seat != self.current:
            if self.timeouts_of(seat):
                raise TimedOut(
                    f"seat {seat}'s turn timed out; it is seat {self.current}'s turn now"
                )
            raise NotYourTurn(f"it is seat {self.current}'s turn, not seat {seat}'s")

    def board(self, seat: int | None = None) -> Board:
        """The legal-move view of the table for ``seat`` (default: the player to act)."""
        seat = self.current if seat is None else seat
        assert seat is not None
        rules = self.rules_obj
        blocked = None
        if rules.jumping:
            others = [m for s, m in enumerate(self.markers) if s != seat]
            blocked = [{m[c] for m in others if m[c]} for c in range(len(self.claimed))]
        return Board(rules.heights, self.claimed, self.markers[seat], rules.steep_hill, blocked)

    def roll(
        self,
        seat: int,
        dice: Sequence[int] | None = None,
        draw: Draw | None = None,
        entropy: str | None = None,
    ) -> None:
        """Roll four dice: manual ``dice``, or server dice from ``draw`` (with the player's
        ``entropy`` mixed in, when given). No move at all busts."""
        self._check_active(seat)
        if self.phase == "move":
            raise IllegalAction("choose a move for the dice already rolled")
        faces = self.rules["dice_faces"]
        nonce: int | None = None
        if self.dice_mode == "manual":
            rolled = check_dice(dice, faces)
        else:
            if draw is None:
                raise TypeError("server dice need a draw function")
            nonce = self.next_nonce
            rolled = draw(nonce, 4, faces, entropy)
        moves = self.board(seat).legal_moves(rolled, self.runners)
        self.trigger_event(
            self.DiceRolled,
            seat=seat,
            dice=rolled,
            nonce=nonce,
            moves=[list(m) for m in moves],
            entropy=entropy,
        )
        if not moves:
            self._bust(seat)

    def _bust(self, seat: int) -> None:
        wiped: list[int] = []
        if self.rules["solitaire"] == "advanced":
            own = self.markers[seat]
            wiped = [c for c, at in enumerate(self.runners) if at and own[c]]
        self.trigger_event(
            self.TurnBusted,
            seat=seat,
            lost=position_map(self.runners),
            wiped=wiped,
            next_player=self._next_seat(seat),
        )

    def move(self, seat: int, sums: Sequence[int]) -> None:
        """Play one of the legal moves of the dice rolled; sums may come in any order."""
        self._check_active(seat)
        if self.phase != "move":
            raise IllegalAction("roll the dice before moving")
        if not isinstance(sums, list | tuple) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in sums
        ):
            raise InvalidRequest("sums must be a list of integers")
        chosen = tuple(sorted(sums))
        # tuple(m): a snapshot gives the options back as lists (style.md, Known traps)
        if chosen not in {tuple(m) for m in self.options}:
            legal = ", ".join(str(list(m)) for m in self.options)
            raise IllegalAction(f"{list(chosen)} is not a legal move for {self.dice}: {legal}")
        runners = self.board(seat).play(chosen, self.runners)
        self.trigger_event(
            self.MovePlayed, seat=seat, sums=list(chosen), runners=position_map(runners)
        )

    def act(
        self, seat: int, command: Command, draw: Draw | None = None, *, at: datetime | None = None
    ) -> None:
        """One command by ``seat``: the HTTP API, bots and the transcript verifier all come
        through here. ``at`` is its one instant (now unless given, never before the last
        event): the deadline is judged at it and every event it records is stamped with it, so
        no action is stamped past its turn's deadline. Too late, it records the timeout instead
        and raises TimedOut."""
        if self.replay_times:  # a replay stamps the recorded times; the audit judges them
            self._act(seat, command, draw)
            return
        at = self._timestamp(self.Event, at)
        deadline = self.deadline
        if deadline is not None and at >= deadline:
            self.time_out(at)
            raise TimedOut(
                f"the turn timed out at {format_at(deadline)}; nothing was recorded but the timeout"
            )
        self.__dict__["_command_at"] = at  # not state: gone when the command ends
        try:
            self._act(seat, command, draw)
        finally:
            del self.__dict__["_command_at"]

    def _act(self, seat: int, command: Command, draw: Draw | None) -> None:
        if isinstance(command, Roll):
            self._check_roll_form(command)
            self.roll(seat, dice=command.dice, draw=draw, entropy=command.entropy)
        elif isinstance(command, MoveCommand):
            self.move(seat, command.sums)
        elif isinstance(command, Stop):
            self.stop(seat)
        else:
            self.resign(seat)

    def _check_roll_form(self, command: Roll) -> None:
        """A roll's fields must fit the game's dice (a bad request, judged before the turn)."""
        if self.dice_mode == "server" and command.dice is not None:
            raise InvalidRequest('this game uses server dice: send {"type": "roll"} without dice')
        if self.dice_mode == "manual" and command.entropy is not None:
            raise InvalidRequest("entropy is for server dice: a manual roll carries its dice")

    def forced_to_roll(self) -> bool:
        """Forced move variant: a runner shares a space with another player's marker."""
        if not self.rules["forced_move"] or self.current is None:
            return False
        return any(
            at and any(m[c] == at for s, m in enumerate(self.markers) if s != self.current)
            for c, at in enumerate(self.runners)
        )

    def stop(self, seat: int) -> None:
        """End the turn: runners become markers; a marker on a top space claims the column."""
        self._check_active(seat)
        if self.phase != "roll_or_stop":
            raise IllegalAction(
                "roll and move before stopping" if self.phase == "roll" else "choose a move first"
            )
        if self.forced_to_roll():
            raise IllegalAction("forced move: a runner shares a space with another player's marker")
        heights = self.rules_obj.heights
        own = self.markers[seat]
        markers: dict[str, int] = {}
        progress: dict[str, int] = {}
        claimed: list[int] = []
        removed: dict[str, list[int]] = {}
        for column, at in enumerate(self.runners):
            if not at:
                continue
            markers[str(column)] = at
            if at > own[column]:
                progress[str(column)] = at - own[column]
            if at == heights[column]:
                claimed.append(column)
                for other, theirs in enumerate(self.markers):
                    if other != seat and theirs[column]:
                        removed.setdefault(str(other), []).append(column)
        total = sum(1 for owner in self.claimed if owner == seat) + len(claimed)
        won = total >= self.rules["columns_to_win"]
        self.trigger_event(
            self.TurnStopped,
            seat=seat,
            markers=markers,
            progress=progress,
            claimed=claimed,
            removed=removed,
            next_player=None if won else self._next_seat(seat),
        )
        if won:
            self._finish(seat, "columns")

    def resign(self, seat: int) -> None:
        """Leave the game at any time; claimed columns stay claimed, other markers come off."""
        self._check_active(seat, turn=False)
        if self.resigned[seat]:
            raise IllegalAction(f"seat {seat} has already resigned")
        self._resign(seat)

    def _resign(self, seat: int, reason: str | None = None) -> None:
        own = self.markers[seat]
        removed = [c for c, at in enumerate(own) if at and self.claimed[c] != seat]
        remaining = [s for s in range(self.seats) if s != seat and not self.resigned[s]]
        if len(remaining) <= 1:
            next_player: int | None = None
        elif self.current == seat:
            next_player = self._next_seat(seat)
        else:
            next_player = self.current
        self.trigger_event(
            self.PlayerResigned, seat=seat, removed=removed, next_player=next_player, reason=reason
        )
        if self.aborts():  # early: the whole game is aborted now, not at its end (no dodging)
            self._finish(None, "aborted")
        elif not remaining:
            self._finish(None, "resigned")
        elif len(remaining) == 1:
            self._finish(remaining[0], "last_player")

    def can_still_win(self, seat: int) -> bool:
        """Whether ``seat`` could still reach ``columns_to_win``: its claimed columns plus every
        column nobody has claimed (claimed columns stay closed). The rules play on when nobody
        can (every roll then busts: only resignations end the game); the service's computer
        players resign then (Timekeeper)."""
        owners = self.claimed[2:]  # columns 2..2f: indices 0 and 1 are no column
        need: int = self.rules["columns_to_win"]
        return owners.count(seat) + owners.count(UNCLAIMED) >= need

    def reveal_seed(self, server_seed: str) -> None:
        """Publish the server seed once the game is finished; it must match the commitment."""
        if self.status != "finished" or self.dice_mode != "server" or self.server_seed:
            raise IllegalAction("the seed is revealed once, when a server-dice game is finished")
        if commitment(server_seed) != self.seed_commitment:
            raise IllegalAction("that seed does not match the game's commitment")
        self.trigger_event(self.SeedRevealed, server_seed=server_seed)

    # ------------------------------------------------------------------ clocks, abandonment
    @property
    def deadline(self) -> datetime | None:
        """When the turn of the player to act times out: its start plus the clock's time
        (people only: bots have no clock). None without a clock or a person to act."""
        if (
            self.clock_seconds is None
            or self.status != "in_progress"
            or self.turn_started_at is None
            or self.is_bot(self.current)
        ):
            return None
        return self.turn_started_at + timedelta(seconds=self.clock_seconds)

    def timed_out(self, now: datetime) -> bool:
        deadline = self.deadline
        return deadline is not None and now >= deadline

    def time_out(self, now: datetime) -> None:
        """Record that the turn's deadline passed: the turn ends as a bust would (runners lost,
        a completed turn); a player who times out three turns in a row is resigned."""
        deadline = self.deadline
        if deadline is None or now < deadline:
            raise IllegalAction("no turn has timed out")
        seat = self.current
        assert seat is not None
        in_a_row = self.timeouts_of(seat) + 1
        self.trigger_event(
            self.TurnTimedOut,
            timestamp=now,
            seat=seat,
            deadline=format_at(deadline),
            lost=position_map(self.runners),
            in_a_row=in_a_row,
            next_player=self._next_seat(seat),
        )
        if self.aborts():  # a seat that never played let its turn run out: aborted at once
            self._finish(None, "aborted")
        elif in_a_row >= TIMEOUTS_TO_RESIGN:
            self._resign(seat, reason="inactivity")

    def idle_since(self) -> datetime:
        """When the last event was recorded."""
        stamp: datetime = self.modified_on
        return stamp

    def abandon(self, now: datetime, after: int) -> None:
        """End a game (or lobby) in which nothing was recorded for ``after`` seconds: no winner."""
        if self.status == "finished":
            raise GameOver("the game is finished")
        idle_since = self.idle_since()
        if now < idle_since + timedelta(seconds=after):
            raise IllegalAction(f"the game has not been idle for {after} s")
        self.trigger_event(
            self.GameAbandoned, timestamp=now, idle_since=format_at(idle_since), after=after
        )
        self._finish(None, "abandoned")

    def _ended_in_time(self, seat: int) -> None:
        """A turn the player ended themselves (stop or bust): their timeouts start again, and
        the seat has played (``played``)."""
        if self.timeouts_of(seat):
            self._timeouts = [0 if s == seat else self.timeouts_of(s) for s in range(self.seats)]
        if not self.played[seat]:
            self._played = [s == seat or self.played[s] for s in range(self.seats)]

    def timeouts_of(self, seat: int) -> int:
        """How many of ``seat``'s turns in a row ended by timing out."""
        return self.timeouts[seat] if seat < len(self.timeouts) else 0

    def aborts(self) -> bool:
        """Whether a resignation or a timeout now aborts the game (contract 1.3): a rated game
        that started and in which some seat (a bot's too) has not yet played a turn of its own,
        ended by stop or bust (a turn that timed out was not played). The game ends at once,
        aborted, even with three seats or more: a game of three in which one seat left early
        is not left to be aborted by whoever is losing many rounds later. An aborted game has
        no winner and rates nobody: resigning, or letting the clock run, before everyone has
        played costs no rating and gains none."""
        return self.abortable and self.status == "in_progress" and not all(self.played)

    def _finish(self, winner: int | None, reason: str) -> None:
        if reason != "columns" and self.aborts():
            winner, reason = None, "aborted"
        mode = self.rules["solitaire"]
        rating = solitaire_rating(mode, self.turns_completed) if mode and winner == 0 else None
        self.trigger_event(
            self.GameFinished,
            winner=winner,
            reason=reason,
            turns=self.turns_completed,
            rating=rating,
        )

    # ------------------------------------------------------------------------------- helpers
    def _next_seat(self, seat: int) -> int:
        """The next seat after ``seat`` that has not resigned (``seat`` itself in solitaire)."""
        for step in range(1, self.seats + 1):
            candidate = (seat + step) % self.seats
            if not self.resigned[candidate] and candidate != seat:
                return candidate
        return seat

    def _begin_turn(self, seat: int | None) -> None:
        self.runners = [0] * len(self.runners)
        self.dice = None
        self.options = []
        self.current = seat
        if seat is None:
            self.phase = None
        else:
            self.phase = "roll"
            self.turn_number += 1

    @property
    def solitaire_target(self) -> int | None:
        mode = self.rules["solitaire"]
        return SOLITAIRE_TARGETS[mode] if mode else None


def check_dice(dice: Any, faces: int) -> list[int]:
    """Four integers within 1..faces, or InvalidDice."""
    if (
        not isinstance(dice, list | tuple)
        or len(dice) != 4
        or not all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= faces for d in dice)
    ):
        raise InvalidDice(
            f"a roll is exactly four integers from 1 to {faces}, not {shown(dice, limit=60)}"
        )
    return list(dice)


def shown(value: Any, limit: int = 80) -> str:
    """``value`` for a message, as JSON writes it (canonical: ``[1,2,true]``, not Python's
    ``(1, 2, True)``; what JSON cannot write, as Python does), cut to ``limit`` characters."""
    try:
        text = CANONICAL_JSON.encode(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


BASE_FIELDS = frozenset(
    {"originator_id", "originator_version", "timestamp", "originator_topic", "prev_hash", "hash"}
)


def event_type(event: Game.Event) -> str:
    return type(event).__name__


def event_data(event: Game.Event) -> dict[str, Any]:
    """The event's own fields: exactly what was hashed when it was recorded."""
    return {
        k: v
        for k, v in event.__dict__.items()
        if k not in BASE_FIELDS and (v is not None or k not in OPTIONAL_FIELDS)
    }


def event_record(event: Game.Event) -> dict[str, Any]:
    """An event as the API serves it (``/events``, exports, streams)."""
    return {
        "version": event.originator_version,
        "type": event_type(event),
        "at": format_at(event.timestamp),
        "data": event_data(event),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def event_records(events: Iterable[object]) -> list[dict[str, Any]]:
    """Events as the API serves them; each must be a game's (the library types the events of
    ``pending_events`` and ``collect_events`` only as its own base class)."""
    records = []
    for event in events:
        if not isinstance(event, Game.Event):
            raise TypeError(f"not a game event: {type(event).__name__}")
        records.append(event_record(event))
    return records
