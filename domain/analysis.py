"""What was luck and what was play in a game, by the expert's judgement (contract 1.2, "Receipts
and analysis"). Pure: it reads a game's events as ``/events`` serves them (or an export holds
them) and replays them through the rules (``audit.replay_steps``); nothing secret is read.

**Values.** A value is the expert's (``ExpertStrategy``) worth of a point of the game for the
seat to act there, in the expert's own currency, so that its own choices lose nothing:

* games of two or more: its estimate of the seat's chance to win, less its tie-break (a
  hundredth per turn it expects the seat still to need after this turn: ``Params.tie_break``);
  a stop that wins is worth exactly 1. ``value_end`` is 1 for the winner and 0 for the others
  (0 for everybody in a game that ended without a winner);
* solitaire: minus the turns it expects the player still to take, the turn under way counted
  as one (the expert's worth of how a turn ends, minus 1). ``value_end`` is 0 when the game is
  won; a solitaire game resigned or abandoned keeps its last value.

**Rolls.** Before a roll the player stands at a point (a turn's start, or a "roll or stop"
with runners out). ``value_after`` is the worth of the dice rolled: the best of the moves they
offer, each valued as the expert values moves (``move_values``), or what busting leaves.
``value_before`` is the exact expectation of ``value_after`` over every ordered roll of four
dice (6⁴ or 8⁴, counted by their distinct multisets, and grouped by the moves they offer), so
``luck = value_after − value_before`` averages exactly zero at every roll.

**Decisions.** Each choice the rules leave the player: a move, when the dice offer two or more;
rolling on or stopping, when stopping is allowed (not under a forced move, and not a stop the
expert never weighs: one that leaves the board as the turn found it, under steep hill); and
letting the clock run out (``{"type": "timeout"}``: the turn is lost as a bust would lose it,
against the best the player could have done). ``value_chosen`` and ``value_best`` are the
expert's worth of the action taken and of its own choice, ``loss = value_best − value_chosen``
(never negative; 0 when the player chose as the expert would). A stop is worth what the turn
leaves (1 for a stop that wins), rolling on what ``TurnPlanner.roll_value`` says it is worth,
which is exactly what the expert compares with stopping. A resignation is not judged: it
leaves the game rather than plays it (the resigned seat's value falls to 0: drift).

**Per seat.** ``value_start`` is the worth of the first turn's start (every seat starts on the
empty table, so every seat gets the first player's figure); ``luck`` sums the seat's rolls'
luck, ``skill_loss`` its decisions' losses, and ``drift`` is the rest: ``value_end −
value_start = luck − skill_loss + drift`` (to float rounding). Drift holds the other seats'
dice and decisions, the estimate's own movement between points (a move's worth is judged by a
deeper look than the "roll or stop" after it), and, in solitaire, the turns ticking by (about
+1 per turn taken). A ``blunder`` is a decision that loses at least ``BLUNDERS[kind]``: 0.05
(five points of winning chance) in a game of two or more, half a turn in solitaire.

Each point of a game is also given as ``values`` (the seat to act's worth after each version),
which the replay page draws.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any

from domain.audit import Replay, ReplayRefused, record_problem
from domain.game import Game
from domain.moves import Sums
from domain.odds import distinct_rolls
from domain.position import Position
from domain.strategies.expert import ExpertStrategy
from domain.strategies.turn import NO_STOP, as_state, pack

BLUNDERS = {"chance": 0.05, "turns": 0.5}
"""The loss from which a decision counts as a blunder, per kind of value."""

ROLL = {"type": "roll"}
STOP = {"type": "stop"}
TIMEOUT = {"type": "timeout"}


class AnalysisRefused(Exception):
    """The history cannot be analysed: the rules refuse it, or a record is not an event as
    served. ``version`` is the first version to blame."""

    def __init__(self, version: int, detail: str) -> None:
        super().__init__(detail)
        self.version = version
        self.detail = detail


class Point:
    """What the expert makes of one state of a game, for the seat to act there."""

    def __init__(self, expert: ExpertStrategy, position: Position) -> None:
        self.position = position
        self.planner = expert.planner(position)
        self.runners = position.runners
        self.state = as_state(position.runners)
        self._moves: dict[tuple[Sums, ...], list[float]] = {}
        self._expected: float | None = None

    def stop(self) -> float | None:
        """What stopping is worth, or None when stopping is no choice here."""
        position = self.position
        if position.phase != "roll_or_stop" or position.forced_to_roll:
            return None
        worth = self.planner.stop_value(pack(self.state))
        return None if worth == NO_STOP else worth

    def roll(self) -> float:
        """What rolling on is worth, as the expert weighs it against stopping."""
        return self.planner.roll_value(self.runners)

    def bust(self) -> float:
        """What losing the turn's runners leaves (a bust, or a turn that timed out)."""
        return self.planner.bust_utility(self.state)

    def move_values(self, moves: tuple[Sums, ...]) -> list[float]:
        found = self._moves.get(moves)
        if found is None:
            found = self._moves[moves] = list(self.planner.move_values(self.runners, moves))
        return found

    def after(self, moves: tuple[Sums, ...]) -> float:
        """The worth of dice that offer ``moves`` (none: a bust): the best of them."""
        return max(self.move_values(moves)) if moves else self.bust()

    def expected(self) -> float:
        """The exact expectation of ``after`` over every ordered roll of the dice."""
        if self._expected is None:
            faces = self.position.rules.dice_faces
            board = self.position.board()
            groups: dict[tuple[Sums, ...], int] = {}
            for dice, n in distinct_rolls(faces):
                moves = tuple(board.legal_moves(dice, self.runners))
                groups[moves] = groups.get(moves, 0) + n
            total = math.fsum(n * self.after(moves) for moves, n in groups.items())
            self._expected = total / faces**4
        return self._expected

    def best(self) -> tuple[dict[str, Any], float]:
        """The expert's action here and its worth."""
        phase = self.position.phase
        if phase == "roll":
            return ROLL, self.expected()
        if phase == "move":
            moves = self.position.moves
            values = self.move_values(moves)
            i = max(range(len(moves)), key=values.__getitem__)  # the first of equals
            return {"type": "move", "sums": list(moves[i])}, values[i]
        stop, roll = self.stop(), self.roll()
        if stop is not None and roll <= stop:  # the expert rolls only when rolling is worth more
            return STOP, stop
        return ROLL, roll

    def value(self) -> float:
        return self.best()[1]


class Analysis:
    """The analysis of a game that goes on as its history grows (a game in progress): each
    point of the game is worked out once. ``extend`` with the events recorded since (checked as
    ``analyse`` checks them), ``advance(upto)``, then ``result(upto)`` for any version up to
    the furthest advanced to: the same answer, to the bit, as ``analyse(records, upto)``.

    It keeps the replay where it stands and what each step gave: the marks (a seat's value at a
    version), the rolls and decisions, and each step's own value, since an answer up to a
    version also values the point reached exactly there. Not thread-safe."""

    def __init__(self, records: Sequence[Any] = ()) -> None:
        self.records: list[Mapping[str, Any]] = []
        # Every point of a turn shares its planner, and a turn never comes back: one planner
        # kept (about 1.3 MB each) is as fast as the expert's usual 32, for a 32nd of the memory.
        self.expert = ExpertStrategy(cache_size=1)
        self.solo = False
        self.offset = 0.0
        self.seats = 0
        self.start: float | None = None  # the first turn's start, once the game has started
        self.started_at: int | None = None  # the version of the first step with a turn to play
        self.values: dict[tuple[int, int], float] = {}  # (version, seat) -> value
        self.decisions: list[dict[str, Any]] = []
        self.rolls: list[dict[str, Any]] = []
        self.steps: list[int] = []  # the versions the replay stood at between commands
        self.points: dict[int, tuple[int, float]] = {}  # step version -> (seat to act, value)
        self._replay: Replay | None = None
        self._tip: Point | None = None  # the point at the last step, for the next command
        self._unstarted: tuple[Any, int] | float | None = None  # a lobby's first turn
        self.extend(records)

    @property
    def reached(self) -> int:
        """The version advanced to: ``result`` answers for every version up to it."""
        return self.steps[-1] if self.steps else 0

    def extend(self, records: Sequence[Any]) -> None:
        """The events recorded after those it has. AnalysisRefused for one that is not well
        formed, or not at its version; nothing is added then."""
        for index, record in enumerate(records, start=len(self.records)):
            problem = record_problem(record)
            if problem is None and record["version"] != index + 1:
                problem = f"version {record['version']} stands where version {index + 1} should"
            if problem is not None:
                raise AnalysisRefused(index + 1, f"version {index + 1}: {problem}")
        self.records.extend(records)
        if self._replay is not None:
            self._replay.extend(records)

    # ------------------------------------------------------------------ recording
    def mark(self, version: int, seat: int, value: float, *, raw: bool = False) -> None:
        self.values[(version, seat)] = value if raw else value + self.offset

    def decide(
        self,
        version: int,
        seat: int,
        chosen: dict[str, Any],
        value_chosen: float,
        best: dict[str, Any],
        value_best: float,
        second: float | None = None,
    ) -> None:
        if value_chosen >= value_best:  # the choice was the expert's, or as good
            best, value_best = chosen, value_chosen
        self.decisions.append(
            {
                "version": version,
                "seat": seat,
                "chosen": chosen,
                "best": best,
                "value_chosen": value_chosen + self.offset,
                "value_best": value_best + self.offset,
                "loss": value_best - value_chosen,
                # the runner-up's worth: how contested the choice was (None: a timeout)
                "value_second": None if second is None else second + self.offset,
            }
        )

    # ------------------------------------------------------------------ the commands
    def command(self, point: Point | None, record: Mapping[str, Any]) -> None:
        kind, data, version = record["type"], record["data"], record["version"]
        if kind == "PlayerResigned":
            if not self.solo:
                self.mark(version, data["seat"], 0.0, raw=True)
            return
        if point is None:
            return
        seat = point.position.seat
        if kind == "DiceRolled":
            stop = point.stop()
            if stop is not None:
                roll = point.roll()
                self.decide(version, seat, ROLL, roll, STOP, stop, min(roll, stop))
            moves = tuple(tuple(m) for m in data["moves"])
            before, after = point.expected(), point.after(moves)
            self.rolls.append(
                {
                    "version": version,
                    "seat": seat,
                    "dice": list(data["dice"]),
                    "value_before": before + self.offset,
                    "value_after": after + self.offset,
                    "luck": after - before,
                    "bust": not moves,
                }
            )
            self.mark(version, seat, after)
        elif kind == "MovePlayed":
            moves = point.position.moves
            chosen = tuple(sorted(data["sums"]))
            if len(moves) >= 2:
                values = point.move_values(moves)
                best, value_best = point.best()
                move = {"type": "move", "sums": list(chosen)}
                second = sorted(values)[-2]
                self.decide(
                    version, seat, move, values[moves.index(chosen)], best, value_best, second
                )
        elif kind == "TurnStopped":
            stop = point.stop()
            if stop is not None:
                roll = point.roll()
                self.decide(version, seat, STOP, stop, ROLL, roll, min(roll, stop))
            else:  # not weighed by the expert (see the module): what the turn leaves
                stop = point.planner.utility(point.state)
            self.mark(version, seat, stop)
        elif kind == "TurnTimedOut":
            best, value_best = point.best()
            self.decide(version, seat, TIMEOUT, point.bust(), best, value_best)
            self.mark(version, seat, point.bust())

    # ------------------------------------------------------------------ the replay
    def advance(self, upto: int) -> None:
        """Follows the game to the first point at or after ``upto`` (ValueError for a version
        it does not have; AnalysisRefused where the rules refuse the history)."""
        if not 1 <= upto <= len(self.records):
            raise ValueError(f"the game has versions 1 to {len(self.records)}, not {upto}")
        try:
            if self._replay is None:
                self._replay = Replay(self.records)
                self._step(self._replay.game)
            replay = self._replay
            while self.reached < upto:
                # A command is read once the replay has accepted it (at the next step): a
                # forged one is refused at its version, never half analysed.
                record = replay.next_record()
                assert record is not None  # the replay stands at a version below the records'
                pending = (self._tip, record)
                replay.perform()
                self.command(*pending)
                self._step(replay.game)
            replay.next_record()  # refused here too when the next record is no command
        except ReplayRefused as exc:
            raise AnalysisRefused(exc.version, exc.detail) from None

    def _step(self, game: Game) -> None:
        if not self.seats:
            self.seats = game.seats
            self.solo = game.seats == 1
            self.offset = -1.0 if self.solo else 0.0
            self._unstarted = (game.rules_obj, len(game.claimed))
        point = None
        if game.status == "in_progress" and game.current is not None:
            point = Point(self.expert, Position.from_game(game))
            value = point.value()
            if self.start is None:
                self.start, self.started_at = value + self.offset, game.version
            seat = point.position.seat
            self.points[game.version] = (seat, value)
            if (game.version, seat) not in self.values:
                self.mark(game.version, seat, value)
        self.steps.append(game.version)
        self._tip = point

    def _start_for(self, step: int) -> float:
        """``value_start`` as an analysis that stops at this step gives it."""
        if self.started_at is not None and step >= self.started_at:
            assert self.start is not None
            return self.start
        # never started (a lobby): the first turn as it would have been
        if not isinstance(self._unstarted, float):
            assert self._unstarted is not None
            rules, columns = self._unstarted
            position = Position.make(rules, [[0] * columns] * self.seats)
            self._unstarted = Point(self.expert, position).value() + self.offset
        return self._unstarted

    # ------------------------------------------------------------------ the answer
    def result(self, upto: int) -> dict[str, Any]:
        """The analysis up to ``upto``, once advanced that far."""
        if not 1 <= upto <= self.reached:
            raise ValueError(f"analysed to version {self.reached}, not {upto}")
        step = self.steps[bisect_left(self.steps, upto)]  # where an analysis to upto stops
        values = {key: value for key, value in self.values.items() if key[0] <= upto}
        if step == upto and step in self.points:  # the point reached exactly there
            seat, value = self.points[step]
            values[(step, seat)] = value + self.offset
        start = self._start_for(step)
        last: dict[int, float] = {}
        for (_, seat), value in sorted(values.items()):
            last[seat] = value
        rolls = [dict(r) for r in self.rolls if r["version"] <= upto]
        decisions = [dict(d) for d in self.decisions if d["version"] <= upto]
        finished = next((r for r in self.records[:upto] if r["type"] == "GameFinished"), None)
        end: list[float] = []
        for seat in range(self.seats):
            if finished is None:
                end.append(last.get(seat, start))
            elif self.solo:
                won = finished["data"].get("winner") == 0
                end.append(0.0 if won else last.get(seat, start))
            else:
                end.append(1.0 if finished["data"].get("winner") == seat else 0.0)
            if finished is not None:
                values[(finished["version"], seat)] = end[seat]
        kind = "turns" if self.solo else "chance"
        threshold = BLUNDERS[kind]
        seats = []
        for seat in range(self.seats):
            luck = math.fsum(r["luck"] for r in rolls if r["seat"] == seat)
            losses = [d["loss"] for d in decisions if d["seat"] == seat]
            skill_loss = math.fsum(losses)
            seats.append(
                {
                    "seat": seat,
                    "value_start": start,
                    "value_end": end[seat],
                    "luck": luck,
                    "skill_loss": skill_loss,
                    "drift": end[seat] - start - luck + skill_loss,
                    "decisions": len(losses),
                    "blunders": sum(1 for loss in losses if loss >= threshold),
                }
            )
        expert = self.expert
        return {
            "strategy": expert.id,
            "strategy_version": expert.version,
            "version": upto,
            "finished": finished is not None,
            "kind": kind,
            "blunder_threshold": threshold,
            "seats": seats,
            "decisions": decisions,
            "rolls": rolls,
            "values": [
                {"version": version, "seat": seat, "value": value}
                for (version, seat), value in sorted(values.items())
            ],
        }


def analyse(records: Sequence[Any], version: int | None = None) -> dict[str, Any]:
    """The analysis of a game from its events as served, up to ``version`` (default: all).

    AnalysisRefused for a history that is not well formed or that the rules refuse, naming the
    first version to blame; ValueError for a ``version`` outside 1..len(records). (``Analysis``
    gives the same answers for a game that goes on, each step worked out once.)"""
    upto = len(records) if version is None else version
    if not records or not 1 <= upto <= len(records):
        raise ValueError(f"the game has versions 1 to {len(records)}, not {version}")
    analysis = Analysis(records)
    analysis.advance(upto)
    return analysis.result(upto)


__all__ = ["BLUNDERS", "Analysis", "AnalysisRefused", "Point", "analyse"]
