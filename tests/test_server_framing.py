"""What an attacker may send the service's worker (service/server.py) before the app sees a
request: a body framed two ways (request smuggling, RFC 9112 §6.1 and §6.3) and a head far past
the app's limits. The bare app of test_server_worker.py answers, so what is checked is the
worker's."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator

import pytest

from tests.support.bare_worker import bare_server, exchange
from tests.support.http import HOST

# What follows each body: a request smuggled past a proxy that framed the body otherwise.
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with bare_server(tmp_path_factory.mktemp("framing")) as chosen:
        yield chosen


def problem_of(answer: bytes) -> tuple[bytes, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, json.loads(body)


@pytest.mark.parametrize(
    "framing",
    [
        # Both: h11 read the body as chunked and kept the connection; a proxy may read 3 bytes.
        b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n",
        # A coding other than chunked alone (h11 said 501): the body's end is unknown.
        b"Transfer-Encoding: gzip\r\n\r\nabc",
        b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        # Lengths that disagree, or no number (h11 said 400 malformed_request).
        b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"Content-Length: 3, 4\r\n\r\nabcd",
        b"Content-Length: +3\r\n\r\nabc",
        b"Content-Length: 0x3\r\n\r\nabc",
    ],
)
def test_a_body_framed_two_ways_is_refused_and_the_connection_closed(
    port: int, framing: bytes
) -> None:
    answer = exchange(port, b"POST /a HTTP/1.1\r\nHost: x\r\n" + framing + SMUGGLED)
    head, problem = problem_of(answer)
    assert head.startswith(b"HTTP/1.1 400 "), answer
    assert b"Connection: close" in head and b"application/problem+json" in head
    assert problem["code"] == "bad_framing" and problem["status"] == 400
    assert answer.count(b"HTTP/1.1 ") == 1  # the smuggled request is not answered: closed


def test_transfer_encoding_in_an_http_1_0_request_is_refused(port: int) -> None:
    # RFC 9112 §6.1: HTTP/1.0 has no chunked coding; the framing is faulty.
    answer = exchange(
        port, b"POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    )
    head, problem = problem_of(answer)
    assert head.startswith(b"HTTP/1.1 400 ") and problem["code"] == "bad_framing"


def test_one_length_or_chunks_alone_are_still_read(port: int) -> None:
    answer = exchange(
        port,
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"
        b"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n"
        b"2\r\nde\r\n0\r\n\r\n",
    )
    first, second = answer.split(b"HTTP/1.1 200 OK\r\n")[1:]
    assert first.endswith(b"\r\n\r\nabc") and second.endswith(b"\r\n\r\nde")


def padded_head(size: int) -> bytes:
    """A GET whose header fields are about ``size`` bytes: fields of 1,000 bytes, fewer than
    100 of them, none over 64 KiB (the worker's other limits)."""
    fields = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 990) for i in range(size // 1000))
    return b"GET / HTTP/1.1\r\nHost: x\r\n" + fields + b"Connection: close\r\n\r\n"


def test_a_head_past_the_apps_limits_and_a_margin_is_refused_431(port: int) -> None:
    # The defaults: 8190 bytes of target and 32 KiB of fields. Within them (and a little
    # over), the app judges the head itself (here the bare app, which has no limit: 200).
    assert exchange(port, padded_head(40_000)).startswith(b"HTTP/1.1 200 ")
    # 90 KB: the worker buffered up to 7.5 MB of head and handed this one to the app.
    head, problem = problem_of(exchange(port, padded_head(90_000)))
    assert head.startswith(b"HTTP/1.1 431 ") and problem["code"] == "headers_too_large"


def test_an_endless_head_is_refused_before_megabytes_are_buffered(port: int) -> None:
    """A head that never ends: answered 431 once it passes the bound, a few tens of KB in,
    not held until the read timeout or 7.5 MB."""
    piece = b"p" * 16 * 1024
    sent = 0
    with socket.create_connection((HOST, port), timeout=10) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: ")
        while sent < 4 * 1024 * 1024 and not select.select([raw], [], [], 0.01)[0]:
            raw.sendall(piece)
            sent += len(piece)
        answer = raw.makefile("rb").read()
    head, problem = problem_of(answer)
    assert head.startswith(b"HTTP/1.1 431 ") and problem["code"] == "headers_too_large"
    assert sent < 512 * 1024, sent
