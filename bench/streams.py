"""`make bench`, live streams: N server-sent-event streams held by one `cantstop serve` on its
defaults, while games are played under them (docs/scaling.md, "Live streams by the thousand").

For each (store, Redis, N) of the command line, a fresh server is started on the settings of
`make run` (2 workers of 128 threads, the scheduler process; only
CANTSTOP_DATABASE_URL, CANTSTOP_REDIS_URL with Redis on, and a free port are set: no stream limit
is raised), on a fresh SQLite file or a fresh database on the local PostgreSQL
(BENCH_POSTGRES_ADMIN_URL, default ``postgresql://postgres@127.0.0.1:5432/postgres``; dropped
after; without a server there, a throwaway pgserver), with a throwaway ``redis-server`` when
Redis is on. Then:

1. Games are created (two players, server dice): ``POPULAR`` games that share
   ``POPULAR_SHARE`` of the streams (thousands of viewers each at 10,000), and many small games
   of ``SMALL_VIEWERS`` viewers each.
2. **Baseline**: actions are played for ``--baseline`` seconds with no stream open, at the
   same paced rate as under load (``--rate`` actions/s, from ``PLAYERS`` threads, each with its
   keep-alive connection and its own games: roll until bust, so no game ever ends).
3. **Open**: one client process (asyncio, one socket per stream, ``--open-concurrency`` opens
   at a time) opens the N streams, each from a loopback address of its own group of
   ``PER_ADDRESS`` streams (127.0.0.2, 127.0.0.3, …) so that the per-address cap of the defaults
   (CANTSTOP_STREAM_MAX_PER_CLIENT, 500 per worker) is never reached: a 429 or 503 is reported.
   Open time: from the connect to the stream's first comment line.
4. **Under load**: the same actions for ``--seconds`` seconds. For every event, the lag from the
   action's answer (the player has its response) to each stream of its game receiving that event
   id (negative: the stream had it first); and every stream must have received every event of its
   game since it opened once, in order (missing, duplicated, out of order: all must be 0).
5. **Memory**: the RSS of the two gunicorn workers, before the streams and with all N open;
   per stream = the difference / N.

The client process runs on the same two cores as the server: its CPU share is shown, as is the
workers' CPU while actions are played under the streams. The clients (the stream reader and the
player threads) stand for clients on hosts of their own, so they run at nice ``CLIENT_NICE``
(when run as root; the header says whether), and the reader reads every ready stream in rounds
``READ_PAUSE`` apart on an epoll loop of its own, each stream's ids by one regular expression:
what is measured is the server's delivery, not a reader starved of CPU by the server's threads.
Timestamps of both client processes are CLOCK_MONOTONIC (``time.monotonic``), which every
process of a host shares.

Modes (``--mode``), what the streams watch and how the players act:

* ``spread`` (the default): as above, 15 actions/s.
* ``few`` (issue #46 item 3): every stream watches one of ``PLAYERS`` games, ``PLAYERS`` threads
  each act on a game of its own **as fast as it can** (``--rate 0``, the default of this mode),
  with no stream open and then under the N streams: the actions' p99 under the streams against
  their p99 with none (the target: at most 5×), and the lag p99 (at most 1 s).
* ``mixed`` (issue #44 item 3): ``spread``'s games, and ``ACCOUNT_SHARE`` of the N streams are
  account streams (``GET /v1/account/stream``) of the players of the played games, each of them
  an account (signed up from loopback addresses of their own: sign-up is limited per address);
  their ``your_turn`` notices are checked as the games' events are (each account's notices after
  its stream's resume point up to its newest at the end: none missing, repeated or out of
  order), and their lag is measured from the answer to the action that ended the turn.

Each stream is a socket, in the client process and in a worker: 10,000 streams need 10,000
file descriptors in the client and about 5,000 in each worker (``make run``'s two), so
``ulimit -n`` must allow them (the client and the workers raise their soft limit to the hard
limit; ``ulimit -Hn`` must be above that).

Run: ``.venv/bin/python -m bench.streams [--mode spread|few|mixed] [--streams 1000,5000,10000]
[--stores sqlite,postgres] [--redis on,off]`` (Linux: it reads /proc, and uses the 127.0.0.0/8
loopback addresses).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import http.client
import itertools
import json
import math
import os
import pickle
import queue
import random
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.http import Client, free_port, processes, tree

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
POPULAR = 4  # games with thousands of viewers each at 10,000 streams
POPULAR_SHARE = 0.6  # of the streams
SMALL_VIEWERS = 5  # the other games' viewers each
ACTIVE_SMALL = 40  # small games played on (the others are watched, and must receive nothing)
PLAYERS = 8  # player threads: half on the popular games, half on the active small ones
PER_ADDRESS = 200  # streams per loopback source address (the default cap: 500 per worker)
ACCOUNT_SHARE = 0.3  # mode "mixed": of the streams, account streams of the played games' players
# A frame's id line, whole, found after a line's end: a pattern that begins with its literal
# lets the regular expression engine skip ahead (6x faster than "^id: " in multiline mode).
EVENT_ID = re.compile(rb"\nid: (\d+)\n")
SIGNUPS_PER_ADDRESS = 8  # sign-ups are limited to 10 a minute per address (README)
PASSWORD = "correct horse battery staple"
OPEN_TIMEOUT = 30.0  # a stream not open by then counts as failed
GRACE = 3.0  # seconds after the last action before the streams are read out
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _die_with_parent() -> None:
    """In a child, before exec: Linux sends it SIGTERM when this bench dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# The clients (the stream reader and the player threads) run at this nice value, above the
# server's 0, when the bench may raise their priority (root). They stand for clients on hosts
# of their own, as the issue measures from outside; here they share the server's two cores, and
# Linux shares the CPU by thread: the server's dozens of threads left the one reader thread so
# little that ~1 GB of events waited unread in its sockets and the lag measured was the reader's
# (docs/scaling.md). With priority, the clients take what they need and the server the rest.
CLIENT_NICE = -10
READ_PAUSE = 0.005  # seconds between the reader's rounds (read_until_stop)


def _client_priority() -> None:
    """Raise the calling thread's priority (Linux: nice is per thread) to ``CLIENT_NICE``."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, 0, CLIENT_NICE)


def _client_child() -> None:
    _die_with_parent()
    _client_priority()


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of sorted ``values``, nearest rank."""
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


# =========================================================================== stream client
# The client process: ``python -m bench.streams --client SPEC OUT``. It opens the streams of
# SPEC (JSON: port, each stream's game, concurrency), prints one JSON line once they are open,
# reads every event id with its arrival time until it reads "stop" on its standard input, then
# writes what each stream received to OUT (a pickle) and prints "done".


class StreamRecord(asyncio.Protocol):
    """One stream's socket and what arrived on it: a game's (``game``, its index), or, with
    ``account`` (an index into the spec's accounts), that account's notices, each with the game
    and version it speaks of (``your_turn``: the turn's end)."""

    def __init__(self, game: int, account: int = -1) -> None:
        self.game = game
        self.account = account
        self.status = 0  # the HTTP status; 0: no answer
        self.code = ""  # a refusal's problem code
        self.started = 0.0  # before the connect
        self.opened = 0.0  # the first comment line arrived
        self.after = -1  # "after version N" of that comment
        self.closed = 0.0  # the server closed it (0: still open when read out)
        self.versions = array("q")
        self.times = array("d")
        self.about: list[tuple[str, int]] = []  # an account's: each notice's (game id, version)
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._head = b""
        self._body = b""
        self._in_body = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if not self._in_body:
            self._head += data
            head, sep, rest = self._head.partition(b"\r\n\r\n")
            if not sep:
                return
            self._in_body = True
            self.status = int(head.split(b" ", 2)[1])
            data = rest
            if self.status != 200:
                with contextlib.suppress(ValueError, KeyError):
                    self.code = json.loads(rest.decode())["code"]
                self._resolve()
                return
        if self.account < 0 and self.opened:
            # A game stream once open: only the ids matter, read by one regular expression over
            # the chunk (in C), not line by line in Python. At 5,000 streams the client reads
            # ~200,000 events a second on the server's two cores: parsed line by line it used
            # ~0.8 core and fell seconds behind, and the lag measured was the client's
            # (docs/scaling.md). An event split across chunks is read whole with the next one.
            text = self._body + data
            end = text.rfind(b"\n") + 1
            self._body = text[end:]
            found = EVENT_ID.findall(b"\n" + text, 0, end + 1)  # the chunk begins a line
            if found:
                self.versions.extend(map(int, found))
                self.times.extend(itertools.repeat(now, len(found)))
            return
        lines = (self._body + data).split(b"\n")
        self._body = lines.pop()
        for line in lines:
            if line.startswith(b"id: "):
                self.versions.append(int(line[4:]))
                self.times.append(now)
            elif line.startswith(b"data: ") and self.account >= 0:
                notice = json.loads(line[6:])
                self.about.append((str(notice.get("game_id", "")), int(notice.get("version", 0))))
            elif line.startswith(b": cantstop ") and not self.opened:
                self.opened = now
                self.after = int(line.rsplit(b" ", 1)[1])
                self._resolve()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = time.monotonic()
        self._resolve()

    def _resolve(self) -> None:
        if not self.ready.done():
            self.ready.set_result(None)

    def result(self) -> dict[str, Any]:
        return {
            "game": self.game,
            "account": self.account,
            "about": self.about,
            "status": self.status,
            "code": self.code,
            "open": self.opened - self.started if self.opened else None,
            "after": self.after,
            "closed": bool(self.closed),
            "versions": self.versions,
            "times": self.times,
        }


def stream_request(port: int, path: str, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Accept: text/event-stream\r\n\r\n"
    ).encode()


async def open_stream(
    port: int, request: bytes, address: str, record: StreamRecord, gate: asyncio.Semaphore
) -> None:
    loop = asyncio.get_running_loop()
    async with gate:
        record.started = time.monotonic()
        try:
            await loop.create_connection(lambda: record, "127.0.0.1", port, local_addr=(address, 0))
            assert record.transport is not None
            record.transport.write(request)
            await asyncio.wait_for(asyncio.shield(record.ready), OPEN_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            record.code = record.code or type(exc).__name__


async def client_main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    port, games, streams = spec["port"], spec["games"], spec["streams"]
    tokens: list[str] = spec.get("accounts", [])
    gate = asyncio.Semaphore(spec["concurrency"])
    # A stream is a game's index, or ``-1 - k``: the notices of account k.
    records = [StreamRecord(g) if g >= 0 else StreamRecord(-1, -1 - g) for g in streams]

    def request(r: StreamRecord) -> bytes:
        if r.account >= 0:
            return stream_request(port, "/v1/account/stream", tokens[r.account])
        return stream_request(port, f"/v1/games/{games[r.game]}/stream")

    started = time.monotonic()
    await asyncio.gather(
        *(
            open_stream(port, request(r), f"127.0.0.{2 + i // PER_ADDRESS}", r, gate)
            for i, r in enumerate(records)
        )
    )
    elapsed = time.monotonic() - started
    statuses: dict[str, int] = {}
    for r in records:
        key = str(r.status) if r.status == 200 and r.opened else f"{r.status} {r.code}".strip()
        statuses[key] = statuses.get(key, 0) + 1
    print(json.dumps({"elapsed": elapsed, "statuses": statuses}), flush=True)
    read_until_stop(records)
    with open(out_path, "wb") as out:
        pickle.dump([r.result() for r in records], out)
    for r in records:
        if r.transport is not None:
            r.transport.close()
    print("done", flush=True)


def read_until_stop(records: list[StreamRecord]) -> None:
    """Read every open stream until "stop" arrives on standard input, on an epoll loop of the
    bench's own rather than asyncio's: a stream's read is then one ``os.read`` and the record's
    parse, where asyncio's transport and handle cost ~15 us a read, and at 5,000 streams the
    server writes each of them up to 10 times a second (its flush gap). Each stream's transport
    is paused and its socket read here (asyncio's loop does not run meanwhile: this blocks it;
    a duplicate descriptor each would need twice the descriptors, over the limit at 10,000)."""
    poller = select.epoll()
    streams: dict[int, StreamRecord] = {}
    for r in records:
        transport = r.transport
        if transport is None or transport.is_closing() or r.closed:
            continue
        transport.pause_reading()
        fd = transport.get_extra_info("socket").fileno()
        poller.register(fd, select.EPOLLIN)
        streams[fd] = r
    stdin = sys.stdin.fileno()
    poller.register(stdin, select.EPOLLIN)
    read = os.read
    while True:
        # A pause between rounds: the reader, at a higher priority than the server, would
        # otherwise wake at each of the server's writes and take the core from it (on two
        # cores, each of ~25,000 writes a second a switch), which a client on a host of its own
        # never does. It reads what came meanwhile in one round; a lag is at most this longer.
        time.sleep(READ_PAUSE)
        for fd, _ in poller.poll(-1, len(streams) + 1):
            if fd == stdin:
                sys.stdin.readline()  # "stop"
                poller.close()
                return
            record = streams[fd]
            try:
                data = read(fd, 1 << 18)
            except OSError:
                data = b""
            if data:
                record.data_received(data)
            else:
                poller.unregister(fd)
                record.connection_lost(None)


def client(spec_path: str, out_path: str) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(client_main(spec_path, out_path))


# ================================================================================= servers
def stop_process(process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)


@contextlib.contextmanager
def redis_server(on: bool, folder: Path) -> Iterator[str | None]:
    if not on:
        yield None
        return
    import redis

    port = free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "no", "--dir", str(folder)]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent
    )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise SystemExit("redis-server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        stop_process(process)


@contextlib.contextmanager
def database(store: str, folder: Path) -> Iterator[str]:
    if store == "sqlite":
        yield f"sqlite:///{folder}/streams.sqlite"
        return
    import psycopg

    admin = os.environ.get("BENCH_POSTGRES_ADMIN_URL", ADMIN_URL)
    try:
        psycopg.connect(admin, connect_timeout=5).close()
    except psycopg.OperationalError:
        if "BENCH_POSTGRES_ADMIN_URL" in os.environ:
            raise
        import pgserver  # no local server: a throwaway one, like the tests'

        server = pgserver.get_server(folder / "pg", cleanup_mode="stop")
        try:
            yield server.get_uri()
        finally:
            server.cleanup()
        return
    name = f"cantstop_bench_streams_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, _ = admin.partition("?")[0].rpartition("/")
    try:
        yield f"{head}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    database_url: str

    @classmethod
    def start(cls, database_url: str, redis_url: str | None, folder: Path) -> Server:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CANTSTOP_")}
        env["CANTSTOP_DATABASE_URL"] = database_url
        if redis_url:
            env["CANTSTOP_REDIS_URL"] = redis_url
        log = folder / "server.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(BIN / "cantstop"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=folder,
                preexec_fn=_die_with_parent,
            )
        server = cls(process, port, log, database_url)
        deadline = time.monotonic() + 60
        while len(server.workers()) < 2 or not server.healthy():
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise SystemExit(f"the server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        return server

    def healthy(self) -> bool:
        try:
            probe = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            probe.request("GET", "/healthz")
            ok = probe.getresponse().status == 200
            probe.close()
            return ok
        except OSError:
            return False

    def workers(self) -> list[int]:
        """The gunicorn workers: the children of the `serve --http-only` process."""
        parents, _ = processes()
        for pid in tree(self.process.pid, parents):
            with contextlib.suppress(OSError):
                if b"--http-only" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return sorted(child for child, parent in parents.items() if parent == pid)
        return []

    def stop(self) -> None:
        stop_process(self.process, timeout=30)


def rss(pid: int) -> int:
    """The resident set of process ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (not idle or waiting on I/O), /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(f) for f in fields]
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]  # user…steal, less idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def postgres_pids(database_name: str) -> list[int]:
    """The PostgreSQL server's processes that work for the database ``database_name``: its
    backends, and the server's own (WAL writer, checkpointer, …), which serve every database."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            command = entry.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not command.startswith("postgres: "):
                continue
            words = command.split()
            backend = any("(" in word or word == "[local]" for word in words)  # a client's
            if database_name in words or not backend:
                pids.append(int(entry.parent.name))
    return pids


def cpu_seconds(pids: list[int]) -> float:
    _, times = processes()
    return sum(times.get(pid, 0.0) for pid in pids)


# ================================================================================= players
@dataclass
class Game:
    id: str
    tokens: list[str]
    state: dict[str, Any]

    @property
    def version(self) -> int:
        return int(self.state["version"])

    def action(self) -> dict[str, Any]:
        """Roll whenever rolling is legal, else the first legal move: every turn busts, nobody
        ever claims a column, the game never ends."""
        legal: list[dict[str, Any]] = self.state["legal_actions"]
        return {"type": "roll"} if {"type": "roll"} in legal else legal[0]


@dataclass
class Played:
    """One action: its game (index), the versions it recorded, when it was sent and answered."""

    game: int
    first: int
    last: int
    sent: float
    answered: float


@dataclass
class Play:
    actions: list[Played] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def latencies(self) -> list[float]:
        return sorted(a.answered - a.sent for a in self.actions)


def play(port: int, games: list[Game], plan: list[list[int]], rate: float, seconds: float) -> Play:
    """Each of ``plan``'s threads acts on its games (indexes into ``games``) in turn, paced so
    that all together send ``rate`` actions a second, for ``seconds``."""
    result = Play()
    lock = threading.Lock()
    each = rate / len(plan)  # 0: as fast as each thread can
    start = time.monotonic() + 0.05
    deadline = start + seconds

    def run(mine: list[int]) -> None:
        _client_priority()
        api = Client(port)
        i = 0
        while True:
            due = start + i / each if each > 0 else max(start, time.monotonic())
            if due >= deadline:
                break
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            index = mine[i % len(mine)]
            i += 1
            game = games[index]
            before = game.version
            sent = time.monotonic()
            try:
                answer = api.call(
                    "POST",
                    f"/v1/games/{game.id}/actions",
                    game.action(),
                    game.tokens[game.state["turn"]["player"]],
                )
            except (RuntimeError, OSError) as exc:
                with lock:
                    result.errors.append(str(exc))
                api.conn.close()
                api = Client(port)
                game.state = api.call("GET", f"/v1/games/{game.id}")
                continue
            answered = time.monotonic()
            game.state = answer["game"]
            with lock:
                result.actions.append(Played(index, before + 1, game.version, sent, answered))
        api.conn.close()

    threads = [threading.Thread(target=run, args=(mine,)) for mine in plan if mine]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return result


# ================================================================================== a run
@dataclass
class Row:
    store: str
    redis: str
    streams: int
    mode: str = "spread"
    opened: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    open_rate: float = 0.0
    open_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)  # p50, p99, max
    baseline_ms: tuple[float, float] = (0.0, 0.0)  # p50, p99
    action_ms: tuple[float, float] = (0.0, 0.0)
    actions: int = 0
    errors: int = 0
    events: int = 0
    deliveries: int = 0
    lag_ms: tuple[float, float, float] = (0.0, 0.0, 0.0)  # from the answer: p50, p99, max
    lag_sent_p99: float = 0.0  # from the request's sending
    notices: int = 0  # deliveries of account notices (mode "mixed"), counted in lag_ms too
    missing_notices: int = 0  # of ``missing``, the notices'
    notice_lag_ms: tuple[float, float] = (0.0, 0.0)  # theirs alone: p50, p99
    missing: int = 0
    duplicates: int = 0
    disordered: int = 0
    unexpected: int = 0
    closed_early: int = 0
    kib_per_stream: float = 0.0
    rss_mib: tuple[float, float] = (0.0, 0.0)  # the workers together, before and with N open
    fds: list[int] = field(default_factory=list)  # open files per worker with N open
    server_cpu: float = 0.0  # the gunicorn workers' CPU under load, in cores
    server_cpu_seconds: float = 0.0  # the same, in seconds: per delivery, the fan-out's cost
    client_cpu: float = 0.0  # the stream client's
    postgres_cpu: float = 0.0  # PostgreSQL's processes for the service's database
    others_cpu: float = 0.0  # the rest of the machine's (not this bench, not its servers)
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        refused = sum(self.refused.values())
        return (
            f"| {self.mode} | {self.store} | {self.redis} | {self.streams:,} | {self.opened:,} | "
            f"{refused} | "
            f"{self.open_ms[0]:.0f} / {self.open_ms[1]:.0f} / {self.open_ms[2]:.0f} | "
            f"{self.open_rate:,.0f} | "
            f"{self.baseline_ms[0]:.1f} / {self.baseline_ms[1]:.1f} | "
            f"{self.action_ms[0]:.1f} / {self.action_ms[1]:.1f} | "
            f"{self.lag_ms[0]:.0f} / {self.lag_ms[1]:.0f} / {self.lag_ms[2]:.0f} | "
            f"{self.missing} / {self.duplicates} / {self.disordered} | "
            f"{self.kib_per_stream:.1f} | {self.server_cpu:.2f} / {self.client_cpu:.2f} |"
        )


HEADER = (
    "| mode | store | Redis | streams | opened | refused | open ms p50 / p99 / max | opens/s | "
    "action ms p50 / p99, none open | action ms p50 / p99, N open | "
    "lag ms p50 / p99 / max | missing / dup. / disorder | KiB per stream | "
    "CPU cores server / client |\n|" + "---|" * 14
)


def mix(n: int) -> tuple[int, list[int]]:
    """The games and each stream's game: ``POPULAR`` games share ``POPULAR_SHARE`` of the
    streams, the rest go ``SMALL_VIEWERS`` to a game; shuffled, so that opens mix the games."""
    popular = min(n, round(n * POPULAR_SHARE))
    small = max(1, (n - popular + SMALL_VIEWERS - 1) // SMALL_VIEWERS) if n > popular else 0
    streams = [i % POPULAR for i in range(popular)]
    streams += [POPULAR + i // SMALL_VIEWERS for i in range(n - popular)]
    random.Random(n).shuffle(streams)
    return POPULAR + small, streams


def layout(mode: str, n: int) -> tuple[int, list[int], list[list[int]], list[int]]:
    """For ``mode``: the games to create, each stream's target (a game's index, or ``-1 - k``:
    the notices of the k-th account), each player thread's games, and the games whose two seats
    are accounts' (the k-th account sits in the (k // 2)-th of them)."""
    half = PLAYERS // 2
    if mode == "few":  # every stream on one of the games the players act on, each its own
        streams = [i % PLAYERS for i in range(n)]
        random.Random(n).shuffle(streams)
        return PLAYERS, streams, [[i] for i in range(PLAYERS)], []
    game_streams = n - round(n * ACCOUNT_SHARE) if mode == "mixed" else n
    count, streams = mix(game_streams)
    active = list(range(POPULAR, min(count, POPULAR + ACTIVE_SMALL)))
    plan = [list(range(POPULAR))[i::half] for i in range(half)]
    plan += [active[i::half] for i in range(half)]
    seated: list[int] = []
    if mode == "mixed":
        seated = [*range(POPULAR), *active]
        accounts = 2 * len(seated)
        streams += [-1 - (i % accounts) for i in range(n - game_streams)]
        random.Random(n + 1).shuffle(streams)
    return count, streams, plan, seated


def sign_up(port: int, handle: str, address: str) -> str:
    """A new account's personal token, signed up from ``address``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(address, 0))
    body = json.dumps({"handle": handle, "password": PASSWORD})
    conn.request("POST", "/v1/accounts", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    payload = json.loads(response.read() or b"null")
    conn.close()
    if response.status >= 400:
        raise SystemExit(f"sign-up of {handle}: {response.status} {payload}")
    return str(payload["token"])


def latest_notice(port: int, token: str) -> int:
    """The account's newest notice's number, as a new account stream announces it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(stream_request(port, "/v1/account/stream", token))
        data = b""
        while (found := re.search(rb": cantstop account \S+ after (\d+)\n", data)) is None:
            chunk = sock.recv(4096)
            if not chunk:
                raise SystemExit(f"an account stream ended early: {data[:300]!r}")
            data += chunk
        return int(found.group(1))


def measure(store: str, redis_on: bool, n: int, args: argparse.Namespace, folder: Path) -> Row:
    row = Row(store, "on" if redis_on else "off", n, args.mode)
    with (
        database(store, folder) as database_url,
        redis_server(redis_on, folder) as redis_url,
    ):
        server = Server.start(database_url, redis_url, folder)
        try:
            run(server, row, args, folder)
        finally:
            server.stop()
    return row


def run(server: Server, row: Row, args: argparse.Namespace, folder: Path) -> None:
    n = row.streams
    count, streams, plan, seated = layout(row.mode, n)
    api = Client(server.port)
    games = []
    accounts: list[str] = []  # the personal tokens of the accounts seated, two a game
    for index in range(count):
        if index in seated:  # two accounts sit down: their turns are notices
            pair = []
            for _ in range(2):
                address = f"127.0.1.{1 + len(accounts) // SIGNUPS_PER_ADDRESS}"
                accounts.append(sign_up(server.port, f"player{len(accounts)}", address))
                pair.append(accounts[-1])
            created = api.call("POST", "/v1/games", {"seats": 2}, pair[0])
            joined = api.call("POST", f"/v1/games/{created['game']['id']}/players", {}, pair[1])
            games.append(Game(created["game"]["id"], pair, joined["game"]))
            continue
        created = api.call("POST", "/v1/games", {"players": ["Ann", "Bob"]})
        games.append(Game(created["game"]["id"], [s["token"] for s in created["seats"]], {}))
        games[-1].state = created["game"]
    api.conn.close()

    # Baseline: no stream open (a short warm-up first, not counted).
    play(server.port, games, plan, args.rate, 2.0)
    baseline = play(server.port, games, plan, args.rate, args.baseline)
    workers = server.workers()
    rss_before = sum(rss(pid) for pid in workers)

    # Open the streams.
    spec, out = folder / "spec.json", folder / "streams.pickle"
    spec.write_text(
        json.dumps(
            {
                "port": server.port,
                "games": [g.id for g in games],
                "streams": streams,
                "accounts": accounts,
                "concurrency": args.open_concurrency,
            }
        )
    )
    streamer = subprocess.Popen(
        [sys.executable, "-m", "bench.streams", "--client", str(spec), str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
        preexec_fn=_client_child,
    )
    lines: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        assert streamer.stdout is not None
        for raw in streamer.stdout:
            lines.put(raw)
        lines.put(b"")

    threading.Thread(target=pump, daemon=True).start()
    try:
        try:
            opened = json.loads(lines.get(timeout=args.open_timeout))
        except (queue.Empty, ValueError):
            raise SystemExit("the stream client did not open its streams in time") from None
        statuses: dict[str, int] = opened["statuses"]
        row.opened = statuses.pop("200", 0)
        row.refused = statuses
        row.open_rate = n / opened["elapsed"]
        time.sleep(2.0)  # settle
        rss_open = sum(rss(pid) for pid in workers)
        row.rss_mib = (rss_before / 2**20, rss_open / 2**20)
        row.kib_per_stream = (rss_open - rss_before) / 1024 / max(1, row.opened)
        row.fds = [fds(pid) for pid in workers]

        # Play under the streams.
        cpu_server = cpu_seconds(workers)
        cpu_client = cpu_seconds([streamer.pid])
        database_name = server.database_url.rpartition("/")[2]
        pg = postgres_pids(database_name) if server.database_url.startswith("postgresql") else []
        cpu_pg = cpu_seconds(pg)
        cpu_ours = cpu_seconds(ours := tree(os.getpid(), processes()[0]))
        cpu_machine = busy_seconds()
        began = time.monotonic()
        loaded = play(server.port, games, plan, args.rate, args.seconds)
        time.sleep(GRACE)
        latest = [latest_notice(server.port, token) for token in accounts]
        elapsed = time.monotonic() - began
        row.server_cpu_seconds = cpu_seconds(workers) - cpu_server
        row.server_cpu = row.server_cpu_seconds / elapsed
        row.client_cpu = (cpu_seconds([streamer.pid]) - cpu_client) / elapsed
        ours_used = cpu_seconds(ours) - cpu_ours
        pg_used = cpu_seconds(pg) - cpu_pg
        row.postgres_cpu = pg_used / elapsed
        row.others_cpu = (busy_seconds() - cpu_machine - ours_used - pg_used) / elapsed
        assert streamer.stdin is not None
        streamer.stdin.write(b"stop\n")
        streamer.stdin.flush()
        if lines.get(timeout=120).strip() != b"done":
            raise SystemExit("the stream client failed")
        with open(out, "rb") as source:
            received: list[dict[str, Any]] = pickle.load(source)
    finally:
        stop_process(streamer)
    figures(row, baseline, loaded, games, received, latest)
    if row.errors:
        row.notes.append(f"action errors: {sorted(set(loaded.errors))[:3]}")


def figures(
    row: Row,
    baseline: Play,
    loaded: Play,
    games: list[Game],
    received: list[dict[str, Any]],
    latest: list[int],
) -> None:
    base = baseline.latencies()
    row.baseline_ms = (pct(base, 0.5) * 1000, pct(base, 0.99) * 1000)
    under = loaded.latencies()
    row.action_ms = (pct(under, 0.5) * 1000, pct(under, 0.99) * 1000)
    row.actions, row.errors = len(loaded.actions), len(loaded.errors)
    row.events = sum(a.last - a.first + 1 for a in loaded.actions)
    answered: dict[tuple[int, int], tuple[float, float]] = {}
    for a in loaded.actions:
        for version in range(a.first, a.last + 1):
            answered[a.game, version] = (a.sent, a.answered)
    opens = sorted(r["open"] for r in received if r["status"] == 200 and r["open"] is not None)
    row.open_ms = (
        pct(opens, 0.5) * 1000,
        pct(opens, 0.99) * 1000,
        opens[-1] * 1000 if opens else 0,
    )
    lags: list[float] = []
    from_sent: list[float] = []
    notice_lags: list[float] = []
    index = {g.id: i for i, g in enumerate(games)}
    for r in received:
        if r["status"] != 200 or r["open"] is None:
            continue
        if r["account"] >= 0:  # an account's notices, numbered 1, 2, 3… by the account
            got = list(r["versions"])
            expected = range(r["after"] + 1, latest[r["account"]] + 1)
            row.missing += len(set(expected) - set(got))
            row.missing_notices += len(set(expected) - set(got))
            row.duplicates += len(got) - len(set(got))
            row.disordered += sum(1 for a, b in itertools.pairwise(got) if b < a)
            row.unexpected += sum(1 for v in got if v not in expected)
            row.closed_early += bool(r["closed"])
            row.notices += len(got)
            for (game_id, version), at in zip(r["about"], r["times"], strict=True):
                times = answered.get((index.get(game_id, -1), version))
                if times is not None:
                    lags.append(at - times[1])
                    notice_lags.append(at - times[1])
                    from_sent.append(at - times[0])
            continue
        game = r["game"]
        got = list(r["versions"])
        final = games[game].version
        expected = range(r["after"] + 1, final + 1)
        row.missing += len(set(expected) - set(got))
        row.duplicates += len(got) - len(set(got))
        row.disordered += sum(1 for a, b in itertools.pairwise(got) if b < a)
        row.unexpected += sum(1 for v in got if v not in expected)
        row.closed_early += bool(r["closed"])
        for version, at in zip(got, r["times"], strict=True):
            times = answered.get((game, version))
            if times is not None:
                lags.append(at - times[1])
                from_sent.append(at - times[0])
    lags.sort()
    from_sent.sort()
    row.deliveries = len(lags)
    row.lag_ms = (
        pct(lags, 0.5) * 1000,
        pct(lags, 0.99) * 1000,
        (lags[-1] if lags else 0.0) * 1000,
    )
    row.lag_sent_p99 = pct(from_sent, 0.99) * 1000
    notice_lags.sort()
    row.notice_lag_ms = (pct(notice_lags, 0.5) * 1000, pct(notice_lags, 0.99) * 1000)


def details(row: Row) -> str:
    return (
        f"  {row.mode}/{row.store}/redis {row.redis}/{row.streams:,}: opened {row.opened:,}, "
        f"refused {row.refused or 0}; {row.actions} actions ({row.errors} errors), {row.events} "
        f"events, {row.deliveries:,} deliveries ({row.notices:,} notices, "
        f"{row.missing_notices} missing: lag p50/p99 "
        f"{row.notice_lag_ms[0]:.0f}/{row.notice_lag_ms[1]:.0f} ms); "
        f"lag from sending p99 {row.lag_sent_p99:.0f} ms; workers' CPU per 1,000 deliveries "
        f"{row.server_cpu_seconds * 1e6 / max(1, row.deliveries):.0f} ms (the actions' "
        "included); "
        f"unexpected {row.unexpected}, closed early {row.closed_early}; workers' RSS "
        f"{row.rss_mib[0]:.0f} -> {row.rss_mib[1]:.0f} MiB, open files per worker {row.fds}; "
        f"CPU of PostgreSQL {row.postgres_cpu:.2f}, of all else {row.others_cpu:.2f} cores"
        + "".join(f"; {note}" for note in row.notes)
    )


def others_running() -> list[str]:
    """Other benchmarks on this machine (their command lines), this one's processes aside."""
    parents = processes()[0]
    mine = set(tree(os.getpid(), parents))
    pid = os.getpid()
    while pid in parents:  # and the processes that started this one (`timeout`, make, …)
        pid = parents[pid]
        mine.add(pid)
    found = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            command = entry.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "bench." in command and int(entry.parent.name) not in mine:
                found.append(command.strip())
    return found


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--client":
        client(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--streams", default="1000,5000,10000")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--redis", default="on,off")
    parser.add_argument(
        "--mode",
        choices=("spread", "few", "mixed"),
        default="spread",
        help="spread: many games, 4 popular; few: every stream on the 8 games the players act "
        "on, each its own, as fast as they can; mixed: spread, with 30%% of the streams the "
        "account streams of the played games' players",
    )
    parser.add_argument(
        "--rate",
        type=float,
        help="actions per second, 0: as fast as the players can (default: 15, 0 in mode few)",
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="play under the streams")
    parser.add_argument("--baseline", type=float, default=15.0, help="play with none open")
    parser.add_argument("--open-concurrency", type=int, default=64)
    parser.add_argument("--open-timeout", type=float, default=600.0)
    args = parser.parse_args()
    if args.rate is None:
        args.rate = 0.0 if args.mode == "few" else 15.0
    others = others_running()
    if others:
        print("warning: other benchmarks are running:", *others, sep="\n  ", file=sys.stderr)
    print(
        f"{os.cpu_count()} CPUs; `cantstop serve` on its defaults; mode {args.mode}; "
        f"{f'{args.rate:g} actions/s' if args.rate > 0 else 'as fast as they can'} "
        f"from {PLAYERS} threads, {args.baseline:g} s with no stream, {args.seconds:g} s under "
        f"the streams; opens {args.open_concurrency} at a time; clients at "
        f"{f'nice {CLIENT_NICE}' if os.geteuid() == 0 else 'the server’s priority (not root)'}",
        flush=True,
    )
    rows = []
    for store in args.stores.split(","):
        for redis_on in (r == "on" for r in args.redis.split(",")):
            for n in (int(s) for s in args.streams.split(",")):
                folder = Path(tempfile.mkdtemp(prefix="cantstop-bench-streams-"))
                try:
                    row = measure(store, redis_on, n, args, folder)
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
                rows.append(row)
                print(details(row), flush=True)
    print(HEADER)
    for row in rows:
        print(row.line())
    bad = [r for r in rows if r.missing or r.duplicates or r.disordered or r.unexpected]
    if bad:
        print("EVENTS LOST, REPEATED OR OUT OF ORDER in:", *(r.line() for r in bad), sep="\n")


if __name__ == "__main__":
    main()
