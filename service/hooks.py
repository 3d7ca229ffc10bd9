"""Every private part of a library that the service overrides, replaces or reaches into, with why.

Pure data, importing nothing (the bottom of the service). tests/test_library_hooks.py checks each
hook against the installed library: the attribute exists, each callable still has the signature
recorded here, the functions whose behaviour the service relies on still have the source recorded
here (a SHA-256 of ``inspect.getsource``), and that source still says what ``contains`` quotes.
An upgrade that moves or edits any of them fails that test, naming the hook, the version
installed, where the service uses it and what to re-check. When it does: re-read the library's
code, check the use still holds (and run tests/test_fast_paths.py for the fast paths), then record
the new values the failure prints. pyproject.toml gives every library named here an upper bound.

A hook's ``path`` is the library's attribute, dotted from its module; ``instance`` marks one
that only instances have (set in ``__init__``: a check quotes the assignment). ``used_in``
names ``module:qualname`` places of the service. ``proven_by`` names the tests showing that a
fast path stores exactly what the library's own path stores.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    """What must still hold of one library object (``target``, dotted from its module)."""

    target: str
    signature: str | None = None  # str(inspect.signature(target)) as recorded
    sha256: str | None = None  # of inspect.getsource(target), as recorded
    contains: tuple[str, ...] = ()  # text its source must still contain


@dataclass(frozen=True)
class Hook:
    path: str
    distribution: str  # the package that ships it (as pyproject.toml names it)
    used_in: tuple[str, ...]
    why: str
    recheck: str
    checks: tuple[Check, ...]
    instance: bool = False
    proven_by: tuple[str, ...] = ()


GAMES = "service.application.games"
FAST = "tests/test_fast_paths.py"

HOOKS: tuple[Hook, ...] = (
    # --------------------------------------------------------- eventsourcing: the application
    Hook(
        path="eventsourcing.application.Application._take_snapshots",
        distribution="eventsourcing",
        used_in=(f"{GAMES}:Games._take_snapshots",),
        why=(
            "Overridden to snapshot the object just saved instead of reading each due aggregate "
            "back from the store at the due version. No gain is measured for it; it differs "
            "from the library's (see tests/test_fast_paths.py): one snapshot per aggregate per "
            "save, at its last version, not one at each multiple of the interval."
        ),
        recheck="that save still calls it with the ProcessingEvent's events and aggregates",
        checks=(
            Check(
                "eventsourcing.application.Application._take_snapshots",
                signature="(self, processing_event: 'ProcessingEvent[TAggregateID]') -> 'None'",
                sha256="ae98c5b97ed9a8e3c50f324a01081e277572d192fac93ef738fdb3c053421562",
            ),
            Check(
                "eventsourcing.application.Application.save",
                sha256="4e9747d14b8fd046df1b9b8ce688be89030978de0c04a632e6a7ec783dc7c5cc",
                contains=("self._take_snapshots(processing_event)",),
            ),
            Check(
                "eventsourcing.application.ProcessingEvent.__init__",
                sha256="a0682ee01c41601c40a81c13cc45b87d4c843e3a93f5f93a1d0ab824ac5d2d83",
                contains=("self.events:", "self.aggregates:"),
            ),
        ),
        proven_by=(
            f"{FAST}::test_snapshots_of_played_games_are_the_librarys",
            f"{FAST}::test_snapshots_of_an_imported_game_are_the_librarys",
        ),
    ),
    Hook(
        path="eventsourcing.application.Application.save",
        distribution="eventsourcing",
        used_in=(
            f"{GAMES}:Games._write",
            f"{GAMES}:Games._save_owned",
            "service.persistence.sqlite:_no_tracking",
            "service.persistence.postgres:_no_tracking",
        ),
        why=(
            "Replaced on the command path by _write: the events and the snapshots they make due "
            "in one insert, without the library's general machinery (write path ~200 -> ~150 "
            "us per action, docs/performance.md, levers). It leaves out what save does besides: "
            "the cache (the owned object is there already) and notify. The fast insert paths "
            "take a call with only tracking=None, as save passes it."
        ),
        recheck="what save and _record do besides recording the events and taking snapshots",
        checks=(
            Check(
                "eventsourcing.application.Application.save",
                signature=(
                    "(self"
                    ", *objs: 'MutableOrImmutableAggregate[TAggregateID]"
                    " | DomainEventProtocol[TAggregateID] | None'"
                    ", **kwargs: 'Any') -> 'list[Recording[TAggregateID]]'"
                ),
                sha256="4e9747d14b8fd046df1b9b8ce688be89030978de0c04a632e6a7ec783dc7c5cc",
            ),
            Check(
                "eventsourcing.application.Application._record",
                sha256="104c6186b29d50595198443b697de23b0dab4344c50d4dca54688b32fce52340",
                contains=("tracking=processing_event.tracking",),
            ),
        ),
        proven_by=(f"{FAST}::test_snapshots_of_played_games_are_the_librarys",),
    ),
    Hook(
        path="eventsourcing.persistence.Mapper.to_stored_event",
        distribution="eventsourcing",
        used_in=(f"{GAMES}:GameEventMapper.to_stored_event",),
        why=(
            "Overridden to encode a game's events with orjson: the same bytes as the library's "
            "JSON transcoder, 0.981 (docs/performance.md, levers). It reads the mapper's "
            "transcoder, compressor and cipher and the transcoder's types."
        ),
        recheck=(
            "that the stored form (state minus originator id and version, JSON as the transcoder "
            "writes it) is unchanged"
        ),
        checks=(
            Check(
                "eventsourcing.persistence.Mapper.to_stored_event",
                signature=(
                    "(self, domain_event: 'DomainEventProtocol[TAggregateID]') -> 'StoredEvent'"
                ),
                sha256="ff9e72e538d73a3a2e6805246b5bec6f544c89f75128f5b587025d2c5baaed0e",
            ),
            Check(
                "eventsourcing.persistence.JSONTranscoder.__init__",
                sha256="fd17b3c098d3687c5124f5450fda91f25c5d5ae2c5b5ea36b66b1215865815f3",
            ),
            Check(
                "eventsourcing.persistence.JSONTranscoder._encode_obj",
                sha256="e7a92650c9f989f4fceb129157efccec5ea1b3046bfe7b3a2dd614799d206a3b",
                contains=('"_type_"', '"_data_"'),
            ),
        ),
        proven_by=(
            "tests/test_properties.py::test_game_events_are_stored_byte_for_byte_as_the_librarys_encoder_stores_them",
        ),
    ),
    Hook(
        path="eventsourcing.persistence.JSONTranscoder.types",
        distribution="eventsourcing",
        instance=True,
        used_in=(f"{GAMES}:GameEventMapper.to_stored_event",),
        why=(
            "The transcodings (datetime, ...) the orjson encoder applies as the library's encoder "
            "does."
        ),
        recheck="that it still maps each type to its Transcoding (name, encode)",
        checks=(
            Check(
                "eventsourcing.persistence.JSONTranscoder.__init__",
                contains=("self.types: dict[type, Transcoding] = {}",),
            ),
        ),
    ),
    Hook(
        path="eventsourcing.application.Repository.cache",
        distribution="eventsourcing",
        instance=True,
        used_in=(f"{GAMES}:Games._evict", f"{GAMES}:Games._latest", f"{GAMES}:Games.create"),
        why=(
            "Each worker owns its games' latest versions in the repository's cache, changed in "
            "place under a per-game lock: no deep copy, no fast-forward query (1.09 -> 0.81 ms "
            "per action, docs/performance.md, levers)."
        ),
        recheck=(
            "that the cache is still get(key, evict=) and put(key, value), read by Repository.get"
        ),
        checks=(
            Check(
                "eventsourcing.application.Repository.__init__",
                sha256="fecbc95459c1dc5eb5a9a42c4b2887c2bf9256097bb1a5f21b99f455a5353dd2",
                contains=("self.cache",),
            ),
            Check(
                "eventsourcing.application.Cache.get",
                signature="(self, key: 'S', *, evict: 'bool' = False) -> 'T'",
            ),
            Check(
                "eventsourcing.application.Cache.put",
                signature="(self, key: 'S', value: 'T | None') -> 'None'",
            ),
            Check(
                "eventsourcing.application.LRUCache.get",
                signature="(self, key: 'S', *, evict: 'bool' = False) -> 'T'",
            ),
            Check(
                "eventsourcing.application.LRUCache.put",
                signature="(self, key: 'S', value: 'T | None') -> 'Any | None'",
            ),
        ),
    ),
    Hook(
        path="eventsourcing.application.Repository.get",
        distribution="eventsourcing",
        used_in=(f"{GAMES}:Games._stored",),
        why=(
            "deepcopy_from_cache=False: the cached object itself, brought up to date in place, "
            "which the owner of the game's lock then changes (Repository.cache)."
        ),
        recheck=(
            "that without the deep copy the cached object itself is returned and fast-forwarded "
            "in place"
        ),
        checks=(
            Check(
                "eventsourcing.application.Repository.get",
                signature=(
                    "(self, aggregate_id: 'TAggregateID', *"
                    ", version: 'int | None' = None"
                    ", projector_func: 'ProjectorFunction[TMutableOrImmutableAggregate"
                    ", TDomainEvent]' = <function project_aggregate>"
                    ", fastforward_skipping: 'bool' = False"
                    ", deepcopy_from_cache: 'bool' = True) -> 'TMutableOrImmutableAggregate'"
                ),
                sha256="0ffc6e82b6afa0a04c77fcdefe8163216b201c014b22b85c9552ab3c285de1bb",
            ),
        ),
    ),
)
