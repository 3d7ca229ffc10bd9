"""Offline verification: receipts, and an export's hash chain, seed commitment and dice.

Nothing here talks to a server. Given what you saved — an action's ``receipt``, the answer of
``GET /v1/keys`` and the game's export — it checks:

- ``receipt``: the receipt's Ed25519 signature verifies with the key it names (every saved
  key's id derived from its public key, as the server derives it: a stated id that differs
  fails the check), over exactly
  ``cantstop-receipt:v1:{game_id}:{version}:{hash}:{at}``, and the export holds that version
  with that hash and time (an export cut before it, or different at it, fails);
- ``chain``: every event's hash is SHA-256 of the previous hash and the event's canonical JSON,
  versions run 1, 2, 3… and times never go back;
- ``dice``: the revealed server seed hashes to the commitment published at creation, and every
  server draw (opening rolls included) is what HMAC-SHA256 of that seed gives.

What it does NOT check: that every action was legal under the rules. That takes the game's rules
engine, which is the service's: run ``cantstop audit EXPORT`` (offline too, from the service's
package) or ask ``GET /v1/games/{id}/audit``. A verdict from here has the same shape as theirs
(``valid``, ``checks``, ``first_bad_version``), with the checks above and no ``rules`` check.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from cantstop_client.types import Check, Verdict

EXPORT_FORMAT = "cantstop-game"
EXPORT_FORMAT_VERSION = 1
ZERO_HASH = "0" * 64
HEX64 = re.compile(r"[0-9a-f]{64}")
RECEIPT_FIELDS = ("game_id", "version", "hash", "at", "key_id", "signature")


class MalformedExport(ValueError):
    """Not an export at all (no header line, not JSON): nothing to verify."""


@dataclass(frozen=True)
class Export:
    """One game's export: its header (``format``, ``format_version``, ``game_id``) and its
    events, one per line, parsed (a line that is not JSON is kept as ``None``)."""

    header: dict[str, Any]
    events: list[Any]

    @property
    def game_id(self) -> str:
        return str(self.header["game_id"])


def parse_export(text: str | bytes) -> Export:
    """One game's export, as ``GET /v1/games/{id}/export`` gave it."""
    exports = parse_exports(text)
    if len(exports) != 1:
        raise MalformedExport(f"{len(exports)} games in the file, where one was expected")
    return exports[0]


def parse_exports(text: str | bytes) -> list[Export]:
    """Every game of a file of exports one after another (an account's bulk export)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    games: list[list[str]] = []
    for line in text.removeprefix("\ufeff").split("\n"):
        if _is_header_line(line) or not games:
            games.append([])
        games[-1].append(line)
    exports = []
    for lines in games:
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            continue
        try:
            header = json.loads(lines[0])
        except ValueError:
            header = None
        if (
            not isinstance(header, dict)
            or header.get("format") != EXPORT_FORMAT
            or header.get("format_version") != EXPORT_FORMAT_VERSION
            or not isinstance(header.get("game_id"), str)
        ):
            raise MalformedExport(
                'the first line is not {"format": "cantstop-game", "format_version": 1, '
                '"game_id": "…"}'
            )
        exports.append(Export(header, [_loads(line) for line in lines[1:]]))
    if not exports:
        raise MalformedExport("the file is empty")
    return exports


def _is_header_line(line: str) -> bool:
    return f'"format": "{EXPORT_FORMAT}"' in line or f'"format":"{EXPORT_FORMAT}"' in line


def _loads(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


# ------------------------------------------------------------------------------ receipts
def receipt_message(game_id: str, version: int, digest: str, at: str) -> bytes:
    """The exact bytes a receipt signs (contract 1.2)."""
    return f"cantstop-receipt:v1:{game_id}:{version}:{digest}:{at}".encode()


def _unb64url(text: Any) -> bytes:
    if not isinstance(text, str) or not text.isascii() or "=" in text:
        raise ValueError("not base64url without padding")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def receipt_shape_problem(receipt: Any) -> str | None:
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


def key_id_of(public_key: bytes) -> str:
    """A key's id as the server derives it from the raw 32-byte Ed25519 public key."""
    return "ed25519-" + hashlib.sha256(public_key).hexdigest()[:16]


def _misnamed(key: Any) -> str | None:
    """Why a saved key's stated ``key_id`` is not the one its public key gives (a keys file
    is not taken on its word), or None."""
    if not isinstance(key, Mapping) or key.get("alg") != "Ed25519":
        return None
    try:
        derived = key_id_of(_unb64url(key.get("public_key")))
    except ValueError:
        return f"the key stated as {key.get('key_id')!r} is not an Ed25519 public key"
    if key.get("key_id") != derived:
        return f"the keys state {key.get('key_id')!r} for the key whose id is {derived!r}"
    return None


def signature_problem(receipt: Any, keys: Any) -> str | None:
    """Why the receipt's signature does not verify with the saved keys (the answer of
    ``GET /v1/keys``), or None when it does."""
    problem = receipt_shape_problem(receipt)
    if problem is not None:
        return problem
    if not isinstance(keys, Mapping) or not isinstance(keys.get("keys"), list):
        return 'the keys are not an answer of GET /v1/keys ({"keys": [...]})'
    for stated in keys["keys"]:
        problem = _misnamed(stated)
        if problem is not None:
            return problem
    known = {k.get("key_id"): k for k in keys["keys"] if isinstance(k, Mapping)}
    key = known.get(receipt["key_id"])
    if key is None:
        return f"the receipt's key {receipt['key_id']!r} is not among the keys given"
    if key.get("alg") != "Ed25519":
        return f"the receipt's key {receipt['key_id']!r} is not an Ed25519 key"
    # A receipt is signed at or after its event's time, so only a key retired before that
    # time cannot have signed it (times as served have one width: their text sorts as they do).
    until = key.get("not_after")
    if isinstance(until, str) and receipt["at"] > until:
        return f"the receipt is dated {receipt['at']}, after its key was retired ({until})"
    try:
        public = Ed25519PublicKey.from_public_bytes(_unb64url(key.get("public_key")))
        public.verify(
            _unb64url(receipt["signature"]),
            receipt_message(receipt["game_id"], receipt["version"], receipt["hash"], receipt["at"]),
        )
    except (InvalidSignature, ValueError, TypeError):
        return "the receipt's signature does not verify with its key"
    return None


def verify_receipt(receipt: Any, keys: Any, export: Export | str | bytes | None = None) -> Check:
    """The check ``receipt``: the signature verifies, and (given the export) the export holds
    the receipt's version with its hash and time."""
    problem = signature_problem(receipt, keys)
    if problem is None and export is not None:
        if not isinstance(export, Export):
            export = parse_export(export)
        problem = _held_by(receipt, export)
    version = receipt.get("version") if isinstance(receipt, Mapping) else None
    blamed = version if problem is not None and isinstance(version, int) and version > 0 else None
    if problem is None:
        detail = f"signed by {receipt['key_id']}"
        if export is not None:
            detail += f"; the export holds version {receipt['version']} with the receipt's hash"
        return Check(name="receipt", ok=True, detail=detail, version=None)
    return Check(name="receipt", ok=False, detail=problem, version=blamed)


def _held_by(receipt: Mapping[str, Any], export: Export) -> str | None:
    if receipt["game_id"] != export.game_id:
        return f"the receipt is for game {receipt['game_id']}, the export for {export.game_id}"
    version = receipt["version"]
    if len(export.events) < version:
        return (
            f"the export stops at version {len(export.events)}, before the receipt's version "
            f"{version}: events the server acknowledged are missing"
        )
    event = export.events[version - 1]
    if not isinstance(event, Mapping) or event.get("version") != version:
        return f"the export's line for version {version} is not that event"
    if event.get("hash") != receipt["hash"] or event.get("at") != receipt["at"]:
        return f"the export's event at version {version} differs from the receipt's"
    return None


# ------------------------------------------------------------------------------ the chain
def event_hash(prev_hash: str, version: int, type_: str, at: str, data: Any) -> str:
    """SHA-256 of the previous hash's bytes and the event's canonical JSON (contract 1.0)."""
    body = json.dumps(
        {"version": version, "type": type_, "at": at, "data": data},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(bytes.fromhex(prev_hash) + body.encode("utf-8")).hexdigest()


def _event_problem(event: Any) -> str | None:
    if not isinstance(event, Mapping):
        return "not a JSON object"
    for key, kind in (("type", str), ("at", str), ("prev_hash", str), ("hash", str)):
        if not isinstance(event.get(key), kind):
            return f"no {key}"
    if not _is_int(event.get("version")):
        return "no version"
    if not isinstance(event.get("data"), Mapping):
        return "no data"
    if not HEX64.fullmatch(event["prev_hash"]) or not HEX64.fullmatch(event["hash"]):
        return "a hash that is not 64 lowercase hex characters"
    return None


def check_chain(events: Sequence[Any]) -> Check:
    if not events:
        return Check(name="chain", ok=False, detail="the history is empty", version=1)
    previous = ZERO_HASH
    for position, event in enumerate(events):
        expected = position + 1
        problem = _event_problem(event)
        if problem is not None:
            return _fail("chain", f"version {expected} is malformed: {problem}", expected)
        if event["version"] != expected:
            return _fail(
                "chain", f"version {event['version']} where version {expected} belongs", expected
            )
        if event["prev_hash"] != previous:
            what = "the zero hash" if expected == 1 else f"the hash of version {expected - 1}"
            return _fail("chain", f"version {expected}: prev_hash is not {what}", expected)
        digest = event_hash(previous, expected, event["type"], event["at"], event["data"])
        if digest != event["hash"]:
            detail = f"version {expected}: the hash does not match the event's contents"
            return _fail("chain", detail, expected)
        if position and event["at"] < events[position - 1]["at"]:
            detail = f"version {expected} is dated before the one it follows"
            return _fail("chain", detail, expected)
        previous = event["hash"]
    detail = f"{len(events)} events in time order, every hash verified"
    return Check(name="chain", ok=True, detail=detail, version=None)


# ------------------------------------------------------------------------------ the dice
def draw(
    server_seed: str,
    client_seed: str,
    nonce: int,
    count: int,
    faces: int,
    entropy: str | None = None,
) -> list[int]:
    """The dice of draw ``nonce``: bytes of HMAC-SHA256(server seed, "{client_seed}:{nonce}:
    {round}[:{entropy}]") for round 0, 1, …; a byte b < 256 − 256 mod faces gives b mod faces + 1,
    others are skipped."""
    limit = 256 - 256 % faces
    suffix = "" if entropy is None else f":{entropy}"
    dice: list[int] = []
    round_ = 0
    while True:
        message = f"{client_seed}:{nonce}:{round_}{suffix}".encode()
        for byte in hmac.new(server_seed.encode("ascii"), message, hashlib.sha256).digest():
            if byte < limit:
                dice.append(byte % faces + 1)
                if len(dice) == count:
                    return dice
        round_ += 1


def _draws_in(value: Any) -> Iterator[Mapping[str, Any]]:
    """Every object in an event's data that carries a nonce (each also carries its dice)."""
    if isinstance(value, Mapping):
        if value.get("nonce") is not None:
            yield value
        for item in value.values():
            yield from _draws_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _draws_in(item)


def check_dice(events: Sequence[Any]) -> Check:
    """The seed commitment and every server draw (before the seed is revealed: pending, ok)."""
    readable = [e for e in events if _event_problem(e) is None]
    if not readable or readable[0]["version"] != 1 or readable[0]["type"] != "GameCreated":
        return _fail("dice", "no readable GameCreated event at version 1", 1)
    setup = readable[0]["data"]
    rules = setup.get("rules")
    faces = rules.get("dice_faces") if isinstance(rules, Mapping) else None
    client_seed, promised = setup.get("client_seed"), setup.get("seed_commitment")
    draws = [(e["version"], d) for e in readable for d in _draws_in(e["data"])]
    reveals = [e for e in readable if e["type"] == "SeedRevealed"]
    if setup.get("dice") == "manual":
        if draws or reveals:
            version = draws[0][0] if draws else reveals[0]["version"]
            return _fail("dice", "a manual-dice game records a server draw or seed", version)
        return Check(name="dice", ok=True, detail="manual dice: no server draws", version=None)
    if not isinstance(faces, int) or faces < 2 or not isinstance(client_seed, str):
        return _fail("dice", "GameCreated lacks the dice faces or the client seed", 1)
    if not isinstance(promised, str) or not HEX64.fullmatch(promised):
        return _fail("dice", "GameCreated lacks a seed commitment", 1)
    for expected, (version, entry) in enumerate(draws):
        if entry.get("nonce") != expected:
            found = entry.get("nonce")
            detail = f"version {version}: draw nonce {found!r} where {expected} is next"
            return _fail("dice", detail, version)
        dice = entry.get("dice")
        if not isinstance(dice, list) or not dice or not all(_is_int(d) for d in dice):
            return _fail("dice", f"version {version}: draw {expected} records no dice", version)
    if len(reveals) > 1:
        return _fail("dice", "the seed is revealed twice", reveals[1]["version"])
    if not reveals:
        finished = [e["version"] for e in readable if e["type"] == "GameFinished"]
        if finished:
            detail = f"the game finished at version {finished[0]} but its seed was never revealed"
            return _fail("dice", detail, finished[0] + 1)
        detail = f"pending: {len(draws)} draws recorded; the seed is revealed when the game ends"
        return Check(name="dice", ok=True, detail=detail, version=None)
    reveal = reveals[0]
    seed = reveal["data"].get("server_seed")
    if not isinstance(seed, str) or not HEX64.fullmatch(seed):
        detail = "the revealed seed is not 64 lowercase hex characters"
        return _fail("dice", detail, reveal["version"])
    if hashlib.sha256(seed.encode("ascii")).hexdigest() != promised:
        detail = f"version {reveal['version']}: the revealed seed does not hash to the commitment"
        return _fail("dice", detail, reveal["version"])
    for version, entry in draws:
        nonce, dice, entropy = entry["nonce"], entry["dice"], entry.get("entropy")
        drawn = draw(seed, client_seed, nonce, len(dice), faces, entropy)
        if drawn != dice:
            detail = f"version {version}: draw {nonce} records {dice}, the seed gives {drawn}"
            return _fail("dice", detail, version)
    detail = f"commitment kept; {len(draws)} draws match the revealed seed"
    return Check(name="dice", ok=True, detail=detail, version=None)


# ------------------------------------------------------------------------------ all of it
def verify_export(
    export: Export | str | bytes,
    *,
    receipt: Any = None,
    keys: Any = None,
) -> Verdict:
    """The verdict on one game's export: ``chain`` and ``dice``, and ``receipt`` when a receipt
    and the keys are given. ``valid`` says all hold; ``first_bad_version`` is the earliest
    version a failed check blames. Legality of the moves is not checked here (see the module)."""
    if not isinstance(export, Export):
        export = parse_export(export)
    checks = [check_chain(export.events), check_dice(export.events)]
    if receipt is not None or keys is not None:
        checks.append(verify_receipt(receipt, keys, export))
    blamed = [c["version"] for c in checks if c["version"] is not None]
    return Verdict(
        valid=all(c["ok"] for c in checks),
        checks=checks,
        first_bad_version=min(blamed) if blamed else None,
    )


def _fail(name: str, detail: str, version: int | None) -> Check:
    return Check(name=name, ok=False, detail=detail, version=version)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
