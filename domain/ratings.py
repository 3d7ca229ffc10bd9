"""The order of a finished game, for ratings (contract 1.2, "Ratings"), and the pool it rates in.

Pure rules, shared by the server's ratings and ``cantstop ratings`` (which recomputes them
offline from an export): both read the same events, so both rank the same.

The order: the winner first; then the others by columns claimed, then by the sum of their
markers' heights, more first; equal stays tied. A player who resigned (by choice or by three
timeouts) ranks below every player who did not, earlier resignations lower. An abandoned game
rates nobody.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Finish:
    """What the order of a finished game is read from, seat by seat."""

    winner: int | None
    claimed: Sequence[int]  # columns claimed, by seat
    heights: Sequence[int]  # the sum of the seat's markers' heights when the game ended
    resigned: Sequence[int]  # the seats that resigned, in the order they did
    abandoned: bool = False


def ranks(finish: Finish) -> list[int] | None:
    """Each seat's place (0 is first; tied seats share a place, and the next place counts them,
    as in 0, 1, 1, 3), or None when the game rates nobody (abandoned)."""
    if finish.abandoned:
        return None
    seats = len(finish.claimed)
    resigned_at = {seat: i for i, seat in enumerate(finish.resigned)}

    def key(seat: int) -> tuple[int, ...]:
        if seat in resigned_at:  # below everyone who did not; earlier ones lower
            return (2, -resigned_at[seat], 0, 0)
        if seat == finish.winner:
            return (0, 0, 0, 0)
        return (1, 0, -finish.claimed[seat], -finish.heights[seat])

    keys = [key(seat) for seat in range(seats)]
    return [sum(1 for other in keys if other < mine) for mine in keys]


def pool(rules: Mapping[str, Any], players: int) -> str:
    """The pool a game rates in: its normalized rules and its number of players, as an id that
    reads as the players and a short digest of the rules (``2p-…``)."""
    canonical = json.dumps({"rules": dict(rules), "players": players}, sort_keys=True)
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:10]
    return f"{players}p-{digest}"


def finish_of(game: Any, resigned: Sequence[int]) -> Finish:
    """The finish of a finished ``Game`` (its claimed columns and markers as it ended), with the
    seats that resigned in the order they did (its ``PlayerResigned`` events')."""
    seats = int(game.seats)
    claimed = [sum(1 for owner in game.claimed if owner == seat) for seat in range(seats)]
    heights = [sum(game.markers[seat]) for seat in range(seats)]
    return Finish(
        winner=game.winner,
        claimed=claimed,
        heights=heights,
        resigned=list(resigned),
        abandoned=game.finish_reason == "abandoned",
    )
