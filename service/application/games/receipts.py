"""Signed receipts (contract 1.2): every action's answer carries an Ed25519 signature over the
game, its version, its last event's hash and time, so a player holds proof, outside the server, of
what the server acknowledged; ``GET /v1/keys`` publishes the public keys.

Keys are the operator's: ``CANTSTOP_RECEIPT_KEYS`` names a JSON file ``{"keys": [{"private_key":
<base64url of the 32-byte Ed25519 seed>, "not_before": <RFC 3339>, "not_after": <RFC 3339> |
null}, ...]}``; the newest key without ``not_after`` signs, and every key listed is published, so
a key is rotated by adding a new one and giving the old one a ``not_after``: receipts it signed
still verify. Every worker and host must read the same file. Without the setting, a development
key is generated once and kept in the store (``persistence.keys``; the SQLite file of ``make run``
is under ``var/``), so every process of one store signs with it and a restart keeps it; the store
holds secrets already (unrevealed seeds). A key's id is derived from its public key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nacl.bindings import crypto_sign, crypto_sign_BYTES, crypto_sign_seed_keypair

from domain.game import format_at
from domain.receipts import b64url, message, unb64url
from service.config import ConfigError
from service.persistence.keys import StoredKeys

SIGNATURE = crypto_sign_BYTES  # a signed message is the signature, then the message


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id_of(key: Ed25519PublicKey) -> str:
    return "ed25519-" + hashlib.sha256(raw_public(key)).hexdigest()[:16]


@dataclass(frozen=True)
class Key:
    key_id: str
    private: Ed25519PrivateKey
    not_before: str
    not_after: str | None

    def public_json(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "alg": "Ed25519",
            "public_key": b64url(raw_public(self.private.public_key())),
            "not_before": self.not_before,
            "not_after": self.not_after,
        }


class Receipts:
    def __init__(self, keys: list[Key]) -> None:
        if not keys:
            raise ConfigError("CANTSTOP_RECEIPT_KEYS: no key")
        self.keys = keys
        live = [k for k in keys if k.not_after is None]
        if not live:
            raise ConfigError("CANTSTOP_RECEIPT_KEYS: every key is retired (not_after): add one")
        self.signer = max(live, key=lambda k: k.not_before)
        # Signed by libsodium: Ed25519 is deterministic, so the same bytes as cryptography's,
        # in 268k instructions against 464k (docs/performance.md, an action stage by stage).
        # Through PyNaCl's bindings (its documented low-level API): ``SigningKey.sign`` wraps
        # the same call in a SignedMessage of three copies that an action never reads.
        _, self._secret = crypto_sign_seed_keypair(self.signer.private.private_bytes_raw())

    @classmethod
    def from_env(cls, environ: Any, stored: StoredKeys | None) -> Receipts:
        """The operator's keys (``CANTSTOP_RECEIPT_KEYS``), else the store's development key,
        generated the first time any process asks."""
        path = environ.get("CANTSTOP_RECEIPT_KEYS")
        if path:
            return cls(load_keys(Path(path)))
        if stored is None:
            raise ConfigError("CANTSTOP_RECEIPT_KEYS: no key file, and no store to keep one")
        seed = b64url(Ed25519PrivateKey.generate().private_bytes_raw())
        private, not_before = stored.development_key(seed, format_at(datetime.now(UTC)))
        key = Ed25519PrivateKey.from_private_bytes(unb64url(private))
        return cls([Key(key_id_of(key.public_key()), key, not_before, None)])

    def sign(self, game_id: str, version: int, digest: str, at: str) -> dict[str, Any]:
        signature = crypto_sign(message(game_id, version, digest, at), self._secret)[:SIGNATURE]
        return {
            "game_id": game_id,
            "version": version,
            "hash": digest,
            "at": at,
            "key_id": self.signer.key_id,
            "signature": b64url(signature),
        }

    def published(self) -> dict[str, Any]:
        return {"keys": [k.public_json() for k in self.keys]}


def load_keys(path: Path) -> list[Key]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        entries = document["keys"]
        keys = []
        for entry in entries:
            private = Ed25519PrivateKey.from_private_bytes(unb64url(entry["private_key"]))
            keys.append(
                Key(
                    key_id_of(private.public_key()),
                    private,
                    str(entry.get("not_before") or "1970-01-01T00:00:00.000000Z"),
                    entry.get("not_after"),
                )
            )
        return keys
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"CANTSTOP_RECEIPT_KEYS: cannot read {path}: {exc}") from None


def misnamed_key(published: dict[str, Any]) -> str | None:
    """Why a published key's stated ``key_id`` is not the one its public key gives, or None:
    a key's id is derived from the key, never taken on a file's word."""
    for key in published.get("keys", []):
        if not isinstance(key, dict):
            continue
        # Of any key, Ed25519 or not: ``verify`` looks keys up by id, and an id that is a list or
        # an object (unhashable) crashed it, `cantstop audit --receipt` exiting 1 with a
        # traceback where a failed ``receipt`` check was due (tests/test_receipt_keys.py).
        if not isinstance(key.get("key_id"), str):
            return f"the keys state {key.get('key_id')!r} as a key's id: not text"
        if key.get("alg") != "Ed25519":
            continue
        try:
            derived = key_id_of(Ed25519PublicKey.from_public_bytes(unb64url(key["public_key"])))
        except (ValueError, KeyError, TypeError):
            return f"the key stated as {key.get('key_id')!r} is not an Ed25519 public key"
        if key.get("key_id") != derived:
            return f"the keys state {key.get('key_id')!r} for the key whose id is {derived!r}"
    return None


def verify(receipt: dict[str, Any], published: dict[str, Any]) -> str | None:
    """Why the receipt's signature does not verify with the published keys, or None."""
    problem = misnamed_key(published)
    if problem is not None:
        return problem
    keys = {k.get("key_id"): k for k in published.get("keys", []) if isinstance(k, dict)}
    key = keys.get(receipt.get("key_id"))
    if key is None:
        return f"the receipt's key {receipt.get('key_id')!r} is not among the keys given"
    if key.get("alg") != "Ed25519":
        return f"the receipt's key {receipt['key_id']!r} is not an Ed25519 key"
    # A receipt is signed at or after its event's time (GET /receipt signs later ones too), so
    # only a key retired before that time cannot have signed it.
    at, until = receipt.get("at"), key.get("not_after")
    if isinstance(until, str) and isinstance(at, str) and at > until:
        return f"the receipt is dated {at}, after its key was retired ({until})"
    try:
        public = Ed25519PublicKey.from_public_bytes(unb64url(key["public_key"]))
        signature = unb64url(receipt["signature"])
        public.verify(
            signature,
            message(receipt["game_id"], receipt["version"], receipt["hash"], receipt["at"]),
        )
    except (InvalidSignature, ValueError, KeyError, TypeError):
        return "the receipt's signature does not verify with its key"
    return None
