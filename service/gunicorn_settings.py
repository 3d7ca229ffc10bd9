"""gunicorn settings used by `cantstop serve` (and so by the Dockerfile), shipped in the package.

Threaded workers (gthread) answer requests: 128 threads per worker by default, which mostly wait
(on the database, on Redis). A server-sent-event stream holds none of them: once the stream's
request is judged, its connection is handed to the worker's live hub, one asyncio loop that holds
every stream of the worker (``_hand_over``; service/live/hub.py). A worker holds up to
CANTSTOP_STREAM_MAX streams (8,000) and CANTSTOP_STREAM_MAX_PER_CLIENT per client address (500),
and its open-file limit is raised to the hard limit so that its sockets fit.

Workers (`cantstop serve --workers N`, or CANTSTOP_WORKERS): about one per CPU core, since the GIL
keeps a process's Python on one core; more workers means more PostgreSQL connections:
workers x (CANTSTOP_PG_POOL_SIZE + CANTSTOP_PG_MAX_OVERFLOW) per host.

Each worker builds its own eventsourcing Application after the fork (preload_app stays off); the
tables were created once by `cantstop serve` before starting. When a worker is told to stop, it
ends its streams at once (see post_fork) rather than holding the restart for graceful_timeout;
clients reconnect with Last-Event-ID and miss nothing. Values come from the environment variables
below.

CPU affinity (CANTSTOP_CPU_AFFINITY, ``off`` by default): with ``auto`` or ``on``, each worker keeps
to one CPU, the one fewest live workers keep to when it starts. A worker's threads take turns at
the GIL, and each time one lets go of it (a socket, an SQLite call, a contended lock) another
takes it, on whichever CPU the kernel woke it: the interpreter's data then moves between the
cores' caches. Kept to one CPU, on the bench's 2-core VM, both the service and the hello-world
served more actions per second at less CPU per action, alike, so the ratio between them did not
move (docs/performance.md (levers)). ``auto`` pins only a server that has its CPUs to itself: at
least as many workers as the CPUs it may run on (``taskset``, a cpuset), and no CPU quota below
them (a container's ``--cpus``: cgroup ``cpu.max`` or ``cpu.cfs_quota_us``); elsewhere (2
workers on a 64-core host, other servers beside it) pinning would tie every server's first
worker to CPU 0. ``on`` pins anyway. It stays off by default: a pinned worker cannot move away
from a core that something else keeps busy, which this 2-core VM at rest cannot show; measure it
on the host first. The `cantstop worker` process (clocks, bots) is never pinned.
"""

import contextlib
import json
import logging
import os
import resource
import socket
import ssl
import struct
import sys
import threading
from collections.abc import Callable, Iterable
from email.utils import formatdate
from pathlib import Path
from typing import Any

from gunicorn import glogging
from gunicorn import util as gunicorn_util

from service import logformat, metrics
from service.config import ServerSettings, Settings
from service.http.stream import ADOPT
from service.live.hub import LiveConfig

_server = ServerSettings.from_env()
bind = _server.bind
wsgi_app = "service.wsgi:app"
workers = _server.workers
worker_class = "gthread"
threads = _server.threads
# Open connections per worker, idle keep-alive ones included; must stay above threads.
worker_connections = max(1000, 2 * threads)
preload_app = False
# No gunicorn control socket (gunicorn >= 27): unused here, and one default path per user would be
# shared by every server on the host.
control_socket_disable = True
# The app answers an over-long request line (414) or header block (431) itself, as problem+json
# (CANTSTOP_MAX_URI_BYTES, CANTSTOP_MAX_HEADER_BYTES): gunicorn's own limits, which answer in
# HTML, are raised to their maximum (a line of up to 1 MiB, header fields of up to 64 KiB).
limit_request_line = 0
limit_request_field_size = 65536
limit_request_fields = 100

# What gunicorn still answers itself (a request it cannot parse: more than 100 header fields, one
# field over 64 KiB, a malformed request line) is problem+json with a stable code too, like every
# other error of the service, not gunicorn's HTML page: its one writer of those answers
# (gunicorn.util.write_error, called by every worker class's handle_error) is replaced here, in
# the master, before the workers fork.
GUNICORN_ERROR_CODES = {
    400: "malformed_request",
    403: "forbidden",
    414: "uri_too_long",
    417: "expectation_failed",
    431: "headers_too_large",
    500: "internal_error",
    501: "not_implemented",
}


def write_problem(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    code = GUNICORN_ERROR_CODES.get(status_int, "malformed_request")
    body = json.dumps(
        {
            "type": f"urn:cantstop:problem:{code}",
            "title": reason,
            "status": status_int,
            "detail": mesg or reason,
            "code": code,
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/problem+json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    gunicorn_util.write_nonblock(sock, head.encode("latin-1") + body)


gunicorn_util.write_error = write_problem
timeout = 60
graceful_timeout = 10
keepalive = 5
accesslog = _server.access_log  # CANTSTOP_ACCESS_LOG empty: no access log
errorlog = "-"
loglevel = _server.log_level
# Never log request headers: Authorization carries seat tokens.
access_log_format = logformat.ACCESS_TEXT  # the request id last (service/http/metrics.py)
# The query parameters whose values the access log shows: the API's own. Any other is written
# as "…": a client that puts its seat token in the URL (refused: 401) must not have it logged.
LOGGED_QUERY = frozenset(
    [
        *("version", "after", "limit", "offset", "seat"),
        *("status", "open", "mode", "dice_faces", "steep_hill"),
    ]
)


def _logged(query: str) -> str:
    parts = []
    for part in query.split("&"):
        name, equals, _ = part.partition("=")
        parts.append(part if name in LOGGED_QUERY and equals else "…")
    return "&".join(parts)


class ServerLogger(glogging.Logger):  # type: ignore[misc]  # gunicorn has no types
    """gunicorn's logger, writing only the API's own query values (``LOGGED_QUERY``), and a
    connection closed for sending nothing mid-request (``when_ready``) as one line, not as a
    socket error with its traceback (a slow-client attack would fill the log with them)."""

    def exception(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if isinstance(sys.exc_info()[1], BlockingIOError):
            self.info("a client sent nothing for %s s mid-request: connection closed", READ_TIMEOUT)
            return
        super().exception(msg, *args, **kwargs)

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> Any:
        atoms = super().atoms(resp, req, environ, request_time)
        path, question, query = str(environ.get("RAW_URI", "")).partition("?")
        if question:
            logged = _logged(query)
            method, protocol = environ.get("REQUEST_METHOD"), environ.get("SERVER_PROTOCOL")
            atoms["r"] = f"{method} {path}?{logged} {protocol}"
            atoms["q"] = logged
        return atoms


logger_class: type[Any] = ServerLogger
if _server.log_format == "json":  # CANTSTOP_LOG_FORMAT (service/logformat.py)
    logger_class = logformat.json_logger(ServerLogger)


# A connection's reads wait at most this long for the client's next bytes once its request has
# begun: gthread's threads read headers and bodies blocking, so a client that sends part of a
# request and then nothing held a thread for ever (about 260 of them froze both workers of a
# default server). The kernel's receive timeout, set on the listening sockets, is inherited by
# every connection they accept, and Python's setblocking() leaves it in place: a blocking read
# past it fails with EAGAIN (BlockingIOError). gunicorn then closes the connection; a body read
# by the app is answered 408 request_timeout (service/http/core.py). Idle kept-alive connections
# wait in gthread's poller, not in a read, and streams never read: neither is affected.
READ_TIMEOUT = _server.read_timeout


def when_ready(server: Any) -> None:
    """In the master, once it listens: the read timeout on every listening socket."""
    timeout = struct.pack("ll", READ_TIMEOUT, 0)
    for listener in server.LISTENERS:
        listener.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeout)


def on_starting(server: Any) -> None:
    """In the master, before any worker: a typo in the configuration stops the start, loudly."""
    Settings.from_env()
    LiveConfig.from_env()


def cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """How many CPUs' worth of time this process's cgroup may use, if a quota is set (cgroup
    v2 ``cpu.max``, v1 ``cpu/cpu.cfs_quota_us``); None without one."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if quota in ("max", "-1"):
        return None
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None


def pinned_cpus(
    setting: str, allowed: Iterable[int], quota: float | None, workers: int
) -> list[int] | None:
    """The CPUs the workers are pinned to, one each (CANTSTOP_CPU_AFFINITY); None: not pinned.
    ``auto`` pins only a server that has the CPUs to itself: as many workers as the CPUs it
    may run on, or more, and no CPU quota below them."""
    cpus = sorted(allowed)
    if setting == "off" or len(cpus) < 2:
        return None
    if setting == "auto" and (workers < len(cpus) or (quota is not None and quota < len(cpus))):
        return None  # the CPUs are shared (other servers, a container's quota): the kernel
    return cpus


def least_taken(cpus: list[int], taken: Iterable[int | None]) -> int:
    """The CPU of ``cpus`` that the fewest live workers keep to (the first of those)."""
    counts = dict.fromkeys(cpus, 0)
    for cpu in taken:
        if cpu in counts:
            counts[cpu] += 1
    return min(cpus, key=counts.__getitem__)


_cpus = pinned_cpus(_server.cpu_affinity, os.sched_getaffinity(0), cpu_quota(), workers)


def pre_fork(server: Any, worker: Any) -> None:
    """In the master, before a worker is forked: the CPU it will keep to (``post_fork``)."""
    if _cpus is not None:
        taken = (getattr(w, "cantstop_cpu", None) for w in server.WORKERS.values())
        worker.cantstop_cpu = least_taken(_cpus, taken)


def post_fork(server: Any, worker: Any) -> None:
    """Keep the worker to its CPU (``pre_fork``; its threads, started later, inherit it). Tell
    the worker as many open files as the system lets it (each stream is a socket), and end the
    worker's streams as soon as it is told to stop (SIGTERM), instead of holding the restart for
    graceful_timeout: clients reconnect elsewhere with Last-Event-ID and miss nothing."""
    cpu = getattr(worker, "cantstop_cpu", None)
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError as exc:  # a sandbox may refuse: the worker runs unpinned
            logging.getLogger("cantstop").warning("worker not kept to CPU %s: %s", cpu, exc)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    graceful_exit = worker.handle_exit

    def handle_exit(sig: int, frame: Any) -> None:
        graceful_exit(sig, frame)
        _end_streams(worker)

    worker.handle_exit = handle_exit  # installed as the SIGTERM handler by init_signals()


# Answers to a request whose body the app did not read whole: a stalled body (408) or one over
# the limit (413). gunicorn then closes the connection (the rest of the body cannot be told from
# a next request), but it wrote ``Connection: keep-alive`` in the answer, which only it writes
# (it drops the app's ``Connection``), and a client that sent its next request on the connection
# lost it. Marking the request as closing makes gunicorn say ``Connection: close``.
UNREAD_BODY = frozenset({"408", "413"})
_serving = threading.local()  # gthread serves each request on one thread, hooks included


def pre_request(worker: Any, req: Any) -> None:
    _serving.req = req


def post_worker_init(worker: Any) -> None:
    """Wrap the worker's app (``UNREAD_BODY``, ``_hand_over``); the Flask app itself stays at
    ``worker.cantstop_app`` (``_end_streams``)."""
    app = worker.wsgi
    worker.cantstop_app = app

    def serving(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        head: list[Any] = []

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if status[:3] in UNREAD_BODY:
                req = getattr(_serving, "req", None)
                if req is not None:
                    req.must_close = True
            if status[:3] == "200" and environ.get(ADOPT) is not None and _adoptable(environ):
                head[:] = [status, headers]
            return start_response(status, headers, exc_info)

        body = app(environ, start)
        if head:
            return _hand_over(environ, start_response, body, *head)
        return body

    worker.wsgi = serving


def _adoptable(environ: dict[str, Any]) -> bool:
    """Whether the connection can be handed to the live hub's loop: a plain socket (gunicorn's
    own TLS cannot be carried over to another socket object)."""
    sock = environ.get("gunicorn.socket")
    return isinstance(sock, socket.socket) and not isinstance(sock, ssl.SSLSocket)


def _hand_over(
    environ: dict[str, Any],
    start_response: Callable[..., Any],
    body: Any,
    status: str,
    headers: list[tuple[str, str]],
) -> list[bytes]:
    """Hand a stream's connection to the live hub's loop (service/live/hub.py), which writes
    the answer from here on, and let this thread go back to gthread at once: a stream holds a
    socket in the loop, not a thread. gunicorn is told that the head was sent (it writes
    nothing) and that the connection closes (it forgets it; the loop owns the socket now)."""
    stream = environ[ADOPT]
    sock = environ["gunicorn.socket"]
    protocol = environ.get("SERVER_PROTOCOL", "HTTP/1.1")
    lines = [f"{protocol} {status}", *(f"{k}: {v}" for k, v in headers)]
    lines += [f"Date: {formatdate(usegmt=True)}", "Connection: close"]
    # Detached, not duplicated: gunicorn ends a closing connection with shutdown(), which would
    # end it for every copy; on the detached socket object its shutdown and close do nothing.
    adopted = socket.socket(fileno=sock.detach())
    stream.adopt(adopted, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    if hasattr(body, "close"):
        body.close()  # Flask's teardown; the adopted stream itself is not closed by it
    response = getattr(start_response, "__self__", None)
    if response is not None:  # gunicorn's Response (library hook: service/hooks.py)
        response.headers_sent = True
        response.chunked = False
        response.force_close()
    return []


def child_exit(server: Any, worker: Any) -> None:
    """In the master, a worker gone: its live gauges stop counting (service/metrics.py)."""
    metrics.process_dead(worker.pid)


def worker_int(worker: Any) -> None:
    """SIGINT / SIGQUIT: the quick shutdown; end the streams so the worker can exit at once."""
    _end_streams(worker)


def _end_streams(worker: Any) -> None:
    # In the signal handler, on the main thread: it only takes the hub's locks, which the main
    # thread (gthread's event loop) never holds, so this cannot deadlock; it does not block.
    app = getattr(worker, "cantstop_app", None) or getattr(worker, "wsgi", None)
    runtime = getattr(app, "extensions", {}).get("cantstop")
    if runtime is not None:
        runtime.hub.shutdown()
