"""Two source trees of the service, served at once under the same load: which spends less CPU?

On a shared VM whose speed drifts by ±25% within minutes, measuring tree A, then tree B, compares
the minutes as much as the trees. Here both serve at the same time, each with clients of its own
(one client process per tree, so the clients' own GIL is not shared), and each round gives the
ratio of their CPU per action: the drift falls on both alike. Use it to judge a change to the
request path before `make bench` (docs/performance.md, "Simultaneous A/B").

    git worktree add /tmp/before HEAD~1
    python -m bench.ab /tmp/before . [--rounds 5] [--clients 4] [--seconds 6] [--store sqlite]

Each tree runs `python -m service.cli serve` from its own folder (its code, this interpreter and
its installed packages), on a fresh SQLite file, or with ``--store postgres`` on a fresh database
of BENCH_POSTGRES_URL (a throwaway pgserver when unset).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg

from bench.http import Figures, Server, postgres_url, service


def serve(tree: Path, database_url: str) -> Server:
    server = service(str(tree), database_url, PYTHONPATH=str(tree))
    server.command = [sys.executable, "-m", "service.cli", *server.command[1:]]
    server.cwd = tree
    return server


def measure(server: Server, clients: int, seconds: float) -> subprocess.Popen[str]:
    """A client process loading ``server``; it prints its Figures as JSON."""
    assert server.process is not None
    code = (
        "import json, sys; from bench.http import Server, load; "
        "server = Server('x', [], {}, int(sys.argv[1])); "
        "server.process = type('P', (), {'pid': int(sys.argv[2])})(); "
        "print(json.dumps(load(server, int(sys.argv[3]), float(sys.argv[4])).__dict__))"
    )
    args = [str(server.port), str(server.process.pid), str(clients), str(seconds)]
    root = Path(__file__).resolve().parent.parent
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True, cwd=root
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs=2, type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=6)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.trees]
    folder = Path(tempfile.mkdtemp(prefix="cantstop-ab-"))
    with contextlib.ExitStack() as stack:
        if args.store == "postgres":
            base = stack.enter_context(postgres_url())
            urls = [create_database(base, f"cantstop_ab_{i}") for i in range(2)]
        else:
            urls = [f"sqlite:///{folder}/{i}.sqlite" for i in range(2)]
        servers = [serve(tree, url) for tree, url in zip(trees, urls, strict=True)]
        for server in servers:
            server.start()
            stack.callback(server.stop)
        rounds: list[list[Figures]] = []
        for _ in range(args.rounds):
            clients = [measure(s, args.clients, args.seconds) for s in servers]
            figures = [Figures(**json.loads(c.communicate()[0])) for c in clients]
            rounds.append(figures)
            a, b = figures
            print(
                f"  A {a.rate:6,.0f}/s {a.server_cpu:5.2f} ms CPU | B {b.rate:6,.0f}/s "
                f"{b.server_cpu:5.2f} ms CPU | B/A CPU {b.server_cpu / a.server_cpu:.3f}",
                flush=True,
            )
    ratios = [b.server_cpu / a.server_cpu for a, b in rounds]
    rates = [b.rate / a.rate for a, b in rounds]
    print(f"A = {trees[0]}\nB = {trees[1]}")
    print(
        f"B/A, median of {len(rounds)} rounds: CPU per action {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}), actions/s {statistics.median(rates):.3f}"
    )


def create_database(url: str, name: str) -> str:
    """A fresh database ``name`` on the server of ``url``; its URL."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}"')
        db.execute(f'CREATE DATABASE "{name}"')
    address, _, query = url.partition("?")
    server = address.rpartition("/")[0]
    return f"{server}/{name}" + (f"?{query}" if query else "")


if __name__ == "__main__":
    main()
