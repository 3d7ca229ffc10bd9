"""Who holds a seat: a seat's own token (matched against the vault's hashes) or an account's
personal token (the account's seat in the game)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from eventsourcing.application import AggregateNotFoundError

from service.application.aggregates import Account, account_id, match_token
from service.application.errors import NotFound, ReadOnly, Unauthorized
from service.application.games.secrets import GameSecrets
from service.application.store import Store


class Seats:
    """The seat a token holds in a game."""

    principals: Callable[[str], str] | None = None
    """A personal token's account handle, with the scope ``play`` (set by the runtime:
    service.application.players.accounts); None where accounts are not served."""

    def __init__(self, store: Store, secrets: GameSecrets) -> None:
        self.store = store
        self.secrets = secrets

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
        # Seats are taken and given back only while a game waits for its players: once it has
        # started, the game as this worker holds it seats whom the latest version seats, and
        # no query is needed (the action then reads the game as commands do). A game still
        # waiting is read afresh; one not held is read (afresh) once.
        held = self.store.live.get(game_id) is not None
        for fresh in (False, True) if held else (True,):
            with self.store.owned(game_id, fresh=fresh) as game:
                seat = game.seat_of_account(handle)
                if game.status != "waiting":
                    break
        if seat is None:  # as a seat token of another game is: the token holds no seat here
            raise Unauthorized(f"the account {handle} holds no seat of this game")
        return seat

    def account_closed(self, handle: str | None) -> bool:
        """Whether the account ``handle`` (None: an anonymous seat) was closed."""
        if handle is None:
            return False
        try:
            found: Any = self.store.repository.get(account_id(handle))
        except AggregateNotFoundError:
            return False
        return isinstance(found, Account) and bool(found.closed)

    def refuse_closed(self, handle: str | None) -> None:
        """Unauthorized if the seat's account ``handle`` was closed: its seat tokens died with
        it (a rematch's claim, and a keyed creation's replay, judge them so)."""
        if self.account_closed(handle):
            raise Unauthorized("this seat's account is closed: its tokens no longer play")

    def authenticate(self, game_id: uuid.UUID, token: str | None) -> int:
        """The seat that ``token`` holds in the game (imported games refuse first, then an
        unknown game is NotFound, then a missing or unknown token Unauthorized). A personal
        token holds the seat of its account."""
        if self.store.is_imported(game_id):
            raise ReadOnly("this game was imported: it can be read, not played")
        if self.is_personal(token):
            assert token is not None
            return self.seat_of_principal(game_id, token)
        try:
            secrets_ = self.secrets.of(game_id)
        except AggregateNotFoundError:
            raise NotFound(f"no game {game_id}") from None
        if not token:
            raise Unauthorized("send the seat's token: Authorization: Bearer <token>")
        # ``of`` reads a lobby's vault afresh (its seats change hands, on any host) and keeps a
        # sealed one (the game started). A token no seat of a sealed vault holds is refused
        # without reading it again: its hashes never change. Sealed is saved in the transaction
        # that took the last seat (a join, a rematch's claim, a new game of named players, with
        # its token), a started game takes no seat again, and a seat is given back only in a
        # lobby: no host adds a seat to a sealed vault, and the read that first found it sealed
        # saw every seat. So bogus tokens cost a started game no read of the store, on any
        # host (tests/test_seat_secrets.py).
        seat = match_token(secrets_.token_hashes, token)
        if seat is None:
            raise Unauthorized("unknown token for this game")
        return seat
