"""What a player to act can see, frozen: the input of strategies, bust odds and advice.

A ``Position`` is plain data (tuples indexed by column, as ``domain.moves`` uses), built from the
``Game`` aggregate (``Position.from_game``) or directly by a simulator (``Position.make``). It never
changes; playing on means building the next one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domain.game import Game
from domain.moves import UNCLAIMED, Board, Sums
from domain.rules import Rules

PHASES = ("roll", "move", "roll_or_stop")


def blocked_spaces(markers: Sequence[Sequence[int]], seat: int) -> list[frozenset[int]]:
    """Per column, the spaces where a player other than ``seat`` has a marker (jumping)."""
    others = [m for s, m in enumerate(markers) if s != seat]
    return [frozenset(m[c] for m in others if m[c]) for c in range(len(markers[seat]))]


def board_for(
    rules: Rules, markers: Sequence[Sequence[int]], claimed: Sequence[int], seat: int
) -> Board:
    """The legal-move view of the table for ``seat`` (as ``Game.board``)."""
    blocked = blocked_spaces(markers, seat) if rules.jumping else None
    return Board(rules.heights, claimed, markers[seat], rules.steep_hill, blocked)


def shares_a_space(markers: Sequence[Sequence[int]], seat: int, runners: Sequence[int]) -> bool:
    """A runner of ``seat`` stands on a space holding another player's marker (forced move)."""
    return any(
        at and any(m[c] == at for s, m in enumerate(markers) if s != seat)
        for c, at in enumerate(runners)
    )


@dataclass(frozen=True, slots=True)
class Position:
    rules: Rules
    seat: int
    """The player to act."""
    seats: int
    markers: tuple[tuple[int, ...], ...]
    """Per seat, the marker space in each column (indexed by column number, 0 = none)."""
    claimed: tuple[int, ...]
    """Per column, the seat that claimed it, or -1."""
    runners: tuple[int, ...]
    """The acting player's runners, per column (0 = none)."""
    resigned: tuple[bool, ...]
    phase: str
    """"roll" (a turn's first roll is due), "move" (dice rolled) or "roll_or_stop"."""
    dice: tuple[int, ...] | None
    """The dice rolled, in phase "move"; None otherwise."""
    moves: tuple[Sums, ...]
    """The legal moves of the dice, in phase "move" (never empty there: empty is a bust)."""
    forced_to_roll: bool
    """Forced-move variant: a runner shares a space with another player's marker."""
    turn_number: int

    @classmethod
    def from_game(cls, game: Game) -> Position:
        """The position of the player to act in a game in progress; ValueError otherwise."""
        if game.status != "in_progress" or game.current is None or game.phase is None:
            raise ValueError("no player is to act: the game is not in progress")
        in_move = game.phase == "move"
        return cls(
            rules=game.rules_obj,
            seat=game.current,
            seats=game.seats,
            markers=tuple(tuple(m) for m in game.markers),
            claimed=tuple(game.claimed),
            runners=tuple(game.runners),
            resigned=tuple(game.resigned),
            phase=game.phase,
            dice=tuple(game.dice) if in_move and game.dice else None,
            moves=tuple(tuple(m) for m in game.options) if in_move else (),
            forced_to_roll=game.forced_to_roll(),
            turn_number=game.turn_number,
        )

    @classmethod
    def make(
        cls,
        rules: Rules,
        markers: Sequence[Sequence[int]],
        *,
        seat: int = 0,
        claimed: Sequence[int] | None = None,
        runners: Sequence[int] | None = None,
        phase: str = "roll",
        dice: Sequence[int] | None = None,
        resigned: Sequence[bool] | None = None,
        turn_number: int = 1,
    ) -> Position:
        """A position from plain data; the legal moves (phase "move") and forced_to_roll are
        derived here, by the rules, so a simulator cannot get them wrong.

        ValueError for a phase "move" without dice, or dice that bust (no position has them:
        a bust ends the turn).
        """
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, not {phase!r}")
        n_cols = len(rules.heights)
        all_markers = tuple(tuple(m) for m in markers)
        own_runners = tuple(runners) if runners is not None else (0,) * n_cols
        claim = tuple(claimed) if claimed is not None else (UNCLAIMED,) * n_cols
        rolled: tuple[int, ...] | None = None
        moves: tuple[Sums, ...] = ()
        if phase == "move":
            if dice is None:
                raise ValueError('phase "move" needs the dice rolled')
            rolled = tuple(dice)
            board = board_for(rules, all_markers, claim, seat)
            moves = tuple(board.legal_moves(rolled, own_runners))
            if not moves:
                raise ValueError(f"{list(rolled)} busts: no position has a bust to play")
        return cls(
            rules=rules,
            seat=seat,
            seats=len(all_markers),
            markers=all_markers,
            claimed=claim,
            runners=own_runners,
            resigned=tuple(resigned) if resigned is not None else (False,) * len(all_markers),
            phase=phase,
            dice=rolled,
            moves=moves,
            forced_to_roll=rules.forced_move and shares_a_space(all_markers, seat, own_runners),
            turn_number=turn_number,
        )

    @property
    def own(self) -> tuple[int, ...]:
        """The acting player's markers."""
        return self.markers[self.seat]

    def board(self) -> Board:
        """The legal-move view of the table for the player to act (as ``Game.board``)."""
        return board_for(self.rules, self.markers, self.claimed, self.seat)

    def claimed_by(self, seat: int) -> int:
        """How many columns ``seat`` has claimed."""
        return sum(1 for owner in self.claimed if owner == seat)

    def stopping_wins(self) -> bool:
        """Stopping now (runners become markers) gives the player to act enough columns."""
        if self.phase != "roll_or_stop" or self.forced_to_roll:
            return False
        heights = self.rules.heights
        topped = sum(1 for c, at in enumerate(self.runners) if at and at == heights[c])
        return topped > 0 and self.claimed_by(self.seat) + topped >= self.rules.columns_to_win
