"""Benchmark the pure engine: random whole games, and legal-move generation alone.

Run with `make bench`. Prints games/s and legal-move generations/s;
docs/performance.md records them.
"""

from __future__ import annotations

import platform
import random
import time
import uuid

from domain.commands import NewGame
from domain.game import Game
from domain.moves import Board
from domain.rules import heights


def play_random_game(rng: random.Random, players: int) -> int:
    """One whole game with random manual dice and random legal choices; returns its events."""
    game = Game.start(
        uuid.uuid4(), NewGame(players=[f"P{i}" for i in range(players)], dice="manual")
    )
    while game.status == "in_progress":
        seat = game.current
        assert seat is not None
        if game.phase == "move":
            game.move(seat, rng.choice(game.options))
        elif game.phase == "roll_or_stop" and rng.random() < 0.4:
            game.stop(seat)
        else:
            game.roll(seat, dice=[rng.randint(1, 6) for _ in range(4)])
    return len(game.pending_events)


def bench_games(seconds: float = 3.0) -> tuple[float, float]:
    rng = random.Random(1)
    games = events = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        events += play_random_game(rng, players=2 + games % 3)
        games += 1
    elapsed = time.perf_counter() - start
    return games / elapsed, events / elapsed


def bench_legal_moves(n: int = 200_000) -> float:
    rng = random.Random(2)
    h = heights(6)
    claimed = [-1] * 13
    claimed[7] = 1
    own = [0] * 13
    own[6], own[8] = 3, 2
    board = Board(h, claimed, own)
    positions = []
    for _ in range(64):
        runners = [0] * 13
        for column in rng.sample([c for c in range(2, 13) if c != 7], rng.randint(0, 3)):
            runners[column] = rng.randint(1, h[column])
        positions.append(runners)
    rolls = [[rng.randint(1, 6) for _ in range(4)] for _ in range(1024)]
    start = time.perf_counter()
    for i in range(n):
        board.legal_moves(rolls[i & 1023], positions[i & 63])
    return n / (time.perf_counter() - start)


def main() -> None:
    print(
        f"machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.system()}"
    )
    per_second = bench_legal_moves()
    print(f"legal-move generation: {per_second:,.0f}/s ({1e6 / per_second:.1f} µs each)")
    games, events = bench_games()
    print(
        f"whole random games through the Game aggregate: {games:,.1f} games/s "
        f"({events:,.0f} events/s)"
    )


if __name__ == "__main__":
    main()
