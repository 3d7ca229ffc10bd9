"""What happens in a game without any request: a turn that times out, a computer player's turn,
and a game abandoned by everyone. The scheduler (``scheduler.py``) calls ``tick`` when something
is due; any number of processes may, on any number of hosts: each change is one insert at the
game's next version, so the store's optimistic check lets exactly one of them record it, and
the others find the game moved on and plan again.
"""

from __future__ import annotations

import logging
import random
import uuid
from datetime import datetime, timedelta

from eventsourcing.persistence import IntegrityError

from domain import strategies
from domain.game import Game
from domain.position import Position
from service.application.errors import NotFound
from service.application.games.use_cases import Games

log = logging.getLogger("cantstop.timekeeper")


class Timekeeper:
    def __init__(self, games: Games, *, abandon_after: float, bot_pause: float) -> None:
        self.games = games
        self.abandon_after = abandon_after
        self.bot_pause = bot_pause

    def due_at(self, game: Game) -> datetime | None:
        """When something next happens in ``game`` by itself, if ever."""
        if game.status == "finished" or self.games.store.is_imported(game.id):
            return None
        idle_since = game.idle_since()
        times = [idle_since + timedelta(seconds=self.abandon_after)]
        deadline = game.deadline
        if deadline is not None:
            times.append(deadline)
        if game.status == "in_progress" and game.is_bot(game.current):
            times.append(idle_since + timedelta(seconds=self.bot_pause))
        return min(times)

    @staticmethod
    def only_abandonment(game: Game) -> bool:
        """Whether abandonment is all that can ever be due in ``game``, whatever it records next
        (no clock, no computer player): then each new event only moves ``due_at`` later."""
        return game.clock_seconds is None and not game.bots

    def tick(self, game_id: uuid.UUID, now: datetime) -> datetime | None:
        """Do what is due in the game at ``now`` (one step: a bot plays one action); when is
        the next thing due?"""
        games = self.games
        try:
            with games.store.owned(game_id) as game:
                if game.status == "finished" or games.store.is_imported(game_id):
                    return None
                if not self._step(game, now):
                    return self.due_at(game)
                games.secrets.finish_up(game)
                try:
                    games.store.save_changes(game)
                except IntegrityError:
                    return now  # another process recorded something first: plan again
                return self.due_at(game)
        except NotFound:
            return None

    def _step(self, game: Game, now: datetime) -> bool:
        """Change the game if something is due: whether it changed."""
        if now >= game.idle_since() + timedelta(seconds=self.abandon_after):
            game.abandon(now, int(self.abandon_after))
            log.info("game %s abandoned", game.id)
            return True
        if game.timed_out(now):
            game.time_out(now)
            return True
        if (
            game.status == "in_progress"
            and game.is_bot(game.current)
            and now >= game.idle_since() + timedelta(seconds=self.bot_pause)
        ):
            self._play_bot(game)
            return True
        return False

    def _play_bot(self, game: Game) -> None:
        """One action of the computer player to act, as a person's would be; or, when it can no
        longer reach the columns to win, its resignation. Without it a game of computer players
        that none of them can win any more (six at the default three columns each holding one
        or two; two at seven, split 6 to 5) would bust for ever, an event every pause."""
        seat = game.current
        assert seat is not None
        if not game.can_still_win(seat):
            log.info("game %s: computer player %s resigns: it cannot win any more", game.id, seat)
            game.resign(seat)
            return
        strategy = strategies.get(game.bots[str(seat)])
        # Deterministic: any process that plays this version chooses the same action.
        rng = random.Random(f"{game.id}:{game.version}")
        action = strategy.choose(Position.from_game(game), rng)
        game.act(seat, action, draw=self.games.secrets.dicer(game))
