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

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from eventsourcing.domain import Aggregate

from domain.errors import GameOver, IllegalAction, InvalidDice, InvalidRequest, NotYourTurn
from domain.fairness import commitment
from domain.moves import UNCLAIMED, Board, Move
from domain.rules import SOLITAIRE_TARGETS, Rules, normalize_rules, solitaire_rating

ZERO_HASH = "0" * 64
MAX_NAME_LENGTH = 40
DICE_MODES = ("server", "manual")

Draw = Callable[[int, int, int], list[int]]
"""``draw(nonce, count, faces)``: ``count`` dice of ``faces`` faces for draw ``nonce``."""


def format_at(timestamp: datetime) -> str:
    """An event's time as served: UTC, microseconds, ``Z``."""
    return timestamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def chain_hash(prev_hash: str, version: int, type_: str, at: str, data: Mapping[str, Any]) -> str:
    """sha256(bytes(prev_hash) + canonical JSON of the served event), as the contract defines it."""
    body = json.dumps(
        {"version": version, "type": type_, "at": at, "data": data},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(bytes.fromhex(prev_hash) + body.encode("utf-8")).hexdigest()


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest("a player's name must be a non-empty string")
    cleaned: str = name.strip()
    if not cleaned.isprintable():
        raise InvalidRequest("a player's name cannot hold line breaks or control characters")
    if len(cleaned) > MAX_NAME_LENGTH:
        raise InvalidRequest(f"a player's name is at most {MAX_NAME_LENGTH} characters")
    return cleaned


def _runner_map(runners: Sequence[int]) -> dict[str, int]:
    return {str(column): at for column, at in enumerate(runners) if at}


class Game(Aggregate):
    # ---------------------------------------------------------------------------------- events
    class Event(Aggregate.Event):
        prev_hash: str
        hash: str

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, Game)
            aggregate.last_hash = self.hash
            self.update(aggregate)

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

    class SeatJoined(Event):
        seat: int
        name: str

        def update(self, game: Game) -> None:
            game.names[self.seat] = self.name

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
            game._begin_turn(self.next_player)

    class PlayerResigned(Event):
        seat: int
        removed: list[int]
        next_player: int | None

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
        self.options: list[Move]
        self.winner: int | None
        self.finish_reason: str | None
        self.rating: str | None
        self.turns_completed: int
        self.next_nonce: int
        self.client_seed: str | None
        self.seed_commitment: str | None
        self.server_seed: str | None
        self.last_hash: str

    # ----------------------------------------------------------------- the hash chain, recorded
    @classmethod
    def _create(cls, event_class: type[Any], *, id: Any = None, **kwargs: Any) -> Game:
        timestamp = kwargs.pop("timestamp", None) or event_class.create_timestamp()
        digest = chain_hash(ZERO_HASH, 1, event_class.__name__, format_at(timestamp), kwargs)
        game = super()._create(
            event_class, id=id, timestamp=timestamp, prev_hash=ZERO_HASH, hash=digest, **kwargs
        )
        assert isinstance(game, Game)
        return game

    def trigger_event(self, event_class: type[Any], **kwargs: Any) -> None:
        timestamp = kwargs.pop("timestamp", None) or event_class.create_timestamp()
        digest = chain_hash(
            self.last_hash, self.version + 1, event_class.__name__, format_at(timestamp), kwargs
        )
        super().trigger_event(
            event_class, timestamp=timestamp, prev_hash=self.last_hash, hash=digest, **kwargs
        )

    # ------------------------------------------------------------------------------ creation
    @classmethod
    def start(
        cls,
        game_id: Any,
        *,
        players: Sequence[str] | None = None,
        seats: int | None = None,
        rules: Mapping[str, Any] | None = None,
        dice: str = "server",
        first_player: int | None = None,
        client_seed: str | None = None,
        server_seed: str | None = None,
        draw: Draw | None = None,
    ) -> Game:
        """Create a game with named ``players`` (it starts at once) or ``seats`` (a lobby).

        Server dice need ``server_seed`` (only its commitment is recorded) and ``draw`` for the
        opening roll.
        """
        if (players is None) == (seats is None):
            raise InvalidRequest("give either players (their names) or seats (a number)")
        if players is not None:
            if not isinstance(players, list | tuple):
                raise InvalidRequest("players must be a list of names")
            names: list[str] | None = [check_name(p) for p in players]
            n = len(players)
        else:
            if isinstance(seats, bool) or not isinstance(seats, int) or not 2 <= seats <= 8:
                raise InvalidRequest("seats must be an integer from 2 to 8")
            names, n = None, seats
        normalized = normalize_rules(rules, n)
        if dice not in DICE_MODES:
            raise InvalidRequest('dice must be "server" or "manual"')
        if dice == "server":
            if first_player is not None:
                raise InvalidRequest("first_player is only for manual dice")
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
            players=names,
            seats=n,
            rules=normalized.to_dict(),
            dice=dice,
            first_player=first_player,
            client_seed=client_seed,
            seed_commitment=seed_commitment,
        )
        if names is not None:
            game._decide_turn_order(draw)
        return game

    def join(self, name: str, draw: Draw | None = None) -> int:
        """Take the first open lobby seat; the game starts when the last seat is taken."""
        name = check_name(name)
        if self.status != "waiting" or None not in self.names:
            raise IllegalAction("this game has no open seat")
        seat = self.names.index(None)
        self.trigger_event(self.SeatJoined, seat=seat, name=name)
        if None not in self.names:
            self._decide_turn_order(draw)
        return seat

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
        """Contract order: game in progress, then the turn."""
        if self.status == "finished":
            raise GameOver("the game is finished")
        if self.status != "in_progress":
            raise IllegalAction("the game has not started: seats are still open")
        if not isinstance(seat, int) or not 0 <= seat < self.seats:
            raise NotYourTurn(f"there is no seat {seat}")
        if turn and seat != self.current:
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

    def roll(self, seat: int, dice: Sequence[int] | None = None, draw: Draw | None = None) -> None:
        """Roll four dice: manual ``dice``, or server dice from ``draw``. No move at all busts."""
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
            rolled = draw(nonce, 4, faces)
        moves = self.board(seat).legal_moves(rolled, self.runners)
        self.trigger_event(
            self.DiceRolled, seat=seat, dice=rolled, nonce=nonce, moves=[list(m) for m in moves]
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
            lost=_runner_map(self.runners),
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
            self.MovePlayed, seat=seat, sums=list(chosen), runners=_runner_map(runners)
        )

    def act(self, seat: int, action: Mapping[str, Any], draw: Draw | None = None) -> None:
        """One action of the contract's form (``{"type": "roll"|"move"|"stop"|"resign", …}``)
        by ``seat``: the HTTP API and the transcript verifier both come through here."""
        kind = action["type"]
        if kind == "roll":
            self.roll(seat, dice=action.get("dice"), draw=draw)
        elif kind == "move":
            self.move(seat, action["sums"])
        elif kind == "stop":
            self.stop(seat)
        elif kind == "resign":
            self.resign(seat)
        else:
            raise InvalidRequest(f"unknown action type {kind!r}")

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
        own = self.markers[seat]
        removed = [c for c, at in enumerate(own) if at and self.claimed[c] != seat]
        remaining = [s for s in range(self.seats) if s != seat and not self.resigned[s]]
        if len(remaining) <= 1:
            next_player: int | None = None
        elif self.current == seat:
            next_player = self._next_seat(seat)
        else:
            next_player = self.current
        self.trigger_event(self.PlayerResigned, seat=seat, removed=removed, next_player=next_player)
        if not remaining:
            self._finish(None, "resigned")
        elif len(remaining) == 1:
            self._finish(remaining[0], "last_player")

    def reveal_seed(self, server_seed: str) -> None:
        """Publish the server seed once the game is finished; it must match the commitment."""
        if self.status != "finished" or self.dice_mode != "server" or self.server_seed:
            raise IllegalAction("the seed is revealed once, when a server-dice game is finished")
        if commitment(server_seed) != self.seed_commitment:
            raise IllegalAction("that seed does not match the game's commitment")
        self.trigger_event(self.SeedRevealed, server_seed=server_seed)

    def _finish(self, winner: int | None, reason: str) -> None:
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
        raise InvalidDice(f"a roll is exactly four integers from 1 to {faces}, not {dice!r}")
    return list(dice)


BASE_FIELDS = frozenset(
    {"originator_id", "originator_version", "timestamp", "originator_topic", "prev_hash", "hash"}
)


def event_type(event: Game.Event) -> str:
    return type(event).__name__


def event_data(event: Game.Event) -> dict[str, Any]:
    """The event's own fields: exactly what was hashed when it was recorded."""
    return {k: v for k, v in event.__dict__.items() if k not in BASE_FIELDS}


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
