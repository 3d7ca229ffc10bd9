"""The worker class of `cantstop serve`: gunicorn's documented ``worker_class`` extension point.

A worker of the service's own owns its connections, so a live stream's socket can be handed to
the live hub's loop (service/live/hub.py) without reaching into a worker of gunicorn's: the
request is judged by the Flask app on a thread, and once its answer is a stream, the socket is
the loop's and the thread goes back to the pool. The same ownership gives the service its own
answers to what it cannot parse (problem+json), its read timeout, ``Connection: close`` after an
unread body and an access log without seat tokens, each through public APIs: gunicorn's ``Worker``
base class (the master, signals, heartbeat), ``h11`` for HTTP/1.1, ``concurrent.futures`` threads.

Like gthread: a selector on the listeners and the idle kept-alive connections (main thread), a
request at a time per connection on a pool of ``threads`` threads, blocking reads bounded by
``CANTSTOP_READ_TIMEOUT``, a connection kept for ``CANTSTOP_KEEPALIVE_TIME`` seconds at most (then
``Connection: close``: a worker that started late gets its share of kept-alive clients once they
reconnect). TLS is not served here: it ends at the proxy in front.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import selectors
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote_to_bytes

import h11
from gunicorn.workers.base import Worker
from werkzeug.exceptions import BadRequest

from service import collector
from service.config import ServerSettings, Settings
from service.http.metrics import REQUEST_ID, REQUEST_ID_KEY, new_request_id
from service.http.stream import ADOPT
from service.live.streams import Pacer

# What the worker answers itself, before the app sees the request. The app has its own, tighter
# limits (a target of 8190 bytes: 414; 32 KiB of headers: 431, CANTSTOP_MAX_URI_BYTES and
# CANTSTOP_MAX_HEADER_BYTES), which it answers with more to say; these only bound what a
# connection may make the worker hold.
MAX_FIELDS = 100
MAX_FIELD = 64 * 1024
# The request line and header fields a connection may make the worker buffer: the app's own
# limits (CANTSTOP_MAX_URI_BYTES + CANTSTOP_MAX_HEADER_BYTES, so the app still answers a head
# over them with its own detail) and this much more for the method, the version and the line
# ends; past it, 431 at once. It was 7.5 MB whatever the settings: a client could make each
# connection hold megabytes before its head was judged.
HEAD_MARGIN = 4 * 1024
RECV = 64 * 1024
# A body the app did not read is read and dropped before the answer, so the connection can be
# kept; past this many bytes the connection is closed instead (and the answer says so).
DRAIN_MAX = 1024 * 1024
# Answers after which the rest of the body cannot be told from a next request: always closing.
CLOSING = frozenset({408, 413})
# Closing on a client still sending its body would make the kernel answer its next bytes with a
# reset, and a reset can throw away the answer before the client has read it (found when the
# 413 to a chunked body reached the client as a broken pipe). So the worker stops writing and
# reads what still comes, for this long and this much at most, before it closes: a lingering
# close, as Apache and nginx do.
LINGER_SECONDS = 1.0

PROBLEM_CODES = {
    400: "malformed_request",
    408: "request_timeout",
    413: "payload_too_large",
    414: "uri_too_long",
    431: "headers_too_large",
    500: "internal_error",
    501: "not_implemented",
}
# A body's length said two ways (Content-Length and Transfer-Encoding, or Transfer-Encoding in
# HTTP/1.0), a Transfer-Encoding other than chunked alone, or Content-Lengths that disagree or
# are not a number: a proxy in front may have framed the request otherwise, so what follows
# its body could be another request smuggled past the proxy (RFC 9112 §6.1, §6.3). Refused,
# 400 with this code, and the connection closed: no guess at where the body ends.
BAD_FRAMING = "bad_framing"
REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    413: "Payload Too Large",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
}

# The query parameters whose values the access log shows: the API's own. Any other is written
# as "…": a client that puts its seat token in the URL (refused: 401) must not have it logged.
LOGGED_QUERY = frozenset(
    [
        *("version", "after", "limit", "offset", "seat"),
        *("status", "open", "mode", "dice_faces", "steep_hill"),
    ]
)
access_log = logging.getLogger("gunicorn.access")  # set up by gunicorn from its accesslog setting


def logged_target(target: str) -> str:
    """The request target as the access log shows it (``LOGGED_QUERY``)."""
    path, question, query = target.partition("?")
    if not question:
        return target
    parts = []
    for part in query.split("&"):
        name, equals, _ = part.partition("=")
        parts.append(part if name in LOGGED_QUERY and equals else "…")
    return f"{path}?{'&'.join(parts)}"


def problem_bytes(
    status: int, detail: str, request_id: str | None = None, *, code: str | None = None
) -> bytes:
    """A whole HTTP answer, problem+json with a stable code (the status's, unless ``code``),
    closing the connection; with the request's id (a new one if the request never reached the
    app), as the app's answers have."""
    code = code or PROBLEM_CODES.get(status, "malformed_request")
    reason = REASONS.get(status, "Bad Request")
    body = json.dumps(
        {
            "type": f"urn:cantstop:problem:{code}",
            "title": reason,
            "status": status,
            "detail": detail or reason,
            "code": code,
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\n"
        f"{REQUEST_ID}: {request_id or new_request_id()}\r\n"
        f"Content-Type: application/problem+json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class MalformedBody(BadRequest):
    """A body that cannot be read (a bad chunk): raised to the app by its read; the worker
    then answers 400 malformed_request itself and closes the connection."""


class Connection:
    """One client connection: its socket and its HTTP/1.1 state."""

    __slots__ = (
        *("addr", "deadline", "h11", "local", "max_head", "pending", "retire", "sock"),
        "waiting",
    )

    def __init__(self, sock: socket.socket, addr: Any, retire: float, max_head: int) -> None:
        self.sock = sock
        self.addr = addr
        self.retire = retire  # monotonic time after which its next answer closes it
        self.max_head = max_head  # bytes of a head buffered at most (HEAD_MARGIN)
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
        self.pending = b""  # received after the request before: the next one's start
        self.local: tuple[str, str] | None = None
        self.deadline = 0.0
        self.waiting = False  # in the selector, waiting for its next request

    def next_request(self) -> None:
        """A new parser for the next request, given what was received after the last one.
        h11 reads requests; the worker writes the answers itself (``ServiceWorker._respond``):
        going through h11's writer, which checks every header again, cost as much as reading."""
        h = self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=self.max_head)
        if self.pending:
            h.receive_data(self.pending)
            self.pending = b""

    def next_event(self) -> Any:
        """h11's next event, reading as it needs (BlockingIOError after the read timeout)."""
        h = self.h11
        while True:
            event = h.next_event()
            if event is not h11.NEED_DATA:
                return event
            h.receive_data(self.sock.recv(RECV))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            # The client may still be sending: its body, or the rest of a head or body refused
            # mid-way (ERROR: too long, bad framing), whose reset could lose the answer.
            if self.h11.their_state in (h11.SEND_BODY, h11.ERROR):
                self._linger()
            self.sock.close()

    def _linger(self) -> None:
        """Stop writing, then read and drop what the client still sends, within LINGER_SECONDS
        and DRAIN_MAX bytes, so the answer already sent is not lost to a reset."""
        self.sock.shutdown(socket.SHUT_WR)
        until = time.monotonic() + LINGER_SECONDS
        dropped = 0
        while dropped < DRAIN_MAX:
            left = until - time.monotonic()
            if left <= 0:
                return
            self.sock.settimeout(left)
            data = self.sock.recv(RECV)
            if not data:
                return
            dropped += len(data)


class Body:
    """``wsgi.input``: the request's body, read from the connection as the app asks for it. A
    read that waits past the read timeout raises BlockingIOError, as a socket with a receive
    timeout does (service/http/core.py answers 408)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.buffer = bytearray()
        self.done = False
        self.error: h11.RemoteProtocolError | None = None
        self.continued = False  # 100 Continue sent

    def _more(self) -> bool:
        if self.done:
            return False
        conn = self.conn
        h = conn.h11
        if not self.continued and h.they_are_waiting_for_100_continue:
            self.continued = True
            conn.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            event = conn.next_event()
        except BlockingIOError:
            raise BlockingIOError("the client sent nothing more of the body in time") from None
        except h11.RemoteProtocolError as exc:
            self.done = True
            self.error = exc
            raise MalformedBody(f"the request's body cannot be read: {exc}") from None
        if type(event) is h11.Data:
            self.buffer += event.data
            return True
        self.done = True  # EndOfMessage
        return False

    def read(self, size: int | None = -1) -> bytes:
        buffer = self.buffer
        if size is None or size < 0:
            while self._more():
                pass
        else:
            while len(buffer) < size and self._more():
                pass
            if len(buffer) > size:
                data = bytes(buffer[:size])
                del buffer[:size]
                return data
        data = bytes(buffer)
        buffer.clear()
        return data

    def readline(self, size: int | None = -1) -> bytes:
        buffer = self.buffer
        while b"\n" not in buffer and (size is None or size < 0 or len(buffer) < size):
            if not self._more():
                break
        end = buffer.find(b"\n") + 1 or len(buffer)
        if size is not None and size >= 0:
            end = min(end, size)
        data = bytes(buffer[:end])
        del buffer[:end]
        return data

    def __iter__(self) -> Any:
        while line := self.readline():
            yield line

    def drain(self, limit: int) -> bool:
        """Read and drop what is left of the body: whether it all came, within ``limit``."""
        dropped = 0
        try:
            while self._more():
                dropped += len(self.buffer)
                self.buffer.clear()
                if dropped > limit:
                    return False
        except (BlockingIOError, MalformedBody, OSError):
            return False
        return True


class _Date:
    """The Date header, made once a second."""

    def __init__(self) -> None:
        self.second = 0
        self.text = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self.second:
            self.second = second
            self.text = formatdate(second, usegmt=True)
        return self.text


ADOPTED = "adopted"  # the connection is the live hub's now


class ServiceWorker(Worker):  # type: ignore[misc]  # gunicorn has no types
    """gunicorn's master starts, watches and stops it; it serves its share of the listeners."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        server = ServerSettings.from_env()
        self.read_timeout = server.read_timeout
        self.keepalive_time = server.keepalive_time
        limits = Settings.from_env()  # (`cantstop serve` refused a bad value before gunicorn)
        self.max_head = limits.max_uri_bytes + limits.max_header_bytes + HEAD_MARGIN
        # The kernel's receive and send timeouts, not Python's: a socket with a Python timeout
        # polls before every read and write (a system call and a GIL hand-over more each); a
        # blocking one with SO_RCVTIMEO fails a read that waited that long with EAGAIN
        # (BlockingIOError), which service/http/core.py answers 408 for a body.
        self.io_timeout = struct.pack("ll", server.read_timeout, 0)
        self.selector = selectors.DefaultSelector()
        self.lock = threading.Lock()  # the selector and the counts, from the pool's threads
        # Connections waiting in the selector: kept alive between requests (for keepalive
        # seconds), and new ones until their first bytes (for the read timeout), so that a
        # connection that sends nothing holds no thread (browsers open some ahead of need).
        self.idle: deque[tuple[float, Connection]] = deque()  # (deadline, connection)
        self.fresh: deque[tuple[float, Connection]] = deque()
        self.active: set[Connection] = set()  # on the pool's threads
        self.connections = 0
        self.accepting = False
        self.pacer: Pacer | None = None  # the live hub's, set in run()
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.date = _Date()

    # ------------------------------------------------------------------------ process
    def init_process(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(
            self.cfg.threads, thread_name_prefix="cantstop-http"
        )
        super().init_process()  # loads the app, then calls run()

    def handle_exit(self, sig: int, frame: Any) -> None:
        """SIGTERM: stop, and end the streams at once rather than hold the restart for
        graceful_timeout: clients reconnect elsewhere with Last-Event-ID and miss nothing."""
        super().handle_exit(sig, frame)
        self.end_streams()

    def end_streams(self) -> None:
        # In a signal handler, on the main thread: the hub's shutdown only takes its locks,
        # which this thread never holds, and does not block.
        runtime = getattr(self.wsgi, "extensions", {}).get("cantstop")
        if runtime is not None:
            runtime.hub.shutdown()

    def run(self) -> None:
        collector.settle()  # the app is loaded: what it keeps, the collector need not walk
        runtime = getattr(self.wsgi, "extensions", {}).get("cantstop")
        # A request begins after the live hub's flush under way, if any (service/live/
        # streams.py, ``Pacer.gate``).
        self.pacer = None if runtime is None else runtime.hub.pacer
        for listener in self.sockets:
            listener.setblocking(False)
        self._accept(True)
        wake = self.PIPE[0]  # gunicorn's signal wake-up pipe: a signal ends the wait at once
        self.selector.register(wake, selectors.EVENT_READ, wake)
        try:
            while self.alive:
                self.notify()
                for key, _ in self.selector.select(1.0):
                    data = key.data
                    if data is None:
                        self._accepted(key.fileobj)
                    elif data is wake:
                        with contextlib.suppress(BlockingIOError):
                            os.read(wake, 512)
                    else:
                        self._readable(data)
                self._expire()
                room = self.connections < self.cfg.worker_connections  # (a read: no lock)
                if room != self.accepting:
                    self._accept(room)
                if self.ppid != os.getppid():
                    self.log.info("Parent changed, shutting down: %s", self)
                    break
        except SystemExit:  # SIGINT, SIGQUIT: gunicorn's quick shutdown, waiting for nothing
            self._stop(graceful=False)
            raise
        self._stop(graceful=True)

    def _accept(self, on: bool) -> None:
        with self.lock:
            for listener in self.sockets:
                if on:
                    self.selector.register(listener, selectors.EVENT_READ, None)
                else:
                    self.selector.unregister(listener)
        self.accepting = on

    def _accepted(self, listener: Any) -> None:
        try:
            sock, addr = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        except OSError as exc:  # out of file descriptors (EMFILE): not a reason to die
            self.log.warning("cannot accept a connection: %s", exc)
            time.sleep(0.1)  # the listener stays readable: not a busy loop meanwhile
            return
        sock.setblocking(True)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, self.io_timeout)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, self.io_timeout)
        with self.lock:
            self.connections += 1
        conn = Connection(sock, addr, time.monotonic() + self.keepalive_time, self.max_head)
        self._wait(conn, self.fresh, self.read_timeout)

    def _wait(
        self, conn: Connection, queue: deque[tuple[float, Connection]], seconds: float
    ) -> None:
        """In the selector until the client sends (``_readable``) or ``seconds`` pass."""
        with self.lock:
            conn.deadline = time.monotonic() + seconds
            conn.waiting = True
            self.selector.register(conn.sock, selectors.EVENT_READ, conn)
            queue.append((conn.deadline, conn))

    def _readable(self, conn: Connection) -> None:
        """A kept-alive connection's next request has begun: serve it on the pool."""
        with self.lock:
            if not conn.waiting:
                return
            conn.waiting = False
            self.selector.unregister(conn.sock)
        assert self.pool is not None
        self.pool.submit(self._serve, conn)

    def _expire(self) -> None:
        """Close the connections that waited in the selector for longer than they may."""
        now = time.monotonic()
        if not any(queue and queue[0][0] <= now for queue in (self.idle, self.fresh)):
            return  # (the common case, on every turn of the loop: no lock taken)
        expired = []
        with self.lock:
            for queue in (self.idle, self.fresh):  # each in the order of its deadlines
                while queue and queue[0][0] <= now:
                    deadline, conn = queue.popleft()
                    if conn.waiting and conn.deadline == deadline:  # still that wait
                        conn.waiting = False
                        self.selector.unregister(conn.sock)
                        expired.append(conn)
        for conn in expired:
            self._close(conn)

    def _close(self, conn: Connection) -> None:
        conn.close()
        with self.lock:
            self.connections -= 1

    def _stop(self, *, graceful: bool) -> None:
        """Stop accepting, close the idle connections and, ``graceful``, let the requests on
        the threads end (for graceful_timeout at most)."""
        for listener in self.sockets:
            with contextlib.suppress(OSError):
                listener.close()
        with self.lock:
            idle = list({conn for _, conn in (*self.idle, *self.fresh) if conn.waiting})
            for conn in idle:
                conn.waiting = False
            self.idle.clear()
            self.fresh.clear()
        for conn in idle:
            self._close(conn)
        self.end_streams()
        deadline = time.monotonic() + (self.cfg.graceful_timeout if graceful else 0)
        while time.monotonic() < deadline:
            with self.lock:
                if self.connections <= 0:
                    break
            self.notify()
            time.sleep(0.05)
        with self.lock:
            active = self.active.copy()
        for conn in active:  # a thread waiting on its client's next bytes: ended now
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------------ requests
    def _serve(self, conn: Connection) -> None:
        """On a pool thread: the connection's requests, while the client sends them without
        waiting; then back to the selector (kept alive) or closed."""
        self.active.add(conn)  # (a set's add and discard are atomic: no lock)
        kept: bool | str = False
        try:
            while True:
                kept = self._handle(conn)
                if kept is ADOPTED or not kept or not self.alive or not conn.pending:
                    break
        except Exception:
            self.log.exception("Error handling a request")
            kept = False
        self.active.discard(conn)
        if kept is ADOPTED:
            with self.lock:
                self.connections -= 1
            return
        if kept and self.alive:  # nothing more sent yet: wait in the selector
            self._wait(conn, self.idle, self.cfg.keepalive)
        else:
            self._close(conn)

    def _handle(self, conn: Connection) -> bool | str:
        """One request: whether the connection is kept (or ADOPTED by the live hub)."""
        conn.next_request()
        try:
            request = conn.next_event()
        except BlockingIOError:
            if conn.h11.trailing_data[0]:
                self.log.info(
                    "a client sent nothing for %s s mid-request: connection closed",
                    self.read_timeout,
                )
            return False
        except h11.RemoteProtocolError as exc:
            detail = str(exc)
            if exc.error_status_hint == 431:  # h11's "Receive buffer too long"
                detail = f"the request line and header fields are over {conn.max_head} bytes"
                self._send(conn, problem_bytes(431, detail))
            elif "Content-Length" in detail or "Transfer-Encoding" in detail:
                # h11's refusals of those two headers (BAD_FRAMING): 400, not its 501 for an
                # unknown coding: chunked is not the last, so the body's end is unknown (§6.3).
                self._send(conn, problem_bytes(400, detail, code=BAD_FRAMING))
            else:
                self._send(conn, problem_bytes(exc.error_status_hint, detail))
            return False
        except OSError:
            return False
        if type(request) is not h11.Request:  # ConnectionClosed: the client is done
            return False
        started = time.monotonic()
        headers = request.headers
        if len(headers) > MAX_FIELDS:
            self._send(conn, problem_bytes(431, f"more than {MAX_FIELDS} header fields"))
            return False
        body = Body(conn)
        environ = self._environ(conn, request, body)
        if environ is None:
            self._send(conn, problem_bytes(431, f"a header field over {MAX_FIELD} bytes"))
            return False
        if "HTTP_TRANSFER_ENCODING" in environ and (
            "CONTENT_LENGTH" in environ or request.http_version != b"1.1"
        ):  # h11 would read the body by its Transfer-Encoding alone; a proxy may not (§6.1)
            detail = "Transfer-Encoding with a Content-Length, or in an HTTP/1.0 request"
            self._send(conn, problem_bytes(400, detail, code=BAD_FRAMING))
            return False  # closed, lingering over the body it did not read (Connection.close)
        head: list[Any] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            if exc_info is not None and head and head[2]:
                raise exc_info[1].with_traceback(exc_info[2])
            head[:] = [status, headers, False]
            return _no_write

        if self.pacer is not None:
            self.pacer.wait()
        try:
            result = self.wsgi(environ, start_response)
        except Exception:
            rid = environ.get(REQUEST_ID_KEY)
            self.log.exception("the app failed on %s (request %s)", environ["RAW_URI"], rid)
            self._send(conn, problem_bytes(500, "an unexpected error; it has been logged", rid))
            return False
        try:
            status, response_headers = head[0], head[1]
            code = int(status[:3])
            stream = environ.get(ADOPT)
            if stream is not None and code == 200:
                self._hand_over(conn, stream, environ, status, response_headers)
                self._log(environ, code, 0, started)
                return ADOPTED
            if body.error is not None:  # the app saw a read fail; the worker says why
                detail = f"the body cannot be read: {body.error}"
                self._send(conn, problem_bytes(400, detail, environ.get(REQUEST_ID_KEY)))
                self._log(environ, 400, 0, started)
                return False
            return self._respond(
                conn, environ, request, body, code, status, response_headers, result, started
            )
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()

    def _environ(self, conn: Connection, request: Any, body: Body) -> dict[str, Any] | None:
        target = request.target.decode("latin-1")
        path, _, query = target.partition("?")
        if conn.local is None:
            local = conn.sock.getsockname()
            conn.local = (
                (str(local[0]), str(local[1])) if isinstance(local, tuple) else (str(local), "")
            )
        addr = conn.addr
        remote = addr if isinstance(addr, tuple) else (str(addr or ""), "")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method.decode("ascii"),
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
            "QUERY_STRING": query,
            "RAW_URI": target,
            "SERVER_PROTOCOL": "HTTP/" + request.http_version.decode("ascii"),
            "SERVER_NAME": conn.local[0],
            "SERVER_PORT": conn.local[1],
            "REMOTE_ADDR": str(remote[0]),
            "REMOTE_PORT": str(remote[1]),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": body,
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": self.cfg.workers > 1,
            "wsgi.run_once": False,
            "wsgi.input_terminated": True,  # read to its end: h11 knows where the body ends
        }
        for raw_name, raw_value in request.headers:
            if len(raw_value) > MAX_FIELD:
                return None
            name = raw_name.decode("latin-1")
            if "_" in name:  # X_Forwarded_For would pass for X-Forwarded-For: dropped
                continue
            key = name.upper().replace("-", "_")
            value = raw_value.decode("latin-1")
            if key != "CONTENT_TYPE" and key != "CONTENT_LENGTH":
                key = "HTTP_" + key
            if key in environ:
                environ[key] += ("; " if key == "HTTP_COOKIE" else ",") + value
            else:
                environ[key] = value
        if remote[0] in self.cfg.forwarded_allow_ips or "*" in self.cfg.forwarded_allow_ips:
            for header, secure in self.cfg.secure_scheme_headers.items():
                if environ.get("HTTP_" + header.replace("-", "_")) == secure:
                    environ["wsgi.url_scheme"] = "https"
        return environ

    def _respond(
        self,
        conn: Connection,
        environ: dict[str, Any],
        request: Any,
        body: Body,
        code: int,
        status: str,
        headers: list[tuple[str, str]],
        result: Iterable[bytes],
        started: float,
    ) -> bool:
        h = conn.h11
        keep = (
            self.alive
            and code not in CLOSING
            and request.http_version == b"1.1"
            and started < conn.retire
        )
        if keep and h.their_state is h11.SEND_BODY:  # the app left (part of) the body unread
            keep = body.drain(DRAIN_MAX)  # True: read to its end
        if keep:
            for name, value in request.headers:
                if name == b"connection" and b"close" in value.lower():
                    keep = False
        lines = [f"{environ['SERVER_PROTOCOL']} {status}"]
        sized = False
        for name, value in headers:
            lowered = name.lower()
            if lowered == "content-length":
                sized = True
            elif lowered == "connection" or lowered == "transfer-encoding":
                continue  # the worker frames the answer
            lines.append(f"{name}: {value}")
        empty = request.method == b"HEAD" or code in (204, 304)
        chunked = not sized and not empty and keep  # else the end of the body is the close
        if chunked:
            lines.append("Transfer-Encoding: chunked")
        elif not sized and not empty:
            keep = False
        lines.append(f"Date: {self.date.now()}")
        lines.append("Connection: keep-alive" if keep else "Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        sent = 0
        sock = conn.sock
        try:
            if sized or empty:  # the head and the body in one write (up to RECV bytes a write)
                for chunk in result:
                    if chunk and not empty:
                        sent += len(chunk)
                        if len(data) < RECV:
                            data += chunk
                            continue
                        sock.sendall(data)
                        data = chunk
                sock.sendall(data)
            elif not chunked:  # up to the close: each part as it comes
                for chunk in result:
                    if chunk:
                        sent += len(chunk)
                        sock.sendall(data + chunk)
                        data = b""
                if data:
                    sock.sendall(data)
            else:
                for chunk in result:
                    if chunk:
                        sent += len(chunk)
                        data += b"%x\r\n%s\r\n" % (len(chunk), chunk)
                        sock.sendall(data)
                        data = b""
                sock.sendall(data + b"0\r\n\r\n")
        except OSError as exc:
            self.log.debug("answer not sent whole: %s", exc)
            keep = False
        self._log(environ, code, sent, started)
        if not keep or h.their_state is not h11.DONE:
            return False
        conn.pending = h.trailing_data[0]
        return True

    def _hand_over(
        self,
        conn: Connection,
        stream: Any,
        environ: dict[str, Any],
        status: str,
        headers: list[tuple[str, str]],
    ) -> None:
        """A live stream: its socket is the hub's loop's now, which writes the answer from here
        on (service/live/streams.py); this thread goes back to the pool."""
        lines = [f"{environ['SERVER_PROTOCOL']} {status}", *(f"{k}: {v}" for k, v in headers)]
        lines += [f"Date: {self.date.now()}", "Connection: close"]
        stream.adopt(conn.sock, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def _send(self, conn: Connection, data: bytes) -> None:
        with contextlib.suppress(OSError):
            conn.sock.sendall(data)

    def _log(self, environ: dict[str, Any], code: int, sent: int, started: float) -> None:
        if not self.cfg.accesslog:
            return
        request = (
            f"{environ['REQUEST_METHOD']} {logged_target(environ['RAW_URI'])} "
            f"{environ['SERVER_PROTOCOL']}"
        )
        fields = {
            "remote": environ["REMOTE_ADDR"] or "-",
            "request": request,
            "status": str(code),  # as gunicorn's atoms wrote it
            "bytes": sent or "-",
            "ms": int((time.monotonic() - started) * 1000),
            "request_id": environ.get(REQUEST_ID_KEY, "-"),  # service/http/metrics.py
        }
        access_log.info(
            '%s "%s" %s %s %sms %s',
            *fields.values(),
            extra={"access": fields},  # JSON lines take the fields (service/logformat.py)
        )


def _no_write(data: bytes) -> None:
    raise NotImplementedError("the WSGI write() callable is not supported: return the body")


__all__ = ["ServiceWorker", "logged_target", "problem_bytes"]
