"""The service's Prometheus metrics (``CANTSTOP_METRICS=on``); with metrics off nothing here runs.

prometheus_client is imported by ``start`` only: in its multiprocess mode it must see
PROMETHEUS_MULTIPROC_DIR before its first import (``cantstop serve`` sets it), and a service with
metrics off loads nothing. Each process that records (HTTP workers, the scheduler, the analysts)
starts its own metrics, written to files of its own in that folder; the worker answering
/metrics sums them (service/http/metrics.py). Every label is from a bounded set (route templates,
methods, statuses, problem codes, event types, outcomes): never a path, a token, a handle or a
game id, so no client can make new series.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
# Seconds: an action answers in milliseconds; a stream's head or an import may take seconds.
REQUEST_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Seconds from a due time (a deadline, a bot's turn) to the scheduler doing it.
LATENESS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The metric objects of this process (prometheus_client's, by its public API)."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

        # No ``_created`` series: a restart already shows as a counter's reset.
        disable_created_metrics()  # type: ignore[no-untyped-call]

        self.requests = Histogram(
            "cantstop_http_request_duration_seconds",
            "Time to answer a request (to a stream's head), by route template and status.",
            ["route", "method", "status"],
            buckets=REQUEST_BUCKETS,
        )
        self.problems = Counter(
            "cantstop_problems_total", "problem+json answers, by their stable code.", ["code"]
        )
        self.events = Counter(
            "cantstop_events_recorded_total",
            "Game events recorded (actions, timeouts, seats), by type.",
            ["type"],
        )
        # livesum: the sum over live processes (a worker that died is forgotten by its pid).
        self.streams = Gauge(
            "cantstop_streams_open",
            "Live event streams open (all workers).",
            multiprocess_mode="livesum",
        )
        self.lateness = Histogram(
            "cantstop_scheduler_lateness_seconds",
            "From a due time (deadline, computer player's turn) to the scheduler doing it.",
            buckets=LATENESS_BUCKETS,
        )
        self.webhook_attempts = Counter(
            "cantstop_webhook_attempts_total",
            "Webhook delivery attempts, by outcome (delivered, retry, failed).",
            ["outcome"],
        )
        for outcome in ("delivered", "retry", "failed"):  # each series there from the start, at 0
            self.webhook_attempts.labels(outcome)
        # Each series' child, once: ``labels()`` checks and locks on every call, a dict lookup
        # does not (the sets of label values are bounded, so these stay small).
        self._request_series: dict[tuple[str, str, str], Any] = {}
        self._event_series: dict[str, Any] = {}

    def request_done(self, route: str, method: str, status: str, seconds: float) -> None:
        key = (route, method, status)
        series = self._request_series.get(key)
        if series is None:
            series = self._request_series[key] = self.requests.labels(*key)
        series.observe(seconds)

    def event_recorded(self, kind: str) -> None:
        series = self._event_series.get(kind)
        if series is None:
            series = self._event_series[kind] = self.events.labels(kind)
        series.inc()


_metrics: Metrics | None = None


def start() -> Metrics:
    """This process's metrics, made once (``Runtime`` calls it when CANTSTOP_METRICS is on)."""
    global _metrics
    if _metrics is None:
        _metrics = Metrics()
    return _metrics


def active() -> Metrics | None:
    """The metrics if started, else None: the callers below do nothing then."""
    return _metrics


def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_DIR))


def counting_events(
    tell: Callable[[Any, list[dict[str, Any]]], None],
) -> Callable[[Any, list[dict[str, Any]]], None]:
    """``Games.on_recorded`` that counts the events by type, then tells ``tell``."""
    recorded = start().event_recorded

    def counted(game_id: Any, records: list[dict[str, Any]]) -> None:
        for record in records:
            recorded(record["type"])
        tell(game_id, records)

    return counted


def scheduler_late(seconds: float) -> None:
    if _metrics is not None:
        _metrics.lateness.observe(max(0.0, seconds))


def webhook_attempt(status: str) -> None:
    """``status`` as the dispatcher stores it: delivered, pending (to be retried) or failed."""
    if _metrics is not None:
        _metrics.webhook_attempts.labels("retry" if status == "pending" else status).inc()


def process_dead(pid: int) -> None:
    """A process of the server ended (gunicorn's ``child_exit``, the scheduler's restart): its
    live gauges no longer count."""
    if multiprocess():
        from prometheus_client import multiprocess as mp

        mp.mark_process_dead(pid)  # type: ignore[no-untyped-call]
