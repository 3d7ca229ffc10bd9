"""The eventsourcing Application: games and their secrets, persisted in SQLite or PostgreSQL.

Each game is a ``Game`` aggregate; its secrets (the server seed, the seats' token hashes and the
idempotency keys used) live in a separate ``Vault`` aggregate that is saved in the same transaction
and never served. Build one ``Games`` per process, after gunicorn forks.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import logging
import re
import secrets
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, NoReturn

import orjson
from eventsourcing.application import (
    AggregateNotFoundError,
    Application,
    Repository,
    project_aggregate,
)
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import (
    IntegrityError,
    JSONTranscoder,
    Mapper,
    StoredEvent,
    Transcoder,
    Transcoding,
)
from eventsourcing.utils import get_topic, strtobool

from domain import fairness, strategies
from domain.audit import HEX64
from domain.commands import Command, NewGame, to_dict, visible_ascii
from domain.errors import DomainError, InvalidRequest, TimedOut
from domain.game import Draw, Game, event_record, event_records, format_at
from domain.view import game_state
from service.application.aggregates import (
    Account,
    ImportedGame,
    Vault,
    account_id,
    imported_marker_id,
    match_token,
    new_token,
    token_hash,
    vault_id,
)
from service.application.errors import (
    ConcurrentAction,
    IdempotencyKeyReused,
    NotFound,
    NotWitnessed,
    RatedGameInProgress,
    RatedNeedsClock,
    ReadOnly,
    Unauthorized,
    VersionConflict,
    describe,
)
from service.persistence.accounts import Credentials
from service.persistence.commitments import SeedCommitments
from service.persistence.errors import CorruptGame, StoreUnavailable
from service.persistence.keys import StoredKeys
from service.persistence.postgres import GuardedPostgresApplicationRecorder
from service.persistence.sqlite import GuardedSQLiteApplicationRecorder, SQLiteStore

log = logging.getLogger("cantstop")

COMMITMENT_TTL = timedelta(minutes=15)  # the contract asks for at least 10
GAME_EVENT_CLASSES: dict[str, type[Game.Event]] = {
    cls.__name__: cls
    for cls in vars(Game).values()
    if isinstance(cls, type) and issubclass(cls, Game.Event) and cls is not Game.Event
}
GAME_TOPICS = frozenset(get_topic(cls) for cls in GAME_EVENT_CLASSES.values())


@dataclass(frozen=True)
class Commitment:
    seed_commitment: str
    expires_at: datetime


@dataclass(frozen=True)
class Secrets:
    """What a worker keeps of a game's vault. Once the game has started (``sealed``) neither
    ever changes; before, a seat may be given back, so lobbies always read the vault afresh."""

    server_seed: str | None
    token_hashes: dict[str, str]
    sealed: bool


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


def _vault_damage(vault: Vault) -> str | None:
    """What is wrong with a vault read from the store, if anything: a server seed that is not
    64 lowercase hex characters, or token hashes that are not text by seat."""
    seed = vault.server_seed
    if seed is not None and not (isinstance(seed, str) and HEX64.fullmatch(seed)):
        return "the server seed is not 64 lowercase hex characters"
    hashes = vault.token_hashes
    if not isinstance(hashes, dict) or not all(
        isinstance(seat, str) and isinstance(digest, str) for seat, digest in hashes.items()
    ):
        return "the token hashes are not text by seat"
    return None


def _dicer(server_seed: str, client_seed: str) -> Draw:
    return functools.partial(fairness.draw, server_seed, client_seed)


class ServiceTranscoder(JSONTranscoder):
    """The library's JSON transcoder, which also keeps by type the transcodings registered
    through its public ``register``: GameEventMapper's orjson encoder applies them as the
    library's encoder does."""

    FAST = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS

    def __init__(self) -> None:
        super().__init__()
        self.by_type: dict[type, Transcoding] = {}

    def register(self, transcoding: Transcoding) -> None:
        super().register(transcoding)
        self.by_type[transcoding.type] = transcoding

    def encode_json_values(self, state: dict[str, Any]) -> bytes:
        """``state`` as ``encode`` writes it, for a state of JSON values and registered types
        orjson passes through (a datetime): TypeError for anything else, which orjson would
        write otherwise (a UUID as a plain string) or refuses (an integer beyond 64 bits)."""
        by_type = self.by_type

        def transcoded(value: Any) -> dict[str, Any]:
            transcoding = by_type.get(type(value))
            if transcoding is None:
                raise TypeError(type(value))
            return {"_type_": transcoding.name, "_data_": transcoding.encode(value)}

        return orjson.dumps(state, default=transcoded, option=self.FAST)


class GameEventMapper(Mapper[uuid.UUID]):
    """The library's mapper, with a faster encoder for the game's own events.

    A game event's payload is JSON values only (the hash chain encodes it as canonical JSON
    before the event exists, and refuses anything else), so only its timestamp needs a
    transcoding. orjson writes the same bytes as the library's JSON encoder for them (a
    property test compares the two over random games), in about a third of the time: ~2% of
    an action's CPU. Anything orjson refuses, every other event, snapshots, another
    transcoder and a configured compressor or cipher take the library's way."""

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        transcoder = self.transcoder
        if (
            not isinstance(domain_event, Game.Event)
            or not isinstance(transcoder, ServiceTranscoder)
            or self.compressor
            or self.cipher
            or getattr(type(domain_event), "class_version", 1) > 1
        ):
            return super().to_stored_event(domain_event)
        state = dict(vars(domain_event))
        originator_id = state.pop("originator_id")
        originator_version = state.pop("originator_version")
        try:
            encoded = transcoder.encode_json_values(state)
        except TypeError:  # orjson.JSONEncodeError: the library's encoder decides
            return super().to_stored_event(domain_event)
        return StoredEvent(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=get_topic(type(domain_event)),
            state=encoded,
        )


class LiveGames:
    """The latest version of each game this worker holds: one object per game, owned under its
    game's lock (Games.owned), changed in place by commands (no deep copy, and no query when
    the insert's optimistic check is enough), dropped when a change cannot be saved. The least
    recently used go first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._games: OrderedDict[uuid.UUID, Game] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, game_id: uuid.UUID) -> Game | None:
        with self._lock:
            game = self._games.get(game_id)
            if game is not None:
                self._games.move_to_end(game_id)
            return game

    def put(self, game: Game) -> None:
        with self._lock:
            self._games[game.id] = game
            self._games.move_to_end(game.id)
            if len(self._games) > self.size:
                self._games.popitem(last=False)

    def drop(self, game_id: uuid.UUID) -> None:
        with self._lock:
            self._games.pop(game_id, None)


class Games(Application[uuid.UUID]):
    """Commands and queries on games; the HTTP layer adapts this to the contract."""

    name = "cantstop"
    # A game's past version is read from the nearest snapshot before it, plus fewer than twenty
    # events: as quick at version 5,000 as at version 10. Every action writes, few reads look
    # back: every 20 events rather than 10 makes such a read replay a few more events and saves
    # a snapshot's write on half the actions (docs/performance.md, levers). The service takes
    # them itself (``_take_snapshots_of``), from the objects it saves: the library's
    # ``snapshotting_intervals`` stay empty, or its ``save`` would read each back from the store.
    is_snapshotting_enabled = True
    SNAPSHOT_INTERVALS: ClassVar[dict[type[Aggregate], int]] = {Game: 20, Vault: 50}

    SECRETS_CACHE = 10_000
    VIEWS_CACHE = 2_000  # the latest view of this many games
    PAST_VIEWS_CACHE = 256
    LOCK_STRIPES = 256
    LIVE_GAMES = 500

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            self._build(*args, **kwargs)
        except BaseException:
            # A store that cannot be used at start: close what was opened (a PostgreSQL pool's
            # threads) now. Left to the library's __del__, the close could run in one of those
            # threads, on garbage collection, and fail to join itself.
            with contextlib.suppress(Exception):
                self.close()
            raise

    def _build(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Per worker: each game's seed and token hashes (so most actions never read the vault),
        # and whether a game was imported (read-only). Both only ever grow.
        self.secrets_cache: dict[uuid.UUID, Secrets] = {}
        self.imported_cache: dict[uuid.UUID, bool] = {}
        self.seeds_checked: set[uuid.UUID] = set()  # stored seeds found to match commitments
        # The latest version of each game this worker holds, owned under its game's lock:
        # commands change it in place, readers get views or copies (LiveGames). A game not held
        # is read through a repository of its own, without the library's cache (which would
        # deep-copy it on every read; the other aggregates keep that cache).
        self._locks = [threading.RLock() for _ in range(self.LOCK_STRIPES)]
        self.live = LiveGames(self.LIVE_GAMES)
        self._game_reads: Repository[uuid.UUID] = Repository(
            event_store=self.events, snapshot_store=self.snapshots
        )
        self.views = Views(self.VIEWS_CACHE, self.PAST_VIEWS_CACHE)
        self._saved: dict[uuid.UUID, int] = {}
        dialect = "sqlite" if isinstance(self.factory, SQLiteStore) else "postgres"
        datastore = getattr(self.recorder, "datastore", None)
        self.commitments = SeedCommitments(datastore, dialect) if datastore is not None else None
        self._credentials = Credentials(datastore, dialect) if datastore is not None else None
        self._keys = StoredKeys(datastore, dialect) if datastore is not None else None
        if self.commitments is not None and strtobool(self.env.get("CREATE_TABLE") or "yes"):
            self.commitments.create_table()
            assert self._credentials is not None and self._keys is not None
            self._credentials.create_table()
            self._keys.create_table()

    def credentials(self) -> Credentials:
        """The accounts' secrets, in the store's database (service.persistence.accounts)."""
        assert self._credentials is not None, "accounts need a SQLite or PostgreSQL store"
        return self._credentials

    def stored_keys(self) -> StoredKeys | None:
        """The receipts' development key's table (service.persistence.keys)."""
        return self._keys

    def construct_transcoder(self) -> Transcoder:
        transcoder = ServiceTranscoder()
        self.register_transcodings(transcoder)
        return transcoder

    def construct_mapper(self) -> Mapper[uuid.UUID]:
        return self.factory.mapper(
            transcoder=self.construct_transcoder(), mapper_class=GameEventMapper
        )

    principals: Callable[[str], str] | None = None
    """A personal token's account handle, with the scope ``play`` (set by the runtime:
    service.application.players.accounts); None where accounts are not served."""

    on_recorded: Callable[[uuid.UUID, list[dict[str, Any]]], None] | None = None
    """Called after every successful save with each game's new events as served (service.live)."""

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        recordings = super().save(*objs, **kwargs)
        events = [recording.domain_event for recording in recordings]
        self._take_snapshots_of({o.id: o for o in objs if isinstance(o, Aggregate)}, events)
        if self.on_recorded is not None:
            new: dict[uuid.UUID, list[dict[str, Any]]] = {}
            for event in events:
                if isinstance(event, Game.Event):
                    new.setdefault(event.originator_id, []).append(event_record(event))
            self._tell(new)
        return recordings

    def _take_snapshots_of(self, aggregates: Mapping[uuid.UUID, Any], events: list[Any]) -> None:
        """The snapshots a save makes due (SNAPSHOT_INTERVALS), taken from the objects just
        saved. A save that passes several multiples of an aggregate's interval (an import: one
        save of a whole game) takes one at each, read back from the store as the library's
        ``take_snapshot`` does."""
        passed = self._multiples_passed(aggregates, events)
        several = [aggregate_id for aggregate_id, versions in passed.items() if len(versions) > 1]
        for aggregate_id in several:
            for version in passed.pop(aggregate_id):
                self.take_snapshot(aggregate_id, version=version)
        due = self._snapshots_of(aggregates, passed)
        if due:
            assert self.snapshots is not None
            self.snapshots.put(due)

    def _multiples_passed(
        self, aggregates: Mapping[uuid.UUID, Any], events: list[Any]
    ) -> dict[uuid.UUID, list[int]]:
        """The versions at multiples of their aggregate's interval among ``events``, by id."""
        passed: dict[uuid.UUID, list[int]] = {}
        if not self.snapshots:
            return passed
        for event in events:
            aggregate = aggregates.get(event.originator_id)
            if aggregate is None:
                continue
            interval = self.SNAPSHOT_INTERVALS.get(type(aggregate))
            if interval and event.originator_version % interval == 0:
                passed.setdefault(event.originator_id, []).append(event.originator_version)
        return passed

    @staticmethod
    def _snapshots_of(aggregates: Mapping[uuid.UUID, Any], ids: Collection[uuid.UUID]) -> list[Any]:
        """Snapshots of the aggregates ``ids``, as they are now."""
        due = []
        for aggregate_id in ids:
            aggregate = aggregates[aggregate_id]
            due.append(type(aggregate).Snapshot.take(aggregate))
        return due

    def _write(self, *aggregates: Aggregate) -> None:
        """Store the aggregates' pending events, and then the snapshots they make due: what
        ``save`` does, without the library's general machinery (a third of an action's cost),
        for the command path. How each store writes them: ``insert_with_snapshots``."""
        events = [event for aggregate in aggregates for event in aggregate.collect_events()]
        stored = [self.mapper.to_stored_event(e) for e in events]
        by_id = {a.id: a for a in aggregates}
        due = self._snapshots_of(by_id, self._multiples_passed(by_id, events))
        if not due:
            self.recorder.insert_events(stored)
            return
        assert self.snapshots is not None
        recorder = self.recorder  # the stores are SQLiteStore and PostgresStore (store.py)
        assert isinstance(
            recorder, GuardedSQLiteApplicationRecorder | GuardedPostgresApplicationRecorder
        )
        stored_snapshots = [self.mapper.to_stored_event(s) for s in due]
        recorder.insert_with_snapshots(stored, self.snapshots.recorder, stored_snapshots)

    def _tell(self, new: dict[uuid.UUID, list[dict[str, Any]]]) -> None:
        if self.on_recorded is None:
            return
        for game_id, records in new.items():
            try:
                self.on_recorded(game_id, records)
            except Exception:  # the events are stored: a failed notice must not undo that
                log.exception("on_recorded failed for %s", game_id)

    # -------------------------------------------------------------------------------- reads
    @contextmanager
    def owned(self, game_id: uuid.UUID, *, fresh: bool = True) -> Iterator[Game]:
        """The game's latest version, to read or change under its lock; if it was changed and
        the change is not saved by the end of the block, it is evicted (read afresh next time).

        ``fresh=False`` skips the query for events other workers may have recorded since this
        one last saw the game: for commands, whose insert fails if the game moved on."""
        with self._locks[game_id.int % self.LOCK_STRIPES]:
            game = self._latest(game_id, fresh=fresh)
            before = game.version
            try:
                yield game
            finally:
                if game.version != before and self._saved.pop(game_id, None) != game.version:
                    self._evict(game_id)

    def _save_owned(
        self, game: Game, *others: Aggregate, served: list[dict[str, Any]] | None = None
    ) -> None:
        """Save a game changed under ``owned`` (and its vault, if given). ``served``: its new
        events as served, when the caller has them already."""
        if served is None:
            self.save(game, *others)
        else:
            self._write(game, *others)
            self._tell({game.id: served})
        self._saved[game.id] = game.version

    def _evict(self, game_id: uuid.UUID) -> None:
        self.live.drop(game_id)

    def _latest(self, game_id: uuid.UUID, *, fresh: bool = True) -> Game:
        """The game's held object, brought up to date with one query for newer events (unless
        not ``fresh``), or read from the store and held from then on. Unknown is NotFound; a
        stored row that cannot be decoded or applied is rebuilt around (``_rebuild``) and not
        held."""
        held = self.live.get(game_id)
        if held is not None and not fresh:
            return held
        try:
            found: Any
            if held is None:
                found = self._game_reads.get(game_id)
            else:
                found = project_aggregate(held, self.events.get(game_id, gt=held.version))
        except AggregateNotFoundError:
            raise NotFound(f"no game {game_id}") from None
        except (StoreUnavailable, NotFound):
            raise
        except Exception as exc:  # a stored row that cannot be decoded or applied
            self.live.drop(game_id)
            found = self._rebuild(game_id, None, exc)
        else:
            if isinstance(found, Game) and found is not held:
                self.live.put(found)
        if not isinstance(found, Game):
            raise NotFound(f"no game {game_id}")
        return found

    def at_creation(self, game_id: uuid.UUID) -> Game:
        """The game as created (version 1): one event read, however long the game is now."""
        try:
            found: Aggregate = self.repository.get(game_id, version=1)
        except AggregateNotFoundError:
            raise NotFound(f"no game {game_id}") from None
        except (StoreUnavailable, NotFound):
            raise
        except Exception as exc:  # a stored row that cannot be decoded or applied
            found = self._rebuild(game_id, 1, exc)
        if not isinstance(found, Game):
            raise NotFound(f"no game {game_id}")
        return found

    def _past(self, game_id: uuid.UUID, version: int, latest: int) -> Game:
        if not 1 <= version <= latest:
            raise NotFound(f"game {game_id} has versions 1 to {latest}, not {version}")
        try:
            past: Aggregate = self.repository.get(game_id, version=version)
        except (StoreUnavailable, NotFound):
            raise
        except Exception as exc:
            past = self._rebuild(game_id, version, exc)
        assert isinstance(past, Game)
        return past

    def game(self, game_id: uuid.UUID, version: int | None = None) -> Game:
        """A private copy of the game at ``version`` (default: the latest). An unknown game or
        version is NotFound; a game whose stored events cannot be read is CorruptGame, naming
        the first bad version."""
        with self.owned(game_id) as latest:
            if version is None or version == latest.version:
                return copy.deepcopy(latest)
            current = latest.version
        return self._past(game_id, version, current)

    def state(self, game_id: uuid.UUID, version: int | None = None) -> dict[str, Any]:
        """The contract's state view of the game at ``version`` (default: the latest), built
        once per version. Callers must not change it. An imported game says so, and offers no
        action to anyone and no deadline (it is read-only)."""
        view = self.view(game_id, version)
        if self.is_imported(game_id):
            turn = view["turn"]
            if turn is not None and turn["deadline"] is not None:
                turn = {**turn, "deadline": None}  # it never times out: nobody plays it
            return {**view, "turn": turn, "legal_actions": [], "imported": True}
        return view

    def view(self, game_id: uuid.UUID, version: int | None = None) -> dict[str, Any]:
        """The game's own state view at ``version``, as its events build it (what the audit
        compares a replay with), imported or not."""
        with self.owned(game_id) as latest:
            if version is None or version == latest.version:
                return self.views.of(latest)
            current = latest.version
        known = self.views.get(game_id, version)
        if known is not None:
            return known
        return self.views.of_past(self._past(game_id, version, current))

    def _rebuild(self, game_id: uuid.UUID, version: int | None, failure: Exception) -> Game:
        """Replay the stored events one by one, without snapshots: a damaged snapshot only costs
        time (the audit reports it); a damaged event is CorruptGame at its version."""
        game: Any = None
        at = 0
        try:
            for row in self.recorder.select_events(game_id, lte=version):
                if row.originator_version != at + 1:
                    self._missing(game_id, at + 1)
                at = row.originator_version
                stored = self.mapper.to_domain_event(row)
                if not isinstance(stored, Game.Event):
                    raise TypeError("not an event of a game")
                game = stored.mutate(game)
        except (StoreUnavailable, CorruptGame):
            raise
        except Exception as exc:
            raise self._damaged_event(game_id, at, "cannot be read", describe(exc)) from None
        if game is None:
            raise NotFound(f"no game {game_id}")
        log.warning(
            "game %s version %s: read without its snapshot (%s)",
            game_id,
            version,
            describe(failure),
        )
        assert isinstance(game, Game)
        return game

    def history(
        self, game_id: uuid.UUID, after: int = 0, limit: int | None = None
    ) -> list[dict[str, Any]]:
        try:
            stored = list(self.repository.event_store.get(game_id, gt=after or None, limit=limit))
        except StoreUnavailable:
            raise
        except Exception as exc:
            self._rebuild(game_id, None, exc)  # raises CorruptGame at the first bad version
            raise  # the events decode one by one: the failure was elsewhere
        records = []
        expected = after + 1
        for stored_event in stored:
            if not isinstance(stored_event, Game.Event):
                raise NotFound(f"no game {game_id}")  # another aggregate's id, e.g. a vault's
            if stored_event.originator_version != expected:
                self._missing(game_id, expected)
            expected += 1
            records.append(self._served(game_id, stored_event))
        if not records:
            self.game(game_id)  # 404 for an unknown game; else simply nothing after ``after``
        return records

    @staticmethod
    def _served(game_id: uuid.UUID, stored_event: Game.Event) -> dict[str, Any]:
        """A stored event as served; one whose stored form decoded but lacks what an event has
        (its hash, its time: a damaged row) is CorruptGame at its version, not a 500."""
        try:
            return event_record(stored_event)
        except Exception as exc:
            version = stored_event.originator_version
            raise Games._damaged_event(game_id, version, "cannot be read", describe(exc)) from None

    @staticmethod
    def _missing(game_id: uuid.UUID, version: int) -> NoReturn:
        """A gap in a game's stored events (a row deleted): CorruptGame at the first missing."""
        raise Games._damaged_event(game_id, version, "is missing")

    @staticmethod
    def _damaged_event(game_id: uuid.UUID, version: int, what: str, cause: str = "") -> CorruptGame:
        """CorruptGame at one stored event of a game (``what``: "is missing", "cannot be
        read"), logged with its ``cause``."""
        log.error("game %s: stored event %s %s%s", game_id, version, what, cause and f": {cause}")
        return CorruptGame(
            f"game {game_id} is damaged: its stored event at version {version} {what} "
            "(see its /audit)",
            version=version,
        )

    def is_imported(self, game_id: uuid.UUID) -> bool:
        """The marker is saved with the imported game's events, so the answer never changes."""
        known = self.imported_cache.get(game_id)
        if known is None:
            known = bool(self.recorder.select_events(imported_marker_id(game_id), limit=1))
            if len(self.imported_cache) >= self.SECRETS_CACHE:
                self.imported_cache.clear()
            self.imported_cache[game_id] = known
        return known

    def is_stored(self, game_id: uuid.UUID) -> bool:
        """Whether anything is stored under ``game_id`` (one row read)."""
        return bool(self.recorder.select_events(game_id, limit=1))

    def refuse_imported(self, game_id: uuid.UUID) -> None:
        if self.is_imported(game_id):
            raise ReadOnly("this game was imported: it can be read, not played")

    def refuse_unwitnessed(self, game_id: uuid.UUID) -> None:
        """A receipt says this server recorded a version: it saw nothing of an imported game."""
        if self.is_imported(game_id):
            raise NotWitnessed(
                "this game was imported: this server did not see it played, so it signs no "
                "receipt of it (its export's hash chain and seed are checked by its /audit)"
            )

    def refuse_rated_in_progress(self, game_id: uuid.UUID) -> None:
        """The expert's advice and analysis are closed to everyone while a rated game is
        unfinished (contract 1.3): its rating must measure the players, not who asked. An
        imported copy of such a game never finishes, so it stays closed. NotFound first."""
        if not self.at_creation(game_id).rated:
            return
        with self.owned(game_id) as latest:
            finished = latest.status == "finished"
        if not finished:
            raise RatedGameInProgress(
                "this rated game is being played: the expert's advice and analysis open to "
                "everyone once it is finished"
            )

    def _vault(self, game_id: uuid.UUID) -> Vault:
        try:
            vault: Aggregate = self.repository.get(vault_id(game_id))
        except (StoreUnavailable, AggregateNotFoundError):
            raise
        except Exception as exc:
            log.error("game %s: its vault cannot be read: %s", game_id, describe(exc))
            raise CorruptGame(
                f"game {game_id} is damaged: its stored secrets cannot be read", version=None
            ) from None
        assert isinstance(vault, Vault)
        damage = _vault_damage(vault)
        if damage is not None:
            log.error("game %s: its stored secrets are damaged: %s", game_id, damage)
            raise CorruptGame(
                f"game {game_id} is damaged: its stored secrets cannot be used", version=None
            )
        if len(self.secrets_cache) >= self.SECRETS_CACHE:
            self.secrets_cache.clear()
        self.secrets_cache[game_id] = Secrets(
            vault.server_seed, dict(vault.token_hashes), vault.is_sealed
        )
        return vault

    def vault(self, game_id: uuid.UUID) -> Vault:
        """The game's secrets, read afresh (a private copy: change it, then save it);
        NotFound for an id that is no game's."""
        try:
            return self._vault(game_id)
        except AggregateNotFoundError:
            raise NotFound(f"no game {game_id}") from None

    def _secrets(self, game_id: uuid.UUID) -> Secrets:
        known = self.secrets_cache.get(game_id)
        if known is None or not known.sealed:
            self._vault(game_id)
            known = self.secrets_cache[game_id]
        return known

    def dicer(self, game: Game) -> Draw | None:
        """The draw function of ``game``'s server dice, or None for manual dice."""
        seed = self._seed(game)
        return _dicer(seed, game.client_seed or "") if seed else None

    def _seed(self, game: Game) -> str | None:
        """``game``'s server seed, once it matches the game's published commitment: a stored
        seed that does not (damage) would draw dice nobody can verify, and could never be
        revealed; such a game is corrupt_game instead."""
        seed = self._secrets(game.id).server_seed
        if not seed or game.id in self.seeds_checked:
            return seed
        if fairness.commitment(seed) != game.seed_commitment:
            log.error("game %s: its stored seed does not match its commitment", game.id)
            raise CorruptGame(
                f"game {game.id} is damaged: its stored seed does not match its commitment",
                version=None,
            )
        if len(self.seeds_checked) >= self.SECRETS_CACHE:
            self.seeds_checked.clear()
        self.seeds_checked.add(game.id)
        return seed

    @staticmethod
    def dicer_for(server_seed: str, client_seed: str) -> Draw:
        return _dicer(server_seed, client_seed)

    def finish_up(self, game: Game) -> None:
        """Once a game is finished, its seed is revealed (in the same save)."""
        if game.status != "finished" or game.server_seed is not None:
            return
        seed = self._seed(game)
        if seed:
            game.reveal_seed(seed)

    # ----------------------------------------------------------------------------- commands
    def commit_seed(self) -> Commitment:
        """Draw a seed for a future game and publish only its commitment (contract 1.1)."""
        assert self.commitments is not None
        now = datetime.now(UTC)
        seed = secrets.token_hex(32)
        expires = now + COMMITMENT_TTL
        self.commitments.purge(now.timestamp())
        self.commitments.put(fairness.commitment(seed), seed, now.timestamp(), expires.timestamp())
        return Commitment(fairness.commitment(seed), expires)

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
            draw = _dicer(server_seed, client_seed)
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
        self.save(*also, game, vault)  # what made the game first, in the log too
        self.live.put(game)  # the first action needs no read
        return self.views.of(game), issued

    @staticmethod
    def judge(setup: NewGame) -> None:
        """Refuse (InvalidRequest) a setup that could not start a game, recording nothing: for
        what makes a game later (a challenge, a seek, a seed commitment's game)."""
        check_bots(setup.players or ())
        check_rated_clock(setup)
        Game.start(uuid.uuid4(), setup, server_seed="0" * 64, draw=_dicer("0" * 64, "check"))

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
        assert self.commitments is not None
        taken = self.commitments.take(seed_commitment, datetime.now(UTC).timestamp())
        if taken is None:
            raise InvalidRequest(
                "unknown, expired or already used seed_commitment: ask POST /v1/seed-commitments"
            )
        seed, created = taken
        return seed, format_at(datetime.fromtimestamp(created, UTC))

    def is_personal(self, token: str | None) -> bool:
        """Whether ``token`` is a personal token (an account's), not a seat's."""
        return self.principals is not None and token is not None and token.startswith("cst_")

    def principal_handle(self, token: str | None) -> str:
        assert self.principals is not None and token is not None
        return self.principals(token)

    def seat_of_principal(self, game_id: uuid.UUID, token: str) -> int:
        """The seat the personal token's account holds in the game (401 if none, as for a seat
        token of another game; 401 for an unknown or revoked token; 403 insufficient_scope
        without ``play``)."""
        handle = self.principal_handle(token)
        with self.owned(game_id) as game:
            seat = game.seat_of_account(handle)
        if seat is None:  # as a seat token of another game is: the token holds no seat here
            raise Unauthorized(f"the account {handle} holds no seat of this game")
        return seat

    def account_closed(self, handle: str | None) -> bool:
        """Whether the account ``handle`` (None: an anonymous seat) was closed."""
        if handle is None:
            return False
        try:
            found: Any = self.repository.get(account_id(handle))
        except AggregateNotFoundError:
            return False
        return isinstance(found, Account) and bool(found.closed)

    def authenticate(self, game_id: uuid.UUID, token: str | None) -> int:
        """The seat that ``token`` holds in the game (imported games refuse first, then an
        unknown game is NotFound, then a missing or unknown token Unauthorized). A personal
        token holds the seat of its account."""
        self.refuse_imported(game_id)
        if self.is_personal(token):
            assert token is not None
            return self.seat_of_principal(game_id, token)
        try:
            secrets_ = self._secrets(game_id)
        except AggregateNotFoundError:
            raise NotFound(f"no game {game_id}") from None
        if not token:
            raise Unauthorized("send the seat's token: Authorization: Bearer <token>")
        # A lobby's seats may be given back, so its vault is read afresh (Secrets.sealed).
        seat = match_token(secrets_.token_hashes, token)
        if seat is None and secrets_.sealed:  # joined through another worker: ask the vault
            seat = self._vault(game_id).seat_for(token)
        if seat is None:
            raise Unauthorized("unknown token for this game")
        return seat

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
        scoped = fingerprint = ""
        if idempotency_key is not None:
            vault = self._vault(game_id)
            scoped = f"{seat}:{idempotency_key}"
            canonical = json.dumps(to_dict(command), sort_keys=True, separators=(",", ":"))
            fingerprint = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
            record = vault.recall(scoped, now)
            if record is not None:
                if record["fingerprint"] != fingerprint:
                    raise IdempotencyKeyReused(
                        "this Idempotency-Key was used for a different action"
                    )
                return self._replay(game_id, record["first"], record["last"])
        # First on the game as this worker last saw it (no query); the store's optimistic
        # check refuses the insert if another worker recorded something meanwhile. A refusal
        # or a conflict is judged again on the latest version, read from the store.
        for fresh in (False, True):
            with self.owned(game_id, fresh=fresh) as game:
                # One instant, under the game's lock and after its read: the deadline is judged
                # at it and the events are stamped with it, however long the request waited.
                at = datetime.now(UTC)
                try:
                    if game.timed_out(at):
                        if not fresh:
                            continue  # perhaps: judged on the latest version
                        self._record_timeout(game, at)
                    new_events = self._apply(game, seat, command, if_match, at)
                except (DomainError, VersionConflict):
                    if not fresh:
                        continue
                    # Refused on the latest version: unless the same key was recorded meanwhile
                    # (a concurrent repeat of this very request), which answers as it did.
                    if idempotency_key is not None:
                        replay = self._recalled(game_id, scoped, fingerprint, now)
                        if replay is not None:
                            return replay
                    raise
                if vault is not None:
                    vault.remember(
                        scoped, fingerprint, new_events[0]["version"], game.version, now.isoformat()
                    )
                try:
                    self._save_owned(
                        game, *([vault] if vault is not None else []), served=new_events
                    )
                except IntegrityError:
                    pass  # judged below, once the changed object is out of the cache
                else:
                    return ActionResult(self.views.of(game), new_events)
            # Lost the race, or our own insert committed but its answer was lost and the retry
            # found it there. A repeat of the same key answers as the first did.
            if idempotency_key is not None:
                replay = self._recalled(game_id, scoped, fingerprint, now)
                if replay is not None:
                    return replay
            if self._stored_as(game_id, new_events):
                return ActionResult(self.state(game_id, new_events[-1]["version"]), new_events)
            if vault is not None:  # its pending "key used" was not saved: read it afresh
                vault = self._vault(game_id)
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
        game.act(seat, command, draw=self.dicer(game), at=at)
        self.finish_up(game)
        return self.pending_records(game)

    @staticmethod
    def pending_records(game: Game) -> list[dict[str, Any]]:
        """The game's pending events as they will be served."""
        return event_records(game.pending_events)

    def save_changes(self, game: Game, *others: Aggregate) -> list[dict[str, Any]]:
        """Save what a command changed in an owned game (raises IntegrityError if the game
        moved on meanwhile): its new events, as served."""
        records = self.pending_records(game)
        self._save_owned(game, *others, served=records)
        return records

    def _record_timeout(self, game: Game, now: datetime) -> None:
        """An action came after its turn's deadline: record the timeout, refuse the action."""
        deadline = game.deadline
        game.time_out(now)
        self.finish_up(game)
        with suppress(IntegrityError):  # the timekeeper recorded it first: late all the same
            self.save_changes(game)
        raise TimedOut(
            f"the turn timed out at {format_at(deadline) if deadline else 'its deadline'}; "
            "nothing was recorded but the timeout"
        )

    def _recalled(
        self, game_id: uuid.UUID, scoped: str, fingerprint: str, now: datetime
    ) -> ActionResult | None:
        """The first answer to this key, if it is recorded now (read afresh)."""
        record = self._vault(game_id).recall(scoped, now)
        if record is None:
            return None
        if record["fingerprint"] != fingerprint:
            raise IdempotencyKeyReused("this Idempotency-Key was used for a different action")
        return self._replay(game_id, record["first"], record["last"])

    def _stored_as(self, game_id: uuid.UUID, records: list[dict[str, Any]]) -> bool:
        """Whether exactly these events (by their hashes) are the ones stored."""
        if not records:
            return False
        first = records[0]["version"]
        stored = self.history(game_id, after=first - 1, limit=len(records))
        return [r["hash"] for r in stored] == [r["hash"] for r in records]

    def _replay(self, game_id: uuid.UUID, first: int, last: int) -> ActionResult:
        events = self.history(game_id, after=first - 1, limit=last - first + 1)
        return ActionResult(self.state(game_id, last), events, replayed=True)


__all__ = ["ActionResult", "Games", "ImportedGame", "Seat", "parse_game_id"]
