"""Provably fair dice: the commitment and the HMAC derivation of every draw (contract: Fairness).

Pure functions; the service draws the secret seed and passes the dice into the aggregate.
"""

from __future__ import annotations

import hashlib
import hmac


def commitment(server_seed: str) -> str:
    """sha256 of the seed's ASCII text, in hex: published when the game is created."""
    return hashlib.sha256(server_seed.encode("ascii")).hexdigest()


def draw(
    server_seed: str,
    client_seed: str,
    nonce: int,
    count: int,
    faces: int,
    entropy: str | None = None,
) -> list[int]:
    """The ``count`` dice of draw number ``nonce``.

    Bytes come from HMAC-SHA256(key=server_seed, msg="{client_seed}:{nonce}:{round}") for rounds
    0, 1, 2, … concatenated — with the player's ``entropy`` (contract 1.1), the message is
    "{client_seed}:{nonce}:{round}:{entropy}"; a byte b below 256 − (256 mod faces) gives the die
    b mod faces + 1, other bytes are skipped (so every face is exactly equally likely).
    """
    if not 2 <= faces <= 256:  # one byte per die: more faces than 256 would never draw
        raise ValueError(f"dice of {faces} faces cannot be drawn from bytes")
    key = server_seed.encode("ascii")
    limit = 256 - (256 % faces)
    suffix = "" if entropy is None else f":{entropy}"
    dice: list[int] = []
    round_ = 0
    while True:
        message = f"{client_seed}:{nonce}:{round_}{suffix}".encode()
        for byte in hmac.new(key, message, hashlib.sha256).digest():
            if byte < limit:
                dice.append(byte % faces + 1)
                if len(dice) == count:
                    return dice
        round_ += 1
