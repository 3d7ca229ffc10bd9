"""The service's worker class (service/server.py) frames HTTP/1.1 as a client expects: answers
with and without a length, pipelined requests, HTTP/1.0, ``Expect: 100-continue``, and an app's
body left unread. The app is a bare WSGI function, so what is checked is the worker's."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.server import logged_target
from tests.support.bare_worker import bare_server, exchange
from tests.support.http import HOST


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with bare_server(tmp_path_factory.mktemp("worker")) as chosen:
        yield chosen


def test_a_worker_sets_aside_what_it_loaded_from_the_collectors_passes(port: int) -> None:
    # service/collector.py settle: the modules and the app, not walked by every full pass.
    answer = exchange(port, b"GET /frozen HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert int(body) > 10_000  # gunicorn, h11, the worker's own modules and the app's


def test_pipelined_requests_are_answered_in_order_on_one_connection(port: int) -> None:
    answer = exchange(
        port,
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
        b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nde",
    )
    first, second = answer.split(b"HTTP/1.1 200 OK\r\n")[1:]
    assert b"Connection: keep-alive\r\n" in first and first.endswith(b"\r\n\r\nabc")
    assert b"Connection: close\r\n" in second and second.endswith(b"\r\n\r\nde")


def test_an_answer_without_a_length_is_chunked_or_ends_with_the_connection(port: int) -> None:
    answer = exchange(
        port,
        b"GET /parts HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /parts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head and b"Connection: keep-alive" in head
    body, _, last = rest.partition(b"0\r\n\r\n")
    assert body == b"6\r\npart0;\r\n6\r\npart1;\r\n6\r\npart2;\r\n"
    # The last request of a connection needs no chunks: its end is the close.
    head, _, body = last.partition(b"\r\n\r\n")
    assert b"Connection: close" in head and b"Transfer-Encoding" not in head
    assert body == b"part0;part1;part2;"
    answer = exchange(port, b"GET /parts HTTP/1.0\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 ") and b"Connection: close" in head
    assert body == b"part0;part1;part2;"


def test_a_client_that_expects_100_continue_gets_it_when_the_body_is_read(port: int) -> None:
    with socket.create_connection((HOST, port), timeout=10) as raw:
        raw.sendall(
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
        )
        assert raw.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        raw.sendall(b"body")
        reader = raw.makefile("rb")
        assert reader.readline() == b"HTTP/1.1 200 OK\r\n"


def test_a_body_left_unread_is_dropped_and_the_next_request_served(port: int) -> None:
    answer = exchange(
        port,
        b"POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
    )
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert b"Connection: keep-alive" in answer.split(b"\r\n\r\n")[0]
    assert answer.endswith(b"\r\n\r\nok")


def test_what_the_worker_cannot_parse_is_problem_json(port: int) -> None:
    answer = exchange(port, b"GET / HTTP/1.1\r\nBad Header\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"application/problem+json" in answer and b'"malformed_request"' in answer
    start = time.monotonic()
    answer = exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 101 + b"\r\n")
    assert time.monotonic() - start < 5  # answered, not held to the read timeout (20 s)
    assert answer.startswith(b"HTTP/1.1 431 ") and b"application/problem+json" in answer


def test_the_access_log_shows_only_the_apis_query_values() -> None:
    assert logged_target("/v1/games?version=3&token=abc&x") == "/v1/games?version=3&…&…"
    assert logged_target("/v1/games") == "/v1/games"


def test_connections_that_send_nothing_hold_no_thread(port: int) -> None:
    """A browser opens connections ahead of need: more of them than the worker's 4 threads,
    silent, and a request on another connection is still answered at once."""
    silent = [socket.create_connection((HOST, port), timeout=10) for _ in range(8)]
    try:
        started = time.monotonic()
        answer = exchange(port, b"POST /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert time.monotonic() - started < 5
    finally:
        for sock in silent:
            sock.close()


def test_a_connection_is_kept_for_the_time_it_may_then_closed(tmp_path: Path) -> None:
    """CANTSTOP_KEEPALIVE_TIME: the first request after the connection's time is answered with
    ``Connection: close`` and the connection ends: the client opens a new one, which any worker
    may take (a worker started late gets its share of kept-alive clients)."""
    with bare_server(tmp_path, {"CANTSTOP_KEEPALIVE_TIME": "1"}) as port:
        request = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok"
        with socket.create_connection((HOST, port), timeout=10) as raw:
            reader = raw.makefile("rb")

            def answer() -> bool:
                """Whether the answer to one request closes the connection."""
                raw.sendall(request)
                head = []
                while (line := reader.readline()) not in (b"\r\n", b""):
                    head.append(line)
                assert head[0] == b"HTTP/1.1 200 OK\r\n" and reader.read(2) == b"ok"
                return b"Connection: close\r\n" in head

            opened = time.monotonic()
            while time.monotonic() - opened < 0.5:  # well within its time: kept
                assert not answer()
            time.sleep(max(0.0, opened + 1.2 - time.monotonic()))  # past its time (1 s)
            assert answer()
            assert reader.read() == b""  # closed by the server
