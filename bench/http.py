"""Benchmark the HTTP API through gunicorn on SQLite: whole games, actions/s, p50 and p99 latency.

Starts `cantstop serve` (2 workers) on a free loopback port with a throwaway SQLite file, then
several client threads each play whole server-dice games (always a legal action; stop after two
moves) for a fixed time. Bounded in time; it stops the server itself.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CLIENTS = int(os.environ.get("BENCH_CLIENTS", "4"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "15"))
WORKERS = os.environ.get("BENCH_WORKERS", "2")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Client:
    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        response = self.conn.getresponse()
        payload = json.loads(response.read() or b"null")
        if response.status >= 400:
            raise RuntimeError(f"{method} {path}: {response.status} {payload}")
        return payload


def player(port: int, deadline: float, latencies: list[float], games: list[int]) -> None:
    client = Client(port)
    while time.perf_counter() < deadline:
        created = client.call("POST", "/v1/games", {"players": ["Ann", "Bob"]})
        game, tokens = created["game"], [s["token"] for s in created["seats"]]
        moves = 0
        while game["status"] == "in_progress" and time.perf_counter() < deadline:
            legal = game["legal_actions"]
            if {"type": "stop"} in legal and moves >= 2:
                action, moves = {"type": "stop"}, 0
            else:
                action = legal[0]
                moves += action["type"] == "move"
                if action["type"] == "roll" and game["turn"]["phase"] == "roll":
                    moves = 0
            started = time.perf_counter()
            result = client.call(
                "POST", f"/v1/games/{game['id']}/actions", action, tokens[game["turn"]["player"]]
            )
            latencies.append(time.perf_counter() - started)
            game = result["game"]
        if game["status"] == "finished":
            games.append(1)


def main() -> None:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="cantstop-bench-"))
    env = {
        **os.environ,
        "CANTSTOP_DATABASE_URL": f"sqlite:///{workdir / 'bench.sqlite'}",
        "CANTSTOP_ACCESS_LOG": "",
        "CANTSTOP_RATE_LIMITS": "off",
    }
    env.pop("CANTSTOP_REDIS_URL", None)
    cantstop = Path(sys.executable).with_name("cantstop")
    server = subprocess.Popen(
        [str(cantstop), "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", WORKERS],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                Client(port).call("GET", "/healthz")
                break
            except (OSError, RuntimeError):
                time.sleep(0.05)
        else:
            raise SystemExit("the server did not start")
        latencies: list[float] = []
        games: list[int] = []
        deadline = time.perf_counter() + SECONDS
        threads = [
            threading.Thread(target=player, args=(port, deadline, latencies, games))
            for _ in range(CLIENTS)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(timeout=15)
    latencies.sort()
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    print(
        f"HTTP through gunicorn ({WORKERS} workers, SQLite, {CLIENTS} clients, {elapsed:.0f} s): "
        f"{len(latencies) / elapsed:,.0f} actions/s, {len(games)} whole games, "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )


if __name__ == "__main__":
    main()
