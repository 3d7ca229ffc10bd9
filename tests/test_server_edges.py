"""The edges of the real server: gunicorn's size limits, configuration, the SQLite file, the wheel.

Each of these was broken once (the GitHub issue on outages and edges): gunicorn answered an
over-long request line or header in HTML; a bad ``CANTSTOP_*`` value printed a traceback;
``?sslmode=require`` was dropped from a PostgreSQL URL; the SQLite file (which holds unrevealed
seeds) was created world-readable; a built wheel lacked openapi.yaml and the gunicorn settings.
The process helpers are shared with the other real-server tests: tests/support/.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import socket
import stat
import subprocess
import threading
from pathlib import Path

import psycopg
import pytest

from service.config import Settings
from service.http.app import create_app
from service.persistence.settings import persistence_env
from tests.support.http import HOST, Reply, problem, send
from tests.support.polling import wait_until
from tests.support.servers import CANTSTOP, free_port, serving

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------- helpers


def post_bytes(
    port: int, path: str, chunks: list[bytes], headers: dict[str, str], *, chunked: bool
) -> Reply:
    """A POST of raw bytes: in chunks (``Transfer-Encoding: chunked``, no length), or whole
    with its ``Content-Length``."""
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        if chunked:
            conn.request("POST", path, iter(chunks), headers, encode_chunked=True)
        else:
            conn.request("POST", path, b"".join(chunks), headers)
        response = conn.getresponse()
        found = {name.lower(): value for name, value in response.getheaders()}
        return Reply(response.status, found, response.read(), 0.0)
    finally:
        conn.close()


def answers(port: int) -> bool:
    """Whether something accepts connections on ``port``."""
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


# ------------------------------------------------------------------- CPU affinity
def worker_cpus(serve_pid: int) -> list[set[str]]:
    """Each gunicorn worker of ``cantstop serve`` (pid): the CPUs its threads may run on."""
    children: dict[int, list[int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat_file.read_text()
            parent = int(text[text.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, []).append(int(stat_file.parent.name))
    # cantstop serve -> the HTTP group (serve --http-only: gunicorn's master) -> its workers
    masters = [
        pid
        for pid in children.get(serve_pid, [])
        if b"--http-only" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    found = []
    for master in masters:
        for worker in children.get(master, []):
            cpus = set()
            for task in Path(f"/proc/{worker}/task").iterdir():
                try:
                    status = (task / "status").read_text()
                except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile:
                    continue  # gone before the open, or (ESRCH) between the open and the read
                allowed = next(line for line in status.splitlines() if "Cpus_allowed_list" in line)
                cpus.add(allowed.split(":")[1].strip())
            found.append(cpus)
    return found


def test_each_worker_keeps_to_a_cpu_of_its_own_unless_affinity_is_off(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    for setting in ("on", "off"):
        port = free_port()
        args = ("--host", HOST, "--port", str(port), "--workers", "2")
        env = {"CANTSTOP_THREADS": "4", "CANTSTOP_CPU_AFFINITY": setting}
        with serving(tmp_path, *args, env=env, ready_port=port, name=setting) as served:
            for _ in range(8):  # a few requests: the workers start threads, which inherit it
                assert send(port, "GET", "/v1/games").status == 200
            wait_until(lambda: len(worker_cpus(served.process.pid)) == 2, 10, "two workers")
            workers = worker_cpus(served.process.pid)
        if setting == "on" and len(allowed) >= 2:
            # every thread of a worker on one CPU; the two workers on two different ones
            assert all(len(cpus) == 1 for cpus in workers), workers
            assert {cpus.pop() for cpus in workers} == {str(allowed[0]), str(allowed[1])}
        else:  # as this process: the kernel places them
            status = Path("/proc/self/status").read_text().splitlines()
            own = next(line for line in status if "Cpus_allowed_list" in line).split(":")[1]
            assert all(cpus == {own.strip()} for cpus in workers), workers


# ------------------------------------------------------------------- gunicorn's own limits
@pytest.mark.slow
def test_gunicorn_passes_over_long_lines_and_headers_to_the_app_which_answers_problem_json(
    tmp_path: Path,
) -> None:
    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    with serving(tmp_path, *args, env={"CANTSTOP_THREADS": "4"}, ready_port=port):
        # A request line of ~10 KB: over the app's 8190 bytes, and over gunicorn's default
        # limit (4094), which answered in HTML.
        long_target = "/v1/games?pad=" + "a" * 10_000
        body = problem(send(port, "GET", long_target), 414, "uri_too_long")
        assert "8190" in body["detail"]
        # A 40 KB header: over the app's 32 KiB in all and over gunicorn's default field size.
        big = send(port, "GET", "/v1/games", headers={"X-Padding": "b" * 40_000})
        problem(big, 431, "headers_too_large")
        # Just under both limits, the same requests are served.
        assert send(port, "GET", "/v1/games?pad=" + "a" * 8000).status == 200
        assert send(port, "GET", "/v1/games", headers={"X-Padding": "b" * 30_000}).status == 200
        # What gunicorn still refuses itself (more than 100 fields, though far under 32 KiB; a
        # field over 64 KiB; a request line it cannot parse) is problem+json too, not HTML.
        # Each with a request id, as the app's answers have (a new one: the request was not read).
        many = {f"X-H{i}": "v" for i in range(105)}
        refused = send(port, "GET", "/v1/games", headers=many)
        problem(refused, 431, "headers_too_large")
        huge = send(port, "GET", "/v1/games", headers={"X-Padding": "b" * 70_000})
        problem(huge, 431, "headers_too_large")
        ids = {refused.headers["x-request-id"], huge.headers["x-request-id"]}
        with socket.create_connection((HOST, port), timeout=10) as raw:
            raw.sendall(b"NOT A REQUEST LINE\r\n\r\n")
            answer = raw.makefile("rb").read()
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 ") and b"application/problem+json" in head, head
        assert json.loads(payload)["code"] == "malformed_request"
        lines = head.decode("latin-1").split("\r\n")
        ids |= {line.split(": ")[1] for line in lines if line.startswith("X-Request-Id: ")}
        assert len(ids) == 3 and all(ids), ids


def test_the_access_log_shows_the_apis_own_query_values_and_no_other(tmp_path: Path) -> None:
    """A client that puts its seat token in the URL is refused (401), and the token is not
    written to the access log either: only the API's own query parameters show their values."""
    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    env = {"CANTSTOP_THREADS": "4", "CANTSTOP_ACCESS_LOG": "-"}
    with serving(tmp_path, *args, env=env, ready_port=port) as server:
        created = send(port, "POST", "/v1/games", {"players": ["Ann", "Bob"]}).json()
        game, token = created["game"], created["seats"][0]["token"]
        path = f"/v1/games/{game['id']}"
        problem(
            send(port, "POST", f"{path}/actions?token={token}", {"type": "roll"}),
            401,
            "unauthorized",
        )
        assert send(port, "GET", f"{path}/seat?access_token={token}&{token}").status == 401
        assert send(port, "GET", f"{path}?version=1&seat=0").status == 200
        server.stop()  # the log is whole once the server has stopped
    logged = server.log.read_text()
    assert token not in logged
    assert f'"POST {path}/actions?… HTTP/1.1" 401' in logged
    assert f'"GET {path}/seat?…&… HTTP/1.1" 401' in logged
    assert f'"GET {path}?version=1&seat=0 HTTP/1.1" 200' in logged


@pytest.mark.slow
def test_clients_that_stop_sending_mid_request_lose_their_connection_not_the_server(
    tmp_path: Path,
) -> None:
    """Each thread reads a request blocking: connections that sent part of their headers or
    body and then nothing once held every thread (the server answered nobody). After the read
    timeout, a stalled body is 408 request_timeout and stalled headers are closed; the server
    answers the others all along, and logs one line a connection, not a traceback."""
    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    env = {"CANTSTOP_THREADS": "4", "CANTSTOP_READ_TIMEOUT": "1", "CANTSTOP_ACCESS_LOG": ""}
    with serving(tmp_path, *args, env=env, ready_port=port) as server:
        answers: dict[int, bytes] = {}
        stalling = threading.Semaphore(0)  # released once a connection has sent its part

        def stall(i: int) -> None:  # then read until the server closes the connection
            with socket.create_connection((HOST, port), timeout=30) as raw:
                if i % 2:
                    raw.sendall(b"GET /v1/games HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                elif i % 4 == 2:  # a body in chunks, one of them cut short
                    raw.sendall(
                        b"POST /v1/games HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b'5\r\n{"pl'
                    )
                else:
                    raw.sendall(
                        b"POST /v1/games HTTP/1.1\r\nHost: x\r\n"
                        b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"pl'
                    )
                stalling.release()
                answers[i] = raw.makefile("rb").read()

        stalled = [threading.Thread(target=stall, args=(i,)) for i in range(12)]  # 3x threads
        for thread in stalled:
            thread.start()
        for _ in stalled:  # every connection stalls mid-request before the server is asked
            assert stalling.acquire(timeout=20)
        assert send(port, "GET", "/healthz", timeout=20).status == 200
        for thread in stalled:
            thread.join(timeout=30)
        assert sorted(answers) == list(range(12))
        for i, answer in answers.items():
            if i % 2:
                assert answer == b"", answer
            else:
                head, _, payload = answer.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 408 "), answer
                assert b"\r\nconnection: close\r\n" in head.lower() + b"\r\n", head
                assert json.loads(payload)["code"] == "request_timeout"
        server.stop()
    logged = server.log.read_text()
    assert "Socket error processing request" not in logged and "Traceback" not in logged
    assert "sent nothing for 1 s mid-request" in logged


@pytest.mark.slow
def test_bodies_sent_with_a_length_or_in_chunks_are_read_alike_and_limited(
    tmp_path: Path,
) -> None:
    """A body that says its length is read straight from gunicorn's stream (the action path's
    shortcut); a chunked one, through Werkzeug. Both are the same JSON to the app."""
    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    env = {"CANTSTOP_THREADS": "4", "CANTSTOP_MAX_BODY_BYTES": "2048"}
    with serving(tmp_path, *args, env=env, ready_port=port):
        created = send(port, "POST", "/v1/games", {"players": ["Ann", "Bob"]})
        assert created.status == 201, created.body
        game = created.json()["game"]
        token = created.json()["seats"][game["turn"]["player"]]["token"]
        action = json.dumps(game["legal_actions"][0]).encode()

        def chunked(path: str, chunks: list[bytes]) -> Reply:
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
            return post_bytes(port, path, chunks, headers, chunked=True)

        moved = chunked(f"/v1/games/{game['id']}/actions", [action[:5], action[5:]])
        assert moved.status == 200, moved.body
        assert moved.json()["game"]["version"] == game["version"] + 1
        # Over CANTSTOP_MAX_BODY_BYTES: 413 either way, and nothing recorded.
        # The body is left unread, so the connection closes, and the answer says so (it said
        # keep-alive: a client's next request on it was lost; found by a black-box review).
        padded = {"players": ["Ann", "Bob"], "pad": "x" * 3000}
        too_large = send(port, "POST", "/v1/games", padded)
        problem(too_large, 413, "payload_too_large")
        assert too_large.headers["connection"] == "close"
        path = f"/v1/games/{game['id']}/actions"
        too_large = chunked(path, [b'{"type": "stop", "pad": "', b"x" * 3000, b'"}'])
        problem(too_large, 413, "payload_too_large")
        assert too_large.headers["connection"] == "close"
        # The client is still sending after the answer went: the worker reads what still comes
        # before it closes, so the 413 is not lost to a reset (it was a broken pipe, in CI).
        with socket.create_connection((HOST, port), timeout=10) as raw:
            raw.sendall(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                "bb8\r\n".encode()
                + b"x" * 3000
                + b"\r\n"
            )
            assert select.select([raw], [], [], 10)[0], "no answer within 10 s"
            raw.sendall(b"1000\r\n" + b"x" * 4096 + b"\r\n0\r\n\r\n")
            answer = raw.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:80]
        assert moved.headers["connection"] == "keep-alive"
        now = send(port, "GET", f"/v1/games/{game['id']}").json()
        assert now["version"] == game["version"] + 1
        # Chunks gunicorn cannot read (a size that is no hex number; a chunk longer than it
        # said): 400 malformed_request, raised as the view reads the body, not a 500.
        broken_chunks = (b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}}}\r\n0\r\n\r\n")
        for broken in broken_chunks:
            with socket.create_connection((HOST, port), timeout=10) as raw:
                raw.sendall(
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                    "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                    "X-Request-Id: chunks-1\r\nConnection: close\r\n\r\n".encode()
                    + broken
                )
                answer = raw.makefile("rb").read()
            head, _, payload = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400 "), answer
            assert b"\r\nX-Request-Id: chunks-1\r\n" in head, head
            assert json.loads(payload)["code"] == "malformed_request"
        assert send(port, "GET", f"/v1/games/{game['id']}").json()["version"] == now["version"]


@pytest.mark.slow
def test_a_chunked_export_over_the_import_limit_is_refused_not_cut(tmp_path: Path) -> None:
    """Werkzeug stops a body without a length (chunked) at the limit, silently: the import
    judged the first IMPORT_MAX_BYTES alone (here a 422 that blamed the export; an export cut
    at a line could be imported short). It is 413, and nothing is imported; the export as the
    server wrote it, with its length, is imported."""
    from service.http.audit import IMPORT_MAX_BYTES

    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    with serving(tmp_path, *args, env={"CANTSTOP_THREADS": "4"}, ready_port=port):
        created = send(port, "POST", "/v1/games", {"players": ["Ann", "Bob"]}).json()
        game, seats = created["game"], created["seats"]
        for _ in range(12):
            token = seats[game["turn"]["player"]]["token"]
            reply = send(
                port,
                "POST",
                f"/v1/games/{game['id']}/actions",
                game["legal_actions"][0],
                headers={"Authorization": f"Bearer {token}"},
            )
            game = reply.json()["game"]
        lines = send(port, "GET", f"/v1/games/{game['id']}/export").body.split(b"\n")
        lines = [line for line in lines if line]
        # The header and the first event, the event padded with spaces (JSON allows them) so
        # that the limit falls just after its line; then the rest of the export.
        kept = lines[0] + b"\n" + lines[1][:-1]
        pad = IMPORT_MAX_BYTES - len(kept) - 2  # the "}" and the "\n"
        body = kept + b" " * pad + b"}\n" + b"\n".join(lines[2:]) + b"\n"
        assert body.index(b"\n", len(kept)) + 1 == IMPORT_MAX_BYTES

        def post(chunks: list[bytes], chunked: bool) -> Reply:
            headers = {"Content-Type": "application/x-ndjson"}
            return post_bytes(port, "/v1/games/import", chunks, headers, chunked=chunked)

        third = len(body) // 3
        chunks = [body[:third], body[third : 2 * third], body[2 * third :]]
        refused = problem(post(chunks, chunked=True), 413, "payload_too_large")
        assert str(IMPORT_MAX_BYTES) in refused["detail"]
        listed = send(port, "GET", "/v1/games").json()
        assert [g["id"] for g in listed["games"]] == [game["id"]]  # nothing was imported
        # The whole export, padding and all, is over the limit with its length too; the export
        # as the server wrote it is imported.
        problem(post(chunks, chunked=False), 413, "payload_too_large")
        imported = post([b"\n".join(lines) + b"\n"], chunked=False)
        assert imported.status == 201, imported.body[:300]


# ------------------------------------------------------------------------- configuration
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CANTSTOP_THREADS", "abc"),
        ("CANTSTOP_RATE_LIMITS", "create=lots"),
        ("CANTSTOP_DATABASE_URL", "mysql://x"),
        ("CANTSTOP_BIND", "nonsense"),
    ],
)
def test_a_bad_setting_stops_serve_with_one_line_naming_it(
    tmp_path: Path, variable: str, value: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CANTSTOP_")}
    env["CANTSTOP_DATABASE_URL"] = f"sqlite:///{tmp_path / 'never.sqlite'}"
    env[variable] = value
    done = subprocess.run(
        [str(CANTSTOP), "serve", "--port", str(free_port())],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert variable in lines[0]
    assert not (tmp_path / "never.sqlite").exists()  # refused before touching anything


def test_every_libpq_option_of_a_postgres_url_is_kept() -> None:
    url = (
        "postgresql://ann:s3cret@db.example:6543/games"
        "?sslmode=require&sslrootcert=/etc/ca.pem&application_name=cantstop-api"
    )
    env = persistence_env(Settings(database_url=url), create_table=False)
    assert (env["POSTGRES_HOST"], env["POSTGRES_PORT"]) == ("db.example", "6543")
    assert (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"]) == ("ann", "s3cret")
    assert env["POSTGRES_DBNAME"] == "games"
    options = json.loads(env["CANTSTOP_PG_OPTIONS"])
    assert options["sslmode"] == "require"
    assert options["sslrootcert"] == "/etc/ca.pem"
    assert options["application_name"] == "cantstop-api"

    socket_url = "postgresql://postgres@/games?host=/run/pg%20sockets"
    env = persistence_env(Settings(database_url=socket_url), create_table=False)
    assert env["POSTGRES_HOST"] == "/run/pg sockets"
    assert "host" not in json.loads(env["CANTSTOP_PG_OPTIONS"])


@pytest.mark.postgres
def test_the_url_options_reach_the_database_connection(postgres_url: str) -> None:
    """Not only mapped: the server sees the application_name that the URL asked for."""
    name = f"cantstop-probe-{os.getpid()}"
    sep = "&" if "?" in postgres_url else "?"
    app = create_app(
        Settings(database_url=f"{postgres_url}{sep}application_name={name}"), create_tables=True
    )
    try:
        assert app.test_client().get("/healthz").status_code == 200
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchone()
        assert row is not None and row[0] >= 1
    finally:
        app.extensions["cantstop"].close()


def test_a_new_sqlite_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "cantstop.sqlite"
    previous = os.umask(0o022)  # the usual umask, under which files are world-readable
    try:
        app = create_app(Settings(database_url=f"sqlite:///{path}"), create_tables=True)
        try:
            client = app.test_client()
            assert client.post("/v1/games", json={"players": ["Ann", "Bob"]}).status_code == 201
            for file in [path, *path.parent.glob(path.name + "-*")]:  # -wal, -shm
                mode = stat.S_IMODE(file.stat().st_mode)
                assert mode == 0o600, f"{file.name} is {oct(mode)}"
        finally:
            app.extensions["cantstop"].close()
    finally:
        os.umask(previous)


def test_every_sqlite_connection_has_the_stores_pragmas(tmp_path: Path) -> None:
    """The writer and the pool's connections alike: any committing connection checkpoints the
    WAL, and each must wait for the same longer WAL (docs/performance.md)."""
    path = tmp_path / "cantstop.sqlite"
    app = create_app(Settings(database_url=f"sqlite:///{path}"), create_tables=True)
    try:
        assert app.test_client().post("/v1/games", json={"players": ["Ann"]}).status_code == 201
        pool = app.extensions["cantstop"].games.store.recorder.datastore.pool
        pooled = pool.get_connection()
        try:
            cursors = {"writer": pool.writer().cursor(), "pooled": pooled.cursor()}
            for name, cursor in cursors.items():
                cursor.execute("PRAGMA wal_autocheckpoint")
                assert cursor.fetchone()[0] == 10_000, name
                cursor.execute("PRAGMA synchronous")
                assert cursor.fetchone()[0] == 1, name  # NORMAL, the default
                cursor.execute("PRAGMA journal_mode")
                assert cursor.fetchone()[0] == "wal", name
        finally:
            pool.put_connection(pooled)
    finally:
        app.extensions["cantstop"].close()


@pytest.mark.slow
def test_serve_port_overrides_the_port_of_cantstop_bind(tmp_path: Path) -> None:
    port, bind_port = free_port(), free_port()
    env = {"CANTSTOP_BIND": f"{HOST}:{bind_port}", "CANTSTOP_THREADS": "4"}
    with serving(tmp_path, "--port", str(port), "--workers", "1", env=env, ready_port=port):
        assert not answers(bind_port)
    wait_until(lambda: not answers(port), 10, f"port {port} to be released")
    with serving(tmp_path, "--workers", "1", env=env, ready_port=bind_port):
        assert not answers(port)


# ------------------------------------------------------------------------------- streams
@pytest.mark.slow
def test_a_stream_whose_client_hung_up_gives_its_place_back_within_seconds(
    tmp_path: Path,
) -> None:
    """A closed stream is noticed by peeking at its socket (at least every second), not only
    when a keep-alive write fails (here a minute away): a client that reconnects at once no
    longer finds every place taken (503 too_many_streams) by its own dead streams."""
    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    env = {"CANTSTOP_THREADS": "8", "CANTSTOP_STREAM_MAX": "2", "CANTSTOP_STREAM_KEEPALIVE": "60"}
    with serving(tmp_path, *args, env=env, ready_port=port):
        game = send(port, "POST", "/v1/games", {"players": ["Ann", "Bob"]}).json()["game"]
        path = f"/v1/games/{game['id']}/stream"

        def open_stream() -> tuple[socket.socket, bytes]:
            raw = socket.create_connection((HOST, port), timeout=10)
            raw.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            return raw, raw.recv(12)  # b"HTTP/1.1 200"

        streams = [open_stream() for _ in range(2)]
        assert [status for _, status in streams] == [b"HTTP/1.1 200"] * 2
        problem(send(port, "GET", path), 503, "too_many_streams")
        for raw, _ in streams:
            raw.close()
        held: list[socket.socket] = []

        def another_let_in() -> bool:
            raw, status = open_stream()
            if status == b"HTTP/1.1 200":
                held.append(raw)
            else:
                raw.close()
            return len(held) == 2

        try:
            wait_until(another_let_in, 10, "both places given back")
        finally:
            for raw in held:
                raw.close()
