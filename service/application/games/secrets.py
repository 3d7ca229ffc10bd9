"""A game's secrets: its server seed, drawn and committed to before the game (contract 1.1),
and its seats' token hashes, kept in the game's ``Vault`` (saved with the game, never served).

Each worker keeps what it read of a vault (``Secrets``): once the game has started neither
changes, so most actions never read the vault.
"""

from __future__ import annotations

import functools
import logging
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate

from domain import fairness
from domain.audit import HEX64
from domain.game import Draw, Game
from service.application.aggregates import Vault, vault_id
from service.application.errors import NotFound, describe
from service.application.store import Store
from service.persistence.errors import CorruptGame, StoreUnavailable

log = logging.getLogger("cantstop")

COMMITMENT_TTL = timedelta(minutes=15)  # the contract asks for at least 10


@dataclass(frozen=True)
class Commitment:
    seed_commitment: str
    expires_at: datetime


@dataclass(frozen=True)
class Secrets:
    """What a worker keeps of a game's vault. Once the game has started (``sealed``) neither
    ever changes; before, a seat may be given back, so lobbies always read the vault afresh."""

    server_seed: str | None
    token_hashes: dict[str, str]
    sealed: bool


def _vault_damage(vault: Vault) -> str | None:
    """What is wrong with a vault read from the store, if anything: a server seed that is not
    64 lowercase hex characters, or token hashes that are not text by seat."""
    seed = vault.server_seed
    if seed is not None and not (isinstance(seed, str) and HEX64.fullmatch(seed)):
        return "the server seed is not 64 lowercase hex characters"
    hashes = vault.token_hashes
    if not isinstance(hashes, dict) or not all(
        isinstance(seat, str) and isinstance(digest, str) for seat, digest in hashes.items()
    ):
        return "the token hashes are not text by seat"
    return None


def dicer_of(server_seed: str, client_seed: str) -> Draw:
    return functools.partial(fairness.draw, server_seed, client_seed)


class GameSecrets:
    """The games' vaults and seed commitments, read through the store."""

    CACHE = 10_000

    def __init__(self, store: Store) -> None:
        self.store = store
        self.commitments = store.commitments
        self.cache: dict[uuid.UUID, Secrets] = {}
        self.seeds_checked: set[uuid.UUID] = set()  # stored seeds found to match commitments

    def read(self, game_id: uuid.UUID) -> Vault:
        """The game's vault, read afresh (and its secrets kept); AggregateNotFoundError for none."""
        try:
            vault: Aggregate = self.store.repository.get(vault_id(game_id))
        except (StoreUnavailable, AggregateNotFoundError):
            raise
        except Exception as exc:
            log.error("game %s: its vault cannot be read: %s", game_id, describe(exc))
            raise CorruptGame(
                f"game {game_id} is damaged: its stored secrets cannot be read", version=None
            ) from None
        assert isinstance(vault, Vault)
        damage = _vault_damage(vault)
        if damage is not None:
            log.error("game %s: its stored secrets are damaged: %s", game_id, damage)
            raise CorruptGame(
                f"game {game_id} is damaged: its stored secrets cannot be used", version=None
            )
        if len(self.cache) >= self.CACHE:
            self.cache.clear()
        self.cache[game_id] = Secrets(vault.server_seed, dict(vault.token_hashes), vault.is_sealed)
        return vault

    def vault(self, game_id: uuid.UUID) -> Vault:
        """The game's secrets, read afresh (a private copy: change it, then save it);
        NotFound for an id that is no game's."""
        try:
            return self.read(game_id)
        except AggregateNotFoundError:
            raise NotFound(f"no game {game_id}") from None

    def of(self, game_id: uuid.UUID) -> Secrets:
        """The game's secrets as this worker keeps them (the vault read once it is sealed)."""
        known = self.cache.get(game_id)
        if known is None or not known.sealed:
            self.read(game_id)
            known = self.cache[game_id]
        return known

    def dicer(self, game: Game) -> Draw | None:
        """The draw function of ``game``'s server dice, or None for manual dice."""
        seed = self.seed(game)
        return dicer_of(seed, game.client_seed or "") if seed else None

    def seed(self, game: Game) -> str | None:
        """``game``'s server seed, once it matches the game's published commitment: a stored
        seed that does not (damage) would draw dice nobody can verify, and could never be
        revealed; such a game is corrupt_game instead."""
        seed = self.of(game.id).server_seed
        if not seed or game.id in self.seeds_checked:
            return seed
        if fairness.commitment(seed) != game.seed_commitment:
            log.error("game %s: its stored seed does not match its commitment", game.id)
            raise CorruptGame(
                f"game {game.id} is damaged: its stored seed does not match its commitment",
                version=None,
            )
        if len(self.seeds_checked) >= self.CACHE:
            self.seeds_checked.clear()
        self.seeds_checked.add(game.id)
        return seed

    @staticmethod
    def dicer_for(server_seed: str, client_seed: str) -> Draw:
        return dicer_of(server_seed, client_seed)

    def finish_up(self, game: Game) -> None:
        """Once a game is finished, its seed is revealed (in the same save)."""
        if game.status != "finished" or game.server_seed is not None:
            return
        seed = self.seed(game)
        if seed:
            game.reveal_seed(seed)

    def commit_seed(self) -> Commitment:
        """Draw a seed for a future game and publish only its commitment (contract 1.1)."""
        assert self.commitments is not None
        now = datetime.now(UTC)
        seed = secrets.token_hex(32)
        expires = now + COMMITMENT_TTL
        self.commitments.purge(now.timestamp())
        self.commitments.put(fairness.commitment(seed), seed, now.timestamp(), expires.timestamp())
        return Commitment(fairness.commitment(seed), expires)
