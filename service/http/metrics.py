"""Request ids on every answer, and ``GET /metrics`` in Prometheus's text format (off by default).

Request ids are always on: cheap (a header read, or a per-process prefix and a counter), and the
access log's only link between a client's report and a line. Metrics (CANTSTOP_METRICS=on)
time each request by its route template, count problems by code, and at each scrape read from
the store what no single process knows: each view's lag, the webhook and analysis queues, the
oldest due item the scheduler has not done (docs/scaling.md (metrics)). With metrics off,
no hook of theirs is installed and /metrics is a 404 like any unknown path.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import hmac
import itertools
import json
import logging
import os
import re
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
from flask import Blueprint, Flask, Response, request

from service import metrics
from service.application.errors import ApplicationError
from service.application.games.scheduler import Scheduler
from service.config import Settings
from service.http.core import bearer_token, problem, runtime
from service.live.hub import Hub
from service.persistence.log import LogReader
from service.runtime import Runtime

log = logging.getLogger("cantstop.metrics")

REQUEST_ID = "X-Request-Id"
REQUEST_ID_KEY = "cantstop.request_id"  # the request's id in its WSGI environ
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Any]
# A client's id is kept if it is short and cannot break a log line or a header.
SAFE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
STARTED = "cantstop.started"  # the request's start (perf_counter) in its WSGI environ
METHODS = frozenset(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
UNMATCHED = "(unmatched)"  # the route label of a request that matched no route
STREAMS_PERIOD = 1.0  # seconds between samples of a worker's open streams
LAG_CAP = 10_000  # events counted behind a view, at most (a scrape stays cheap)
PROBLEM = "application/problem+json"


# ------------------------------------------------------------------------------ request ids
class _Ids:
    """Ids made here: a prefix per process (made again in a forked child) and a counter, unique
    across the workers and hosts of a fleet without a draw per request. The prefix is a hash of
    host, pid and start time, not of random bytes: the bench's fixed random draws
    (bench/instructions.py) stay the games' own."""

    def __init__(self) -> None:
        self.reset()
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        origin = f"{socket.gethostname()}/{os.getpid()}/{time.time_ns()}".encode()
        self.prefix = hashlib.blake2b(origin, digest_size=6).hexdigest()
        self.counter = itertools.count(1)

    def make(self) -> str:
        return f"{self.prefix}-{next(self.counter):x}"


_ids = _Ids()


def new_request_id() -> str:
    """An id for an answer made without the app (the server's own, to what it cannot parse)."""
    return _ids.make()


def with_request_ids(wsgi_app: WsgiApp, *, timed: bool = False) -> WsgiApp:
    """``wsgi_app`` answering with an ``X-Request-Id``: the client's if it is safe, else a new
    one, also kept in the environ (``REQUEST_ID_KEY``). A WSGI middleware (Flask's documented
    ``app.wsgi_app`` wrapping) rather than an ``after_request`` hook: it adds one header to the
    list as it goes by, without Flask's per-hook checks and header validation (a tenth of the
    instructions: docs/performance.md). ``timed``: the start of the request is noted too
    (``STARTED``), for the request metrics."""

    def answer(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if timed:
            environ[STARTED] = time.perf_counter()
        sent = environ.get("HTTP_X_REQUEST_ID")
        rid = sent if sent is not None and SAFE_ID.fullmatch(sent) else _ids.make()
        environ[REQUEST_ID_KEY] = rid

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            headers.append((REQUEST_ID, rid))
            return start_response(status, headers, exc_info)

        return wsgi_app(environ, start)

    return answer


# ------------------------------------------------------------------------------ request metrics
def _observed(response: Response) -> Response:
    m = metrics.active()
    if m is None:
        return response
    started = request.environ.get(STARTED)
    seconds = time.perf_counter() - started if started is not None else 0.0
    rule = request.url_rule
    method = request.method
    status = response.status_code
    m.request_done(
        UNMATCHED if rule is None else rule.rule,
        method if method in METHODS else "other",
        str(status),
        seconds,
    )
    if status >= 400 and response.mimetype == PROBLEM and not response.is_streamed:
        try:
            code = str(json.loads(response.get_data())["code"])
        except (ValueError, KeyError, TypeError):
            code = "unknown"
        m.problems.labels(code).inc()
    return response


def _sample_streams(hub: weakref.ref[Hub]) -> None:
    """A worker's open streams, into the gauge every ``STREAMS_PERIOD`` (in multiprocess mode a
    gauge cannot be read on demand from another process)."""
    gauge = metrics.start().streams
    while (live := hub()) is not None:
        gauge.set(live.open_streams)
        del live
        time.sleep(STREAMS_PERIOD)


# ------------------------------------------------------------------------------ the store's figures
Figures = list[tuple[list[str], float]]  # (label values, value) for each series of a family


class StoreCollector:
    """What the store says at the scrape (the same whichever worker answers). A figure that cannot
    be read (the store is down) is left out of this scrape, not made up."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        families: tuple[tuple[Callable[[], Figures], str, str, list[str]], ...] = (
            (self._lag, "cantstop_view_lag_events", "Events of its kinds in the log a view has "
             f"not applied yet (counted up to {LAG_CAP}).", ["view"]),
            (self._webhooks, "cantstop_webhook_deliveries", "Webhook deliveries stored, by "
             "status (pending: the queue).", ["status"]),
            (self._jobs, "cantstop_analysis_jobs", "Analysis jobs stored, by status (queued: "
             "the queue).", ["status"]),
            (self._overdue, "cantstop_scheduler_overdue_seconds", "How long the oldest due "
             "item (deadline, bot turn) has waited for the scheduler; 0 when none.", []),
        )  # fmt: skip
        for read, name, documentation, labels in families:
            try:
                values = read()
            except (ApplicationError, LookupError, OSError, sqlite3.Error, psycopg.Error) as exc:
                log.warning("metrics: %s not read: %s", name, exc)
                continue
            family = GaugeMetricFamily(name, documentation, labels=labels)
            for label_values, value in values:
                family.add_metric(label_values, value)
            yield family

    def _lag(self) -> Figures:
        rt = self.rt
        found = []
        for view in rt.all_views():
            position = rt.views.tracking(view).position
            # Its own topics: a follower reads past the others without storing where it is
            # (``Views.catch_up(lazy=True)``), and they are nothing it has to apply.
            behind = LogReader(rt.games.recorder, view.topics, position).heads(LAG_CAP)
            found.append(([view.name], float(len(behind))))
        return found

    def _webhooks(self) -> Figures:
        counts = {"pending": 0, "delivered": 0, "failed": 0}
        counts.update(self.rt.webhooks.tables.counts())
        return [([status], float(n)) for status, n in counts.items()]

    def _jobs(self) -> Figures:
        counts = {"queued": 0, "running": 0, "done": 0, "failed": 0}
        counts.update(self.rt.analyst.jobs.counts())
        return [([status], float(n)) for status, n in counts.items()]

    def _overdue(self) -> Figures:
        rt = self.rt
        due = Scheduler(rt.games, rt.timekeeper, rt.views).next_due
        waited = 0.0 if due is None else (datetime.now(UTC) - due).total_seconds()
        return [([], max(0.0, waited))]


# ------------------------------------------------------------------------------ /metrics
class ProcessFiles:
    """prometheus_client's multiprocess collector (its public ``merge``), passing over a
    process's file still being created: the library's own ``collect`` reads every ``*.db`` in
    the folder, and a file created at the moment of a scrape (empty, before its header is
    written) failed the scrape with ``struct.error``, a 500 (tests/test_metrics.py)."""

    HEADER = 8  # bytes: the used size and its padding

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Any:
        from prometheus_client.multiprocess import MultiProcessCollector

        files = []
        for name in sorted(glob.glob(os.path.join(self.path, "*.db"))):
            with contextlib.suppress(OSError):  # a process's file removed meanwhile
                if os.path.getsize(name) >= self.HEADER:
                    files.append(name)
        return MultiProcessCollector.merge(files, accumulate=True)  # type: ignore[no-untyped-call]


metrics_api = Blueprint("metrics", __name__)


@metrics_api.get("/metrics")
def scrape() -> Response:
    settings = runtime().settings
    if settings.metrics_token is not None:
        sent = bearer_token() or ""
        if not hmac.compare_digest(sent.encode(), settings.metrics_token.encode()):
            response = problem(401, "unauthorized", "/metrics asks for CANTSTOP_METRICS_TOKEN")
            response.headers["WWW-Authenticate"] = 'Bearer realm="cantstop-metrics"'
            return response
    from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

    store = CollectorRegistry()
    store.register(StoreCollector(runtime()))
    if metrics.multiprocess():
        processes = CollectorRegistry()
        processes.register(ProcessFiles(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
        body = generate_latest(processes)
    else:
        body = generate_latest(REGISTRY)
    response = Response(body + generate_latest(store))
    response.headers["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
    response.headers["Cache-Control"] = "no-store"
    return response


def init_app(app: Flask, settings: Settings) -> None:
    """Request ids always; with CANTSTOP_METRICS=on, /metrics and the request hook (registered
    first, so run last of the app's after_request hooks: it sees the final status)."""
    app.wsgi_app = with_request_ids(  # type: ignore[method-assign, assignment]
        app.wsgi_app, timed=settings.metrics
    )
    if not settings.metrics:
        return
    metrics.start()
    app.after_request(_observed)
    app.register_blueprint(metrics_api)
    hub = app.extensions["cantstop"].hub
    threading.Thread(
        target=_sample_streams, args=(weakref.ref(hub),), name="metrics-streams", daemon=True
    ).start()
