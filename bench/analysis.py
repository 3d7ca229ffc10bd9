"""What analysing a finished game costs: CPU seconds and instructions per game.

    python -m bench.analysis [TREE ...] [--games 20] [--seed 11] [--collector on] [--points fresh]
    python -m bench.analysis TREE ... --instructions [--games 5]          # valgrind's count

The games: rule of 28 against the expert (seats alternating), manual dice from seeded
generators, so every tree plays (and analyses) the very same games. Each tree runs in its own
process (its code on PYTHONPATH): it plays the games, then times ``domain.analysis.analyse`` of
each with ``time.process_time`` (CPU, not wall time: the machine is shared) and prints the
median and the 90th percentile. With ``--instructions`` each tree runs twice under
``valgrind --tool=cachegrind`` (the games played and not analysed, then played and analysed):
the difference divided by the games is what analysing one costs, start-up and play excluded.
``--kind`` picks other games: ``solo`` (easy solitaire, the expert), ``d8`` (two experts on
eight-sided dice), ``three`` (three experts under jumping and steep hill).
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

KINDS: dict[str, tuple[list[str], dict[str, Any] | None]] = {
    "duel": (["rule-of-28", "expert"], None),
    "solo": (["expert"], {"solitaire": "easy"}),
    "d8": (["expert", "expert"], {"dice_faces": 8}),
    "three": (["expert", "expert", "expert"], {"jumping": True, "steep_hill": True}),
}
MAX_ACTIONS = 20_000


def play(players: list[str], rules: dict[str, Any] | None, seed: int) -> list[dict[str, Any]]:
    """One whole game, as the events ``/events`` serves (tests/support/played.py's way)."""
    from domain import strategies
    from domain.commands import Move, NewGame, Roll, Stop
    from domain.game import Game, event_records
    from domain.position import Position

    dice, choices = random.Random(f"dice:{seed}"), random.Random(f"choices:{seed}")
    order = players if seed % 2 else players[::-1]
    game = Game.start(
        uuid.UUID(int=seed),
        NewGame(players=[f"P{i}" for i in range(len(order))], rules=rules, dice="manual"),
    )
    faces = game.rules_obj.dice_faces
    for _ in range(MAX_ACTIONS):
        if game.status != "in_progress":
            break
        position = Position.from_game(game)
        seat = position.seat
        action = strategies.get(order[seat]).choose(position, choices)
        if isinstance(action, Roll):
            game.roll(seat, dice=[dice.randint(1, faces) for _ in range(4)])
        elif isinstance(action, Move):
            game.move(seat, action.sums)
        elif isinstance(action, Stop):
            game.stop(seat)
        else:  # pragma: no cover - these players never resign
            raise AssertionError(action)
    return event_records(game.collect_events())


def run(
    kind: str, games: int, seed: int, analyse_them: bool, collector: str, points: str
) -> dict[str, Any]:
    """In the tree's process: play the games, then analyse each (CPU seconds per game), with
    the cyclic garbage collector off while each is worked out (``paused``, as the service's
    analyst runs them: service/collector.py ``paused``) or on, and
    the points' runners and children kept from one game's analysis to the next (``shared``,
    as the analyst keeps them, where the tree can) or each analysis on its own (``fresh``)."""
    players, rules = KINDS[kind]
    played = [play(players, rules, seed + i) for i in range(games)]
    seconds = []
    if analyse_them:
        from domain.analysis import analyse

        options: dict[str, Any] = {}
        if points == "shared" and "shared" in inspect.signature(analyse).parameters:
            from domain.strategies.turn import Shared

            options["shared"] = Shared()
        for records in played:
            start = time.process_time()
            if collector == "paused":
                gc.disable()
            try:
                analyse(records, **options)
            finally:
                gc.enable()
            seconds.append(time.process_time() - start)
    return {"seconds": seconds, "versions": [len(r) for r in played]}


def child(tree: Path, args: list[str], valgrind: bool = False) -> subprocess.CompletedProcess[str]:
    # this very file, run in the tree (which may not have it), with the tree's code on the path
    command = [sys.executable, __file__, "--child", *args]
    if valgrind:
        command = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            *command,
        ]
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the run failed\n{done.stderr[-2000:]}")
    return done


def instructions(tree: Path, args: list[str]) -> int:
    done = child(tree, args, valgrind=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"{tree}: no count from valgrind\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[])
    parser.add_argument("--games", type=int, help="games per tree (20; 5 with --instructions)")
    parser.add_argument("--seed", type=int, default=11, help="the first game's seed")
    parser.add_argument("--kind", choices=sorted(KINDS), default="duel")
    parser.add_argument("--instructions", action="store_true", help="count under valgrind")
    parser.add_argument(
        "--collector",
        choices=("paused", "on"),
        default="paused",
        help="the cyclic garbage collector while an analysis runs (paused: as the analyst runs it)",
    )
    parser.add_argument(
        "--points",
        choices=("shared", "fresh"),
        default="shared",
        help="the points' runners and children kept from game to game (shared: as the analyst "
        "keeps them; a tree older than that works each game afresh) or not",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-analysis", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    games = args.games or (5 if args.instructions else 20)
    if args.child:
        here = Path(__file__).resolve().parent
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]  # http is not http
        analyse_them = not args.no_analysis
        found = run(args.kind, games, args.seed, analyse_them, args.collector, args.points)
        print(json.dumps(found))
        return
    trees = args.trees or [Path(".")]
    common = ["--kind", args.kind, "--games", str(games), "--seed", str(args.seed)]
    common += ["--collector", args.collector, "--points", args.points]
    print(
        f"{games} games ({args.kind}), seeds {args.seed} to {args.seed + games - 1}, "
        f"the cyclic collector {args.collector} while analysing, the points {args.points}"
    )
    if args.instructions:
        if shutil.which("valgrind") is None:
            raise SystemExit("valgrind is not installed: apt-get install -y valgrind")
        first = None
        for tree in trees:
            cost = instructions(tree, common) - instructions(tree, [*common, "--no-analysis"])
            per_game = cost / games
            first = first or per_game
            print(f"{per_game:16,.0f} instructions per game ({per_game / first:.3f})  {tree}")
        return
    for tree in trees:
        result = json.loads(child(tree, common).stdout)
        seconds = result["seconds"]
        versions = result["versions"]
        print(
            f"CPU per game: median {statistics.median(seconds):.3f} s, "
            f"p90 {percentile(seconds, 0.9):.3f} s, max {max(seconds):.3f} s "
            f"({min(versions)} to {max(versions)} versions)  {tree}"
        )


if __name__ == "__main__":
    main()
