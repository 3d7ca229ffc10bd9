"""Exact bust odds, fast: counting the rolls that bust without generating their moves.

A roll busts exactly when none of its six pair-sums can be played as a first step: the legal-move
generator (``Board.legal_moves``) offers a pairing (a, b) as soon as a or b alone is playable, so a
roll has a move iff one of its sums is playable now. A roll therefore matters only through the set
of columns its sums hit, a bit mask. Per number of faces the masks of all ``faces**4`` ordered
rolls are counted once (a few hundred distinct masks); the busting rolls of a position are those
whose mask misses every playable column, counted once per playable mask and cached.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import cache
from itertools import combinations_with_replacement, product
from math import factorial

from domain.moves import Board, pairings
from domain.position import Position

Roll = tuple[int, int, int, int]


def sums_mask(dice: Sequence[int]) -> int:
    """The columns hit by the pair-sums of four dice, as bits (bit ``c`` for column ``c``)."""
    mask = 0
    for a, b in pairings(dice):
        mask |= (1 << a) | (1 << b)
    return mask


@cache
def roll_masks(faces: int) -> tuple[tuple[int, int], ...]:
    """(mask, how many ordered rolls have it) for every distinct mask of ``faces``-sided dice."""
    counts = Counter(sums_mask(dice) for dice in product(range(1, faces + 1), repeat=4))
    return tuple(sorted(counts.items()))


@cache
def distinct_rolls(faces: int) -> tuple[tuple[Roll, int], ...]:
    """Every roll as a sorted multiset of four dice with its number of orderings
    (126 rolls for six faces, 330 for eight; the counts add up to ``faces**4``)."""
    out = []
    for dice in combinations_with_replacement(range(1, faces + 1), 4):
        orderings = factorial(4)
        for n in Counter(dice).values():
            orderings //= factorial(n)
        out.append((dice, orderings))
    return tuple(out)


@cache
def busting_rolls(playable: int, faces: int) -> int:
    """How many of the ``faces**4`` ordered rolls hit none of the ``playable`` columns."""
    return sum(n for mask, n in roll_masks(faces) if not mask & playable)


def playable_mask(board: Board, runners: Sequence[int]) -> int:
    """The columns a first step can be played in (``Board.step`` is nonzero), as bits."""
    n = sum(1 for at in runners if at)
    mask = 0
    for column in range(2, len(board.heights)):
        if board.step(column, runners, n):
            mask |= 1 << column
    return mask


def bust_chance_of(board: Board, runners: Sequence[int], faces: int) -> float:
    """The chance that a roll of four ``faces``-sided dice busts with these runners."""
    return busting_rolls(playable_mask(board, runners), faces) / faces**4


def bust_chance(position: Position) -> float:
    """The exact chance that rolling now busts the player to act (all ordered rolls counted)."""
    return bust_chance_of(position.board(), position.runners, position.rules.dice_faces)


def bust_chance_after(position: Position, sums: Sequence[int]) -> float:
    """The exact chance of busting on the next roll after playing ``sums``, one of the legal
    moves of the position (ValueError otherwise)."""
    move = tuple(sorted(sums))
    if move not in position.moves:
        raise ValueError(f"{list(move)} is not a legal move here")
    board = position.board()
    return bust_chance_of(board, board.play(move, position.runners), position.rules.dice_faces)
