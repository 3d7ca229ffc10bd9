"""The commands a player gives, typed: parsed once from a request or a transcript, then judged.

Parsing (``parse_action``) checks only the *form* of an action, as python-chess's ``Move.from_uci``
does: which kind it is and that its fields have the right types. Whether it is legal now is the
``Game`` aggregate's decision (``Game.act``), as ``is_legal`` is python-chess's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from domain.errors import InvalidRequest

MAX_ENTROPY = 64


@dataclass(frozen=True, slots=True)
class Roll:
    """Roll four dice: ``dice`` for a manual-dice game; ``entropy`` mixes a player's text into a
    server draw (contract 1.1)."""

    dice: Any = None
    """As sent (a manual-dice roll): judged by the rules after the turn checks (invalid_dice)."""
    entropy: str | None = None


@dataclass(frozen=True, slots=True)
class Move:
    """Play one legal move of the dice rolled: its sums, sent in any order (``parse_action``
    sorts them: ``[10, 6]`` and ``[6, 10]`` are one command, and one Idempotency-Key's)."""

    sums: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Stop:
    """End the turn: runners become markers."""


@dataclass(frozen=True, slots=True)
class Resign:
    """Leave the game (at any time)."""


Command = Roll | Move | Stop | Resign
KINDS = {"roll": Roll, "move": Move, "stop": Stop, "resign": Resign}


def is_int(value: Any) -> TypeGuard[int]:
    """An integer, and not a bool (``True == 1`` in Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def visible_ascii(value: Any, limit: int = MAX_ENTROPY) -> bool:
    """1 to ``limit`` visible ASCII characters (0x21..0x7e)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= limit
        and all("\x21" <= ch <= "\x7e" for ch in value)
    )


def to_dict(command: Command) -> dict[str, Any]:
    """The contract's JSON form of a command (``{"type": "move", "sums": [6, 8]}``)."""
    if isinstance(command, Roll):
        out: dict[str, Any] = {"type": "roll"}
        if command.dice is not None:  # as sent: a list (kept as a tuple), or anything else
            out["dice"] = list(command.dice) if isinstance(command.dice, tuple) else command.dice
        if command.entropy is not None:
            out["entropy"] = command.entropy
        return out
    if isinstance(command, Move):
        return {"type": "move", "sums": list(command.sums)}
    return {"type": "stop" if isinstance(command, Stop) else "resign"}


def parse_action(action: Mapping[str, Any]) -> Command:
    """The command an action object describes; InvalidRequest when its form is wrong.

    Dice are kept as sent: their values are judged by the rules, after the turn checks, as
    ``invalid_dice`` (contract: the order of checks).
    """
    kind = action.get("type")
    if kind == "roll":
        entropy = action.get("entropy")
        if entropy is not None and not visible_ascii(entropy):
            raise InvalidRequest(f"entropy must be 1 to {MAX_ENTROPY} visible ASCII characters")
        dice = action.get("dice")
        return Roll(dice=tuple(dice) if isinstance(dice, list) else dice, entropy=entropy)
    if kind == "move":
        sums = action.get("sums")
        if not isinstance(sums, list | tuple) or not sums or not all(is_int(s) for s in sums):
            raise InvalidRequest("sums must be a non-empty list of integers")
        return Move(tuple(sorted(sums)))
    if kind == "stop":
        return Stop()
    if kind == "resign":
        return Resign()
    raise InvalidRequest(f"unknown action type {kind!r}; use roll, move, stop or resign")


@dataclass(frozen=True, slots=True)
class NewGame:
    """How a game is set up (``POST /v1/games``, a transcript's header): judged by ``Game.start``.

    Either ``players`` (their names: the game starts at once) or ``seats`` (a lobby).
    """

    players: Sequence[str | Mapping[str, Any]] | None = None
    """Names, or ``{"name": …, "bot": <strategy id>}`` for computer players."""
    seats: int | None = None
    rules: Mapping[str, Any] | None = None
    dice: str = "server"
    first_player: int | None = None
    client_seed: str | None = None
    clock: Mapping[str, Any] | None = None
    """``{"turn_seconds": T}``: each turn times out T seconds after it starts."""
    accounts: Sequence[str | None] | None = None
    """Each seat's account handle (contract 1.2), None for an anonymous seat; a lobby's may name
    seat 0 only (its creator)."""
    rated: bool = False
    """A rated game (contract 1.2): server dice, two or more seats, every seat an account."""
    abortable: bool | None = None
    """Whether a rated game is aborted when it ends before every seat has played a turn
    (contract 1.3). None: as the rules are now (so, for a rated game); a replay gives what
    its history recorded, so that games recorded before the rule replay as they were."""
