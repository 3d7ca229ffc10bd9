"""The analysis as a job, in tests: ``analysed`` asks as a client does, and when the answer is
202 runs the queue's jobs in this process (what a ``cantstop worker`` child does), then asks
again; ``served`` polls a real server's workers with a bound."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from service.application.analysis.jobs import Worker, rss_bytes
from tests.support.polling import poll

_workers: weakref.WeakKeyDictionary[Flask, Worker] = weakref.WeakKeyDictionary()


def worker_of(app: Flask) -> Worker:
    """The app's one in-process worker (it follows games from job to job, as a child does).
    Its memory budget counts from what this test process holds already: a pytest worker that
    has run a thousand tests may stand near the 640 MB a child's job may reach, and a job
    failed for memory (as in CI on 2026-11-30) would test the test process, not the analysis.
    The budget itself is tested with real child processes
    (``test_a_worker_past_its_memory_budget_is_replaced``)."""
    found = _workers.get(app)
    if found is None:
        analyst = app.extensions["cantstop"].analyst
        config = dataclasses.replace(
            analyst.config, rss_bytes=rss_bytes() + analyst.config.rss_bytes
        )
        found = _workers[app] = Worker(analyst.games, analyst.jobs, config, "tests:in-process")
    return found


def run_jobs(app: Flask, limit: int = 100) -> int:
    """Every queued job worked out in this process; how many."""
    worker = worker_of(app)
    for done in range(limit):
        if not worker.step():
            return done
    raise AssertionError(f"more than {limit} analysis jobs")


def analysed(client: FlaskClient, path: str, **kwargs: Any) -> Any:
    """The answer to ``GET path`` once its job is done: a 202 runs the queue, then asks again
    (it answers at once then)."""
    response = client.get(path, **kwargs)
    if response.status_code == 202:
        assert response.headers["Retry-After"].isdigit()
        run_jobs(client.application)
        response = client.get(path, **kwargs)
        assert response.status_code != 202, response.get_json()
    return response


def served(get: Callable[[str], Any], path: str, seconds: float = 120.0) -> Any:
    """A real server's answer to ``path`` (``get`` returns (status, body)) once its workers
    worked it out: polled until it is no longer 202."""

    def ready() -> Any:
        status, body = get(path)
        return None if status == 202 else (status, body)

    return poll(ready, seconds)


def cooled(app: Flask) -> None:
    """Every failed job's cool-down over, as if its time had passed."""
    jobs = app.extensions["cantstop"].analyst.jobs
    jobs.execute(f"UPDATE {jobs.TABLE} SET finished_at = 0 WHERE status = 'failed'")
