"""``cantstop bots``: measure the computer players in the arena (domain/arena.py), offline.

``bots solo ID --games N [--columns K] [--seed S] [--dice-faces 6|8] [--solitaire MODE]
[--steep-hill]`` and ``bots duel ID1 ID2 --games N [--seed S] [--dice-faces 6|8]
[--jumping | --forced-move] [--steep-hill]`` (both with ``--timing`` to add the decision times)
print one JSON object on standard output; a progress bar goes to standard error when it is a
terminal, and nowhere otherwise. An unknown bot or a bad number exits with status 2 and a
one-line reason.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from tqdm import tqdm  # type: ignore[import-untyped]

from domain import arena, strategies

FACES = ("6", "8")
TIMING = "add how long the decisions took (decision_ms: median, 99th percentile, worst)"


class BadInput(Exception):
    """A command line that names no bot or holds a bad number: exit status 2."""


def _number(name: str, text: str, low: int | None = None, high: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadInput(f"{name} must be an integer, not {text!r}") from None
    if low is not None and value < low:
        raise BadInput(f"{name} must be at least {low}, not {value}")
    if high is not None and value > high:
        raise BadInput(f"{name} must be at most {high}, not {value}")
    return value


def _bot(strategy_id: str) -> str:
    try:
        return strategies.get(strategy_id).id
    except strategies.UnknownStrategy:
        known = ", ".join(s.id for s in strategies.list())
        raise BadInput(f"unknown bot {strategy_id!r}; the bots are {known}") from None


def _run(games: int, play: Callable[[arena.Progress], dict[str, Any]]) -> dict[str, Any]:
    """Play with a progress bar on a terminal's standard error; add the time taken."""
    started = time.perf_counter()
    with tqdm(total=games, unit="game", file=sys.stderr, disable=not sys.stderr.isatty()) as bar:

        def tick() -> None:
            bar.update(1)

        result = play(tick)
    result["elapsed_seconds"] = round(time.perf_counter() - started, 1)
    return result


def cmd_solo(args: argparse.Namespace) -> int:
    try:
        bot = _bot(args.id)
        faces = _number("--dice-faces", args.dice_faces)
        games = _number("--games", args.games, 1)
        columns = None
        if args.columns is not None:
            columns = _number("--columns", args.columns, 1, 2 * faces - 1)
        seed = _number("--seed", args.seed)
    except BadInput as exc:
        print(f"cantstop bots solo: {exc}", file=sys.stderr)
        return 2
    result = _run(
        games,
        lambda tick: arena.solo(
            bot,
            games,
            columns,
            seed,
            faces,
            tick,
            solitaire=args.solitaire,
            steep_hill=args.steep_hill,
            timing=args.timing,
        ),
    )
    print(json.dumps(result))
    return 0


def cmd_duel(args: argparse.Namespace) -> int:
    try:
        first, second = _bot(args.id1), _bot(args.id2)
        faces = _number("--dice-faces", args.dice_faces)
        games = _number("--games", args.games, 1)
        seed = _number("--seed", args.seed)
        if args.jumping and args.forced_move:
            raise BadInput("--jumping and --forced-move exclude each other")
    except BadInput as exc:
        print(f"cantstop bots duel: {exc}", file=sys.stderr)
        return 2
    result = _run(
        games,
        lambda tick: arena.duel(
            first,
            second,
            games,
            seed,
            faces,
            tick,
            jumping=args.jumping,
            forced_move=args.forced_move,
            steep_hill=args.steep_hill,
            timing=args.timing,
        ),
    )
    print(json.dumps(result))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``bots solo`` and ``bots duel`` to the ``cantstop`` command's subcommands."""
    bots = sub.add_parser("bots", help="measure the computer players (offline)")
    which = bots.add_subparsers(dest="bots_command", required=True)

    solo = which.add_parser("solo", help="one bot alone: turns to claim K columns")
    solo.add_argument("id", metavar="ID", help="the bot (random, rule-of-28, expert)")
    solo.add_argument("--games", required=True, metavar="N", help="races to play")
    solo.add_argument("--columns", metavar="K", help="columns to claim (default: all)")
    solo.add_argument("--seed", default="0", metavar="S", help="seed of the dice (default 0)")
    solo.add_argument("--dice-faces", choices=FACES, default="6")
    solo.add_argument(
        "--solitaire",
        choices=["easy", "advanced"],
        default="easy",
        help="advanced: a bust wipes the markers in the columns the runners were in",
    )
    solo.add_argument("--steep-hill", action="store_true", help="the steep hill variant")
    solo.add_argument("--timing", action="store_true", help=TIMING)
    solo.set_defaults(func=cmd_solo)

    duel = which.add_parser("duel", help="two bots, to 3 columns, the first player alternating")
    duel.add_argument("id1", metavar="ID1")
    duel.add_argument("id2", metavar="ID2")
    duel.add_argument("--games", required=True, metavar="N", help="games to play")
    duel.add_argument("--seed", default="0", metavar="S", help="seed of the dice (default 0)")
    duel.add_argument("--dice-faces", choices=FACES, default="6")
    duel.add_argument("--jumping", action="store_true", help="the jumping variant")
    duel.add_argument("--forced-move", action="store_true", help="the forced move variant")
    duel.add_argument("--steep-hill", action="store_true", help="the steep hill variant")
    duel.add_argument("--timing", action="store_true", help=TIMING)
    duel.set_defaults(func=cmd_duel)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m service.arena_cli bots ...``: the same commands without the rest of
    ``cantstop``."""
    parser = argparse.ArgumentParser(prog="cantstop")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    status = args.func(args)
    assert isinstance(status, int)
    return status


if __name__ == "__main__":
    sys.exit(main())
