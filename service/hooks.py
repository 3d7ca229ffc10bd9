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
GU = "service.gunicorn_settings"
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
    # --------------------------------------------------------------------------- gunicorn
    Hook(
        path="gunicorn.util.write_error",
        distribution="gunicorn",
        used_in=(f"{GU}:write_problem",),
        why=(
            "Replaced (in the master, before the workers fork) so that what gunicorn answers "
            "itself (a request it cannot parse) is problem+json with a stable code, not HTML."
        ),
        recheck=(
            "that every worker class still answers its errors through util.write_error(sock, "
            "status, reason, mesg)"
        ),
        checks=(
            Check(
                "gunicorn.util.write_error",
                signature="(sock, status_int, reason, mesg)",
                sha256="bd0143a03c15a2c8b068301eb546e703406dd2e32699cf3aeba8036a263b30b2",
            ),
            Check(
                "gunicorn.workers.base.Worker.handle_error",
                sha256="75426448389bbac95cdc9c308c5be1a1f0277ebc18c36f86d8295b90e77cb343",
                contains=("util.write_error(client, status_int, reason, mesg)",),
            ),
            Check("gunicorn.util.write_nonblock", signature="(sock, data, chunked=False)"),
        ),
    ),
    Hook(
        path="gunicorn.glogging.Logger.atoms",
        distribution="gunicorn",
        used_in=(f"{GU}:ServerLogger.atoms",),
        why=(
            "Overridden so that the access log shows only the API's own query values (a seat "
            "token in a URL is never logged)."
        ),
        recheck="that the access log's %(r)s and %(q)s still come from atoms()",
        checks=(
            Check(
                "gunicorn.glogging.Logger.atoms",
                signature="(self, resp, req, environ, request_time)",
                sha256="01225e5e5f3ce6c28e24b1fc83d0faf4233770829587650d86942691009326e2",
            ),
        ),
    ),
    Hook(
        path="gunicorn.glogging.Logger.exception",
        distribution="gunicorn",
        used_in=(f"{GU}:ServerLogger.exception", f"{GU}:when_ready"),
        why=(
            "Overridden so that a connection closed for sending nothing mid-request (the read "
            "timeout set on the listening sockets fails the read with BlockingIOError) is one "
            "line, not a traceback: gthread logs that socket error through log.exception."
        ),
        recheck=(
            "that gthread still logs a failed read through self.log.exception inside its except"
        ),
        checks=(
            Check("gunicorn.glogging.Logger.exception", signature="(self, msg, *args, **kwargs)"),
            Check(
                "gunicorn.workers.gthread.ThreadWorker.handle",
                sha256="ca85c9be3df75da40ba6cd55181ef75a78b67c461b2a553455a40e676f4cce7f",
                contains=('self.log.exception("Socket error processing request.")',),
            ),
        ),
    ),
    Hook(
        path="gunicorn.workers.gthread.ThreadWorker.handle_exit",
        distribution="gunicorn",
        used_in=(f"{GU}:post_fork",),
        why=(
            "Wrapped per worker (after the fork, before init_signals installs it for SIGTERM) to "
            "end the worker's streams at once instead of holding a restart for graceful_timeout."
        ),
        recheck=(
            "that post_fork still runs before init_signals, which installs self.handle_exit for "
            "SIGTERM"
        ),
        checks=(
            Check(
                "gunicorn.workers.gthread.ThreadWorker.handle_exit",
                signature="(self, sig, frame)",
                sha256="b4e7decd4f9203acd39837777497cac17de32d1237b2fdf2b7336873b13e4f57",
            ),
            Check(
                "gunicorn.workers.base.Worker.init_signals",
                sha256="65442e0602b05f37cbb29b378247ca3140e5a7df8315a01b9c4401f261b2b40d",
                contains=("signal.signal(signal.SIGTERM, self.handle_exit)",),
            ),
            Check(
                "gunicorn.arbiter.Arbiter.spawn_worker",
                sha256="6abc0d90b0b9f80b476a9aa8bbb47a7564f444f017384d1db8fb0ce36b916aea",
                contains=("self.cfg.post_fork(self, worker)", "worker.init_process()"),
            ),
        ),
    ),
    Hook(
        path="gunicorn.workers.base.Worker.wsgi",
        distribution="gunicorn",
        instance=True,
        used_in=(f"{GU}:post_worker_init", f"{GU}:_end_streams"),
        why=(
            "Wrapped in post_worker_init so that a 408 or 413 (a body left unread) makes gunicorn "
            "say Connection: close: it closes such a connection but said keep-alive, and a "
            "client's next request on it was lost."
        ),
        recheck="that gthread still calls self.wsgi per request, after post_worker_init",
        checks=(
            Check(
                "gunicorn.workers.base.Worker.init_process",
                sha256="114caccd7a0e3c21628648ee9487353e49e4e9cd9d9c4b75016d6f86aa18ad5b",
                contains=("self.load_wsgi()", "self.cfg.post_worker_init(self)"),
            ),
            Check(
                "gunicorn.workers.gthread.ThreadWorker.handle_request",
                sha256="6d0de5b919102efcfde7a8dc83e48268298072d65d88f5f26c858b239696a4d3",
                contains=(
                    "self.wsgi(environ, resp.start_response)",
                    "self.cfg.pre_request(self, req)",
                ),
            ),
        ),
    ),
    Hook(
        path="gunicorn.http.message.Request.must_close",
        distribution="gunicorn",
        instance=True,
        used_in=(f"{GU}:pre_request", f"{GU}:post_worker_init"),
        why=(
            "Set on the request answered 408 or 413 so that gunicorn writes Connection: close "
            "(Worker.wsgi)."
        ),
        recheck=(
            "that Response.should_close still asks req.should_close(), which reads must_close, "
            "and sets the header"
        ),
        checks=(
            Check("gunicorn.http.message.Message.__init__", contains=("self.must_close = False",)),
            Check(
                "gunicorn.http.message.Request.should_close",
                sha256="37c454bfb3e36316a738f9bd587002b626d280142bcf91c6c8fc1689e531f01b",
                contains=("if self.must_close:",),
            ),
            Check(
                "gunicorn.http.wsgi.Response.should_close",
                sha256="3888d47a96e289b3d9b834013ab4bb52bb70020f90043db4e41c4ef379ce7d7c",
                contains=("self.req.should_close()",),
            ),
            Check(
                "gunicorn.http.wsgi.Response.default_headers",
                sha256="cb490cea5d6f54089293c2adf46190cf3b5fb92335e620bb93710412aa26c6c6",
                contains=("elif self.should_close():",),
            ),
        ),
    ),
    Hook(
        path="gunicorn.arbiter.Arbiter.LISTENERS",
        distribution="gunicorn",
        used_in=(f"{GU}:when_ready",),
        why=(
            "The listening sockets, given the read timeout (SO_RCVTIMEO) that every accepted "
            "connection inherits."
        ),
        recheck="that it still holds the listeners, each with its socket as .sock",
        checks=(
            Check(
                "gunicorn.sock.BaseSocket.__init__",
                contains=("self.sock = self.set_options(sock, bound=bound)",),
            ),
        ),
    ),
    Hook(
        path="gunicorn.arbiter.Arbiter.WORKERS",
        distribution="gunicorn",
        used_in=(f"{GU}:pre_fork",),
        why="The live workers, to choose the CPU a new worker keeps to (CANTSTOP_CPU_AFFINITY).",
        recheck="that it still maps pids to the worker objects",
        checks=(
            Check(
                "gunicorn.arbiter.Arbiter.spawn_worker", contains=("self.WORKERS[pid] = worker",)
            ),
        ),
    ),
    Hook(
        path="gunicorn.http.wsgi.default_environ",
        distribution="gunicorn",
        used_in=(f"{GU}:_adoptable", f"{GU}:_hand_over"),
        why=(
            "environ['gunicorn.socket'], the client's socket: a live stream's is detached and "
            "handed to the worker's live loop, so that the stream holds no thread."
        ),
        recheck="that the environ still carries the connection's socket as gunicorn.socket",
        checks=(
            Check(
                "gunicorn.http.wsgi.default_environ",
                signature="(req, sock, cfg)",
                contains=('"gunicorn.socket": sock',),
            ),
        ),
    ),
    Hook(
        path="gunicorn.http.wsgi.Response.headers_sent",
        distribution="gunicorn",
        instance=True,
        used_in=(f"{GU}:_hand_over",),
        why=(
            "A live stream's answer is written by the live loop: gunicorn's Response (the "
            "start_response it passes, bound to it) is marked as having sent its head, not "
            "chunked, and closing, so that gunicorn writes nothing more and lets the "
            "connection go."
        ),
        recheck=(
            "that start_response is still the Response's bound method, that close() writes "
            "nothing once headers_sent is set and chunked is not, and that force_close() still "
            "makes the worker drop the connection"
        ),
        checks=(
            Check(
                "gunicorn.http.wsgi.Response.start_response",
                signature="(self, status, headers, exc_info=None)",
            ),
            Check(
                "gunicorn.http.wsgi.Response.close",
                contains=("if not self.headers_sent:", "if self.chunked:"),
            ),
            Check("gunicorn.http.wsgi.Response.force_close", contains=("self.must_close = True",)),
            Check(
                "gunicorn.http.wsgi.Response.__init__",
                contains=("self.headers_sent = False", "self.chunked = False"),
            ),
        ),
    ),
    Hook(
        path="gunicorn.util.close_graceful",
        distribution="gunicorn",
        used_in=(f"{GU}:_hand_over",),
        why=(
            "gthread ends a closing connection with shutdown(SHUT_WR), which would end a stream's "
            "connection for every copy of its socket: the socket object gunicorn keeps is "
            "detached instead, and its shutdown fails with OSError, on which gunicorn stops."
        ),
        recheck="that a failed shutdown still ends close_graceful without closing anything",
        checks=(
            Check(
                "gunicorn.util.close_graceful",
                contains=("sock.shutdown(socket.SHUT_WR)", "except OSError:\n            return"),
            ),
            Check("gunicorn.util.close", contains=("sock.close()", "except OSError:")),
        ),
    ),
    Hook(
        path="gunicorn.app.base.Application.load_config_from_file",
        distribution="gunicorn",
        used_in=("service.cli:cmd_serve",),
        why=(
            "`cantstop serve` runs gunicorn in process with the settings file shipped in the "
            "package."
        ),
        recheck="that it still loads a settings file by path into self.cfg",
        checks=(
            Check(
                "gunicorn.app.base.Application.load_config_from_file", signature="(self, filename)"
            ),
        ),
    ),
)
