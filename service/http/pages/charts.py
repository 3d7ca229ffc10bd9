"""The profile page's rating charts, computed on the server: an SVG line of an account's rating
in one pool, from its start (a new account's rating) through each rated game it finished.

The template draws what ``rating_chart`` measures (coordinates in the SVG's own user units, its
``viewBox``): no script draws it, so the chart is there for a browser without scripts, and a
test reads it as it reads any page. The figures themselves are in a table next to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WIDTH = 640
HEIGHT = 260
LEFT = 56  # room for the rating's tick labels
RIGHT = 18
TOP = 14
BOTTOM = 44  # room for the games' tick labels and the axis's title
MAX_X_TICKS = 10


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    game: int  # 0: the start, before any rated game
    rating: float
    game_id: str | None


@dataclass(frozen=True)
class Tick:
    at: float  # the coordinate along its axis
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: int
    right: int  # the x of the plot's right edge
    top: int
    bottom: int  # the y of the plot's bottom edge
    points: list[Point]
    y_ticks: list[Tick]
    x_ticks: list[Tick]

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


def nice_step(span: float, wanted: int = 4) -> float:
    """A step of 1, 2 or 5 times a power of ten that cuts ``span`` into about ``wanted``."""
    raw = max(span, 1e-9) / wanted
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5):
        if raw <= factor * power:
            return float(factor * power)
    return float(10 * power)


def label(value: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    text = f"{value:.{decimals}f}"
    return "0" if text in ("-0", "-0.0", "-0.00") else text


def rating_chart(start: float, history: Sequence[Mapping[str, Any]]) -> Chart:
    """The chart of a rating that began at ``start`` and stood at each ``history`` entry's
    ``rating`` after that game (oldest first)."""
    ratings = [start, *(float(h["rating"]) for h in history)]
    games = len(ratings) - 1
    low, high = min(ratings), max(ratings)
    step = nice_step(high - low if high > low else 2.0)
    floor = math.floor(low / step) * step
    ceiling = math.ceil(high / step) * step
    if ceiling - floor < step:
        floor, ceiling = floor - step, ceiling + step
    right = WIDTH - RIGHT
    bottom = HEIGHT - BOTTOM

    def x_of(game: int) -> float:
        return LEFT + (right - LEFT) * game / max(games, 1)

    def y_of(value: float) -> float:
        return bottom - (bottom - TOP) * (value - floor) / (ceiling - floor)

    points = [
        Point(x_of(i), y_of(r), i, r, None if i == 0 else str(history[i - 1]["game_id"]))
        for i, r in enumerate(ratings)
    ]
    y_ticks = []
    count = round((ceiling - floor) / step)
    for k in range(count + 1):
        value = floor + k * step
        y_ticks.append(Tick(y_of(value), label(value, step)))
    every = max(1, math.ceil(games / MAX_X_TICKS))
    x_ticks = [Tick(x_of(g), str(g)) for g in range(0, games + 1, every)]
    return Chart(WIDTH, HEIGHT, LEFT, right, TOP, bottom, points, y_ticks, x_ticks)
