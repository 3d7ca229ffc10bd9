"""Fair-play figures (contract 1.3): how close a seat's play came to the expert's, from the
analysis of a finished game (``domain.analysis``). Pure: the service keeps the figures per
(game, seat) and sums them per account and pool (service/application/analysis/fairplay.py).

A decision is **contested** when the expert's best choice is worth more than the runner-up by
more than ``CONTESTED`` (``value_best − value_second``): where every sensible player would
choose alike, agreeing with the expert says nothing, so only the other decisions are counted.
A turn the clock ended is a decision (its loss is in the analysis) but never contested: it is
no choice between the options. ``matched`` counts the contested decisions where the player
chose as the expert would (or as well: a loss of 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONTESTED = 0.02
"""The margin, in the analysis's values (a chance to win in games of two or more), by which the
best choice must beat the runner-up for a decision to be contested: two points of winning
chance: about two in five of a player's decisions in games of two (docs/ratings.md)."""


@dataclass(frozen=True)
class SeatFigures:
    """One seat's figures in one game."""

    seat: int
    decisions: int
    contested: int
    matched: int
    loss: float  # the sum of the contested decisions' losses


def contested(decision: Mapping[str, Any], threshold: float = CONTESTED) -> bool:
    second = decision.get("value_second")
    return second is not None and decision["value_best"] - second > threshold


def seat_figures(
    analysis: Mapping[str, Any], seats: int, threshold: float = CONTESTED
) -> list[SeatFigures]:
    """Each seat's figures from a game's analysis. ValueError for an analysis whose decisions
    do not give the runner-up's value (one kept before ``value_second`` existed)."""
    decisions: list[list[Mapping[str, Any]]] = [[] for _ in range(seats)]
    for decision in analysis["decisions"]:
        if "value_second" not in decision:
            raise ValueError("the analysis does not give each decision's runner-up value")
        decisions[int(decision["seat"])].append(decision)
    figures = []
    for seat, own in enumerate(decisions):
        close = [d for d in own if contested(d, threshold)]
        matched = [d for d in close if d["chosen"] == d["best"] or d["loss"] <= 0]
        loss = math.fsum(float(d["loss"]) for d in close)
        figures.append(SeatFigures(seat, len(own), len(close), len(matched), loss))
    return figures


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of sorted values, interpolated linearly between the closest
    ranks (numpy's default); None for no values."""
    if not ordered:
        return None
    at = (len(ordered) - 1) * q
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


__all__ = ["CONTESTED", "SeatFigures", "contested", "percentile", "seat_figures"]
