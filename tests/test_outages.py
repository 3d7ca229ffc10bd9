"""Outages of the event store, with real parts: a PostgreSQL stopped and started by the test, a real
``cantstop serve``, and faults injected between our guard and eventsourcing's recorder.

From the GitHub issue on outages: with PostgreSQL down every request hung ~102 s, then 500; after a
restart an action that had been recorded was answered 409; 32 threads sending one action with one
Idempotency-Key got some 409s instead of the first response.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import OperationalError
from flask import Flask
from flask.testing import FlaskClient

from bench.http import processes, tree
from service.application.games.use_cases import Games
from service.config import Settings
from service.http.app import create_app
from service.persistence.errors import NoAnswer
from service.persistence.guard import COOLDOWN
from tests.support.http import HOST, Reply, problem, send
from tests.support.polling import wait_until
from tests.support.racing import race_cleanly
from tests.support.servers import free_port, serving

Json = dict[str, Any]
PROMPT = 8.0  # seconds: an upper bound that proves no ~100 s hang, not a benchmark


# ------------------------------------------------------------------- a PostgreSQL of our own
class ThrowawayPostgres:
    """A PostgreSQL server for one test, on a TCP port, which the test stops and starts.

    pgserver initialises the data directory (and, as root, the user that runs the server); the
    server is then driven with the pg_ctl of the pgserver package. The session's server, which
    other tests use, is never touched."""

    def __init__(self, root: Path) -> None:
        import pgserver
        from pgserver._commands import POSTGRES_BIN_PATH

        self.pg_ctl = POSTGRES_BIN_PATH / "pg_ctl"
        assert self.pg_ctl.is_file(), f"no pg_ctl at {self.pg_ctl}"
        self.pgdata = root / "pgdata"
        self.pgdata.mkdir()
        self.log = self.pgdata / "server.log"
        initial = pgserver.get_server(self.pgdata, cleanup_mode=None)  # initdb, then started
        self.system_user = initial.system_user
        self.port = free_port()
        self.stop()  # pgserver's server listens on a socket only: restart it on TCP
        self.start()
        try:
            with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
                conn.execute("CREATE DATABASE cantstop")
        except BaseException:
            self.stop()
            raise

    def url(self, dbname: str = "cantstop") -> str:
        return f"postgresql://postgres@{HOST}:{self.port}/{dbname}"

    def _ctl(self, *args: str) -> None:
        done = subprocess.run(
            [str(self.pg_ctl), "-D", str(self.pgdata), *args],
            user=self.system_user,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # pipes can hang pg_ctl (the server inherits them)
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise AssertionError(f"pg_ctl {' '.join(args)} failed ({done.returncode}):\n{log}")

    def start(self) -> None:
        options = f"-c listen_addresses={HOST} -p {self.port} -c unix_socket_directories=''"
        self._ctl("-w", "-t", "30", "-l", str(self.log), "-o", options, "start")

    def stop(self) -> None:
        """A fast shutdown: open sessions are ended, as in a restart or a failover."""
        self._ctl("-w", "-t", "30", "-m", "fast", "stop")

    def running(self) -> bool:
        return (self.pgdata / "postmaster.pid").exists()

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """The server stopped (SIGSTOP, every process of it) without closing a connection: as
        a hung or frozen host. Its kernel still accepts and acknowledges; nothing answers."""
        postmaster = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        parents, _ = processes()
        pids = tree(postmaster, parents)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[ThrowawayPostgres]:
    server = ThrowawayPostgres(tmp_path)
    try:
        yield server
    finally:
        if server.running():
            server.stop()


# ------------------------------------------------------------------------------- helpers
def create_manual_game(port: int) -> tuple[str, list[str]]:
    reply = send(port, "POST", "/v1/games", {"players": ["Ann", "Bob"], "dice": "manual"})
    assert reply.status == 201, reply.body
    created = reply.json()
    return created["game"]["id"], [seat["token"] for seat in created["seats"]]


def act_on(port: int, game_id: str, token: str, action: Json, key: str | None = None) -> Reply:
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return send(port, "POST", f"/v1/games/{game_id}/actions", action, headers)


@contextlib.contextmanager
def one_worker_server(tmp_path: Path, postgres: ThrowawayPostgres, **env: str) -> Iterator[int]:
    """``cantstop serve`` on ``postgres``, started, and its port: one worker with 16 threads,
    so that 64 requests waiting on a hung store would hold all of them."""
    port = free_port()
    settings = {"CANTSTOP_DATABASE_URL": postgres.url(), "CANTSTOP_THREADS": "16", **env}
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    with serving(tmp_path, *args, env=settings, ready_port=port):
        yield port


def retried_until_recorded(
    port: int, game_id: str, token: str, action: Json, key: str
) -> list[Reply]:
    """Every attempt at ``action``, retried as a client should (one Idempotency-Key: if an
    attempt was recorded but its answer lost, the next is answered as that one was) until one
    is answered 200; each before it 503."""
    attempts: list[Reply] = []

    def recorded() -> bool:
        reply = act_on(port, game_id, token, action, key)
        attempts.append(reply)
        assert reply.status in (200, 503), (reply.status, reply.body)
        return reply.status == 200

    wait_until(recorded, 30, "the action to succeed once PostgreSQL answers again")
    return attempts


def stored_history(port: int, game_id: str) -> list[Json]:
    """The game's recorded events, read back: versions 1, 2, … with none missing or repeated."""
    history = send(port, "GET", f"/v1/games/{game_id}/events?limit=1000")
    assert history.status == 200, history.body
    stored: list[Json] = history.json()["events"]
    assert [e["version"] for e in stored] == list(range(1, len(stored) + 1))
    return stored


def unavailable(reply: Reply, what: str) -> None:
    """503 store_unavailable with a Retry-After, promptly."""
    assert reply.seconds < PROMPT, f"{what} took {reply.seconds:.1f} s"
    problem(reply, 503, "store_unavailable")
    assert reply.headers.get("retry-after", "").isdigit(), reply.headers


def unhealthy(reply: Reply) -> None:
    assert reply.seconds < PROMPT, f"/healthz took {reply.seconds:.1f} s"
    assert reply.status == 503, reply.body
    assert reply.content_type == "application/json"
    assert reply.json()["checks"]["database"].startswith("down")


# --------------------------------------------------------------------- PostgreSQL stopped
@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_stopped_then_started_answers_503_promptly_and_recovers_losing_nothing(
    tmp_path: Path, own_postgres: ThrowawayPostgres
) -> None:
    with one_worker_server(tmp_path, own_postgres) as port:
        game_id, (ann, _bob) = create_manual_game(port)
        acknowledged: list[Json] = []
        rolled = act_on(port, game_id, ann, {"type": "roll", "dice": [1, 2, 3, 4]})
        assert rolled.status == 200, rolled.body
        acknowledged += rolled.json()["events"]
        assert send(port, "GET", f"/v1/games/{game_id}").status == 200  # now in the cache

        own_postgres.stop()
        move = {"type": "move", "sums": [3, 7]}
        unavailable(act_on(port, game_id, ann, move), "an action")
        unavailable(send(port, "GET", f"/v1/games/{game_id}"), "a read of a cached game")
        unavailable(send(port, "GET", f"/v1/games/{game_id}/events"), "a read of the events")
        unhealthy(send(port, "GET", "/healthz"))

        # Many requests at once: every one is answered 503 promptly, and the index still
        # answers meanwhile (no thread is held by a hung store). They start once the breaker
        # opened by the failures above has closed again, so they try the store themselves.
        time.sleep(COOLDOWN + 0.2)
        requests: list[tuple[str, str, Json | None, dict[str, str]]] = [
            ("POST", f"/v1/games/{game_id}/actions", move, {"Authorization": f"Bearer {ann}"}),
            ("GET", f"/v1/games/{game_id}", None, {}),
            ("GET", f"/v1/games/{game_id}/events", None, {}),
            ("GET", "/healthz", None, {}),
        ]
        start = threading.Barrier(65, timeout=30)

        def one(i: int) -> Reply:
            method, path, body, headers = requests[i % len(requests)]
            start.wait()
            return send(port, method, path, body, headers)

        with ThreadPoolExecutor(max_workers=64) as pool:
            futures = [pool.submit(one, i) for i in range(64)]
            start.wait()
            index = [send(port, "GET", "/")]
            while not all(future.done() for future in futures):  # the index, meanwhile
                index.append(send(port, "GET", "/"))
            replies = [future.result(timeout=60) for future in futures]
        assert all(r.status == 200 and r.seconds < PROMPT for r in index), [
            (r.status, r.seconds) for r in index
        ]
        for i, reply in enumerate(replies):
            if requests[i % len(requests)][1] == "/healthz":
                unhealthy(reply)
            else:
                unavailable(reply, f"concurrent request {i}")

        own_postgres.start()
        key = f"after-restart-{uuid.uuid4()}"
        attempts = retried_until_recorded(port, game_id, ann, move, key)
        assert all(a.seconds < PROMPT for a in attempts), [a.seconds for a in attempts]
        acknowledged += attempts[-1].json()["events"]
        health = send(port, "GET", "/healthz")
        assert health.status == 200
        assert health.json()["checks"]["writes"] == "ok"  # the one worker's last write worked

        stored = stored_history(port, game_id)
        for event in acknowledged:
            assert event in stored, f"acknowledged event {event['version']} was lost"
        assert stored[-len(attempts[-1].json()["events"]) :] == attempts[-1].json()["events"]


# ----------------------------------------------------------- PostgreSQL not answering
@pytest.mark.postgres
@pytest.mark.slow
def test_a_postgres_that_stops_answering_gets_503_within_the_query_timeout_and_loses_nothing(
    tmp_path: Path, own_postgres: ThrowawayPostgres
) -> None:
    """A frozen server keeps its connections open and answers nothing: before the query timeout
    every request that reached the store, /healthz too, hung for as long as the server did."""
    with one_worker_server(tmp_path, own_postgres, CANTSTOP_PG_QUERY_TIMEOUT="2") as port:
        game_id, (ann, _bob) = create_manual_game(port)
        rolled = act_on(port, game_id, ann, {"type": "roll", "dice": [1, 2, 3, 4]})
        assert rolled.status == 200, rolled.body
        acknowledged: list[Json] = rolled.json()["events"]
        move = {"type": "move", "sums": [3, 7]}
        key = f"frozen-{uuid.uuid4()}"

        with own_postgres.frozen():
            unavailable(act_on(port, game_id, ann, move, key), "an action")
            time.sleep(COOLDOWN + 0.2)  # past the breaker: each request tries the store
            unavailable(send(port, "GET", f"/v1/games/{game_id}"), "a read of a cached game")
            time.sleep(COOLDOWN + 0.2)
            unhealthy(send(port, "GET", "/healthz"))

        # The action may have been recorded after all (the frozen server held it, and ran it
        # when it woke): retried with its key, it is answered as recorded, once.
        attempts = retried_until_recorded(port, game_id, ann, move, key)
        acknowledged += attempts[-1].json()["events"]
        stored = stored_history(port, game_id)
        assert stored[-len(acknowledged) :] == acknowledged  # every one, each once, in order
        assert send(port, "GET", "/healthz").status == 200


@pytest.mark.postgres
def test_a_statement_waits_at_most_the_query_timeout_but_creating_the_tables_waits_its_turn(
    postgres_url: str,
) -> None:
    """A lock held elsewhere: the action's insert is cancelled at the query timeout (503,
    nothing recorded); table creation, whose migration may rewrite a large table, waits."""
    app = create_app(Settings(database_url=postgres_url, pg_query_timeout=1), create_tables=True)
    try:
        games = app.extensions["cantstop"].games
        game_id, (ann, _bob) = manual_game(app)
        before = events_of(app, game_id)
        table = (
            f'"{games.store.recorder.datastore.schema}"."{games.store.recorder.events_table_name}"'
        )
        client = app.test_client()
        headers = {"Authorization": f"Bearer {ann}"}
        roll = {"type": "roll", "dice": [1, 2, 3, 4]}
        with psycopg.connect(postgres_url) as holder:
            holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            refused = client.post(f"/v1/games/{game_id}/actions", json=roll, headers=headers)
            assert time.monotonic() - started < PROMPT
            assert refused.status_code == 503, refused.get_json()
            assert refused.get_json()["code"] == "store_unavailable"

            created: list[float] = []

            def create() -> None:
                begun = time.monotonic()
                games.store.recorder.create_table()
                created.append(time.monotonic() - begun)

            creator = threading.Thread(target=create)
            creator.start()
            creator.join(2.5)  # longer than the query timeout, with the lock still held
            assert creator.is_alive() and not created
            holder.rollback()  # the lock goes
            creator.join(30)
            assert created and created[0] > 2.0  # well past the query timeout

        def answered() -> bool:  # the breaker opened by the refusal closes within a second
            reply = client.post(f"/v1/games/{game_id}/actions", json=roll, headers=headers)
            assert reply.status_code in (200, 503), reply.get_json()
            return reply.status_code == 200

        wait_until(answered, 10, "the action to be recorded once the lock is gone")
        after = events_of(app, game_id)
        assert [e["type"] for e in after[len(before) :]] == ["DiceRolled"]  # the refused one: not
    finally:
        app.extensions["cantstop"].close()


@pytest.mark.postgres
def test_a_read_past_the_query_timeout_is_cancelled_and_its_connection_replaced(
    postgres_url: str,
) -> None:
    """A statement through the store's cursors (reads, the side tables, the views) that runs
    past the query timeout is cancelled by the server at the deadline: NoAnswer, its connection
    closed, and the next statement answered on another."""
    app = create_app(Settings(database_url=postgres_url, pg_query_timeout=1), create_tables=True)
    try:
        datastore = app.extensions["cantstop"].games.recorder.datastore
        started = time.monotonic()
        with pytest.raises(OperationalError) as failed, datastore.transaction() as curs:
            curs.execute("SELECT pg_sleep(30)")
        assert time.monotonic() - started < PROMPT
        assert isinstance(failed.value.__cause__, NoAnswer)
        with datastore.transaction() as curs:
            curs.execute("SELECT 1 AS one")
            assert curs.fetchone() == {"one": 1}
        with psycopg.connect(postgres_url, autocommit=True) as conn:  # cancelled, not running
            running = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' "
                "AND state = 'active'"
            ).fetchone()
            assert running == (0,)
    finally:
        app.extensions["cantstop"].close()


# ------------------------------------------------------------ faults below the guard
class Faults:
    """Faults injected into the store's own insert (``_insert``, beneath the service's guard,
    which retries, then answers 503): where a dropped connection or a stopped server shows
    itself.

    The next insert writes its events, then loses its answer (as a connection dropped after
    COMMIT); with ``down_after_commit`` the store is unreachable from then on (nothing is
    written) until the test sets ``down`` back to False."""

    def __init__(self, games: Games, *, down_after_commit: bool = False) -> None:
        self.lose_answer = True
        self.down = False
        self.fired: list[str] = []
        recorder: Any = games.store.recorder
        # Every insert of both stores' recorders goes through it, with or without snapshots.
        recorder._insert = self._faulty(recorder._insert, down_after_commit)

    def _faulty(self, insert: Any, down_after_commit: bool) -> Any:
        def faulty_insert(*args: Any) -> Any:
            if self.down:
                self.fired.append("refused")
                raise OperationalError("connection refused (injected)")
            result = insert(*args)
            if self.lose_answer:
                self.lose_answer = False
                self.down = down_after_commit
                self.fired.append("committed")
                raise OperationalError(
                    "server closed the connection unexpectedly (injected after COMMIT)"
                )
            return result

        return faulty_insert


@pytest.fixture
def flask_app(database_url: str) -> Iterator[Flask]:
    app = create_app(Settings(database_url=database_url), create_tables=True)
    yield app
    app.extensions["cantstop"].close()


def manual_game(app: Flask) -> tuple[str, list[str]]:
    created = app.test_client().post(
        "/v1/games", json={"players": ["Ann", "Bob"], "dice": "manual"}
    )
    assert created.status_code == 201, created.get_json()
    body = created.get_json()
    return body["game"]["id"], [seat["token"] for seat in body["seats"]]


def events_of(app: Flask, game_id: str) -> list[Json]:
    reply = app.test_client().get(f"/v1/games/{game_id}/events?limit=1000")
    assert reply.status_code == 200, reply.get_json()
    events: list[Json] = reply.get_json()["events"]
    return events


def test_a_full_disk_refuses_writes_with_503_keeps_reads_and_healthz_tells_until_a_write_works(
    tmp_path: Path,
) -> None:
    """SQLite's own "database or disk is full" (SQLITE_FULL), made real by capping the file at
    the pages it has, on the connection that every action of this process writes through."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'full.sqlite'}")
    app = create_app(settings, create_tables=True)
    try:
        client = app.test_client()
        game_id, tokens = manual_game(app)
        assert client.get("/healthz").get_json()["checks"]["writes"] == "ok"
        writer = app.extensions["cantstop"].games.store.recorder.datastore.pool.writer()
        pages = writer.execute("PRAGMA page_count").fetchone()[0]
        writer.execute(f"PRAGMA max_page_count = {pages}")

        def next_action() -> Any:
            game = client.get(f"/v1/games/{game_id}").get_json()
            assert game["status"] == "in_progress", "the game ended before the file filled"
            legal = game["legal_actions"]
            action = (
                {"type": "roll", "dice": [1, 2, 3, 4]}
                if legal == [{"type": "roll"}]
                else ({"type": "stop"} if {"type": "stop"} in legal else legal[0])
            )
            token = tokens[game["turn"]["player"]]
            return client.post(
                f"/v1/games/{game_id}/actions",
                json=action,
                headers={"Authorization": f"Bearer {token}"},
            )

        history = events_of(app, game_id)
        refused = next_action()
        while refused.status_code == 200:  # the rows fill the pages there are, then need more
            history += refused.get_json()["events"]
            refused = next_action()
        assert refused.status_code == 503, refused.get_json()
        assert refused.get_json()["code"] == "store_unavailable"

        assert events_of(app, game_id) == history  # reads go on; the refused action left nothing
        health = client.get("/healthz")
        assert health.status_code == 200  # the database answers: games can still be read
        assert health.get_json()["status"] == "degraded"
        assert health.get_json()["checks"]["database"] == "ok"
        writes = health.get_json()["checks"]["writes"]
        assert re.fullmatch(r"failing since 20\S+Z: OperationalError", writes), writes
        assert next_action().status_code == 503  # still full: still failing, since the first
        assert client.get("/healthz").get_json()["checks"]["writes"] == writes

        writer.execute("PRAGMA max_page_count = 1073741823")  # room again
        assert next_action().status_code == 200
        health = client.get("/healthz")
        assert health.get_json()["status"] == "ok"
        assert health.get_json()["checks"]["writes"] == "ok"
    finally:
        app.extensions["cantstop"].close()


def test_a_database_locked_from_outside_answers_each_writer_503_promptly_not_in_turn(
    tmp_path: Path,
) -> None:
    """Another program holds an exclusive transaction on the SQLite file (a backup tool, the
    sqlite3 shell). Writers waited 10 s for SQLite's lock, tried again, and queued behind one
    another in the process: the fourth got its 503 after 40 s. Each now gets its 503 within
    about 2 s (SQLite's lock timeout, and no longer than it behind another writer of the same
    process), long before the lock is let go; nothing is recorded; then writes work again."""
    path = tmp_path / "locked.sqlite"
    app = create_app(Settings(database_url=f"sqlite:///{path}"), create_tables=True)
    try:
        game_id, tokens = manual_game(app)
        before = events_of(app, game_id)
        outsider = sqlite3.connect(path, isolation_level=None)
        outsider.execute("BEGIN EXCLUSIVE")
        held_until = time.monotonic() + 20

        def write(i: int) -> tuple[int, str, float]:
            client = app.test_client()
            if i % 2:
                reply = client.post("/v1/games", json={"players": ["Cy", "Di"]})
            else:
                reply = client.post(
                    f"/v1/games/{game_id}/actions",
                    json={"type": "roll", "dice": [1, 2, 3, 4]},
                    headers={"Authorization": f"Bearer {tokens[0]}"},
                )
            return reply.status_code, reply.get_json()["code"], time.monotonic()

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(write, range(4)))
        assert [(status, code) for status, code, _ in answers] == [(503, "store_unavailable")] * 4
        assert all(answered < held_until for _, _, answered in answers)  # not in turn, at last
        outsider.execute("ROLLBACK")
        outsider.close()
        assert events_of(app, game_id) == before
        client = app.test_client()
        roll = client.post(
            f"/v1/games/{game_id}/actions",
            json={"type": "roll", "dice": [1, 2, 3, 4]},
            headers={"Authorization": f"Bearer {tokens[0]}"},
        )
        assert roll.status_code == 200, roll.get_json()
    finally:
        app.extensions["cantstop"].close()


def test_an_action_whose_answer_was_lost_after_commit_is_answered_200_and_recorded_once(
    flask_app: Flask,
) -> None:
    game_id, (ann, _bob) = manual_game(flask_app)
    before = events_of(flask_app, game_id)
    faults = Faults(flask_app.extensions["cantstop"].games)

    reply = flask_app.test_client().post(
        f"/v1/games/{game_id}/actions",
        json={"type": "roll", "dice": [1, 2, 3, 4]},
        headers={"Authorization": f"Bearer {ann}"},
    )
    assert faults.fired == ["committed"]
    assert reply.status_code == 200, reply.get_json()
    events = reply.get_json()["events"]
    assert [e["type"] for e in events] == ["DiceRolled"]
    assert events_of(flask_app, game_id) == before + events  # recorded exactly once
    assert reply.get_json()["game"]["version"] == events[-1]["version"]


def test_a_retry_with_the_same_key_after_a_lost_answer_and_a_503_gets_the_first_answer(
    flask_app: Flask,
) -> None:
    """The insert commits, its answer is lost and the store is then unreachable: 503. The
    client's retry with the same Idempotency-Key is answered as the recorded action, not 409."""
    game_id, (ann, _bob) = manual_game(flask_app)
    before = events_of(flask_app, game_id)
    faults = Faults(flask_app.extensions["cantstop"].games, down_after_commit=True)
    client = flask_app.test_client()
    headers = {"Authorization": f"Bearer {ann}", "Idempotency-Key": "roll-once"}
    roll = {"type": "roll", "dice": [1, 2, 3, 4]}

    first = client.post(f"/v1/games/{game_id}/actions", json=roll, headers=headers)
    assert faults.fired[0] == "committed" and "refused" in faults.fired
    assert first.status_code == 503, first.get_json()
    assert first.get_json()["code"] == "store_unavailable"
    assert first.headers["Retry-After"].isdigit()

    faults.down = False  # the store is back

    retries: list[Any] = []

    def answered() -> bool:  # the breaker may hold the store closed for a moment
        retries.append(client.post(f"/v1/games/{game_id}/actions", json=roll, headers=headers))
        assert retries[-1].status_code in (200, 503), retries[-1].get_json()
        return bool(retries[-1].status_code == 200)

    wait_until(answered, 10, "the retry to be answered")
    stored = events_of(flask_app, game_id)
    assert len(stored) == len(before) + 1  # recorded once, by the first attempt
    assert retries[-1].get_json()["events"] == stored[len(before) :]
    assert retries[-1].headers["Idempotent-Replayed"] == "true"


def test_32_threads_sending_one_action_with_one_key_all_get_the_first_answer(
    database_url: str,
) -> None:
    """Two workers (two applications on one store), 16 threads each, released at once."""
    apps = [create_app(Settings(database_url=database_url), create_tables=True) for _ in range(2)]
    try:
        game_id, (ann, _bob) = manual_game(apps[0])
        before = events_of(apps[0], game_id)
        for app in apps:  # each worker holds the game already: the race is on the save
            assert app.test_client().get(f"/v1/games/{game_id}").status_code == 200
        headers = {"Authorization": f"Bearer {ann}", "Idempotency-Key": "same-for-all"}
        roll = {"type": "roll", "dice": [2, 3, 4, 5]}

        def send_roll(client: FlaskClient) -> tuple[int, Json, str | None]:
            reply = client.post(f"/v1/games/{game_id}/actions", json=roll, headers=headers)
            return reply.status_code, reply.get_json(), reply.headers.get("Idempotent-Replayed")

        clients = [apps[i % 2].test_client() for i in range(32)]
        results = race_cleanly([partial(send_roll, c) for c in clients], timeout=120)

        statuses = [status for status, _, _ in results]
        assert statuses == [200] * 32, [body for status, body, _ in results if status != 200]
        first = next(body for _, body, replayed in results if replayed is None)
        assert all(body == first for _, body, _ in results)
        assert [replayed for _, _, replayed in results].count(None) == 1
        assert events_of(apps[1], game_id) == before + first["events"]
    finally:
        for app in apps:
            app.extensions["cantstop"].close()
