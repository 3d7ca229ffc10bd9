"""Verify a Can't Stop game export by hand: python3 verify_export.py EXPORT.ndjson

Standard library only. Checks the hash chain, the seed commitment and every server draw, then
prints OK or the first bad version. Exit status: 0 OK, 1 a bad version, 2 not an export.
"""

import hashlib
import hmac
import json
import re
import sys


def draw(server_seed, client_seed, nonce, count, faces, entropy=None):
    """The dice of draw `nonce`: HMAC-SHA256 bytes, b < 256 - 256 % faces gives b % faces + 1.

    With a player's entropy (contract 1.1) the message ends in ":{entropy}"."""
    limit = 256 - 256 % faces
    suffix = "" if entropy is None else f":{entropy}"
    dice, round_ = [], 0
    while True:
        message = f"{client_seed}:{nonce}:{round_}{suffix}".encode()
        for byte in hmac.new(server_seed.encode("ascii"), message, hashlib.sha256).digest():
            if byte < limit:
                dice.append(byte % faces + 1)
                if len(dice) == count:
                    return dice
        round_ += 1


def draws_in(value):
    """Every object in an event's data that carries a nonce, in order."""
    if isinstance(value, dict):
        if value.get("nonce") is not None:
            yield value
        for item in value.values():
            yield from draws_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from draws_in(item)


def verify(lines):
    """None when the export verifies, else (version, reason)."""
    events = []
    previous = "0" * 64
    for version, line in enumerate(lines, start=1):
        try:
            event = json.loads(line)
            body = json.dumps(
                {k: event[k] for k in ("version", "type", "at", "data")},
                sort_keys=True,
                separators=(",", ":"),
                ensure_ascii=False,
            )
            digest = hashlib.sha256(bytes.fromhex(event["prev_hash"]) + body.encode()).hexdigest()
        except (ValueError, KeyError, TypeError):
            return version, "not a readable event"
        if event["version"] != version:
            return version, f"expected version {version}, found {event['version']}"
        if event["prev_hash"] != previous:
            return version, "prev_hash is not the previous event's hash"
        if digest != event["hash"]:
            return version, "hash does not match the event"
        if events and event["at"] < events[-1]["at"]:  # one width: the text sorts as the time
            return version, "dated before the event it follows"
        previous = event["hash"]
        events.append(event)
    if not events or events[0]["type"] != "GameCreated":
        return 1, "the first event is not GameCreated"
    try:
        return verify_dice(events)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return 1, f"malformed game data: {exc!r}"


def verify_dice(events):
    """The commitment and every server draw; None when they verify, else (version, reason)."""
    created = events[0]["data"]
    if created["dice"] != "server":
        print("chain OK; manual dice: no server draws")
        return None
    faces = created["rules"]["dice_faces"]
    # One byte a die: more than 256 faces never draws one (the loop below runs for ever), 0 or 1
    # divides by zero or draws nothing but ones. A forger's export may say anything.
    if type(faces) is not int or not 2 <= faces <= 256:
        return 1, f"rules.dice_faces is {faces!r}: dice are drawn from bytes, of 2 to 256 faces"
    draws = [(e["version"], d) for e in events for d in draws_in(e["data"])]
    for expected, (version, entry) in enumerate(draws):
        if entry["nonce"] != expected:
            return version, f"nonce {entry['nonce']} where {expected} is next"
    reveals = [e for e in events if e["type"] == "SeedRevealed"]
    if not reveals:
        print(f"chain OK; {len(draws)} draws pending: the seed is not revealed yet")
        return None
    seed = reveals[0]["data"]["server_seed"]
    if not re.fullmatch("[0-9a-f]{64}", str(seed)):
        return reveals[0]["version"], "the revealed seed is not 64 lowercase hex characters"
    if hashlib.sha256(seed.encode("ascii")).hexdigest() != created["seed_commitment"]:
        return reveals[0]["version"], "the revealed seed does not match the commitment"
    for version, entry in draws:
        dice = draw(
            seed,
            created["client_seed"],
            entry["nonce"],
            len(entry["dice"]),
            faces,
            entry.get("entropy"),
        )
        if dice != entry["dice"]:
            return version, f"draw {entry['nonce']}: recorded {entry['dice']}, seed gives {dice}"
    print(f"chain OK; commitment OK; {len(draws)} draws OK")
    return None


def main(path):
    try:
        with open(path, "rb") as export:
            lines = export.read().decode("utf-8", errors="replace").split("\n")
        if lines[-1] == "":
            lines.pop()  # the newline that ends the last line
        header = json.loads(lines[0])
        if header["format"] != "cantstop-game" or header["format_version"] != 1:
            raise ValueError(header)
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        print(f"{path}: not a readable cantstop-game export", file=sys.stderr)
        return 2
    bad = verify(lines[1:])
    if bad is None:
        print("OK")
        return 0
    print(f"FAIL at version {bad[0]}: {bad[1]}")
    return 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 verify_export.py EXPORT.ndjson")
    sys.exit(main(sys.argv[1]))
