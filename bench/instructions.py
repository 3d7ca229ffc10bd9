"""Instructions per action, counted by valgrind: a figure that the VM's noise does not move.

`bench/inproc.py` times CPU, which on a shared VM drifts by ±10% or more from one batch to
the next (2026-11-24: the same tree against itself gave pairs from 0.87 to 1.34). Instructions
do not drift: each tree plays the bench's games in process (`bench/inproc.py`'s player, the
WSGI app called directly) under `valgrind --tool=cachegrind`, with the dice and tokens drawn
from one fixed seed (and string hashing fixed), so every tree plays the same games. The same
tree twice agrees within 0.02%. Instructions are not time (cache misses, system calls and waits
are not in them), so confirm a change with `bench/inproc.py` or `bench/ab.py`; but a change of
0.5% shows.

    apt-get install -y valgrind
    python -m bench.instructions /tmp/before . [--actions 500] [--warmup 100]
    python -m bench.instructions /tmp/before . --postgres postgresql://postgres@127.0.0.1/postgres

Each tree runs twice (the warm-up alone, then warm-up and actions): the difference divided by
the actions is what an action costs, start-up and imports excluded. About 1.5 minutes a tree.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
SEED = 1234


def play(actions: int, around: Callable[[Any], None] | None = None) -> None:
    """In the tree's process (PYTHONPATH): ``actions`` actions of the bench's games.
    ``around``: called with the WSGI client before the first action (bench/stages.py)."""
    draws = random.Random(SEED)

    def fixed(n: int) -> bytes:
        return draws.randbytes(n)

    os.urandom = fixed  # uuid4, secrets (tokens, seeds): the same games in every tree
    random._urandom = fixed  # type: ignore[attr-defined]  # SystemRandom's source
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # http is not http
    if not os.environ.get("CANTSTOP_DATABASE_URL"):  # else a fresh PostgreSQL database
        folder = tempfile.mkdtemp(prefix="cantstop-instructions-")
        os.environ["CANTSTOP_DATABASE_URL"] = f"sqlite:///{folder}/bench.sqlite"
    os.environ["CANTSTOP_RATE_LIMITS"] = "off"
    spec = importlib.util.spec_from_file_location("bench_inproc", HERE / "inproc.py")
    assert spec is not None and spec.loader is not None
    inproc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(inproc)
    from service.http.app import create_app  # the tree's own code

    client = inproc.WsgiClient(create_app(create_tables=True))
    if around is not None:
        around(client)
    games = inproc.Games(client)
    for _ in range(actions):
        games.act()


@contextlib.contextmanager
def fresh_database(server_url: str | None, tag: str = "") -> Iterator[str | None]:
    """A new, empty PostgreSQL database on ``server_url`` for one run, dropped afterwards (the
    games' ids are seeded, so a reused database would hold them already); None for SQLite.
    ``tag`` tells apart the databases one process holds at once."""
    if server_url is None:
        yield None
        return
    import psycopg  # the service's own dependency

    name = f"cantstop_instructions_{os.getpid()}{tag}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(server_url)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def count(tree: Path, actions: int, postgres: str | None = None) -> int:
    """Instructions of a whole run of ``actions`` actions in ``tree``."""
    command = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--play",
        str(actions),
    ]
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "PYTHONHASHSEED": "0"}
    env.pop("CANTSTOP_DATABASE_URL", None)
    with fresh_database(postgres) as url:
        if url is not None:
            env["CANTSTOP_DATABASE_URL"] = url
        done = subprocess.run(
            command, env=env, cwd=tree, capture_output=True, text=True, check=False
        )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{tree}: the run failed\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="*", type=Path)
    parser.add_argument("--actions", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="play on PostgreSQL: a server URL whose user may create databases (one per run)",
    )
    parser.add_argument("--play", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.play is not None:
        play(args.play)
        return
    if not args.trees:
        parser.error("give one or more source trees")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install -y valgrind")
    first = None
    for tree in args.trees:
        total = count(tree, args.warmup + args.actions, args.postgres)
        per_action = (total - count(tree, args.warmup, args.postgres)) / args.actions
        first = first or per_action
        print(f"{per_action:12,.0f} instructions per action ({per_action / first:.3f})  {tree}")


if __name__ == "__main__":
    main()
