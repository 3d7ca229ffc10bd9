"""gunicorn settings used by `cantstop serve` (and the Dockerfile).

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

bind = os.environ.get("CANTSTOP_BIND", "127.0.0.1:8000")
wsgi_app = "service.wsgi:app"
workers = int(os.environ.get("CANTSTOP_WORKERS", "2"))
worker_class = "gthread"
threads = int(os.environ.get("CANTSTOP_THREADS", "128"))
# Open connections per worker, idle keep-alive ones included; must stay above threads.
worker_connections = max(1000, 2 * threads)
preload_app = False
# No gunicorn control socket (gunicorn >= 27): unused here, and one default path per user would be
# shared by every server on the host.
control_socket_disable = True
timeout = 60
graceful_timeout = 10
keepalive = 5
accesslog = os.environ.get("CANTSTOP_ACCESS_LOG", "-") or None  # empty: no access log
errorlog = "-"
loglevel = os.environ.get("CANTSTOP_LOG_LEVEL", "info")
# Never log request headers: Authorization carries seat tokens.
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'


def on_starting(server: Any) -> None:
    """In the master, before any worker: a typo in the configuration stops the start, loudly."""
    from service.limits import parse_limits
    from service.live import LiveConfig

    parse_limits(os.environ.get("CANTSTOP_RATE_LIMITS"))
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
    hub = getattr(getattr(worker, "wsgi", None), "extensions", {}).get("cantstop.live")
    if hub is not None:
        hub.shutdown()
