"""The analysis as a job (contract 1.3; service/application/analysis/jobs.py): 202 then 200, one
job for two requests, the per-client cap under concurrency, fairness across clients, two
workers racing, a worker killed mid-job, the CPU deadline, the longest game, the memory budget
and finished rated games queued without asking. Real stores (SQLite and PostgreSQL), real
worker processes where a process is the point; nothing mocked."""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from domain.analysis import Analysis, analyse
from domain.strategies.expert import ExpertStrategy
from service.application.analysis import analyst as analyst_module
from service.application.analysis.jobs import (
    ATTEMPTS,
    FINAL,
    PER_CLIENT,
    SYSTEM,
    AnalysisJobs,
    Job,
    JobConfig,
    Supervisor,
    Worker,
)
from tests.support.analysis import cooled, run_jobs
from tests.support.games import create_game, history, play_to_the_end
from tests.support.http import bearer, ok
from tests.support.polling import poll, wait_until
from tests.support.racing import race_cleanly
from tests.support.rated import finished_rated_game, sign_up

Json = dict[str, Any]


def refused(response: Any, status: int, code: str) -> Json:
    body: Json = response.get_json()
    assert response.status_code == status, body
    assert response.mimetype == "application/problem+json" and body["code"] == code, body
    return body


def jobs_of(app: Flask) -> AnalysisJobs:
    jobs: AnalysisJobs = app.extensions["cantstop"].analyst.jobs
    return jobs


def job(app: Flask, game_id: str, version: int = FINAL) -> Job:
    found = jobs_of(app).get(uuid.UUID(game_id), version)
    assert found is not None
    return found


def finished(client: FlaskClient, **rules: Any) -> str:
    game_id, tokens = create_game(client, players=["Ann", "Bob"], rules=rules or None)
    play_to_the_end(client, game_id, tokens)
    return game_id


def in_progress(client: FlaskClient) -> tuple[str, int]:
    """A game of two after a roll: its version."""
    game_id, tokens = create_game(client, players=["Ann", "Bob"])
    seat = ok(client.get(f"/v1/games/{game_id}"))["turn"]["player"]
    roll = client.post(
        f"/v1/games/{game_id}/actions", json={"type": "roll"}, headers=bearer(tokens[seat])
    )
    return game_id, int(ok(roll)["game"]["version"])


def from_(address: str) -> dict[str, Any]:
    return {"environ_base": {"REMOTE_ADDR": address}}


def test_a_request_queues_a_job_answers_202_then_the_kept_analysis(
    client: FlaskClient, app: Flask
) -> None:
    game_id = finished(client)
    analyst = app.extensions["cantstop"].analyst
    assert analyst.kept(uuid.UUID(game_id)) is None
    first = client.get(f"/v1/games/{game_id}/analysis")
    assert first.status_code == 202
    assert first.get_json() == {"status": "queued", "progress": 0}
    assert int(first.headers["Retry-After"]) >= 1
    # a second request (another client too) is the same job, not another
    again = client.get(f"/v1/games/{game_id}/analysis", **from_("10.0.0.9"))
    assert again.status_code == 202
    assert jobs_of(app).counts() == {"queued": 1}
    assert run_jobs(app) == 1
    done = client.get(f"/v1/games/{game_id}/analysis")
    assert done.status_code == 200 and "Retry-After" not in done.headers
    assert done.get_json() == analyse(history(client, game_id))
    assert analyst.kept(uuid.UUID(game_id)) == done.get_json()
    assert job(app, game_id).status == "done" and job(app, game_id).attempts == 1


def test_an_analysis_kept_under_an_older_expert_or_values_is_worked_out_again(
    client: FlaskClient, app: Flask
) -> None:
    """Kept answers are keyed by the expert's version and the values' (domain.analysis.KEY):
    one kept before the values were calibrated is never served as if it were today's."""
    game_id = finished(client)
    analyst = app.extensions["cantstop"].analyst
    stale = {"finished": True, "version": 1, "stale": True}
    analyst.stored.put(uuid.UUID(game_id), ExpertStrategy.version, 1, json.dumps(stale))
    assert analyst.kept(uuid.UUID(game_id)) is None
    assert client.get(f"/v1/games/{game_id}/analysis").status_code == 202
    assert run_jobs(app) == 1
    assert ok(client.get(f"/v1/games/{game_id}/analysis")) == analyse(history(client, game_id))


def test_a_running_job_reports_its_progress(client: FlaskClient, app: Flask) -> None:
    game_id = finished(client)
    assert client.get(f"/v1/games/{game_id}/analysis").status_code == 202
    worker = Worker(app.extensions["cantstop"].games, jobs_of(app), JobConfig(), "tests:a")
    claimed = jobs_of(app).claim(worker.name, 30)
    assert claimed is not None
    assert jobs_of(app).report(claimed, worker.name, 0.25, 30)
    running = client.get(f"/v1/games/{game_id}/analysis")
    assert running.status_code == 202
    assert running.get_json() == {"status": "running", "progress": 0.25}
    # not this worker's: its report is refused
    assert not jobs_of(app).report(claimed, "tests:other", 0.5, 30)


def test_a_client_holds_at_most_a_few_unfinished_jobs_even_racing(
    client: FlaskClient, app: Flask
) -> None:
    games = [in_progress(client) for _ in range(PER_CLIENT + 4)]

    def asker(game_id: str) -> Callable[[], Any]:
        mine = app.test_client()
        mine.spec = client.spec  # type: ignore[attr-defined]
        return partial(mine.get, f"/v1/games/{game_id}/analysis", **from_("10.0.0.1"))

    replies = race_cleanly([asker(g) for g, _ in games], timeout=30)
    answers: dict[str, Any] = dict(zip((g for g, _ in games), replies, strict=True))
    statuses = sorted(r.status_code for r in answers.values())
    assert statuses == [202] * PER_CLIENT + [429] * 4
    for response in answers.values():
        if response.status_code == 429:
            refused(response, 429, "too_many_analyses")
            assert response.headers["Retry-After"].isdigit()
    # a refused request recorded nothing; another client is not held back
    assert jobs_of(app).counts() == {"queued": PER_CLIENT}
    other, _ = in_progress(client)
    assert client.get(f"/v1/games/{other}/analysis", **from_("10.0.0.2")).status_code == 202
    # once its jobs are done, the client may ask again
    run_jobs(app)
    last = next(g for g, _ in games if answers[g].status_code == 429)
    assert client.get(f"/v1/games/{last}/analysis", **from_("10.0.0.1")).status_code == 202


def test_one_client_filling_the_queue_does_not_starve_another(
    client: FlaskClient, app: Flask
) -> None:
    """The flooding client's jobs were queued first; the other's single job is taken second,
    not after all of them; finished rated games (the system's, uncapped) take turns too."""
    flood = [in_progress(client) for _ in range(PER_CLIENT)]
    for game_id, _ in flood:
        assert client.get(f"/v1/games/{game_id}/analysis", **from_("10.0.0.1")).status_code == 202
    for _ in range(3):  # a backlog of the system's
        game_id, version = in_progress(client)
        jobs_of(app).enqueue(uuid.UUID(game_id), version, SYSTEM, capped=False)
    late, late_version = in_progress(client)
    assert client.get(f"/v1/games/{late}/analysis", **from_("10.0.0.2")).status_code == 202
    order = []
    while (taken := jobs_of(app).claim("tests:fair", 30)) is not None:
        order.append(taken.client)
        jobs_of(app).fail(taken, "tests:fair", {"reason": "tests"})
    assert order[:3] == ["a:10.0.0.1", SYSTEM, "a:10.0.0.2"]
    assert sorted(order) == sorted(["a:10.0.0.1"] * PER_CLIENT + [SYSTEM] * 3 + ["a:10.0.0.2"])
    assert job(app, late, late_version).status == "failed"


def test_an_idle_worker_asks_for_a_job_in_one_statement_and_no_transaction(
    client: FlaskClient, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker with nothing to do asks four times a second: one read, never the claim's
    transaction (three round trips on PostgreSQL); a waiting job is still claimed."""
    jobs = jobs_of(app)
    statements: list[str] = []
    execute, transaction = jobs.execute, jobs.transaction
    inside: list[bool] = []  # a statement of its own may run in a transaction of its own

    def counted(sql: str, params: Any = (), **kwargs: Any) -> Any:
        statements.append(sql)
        inside.append(True)
        try:
            return execute(sql, params, **kwargs)
        finally:
            inside.pop()

    def opened(work: Any) -> Any:
        if not inside:
            statements.append("transaction")
        return transaction(work)

    monkeypatch.setattr(jobs, "execute", counted)
    monkeypatch.setattr(jobs, "transaction", opened)
    assert jobs.claim("tests:idle", 30) is None
    assert len(statements) == 1 and statements[0].startswith("SELECT 1 ")
    game_id = finished(client)
    jobs.enqueue(uuid.UUID(game_id), FINAL, SYSTEM, capped=False)
    claimed = jobs.claim("tests:idle", 30)
    assert claimed is not None and str(claimed.game_id) == game_id


def test_two_workers_racing_run_each_job_once(client: FlaskClient, app: Flask) -> None:
    games = [finished(client) for _ in range(3)]
    for game_id in games:
        jobs_of(app).enqueue(uuid.UUID(game_id), FINAL, SYSTEM, capped=False)
    store = app.extensions["cantstop"].games
    workers = [Worker(store, jobs_of(app), JobConfig(), f"tests:{n}") for n in "ab"]

    def work(worker: Worker) -> None:
        while worker.step():
            pass

    race_cleanly([partial(work, w) for w in workers], timeout=120)
    assert sum(w.done for w in workers) == len(games)
    for game_id in games:
        assert job(app, game_id).status == "done" and job(app, game_id).attempts == 1
        assert client.get(f"/v1/games/{game_id}/analysis").status_code == 200


def test_a_job_for_a_version_the_store_went_back_from_is_queued_again_once_it_is_back(
    client: FlaskClient, app: Flask
) -> None:
    """A job queued for version N, then the store restored from a backup holding fewer: the
    worker finds no version N. Once the game is at N again, asking queues it afresh, and it is
    worked out (it was answered 409 corrupt_game for the ten minutes of a cool-down)."""
    game_id, tokens = create_game(client, players=["Ann", "Bob"])
    ahead = int(ok(client.get(f"/v1/games/{game_id}"))["version"]) + 1
    jobs_of(app).enqueue(uuid.UUID(game_id), ahead, "a:10.0.0.1")  # as queued before a restore
    assert run_jobs(app) == 1 and job(app, game_id, ahead).status == "failed"
    seat = ok(client.get(f"/v1/games/{game_id}"))["turn"]["player"]
    roll = client.post(
        f"/v1/games/{game_id}/actions", json={"type": "roll"}, headers=bearer(tokens[seat])
    )
    assert ok(roll)["game"]["version"] == ahead
    asked = client.get(f"/v1/games/{game_id}/analysis?version={ahead}")
    assert asked.status_code == 202, asked.get_json()
    assert run_jobs(app) == 1
    done = client.get(f"/v1/games/{game_id}/analysis?version={ahead}")
    assert done.status_code == 200
    assert done.get_json() == analyse(history(client, game_id)[:ahead])


def test_a_job_past_its_cpu_deadline_fails_then_may_be_asked_again(
    client: FlaskClient, app: Flask
) -> None:
    game_id = finished(client)
    assert client.get(f"/v1/games/{game_id}/analysis").status_code == 202
    hasty = Worker(
        app.extensions["cantstop"].games, jobs_of(app), JobConfig(cpu_seconds=1e-4), "tests:h"
    )
    assert hasty.step() and hasty.done == 0
    failed = client.get(f"/v1/games/{game_id}/analysis")
    body = refused(failed, 503, "analysis_failed")
    assert "CPU deadline" in body["detail"]
    assert 590 <= int(failed.headers["Retry-After"]) <= 600
    assert job(app, game_id).status == "failed"
    # after the cool-down, a new request queues it again; a patient worker does it
    cooled(app)
    assert client.get(f"/v1/games/{game_id}/analysis").status_code == 202
    run_jobs(app)
    assert client.get(f"/v1/games/{game_id}/analysis").status_code == 200


def test_an_analysis_is_worked_out_with_the_cyclic_collector_paused(
    client: FlaskClient, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step of a job's analysis runs with Python's cyclic collector off (its passes over
    the expert's tables cost ~10% of the CPU), and the collector is on again after a job, one
    done and one past its deadline alike."""
    seen: list[bool] = []
    advance = Analysis.advance

    def watched(self: Any, version: int) -> None:
        seen.append(gc.isenabled())
        advance(self, version)

    monkeypatch.setattr(Analysis, "advance", watched)
    store = app.extensions["cantstop"].games
    for config in (JobConfig(), JobConfig(cpu_seconds=1e-4)):
        game_id = finished(client)
        jobs_of(app).enqueue(uuid.UUID(game_id), FINAL, SYSTEM, capped=False)
        seen.clear()
        assert gc.isenabled()
        assert Worker(store, jobs_of(app), config, "tests:gc").step()
        assert seen and not any(seen)
        assert gc.isenabled()
        assert job(app, game_id).status == ("done" if config.cpu_seconds > 1 else "failed")


def test_a_worker_keeps_the_points_from_job_to_job_and_answers_as_from_scratch(
    client: FlaskClient, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's analyses share what depends on the points alone (``Shared``), job after job
    and whatever their dice: each answer is the analysis from scratch."""
    given: list[object] = []
    init = Analysis.__init__

    def watched(self: Any, records: Any = (), shared: Any = None) -> None:
        given.append(shared)
        init(self, records, shared)

    monkeypatch.setattr(Analysis, "__init__", watched)
    store = app.extensions["cantstop"].games
    worker = Worker(store, jobs_of(app), JobConfig(), "tests:points")
    games = [finished(client), finished(client, dice_faces=8), finished(client)]
    for game_id in games:
        jobs_of(app).enqueue(uuid.UUID(game_id), FINAL, SYSTEM, capped=False)
        assert worker.step()
    assert len(given) == 3 and given[0] is not None
    assert all(shared is given[0] for shared in given)
    monkeypatch.setattr(Analysis, "__init__", init)
    analyst = app.extensions["cantstop"].analyst
    for game_id in games:
        assert analyst.kept(uuid.UUID(game_id)) == analyse(history(client, game_id))


def test_a_job_whose_workers_keep_dying_fails(client: FlaskClient, app: Flask) -> None:
    game_id = finished(client)
    assert client.get(f"/v1/games/{game_id}/analysis").status_code == 202
    for n in range(ATTEMPTS):  # each claim's lease over at once: its worker "died"
        claimed = jobs_of(app).claim(f"tests:dead-{n}", -1)
        assert claimed is not None and claimed.attempts == n + 1
    last = Worker(app.extensions["cantstop"].games, jobs_of(app), JobConfig(), "tests:last")
    assert last.step() and last.done == 0
    body = refused(client.get(f"/v1/games/{game_id}/analysis"), 503, "analysis_failed")
    assert "workers stopped" in body["detail"]


def test_a_game_longer_than_the_maximum_is_game_too_long(
    client: FlaskClient, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    game_id = finished(client)
    versions = ok(client.get(f"/v1/games/{game_id}"))["version"]
    monkeypatch.setattr(analyst_module, "MAX_VERSIONS", versions - 1)
    body = refused(client.get(f"/v1/games/{game_id}/analysis"), 422, "game_too_long")
    assert str(versions - 1) in body["detail"]
    assert jobs_of(app).counts() == {}  # refused: nothing queued
    # its earlier versions are short enough
    assert client.get(f"/v1/games/{game_id}/analysis?version={versions - 1}").status_code == 202


def test_a_finished_rated_game_is_queued_without_anyone_asking(
    client: FlaskClient, app: Flask
) -> None:
    tokens = {handle: sign_up(client, handle) for handle in ("ann", "bob")}
    game = finished_rated_game(client, tokens)
    plain = finished(client)
    runtime = app.extensions["cantstop"]
    for view in runtime.moved_views:  # what the scheduler's loop does at each poll
        runtime.views.catch_up(view)
    queued = job(app, game["id"])
    assert queued.status == "queued" and queued.client == SYSTEM
    assert jobs_of(app).get(uuid.UUID(plain), FINAL) is None  # unrated: only when asked
    run_jobs(app)
    kept = runtime.analyst.kept(uuid.UUID(game["id"]))
    assert kept is not None and kept["version"] == game["version"]


# ------------------------------------------------------------------------------ processes
@pytest.fixture
def worker_env(database_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "CANTSTOP_DATABASE_URL": database_url,
        "CANTSTOP_ANALYSIS_LEASE": "1",
        "PYTHONPATH": os.getcwd(),
    }


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(10)


def analyst_process(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "analyst"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow  # worker processes
def test_a_worker_killed_mid_job_leaves_it_to_another_after_its_lease(
    client: FlaskClient,
    app: Flask,
    worker_env: dict[str, str],
    children: list[subprocess.Popen[bytes]],
) -> None:
    game_id = finished(client, dice_faces=8)  # several seconds of CPU: time to kill it
    assert client.get(f"/v1/games/{game_id}/analysis").status_code == 202
    child = analyst_process(worker_env)
    children.append(child)
    name = f"{socket.gethostname()}:{child.pid}"
    wait_until(lambda: job(app, game_id).worker == name, 60, "the child to take the job")
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    assert job(app, game_id).status == "running"
    late = Worker(app.extensions["cantstop"].games, jobs_of(app), JobConfig(), "tests:late")
    # the lease (1 s, renewed at each report) holds it a while, then it is taken again
    poll(late.step, 10)
    again = job(app, game_id)
    assert again.status == "done" and again.attempts == 2 and late.done == 1
    assert ok(client.get(f"/v1/games/{game_id}/analysis")) == analyse(history(client, game_id))


@pytest.mark.slow  # worker processes
def test_a_worker_past_its_memory_budget_is_replaced(
    client: FlaskClient, app: Flask, worker_env: dict[str, str]
) -> None:
    """A budget of one byte: each child exits after its job, and its parent starts another;
    every job is done, each by another process."""
    games = [finished(client) for _ in range(2)]
    for game_id in games:
        assert client.get(f"/v1/games/{game_id}/analysis").status_code == 202
    env = {**worker_env, "CANTSTOP_ANALYSIS_RSS_BYTES": "1"}
    supervisor = Supervisor(lambda: analyst_process(env), 1, jobs_of(app))
    try:

        def all_done() -> bool:
            supervisor.step()
            return all(job(app, g).status == "done" for g in games)

        wait_until(all_done, 120, "both jobs done by the supervised workers")
    finally:
        supervisor.close()
    assert len({job(app, g).worker for g in games}) == 2
    assert supervisor.replaced >= 1
    for game_id in games:
        assert client.get(f"/v1/games/{game_id}/analysis").status_code == 200


def test_a_request_process_keeps_answers_bounded_in_bytes(
    client: FlaskClient, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    games = [finished(client) for _ in range(3)]
    for game_id in games:
        client.get(f"/v1/games/{game_id}/analysis")
    run_jobs(app)
    analyst = app.extensions["cantstop"].analyst
    sizes = []
    for game_id in games:
        sizes.append(len(client.get(f"/v1/games/{game_id}/analysis").get_data()))
    monkeypatch.setattr(analyst_module, "CACHE_BYTES", max(sizes) * 2)
    analyst._answers.clear()
    analyst._bytes = 0
    for game_id in games:
        assert client.get(f"/v1/games/{game_id}/analysis").status_code == 200
    assert analyst._bytes <= max(sizes) * 2 and len(analyst._answers) < 3
    assert analyst._bytes == sum(len(k.text) for k in analyst._answers.values())


@pytest.mark.slow  # worker processes
def test_cantstop_worker_runs_the_analyses_in_its_child_processes(
    client: FlaskClient, app: Flask, worker_env: dict[str, str]
) -> None:
    """The scheduler process itself (``cantstop worker``) starts two analysis processes
    (CANTSTOP_ANALYSIS_WORKERS=2); a request's job is worked out by one of them, whose process
    is a child of the worker, not the worker itself."""
    games = [finished(client) for _ in range(2)]
    for game_id in games:
        assert client.get(f"/v1/games/{game_id}/analysis").status_code == 202
    env = {**worker_env, "CANTSTOP_ANALYSIS_WORKERS": "2", "CANTSTOP_ANALYSIS_LEASE": "30"}
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for game_id in games:

            def kept(game_id: str = game_id) -> bool:
                return bool(client.get(f"/v1/games/{game_id}/analysis").status_code == 200)

            poll(kept, 120)
        workers = {str(job(app, g).worker) for g in games}
        assert f"{socket.gethostname()}:{scheduler.pid}" not in workers
        children = {
            int(pid)
            for pid in subprocess.run(
                ["ps", "-o", "pid=", "--ppid", str(scheduler.pid)],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.split()
        }
        assert len(children) == 2
        assert {int(w.rsplit(":", 1)[1]) for w in workers} <= children
    finally:
        scheduler.send_signal(signal.SIGTERM)
        scheduler.wait(30)
