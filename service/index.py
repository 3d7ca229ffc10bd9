"""Projections of the event history that answer list queries (``GET /v1/games``).

A projection follows the application's notification log (every event of every game, in the order
recorded), filtered to the event types it needs, and keeps its answer in memory. It can always be
rebuilt from scratch by reading the log from the start; each worker process keeps its own copy and
catches up before answering.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from eventsourcing.application import Application
from eventsourcing.utils import get_topic

from domain.game import Game, format_at

BATCH = 500


class Projection:
    """Follows the notification log; subclasses say which event classes they handle."""

    handles: tuple[type[Any], ...] = ()

    def __init__(self) -> None:
        self.position = 0
        self._lock = threading.Lock()
        self._topics = [get_topic(cls) for cls in self.handles]

    def catch_up(self, app: Application[Any]) -> None:
        with self._lock:
            while True:
                batch = app.recorder.select_notifications(
                    start=self.position + 1, limit=BATCH, topics=self._topics
                )
                for notification in batch:
                    self.handle(app.mapper.to_domain_event(notification))
                    self.position = notification.id
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

    @property
    def open_seats(self) -> int:
        return sum(1 for p in self.players if p is None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "created_at": self.created_at,
            "players": list(self.players),
            "open_seats": self.open_seats,
            "dice": self.dice,
            "rules": self.rules,
            "winner": self.winner,
        }


class GameIndex(Projection):
    """Every game with its status and seats, newest first."""

    handles = (Game.GameCreated, Game.SeatJoined, Game.TurnOrderDecided, Game.GameFinished)

    def __init__(self) -> None:
        super().__init__()
        self.games: dict[str, GameSummary] = {}

    def handle(self, event: Any) -> None:
        key = str(event.originator_id)
        if isinstance(event, Game.GameCreated):
            players: list[str | None] = (
                list(event.players) if event.players else [None] * event.seats
            )
            self.games[key] = GameSummary(
                key, format_at(event.timestamp), players, event.dice, dict(event.rules)
            )
            return
        summary = self.games.get(key)
        if summary is None:
            return
        if isinstance(event, Game.SeatJoined):
            summary.players[event.seat] = event.name
        elif isinstance(event, Game.TurnOrderDecided):
            summary.status = "in_progress"
        elif isinstance(event, Game.GameFinished):
            summary.status = "finished"
            summary.winner = event.winner

    def query(self, *, status: str | None = None, open_only: bool = False) -> list[dict[str, Any]]:
        rows = [
            g.to_dict()
            for g in reversed(self.games.values())
            if (status is None or g.status == status) and (not open_only or g.open_seats > 0)
        ]
        return rows


@dataclass
class BestResult:
    game_id: str
    player: str
    mode: str
    turns: int
    rating: str
    finished_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "game_id": self.game_id,
            "player": self.player,
            "mode": self.mode,
            "turns": self.turns,
            "rating": self.rating,
            "date": self.finished_at,
        }


class Leaderboard(Projection):
    """The best finished solitaire games per mode: fewest turns, earliest first on ties."""

    handles = (Game.GameCreated, Game.GameFinished)

    def __init__(self) -> None:
        super().__init__()
        self.solitaire: dict[str, tuple[str, str]] = {}  # game id → (mode, player)
        self.results: dict[str, list[BestResult]] = {"easy": [], "advanced": []}

    def handle(self, event: Any) -> None:
        key = str(event.originator_id)
        if isinstance(event, Game.GameCreated):
            mode = event.rules.get("solitaire")
            if mode and event.players:
                self.solitaire[key] = (mode, event.players[0])
        elif isinstance(event, Game.GameFinished) and key in self.solitaire:
            mode, player = self.solitaire.pop(key)
            if event.winner == 0 and event.rating is not None:
                result = BestResult(
                    key, player, mode, event.turns, event.rating, format_at(event.timestamp)
                )
                self.results[mode].append(result)

    def best(self, mode: str, limit: int) -> list[dict[str, Any]]:
        ranked = sorted(self.results[mode], key=lambda r: (r.turns, r.finished_at, r.game_id))
        return [dict(r.to_dict(), rank=i + 1) for i, r in enumerate(ranked[:limit])]
