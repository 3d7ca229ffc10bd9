"""``GET /v1/games/{id}/advice``: the odds and the expert's suggestion for the player to act, at
any version, computed once per version (an answer can be read again, and explained later by the
strategy version it carries)."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from typing import Any

from domain.advice import advise
from domain.errors import GameOver, IllegalAction
from domain.position import Position
from service.application.games.use_cases import Games

CACHE = 2_000


class Advisor:
    def __init__(self, games: Games) -> None:
        self.games = games
        self._answers: OrderedDict[tuple[uuid.UUID, int], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def advice(self, game_id: uuid.UUID, version: int | None = None) -> dict[str, Any]:
        state = self.games.state(game_id, version)  # NotFound for an unknown game or version
        key = (game_id, int(state["version"]))
        with self._lock:
            known = self._answers.get(key)
        if known is not None:
            return known
        if state["status"] == "finished":
            raise GameOver("the game is finished: nobody is to act")
        if state["status"] != "in_progress":
            raise IllegalAction("the game has not started: seats are still open")
        if state["turn"] is None:
            # A past version only: the winning stop, or the resignation that leaves one player,
            # whose command records the game's end in the next version.
            raise IllegalAction(
                f"nobody is to act at version {key[1]}: version {key[1] + 1} records the end "
                "of the game"
            )
        position = Position.from_game(self.games.game(game_id, key[1]))
        if position.phase == "move" and not position.moves:
            # A past version only: the same command records these dice and the bust.
            raise IllegalAction(
                f"the dice of version {key[1]} bust: nobody chooses a move; "
                f"version {key[1] + 1} records the bust"
            )
        answer = {"version": key[1], **advise(position, f"{game_id}:{key[1]}")}
        with self._lock:
            self._answers[key] = answer
            if len(self._answers) > CACHE:
                self._answers.popitem(last=False)
        return answer
