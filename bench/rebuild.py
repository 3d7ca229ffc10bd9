"""Rebuilds and restarts at scale: how long ``cantstop projections rebuild`` takes for each view,
and how soon ``cantstop serve`` answers its first listing and records a due timeout after a
restart, on stores of 1,000 to 100,000 games (SQLite, and PostgreSQL on a server you name).

    .venv/bin/python -m bench.rebuild [--sizes 1000,100000] [--stores sqlite,postgres]
        [--server postgresql://postgres@127.0.0.1/postgres] [--trees BASE_TREE,.]

Each store is filled as ``bench.views`` fills it (a pool of games played through the
application, a realistic mix, copied under new ids up to the size with the store's bulk writes:
minutes, not hours). Then, for each source tree in ``--trees`` in turn (default: this one), on the
same store: every view is rebuilt by that tree's ``cantstop projections rebuild <view>``, one
process each, timed by the wall clock and by the CPU its process used (its own: a PostgreSQL
server's work is not in it); then that tree's ``cantstop serve --workers 2`` is launched beside a
game whose 5-second clock falls due a second later, and timed from the launch to the first
listing answered by each worker and to the recorded timeout (``bench.views.measure_launch``).
Giving the tree before a change and the tree after times both on the very same rows.

PostgreSQL stores are databases of their own on ``--server`` (named ``--prefix`` and random
letters), dropped at the end as SQLite's folders are, unless ``--keep``; ``--reuse`` measures a
kept one again (``sqlite:`` and its folder, or ``postgres:`` and its database's name).
docs/scaling.md ("Rebuilds and restarts at 100,000 games") records the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench import views as bv
from service.config import Settings
from service.runtime import Runtime

SERVER = "postgresql://postgres@127.0.0.1/postgres"
REQUESTS = 20  # the listing's latency is bench.views' subject: a few, to see it answers


@dataclass
class Timed:
    wall: float
    cpu: float


@dataclass
class TreeResult:
    tree: str
    rebuild: dict[str, Timed] = field(default_factory=dict)
    first_listing: list[float] = field(default_factory=list)
    first_leaderboard: float | None = None
    timeout_due: float = 0.0
    timeout_recorded: float | None = None
    others: float = 0.0  # the share of the cores other processes used during the rebuilds


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def view_names(url: str) -> list[str]:
    env = bv.serve_env(url)
    code = "from service.config import Settings\nfrom service.runtime import Runtime\n" + (
        "with Runtime(Settings.from_env(), create_tables=False) as rt:\n"
        "    print(' '.join(v.name for v in rt.all_views()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=bv.TREE, capture_output=True, text=True
    )
    out.check_returncode()
    return out.stdout.split()


def rebuild_all(store: bv.Store, only: list[str] | None) -> tuple[dict[str, Timed], float]:
    found = {}
    others = bv.Others()
    for name in only or view_names(store.url):
        wall, cpu = time.monotonic(), children_cpu()
        bv.cli("projections", "rebuild", name, url=store.url)
        found[name] = Timed(time.monotonic() - wall, children_cpu() - cpu)
        bv.say(f"    {name:12} {found[name].wall:6.1f} s wall, {found[name].cpu:6.1f} s CPU")
    store.after_rebuild()
    return found, others.share()


def measure(store: bv.Store, folder: Path, tree: str, only: list[str] | None) -> TreeResult:
    bv.TREE = None if tree == "." else str(Path(tree).resolve())
    result = TreeResult(tree)
    if only != []:
        bv.say(f"  tree {tree}: rebuilding")
        result.rebuild, result.others = rebuild_all(store, only)
        bv.say(f"    (other processes used {result.others:.0%} of the cores meanwhile)")
    launch = bv.measure_launch(store, folder, REQUESTS)
    result.first_listing = sorted(launch.first_listing.values())
    result.first_leaderboard = launch.first_leaderboard
    result.timeout_due, result.timeout_recorded = launch.timeout_due, launch.timeout_recorded
    bv.say(
        f"    launch: first listing by each worker "
        f"{', '.join(bv.seconds(s) for s in result.first_listing)}; first leaderboard "
        f"{bv.seconds(result.first_leaderboard)}; timeout due {result.timeout_due:.2f} s, "
        f"recorded {bv.seconds(result.timeout_recorded)} (others {launch.others:.0%})"
    )
    return result


def games_in(store: bv.Store) -> int:
    with Runtime(Settings(database_url=store.url), create_tables=False) as rt:
        table = rt.games.store.recorder.events_table_name  # type: ignore[attr-defined]
        schema = getattr(rt.games.store.recorder.datastore, "schema", None)  # type: ignore[attr-defined]
    name = f'"{schema}"."{table}"' if store.kind == "postgres" and schema else table
    conn = store.connect()
    try:
        cur = conn.cursor()
        cur.execute(store.sql(f"SELECT count(*) FROM {name} WHERE topic LIKE ?"), ["%GameCreated"])
        return int(cur.fetchone()[0])
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--server", default=SERVER, help="the PostgreSQL server to use")
    parser.add_argument("--prefix", default="cantstop_rebuild", help="its databases' names")
    parser.add_argument("--trees", default=".", help="source trees to time, in turn")
    parser.add_argument(
        "--views",
        default=None,
        help="only these views (default: all; 'none': only the launch); on a new store the "
        "others are built once, untimed, before the trees are measured",
    )
    parser.add_argument("--pool", type=int, default=bv.POOL)
    parser.add_argument(
        "--accounts",
        action="store_true",
        help="people's games seat accounts (their turns make notices), not guests",
    )
    parser.add_argument(
        "--spread",
        type=float,
        default=0.0,
        help="date the copies' game events back over this many days, the first copies the "
        "oldest (default 0: all played today); their due clocks are past, so time the launch "
        "on a store without it",
    )
    parser.add_argument("--dir", default=None, help="where SQLite stores go")
    parser.add_argument("--json", default=None, help="append each result as a JSON line here")
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument("--reuse", default=None, help="sqlite:FOLDER or postgres:DATABASE")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    trees = [t for t in args.trees.split(",") if t]
    only = [] if args.views == "none" else args.views.split(",") if args.views else None
    bv.say(
        f"bench.rebuild: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    if args.reuse:
        kind, _, where = args.reuse.partition(":")
        folder = Path(where) if kind == "sqlite" else Path(tempfile.mkdtemp(dir=args.dir))
        store: bv.Store = (
            bv.SQLiteStore(folder)
            if kind == "sqlite"
            else bv.PostgresStore(args.server, dbname=where)
        )
        runs = [(store, folder, games_in(store), False)]
    else:
        runs = []
    for kind in [] if args.reuse else args.stores.split(","):
        for size in [int(s.replace("_", "")) for s in args.sizes.split(",") if s]:
            folder = Path(tempfile.mkdtemp(prefix=f"{args.prefix}-{kind}-{size}-", dir=args.dir))
            store = (
                bv.SQLiteStore(folder)
                if kind == "sqlite"
                else bv.PostgresStore(args.server, prefix=args.prefix)
            )
            runs.append((store, folder, size, True))
    for store, folder, size, new in runs:
        try:
            if new:
                bv.say(f"{store.kind} {size:,}: filling")
                started = time.monotonic()
                rng = random.Random(f"{store.kind}:{size}")
                filled, _ = bv.fill(
                    store, size, args.pool, rng, accounts=args.accounts, spread=args.spread
                )
                bv.say(
                    f"  {filled.rows:,} event rows in {time.monotonic() - started:.0f} s "
                    f"(pool {filled.played.statuses})"
                )
                if only:  # the views not timed, built once (untimed) so that the launch
                    # finds them as a server would: else it builds them event by event
                    rest = [name for name in view_names(store.url) if name not in only]
                    bv.say(f"  building the views not timed: {', '.join(rest)}")
                    for name in rest:
                        bv.cli("projections", "rebuild", name, url=store.url)
            else:
                bv.say(f"{store.kind} {size:,} games (reused)")
            for tree in trees:
                result = measure(store, folder, tree, only)
                if args.json:
                    with open(args.json, "a", encoding="utf-8") as out:
                        row = {"store": store.kind, "size": size, **asdict(result)}
                        row["at"] = datetime.now(UTC).isoformat(timespec="seconds")
                        out.write(json.dumps(row) + "\n")
        finally:
            if args.keep or not new:
                where = store.dbname if isinstance(store, bv.PostgresStore) else folder
                bv.say(f"  kept: --reuse {store.kind}:{where}")
            else:
                store.drop()
                shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
