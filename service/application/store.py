"""The one place where the service's aggregates are saved and loaded: the eventsourcing
Application, in SQLite or PostgreSQL, through the library's public doors.

The command path writes an action's events and the snapshots they make due in one insert
(``_write``); the service takes its snapshots itself from the objects it saves; each worker
holds its games' latest versions (``LiveGames``) under a lock per game. Every context saves and
loads through one ``Store`` per process, built after gunicorn forks.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, ClassVar, NoReturn, cast

import orjson
from eventsourcing.application import (
    AggregateNotFoundError,
    Application,
    Repository,
    project_aggregate,
)
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import (
    JSONTranscoder,
    Mapper,
    PersistenceError,
    StoredEvent,
    Transcoder,
    Transcoding,
)
from eventsourcing.utils import get_topic, strtobool

from domain.game import Game, canonical_bytes, event_record, event_records, own_events_encoder
from domain.tournament import Tournament
from service.application.aggregates import Vault, imported_marker_id
from service.application.errors import NotFound, describe
from service.errors import ApplicationError
from service.persistence.accounts import Credentials
from service.persistence.archive import ArchiveDamaged
from service.persistence.commitments import SeedCommitments
from service.persistence.compact import (
    COMPACT,
    DEFLATED,
    decode_event,
    deflate,
    encode_event,
    inflate,
    micros_and_field,
)
from service.persistence.errors import CorruptGame, StoreUnavailable
from service.persistence.keys import StoredKeys
from service.persistence.postgres import (
    GuardedPostgresAggregateRecorder,
    GuardedPostgresApplicationRecorder,
)
from service.persistence.sqlite import (
    GuardedSQLiteAggregateRecorder,
    GuardedSQLiteApplicationRecorder,
    SQLiteStore,
)
from service.persistence.views import TRACKING

log = logging.getLogger("cantstop")

GAME_EVENT_CLASSES: dict[str, type[Game.Event]] = {
    cls.__name__: cls
    for cls in vars(Game).values()
    if isinstance(cls, type) and issubclass(cls, Game.Event) and cls is not Game.Event
}
GAME_TOPICS = frozenset(get_topic(cls) for cls in GAME_EVENT_CLASSES.values())
GAME_FINISHED = Game.GameFinished
# The last event of a game that records nothing more: its end, or its server seed revealed in
# the same save (service/application/games/secrets.py).
FINAL_TOPICS = frozenset(get_topic(cls) for cls in (Game.GameFinished, Game.SeedRevealed))


class ServiceTranscoder(JSONTranscoder):
    """The library's JSON transcoder, which also keeps by type the transcodings registered
    through its public ``register``: GameEventMapper's orjson encoder applies them as the
    library's encoder does. It writes a game's events in the compact form and large states
    (snapshots) deflated (service/persistence/compact.py), and reads every form: a row's first
    byte tells which (JSON begins with ``{``)."""

    FAST = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS

    def __init__(self) -> None:
        super().__init__()
        self.by_type: dict[type, Transcoding] = {}

    def register(self, transcoding: Transcoding) -> None:
        super().register(transcoding)
        self.by_type[transcoding.type] = transcoding

    def encode(self, obj: Any) -> bytes:
        """The library's JSON, deflated when large (a snapshot)."""
        return deflate(super().encode(obj))

    def decode(self, data: bytes) -> Any:
        """A stored state in any form: compact, deflated JSON, or JSON."""
        first = data[0] if data else None
        if first == COMPACT:
            return decode_event(data)
        if first == DEFLATED:
            return super().decode(inflate(data))
        return super().decode(data)

    def encode_json(self, obj: Any) -> bytes:
        """``obj`` in the library's JSON form, never deflated (what a store written before the
        compact form holds: tests and bench/bytes.py read rows as it)."""
        return super().encode(obj)

    def encode_game_event(self, state: dict[str, Any]) -> bytes:
        """A game event's ``state`` in the compact form, else as ``encode_json_values``."""
        return encode_event(state) or self.encode_json_values(state)

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


def canonical_json(value: Any) -> bytes:
    """The contract's canonical JSON of a game's new event, by orjson: the bytes the standard
    encoder writes (``canonical_bytes``) for every value an event holds (tests/test_properties.py
    `test_orjson_writes_the_contracts_canonical_json_of_every_value_an_event_holds`), in about
    a fifth of the time (~5 µs less an event: docs/performance.md, levers). What orjson refuses
    (an integer beyond 64 bits, a key that is not a string) goes the standard way. orjson writes
    a float otherwise (``1e16``, not ``1e+16``): no game event holds one, and every audit of a
    game, which hashes by ``canonical_bytes``, would find one."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError
        return canonical_bytes(value)


class GameEventMapper(Mapper[uuid.UUID]):
    """The library's mapper, with a faster and smaller encoder for the game's own events.

    A game event's payload is JSON values only (the hash chain encodes it as canonical JSON
    before the event exists, and refuses anything else), besides its time and its hashes: it
    is stored in the compact form (service/persistence/compact.py: ~110 bytes instead of
    ~300), which reads back as the very fields the library's JSON form does (property tests
    compare the two over random games). One that does not fit it takes orjson, which writes
    the same bytes as the library's JSON encoder, in about a third of the time. Anything
    orjson refuses, every other event, snapshots, another transcoder and a configured
    compressor or cipher take the library's way."""

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
            encoded = transcoder.encode_game_event(state)
        except TypeError:  # orjson.JSONEncodeError: the library's encoder decides
            return super().to_stored_event(domain_event)
        return StoredEvent(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=get_topic(type(domain_event)),
            state=encoded,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        """A game event in the compact form read straight into its class, as the library's
        ``to_domain_event`` reads it (the same fields, in the same order: tests/test_compact_
        store.py); every other row, and any row the compact form does not decode, the
        library's way (which words the error). Every log read decodes here: a view's rebuild
        reads millions of events (docs/performance.md, levers)."""
        cls = self._compact_class(stored_event)
        if cls is None:
            return super().to_domain_event(stored_event)
        try:
            event_state = decode_event(stored_event.state)
        except Exception:  # the library's way says what is wrong, in its own error
            return super().to_domain_event(stored_event)
        originator_id: Any = stored_event.originator_id
        if type(originator_id) is not uuid.UUID:
            originator_id = uuid.UUID(originator_id)
        event_state["originator_id"] = originator_id
        event_state["originator_version"] = stored_event.originator_version
        event: Any = object.__new__(cls)
        object.__setattr__(event, "__dict__", event_state)
        return event

    def micros_and_field(self, stored_event: StoredEvent, name: str) -> tuple[int, Any] | None:
        """A game event's time (microseconds since the epoch) and one other field, read from
        the compact form without the event made whole (``compact.micros_and_field``: a view
        that needs only those, of millions of events); None for any row ``to_domain_event``
        does not read the compact way."""
        state = stored_event.state  # (``_compact_class``'s test, without its call and class)
        if not state or state[0] != COMPACT or stored_event.topic not in self._compact_topics:
            return None
        return micros_and_field(state, name)

    def _compact_class(self, stored_event: StoredEvent) -> type | None:
        """The class of a game event stored in the compact form this mapper reads its own way
        (``_compact_topics``); None for any other row."""
        state = stored_event.state
        if not state or state[0] != COMPACT or stored_event.topic not in self._compact_topics:
            return None
        return self._compact_classes[stored_event.topic]

    @functools.cached_property
    def _compact_topics(self) -> frozenset[str]:
        """The topics of the rows this mapper reads the compact way: ``_compact_classes``'
        own, none with a cipher or compressor (the row's bytes are theirs then)."""
        return frozenset() if self.compressor or self.cipher else frozenset(self._compact_classes)

    @functools.cached_property
    def _compact_classes(self) -> dict[str, type]:
        """The game's events the compact form stores, by topic: those at their first class
        version (a later one would be upcast by the library's way)."""
        if not isinstance(self.transcoder, ServiceTranscoder):
            return {}
        return {
            get_topic(cls): cls
            for cls in GAME_EVENT_CLASSES.values()
            if getattr(cls, "class_version", 1) == 1
        }


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


class Store(Application[uuid.UUID]):
    """The service's event store: saves, snapshots, and the games each worker holds."""

    name = "cantstop"
    # A game's past version is read from the nearest snapshot before it, plus fewer than twenty
    # events: as quick at version 5,000 as at version 10. Every action writes, few reads look
    # back: every 20 events rather than 10 makes such a read replay a few more events and saves
    # a snapshot's write on half the actions (docs/performance.md, levers). The service takes
    # them itself (``_take_snapshots_of``), from the objects it saves: the library's
    # ``snapshotting_intervals`` stay empty, or its ``save`` would read each back from the store.
    is_snapshotting_enabled = True
    # A tournament is read at every registration, result and scheduler step: from its latest
    # snapshot, it replays fewer than 20 events however many players and tables it has.
    SNAPSHOT_INTERVALS: ClassVar[dict[type[Aggregate], int]] = {
        Game: 20,
        Vault: 50,
        Tournament: 20,
    }

    # A finished game's past versions are read far less than a live game's, and a finished
    # game of ~130 events replays from its first in ~3 ms of CPU: on finishing, its snapshots
    # are deleted but those at multiples of KEPT_WHEN_FINISHED, so a very long game's past
    # still replays fewer than that many events; none is taken after (``_multiples_passed``).
    # ~6 KB a game (docs/scaling.md, "Bytes per game"; tests/test_finished_snapshots.py).
    KEPT_WHEN_FINISHED = 200

    LOCK_STRIPES = 256
    LIVE_GAMES = 500
    IMPORTED_CACHE = 10_000

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
        own_events_encoder(canonical_json)  # the games this process plays: their hash chains
        # Per worker: whether a game was imported (read-only): the answer never changes.
        self.imported_cache: dict[uuid.UUID, bool] = {}
        # The latest version of each game this worker holds, owned under its game's lock:
        # commands change it in place, readers get views or copies (LiveGames). A game not held
        # is read through a repository of its own, without the library's cache (which would
        # deep-copy it on every read; the other aggregates keep that cache).
        self._locks = [threading.RLock() for _ in range(self.LOCK_STRIPES)]
        self.live = LiveGames(self.LIVE_GAMES)
        self._game_reads: Repository[uuid.UUID] = Repository(
            event_store=self.events, snapshot_store=self.snapshots
        )
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

    on_recorded: Callable[[uuid.UUID, list[dict[str, Any]]], None] | None = None
    """Called after every successful save with each game's new events as served (service.live)."""

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        recordings = super().save(*objs, **kwargs)
        events = [recording.domain_event for recording in recordings]
        self._take_snapshots_of({o.id: o for o in objs if isinstance(o, Aggregate)}, events)
        self._thin_out_finished_in(events)
        if self.on_recorded is not None:
            new: dict[uuid.UUID, list[dict[str, Any]]] = {}
            for event in events:
                if isinstance(event, Game.Event):
                    new.setdefault(event.originator_id, []).append(event_record(event))
            self._tell(new)
        return recordings

    def _take_snapshots_of(self, aggregates: Mapping[uuid.UUID, Any], events: list[Any]) -> None:
        """The snapshots a save makes due (SNAPSHOT_INTERVALS), taken from the objects just
        saved, or read back from the store at their exact versions (``_snapshots_due``)."""
        exact, now = self._snapshots_due(aggregates, events)
        self._take_exact(exact)
        if now:
            assert self.snapshots is not None
            self.snapshots.put(self._snapshots_of(aggregates, now))

    def _snapshots_due(
        self, aggregates: Mapping[uuid.UUID, Any], events: list[Any]
    ) -> tuple[dict[uuid.UUID, list[int]], list[uuid.UUID]]:
        """The snapshots these saved events make due: those to read back from the store at
        their exact versions, by aggregate, and the aggregates to snapshot as they are now.

        As they are now, one write with the events, when the save passed one multiple of the
        interval (19 actions in 20 pass none). Read back, as the library's ``take_snapshot``
        does: each of several multiples in one save (an import: one save of a whole game),
        and a multiple of KEPT_WHEN_FINISHED passed without ending on it (a winning stop and
        the game's end): a snapshot one version later would be deleted when the game
        finishes (tests/test_finished_snapshots.py)."""
        exact: dict[uuid.UUID, list[int]] = {}
        now: list[uuid.UUID] = []
        for aggregate_id, versions in self._multiples_passed(aggregates, events).items():
            last = versions[-1]
            if len(versions) > 1 or (
                last % self.KEPT_WHEN_FINISHED == 0 and last != aggregates[aggregate_id].version
            ):
                exact[aggregate_id] = versions
            else:
                now.append(aggregate_id)
        return exact, now

    def _take_exact(self, exact: Mapping[uuid.UUID, list[int]]) -> None:
        """Read back and store these snapshots, after their events are stored. A failure is
        logged, not raised: the events are saved, and a read without a snapshot replays them."""
        for aggregate_id, versions in exact.items():
            for version in versions:
                try:
                    self.take_snapshot(aggregate_id, version=version)
                except (ApplicationError, PersistenceError) as exc:
                    log.warning("%s: no snapshot at version %d: %s", aggregate_id, version, exc)

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
                if (
                    type(aggregate) is Game
                    and aggregate.status == "finished"
                    and event.originator_version % self.KEPT_WHEN_FINISHED
                ):
                    continue  # its past is read from its events (KEPT_WHEN_FINISHED)
                passed.setdefault(event.originator_id, []).append(event.originator_version)
        return passed

    def thin_out_finished(self, batch: int = 1000) -> int:
        """Thin out the snapshots of every finished game (``_thin_out``), as a store written
        before finished games were thinned out holds them all (``cantstop snapshots thin``):
        the games it found finished. Safe while the service runs, and to run again."""
        topic = get_topic(GAME_FINISHED)
        found, start = 0, None
        while True:
            rows = self.recorder.select_notifications(
                start, batch, topics=[topic], inclusive_of_start=False
            )
            for row in rows:
                game_id = row.originator_id
                self._thin_out(game_id if isinstance(game_id, uuid.UUID) else uuid.UUID(game_id))
            found += len(rows)
            if len(rows) < batch:
                return found
            start = rows[-1].id

    def archive(self, game_id: uuid.UUID, ended_before: datetime | None = None) -> str:
        """Keep a finished game's events as one archived value instead of a row each
        (service/persistence/archive.py: ~7 KB a game instead of ~30–45 KB), once nothing more
        will be recorded in it (its last event ends it: its end, or its seed revealed with
        it) and every view has read it. Every read of the game answers as before. What
        happened: ``archived``, or why not (``not finished``, ``too recent``: it ended after
        ``ended_before``; the recorder's: not read by every view yet, the log's newest row,
        another archiver at work)."""
        recorder: Any = self.recorder  # the service's own, on either store
        last = recorder.last_row(game_id)  # an archived game's archive is not read
        if last is None:
            return "no rows"  # unknown, or archived already
        if last.topic not in FINAL_TOPICS:
            return "not finished"
        if ended_before is not None:
            try:
                ended = cast(Game.Event, self.mapper.to_domain_event(last)).timestamp
            except Exception:  # a damaged row: left as it is, for the game's reads to report
                return "damaged"
            if ended > ended_before:
                return "too recent"
        return cast(str, recorder.archive(game_id, last.originator_version, TRACKING))

    def restore(self, game_id: uuid.UUID) -> str:
        """An archived game's rows put back where they were in the log, its archive dropped
        (what a release before archives reads: ``cantstop archive --restore``), once every view
        has read past it. ``restored``, or why not (``not archived``, ``not read``, ``busy``)."""
        recorder: Any = self.recorder
        return cast(str, recorder.restore(game_id, TRACKING))

    def archived(self, limit: int) -> list[uuid.UUID]:
        """Some archived games (up to ``limit``)."""
        recorder: Any = self.recorder
        return cast(list[uuid.UUID], recorder.archived_ids(limit))

    def _thin_out_finished_in(self, events: list[Any]) -> None:
        """Thin out the snapshots of the games that these newly stored events finish."""
        for event in events:
            if type(event) is GAME_FINISHED:
                self._thin_out(event.originator_id)

    def _thin_out(self, game_id: uuid.UUID) -> None:
        """Delete the snapshots of a game that finished (its events are stored) but those at
        multiples of KEPT_WHEN_FINISHED. A failure is logged, not raised: the snapshots left
        are still right."""
        recorder = self.snapshots.recorder if self.snapshots is not None else None
        if not isinstance(
            recorder, GuardedSQLiteAggregateRecorder | GuardedPostgresAggregateRecorder
        ):
            return
        try:
            recorder.thin_out(game_id, self.KEPT_WHEN_FINISHED)
        except (ApplicationError, PersistenceError) as exc:
            log.warning("game %s: its snapshots were not thinned out: %s", game_id, exc)

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
        exact, now = self._snapshots_due(by_id, events)
        if not now:  # 19 actions in 20
            self.recorder.insert_events(stored)
        else:
            assert self.snapshots is not None
            due = self._snapshots_of(by_id, now)
            recorder = self.recorder  # the stores are SQLiteStore and PostgresStore (store.py)
            assert isinstance(
                recorder, GuardedSQLiteApplicationRecorder | GuardedPostgresApplicationRecorder
            )
            stored_snapshots = [self.mapper.to_stored_event(s) for s in due]
            recorder.insert_with_snapshots(stored, self.snapshots.recorder, stored_snapshots)
        self._take_exact(exact)  # rare: once in a game longer than KEPT_WHEN_FINISHED
        self._thin_out_finished_in(events)

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

    def save_owned(
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

    @staticmethod
    def pending_records(game: Game) -> list[dict[str, Any]]:
        """The game's pending events as they will be served."""
        return event_records(game.pending_events)

    def save_changes(self, game: Game, *others: Aggregate) -> list[dict[str, Any]]:
        """Save what a command changed in an owned game (raises IntegrityError if the game
        moved on meanwhile): its new events, as served."""
        records = self.pending_records(game)
        self.save_owned(game, *others, served=records)
        return records

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

    def creations(self, game_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Game]:
        """``at_creation`` for many games at once (their first events in one query): those of
        ``game_ids`` whose first event was read as a game's creation. For any other, ask
        ``at_creation`` (which says why, or rebuilds a damaged one)."""
        found: dict[uuid.UUID, Game] = {}
        for stored in self.recorder.first_events(list(game_ids)):  # type: ignore[attr-defined]
            try:
                game = cast(Any, self.mapper.to_domain_event(stored)).mutate(None)
            except Exception:  # a stored row that cannot be decoded or applied: at_creation's
                continue
            if isinstance(game, Game):
                found[stored.originator_id] = game
        return found

    def past(self, game_id: uuid.UUID, version: int, latest: int) -> Game:
        """The game as it was at ``version`` (``latest``: its version now), read from the
        nearest snapshot before it."""
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

    def _rebuild(self, game_id: uuid.UUID, version: int | None, failure: Exception) -> Game:
        """Replay the stored events one by one, without snapshots: a damaged snapshot only costs
        time (the audit reports it); a damaged event is CorruptGame at its version."""
        game: Any = None
        at = 0
        try:
            rows = self.recorder.select_events(game_id, lte=version)
        except ArchiveDamaged as exc:  # none of its events can be read
            raise self._damaged_event(game_id, 1, "cannot be read", describe(exc)) from None
        try:
            for row in rows:
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
            with self.owned(game_id):  # NotFound for an unknown game; else nothing after ``after``
                pass
        return records

    @staticmethod
    def _served(game_id: uuid.UUID, stored_event: Game.Event) -> dict[str, Any]:
        """A stored event as served; one whose stored form decoded but lacks what an event has
        (its hash, its time: a damaged row) is CorruptGame at its version, not a 500."""
        try:
            return event_record(stored_event)
        except Exception as exc:
            version = stored_event.originator_version
            raise Store._damaged_event(game_id, version, "cannot be read", describe(exc)) from None

    @staticmethod
    def _missing(game_id: uuid.UUID, version: int) -> NoReturn:
        """A gap in a game's stored events (a row deleted): CorruptGame at the first missing."""
        raise Store._damaged_event(game_id, version, "is missing")

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
            if len(self.imported_cache) >= self.IMPORTED_CACHE:
                self.imported_cache.clear()
            self.imported_cache[game_id] = known
        return known

    def imported(self, game_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of ``game_ids`` are imported games: ``is_imported`` for many at once (the games
        not known yet read in one query, and kept as ``is_imported`` keeps them)."""
        unknown = [game_id for game_id in game_ids if game_id not in self.imported_cache]
        if unknown:
            markers = {imported_marker_id(game_id): game_id for game_id in unknown}
            found = self.recorder.stored_among(list(markers))  # type: ignore[attr-defined]
            if len(self.imported_cache) + len(unknown) > self.IMPORTED_CACHE:
                self.imported_cache.clear()
            for marker, game_id in markers.items():
                self.imported_cache[game_id] = marker in found
        return {game_id for game_id in game_ids if self.is_imported(game_id)}

    def is_stored(self, game_id: uuid.UUID) -> bool:
        """Whether anything is stored under ``game_id`` (one row read)."""
        return bool(self.recorder.select_events(game_id, limit=1))
