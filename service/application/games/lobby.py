"""The lobby's life cycle: taking a seat (a person, or a computer player), giving one back before
the game starts, and the rematch of a finished game.

A rematch is one new game per finished game, however many ask at once: its id is derived from the
old game's, so the store's optimistic check lets only one creation through. It waits as a lobby
whose seats are kept for the same players: each person claims theirs with the token they held in
the old game (and gets a fresh one), computer players at once. The new game's creation event names
the old game (``rematch_of``); nothing is appended to the old game's history.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Collection
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

from eventsourcing.persistence import IntegrityError

from domain.commands import NewGame
from domain.errors import IllegalAction, InvalidRequest
from domain.game import Game
from service.application.aggregates import Vault, match_token, new_token, token_hash
from service.application.errors import ConcurrentAction, NotFound, NotYourSeat, Unauthorized
from service.application.games.use_cases import Games, Seat, check_bots, check_version

ATTEMPTS = 8
T = TypeVar("T")
REMATCH_NAMESPACE = uuid.UUID("4d0c8f62-9a1e-4f7b-8c35-2b6e1d9a7f40")


def rematch_id(game_id: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(REMATCH_NAMESPACE, str(game_id))


@dataclass(frozen=True)
class Seated:
    state: dict[str, Any]
    seat: Seat


class Lobby:
    def __init__(self, games: Games) -> None:
        self.games = games

    def _seated_seat(self, game_id: uuid.UUID, token: str | None) -> tuple[Vault, int]:
        """The vault, read afresh, and the seat ``token`` holds (a lobby's seats change): a
        seat token, or a personal token whose account holds a seat (contract 1.2)."""
        if not token:
            raise Unauthorized("send a seated player's token: Authorization: Bearer <token>")
        vault = self.games.secrets.vault(game_id)
        if self.games.seats.is_personal(token):
            return vault, self.games.seats.seat_of_principal(game_id, token)
        seat = match_token(vault.token_hashes, token)
        if seat is None:
            raise Unauthorized("unknown token for this game")
        return vault, seat

    def join(
        self,
        game_id: uuid.UUID,
        name: str,
        *,
        bot: str | None = None,
        token: str | None = None,
        if_match: Collection[int] | None = None,
    ) -> Seated:
        """Take the first open seat: a person gets a token; a computer player (``bot``) is seated
        by a player already seated, whose ``token`` is given. A person who sends a personal
        token takes the seat as their account (contract 1.2). ``if_match``: only while the
        game is at one of those versions (If-Match), else VersionConflict."""
        self.games.refuse_imported(game_id)
        if bot is not None:
            check_bots([{"name": name, "bot": bot}])
        account = None
        if bot is None and self.games.seats.is_personal(token):
            account = self.games.seats.principal_handle(token)
        return self._again(lambda: self._join(game_id, name, bot, token, if_match, account))

    def _join(
        self,
        game_id: uuid.UUID,
        name: str,
        bot: str | None,
        token: str | None,
        if_match: Collection[int] | None,
        account: str | None = None,
    ) -> Seated:
        games = self.games
        with games.store.owned(game_id) as game:  # the vault read under the game's lock, afresh
            if account is not None:
                vault = games.secrets.vault(game_id)
            elif bot is not None or token is not None:
                # A person needs no token to join; one sent must be good all the same (a client
                # sending a wrong credential hears so: RFC 6750, 401, never silently ignored).
                vault, _ = self._seated_seat(game_id, token)
            else:
                vault = games.secrets.vault(game_id)
            check_version(game, if_match)
            seat = game.join(name, draw=games.secrets.dicer(game), bot=bot, account=account)
            issued = self._issue(vault, seat, bot)
            self._sealed_if_started(game, vault)
            self._save(game, vault)
            return Seated(games.views.of(game), Seat(seat, game.names[seat], issued, bot))

    @staticmethod
    def _again(attempt: Callable[[], T]) -> T:
        """A lobby change judged again on the latest version when another request (another
        thread, another worker) changed the lobby first, as an action is: twelve people joining
        an 8-seat lobby at once fill it, not two of them with ten refusals."""
        for _ in range(ATTEMPTS - 1):
            try:
                return attempt()
            except ConcurrentAction:
                continue
        return attempt()

    def leave(
        self,
        game_id: uuid.UUID,
        seat: int,
        token: str | None,
        if_match: Collection[int] | None = None,
    ) -> dict[str, Any]:
        """Give a seat back before the game starts: with its own token, or (a computer player's
        seat) with any seated player's. The seat is open again; its token stops working."""
        self.games.refuse_imported(game_id)
        return self._again(lambda: self._leave(game_id, seat, token, if_match))

    def _leave(
        self, game_id: uuid.UUID, seat: int, token: str | None, if_match: Collection[int] | None
    ) -> dict[str, Any]:
        games = self.games
        with games.store.owned(game_id) as game:
            vault, holder = self._seated_seat(game_id, token)
            check_version(game, if_match)
            game.check_leave(seat)  # the game's rules first (started? taken?), then whose seat
            if not game.is_bot(seat) and holder != seat:
                raise NotYourSeat(f"your token holds seat {holder}, not seat {seat}")
            game.leave(seat)
            if str(seat) in vault.token_hashes:
                vault.revoke(seat)
            self._save(game, vault)
            return games.views.of(game)

    def release(self, game_id: uuid.UUID, handle: str) -> bool:
        """Give back the lobby seat the account ``handle`` holds, with no token (the account is
        closing, whatever its token's scopes); its seat token is revoked with it. False when it
        holds no seat there or the game has started (then it resigns instead)."""

        def attempt() -> bool:
            games = self.games
            with games.store.owned(game_id) as game:
                seat = game.seat_of_account(handle)
                if seat is None or game.status != "waiting":
                    return False
                vault = games.secrets.vault(game_id)
                game.leave(seat, closing=True)  # given back whatever the count of seat changes
                if str(seat) in vault.token_hashes:
                    vault.revoke(seat)
                self._save(game, vault)
                return True

        return self._again(attempt)

    def rematch(
        self,
        game_id: uuid.UUID,
        token: str | None,
        *,
        client_seed: str | None = None,
        seed_commitment: str | None = None,
    ) -> Seated:
        """Claim your seat in the one rematch of a finished game (created by the first to ask),
        with the token you held in it (or your account's personal token, for its seat): a fresh
        token for the new game.

        ``client_seed`` and ``seed_commitment`` (contract 1.1's fairness, as for a new game) are
        for the claim that creates the rematch: its server dice then use the seed committed
        before the client chose theirs. Once the rematch exists its seed is drawn: a claim that
        brings seeds claims the seat as one without them, its commitment unused (the rematch's
        ``fairness`` says whose seeds it has)."""
        games = self.games
        games.refuse_imported(game_id)
        if not token:
            raise Unauthorized("send your seat's token of the finished game")
        seeded = client_seed is not None or seed_commitment is not None
        old = games.game(game_id)
        if old.status != "finished":
            raise IllegalAction("a rematch is for a finished game; this one is not finished")
        if old.seats < 2:
            raise IllegalAction("a solitaire game has no rematch: start a new one")
        if None in old.names:
            # A lobby that ended (abandoned) before its seats were filled was never played: its
            # rematch would keep seats for players who never existed, and never start.
            raise IllegalAction("this game never started: a rematch is for a game that was played")
        if games.seats.is_personal(token):
            # An account's seat, with its personal token, as its actions were: the pages play
            # a signed-in account's seat so, and a rated game's seats are accounts'.
            seat = old.seat_of_account(games.seats.principal_handle(token))
        else:
            seat = match_token(games.secrets.vault(game_id).token_hashes, token)
        if seat is None:
            raise Unauthorized("unknown token for this game")
        games.seats.refuse_closed(old.accounts[seat])
        new_id = rematch_id(game_id)
        if seeded:
            if old.dice_mode != "server":
                raise InvalidRequest("client_seed and seed_commitment are for server dice")
            with suppress(IntegrityError):  # created already: the seat is claimed all the same
                self._create_rematch(new_id, old, client_seed, seed_commitment)
        for _ in range(ATTEMPTS):  # others create it or claim their seats at the same moment
            try:
                return self._claim(new_id, old, seat)
            except _NoRematchYet:
                with suppress(IntegrityError):
                    self._create_rematch(new_id, old)
            except ConcurrentAction:
                continue
        raise ConcurrentAction("the rematch is busy; try again")

    def _create_rematch(
        self,
        new_id: uuid.UUID,
        old: Game,
        client_seed: str | None = None,
        seed_commitment: str | None = None,
    ) -> None:
        """The lobby of the rematch, with its computer players seated at once (IntegrityError
        if it exists already)."""
        setup = NewGame(
            seats=old.seats,
            rules=old.rules,
            dice=old.dice_mode,
            first_player=old.first_player if old.dice_mode == "manual" else None,
            clock={"turn_seconds": old.clock_seconds} if old.clock_seconds else None,
            client_seed=client_seed,
            rated=old.rated,  # the same players, rules and clock: rated as the game before
        )
        committed_at: str | None = None
        server_seed: str | None = None
        if seed_commitment is not None:
            if self.games.store.is_stored(new_id):  # before the commitment is used up
                raise IntegrityError(f"the rematch {new_id} exists already")
            server_seed, committed_at = self.games.take_commitment(setup, seed_commitment)
        elif old.dice_mode == "server":
            server_seed = secrets.token_hex(32)
        game = Game.start(
            new_id,
            setup,
            server_seed=server_seed,
            rematch_of=str(old.id),
            seed_committed_at=committed_at,
        )
        vault = Vault(game_id=new_id, server_seed=server_seed)
        draw = None
        if server_seed is not None:
            draw = self.games.secrets.dicer_for(server_seed, game.client_seed or "")
        for seat_key, bot in sorted(old.bots.items()):
            seat = int(seat_key)
            game.claim(seat, old.names[seat] or bot, draw=draw, bot=bot, account=old.accounts[seat])
        self._sealed_if_started(game, vault)
        self.games.store.save(game, vault)

    def _claim(self, new_id: uuid.UUID, old: Game, seat: int) -> Seated:
        games = self.games
        try:
            vault = games.secrets.vault(new_id)
        except NotFound:
            raise _NoRematchYet from None
        with games.store.owned(new_id) as game:
            if game.names[seat] is not None:
                raise IllegalAction(f"seat {seat} of the rematch is claimed already")
            game.claim(
                seat,
                old.names[seat] or f"Seat {seat}",
                draw=games.secrets.dicer(game),
                account=old.accounts[seat],  # the same player: the rematch is in their history
            )
            issued = self._issue(vault, seat, None)
            self._sealed_if_started(game, vault)
            self._save(game, vault)
            return Seated(games.views.of(game), Seat(seat, game.names[seat], issued))

    # ------------------------------------------------------------------------------ helpers
    @staticmethod
    def _issue(vault: Vault, seat: int, bot: str | None) -> str | None:
        if bot is not None:
            return None
        token = new_token()
        vault.issue(seat, token_hash(token))
        return token

    @staticmethod
    def _sealed_if_started(game: Game, vault: Vault) -> None:
        if game.status != "waiting" and not vault.is_sealed:
            vault.seal()

    def _save(self, game: Game, vault: Vault) -> None:
        try:
            self.games.store.save_changes(game, vault)
        except IntegrityError:
            raise ConcurrentAction(
                "the lobby changed at the same moment; fetch the game and try again"
            ) from None
        finally:
            self.games.secrets.cache.pop(game.id, None)


class _NoRematchYet(Exception):
    pass
