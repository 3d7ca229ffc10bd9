"""What one worker process holds: the application, its views and the live hub.

Built once per process, after gunicorn forks (never shared across processes); the HTTP app
factory and the command line both build their process's ``Runtime`` here.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from service import metrics
from service.application.analysis.advisor import Advisor
from service.application.analysis.analyst import Analyst
from service.application.analysis.fairplay import FairPlay
from service.application.analysis.jobs import AnalysisFeed, JobConfig
from service.application.closing import Closing
from service.application.games.archiving import ArchiveQueue, Archiver
from service.application.games.lobby import Lobby
from service.application.games.projections import GameList, SolitaireBest
from service.application.games.receipts import Receipts
from service.application.games.scheduler import DueIndex, Scheduler
from service.application.games.timekeeper import Timekeeper
from service.application.games.use_cases import Games
from service.application.matchmaking.challenges import Challenges
from service.application.matchmaking.seeks import Seeks
from service.application.notify.delivery import Dispatcher
from service.application.notify.notices import Notices, NoticesView
from service.application.notify.webhooks import WebhookConfig, Webhooks
from service.application.players.accounts import Accounts
from service.application.players.standings import AccountGames, RatingsView
from service.application.store import Store
from service.application.tournaments.use_cases import Tournaments
from service.config import Settings
from service.live.hub import Hub, LiveConfig
from service.live.redis_link import RedisLink
from service.persistence.creations import Creations
from service.persistence.settings import persistence_env
from service.persistence.startup import schema_lock
from service.persistence.views import View, Views


class Runtime:
    def __init__(self, settings: Settings, *, create_tables: bool) -> None:
        # Hosts that start together take turns at the DDL (service/persistence/startup.py).
        with schema_lock(settings) if create_tables else contextlib.nullcontext():
            self._build(settings, create_tables=create_tables)

    def _build(self, settings: Settings, *, create_tables: bool) -> None:
        self.settings = settings
        env = persistence_env(settings, create_table=create_tables)
        env.update(
            {
                "IS_SNAPSHOTTING_ENABLED": "y",
                "AGGREGATE_CACHE_MAXSIZE": "500",
                "AGGREGATE_CACHE_FASTFORWARD": "y",
            }
        )
        env.update(settings.extra_env)
        self.store = Store(env=env)  # every context saves and loads through it
        self.games = Games(self.store)
        self.receipts = Receipts.from_env(
            {**os.environ, **settings.extra_env}, self.store.stored_keys()
        )
        self.accounts = Accounts(self.store, self.store.credentials())
        self.creations = creations_of(self.store, create=create_tables)
        self.games.seats.principals = lambda token: self.accounts.authenticate(token, "play").handle
        self.lobby = Lobby(self.games)
        # Webhooks: their tables beside the events; delivered by the scheduler's dispatcher.
        self.webhooks = Webhooks.of(
            self.store,
            WebhookConfig.from_env({**os.environ, **settings.extra_env}),
            create=create_tables,
        )
        self._dispatcher: Dispatcher | None = None
        self.advisor = Advisor(self.games)
        self.analyst = Analyst(
            self.games,
            create_tables=create_tables,
            config=JobConfig.from_env({**os.environ, **settings.extra_env}),
        )
        self.timekeeper = Timekeeper(
            self.games, abandon_after=settings.abandon_after, bot_pause=settings.bot_pause
        )
        # The views across games, in tables of the store (service/persistence/views.py).
        self.views = Views(self.store.recorder, self.store.mapper, create=create_tables)
        self.game_list = GameList()
        self.archive_queue = ArchiveQueue()  # finished games, archived a while after
        self.archiver = Archiver(self.store, self.views, self.archive_queue, settings.archive_after)
        self.leaderboard = SolitaireBest()
        self.account_games = AccountGames()
        self.ratings = RatingsView(self.games)
        self.notices_view = NoticesView(self.store)
        self.notices = Notices(self.views, self.notices_view)
        self.challenges = Challenges(self.store, self.games, self.accounts, self.views)
        self.seeks = Seeks(self.store, self.games, self.views, self.ratings)
        self.tournaments = Tournaments(
            self.store,
            self.games,
            self.accounts,
            self.views,
            self.ratings,
        )
        self.closing = Closing(
            self.accounts,
            self.games,
            self.lobby,
            self.challenges,
            self.seeks,
            self.account_games,
            self.views,
            self.tournaments,
        )
        self.fair_play = FairPlay(
            self.games,
            self.views,
            self.ratings,
            self.accounts,
            self.analyst,
            create_tables=create_tables,
        )
        # Every view but the due-index (the scheduler keeps its own): what its loop moves on.
        self.moved_views: tuple[View, ...] = (
            self.game_list,
            self.leaderboard,
            self.account_games,
            self.ratings,
            self.notices_view,
            self.challenges.pending,
            self.seeks.pool,
            self.tournaments.view,
            AnalysisFeed(self.games),  # finished rated games' analyses queued
            self.archive_queue,
        )
        if create_tables:
            self.views.setup(self.all_views())
        self.link = RedisLink(settings.redis_url) if settings.redis_url else None
        self.hub = Hub(self.games, self.link, LiveConfig.from_env())
        self.hub.notices = self.notices
        self.store.on_recorded = self.hub.publish
        if settings.metrics:  # CANTSTOP_METRICS=on: events counted by type (service/metrics.py)
            self.store.on_recorded = metrics.counting_events(self.hub.publish)
        self.notices_view.listeners.append(self.hub.publish_notices)
        self.notices_view.hooks.append(self.webhooks.on_notices)  # deliveries queued with it

    def scheduler(self) -> Scheduler:
        """A loop that records what is due without a request (``cantstop worker`` runs one),
        and keeps every view moving on."""
        return Scheduler(
            self.games,
            self.timekeeper,
            self.views,
            others=self.moved_views,
            chores=(
                self.seeks.pair_all,
                self.tournaments.poll,  # started, paired, seated, results: once whoever is first
                self.challenges.expire_due,  # recorded, so announced, once whoever is first
                self.seeks.expire_due,
                self.notices.prune_now_and_then,
                self.accounts.prune_now_and_then,  # revoked tokens, 30 days on
                self.dispatcher().step,
                self.fair_play.poll,  # finished rated games' analyses summed up
                self.archiver.chore,  # finished games' events archived, a while after
            ),
        )

    def all_views(self) -> list[View]:
        """Every view in the store, by name (``cantstop projections``)."""
        return [*self.moved_views, DueIndex(self.games, self.timekeeper)]

    def redis_status(self) -> str:
        """For /healthz: ``ok``, ``down: <reason>`` or ``not configured``."""
        return "not configured" if self.link is None else self.link.status()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def dispatcher(self) -> Dispatcher:
        """This process's webhook dispatcher (the scheduler's loop steps it)."""
        if self._dispatcher is None:
            self._dispatcher = Dispatcher(self.webhooks)
        return self._dispatcher

    def close(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.close()  # attempts under way end by their deadline
        self.hub.close()
        self.store.close()


def creations_of(store: Store, *, create: bool) -> Creations | None:
    """The first answers of creating requests with a key (service/http/idempotent.py), in the
    store's database; None for a store without one (an in-memory store in a few tests)."""
    recorder: Any = store.recorder  # the store's own (service/persistence): it names its SQL
    datastore = getattr(recorder, "datastore", None)
    if datastore is None:
        return None
    creations = Creations(datastore, recorder.dialect)
    if create:
        creations.create_table()
    return creations
