"""Board geometry and the rules object (variants), normalized and validated.

See docs/rules-rulings.md: columns are the sums of two dice; column ``s`` of a board played with
``f``-faced dice has height ``2·(f − |s − (f+1)|) + 1``.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from domain.errors import InvalidRequest

DICE_FACES = (6, 8)
MIN_PLAYERS, MAX_PLAYERS = 1, 8
SOLITAIRE_MODES = ("easy", "advanced")
SOLITAIRE_TARGETS = {"easy": 30, "advanced": 40}
COLUMNS_PLUS = {2: 5, 3: 4}  # "by_players": 4 or more players play to 3
RULE_FIELDS = ("columns_to_win", "jumping", "forced_move", "steep_hill", "solitaire", "dice_faces")
_RULE_VALUES = operator.itemgetter(*RULE_FIELDS)  # a dict's rule values, as a tuple, in C


def column_height(column: int, faces: int) -> int:
    """Spaces in ``column`` on the board for ``faces``-sided dice (3 at the edges, 13 at 7)."""
    return 2 * (faces - abs(column - (faces + 1))) + 1


@cache
def heights(faces: int) -> tuple[int, ...]:
    """Heights indexed by column number; indexes below 2 hold 0 (no such column)."""
    return (0, 0, *(column_height(c, faces) for c in range(2, 2 * faces + 1)))


def columns(faces: int) -> range:
    return range(2, 2 * faces + 1)


@dataclass(frozen=True, slots=True)
class Rules:
    columns_to_win: int = 3
    jumping: bool = False
    forced_move: bool = False
    steep_hill: bool = False
    solitaire: str | None = None
    dice_faces: int = 6

    @property
    def heights(self) -> tuple[int, ...]:
        return heights(self.dice_faces)

    @property
    def columns(self) -> range:
        return columns(self.dice_faces)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in RULE_FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rules:
        """Rebuild from an already normalized dict (as stored in a GameCreated event)."""
        values = _RULE_VALUES(data)
        try:
            return _rules(values)
        except TypeError:  # an unhashable value: not rules as normalized, but built as before
            return cls(*values)


@lru_cache(maxsize=256)
def _rules(values: tuple[Any, ...]) -> Rules:
    """Rules are few and immutable: each distinct one is built once."""
    return Rules(*values)


def _flag(raw: Mapping[str, Any], name: str) -> bool:
    value = raw.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidRequest(f"rules.{name} must be true or false")
    return value


def normalize_rules(raw: Mapping[str, Any] | None, players: int) -> Rules:
    """Validate a client's rules object for ``players`` players and resolve its defaults.

    Raises InvalidRequest (a bad request, never a refused action) for unknown fields, wrong types,
    values out of range, and the forbidden combination of jumping with forced_move.
    """
    if not MIN_PLAYERS <= players <= MAX_PLAYERS:
        raise InvalidRequest(f"a game has {MIN_PLAYERS} to {MAX_PLAYERS} players, not {players}")
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise InvalidRequest("rules must be an object")
    unknown = sorted(set(raw) - set(RULE_FIELDS))
    if unknown:
        raise InvalidRequest(f"unknown rule(s): {', '.join(map(str, unknown))}")

    faces = raw.get("dice_faces", 6)
    if faces is None:
        faces = 6
    if not isinstance(faces, int) or isinstance(faces, bool) or faces not in DICE_FACES:
        raise InvalidRequest("rules.dice_faces must be 6 or 8")
    n_columns = len(columns(faces))

    jumping = _flag(raw, "jumping")
    forced_move = _flag(raw, "forced_move")
    steep_hill = _flag(raw, "steep_hill")
    if jumping and forced_move:
        raise InvalidRequest("rules.jumping and rules.forced_move exclude each other")

    solitaire = raw.get("solitaire")
    if solitaire is not None and solitaire not in SOLITAIRE_MODES:
        raise InvalidRequest('rules.solitaire must be "easy", "advanced" or null')
    if players == 1:
        solitaire = solitaire or "easy"
    elif solitaire is not None:
        raise InvalidRequest("rules.solitaire is for one-player games only")

    to_win = raw.get("columns_to_win")
    if players == 1:
        if to_win is not None and to_win != n_columns:
            raise InvalidRequest(
                f"solitaire is played to all {n_columns} columns; columns_to_win cannot be set"
            )
        to_win = n_columns
    elif to_win is None:
        to_win = 3
    elif to_win == "by_players":
        to_win = COLUMNS_PLUS.get(players, 3)
    elif isinstance(to_win, bool) or not isinstance(to_win, int) or not 1 <= to_win <= n_columns:
        raise InvalidRequest(
            f'rules.columns_to_win must be an integer from 1 to {n_columns}, or "by_players"'
        )
    return Rules(to_win, jumping, forced_move, steep_hill, solitaire, faces)


def solitaire_rating(mode: str, turns: int) -> str:
    """The rating of a finished solitaire game of ``turns`` turns (rulings: Solitaire)."""
    if mode == "easy":
        return "Target met" if turns <= SOLITAIRE_TARGETS["easy"] else "Try again"
    if turns <= 30:
        return "Outstanding"
    if turns <= 35:
        return "Excellent"
    if turns <= 40:
        return "Very Good"
    return "Try again"
