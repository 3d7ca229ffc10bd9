"""Legal-move generation: pure functions over plain lists, exactly per the rulings (A turn, 1-7).

Positions are lists indexed by column number (index 0 and 1 unused): ``runners[c]`` is the space
of the runner in column ``c`` (0 = none), ``own[c]`` the acting player's marker, ``claimed[c]``
the seat that claimed the column or -1.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

MAX_RUNNERS = 3
UNCLAIMED = -1

Sums = tuple[int, ...]
"""A legal move: the sums it plays, ascending (`(6, 10)`, `(7, 7)`, `(9,)`)."""


def pairings(dice: Sequence[int]) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """The three ways to split four dice into two pairs, as pairs of sums."""
    a, b, c, d = dice
    return (a + b, c + d), (a + c, b + d), (a + d, b + c)


class Board:
    """What legal-move generation needs to know about the table besides the runners.

    ``blocked[c]`` holds the spaces of column ``c`` where another player has a marker; it is only
    consulted under the jumping variant (None otherwise).
    """

    __slots__ = ("blocked", "claimed", "heights", "own", "steep_hill")

    def __init__(
        self,
        heights: Sequence[int],
        claimed: Sequence[int],
        own: Sequence[int],
        steep_hill: bool = False,
        blocked: Sequence[Container[int]] | None = None,
    ) -> None:
        self.heights = heights
        self.claimed = claimed
        self.own = own
        self.steep_hill = steep_hill
        self.blocked = blocked

    def _land(self, column: int, space: int) -> int:
        if self.blocked is not None:
            taken = self.blocked[column]
            while space in taken:  # the top space is never held by another player
                space += 1
        return space

    def step(self, column: int, runners: Sequence[int], n_runners: int) -> int:
        """The space a runner reaches by playing ``column`` once, or 0 when it is not playable."""
        if self.claimed[column] != UNCLAIMED:
            return 0
        at = runners[column]
        if at:
            return 0 if at >= self.heights[column] else self._land(column, at + 1)
        if n_runners >= MAX_RUNNERS:
            return 0
        mine = self.own[column]
        return self._land(column, mine if (self.steep_hill and mine) else mine + 1)

    def legal_moves(self, dice: Sequence[int], runners: Sequence[int]) -> list[Sums]:
        """Every legal move of a roll, each a tuple of sums sorted ascending, without duplicates.

        For each pairing (a, b): when a is playable and b is still playable after playing a, the
        option is both; otherwise each playable sum alone. An empty list is a bust.
        """
        n = sum(1 for at in runners if at)
        work = list(runners)
        options: set[Sums] = set()
        for a, b in pairings(dice):
            first = self.step(a, work, n)
            if first:
                before = work[a]
                work[a] = first
                both = self.step(b, work, n if before else n + 1)
                work[a] = before
                if both:
                    options.add((a, b) if a <= b else (b, a))
                    continue
                options.add((a,))
            if self.step(b, work, n):
                options.add((b,))
        return sorted(options)

    def play(self, sums: Sequence[int], runners: Sequence[int]) -> list[int]:
        """Runners after playing ``sums`` (assumed legal): placed or advanced, one sum at a time."""
        work = list(runners)
        n = sum(1 for at in work if at)
        for column in sums:
            space = self.step(column, work, n)
            if not work[column]:
                n += 1
            work[column] = space
        return work


def bust_probability_table(board: Board, runners: Sequence[int], faces: int = 6) -> tuple[int, int]:
    """(busting rolls, all rolls) over every ordered roll of four dice: exact bust odds."""
    busts = total = 0
    for a in range(1, faces + 1):
        for b in range(1, faces + 1):
            for c in range(1, faces + 1):
                for d in range(1, faces + 1):
                    total += 1
                    if not board.legal_moves((a, b, c, d), runners):
                        busts += 1
    return busts, total
