"""Do the analysis's values mean what they say? Measured on the expert's own games.

    python -m bench.calibration [--games N] [--processes P]   # the tables of docs/analysis.md
    python -m bench.calibration --only duels --duels N --players 3,4   # games of 3 and 4
    python -m bench.calibration --fit [--games N]             # rewrites domain/value_tables.py
    python -m bench.calibration --fit --others --players 3,4 [--games N]  # only the others' maps

The measurement plays expert games with fixed seeds and compares the values served
(``domain.analysis``) with what happened:

* solitaire (easy, six-sided dice, all eleven columns): the turns expected at the start against
  the mean of N games from the start; at the start of turn ``MID`` of those games (the mean
  served against the mean taken); and at one mid-game point (seed ``MID_SEED``'s game at the
  start of turn ``MID``) against N games played on from it with fresh dice;
* games of two, or of each number of players given (``--players``; experts only, six-sided
  dice): every seat's value at every version of N whole games analysed, binned by tenths,
  beside the share of them whose seat went on to win, with the Brier score beside a constant
  1/N's (0.25 for two); and the checks that every value is in [0, 1] and that the seats'
  values at a version sum to 1. ``--only duels`` skips the solitaire.

``--fit`` learns the tables from other seeds (``FIT_SEED`` on): for each kind of game in
``FIT``, the expert's own worth of every point it passed (after each roll, and at each "roll or
stop") beside what followed (turns still taken; won or not), averaged in bins of equal count,
made monotone (pool-adjacent-violators) and written as knots of a piecewise-linear map.
``--fit --others`` keeps those maps and learns, for each of ``--players`` (3 or more), the map
of a seat not to act: from its share by the expert's race model (``Point.race``) to whether it
won, the same way (``Scale.others``), at the same points and seeds.
At most two processes (``--processes``): the machine is shared.
"""

from __future__ import annotations

import argparse
import functools
import math
import multiprocessing
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from domain.analysis import Point, analyse, scale_for, table_key
from domain.commands import Move, NewGame, Roll, Stop
from domain.game import Game, event_records
from domain.position import Position
from domain.rules import normalize_rules
from domain.strategies.expert import ExpertStrategy
from domain.strategies.turn import NO_STOP, as_state, pack
from domain.value_tables import TABLES as TABLES_NOW

MID = 12
"""The turn whose start is the solitaire's mid-game point (the expert takes about 28)."""
MID_SEED = 0
FIT_SEED = 1_000_000
"""The fit's seeds start here; the measurement's at 0: it is measured on games it never saw."""
FIT: list[tuple[int, dict[str, Any] | None, int]] = [
    (1, None, 2),
    (2, None, 2),
    (1, {"solitaire": "advanced"}, 1),
    (2, {"dice_faces": 8}, 1),
    (3, None, 1),
    (4, None, 1),
]
"""The kinds of game the fit measures, each with its multiple of ``--games`` (the others fall
back: domain/analysis.py, ``scale_for``)."""
FITTED_GAMES = 600
"""The ``--games`` the tables' own maps were fitted with (named in their docstring)."""
TABLES = Path(__file__).resolve().parent.parent / "domain" / "value_tables.py"
MAX_TURNS = 400
CHOICES = random.Random(0)  # the expert draws nothing; choose() takes one

_expert: ExpertStrategy | None = None


def expert() -> ExpertStrategy:
    """One expert per process (its planners are cached)."""
    global _expert
    if _expert is None:
        _expert = ExpertStrategy()
    return _expert


# ---------------------------------------------------------------------- playing
def new_game(players: int, rules: Mapping[str, Any] | None, seed: int) -> Game:
    return Game.start(
        uuid.UUID(int=seed),
        NewGame(players=[f"P{i}" for i in range(players)], rules=rules, dice="manual"),
    )


def play(
    game: Game,
    dice: random.Random,
    *,
    until_turn: int | None = None,
    seen: Callable[[Position, float, int], None] | None = None,
) -> int:
    """The expert plays every seat of ``game`` on (to its end, or to the start of turn
    ``until_turn``, counting from 0); ``seen(position, raw, turns)`` hears the expert's own
    worth of each point it passes (after a roll, and at a "roll or stop"). The turns taken."""
    turns = 0
    strategy = expert()
    faces = game.rules_obj.dice_faces
    while game.status == "in_progress" and turns < MAX_TURNS:
        position = Position.from_game(game)
        seat = position.seat
        if position.phase == "roll" and until_turn is not None and turns >= until_turn:
            break
        if seen is not None and position.phase == "roll_or_stop":
            seen(position, raw_value(position), turns)
        action = strategy.choose(position, CHOICES)
        if isinstance(action, Roll):
            game.roll(seat, dice=[dice.randint(1, faces) for _ in range(4)])
            if game.current != seat or game.phase != "move":  # a bust
                if seen is not None:
                    planner = strategy.planner(position)
                    seen(position, planner.bust_utility(as_state(position.runners)), turns)
                turns += 1
            elif seen is not None:
                rolled = Position.from_game(game)
                seen(
                    rolled,
                    max(strategy.planner(rolled).move_values(rolled.runners, rolled.moves)),
                    turns,
                )
        elif isinstance(action, Move):
            game.move(seat, action.sums)
        elif isinstance(action, Stop):
            game.stop(seat)
            turns += 1
        else:  # pragma: no cover - the expert never resigns
            raise AssertionError(action)
    return turns


def raw_value(position: Position) -> float:
    """The expert's own worth of a "roll or stop" point (as ``Point.best`` chooses)."""
    planner = expert().planner(position)
    roll = planner.roll_value(position.runners)
    if position.forced_to_roll:
        return roll
    stop = planner.stop_value(pack(as_state(position.runners)))
    return roll if stop == NO_STOP else max(stop, roll)


def dice_for(seed: int, tag: str = "dice") -> random.Random:
    return random.Random(f"{tag}:{seed}")


# ---------------------------------------------------------------------- the fit
def fit_game(job: tuple[int, dict[str, Any] | None, int]) -> list[tuple[float, float]]:
    """(the expert's worth, what followed) at each point of one game: the turns still taken
    after the turn under way (alone), or 1 if the seat to act won (against others)."""
    players, rules, seed = job
    game = new_game(players, rules, seed)
    points: list[tuple[int, float, int]] = []
    total = play(game, dice_for(seed), seen=lambda p, raw, t: points.append((p.seat, raw, t)))
    if players == 1:
        return [(raw, float(total - turn - 1)) for _, raw, turn in points]
    winner = game.winner
    return [(raw, float(seat == winner)) for seat, raw, _ in points]


def fit_others_game(job: tuple[int, dict[str, Any] | None, int]) -> list[tuple[float, float]]:
    """(a seat not to act's value by the race model, 1 if it won) for every such seat at each
    point of one game: what the others' map (``Scale.others``) is learned from."""
    players, rules, seed = job
    game = new_game(players, rules, seed)
    points: list[tuple[int, list[float]]] = []

    def seen(position: Position, raw: float, _: int) -> None:
        point = Point(expert(), position)
        points.append((position.seat, point.race(point.scale(raw))))

    play(game, dice_for(seed), seen=seen)
    winner = game.winner
    return [
        (value, float(r == winner))
        for seat, values in points
        for r, value in enumerate(values)
        if r != seat and value > 0
    ]


def fit_others(games: int, processes: int, players: Sequence[int]) -> dict[str, dict[str, Any]]:
    """The tables as they are, with the others' map learned anew for each of ``players``."""
    tables = {key: dict(table) for key, table in TABLES_NOW.items()}
    with multiprocessing.Pool(processes) as pool:
        for n in players:
            started = time.perf_counter()
            jobs = [(n, None, FIT_SEED + i) for i in range(games)]
            pairs = [
                pair for game in pool.imap(fit_others_game, jobs, chunksize=4) for pair in game
            ]
            key = table_key(normalize_rules(None, n), n)
            tables[key]["others_games"] = len(jobs)
            tables[key]["others_points"] = len(pairs)
            tables[key]["others"] = knots("chance", pairs, bins=min(60, max(8, len(pairs) // 2000)))
            took = time.perf_counter() - started
            print(f"{key} others: {len(jobs)} games, {len(pairs)} values, {took:.0f} s", flush=True)
    return tables


def pool_adjacent(values: list[float], weights: list[float]) -> list[float]:
    """The non-decreasing sequence nearest ``values`` (weighted least squares)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(values, weights, strict=True):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            b = blocks.pop()
            a = blocks[-1]
            total = a[1] + b[1]
            a[0] = (a[0] * a[1] + b[0] * b[1]) / total
            a[1], a[2] = total, a[2] + b[2]
    out: list[float] = []
    for mean, _, count in blocks:
        out += [mean] * int(count)
    return out


def knots(kind: str, pairs: list[tuple[float, float]], bins: int) -> list[tuple[float, float]]:
    """A strictly increasing piecewise-linear map from the pairs, in ``bins`` bins of equal
    count: x is the expert's worth (chance) or minus it (turns)."""
    if kind == "chance":
        data = sorted((raw, y) for raw, y in pairs if raw < 1.0)
    else:
        data = sorted((-raw, y) for raw, y in pairs if raw < 0.0)
    size = max(1, len(data) // bins)
    xs: list[float] = []
    ys: list[float] = []
    ws: list[float] = []
    for start in range(0, len(data), size):
        chunk = data[start : start + size]
        if len(chunk) < size // 2 and xs:  # a short last bin joins the one before
            total = ws[-1] + len(chunk)
            xs[-1] = (xs[-1] * ws[-1] + sum(x for x, _ in chunk)) / total
            ys[-1] = (ys[-1] * ws[-1] + sum(y for _, y in chunk)) / total
            ws[-1] = total
            continue
        xs.append(statistics.fmean(x for x, _ in chunk))
        ys.append(statistics.fmean(y for _, y in chunk))
        ws.append(len(chunk))
    ys = pool_adjacent(ys, ws)
    out: list[tuple[float, float]] = []
    n = len(xs)
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if out and x <= out[-1][0]:
            continue  # equal worths: one knot
        if kind == "chance":  # strictly inside (0, 1), strictly increasing
            y = 1e-4 + y * (1 - 3e-4) + 1e-4 * (i + 1) / (n + 1)
        else:
            y = y + 1e-6 * (i + 1)
        out.append((round(x, 6), round(y, 6)))
    return strictly(out)


def strictly(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Rounding can tie two knots of a plateau: each a millionth above the one before."""
    out: list[tuple[float, float]] = []
    for x, y in points:
        if out and y <= out[-1][1]:
            y = round(out[-1][1] + 1e-6, 6)
        out.append((x, y))
    return out


def fit(games: int, processes: int) -> dict[str, dict[str, Any]]:
    tables: dict[str, dict[str, Any]] = {}
    with multiprocessing.Pool(processes) as pool:
        for players, rules, share in FIT:
            started = time.perf_counter()
            jobs = [(players, rules, FIT_SEED + i) for i in range(games * share)]
            pairs = [pair for game in pool.imap(fit_game, jobs, chunksize=4) for pair in game]
            kind = "turns" if players == 1 else "chance"
            key = table_key(normalize_rules(rules, players), players)
            tables[key] = {
                "kind": kind,
                "games": len(jobs),
                "points": len(pairs),
                "knots": knots(kind, pairs, bins=min(120, max(8, len(pairs) // 500))),
            }
            # the others' maps are learned apart (--others): kept as they are
            old = TABLES_NOW.get(key, {})
            fields = ("others_games", "others_points", "others")
            tables[key] |= {f: old[f] for f in fields if f in old}
            took = time.perf_counter() - started
            print(f"{key}: {len(jobs)} games, {len(pairs)} points, {took:.0f} s", flush=True)
    return tables


def write_tables(tables: Mapping[str, Mapping[str, Any]], games: int) -> None:
    lines = [
        '"""The analysis\'s values, learned from the expert\'s self-play: for each kind of game,',
        "the knots of a strictly increasing piecewise-linear map from the expert's own worth of a",
        "point to the value served (domain/analysis.py, ``Scale``): ``chance``, the chance to win,",
        "from the worth; ``turns``, the turns still taken after the one under way, from minus the",
        f"worth. Written by ``python -m bench.calibration --fit --games {games}`` (seeds",
        f"{FIT_SEED} on); with three or more players, ``others`` maps a seat not to act from",
        "its race-model share (``--fit --others --players 3,4 --games 600``, the same seeds).",
        'Do not edit by hand."""',
        "",
        "from typing import Any",
        "",
        "TABLES: dict[str, dict[str, Any]] = {",
    ]
    for key, table in tables.items():
        lines.append(f"    {key!r}: {{")
        for field in ("kind", "games", "points"):
            lines.append(f"        {field!r}: {table[field]!r},")
        lines.append('        "knots": [')
        lines += [f"            ({x!r}, {y!r})," for x, y in table["knots"]]
        lines.append("        ],")
        if "others" in table:  # 3+ players: the seats not to act (``Scale.others``)
            for field in ("others_games", "others_points"):
                lines.append(f"        {field!r}: {table[field]!r},")
            lines.append('        "others": [')
            lines += [f"            ({x!r}, {y!r})," for x, y in table["others"]]
            lines.append("        ],")
        lines.append("    },")
    lines.append("}")
    TABLES.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------- the measurement
def served(game: Game) -> float:
    """The value the analysis serves at a game's current point (the seat to act's)."""
    return Point(expert(), Position.from_game(game)).value()


def solitaire_game(seed: int) -> tuple[int, float, int]:
    """(turns taken, the value served at the start of turn MID, the turns taken from there)."""
    game = new_game(1, None, seed)
    dice = dice_for(seed)
    before = play(game, dice, until_turn=MID)
    if game.status != "in_progress":
        return before, math.nan, 0
    value = served(game)
    after = play(game, dice)
    return before + after, value, after


def mid_game() -> Game:
    game = new_game(1, None, MID_SEED)
    play(game, dice_for(MID_SEED), until_turn=MID)
    assert game.status == "in_progress"
    return game


def played_on(seed: int) -> int:
    """The turns taken from the mid-game point, with fresh dice."""
    return play(mid_game(), dice_for(seed, "mid"))


def duel(seed: int, players: int = 2) -> dict[str, Any]:
    """One game of experts, analysed: every seat's value at every version before the end."""
    game = new_game(players, None, seed)
    play(game, dice_for(seed))
    records = event_records(game.collect_events())
    analysis = analyse(records)
    ended = next(r["version"] for r in records if r["type"] == "GameFinished")
    by_version: dict[int, list[float]] = {}
    for entry in analysis["values"]:
        if entry["version"] < ended:
            by_version.setdefault(entry["version"], [0.0] * players)[entry["seat"]] = entry["value"]
    return {
        "winner": game.winner,
        "values": list(by_version.values()),
        "start": [seat["value_start"] for seat in analysis["seats"]],
    }


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    return mean, 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0


def deciles(duels: Iterable[dict[str, Any]], players: int = 2) -> dict[str, Any]:
    bins: list[list[tuple[float, float]]] = [[] for _ in range(10)]
    games: list[set[int]] = [set() for _ in range(10)]
    worst_sum = 0.0
    out_of_range = 0
    for g, duel_ in enumerate(duels):
        for values in duel_["values"]:
            worst_sum = max(worst_sum, abs(math.fsum(values) - 1))
            for seat, value in enumerate(values):
                out_of_range += not 0 <= value <= 1
                b = min(9, max(0, int(value * 10)))
                bins[b].append((value, float(duel_["winner"] == seat)))
                games[b].add(g)
    rows = []
    for b, pairs in enumerate(bins):
        rows.append(
            {
                "bin": f"{b / 10:.1f}–{(b + 1) / 10:.1f}",
                "count": len(pairs),
                "games": len(games[b]),
                "predicted": statistics.fmean(p for p, _ in pairs) if pairs else None,
                "observed": statistics.fmean(w for _, w in pairs) if pairs else None,
            }
        )
    every = [pair for pairs in bins for pair in pairs]
    brier = statistics.fmean((p - w) ** 2 for p, w in every) if every else math.nan
    return {
        "rows": rows,
        "points": len(every),
        "brier": brier,
        "constant": 1 / players,
        "brier_constant": (players - 1) / players**2,  # one winner in N seats, 1/N each
        "worst_sum_error": worst_sum,
        "out_of_range": out_of_range,
    }


def measure(
    games: int,
    processes: int,
    duels_: int | None = None,
    players: Sequence[int] = (2,),
    solitaire: bool = True,
) -> dict[str, Any]:
    """The solitaire's figures (unless not ``solitaire``) and, for each number of ``players``,
    the decile table of that many experts' games (``duels``, by the number of players)."""
    count = games if duels_ is None else duels_
    result: dict[str, Any] = {"games": games, "duels_played": count, "duels": {}}
    with multiprocessing.Pool(processes) as pool:
        if solitaire:
            result["solitaire"] = measure_solitaire(pool, games)
        for n in players:
            duels = pool.map(functools.partial(duel, players=n), range(count), chunksize=2)
            winners = [d["winner"] for d in duels]
            result["duels"][n] = {
                "players": n,
                "model": scale_for(normalize_rules(None, n), n).fitted or "the expert's own",
                "first_seat_won": winners.count(0) / len(winners),
                "start": [statistics.fmean(d["start"][s] for d in duels) for s in range(n)],
                **deciles(duels, n),
            }
    return result


def measure_solitaire(pool: Any, games: int) -> dict[str, Any]:
    solo = pool.map(solitaire_game, range(games), chunksize=4)
    mid_point = mid_game()
    mid_value = served(mid_point)
    on = pool.map(played_on, range(games), chunksize=4)
    start = Position.from_game(new_game(1, None, 0))
    start_value = Point(expert(), start).value()
    mids = [(v, after) for _, v, after in solo if not math.isnan(v)]
    return {
        "model": scale_for(start.rules, 1).fitted or "the expert's own",
        "start": {"served": -start_value, "taken": mean_ci([t for t, _, _ in solo])},
        "mid_kind": {
            "turn": MID,
            "games": len(mids),
            "served": -statistics.fmean(v for v, _ in mids) if mids else math.nan,
            "taken": mean_ci([a for _, a in mids]) if mids else (math.nan, 0.0),
        },
        "mid_point": {
            "seed": MID_SEED,
            "turn": MID,
            "served": -mid_value,
            "taken": mean_ci([float(t) for t in on]),
        },
    }


NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def report(result: Mapping[str, Any]) -> str:
    parts = (
        [report_solitaire(result["solitaire"], result["games"])] if "solitaire" in result else []
    )
    parts += [report_duels(duels, result["duels_played"]) for duels in result["duels"].values()]
    return "\n\n".join("\n".join(part) for part in parts)


def report_solitaire(solo: Mapping[str, Any], n: int) -> list[str]:
    def row(name: str, part: Mapping[str, Any], games: int) -> str:
        taken, ci = part["taken"]
        off = (part["served"] - taken) / taken if taken else math.nan
        return f"| {name} | {games} | {part['served']:.2f} | {taken:.2f} ± {ci:.2f} | {off:+.1%} |"

    return [
        f"Solitaire (easy, six-sided dice), table {solo['model']}: turns still to take, "
        "this one included",
        "",
        "| point | games | served | taken (mean ± 95%) | served off by |",
        "|---|---|---|---|---|",
        row("the start", solo["start"], n),
        row(
            f"start of turn {MID + 1}, each game's own", solo["mid_kind"], solo["mid_kind"]["games"]
        ),
        row(f"start of turn {MID + 1} of seed {MID_SEED}'s game, played on", solo["mid_point"], n),
    ]


def report_duels(duels: Mapping[str, Any], games: int) -> list[str]:
    n = duels["players"]
    lines = [
        f"Games of {NUMBERS.get(n, n)} (experts against each other), table {duels['model']}: "
        f"every seat's value at every version of {games} games",
        "",
        "| bin | values | games | mean predicted | observed win rate | off by |",
        "|---|---|---|---|---|---|",
    ]
    for r in duels["rows"]:
        if r["count"]:
            off = r["observed"] - r["predicted"]
            lines.append(
                f"| {r['bin']} | {r['count']} | {r['games']} | {r['predicted']:.3f} | "
                f"{r['observed']:.3f} | {off:+.3f} |"
            )
        else:
            lines.append(f"| {r['bin']} | 0 | 0 | | | |")
    start = ", ".join(f"seat {s} {v:.3f}" for s, v in enumerate(duels["start"]))
    lines += [
        "",
        f"Brier score {duels['brier']:.4f} over {duels['points']} values (a constant "
        f"{duels['constant']:.3g}: {duels['brier_constant']:.4f}). Values outside [0, 1]: "
        f"{duels['out_of_range']}; largest |sum of the seats' values − 1| at a version: "
        f"{duels['worst_sum_error']:.1e}.",
        f"At the start: {start}; the first seat won {duels['first_seat_won']:.1%} of the games.",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration", description=__doc__)
    parser.add_argument("--games", type=int, default=500, help="games of each kind (500)")
    parser.add_argument("--duels", type=int, help="games of each --players to analyse (--games)")
    parser.add_argument(
        "--players", default="2", help="the games' numbers of players, comma-separated (2)"
    )
    parser.add_argument(
        "--only", choices=["duels"], help="skip the solitaire: only the games of --players"
    )
    parser.add_argument("--processes", type=int, default=2, help="at most 2 on a shared host")
    parser.add_argument("--fit", action="store_true", help="learn domain/value_tables.py")
    parser.add_argument(
        "--others",
        action="store_true",
        help="with --fit: learn only the maps of the seats not to act, for --players (3 or more)",
    )
    args = parser.parse_args(argv)
    processes = max(1, min(2, args.processes))
    started = time.perf_counter()
    if args.fit and args.others:
        counts = [int(n) for n in args.players.split(",")]
        if any(not 3 <= n <= 8 for n in counts):
            parser.error("--others: --players each between 3 and 8")
        write_tables(fit_others(args.games, processes, counts), FITTED_GAMES)
        print(f"wrote {TABLES}")
    elif args.fit:
        write_tables(fit(args.games, processes), args.games)
        print(f"wrote {TABLES}")
    else:
        players = [int(n) for n in args.players.split(",")]
        if any(not 2 <= n <= 8 for n in players):
            parser.error("--players: each between 2 and 8")
        solitaire = args.only != "duels"
        print(report(measure(args.games, processes, args.duels, players, solitaire)))
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
