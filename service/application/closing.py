"""Closing an account (``DELETE /v1/account``): nothing of it plays on.

Its pending challenges are answered (incoming declined, outgoing cancelled), its seeks withdrawn
and it is withdrawn from every tournament not finished (``account_closed``), so no game starts
for it; each lobby seat it holds is given back and that seat's token revoked; each game under
way is resigned on its behalf, so its seat tokens can no longer act there (a rated game counts
the resignation as any other, and one resigned before every seat has played a turn is aborted,
contract 1.3); then the account is closed (its personal tokens die, its password is erased) and
its webhooks deleted.

None of this needs the closing token's ``play`` scope: the server gives up the seats itself. The
sweep runs again once the account is closed, for a game that started meanwhile (a seek paired,
a challenge accepted, a lobby filled between the first sweep's read and the close). A seat token
of the account is refused from then on: in a game it holds a resigned seat, and its rematch is
401 (the rematch of a closed account's seat cannot be claimed).
"""

from __future__ import annotations

import logging
import uuid

from domain.commands import Resign
from domain.errors import DomainError
from service.application.errors import ApplicationError
from service.application.games.lobby import Lobby
from service.application.games.use_cases import Games
from service.application.matchmaking.challenges import Challenges
from service.application.matchmaking.seeks import Seeks
from service.application.players.accounts import Accounts, Principal
from service.application.players.standings import AccountGames
from service.application.tournaments.use_cases import Tournaments
from service.persistence.views import Views

log = logging.getLogger("cantstop.accounts")

PAGE = 200


class Closing:
    def __init__(
        self,
        accounts: Accounts,
        games: Games,
        lobby: Lobby,
        challenges: Challenges,
        seeks: Seeks,
        account_games: AccountGames,
        views: Views,
        tournaments: Tournaments | None = None,
    ) -> None:
        self.accounts = accounts
        self.games = games
        self.lobby = lobby
        self.challenges = challenges
        self.seeks = seeks
        self.account_games = account_games
        self.views = views
        self.tournaments = tournaments

    def close(self, principal: Principal) -> None:
        """Close the account (the token needs the scope ``account``, and no other)."""
        principal.require("account")
        self.give_up(principal)
        self.accounts.close(principal)
        self.give_up(principal)

    def give_up(self, principal: Principal) -> int:
        """Answer its challenges, withdraw its seeks, give back its lobby seats and resign its
        games under way: how many seats were given up."""
        self.challenges.withdraw_all(principal)
        self.seeks.withdraw_all(principal)
        if self.tournaments is not None:  # never paired again; a table under way is resigned
            self.tournaments.withdraw_everywhere(principal.handle, "account_closed")
        given_up = 0
        for status in ("waiting", "in_progress"):
            for game_id in self._unfinished(principal.handle, status):
                if self._give_up_seat(game_id, principal.handle):
                    given_up += 1
        return given_up

    def _unfinished(self, handle: str, status: str) -> list[uuid.UUID]:
        found: list[uuid.UUID] = []
        cursor = None
        while True:
            page, cursor = self.account_games.page(
                self.views, handle, status=status, rated=None, limit=PAGE, cursor=cursor
            )
            found.extend(uuid.UUID(entry["game_id"]) for entry in page)
            if cursor is None:
                return found

    def _give_up_seat(self, game_id: uuid.UUID, handle: str) -> bool:
        """Give the seat back if the game waits, else resign it (the view may be behind: the
        game as stored decides). Tried twice: a lobby may start between the two steps."""
        problem: Exception | None = None
        for _ in range(2):
            try:
                if self.lobby.release(game_id, handle):
                    return True
                game = self.games.game(game_id)
                seat = game.seat_of_account(handle)
                if seat is None or game.status != "in_progress" or game.resigned[seat]:
                    return False  # finished, or nothing of it there
                self.games.act(game_id, seat, Resign())
                return True
            except (ApplicationError, DomainError) as exc:
                problem = exc
        log.warning("closing %s: game %s not given up: %s", handle, game_id, problem)
        return False
