"""Idempotency keys (contract 1.1): an action sent again with the same key answers as the first
did, and the same key with another action is refused. The keys used are remembered in the game's
vault, saved in the same transaction as the action's events, so the answer holds across workers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from domain.commands import Command, to_dict
from domain.errors import DomainError
from service.application.aggregates import Vault
from service.application.errors import ApplicationError, IdempotencyKeyReused, RecordedRefusal


@dataclass(frozen=True)
class Key:
    """A seat's key and the action it came with."""

    scoped: str  # keys are the seat's own: two seats may send the same one
    fingerprint: str  # the SHA-256 of the action's canonical JSON

    @classmethod
    def of(cls, seat: int, key: str, command: Command) -> Key:
        canonical = json.dumps(to_dict(command), sort_keys=True, separators=(",", ":"))
        return cls(f"{seat}:{key}", hashlib.sha256(canonical.encode("utf-8")).hexdigest())


def recalled(vault: Vault, key: Key, now: datetime) -> tuple[int, int] | None:
    """The first and last versions the key's first action recorded, if the vault remembers it;
    IdempotencyKeyReused if it came with another action; RecordedRefusal if its first final
    answer was a refusal (#43: one key, one answer on every host)."""
    record = vault.recall(key.scoped, now)
    if record is None:
        return None
    if record["fingerprint"] != key.fingerprint:
        raise IdempotencyKeyReused("this Idempotency-Key was used for a different action")
    if "refused" in record:
        raise RecordedRefusal(record["refused"], record["detail"])
    return record["first"], record["last"]


def refuse(vault: Vault, key: Key, refused: DomainError | ApplicationError, now: datetime) -> None:
    """The key's action was refused, finally: kept as its answer (saved by the caller)."""
    vault.refuse(key.scoped, key.fingerprint, refused.code, refused.detail, now.isoformat())


def remember(vault: Vault, key: Key, first: int, last: int, now: datetime) -> None:
    """The key's action recorded versions ``first`` to ``last`` (saved with them)."""
    vault.remember(key.scoped, key.fingerprint, first, last, now.isoformat())
