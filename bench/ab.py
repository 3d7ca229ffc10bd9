"""Two source trees of the service, served at once under the same load: which spends less CPU?

On a shared VM whose speed drifts by ±25% within minutes, measuring tree A, then tree B, compares
the minutes as much as the trees. Here both serve at the same time, each with clients of its own
(one client process per tree, so the clients' own GIL is not shared), and each round gives the
ratio of their CPU per action: the drift falls on both alike. Use it to judge a change to the
request path before `make bench` (docs/performance.md, "How to measure").

    git worktree add /tmp/before HEAD~1
    python -m bench.ab /tmp/before . [--rounds 5] [--clients 4] [--seconds 6] [--store sqlite]

Each tree runs `python -m service.cli serve` from its own folder (its code, this interpreter and
its installed packages), on a fresh SQLite file, or with ``--store postgres`` on a fresh database
of BENCH_POSTGRES_URL (a throwaway pgserver when unset). With PostgreSQL on this host, each round
also gives the CPU of the database's server processes that served each tree (its backends, found
by database name, read from /proc just before and after the counted window, once both trees'
clients have warmed up): the database's work is part of what an action costs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import psycopg

from bench.http import Figures, Server, postgres_url, processes, service


def serve(tree: Path, database_url: str) -> Server:
    server = service(str(tree), database_url, PYTHONPATH=str(tree))
    server.command = [sys.executable, "-m", "service.cli", *server.command[1:]]
    server.cwd = tree
    return server


def measure(server: Server, clients: int, seconds: float) -> subprocess.Popen[str]:
    """A client process loading ``server``: it warms up, says ``warm``, waits for a line on its
    stdin, loads for ``seconds`` and prints its Figures as JSON (``window``)."""
    assert server.process is not None
    code = (
        "import json, sys; from bench.http import Figures, Server, load; "
        "server = Server('x', [], {}, int(sys.argv[1])); "
        "server.process = type('P', (), {'pid': int(sys.argv[2])})(); "
        "load(server, int(sys.argv[3]), 0.0); "  # the warm-up alone
        "print('warm', flush=True); sys.stdin.readline(); "
        "window = load(server, int(sys.argv[3]), float(sys.argv[4]), warm=0.0); "
        "print(json.dumps(Figures.of([window]).__dict__))"
    )
    args = [str(server.port), str(server.process.pid), str(clients), str(seconds)]
    root = Path(__file__).resolve().parent.parent
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
    )


def window(
    clients: list[subprocess.Popen[str]], between: Callable[[], list[float]]
) -> tuple[list[Figures], list[float]]:
    """The client processes' figures, their counted windows started together once all have
    warmed up; and what ``between`` read just before they started (the database's CPU)."""
    for client in clients:
        assert client.stdout is not None
        if client.stdout.readline().strip() != "warm":
            raise SystemExit("a client process failed: run it alone to see why")
    read = between()
    for client in clients:
        assert client.stdin is not None
        client.stdin.write("go\n")
        client.stdin.flush()
    return [Figures(**json.loads(client.communicate()[0])) for client in clients], read


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
    base = ""
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
        database: list[float] = []  # per round, B/A of service and database CPU together
        postgres = args.store == "postgres"
        for _ in range(args.rounds):
            clients = [measure(s, args.clients, args.seconds) for s in servers]
            figures, before = window(
                clients, lambda: [backend_cpu(base, i) for i in range(2)] if postgres else []
            )
            rounds.append(figures)
            a, b = figures
            line = (
                f"  A {a.rate:6,.0f}/s {a.server_cpu:5.2f} ms CPU | B {b.rate:6,.0f}/s "
                f"{b.server_cpu:5.2f} ms CPU | B/A CPU {b.server_cpu / a.server_cpu:.3f}"
            )
            if before:
                ms = [
                    (backend_cpu(base, i) - before[i]) / (f.rate * args.seconds) * 1000
                    for i, f in enumerate(figures)
                ]
                both = (b.server_cpu + ms[1]) / (a.server_cpu + ms[0])
                database.append(both)
                line += f" | database A {ms[0]:4.2f} B {ms[1]:4.2f} ms | B/A with it {both:.3f}"
            print(line, flush=True)
    ratios = [b.server_cpu / a.server_cpu for a, b in rounds]
    rates = [b.rate / a.rate for a, b in rounds]
    print(f"A = {trees[0]}\nB = {trees[1]}")
    print(
        f"B/A, median of {len(rounds)} rounds: CPU per action {statistics.median(ratios):.3f} "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}), actions/s {statistics.median(rates):.3f}"
    )
    if database:
        print(
            f"B/A with the database's processes, median: {statistics.median(database):.3f} "
            f"(range {min(database):.3f}-{max(database):.3f})"
        )


def backend_cpu(url: str, tree: int) -> float:
    """CPU seconds used so far by the PostgreSQL processes serving tree ``tree``'s database
    (those alive now: a pool's connections live as long as the service)."""
    with psycopg.connect(url, autocommit=True) as db:
        rows = db.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (f"cantstop_ab_{tree}",)
        ).fetchall()
    _, times = processes()  # another host's server: none of its pids is here
    return sum(times.get(pid, 0.0) for (pid,) in rows)


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
