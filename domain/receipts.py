"""Receipts (contract 1.2, "Receipts and analysis"): what a signed receipt says, and how an
export is checked against one, offline. The signature itself is checked by the caller (the
service and the command line use the ``cryptography`` library); this module says what is signed
and what must match.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

RECEIPT_FIELDS = ("game_id", "version", "hash", "at", "key_id", "signature")


def message(game_id: str, version: int, digest: str, at: str) -> bytes:
    """The bytes a receipt signs: ``cantstop-receipt:v1:{game_id}:{version}:{hash}:{at}``."""
    return f"cantstop-receipt:v1:{game_id}:{version}:{digest}:{at}".encode()


URLSAFE = bytes.maketrans(b"+/", b"-_")


def b64url(data: bytes) -> str:
    """base64url without padding (``base64.urlsafe_b64encode``'s text, in one call less of
    Python: a receipt's signature on every action)."""
    return binascii.b2a_base64(data, newline=False).translate(URLSAFE).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    """base64url without padding; ValueError if it is not."""
    if not isinstance(text, str) or not text.isascii() or "=" in text:
        raise ValueError("not base64url without padding")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def receipt_problem(receipt: Any) -> str | None:
    """What is wrong with a receipt's shape, or None."""
    if not isinstance(receipt, Mapping):
        return "a receipt is a JSON object"
    missing = [f for f in RECEIPT_FIELDS if f not in receipt]
    if missing:
        return f"the receipt lacks {', '.join(missing)}"
    version = receipt["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        return "the receipt's version is not a positive integer"
    if not all(isinstance(receipt[f], str) for f in RECEIPT_FIELDS if f != "version"):
        return "the receipt's fields are not text"
    return None


def held_by(receipt: Mapping[str, Any], game_id: str | None, records: Sequence[Any]) -> str | None:
    """Why the export does not hold what the receipt says (another game, cut before the
    receipt's version, or another event there), or None when it does."""
    if game_id is not None and receipt["game_id"] != game_id:
        return f"the receipt is for game {receipt['game_id']}, the export for {game_id}"
    version = receipt["version"]
    if len(records) < version:
        return (
            f"the export stops at version {len(records)}, before the receipt's version {version}: "
            "events the server acknowledged are missing"
        )
    record = records[version - 1]
    if not isinstance(record, Mapping) or record.get("version") != version:
        return f"the export's line for version {version} is not that event"
    if record.get("hash") != receipt["hash"] or record.get("at") != receipt["at"]:
        return f"the export's event at version {version} differs from the receipt's"
    return None
