"""The service's own aggregates beside ``Game``: a game's secrets (``Vault``) and the marker of an
imported game (``ImportedGame``). Both are stored with the game's events and never served.

Seat tokens are random (``new_token``); only their SHA-256 is kept, and a token is matched by
comparing its hash with every seat's, each in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from eventsourcing.domain import Aggregate, event
from eventsourcing.utils import get_topic, register_topic

TOKEN_BYTES = 24  # 192 bits
IDEMPOTENCY_TTL = timedelta(hours=48)
KEYS_PER_SEAT = 64
"""The Idempotency-Keys a vault keeps per seat, its newest: a retry comes within seconds of its
first try, and a bound keeps a seat that sends refused actions under fresh keys (each refusal
is the key's kept answer) from growing the vault, its snapshots and every keyed action's read
without end. An older key is forgotten as one past ``IDEMPOTENCY_TTL`` is."""
VAULT_NAMESPACE = uuid.UUID("6f1c9e0e-3a57-4d7b-9f43-2f0f3e1c7a11")
IMPORT_NAMESPACE = uuid.UUID("0b7d2f4e-5c1a-4e8b-9a36-7c2d1e9f4a58")


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def match_token(token_hashes: Mapping[str, str], token: str) -> int | None:
    """The seat whose stored hash is the token's; every hash is compared, each in constant time."""
    digest = token_hash(token)
    found = None
    for seat, stored in token_hashes.items():
        if hmac.compare_digest(digest, stored):
            found = int(seat)
    return found


def vault_id(game_id: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(VAULT_NAMESPACE, str(game_id))


def imported_marker_id(game_id: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(IMPORT_NAMESPACE, str(game_id))


class Vault(Aggregate):
    """A game's secrets. Its events are stored but never served."""

    @staticmethod
    def create_id(game_id: uuid.UUID) -> uuid.UUID:
        return vault_id(game_id)

    @event("Opened")
    def __init__(self, game_id: uuid.UUID, server_seed: str | None) -> None:
        self.game_id = game_id
        self.server_seed = server_seed
        self.token_hashes: dict[str, str] = {}
        self.keys: dict[str, dict[str, Any]] = {}

    @event("TokenIssued")
    def issue(self, seat: int, digest: str) -> None:
        """The seat's token, of a new holder: it starts with no Idempotency-Key answered."""
        self.token_hashes[str(seat)] = digest
        self._forget_keys(seat)

    @event("TokenRevoked")
    def revoke(self, seat: int) -> None:
        """The seat was given back (a lobby): its token stops working, and the answers kept for
        its keys go with it, in the same event, so on every host at once: whoever takes the
        seat next never gets its last holder's answers (tests/test_seat_secrets.py)."""
        self.token_hashes = {k: v for k, v in self.token_hashes.items() if k != str(seat)}
        self._forget_keys(seat)

    def _forget_keys(self, seat: int) -> None:
        """Forget the seat's Idempotency-Keys: they were its holder's (an action of a lobby
        is refused, and a refusal is kept as the key's answer). Keys are scoped "seat:key"
        (``_keep``). A replay of older vaults' events forgets them alike."""
        prefix = f"{seat}:"
        self.keys = {k: v for k, v in self.keys.items() if not k.startswith(prefix)}

    @event("Sealed")
    def seal(self) -> None:
        """The game has started: its seats, so its tokens, never change again."""
        self.sealed = True

    @property
    def is_sealed(self) -> bool:
        return bool(self.__dict__.get("sealed"))

    @event("KeyUsed")
    def remember(self, scoped_key: str, fingerprint: str, first: int, last: int, at: str) -> None:
        self._keep(scoped_key, {"fingerprint": fingerprint, "first": first, "last": last, "at": at})

    @event("KeyRefused")
    def refuse(self, scoped_key: str, fingerprint: str, code: str, detail: str, at: str) -> None:
        """The key's action was refused, finally (#43: one key, one answer on every host)."""
        record = {"fingerprint": fingerprint, "refused": code, "detail": detail, "at": at}
        self._keep(scoped_key, record)

    def _keep(self, scoped_key: str, record: dict[str, Any]) -> None:
        """The key's answer, newest last; the seat's keys beyond ``KEYS_PER_SEAT`` forgotten,
        oldest first (the dict keeps the order they came in; a replay of the vault's events
        forgets the same ones)."""
        keys = self.keys
        keys.pop(scoped_key, None)
        keys[scoped_key] = record
        seat = scoped_key[: scoped_key.index(":") + 1]  # scoped as "seat:key" (idempotency.Key)
        mine = [k for k in keys if k.startswith(seat)]
        if len(mine) > KEYS_PER_SEAT:
            for old in mine[: len(mine) - KEYS_PER_SEAT]:
                del keys[old]

    def recall(self, scoped_key: str, now: datetime) -> dict[str, Any] | None:
        record = self.keys.get(scoped_key)
        if record is None or datetime.fromisoformat(record["at"]) + IDEMPOTENCY_TTL < now:
            return None
        return record


class ImportedGame(Aggregate):
    """Marks an imported game: read-only, and where it came from. Never served as a game."""

    @staticmethod
    def create_id(game_id: uuid.UUID) -> uuid.UUID:
        return imported_marker_id(game_id)

    @event("Recorded")
    def __init__(self, game_id: uuid.UUID, source: str, source_game_id: str | None) -> None:
        self.game_id = game_id
        self.source = source
        self.source_game_id = source_game_id


# Stored rows name their classes by topic: keep the modules these lived in before resolvable.
for _old, _cls in {
    "service.games:Vault": Vault,
    "service.games:Vault.Opened": Vault.Opened,  # type: ignore[attr-defined]
    "service.games:Vault.TokenIssued": Vault.TokenIssued,  # type: ignore[attr-defined]
    "service.games:Vault.KeyUsed": Vault.KeyUsed,  # type: ignore[attr-defined]
    "service.auditing:ImportedGame": ImportedGame,
    "service.auditing:ImportedGame.Recorded": ImportedGame.Recorded,  # type: ignore[attr-defined]
}.items():
    register_topic(_old, _cls)

IMPORT_TOPICS = (
    get_topic(ImportedGame.Recorded),  # type: ignore[attr-defined]
    "service.auditing:ImportedGame.Recorded",
)
"""The topics an import's marker is stored under: now, and before (ImportedGame lived in
service.auditing: its stored rows keep that topic). The views that select them read both."""


def moved_topics(
    old_module: str, aggregate: type[Any], events: Iterable[type[Any]]
) -> tuple[str, ...]:
    """Register the topics an aggregate and its events were stored under in ``old_module``
    (rows keep the topic they were written with) as names of the classes now: the old topics
    of ``events``, for the views that select rows by topic."""
    register_topic(f"{old_module}:{aggregate.__qualname__}", aggregate)
    old = []
    for cls in events:
        topic = f"{old_module}:{cls.__qualname__}"
        register_topic(topic, cls)
        old.append(topic)
    return tuple(old)


ACCOUNT_NAMESPACE = uuid.UUID("3d0f6c2a-8e41-4b7f-a5d9-1c6e2b9f7a30")


def account_id(handle: str) -> uuid.UUID:
    """One id per handle whatever its case: two sign-ups of ``Ann`` and ``ann`` race for the
    same aggregate's first version, and the store lets exactly one of them record it."""
    return uuid.uuid5(ACCOUNT_NAMESPACE, handle.lower())


class Account(Aggregate):
    """A player's account (contract 1.2): its handle as registered, whether it is a bot's, and
    whether it was closed. Nothing secret: the password's hash and the tokens' hashes are kept
    beside the events (service/persistence/accounts.py), where they can be erased."""

    @staticmethod
    def create_id(handle: str, bot: bool) -> uuid.UUID:
        return account_id(handle)

    @event("Registered")
    def __init__(self, handle: str, bot: bool) -> None:
        self.handle = handle
        self.bot = bot
        self.closed = False
        self.excluded = False
        self.moderation_reason = ""

    @event("Closed")
    def close(self) -> None:
        self.closed = True

    # An operator's moderation (``cantstop accounts exclude``): the ratings view follows these
    # events, so the ledger shows them and the ratings skip the account's results meanwhile.
    @event("Excluded")
    def exclude(self, reason: str) -> None:
        self.excluded = True
        self.moderation_reason = reason

    @event("Reinstated")
    def reinstate(self, reason: str) -> None:
        self.excluded = False
        self.moderation_reason = reason
