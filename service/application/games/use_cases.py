"""The games' use cases: create, act, read. Each game is a ``Game`` aggregate; its secrets live in
its ``Vault`` (service/application/aggregates.py, read through games/secrets.py), saved in the
same transaction; both are saved and loaded through the store (service/application/store.py).
"""

from __future__ import annotations

import copy
import logging
import re
import secrets
import threading
import uuid
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError

from domain import strategies
from domain.commands import Command, NewGame, Resign, visible_ascii
from domain.errors import DomainError, InvalidRequest, TimedOut
from domain.game import Game, format_at
from domain.view import game_state
from service.application.aggregates import Vault, new_token, token_hash
from service.application.errors import (
    ApplicationError,
    ConcurrentAction,
    NotFound,
    NotWitnessed,
    RatedGameInProgress,
    RatedNeedsClock,
    ReadOnly,
    TurnMovedOn,
    VersionConflict,
)
from service.application.games.idempotency import Key, recalled, refuse, remember
from service.application.games.seats import Seats
from service.application.games.secrets import GameSecrets, dicer_of
from service.application.store import Store

log = logging.getLogger("cantstop")


@dataclass(frozen=True)
class Seat:
    seat: int
    name: str | None
    token: str | None
    """None for a computer player's seat."""
    bot: str | None = None


@dataclass(frozen=True)
class ActionResult:
    """The game's state after an action (the contract's view), and the events the action
    appended (as served)."""

    state: dict[str, Any]
    events: list[dict[str, Any]]
    replayed: bool = False

    @property
    def version(self) -> int:
        version: int = self.state["version"]
        return version


class Views:
    """Each game's state view, built once per version (views are never changed once built).

    Two caches: the latest view of each game (replaced by the next version's, so an action's
    view lives only until the game's next action), and a few past versions asked for by
    readers. Keeping every new version for a while, as one cache of (game, version) did, kept
    each view alive long enough for the garbage collector to move its hundred-odd objects to
    its oldest generation, and so into every full collection (docs/performance.md)."""

    def __init__(self, games: int, past: int) -> None:
        self.games = games
        self.past = past
        self._latest: OrderedDict[uuid.UUID, dict[str, Any]] = OrderedDict()
        self._past: OrderedDict[tuple[uuid.UUID, int], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, game_id: uuid.UUID, version: int) -> dict[str, Any] | None:
        with self._lock:
            latest = self._latest.get(game_id)
            if latest is not None and latest["version"] == version:
                return latest
            return self._past.get((game_id, version))

    def of(self, game: Game) -> dict[str, Any]:
        """The view of the game's latest version (``game`` is the object commands change)."""
        with self._lock:
            found = self._latest.get(game.id)
            if found is not None and found["version"] == game.version:
                self._latest.move_to_end(game.id)
                return found
        view = game_state(game, str(game.id))
        with self._lock:
            held = self._latest.get(game.id)
            if held is None or held["version"] < game.version:
                self._latest[game.id] = view
                self._latest.move_to_end(game.id)
                if len(self._latest) > self.games:
                    self._latest.popitem(last=False)
        return view

    def of_past(self, game: Game) -> dict[str, Any]:
        """The view of a past version (``game`` rebuilt at it), kept among the few asked for."""
        key = (game.id, game.version)
        view = game_state(game, str(game.id))
        with self._lock:
            self._past[key] = view
            if len(self._past) > self.past:
                self._past.popitem(last=False)
        return view


GAME_ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


_PARSED: dict[str, uuid.UUID] = {}
PARSED_CACHE = 10_000


def parse_game_id(raw: str) -> uuid.UUID:
    """A game id as the service writes it (openapi.yaml's pattern). ``uuid.UUID`` alone also
    reads 32 bare hex digits, ``{…}`` and ``urn:uuid:…``: one game under several URLs.

    The ids this worker has read are kept, up to a bound: a dictionary's lookup costs a small
    part of the pattern and ``uuid.UUID`` on every request (docs/performance.md, levers)."""
    known = _PARSED.get(raw)
    if known is not None:
        return known
    if not isinstance(raw, str) or not GAME_ID.fullmatch(raw):
        raise NotFound(f"no game {raw!r}")
    parsed = uuid.UUID(raw)
    if len(_PARSED) >= PARSED_CACHE:
        _PARSED.clear()
    _PARSED[raw] = parsed
    return parsed


# How far apart two hosts' clocks may be (NTP keeps them within milliseconds): a turn stamped
# by one host this much after a request reached another is taken to have begun after it.
CLOCK_SKEW = timedelta(milliseconds=250)


def moved_on(game: Game, seat: int, command: Command, arrived: datetime, at: datetime) -> None:
    """Refuse an action that would land in a turn of its seat that began while it waited:
    after it arrived and before it is judged (#43: a request a host held while frozen must not
    be recorded in a later turn than the one it was decided in). Any other turn's refusal is the
    rules' own (not_your_turn, turn_timed_out); a resignation is not tied to a turn; a turn
    stamped after this instant (a host whose clock runs ahead) is not judged by it."""
    if game.current != seat or isinstance(command, Resign):
        return
    started = game.turn_started_at
    if started is not None and arrived + CLOCK_SKEW < started <= at:
        raise TurnMovedOn(
            "the game moved on to a turn that began after this request arrived: it was not "
            "decided on this position; fetch the game and decide again"
        )


def check_version(game: Game, if_match: Collection[int] | None) -> None:
    """A change asked for at certain versions (If-Match) only: VersionConflict (412) when the
    game is at another."""
    if if_match is not None and game.version not in if_match:
        wanted = ", ".join(str(v) for v in sorted(if_match))
        named = (
            f"not {wanted}" if wanted else "and If-Match names no version (a weak tag never does)"
        )
        raise VersionConflict(
            f"the game is at version {game.version}, {named}", version=game.version
        )


def check_bots(players: Any) -> None:
    """Every computer player named must be one the service has (domain.strategies)."""
    for player in players:
        if isinstance(player, Mapping) and player.get("bot") is not None:
            try:
                strategies.get(str(player["bot"]))
            except strategies.UnknownStrategy as exc:
                known = ", ".join(s.id for s in strategies.list())
                raise InvalidRequest(f"{exc}; the bots are {known}") from None


def check_rated_clock(setup: NewGame) -> None:
    """A new rated game needs a turn clock (contract 1.3): without one a losing player can
    stall it until it is abandoned, which rates nobody. A rule for games made from now on,
    not one of the game's rules: histories recorded before it still replay."""
    if setup.rated is True and setup.clock is None:
        raise RatedNeedsClock('a rated game needs a turn clock: add "clock": {"turn_seconds": T}')


class Games:
    """Commands and queries on games; the HTTP layer adapts this to the contract."""

    VIEWS_CACHE = 2_000  # the latest view of this many games
    PAST_VIEWS_CACHE = 256

    def __init__(self, store: Store) -> None:
        self.store = store
        self.secrets = GameSecrets(store)
        self.seats = Seats(store, self.secrets)
        self.views = Views(self.VIEWS_CACHE, self.PAST_VIEWS_CACHE)

    @property
    def recorder(self) -> Any:
        """The store's recorder (the live hub reads the log through it)."""
        return self.store.recorder

    def history(
        self, game_id: uuid.UUID, after: int = 0, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The game's events after version ``after`` (at most ``limit``), as served."""
        return self.store.history(game_id, after, limit)

    def create(
        self,
        setup: NewGame,
        *,
        seed_commitment: str | None = None,
        game_id: uuid.UUID | None = None,
        also: Sequence[Aggregate] = (),
    ) -> tuple[dict[str, Any], list[Seat]]:
        """A new game. With ``seed_commitment`` (server dice only) the game takes the seed drawn
        for it beforehand, and the client's seed is required: the seed was fixed before the
        client chose theirs. Computer players are named by known strategy ids. ``game_id``: an
        id derived from what made the game (a challenge, seeks), so that two requests making it
        race for one first version; ``also``: aggregates whose changes are saved in the same
        transaction (the challenge accepted, the seeks paired): all or nothing
        (IntegrityError when another request changed one first)."""
        game, vault, issued = self._started(setup, seed_commitment, game_id)
        self.store.save(*also, game, vault)  # what made the game first, in the log too
        self.store.live.put(game)  # the first action needs no read
        return self.views.of(game), issued

    def create_many(
        self, setups: Sequence[tuple[NewGame, uuid.UUID]], *, also: Sequence[Aggregate] = ()
    ) -> list[dict[str, Any]]:
        """New games of derived ids, saved with ``also`` in one transaction (a tournament's
        round and its tables): all or nothing, so a table's game exists exactly when its round
        does (IntegrityError when another process saved any of them first). The seats' tokens
        are held by nobody: every seat is an account's, which acts with its personal token."""
        made = [self._started(setup, None, game_id)[:2] for setup, game_id in setups]
        self.store.save(*also, *(part for pair in made for part in pair))
        for game, _ in made:
            self.store.live.put(game)
        return [self.views.of(game) for game, _ in made]

    def _started(
        self, setup: NewGame, seed_commitment: str | None, game_id: uuid.UUID | None
    ) -> tuple[Game, Vault, list[Seat]]:
        """A new game and its vault, not saved yet."""
        check_bots(setup.players or ())
        check_rated_clock(setup)
        game_id = uuid.uuid4() if game_id is None else game_id
        committed_at: str | None = None
        server_seed: str | None
        if seed_commitment is not None:
            server_seed, committed_at = self.take_commitment(setup, seed_commitment)
        else:
            server_seed = secrets.token_hex(32) if setup.dice == "server" else None
        draw = None
        if server_seed is not None:
            client_seed = str(game_id) if setup.client_seed is None else setup.client_seed
            draw = dicer_of(server_seed, client_seed)
        game = Game.start(
            game_id, setup, server_seed=server_seed, draw=draw, seed_committed_at=committed_at
        )
        vault = Vault(game_id=game_id, server_seed=server_seed)
        issued = []
        if setup.players is not None:
            for seat, name in enumerate(game.names):
                bot = game.bots.get(str(seat))
                token = None if bot is not None else new_token()
                if token is not None:
                    vault.issue(seat, token_hash(token))
                issued.append(Seat(seat, name, token, bot))
            vault.seal()
        return game, vault, issued

    @staticmethod
    def judge(setup: NewGame) -> None:
        """Refuse (InvalidRequest) a setup that could not start a game, recording nothing: for
        what makes a game later (a challenge, a seek, a seed commitment's game)."""
        check_bots(setup.players or ())
        check_rated_clock(setup)
        Game.start(uuid.uuid4(), setup, server_seed="0" * 64, draw=dicer_of("0" * 64, "check"))

    def take_commitment(self, setup: NewGame, seed_commitment: str) -> tuple[str, str]:
        """The seed drawn for ``seed_commitment`` (used up: never again) and when it was
        committed, once ``setup`` is judged a game that can start (a refused game does not use
        up the commitment)."""
        if setup.dice != "server":
            raise InvalidRequest("seed_commitment is for server dice")
        if not visible_ascii(setup.client_seed):
            raise InvalidRequest(
                "a game with a seed_commitment needs a client_seed of 1 to 64 visible ASCII "
                "characters"
            )
        # Judge the rest of the request first: a refused game must not use up the commitment.
        self.judge(setup)
        assert self.secrets.commitments is not None
        taken = self.secrets.commitments.take(seed_commitment, datetime.now(UTC).timestamp())
        if taken is None:
            raise InvalidRequest(
                "unknown, expired or already used seed_commitment: ask POST /v1/seed-commitments"
            )
        seed, created = taken
        return seed, format_at(datetime.fromtimestamp(created, UTC))

    def act(
        self,
        game_id: uuid.UUID,
        seat: int,
        command: Command,
        *,
        if_match: Collection[int] | None = None,
        idempotency_key: str | None = None,
    ) -> ActionResult:
        """Apply one command by ``seat`` (already authenticated); record nothing if refused."""
        now = datetime.now(UTC)
        # The vault is read only when the action carries a key to look up or remember.
        vault: Vault | None = None
        key: Key | None = None
        if idempotency_key is not None:
            vault = self.secrets.read(game_id)
            key = Key.of(seat, idempotency_key, command)
            versions = recalled(vault, key, now)
            if versions is not None:
                return self._replay(game_id, *versions)
        # First on the game as this worker last saw it (no query); the store's optimistic
        # check refuses the insert if another worker recorded something meanwhile. A refusal
        # or a conflict is judged again on the latest version, read from the store.
        for fresh in (False, True):
            with self.store.owned(game_id, fresh=fresh) as game:
                # One instant, under the game's lock and after its read: the deadline is judged
                # at it and the events are stamped with it, however long the request waited.
                at = datetime.now(UTC)
                try:
                    moved_on(game, seat, command, now, at)
                    if game.timed_out(at):
                        if not fresh:
                            continue  # perhaps: judged on the latest version
                        self._record_timeout(game, at)
                    new_events = self._apply(game, seat, command, if_match, at)
                except (DomainError, VersionConflict, TurnMovedOn) as refused:
                    if not fresh:
                        continue
                    # Refused on the latest version: unless the same key was answered meanwhile
                    # (a concurrent repeat of this very request), which answers as it did. A
                    # key's refusal is its final answer too, kept in the vault for every host.
                    if key is not None:
                        replay = self._recalled(game_id, key, now)
                        if replay is not None:
                            return replay
                        if game.status != "finished":  # a game over refuses every copy alike
                            assert vault is not None
                            self._refused(game_id, seat, vault, key, refused, now)
                    raise
                if vault is not None:
                    assert key is not None
                    remember(vault, key, new_events[0]["version"], game.version, now)
                try:
                    self.store.save_owned(
                        game, *([vault] if vault is not None else []), served=new_events
                    )
                except IntegrityError:
                    pass  # judged below, once the changed object is out of the cache
                else:
                    return ActionResult(self.views.of(game), new_events)
            # Lost the race, or our own insert committed but its answer was lost and the retry
            # found it there. A repeat of the same key answers as the first did.
            if key is not None:
                replay = self._recalled(game_id, key, now)
                if replay is not None:
                    return replay
            if self._stored_as(game_id, new_events):
                return ActionResult(self.state(game_id, new_events[-1]["version"]), new_events)
            if vault is not None:  # its pending "key used" was not saved: read it afresh
                vault = self.secrets.read(game_id)
        raise ConcurrentAction(
            "another action on this game was recorded at the same moment; "
            "fetch the game and try again"
        )

    def _apply(
        self,
        game: Game,
        seat: int,
        command: Command,
        if_match: Collection[int] | None,
        at: datetime | None = None,
    ) -> list[dict[str, Any]]:
        """Run the command on ``game`` at ``at``: its new events as served (pending, unsaved)."""
        check_version(game, if_match)
        game.act(seat, command, draw=self.secrets.dicer(game), at=at)
        self.secrets.finish_up(game)
        return self.store.pending_records(game)

    def _record_timeout(self, game: Game, now: datetime) -> None:
        """An action came after its turn's deadline: record the timeout, refuse the action."""
        deadline = game.deadline
        game.time_out(now)
        self.secrets.finish_up(game)
        with suppress(IntegrityError):  # the timekeeper recorded it first: late all the same
            self.store.save_changes(game)
        raise TimedOut(
            f"the turn timed out at {format_at(deadline) if deadline else 'its deadline'}; "
            "nothing was recorded but the timeout"
        )

    def _recalled(self, game_id: uuid.UUID, key: Key, now: datetime) -> ActionResult | None:
        """The first answer to this key, if it is recorded now (read afresh)."""
        versions = recalled(self.secrets.read(game_id), key, now)
        return None if versions is None else self._replay(game_id, *versions)

    def _refused(
        self,
        game_id: uuid.UUID,
        seat: int,
        seen: Vault,
        key: Key,
        refused: DomainError | ApplicationError,
        now: datetime,
    ) -> None:
        """Keep a key's refusal as its answer: a late copy of the request (a host that froze
        with it, a retry) is then refused alike on every host, never recorded in a later turn.
        The game's history gains nothing. If another answer was kept first, that one stands
        (read again by whoever asks).

        A seat's keys are its holder's (``Vault.revoke`` forgets them): a lobby seat given back
        or taken by someone else since the request read the vault (``seen``) keeps nothing,
        or its next holder could be answered with this refusal."""
        vault = self.secrets.read(game_id)
        if vault.token_hashes.get(str(seat)) != seen.token_hashes.get(str(seat)):
            return
        refuse(vault, key, refused, now)
        with suppress(IntegrityError):
            self.store.save(vault)

    def _stored_as(self, game_id: uuid.UUID, records: list[dict[str, Any]]) -> bool:
        """Whether exactly these events (by their hashes) are the ones stored."""
        if not records:
            return False
        first = records[0]["version"]
        stored = self.store.history(game_id, after=first - 1, limit=len(records))
        return [r["hash"] for r in stored] == [r["hash"] for r in records]

    def _replay(self, game_id: uuid.UUID, first: int, last: int) -> ActionResult:
        events = self.store.history(game_id, after=first - 1, limit=last - first + 1)
        return ActionResult(self.state(game_id, last), events, replayed=True)

    def game(self, game_id: uuid.UUID, version: int | None = None) -> Game:
        """A private copy of the game at ``version`` (default: the latest). An unknown game or
        version is NotFound; a game whose stored events cannot be read is CorruptGame, naming
        the first bad version."""
        with self.store.owned(game_id) as latest:
            if version is None or version == latest.version:
                return copy.deepcopy(latest)
            current = latest.version
        return self.store.past(game_id, version, current)

    def state(self, game_id: uuid.UUID, version: int | None = None) -> dict[str, Any]:
        """The contract's state view of the game at ``version`` (default: the latest), built
        once per version. Callers must not change it. An imported game says so, and offers no
        action to anyone and no deadline (it is read-only)."""
        view = self.view(game_id, version)
        if self.store.is_imported(game_id):
            turn = view["turn"]
            if turn is not None and turn["deadline"] is not None:
                turn = {**turn, "deadline": None}  # it never times out: nobody plays it
            return {**view, "turn": turn, "legal_actions": [], "imported": True}
        return view

    def view(self, game_id: uuid.UUID, version: int | None = None) -> dict[str, Any]:
        """The game's own state view at ``version``, as its events build it (what the audit
        compares a replay with), imported or not."""
        with self.store.owned(game_id) as latest:
            if version is None or version == latest.version:
                return self.views.of(latest)
            current = latest.version
        known = self.views.get(game_id, version)
        if known is not None:
            return known
        return self.views.of_past(self.store.past(game_id, version, current))

    def refuse_imported(self, game_id: uuid.UUID) -> None:
        if self.store.is_imported(game_id):
            raise ReadOnly("this game was imported: it can be read, not played")

    def refuse_unwitnessed(self, game_id: uuid.UUID) -> None:
        """A receipt says this server recorded a version: it saw nothing of an imported game."""
        if self.store.is_imported(game_id):
            raise NotWitnessed(
                "this game was imported: this server did not see it played, so it signs no "
                "receipt of it (its export's hash chain and seed are checked by its /audit)"
            )

    def refuse_rated_in_progress(self, game_id: uuid.UUID) -> None:
        """The expert's advice and analysis are closed to everyone while a rated game is
        unfinished (contract 1.3): its rating must measure the players, not who asked. An
        imported copy of such a game never finishes, so it stays closed. NotFound first."""
        if not self.store.at_creation(game_id).rated:
            return
        with self.store.owned(game_id) as latest:
            finished = latest.status == "finished"
        if not finished:
            raise RatedGameInProgress(
                "this rated game is being played: the expert's advice and analysis open to "
                "everyone once it is finished"
            )


__all__ = ["ActionResult", "Games", "Seat", "parse_game_id"]
