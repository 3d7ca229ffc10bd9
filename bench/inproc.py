"""Two source trees of the service, each in a process of its own, taking turns at the action path
in process (the WSGI app called directly: no server, no sockets, one thread): which spends less
CPU per action?

`bench/ab.py` serves both trees under load, which is the whole request; but on a noisy VM its
rounds spread by ±10%. Here nothing but the app runs, the two processes never run at once (each
batch waits for the other's), and each batch is timed by its own process's CPU clock: the same
tree against itself gives medians within about 1%, so changes of 2% show. Use it for a change to
the application or HTTP layers; confirm a large one with `bench/ab.py` and `make bench`.

    git worktree add /tmp/before HEAD~1
    python -m bench.inproc /tmp/before . [--pairs 10] [--actions 3000]
    python -m bench.inproc . . --sleep 0.0004   # what a wait after each action costs B
    python -m bench.inproc . . --stores sqlite,postgres --postgres postgresql://…/postgres

Each tree plays the bench's games (two players, server dice, always a legal action, stopping
after two moves) on a fresh SQLite file of its own (or a fresh PostgreSQL database,
``--stores``), with its own code and this interpreter. The CPU is the player's process's alone:
on PostgreSQL, the server's work is not in it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# ------------------------------------------------------------------------------ the player
# Runs inside each tree's process: `python -m bench.inproc --play`, with PYTHONPATH the tree.


class WsgiClient:
    def __init__(self, app: Any) -> None:
        self.app = app

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else b""
        environ = {  # as gunicorn builds it (gunicorn/http/wsgi.py), so the same branches run
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "RAW_URI": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "127.0.0.1:8000",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(data)),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(data),
            "wsgi.input_terminated": True,
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "wsgi.version": (1, 0),
        }
        if token:
            environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        status: list[str] = []
        answer = b"".join(self.app(environ, lambda s, h, e=None: status.append(s)))
        if not status[0].startswith(("2", "3")):
            raise RuntimeError(f"{method} {path}: {status[0]} {answer[:300]!r}")
        return json.loads(answer)


class Games:
    """Whole games, as bench/http.py's clients play them, one action at a time."""

    def __init__(self, client: WsgiClient) -> None:
        self.client = client
        self.game: Any = None

    def act(self) -> None:
        client = self.client
        if self.game is None or self.game["status"] != "in_progress":
            created = client.call("POST", "/v1/games", {"players": ["Ann", "Bob"]})
            self.game, self.tokens, self.moves = created["game"], created["seats"], 0
        game = self.game
        legal = game["legal_actions"]
        if {"type": "stop"} in legal and self.moves >= 2:
            action, self.moves = {"type": "stop"}, 0
        else:
            action = legal[0]
            self.moves += action["type"] == "move"
        token = self.tokens[game["turn"]["player"]]["token"]
        self.game = client.call("POST", f"/v1/games/{game['id']}/actions", action, token)["game"]
        if self.game["status"] == "in_progress" and self.game["turn"]["phase"] == "roll":
            self.moves = 0


def player(actions: int, sleep: float = 0.0, database: str = "") -> None:
    """Answer each line on stdin ("go") with the CPU seconds of one batch of ``actions``
    (``sleep``: seconds to sleep after each action, as a thread waiting on a database does;
    ``database``: a fresh PostgreSQL database's URL, else a fresh SQLite file)."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [
        p for p in sys.path if Path(p or ".").resolve() != here
    ]  # bench/http.py is not http
    if not database:
        folder = tempfile.mkdtemp(prefix="cantstop-inproc-")
        database = f"sqlite:///{folder}/bench.sqlite"
    os.environ["CANTSTOP_DATABASE_URL"] = database
    os.environ["CANTSTOP_RATE_LIMITS"] = "off"
    from service.http.app import create_app  # the tree's own code (PYTHONPATH)

    games = Games(WsgiClient(create_app(create_tables=True)))
    for _ in range(actions):  # warm-up: imports, caches, the first games
        games.act()
    # As a served worker sets aside what it loaded (service/collector.py ``settle``, called
    # by server.py once its app is up): without it the collector's full passes walk the app
    # and its modules, ~5% of the player's samples under ``perf``, which no served action pays.
    # The player's own code, not the tree's: a tree from before ``settle`` is timed alike.
    gc.collect()
    gc.freeze()
    print("ready", flush=True)
    for _line in sys.stdin:
        started = time.process_time()
        for _ in range(actions):
            games.act()
            if sleep:
                time.sleep(sleep)
        print(time.process_time() - started, flush=True)


# ------------------------------------------------------------------------------ the referee
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="*", type=Path)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--actions", type=int, default=3000)
    parser.add_argument(
        "--sleep",
        type=float,
        default=0.0,
        help="B's player sleeps this many seconds after each action: what a wait costs",
    )
    parser.add_argument(
        "--stores",
        default="sqlite,sqlite",
        help="A's store and B's: sqlite or postgres (a fresh database of --postgres each)",
    )
    parser.add_argument("--postgres", default=os.environ.get("BENCH_POSTGRES_URL", ""))
    parser.add_argument("--database", default="", help=argparse.SUPPRESS)
    parser.add_argument("--play", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.play:
        player(args.actions, args.sleep, args.database)
        return
    if len(args.trees) != 2:
        parser.error("give two source trees: A (before) and B (after)")
    stores = args.stores.split(",")
    if len(stores) != 2 or not set(stores) <= {"sqlite", "postgres"}:
        parser.error("--stores: two of sqlite and postgres, A's then B's")
    if "postgres" in stores and not args.postgres:
        parser.error("--postgres (or BENCH_POSTGRES_URL): a server whose user creates databases")
    with contextlib.ExitStack() as stack:
        from bench.instructions import fresh_database  # the referee's own (bench/ importable)

        databases = [
            stack.enter_context(
                fresh_database(args.postgres if store == "postgres" else None, f"_{i}")
            )
            or ""
            for i, store in enumerate(stores)
        ]
        referee(args, databases)
        for who, database in zip("AB", databases, strict=True):
            if database:  # what the player wrote there, before the database is dropped
                import psycopg  # the service's own dependency

                with psycopg.connect(database) as conn:
                    row = conn.execute("SELECT count(*) FROM cantstop_events").fetchone()
                print(f"{who} played on PostgreSQL: {row[0] if row else 0:,} events stored")


def referee(args: argparse.Namespace, databases: list[str]) -> None:
    """The two trees' players taking turns, batch by batch."""
    procs = []
    for i, tree in enumerate(args.trees):
        env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
        # This file as a script (the tree before a change may not have it), the tree's code.
        command = [sys.executable, __file__, "--play", "--actions", str(args.actions)]
        if i == 1 and args.sleep:
            command += ["--sleep", str(args.sleep)]
        if databases[i]:
            command += ["--database", databases[i]]
        procs.append(
            subprocess.Popen(
                command,
                cwd=tree,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("a tree did not start: run it alone with --play to see why")

        def batch(proc: subprocess.Popen[str]) -> float:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            return float(proc.stdout.readline())

        ratios = []
        for pair in range(args.pairs):
            order = (0, 1) if pair % 2 == 0 else (1, 0)  # each goes first half the time
            spent = {i: batch(procs[i]) for i in order}
            ratios.append(spent[1] / spent[0])
            per = {i: spent[i] / args.actions * 1e6 for i in spent}
            print(f"  A {per[0]:5.0f} µs | B {per[1]:5.0f} µs per action | B/A {ratios[-1]:.3f}")
        print(f"A = {args.trees[0]}\nB = {args.trees[1]}")
        print(
            f"B/A, median of {len(ratios)} pairs: CPU per action {statistics.median(ratios):.3f} "
            f"(range {min(ratios):.3f}-{max(ratios):.3f})"
        )
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
