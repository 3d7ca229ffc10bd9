"""gunicorn settings used by `cantstop serve` (and so by the Dockerfile), shipped in the package.

Threaded workers (gthread): an open server-sent-event stream holds one thread, not a whole process
(sync workers could hold one stream each and nothing else). The threads mostly wait (on a stream's
mailbox, on the database, on Redis), so they are cheap: 128 per worker by default. A worker serves
at most threads - max(4, threads // 4) streams (96 of 128; CANTSTOP_STREAM_MAX overrides) and
answers 503 too_many_streams beyond that, so at least a quarter of its threads stay free for actions
and reads however many clients watch: a request waits in gthread's queue only when every thread is
busy.

Workers (`cantstop serve --workers N`, or CANTSTOP_WORKERS): about one per CPU core, since the GIL
keeps a process's Python on one core; more workers means more PostgreSQL connections:
workers x (CANTSTOP_PG_POOL_SIZE + CANTSTOP_PG_MAX_OVERFLOW) per host.

Each worker builds its own eventsourcing Application after the fork (preload_app stays off); the
tables were created once by `cantstop serve` before starting. When a worker is told to stop, it
ends its streams at once (see post_fork) rather than holding the restart for graceful_timeout;
clients reconnect with Last-Event-ID and miss nothing. Values come from the environment variables
below.
"""

import os
from typing import Any

from service.config import ServerSettings, Settings
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
timeout = 60
graceful_timeout = 10
keepalive = 5
accesslog = _server.access_log  # CANTSTOP_ACCESS_LOG empty: no access log
errorlog = "-"
loglevel = _server.log_level
# Never log request headers: Authorization carries seat tokens.
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'


def on_starting(server: Any) -> None:
    """In the master, before any worker: a typo in the configuration stops the start, loudly."""
    Settings.from_env()
    LiveConfig.from_env()


def post_fork(server: Any, worker: Any) -> None:
    """Tell the app how many threads its worker has (it keeps some free from streams), and end
    the worker's streams as soon as it is told to stop (SIGTERM), instead of holding the restart
    for graceful_timeout: clients reconnect elsewhere with Last-Event-ID and miss nothing."""
    os.environ["CANTSTOP_WORKER_THREADS"] = str(worker.cfg.threads)
    graceful_exit = worker.handle_exit

    def handle_exit(sig: int, frame: Any) -> None:
        graceful_exit(sig, frame)
        _end_streams(worker)

    worker.handle_exit = handle_exit  # installed as the SIGTERM handler by init_signals()


def worker_int(worker: Any) -> None:
    """SIGINT / SIGQUIT: the quick shutdown; end the streams so the worker can exit at once."""
    _end_streams(worker)


def _end_streams(worker: Any) -> None:
    # In the signal handler, on the main thread: it only takes the hub's locks, which the main
    # thread (gthread's event loop) never holds, so this cannot deadlock; it does not block.
    runtime = getattr(getattr(worker, "wsgi", None), "extensions", {}).get("cantstop")
    if runtime is not None:
        runtime.hub.shutdown()
