"""Projections of the event history that answer list queries (``GET /v1/games``).

A projection follows the application's notification log (every event of every game, in the order
recorded), filtered to the event types it needs, and keeps its answer in memory. It can always be
rebuilt from scratch by reading the log from the start; each worker process keeps its own copy and
catches up before answering.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from eventsourcing.application import Application
from eventsourcing.utils import get_topic

from domain.game import Game, format_at, parse_at
from service.application.aggregates import ImportedGame
from service.application.errors import describe
from service.persistence.log import LogReader

log = logging.getLogger("cantstop.projections")
IMPORTED: type[Any] = ImportedGame.Recorded  # type: ignore[attr-defined]

BATCH = 500
# ImportedGame lived in service.auditing before: its stored rows keep that topic.
IMPORT_TOPICS = (
    get_topic(IMPORTED),
    "service.auditing:ImportedGame.Recorded",
)


class Projection:
    """Follows the notification log; subclasses say which event classes they handle.

    A stored row that cannot be decoded or handled is logged and passed over: one damaged game
    never stops a listing for everyone (its own reads report it as ``corrupt_game``)."""

    handles: tuple[type[Any], ...] = ()
    extra_topics: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._topics = (*(get_topic(cls) for cls in self.handles), *self.extra_topics)
        self._reader: LogReader | None = None

    def catch_up(self, app: Application[Any]) -> None:
        with self._lock:
            if self._reader is None:
                self._reader = LogReader(app.recorder, self._topics)
            while True:
                batch = self._reader.read(BATCH)
                for notification in batch:
                    try:
                        self.handle(app.mapper.to_domain_event(notification))
                    except Exception as exc:  # a damaged row: skipped here, reported by reads
                        log.error(
                            "%s: passed over notification %s of %s: %s",
                            type(self).__name__,
                            notification.id,
                            notification.originator_id,
                            describe(exc),
                        )
                if len(batch) < BATCH:
                    return

    def handle(self, event: Any) -> None:
        raise NotImplementedError


@dataclass
class GameSummary:
    id: str
    created_at: str
    players: list[str | None]
    dice: str
    rules: dict[str, Any]
    status: str = "waiting"
    winner: int | None = None
    imported: bool = False
    rematch: bool = False

    @property
    def open_seats(self) -> int:
        """Seats anyone may take: only in a lobby still waiting; none in an imported game (it is
        read-only), nor in a rematch (its seats are kept for the players of the game before)."""
        if self.imported or self.rematch or self.status != "waiting":
            return 0
        return sum(1 for p in self.players if p is None)

    def to_dict(self, now: datetime) -> dict[str, Any]:
        waited = None
        if self.status == "waiting":  # how long the lobby has waited for its players
            waited = max(0, int((now - parse_at(self.created_at)).total_seconds()))
        row = {
            "id": self.id,
            "status": self.status,
            "created_at": self.created_at,
            "players": list(self.players),
            "open_seats": self.open_seats,
            "dice": self.dice,
            "rules": self.rules,
            "winner": self.winner,
            "waited_seconds": waited,
        }
        if self.imported:  # as in its state: present only on an imported game
            row["imported"] = True
        return row


class GameIndex(Projection):
    """Every game with its status and seats, newest first."""

    handles = (
        Game.GameCreated,
        Game.SeatJoined,
        Game.SeatLeft,
        Game.TurnOrderDecided,
        Game.GameFinished,
    )
    extra_topics = IMPORT_TOPICS

    def __init__(self) -> None:
        super().__init__()
        self.games: dict[str, GameSummary] = {}
        self.imported: set[str] = set()

    def handle(self, event: Any) -> None:
        if isinstance(event, IMPORTED):  # the marker, saved with the imported game's events
            key = str(event.game_id)
            self.imported.add(key)
            if key in self.games:
                self.games[key].imported = True
            return
        key = str(event.originator_id)
        if isinstance(event, Game.GameCreated):
            players: list[str | None] = (
                list(event.players) if event.players else [None] * event.seats
            )
            self.games[key] = GameSummary(
                key,
                format_at(event.timestamp),
                players,
                event.dice,
                dict(event.rules),
                imported=key in self.imported,
                rematch=event.rematch_of is not None,
            )
            return
        summary = self.games.get(key)
        if summary is None:
            return
        if isinstance(event, Game.SeatJoined):
            summary.players[event.seat] = event.name
        elif isinstance(event, Game.SeatLeft):
            summary.players[event.seat] = None
        elif isinstance(event, Game.TurnOrderDecided):
            summary.status = "in_progress"
        elif isinstance(event, Game.GameFinished):
            summary.status = "finished"
            summary.winner = event.winner

    def query(
        self, *, status: str | None = None, open_only: bool = False, offset: int = 0, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of the games that match, newest first, and how many match in all. Only the
        page's rows are built (a listing once built a row for every game, then kept 50)."""
        with self._lock:  # another request's catch_up may be adding games meanwhile
            games = list(self.games.values())
        matching = [
            g
            for g in reversed(games)
            if (status is None or g.status == status) and (not open_only or g.open_seats > 0)
        ]
        now = datetime.now(UTC)
        return [g.to_dict(now) for g in matching[offset : offset + limit]], len(matching)


@dataclass(frozen=True)
class RuleSet:
    """The rules a leaderboard ranks within: results under other rules are not comparable."""

    mode: str
    dice_faces: int = 6
    steep_hill: bool = False


@dataclass
class BestResult:
    game_id: str
    player: str
    rules: RuleSet
    turns: int
    rating: str
    finished_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "game_id": self.game_id,
            "player": self.player,
            "mode": self.rules.mode,
            "dice_faces": self.rules.dice_faces,
            "steep_hill": self.rules.steep_hill,
            "turns": self.turns,
            "rating": self.rating,
            "date": self.finished_at,
            "audit": f"/v1/games/{self.game_id}/audit",
        }


class Leaderboard(Projection):
    """The best solitaire games per rule set: fewest turns, earliest first on ties.

    Honest (contract 1.1): only games played to the end on this server, by a person, with server
    dice — never manual dice (anyone could choose them), never an imported game (the same game
    could be imported again and again), never a bot seat."""

    handles = (Game.GameCreated, Game.GameFinished)
    extra_topics = IMPORT_TOPICS

    def __init__(self) -> None:
        super().__init__()
        self.candidates: dict[str, tuple[RuleSet, str]] = {}  # game id → (rules, player)
        self.results: dict[str, BestResult] = {}  # game id → result
        self.imported: set[str] = set()

    def handle(self, event: Any) -> None:
        if isinstance(event, IMPORTED):  # the marker, saved with the imported game's events
            key = str(event.game_id)
            self.imported.add(key)
            self.candidates.pop(key, None)
            self.results.pop(key, None)
            return
        key = str(event.originator_id)
        if isinstance(event, Game.GameCreated):
            mode = event.rules.get("solitaire")
            bots = getattr(event, "bots", None)
            if mode and event.players and event.dice == "server" and not bots:
                rules = RuleSet(mode, event.rules["dice_faces"], bool(event.rules["steep_hill"]))
                if key not in self.imported:
                    self.candidates[key] = (rules, event.players[0])
        elif isinstance(event, Game.GameFinished) and key in self.candidates:
            rules, player = self.candidates.pop(key)
            if event.winner == 0 and event.rating is not None:
                self.results[key] = BestResult(
                    key, player, rules, event.turns, event.rating, format_at(event.timestamp)
                )

    def best(self, rules: RuleSet, limit: int) -> list[dict[str, Any]]:
        with self._lock:  # another request's catch_up may be adding results meanwhile
            results = list(self.results.values())
        ranked = sorted(
            (r for r in results if r.rules == rules),
            key=lambda r: (r.turns, r.finished_at, r.game_id),
        )
        return [dict(r.to_dict(), rank=i + 1) for i, r in enumerate(ranked[:limit])]
