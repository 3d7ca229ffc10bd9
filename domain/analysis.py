"""What was luck and what was play in a game, by the expert's judgement (contract 1.2, "Receipts
and analysis"). Pure: it reads a game's events as ``/events`` serves them (or an export holds
them) and replays them through the rules (``audit.replay_steps``); nothing secret is read.

**Values.** A value is what a point of the game is worth to a seat, read off the expert's
(``ExpertStrategy``) own worth of it through a strictly increasing map learned from its
self-play (``Scale``, ``domain.value_tables``), so that it means what it says and the expert's
own choices still lose nothing (the map keeps its order):

* games of two or more: the seat to act's **chance to win**, in [0, 1] (the expert's
  tie-break, which it plays by, is not in it); a stop that wins is worth exactly 1. The other
  seats share the rest as the expert's race model ranks them (with three or more players,
  each one's share through a map learned for it, ``Scale.others``), so every seat has a value
  at every point and they sum to 1. ``value_end`` is 1 for the winner and 0 for the others (0
  for everybody in a game that ended without a winner);
* solitaire: minus the **turns** the player is expected still to take, the turn under way
  counted as one (−1 exactly for a stop that wins). ``value_end`` is 0 when the game is won; a
  solitaire game resigned or abandoned keeps its last value.

Kinds of game the self-play did not measure take the nearest measured one's map (``scale_for``);
docs/analysis.md lists them and the calibration measured (``python -m bench.calibration``).

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

**Per seat.** ``value_start`` is the seat's value at the first turn's start; ``luck`` sums
the seat's rolls' luck, ``skill_loss`` its decisions' losses, and ``drift`` is the rest:
``value_end − value_start = luck − skill_loss + drift`` (to float rounding). Drift holds the
other seats' dice and decisions, the estimate's own movement between points (a move's worth is
judged by a deeper look than the "roll or stop" after it), and, in solitaire, the turns ticking
by (about +1 per turn taken). A ``blunder`` is a decision that loses at least
``BLUNDERS[kind]``: 0.05 (five points of winning chance) in a game of two or more, half a turn
in solitaire.

Each point of a game is also given as ``values``: every seat's value after each version,
which the replay page draws.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from domain.audit import Replay, ReplayRefused, record_problem
from domain.game import Game
from domain.moves import Sums
from domain.position import Position
from domain.rules import Rules
from domain.strategies.expert import ExpertStrategy, Valuation
from domain.strategies.turn import NO_STOP, Shared, as_state, offered, pack, pairings_table
from domain.value_tables import TABLES

VALUES_VERSION = "2"
"""The map from the expert's worth of a point to the served values (domain/value_tables.py):
changed whenever the map is fitted again or its form changes."""
KEY = f"{ExpertStrategy.version}/values-{VALUES_VERSION}"
"""What a kept analysis (and its job) is keyed by: a new expert or new values make the answers
kept under the old key unread, and they are worked out again when asked for."""

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


def table_key(rules: Rules, seats: int) -> str:
    """The name of a kind of game in ``domain.value_tables``: players, dice, the columns to win
    (or the solitaire mode) and the rules options."""
    parts = [f"{seats}p", f"d{rules.dice_faces}"]
    parts.append(rules.solitaire or "easy" if seats == 1 else f"c{rules.columns_to_win}")
    parts += [flag for flag in ("jumping", "steep_hill", "forced_move") if getattr(rules, flag)]
    return "-".join(parts)


class Scale:
    """The value served for the expert's own worth of a point (``raw``), one kind of game.

    The expert's worth is not itself a chance or a count of turns (its tie-break, a turns-left
    formula fitted to races to three columns), but it ranks points as the expert does. The
    served value is a strictly increasing map of it, learned from the expert's self-play
    (``domain.value_tables``, written by ``python -m bench.calibration --fit``): rankings, hence
    the expert's choices and the sign of every loss, stay the same, and the value means what
    it says. ``chance``: the chance to win, in [0, 1], 1 exactly for a stop that wins.
    ``turns``: minus the turns still to take, this one included (−1 exactly for a stop that
    wins). Between knots the map is linear."""

    def __init__(
        self,
        kind: str,
        knots: Sequence[Sequence[float]],
        name: str,
        fitted: str,
        others: Scale | None = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.fitted = fitted  # the table's name, or "" for the expert's own figures
        # with 3+ players: the map of a seat not to act, from its race-model share of the rest
        self.others = others
        if kind == "chance":  # the anchors: a win is 1, far below the worst point seen 0
            first = knots[0][0] if knots else 0.0
            knots = (
                [(first - 1.0, 0.0), *knots, (1.0, 1.0)] if knots else [(-1.0, -1.0), (1.0, 1.0)]
            )
        else:  # turns: a stop that wins leaves 0 more turns
            knots = [(0.0, 0.0), *knots]
        self.xs = [float(x) for x, _ in knots]
        self.ys = [float(y) for _, y in knots]
        if kind == "turns":  # past the last knot: in proportion, as the expert's own figure
            x, y = self.xs[-1], self.ys[-1]
            self.beyond = y / x if x > 0 else 1.0

    @property
    def calibrated(self) -> bool:
        """Fitted on this very kind of game (not a neighbour's table, nor none)."""
        return self.fitted == self.name

    def _line(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        i = bisect_right(xs, x)
        if i >= len(xs):
            return ys[-1] + (x - xs[-1]) * self.beyond
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)

    def __call__(self, raw: float) -> float:
        if self.kind == "chance":
            if raw >= 1.0:
                return 1.0
            if raw <= self.xs[0]:
                return 0.0
            return min(1.0, max(0.0, self._line(raw)))
        # turns: raw is minus the turns the expert expects after this one
        return -1.0 - self._line(max(0.0, -raw))


FALLBACKS = {
    "chance": ("2p-d{faces}-c3", "2p-d6-c3"),
    "turns": ("1p-d{faces}-{mode}", "1p-d6-{mode}", "1p-d6-easy"),
}


@cache
def scale_for(rules: Rules, seats: int) -> Scale:
    """The scale of a kind of game: its own table when the self-play measured it, else the
    nearest one measured (the same players and dice without the options; then two players or
    easy solitaire on six-sided dice), else the expert's own figures (clipped into [0, 1])."""
    name = table_key(rules, seats)
    kind = "turns" if seats == 1 else "chance"
    plain = "-".join(name.split("-")[:3])
    mode = rules.solitaire or "easy"
    for key in (
        name,
        plain,
        *(k.format(faces=rules.dice_faces, mode=mode) for k in FALLBACKS[kind]),
    ):
        table = TABLES.get(key)
        if table is not None and table["kind"] == kind:
            return Scale(kind, table["knots"], name, key, others_for(rules, seats))
    return Scale(kind, [], name, "", others_for(rules, seats))


def others_for(rules: Rules, seats: int) -> Scale | None:
    """The map of the seats not to act, fitted per number of players (3 and 4; the others
    borrow the nearest number's, on the same dice if fitted, else six-sided); none for 1 or 2."""
    if seats < 3:
        return None
    fitted = [
        (abs(int(key.split("p-")[0]) - seats), key.split("-")[1] != f"d{rules.dice_faces}", key)
        for key, table in TABLES.items()
        if "others" in table and key.endswith("-c3")
    ]
    if not fitted:
        return None
    key = min(fitted)[2]
    return Scale("chance", TABLES[key]["others"], table_key(rules, seats), key)


def shares(valuation: Valuation, seats: int, resigned: Sequence[bool], seat: int) -> list[float]:
    """How the seats other than ``seat`` share what ``seat`` does not win: as the expert's race
    model ranks them, each one's chance of beating every other player still in, by turns left
    (normalised by the caller). Resigned seats get nothing."""
    turns = dict(zip(valuation.rivals, valuation.rivals_turns(0), strict=True))
    turns[seat] = valuation.mine(())[0]
    spread_per_turn = valuation.params.variance_per_turn
    out = [0.0] * seats
    for r in valuation.rivals:
        chance = 1.0
        for q, theirs in turns.items():
            if q != r:
                spread = math.sqrt(spread_per_turn * (turns[r] + theirs) + 0.25) * math.sqrt(2)
                chance *= 0.5 * (1 + math.erf((theirs - turns[r]) / spread))
        out[r] = chance
    total = math.fsum(out)
    if total <= 0:  # nobody stands a chance by the model: alike
        live = [r for r in range(seats) if r != seat and not resigned[r]]
        return [1 / len(live) if r in live else 0.0 for r in range(seats)]
    return [w / total for w in out]


class Point:
    """What the expert makes of one state of a game, for the seat to act there: every figure in
    the value served (``Scale``), every choice in the expert's own terms."""

    def __init__(
        self, expert: ExpertStrategy, position: Position, scale: Scale | None = None
    ) -> None:
        self.position = position
        self.scale = scale or scale_for(position.rules, position.seats)
        self.expert = expert
        self.planner = expert.planner(position)
        self.runners = position.runners
        self.state = as_state(position.runners)
        self._raw: dict[tuple[Sums, ...], list[float]] = {}
        self._moves: dict[tuple[Sums, ...], list[float]] = {}
        self._expected: float | None = None
        self._shares: list[float] | None = None

    def _stop(self) -> float | None:
        position = self.position
        if position.phase != "roll_or_stop" or position.forced_to_roll:
            return None
        worth = self.planner.stop_value(pack(self.state))
        return None if worth == NO_STOP else worth

    def stop(self) -> float | None:
        """What stopping is worth, or None when stopping is no choice here."""
        worth = self._stop()
        return None if worth is None else self.scale(worth)

    def roll(self) -> float:
        """What rolling on is worth, as the expert weighs it against stopping."""
        return self.scale(self.planner.roll_value(self.runners))

    def bust(self) -> float:
        """What losing the turn's runners leaves (a bust, or a turn that timed out)."""
        return self.scale(self.planner.bust_utility(self.state))

    def leave(self) -> float:
        """What the turn leaves if it ends here (a stop the expert does not weigh)."""
        return self.scale(self.planner.utility(self.state))

    def _raw_moves(self, moves: tuple[Sums, ...]) -> list[float]:
        found = self._raw.get(moves)
        if found is None:
            found = self._raw[moves] = list(self.planner.move_values(self.runners, moves))
        return found

    def move_values(self, moves: tuple[Sums, ...]) -> list[float]:
        found = self._moves.get(moves)
        if found is None:
            found = self._moves[moves] = [self.scale(value) for value in self._raw_moves(moves)]
        return found

    def after(self, moves: tuple[Sums, ...]) -> float:
        """The worth of dice that offer ``moves`` (none: a bust): the best of them."""
        return max(self.move_values(moves)) if moves else self.bust()

    def expected(self) -> float:
        """The exact expectation of ``after`` over every ordered roll of the dice."""
        if self._expected is None:
            faces = self.position.rules.dice_faces
            # the moves of each roll as the planner sees the table: per pairing of two sums,
            # what it offers (tests/test_strategies.py: they are ``Board.legal_moves``)
            shape, out = self.planner.shape(pack(self.state))
            offers: dict[tuple[int, int], tuple[Sums, ...]] = {}
            groups: dict[tuple[Sums, ...], int] = {}
            for n, pairs in pairings_table(faces):
                moves: set[Sums] = set()
                for a, b in pairs:
                    found = offers.get((a, b))
                    if found is None:
                        found = offers[(a, b)] = offered(shape, out, ((a, b),))
                    moves.update(found)
                key = tuple(sorted(moves))
                groups[key] = groups.get(key, 0) + n
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
            raw = self._raw_moves(moves)
            i = max(range(len(moves)), key=raw.__getitem__)  # the first of equals
            return {"type": "move", "sums": list(moves[i])}, self.move_values(moves)[i]
        stop, roll = self._stop(), self.planner.roll_value(self.runners)
        if stop is not None and roll <= stop:  # the expert rolls only when rolling is worth more
            return STOP, self.scale(stop)
        return ROLL, self.scale(roll)

    def value(self) -> float:
        return self.best()[1]

    def race(self, value: float) -> list[float]:
        """Every seat's value when the seat to act has ``value``, the others sharing the rest
        by the expert's race model alone (what their map is fitted from)."""
        position = self.position
        if self._shares is None:
            valuation = Valuation(position, self.expert.params)
            self._shares = shares(valuation, position.seats, position.resigned, position.seat)
        out = [(1.0 - value) * share for share in self._shares]
        out[position.seat] = value
        return out

    def seats(self, value: float) -> list[float]:
        """Every seat's value when the seat to act has ``value``: alone, that value; against
        others, chances that sum to 1 (the others share what it does not win)."""
        position = self.position
        if position.seats == 1:
            return [value]
        out = self.race(value)
        others = self.scale.others
        if others is None:
            return out
        # the race model is too confident for the others: each through its own learned map,
        # then scaled to share exactly what the seat to act does not win
        seat = position.seat
        mapped = [others(v) if r != seat and v > 0 else 0.0 for r, v in enumerate(out)]
        total = math.fsum(mapped)
        if total <= 0:
            return out
        out = [(1.0 - value) * m / total for m in mapped]
        out[seat] = value
        return out


class Analysis:
    """The analysis of a game that goes on as its history grows (a game in progress): each
    point of the game is worked out once. ``extend`` with the events recorded since (checked as
    ``analyse`` checks them), ``advance(upto)``, then ``result(upto)`` for any version up to
    the furthest advanced to: the same answer, to the bit, as ``analyse(records, upto)``.

    It keeps the replay where it stands and what each step gave: the marks (a seat's value at a
    version), the rolls and decisions, and each step's own value, since an answer up to a
    version also values the point reached exactly there. Not thread-safe."""

    def __init__(self, records: Sequence[Any] = (), shared: Shared | None = None) -> None:
        """``shared``: the points' runners and children (``Shared``: what depends on the points
        alone) kept from the analyses before, one at a time: an analyst's next game asks for
        mostly the same points (docs/performance.md, "Analysis"). The answers are the same."""
        self.records: list[Mapping[str, Any]] = []
        # Every point of a turn shares its planner, and a turn never comes back: one planner
        # kept (about 1.3 MB each) is as fast as the expert's usual 32, for a 32nd of the memory.
        self.expert = ExpertStrategy(cache_size=1, shared=shared)
        self.solo = False
        self.seats = 0
        self.scale: Scale | None = None
        self.start: list[float] | None = None  # every seat's at the first turn's start
        self.started_at: int | None = None  # the version of the first step with a turn to play
        self.values: dict[tuple[int, int], float] = {}  # (version, seat) -> value
        self.decisions: list[dict[str, Any]] = []
        self.rolls: list[dict[str, Any]] = []
        self.steps: list[int] = []  # the versions the replay stood at between commands
        self.points: dict[int, tuple[int, list[float]]] = {}  # step -> (seat to act, values)
        self._replay: Replay | None = None
        self._tip: Point | None = None  # the point at the last step, for the next command
        self._unstarted: tuple[Any, int] | list[float] | None = None  # a lobby's first turn
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
    def mark(self, version: int, point: Point, value: float) -> None:
        """The seat to act at ``point`` has ``value`` at ``version``: every seat's value then."""
        for seat, worth in enumerate(point.seats(value)):
            self.values[(version, seat)] = worth

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
                "value_chosen": value_chosen,
                "value_best": value_best,
                "loss": value_best - value_chosen,
                # the runner-up's worth: how contested the choice was (None: a timeout)
                "value_second": second,
            }
        )

    # ------------------------------------------------------------------ the commands
    def command(self, point: Point | None, record: Mapping[str, Any]) -> None:
        kind, data, version = record["type"], record["data"], record["version"]
        if kind == "PlayerResigned":
            if not self.solo:
                self.values[(version, data["seat"])] = 0.0  # the next point shares out the rest
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
                    "value_before": before,
                    "value_after": after,
                    "luck": after - before,
                    "bust": not moves,
                }
            )
            self.mark(version, point, after)
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
                stop = point.leave()
            self.mark(version, point, stop)
        elif kind == "TurnTimedOut":
            best, value_best = point.best()
            self.decide(version, seat, TIMEOUT, point.bust(), best, value_best)
            self.mark(version, point, point.bust())

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
            self.scale = scale_for(game.rules_obj, game.seats)
            self._unstarted = (game.rules_obj, len(game.claimed))
        point = None
        if game.status == "in_progress" and game.current is not None:
            point = Point(self.expert, Position.from_game(game), self.scale)
            values = point.seats(point.value())
            if self.start is None:
                self.start, self.started_at = values, game.version
            seat = point.position.seat
            self.points[game.version] = (seat, values)
            if (game.version, seat) not in self.values:
                for other, value in enumerate(values):
                    self.values[(game.version, other)] = value
        elif game.status == "finished":  # no turn to plan any more: a kept analysis keeps less
            self.expert.forget()
        self.steps.append(game.version)
        self._tip = point

    def _start_for(self, step: int) -> list[float]:
        """Every seat's ``value_start`` as an analysis that stops at this step gives it."""
        if self.started_at is not None and step >= self.started_at:
            assert self.start is not None
            return self.start
        # never started (a lobby): the first turn as it would have been
        if not isinstance(self._unstarted, list):
            assert self._unstarted is not None
            rules, columns = self._unstarted
            point = Point(self.expert, Position.make(rules, [[0] * columns] * self.seats))
            self._unstarted = point.seats(point.value())
        return self._unstarted

    # ------------------------------------------------------------------ the answer
    def result(self, upto: int) -> dict[str, Any]:
        """The analysis up to ``upto``, once advanced that far."""
        if not 1 <= upto <= self.reached:
            raise ValueError(f"analysed to version {self.reached}, not {upto}")
        step = self.steps[bisect_left(self.steps, upto)]  # where an analysis to upto stops
        values = {key: value for key, value in self.values.items() if key[0] <= upto}
        if step == upto and step in self.points:  # the point reached exactly there
            for seat, value in enumerate(self.points[step][1]):
                values[(step, seat)] = value
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
                end.append(last.get(seat, start[seat]))
            elif self.solo:
                won = finished["data"].get("winner") == 0
                end.append(0.0 if won else last.get(seat, start[seat]))
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
                    "value_start": start[seat],
                    "value_end": end[seat],
                    "luck": luck,
                    "skill_loss": skill_loss,
                    "drift": end[seat] - start[seat] - luck + skill_loss,
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


def analyse(
    records: Sequence[Any], version: int | None = None, shared: Shared | None = None
) -> dict[str, Any]:
    """The analysis of a game from its events as served, up to ``version`` (default: all);
    ``shared`` as ``Analysis`` takes it.

    AnalysisRefused for a history that is not well formed or that the rules refuse, naming the
    first version to blame; ValueError for a ``version`` outside 1..len(records). (``Analysis``
    gives the same answers for a game that goes on, each step worked out once.)"""
    upto = len(records) if version is None else version
    if not records or not 1 <= upto <= len(records):
        raise ValueError(f"the game has versions 1 to {len(records)}, not {version}")
    analysis = Analysis(records, shared)
    analysis.advance(upto)
    return analysis.result(upto)


__all__ = ["BLUNDERS", "Analysis", "AnalysisRefused", "Point", "analyse"]
