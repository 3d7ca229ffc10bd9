"""GET /metrics scraped from a real ``cantstop serve`` (2 workers and its scheduler) and read with
Prometheus's own text parser; request ids; JSON log lines."""

from __future__ import annotations

import http.client
import json
import re
import sqlite3
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from service.config import ConfigError, Settings
from service.http.app import create_app
from service.http.metrics import StoreCollector
from tests.support.http import HOST, Reply, send
from tests.support.polling import wait_until
from tests.support.servers import free_port, serving

pytestmark = pytest.mark.slow

ACTIONS = "/v1/games/<game_id>/actions"
DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana-dashboard.json"
Samples = list[tuple[str, dict[str, str], float]]


class Server:
    def __init__(self, port: int, tmp: Path) -> None:
        self.port = port
        self.tmp = tmp
        self.access_log = tmp / "access.log"
        self.metrics_dir = tmp / "metrics"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("metrics")
    port = free_port()
    found = Server(port, tmp)
    env = {
        "CANTSTOP_METRICS": "on",
        "CANTSTOP_BOT_PAUSE": "0",
        "CANTSTOP_THREADS": "16",
        "CANTSTOP_ACCESS_LOG": str(found.access_log),
        # Named, so that the test can read each process's own file too.
        "PROMETHEUS_MULTIPROC_DIR": str(found.metrics_dir),
    }
    args = ("--host", HOST, "--port", str(port), "--workers", "2")
    with serving(tmp, *args, env=env, ready_port=port):
        yield found


def scrape(port: int) -> Samples:
    reply = send(port, "GET", "/metrics")
    assert reply.status == 200, reply.body
    assert reply.content_type == "text/plain"
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(reply.body.decode())
        for sample in family.samples
    ]


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(
        value
        for found, have, value in samples
        if found == name and all(have.get(k) == v for k, v in labels.items())
    )


def new_game(port: int, players: list[Any]) -> tuple[str, list[str]]:
    reply = send(port, "POST", "/v1/games", {"players": players})
    assert reply.status == 201, reply.body
    created = reply.json()
    return created["game"]["id"], [seat.get("token", "") for seat in created["seats"]]


def roll(port: int, game_id: str, token: str, request_id: str | None = None) -> Reply:
    headers = {"Authorization": f"Bearer {token}"}
    if request_id is not None:
        headers["X-Request-Id"] = request_id
    return send(port, "POST", f"/v1/games/{game_id}/actions", {"type": "roll"}, headers)


def requests_per_process(folder: Path) -> list[float]:
    """Each process's own count of answered requests, from its own file (prometheus_client's
    public ``MultiProcessCollector.merge`` of that one file)."""
    counts = []
    for path in sorted(folder.glob("histogram_*.db")):
        merged = MultiProcessCollector.merge([str(path)], accumulate=True)  # type: ignore[no-untyped-call]
        counts.append(
            sum(
                sample.value
                for metric in merged
                if metric.name == "cantstop_http_request_duration_seconds"
                for sample in metric.samples
                if sample.name.endswith("_count")
            )
        )
    return [count for count in counts if count > 0]


# ------------------------------------------------------------------------------ the scrape
def test_counts_of_both_workers_and_the_scheduler_add_up(server: Server) -> None:
    port = server.port
    before = scrape(port)
    rolled = 0

    def play_one(_: int) -> int:
        game_id, tokens = new_game(port, ["Ann", "Bob"])
        reply = roll(port, game_id, tokens[0])
        if reply.status == 403:  # Bob's turn first
            reply = roll(port, game_id, tokens[1])
        assert reply.status == 200, reply.body
        return 1

    # Concurrent batches until both workers have answered some (each writes its own file).
    with ThreadPoolExecutor(8) as pool:

        def both_served() -> bool:
            nonlocal rolled
            rolled += sum(pool.map(play_one, range(16)))
            return len(requests_per_process(server.metrics_dir)) >= 2

        wait_until(both_served, 60, "requests answered by both workers")

    # A game of two computer players: every action of it is recorded by the scheduler.
    bots = [{"name": "R1", "bot": "rule-of-28"}, {"name": "R2", "bot": "rule-of-28"}]
    reply = send(port, "POST", "/v1/games", {"players": bots})
    assert reply.status == 201, reply.body
    bot_game = reply.json()["game"]["id"]

    def finished() -> bool:
        return bool(send(port, "GET", f"/v1/games/{bot_game}").json()["status"] == "finished")

    wait_until(finished, 60, "the computer players' game to finish")
    history = send(port, "GET", f"/v1/games/{bot_game}/events?limit=1000").json()
    bot_events = len(history["events"])

    after = scrape(port)
    answered = total(after, "cantstop_http_request_duration_seconds_count", route=ACTIONS)
    answered -= total(before, "cantstop_http_request_duration_seconds_count", route=ACTIONS)
    assert answered >= rolled  # each game's roll (and a refused roll on Bob's turn)
    ok = total(
        after, "cantstop_http_request_duration_seconds_count", route=ACTIONS, status="200"
    ) - total(before, "cantstop_http_request_duration_seconds_count", route=ACTIONS, status="200")
    assert ok == rolled
    # The scheduler's process counted the computer players' events; the workers the rest.
    rolled_events = total(after, "cantstop_events_recorded_total", type="DiceRolled")
    rolled_events -= total(before, "cantstop_events_recorded_total", type="DiceRolled")
    bot_rolls = sum(1 for event in history["events"] if event["type"] == "DiceRolled")
    assert rolled_events == rolled + bot_rolls
    assert bot_events > 0 and bot_rolls > 0
    assert total(after, "cantstop_scheduler_lateness_seconds_count") > 0


def test_problems_by_code_and_routes_by_template(server: Server) -> None:
    port = server.port
    before = scrape(port)
    game_id, tokens = new_game(port, ["Ann", "Bob"])
    secrets = {game_id, *tokens}
    # An attacker's thousand paths make no new series: they are all "(unmatched)" or a template.
    for _ in range(30):
        other = str(uuid.uuid4())
        secrets.add(other)
        assert send(port, "GET", f"/v1/games/{other}").status == 404
        assert send(port, "GET", f"/no/such/{other}").status == 404
    refused = send(
        port, "POST", f"/v1/games/{game_id}/actions", {"type": "stop"}, {"Authorization": "x"}
    )
    assert refused.status == 401
    after = scrape(port)
    not_found = total(after, "cantstop_problems_total", code="not_found")
    assert not_found - total(before, "cantstop_problems_total", code="not_found") == 60
    assert total(after, "cantstop_problems_total", code="unauthorized") >= 1
    unmatched = total(after, "cantstop_http_request_duration_seconds_count", route="(unmatched)")
    assert (
        unmatched
        - total(before, "cantstop_http_request_duration_seconds_count", route="(unmatched)")
        == 30
    )
    routes = {labels["route"] for name, labels, _ in after if "route" in labels}
    assert "/v1/games/<game:game_id>" in routes and ACTIONS in routes
    for name, labels, _ in after:
        for value in labels.values():
            assert not any(secret in value for secret in secrets), (name, labels)
            assert "Bearer" not in value


def test_open_streams_views_and_queues(server: Server) -> None:
    port = server.port
    game_id, _ = new_game(port, ["Ann", "Bob"])
    conn = http.client.HTTPConnection(HOST, port, timeout=20)
    try:
        conn.request("GET", f"/v1/games/{game_id}/stream")
        response = conn.getresponse()
        assert response.status == 200
        wait_until(
            lambda: total(scrape(port), "cantstop_streams_open") >= 1, 20, "the stream counted"
        )
    finally:
        conn.close()
    samples = scrape(port)
    views = {labels["view"] for name, labels, _ in samples if name == "cantstop_view_lag_events"}
    assert {"games", "due", "ratings", "notices"} <= views
    assert all(value >= 0 for name, _, value in samples if name == "cantstop_view_lag_events")
    statuses = {labels["status"] for n, labels, _ in samples if n == "cantstop_webhook_deliveries"}
    assert "pending" in statuses
    jobs = {labels["status"] for n, labels, _ in samples if n == "cantstop_analysis_jobs"}
    assert {"queued", "running"} <= jobs
    assert any(name == "cantstop_scheduler_overdue_seconds" for name, _, _ in samples)


def test_the_dashboard_graphs_only_metrics_that_exist(server: Server) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    families = {
        family.name
        for family in text_string_to_metric_families(
            send(server.port, "GET", "/metrics").body.decode()
        )
    }
    served = {
        name
        for family in families
        for name in (
            family,
            f"{family}_total",
            f"{family}_bucket",
            f"{family}_count",
            f"{family}_sum",
        )
    }
    panels = dashboard["panels"]
    assert len(panels) >= 8
    for panel in panels:
        exprs = [target["expr"] for target in panel["targets"]]
        assert exprs, panel["title"]
        for expr in exprs:
            names = set(re.findall(r"\bcantstop_[a-z_]+", expr))
            assert names, (panel["title"], expr)
            assert names <= served, (panel["title"], names - served)


# ------------------------------------------------------------------------------ request ids
def test_request_ids_are_echoed_and_logged(server: Server) -> None:
    port = server.port
    game_id, tokens = new_game(port, ["Ann", "Bob"])
    mine = "client-" + uuid.uuid4().hex[:12]
    reply = roll(port, game_id, tokens[0], request_id=mine)
    if reply.status == 403:
        reply = roll(port, game_id, tokens[1], request_id=mine)
    assert reply.headers["x-request-id"] == mine
    # A problem+json answer carries it too; an unsafe or long id is replaced by a made one.
    for sent in ("has spaces", "x" * 65, 'quote"d', "ü"):
        problem = send(port, "GET", "/v1/games/nope", headers={"X-Request-Id": sent})
        assert problem.status == 404 and problem.content_type == "application/problem+json"
        made = problem.headers["x-request-id"]
        assert made != sent and re.fullmatch(r"[A-Za-z0-9._-]{1,64}", made)
    ids = {send(port, "GET", "/healthz").headers["x-request-id"] for _ in range(20)}
    assert len(ids) == 20

    def logged() -> bool:
        text = server.access_log.read_text() if server.access_log.exists() else ""
        return any(line.endswith(f" {mine}") and "/actions" in line for line in text.splitlines())

    wait_until(logged, 20, "the request id in the access log")


# ------------------------------------------------------------------------------ off, protected
def test_metrics_are_off_by_default(tmp_path: Path) -> None:
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'off.sqlite'}"), create_tables=True
    )
    reply = app.test_client().get("/metrics")
    assert reply.status_code == 404
    assert reply.mimetype == "application/problem+json"
    assert reply.get_json()["code"] == "not_found"
    assert re.fullmatch(r"[A-Za-z0-9._-]{1,64}", reply.headers["X-Request-Id"])


def test_a_metrics_token_guards_the_scrape(tmp_path: Path) -> None:
    token = "scrape-" + uuid.uuid4().hex
    settings = Settings.from_env(
        {
            "CANTSTOP_DATABASE_URL": f"sqlite:///{tmp_path / 'guarded.sqlite'}",
            "CANTSTOP_METRICS": "on",
            "CANTSTOP_METRICS_TOKEN": token,
        }
    )
    client = create_app(settings, create_tables=True).test_client()
    for headers in ({}, {"Authorization": "Bearer wrong-token-of-some-length"}):
        reply = client.get("/metrics", headers=headers)
        assert reply.status_code == 401 and reply.get_json()["code"] == "unauthorized"
    reply = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 200
    text = reply.get_data(as_text=True)
    assert token not in text
    assert {f.name for f in text_string_to_metric_families(text)} >= {
        "cantstop_http_request_duration_seconds",
        "cantstop_view_lag_events",
    }
    with pytest.raises(ConfigError, match="CANTSTOP_METRICS_TOKEN"):
        Settings.from_env({"CANTSTOP_METRICS_TOKEN": "short"})
    with pytest.raises(ConfigError, match="CANTSTOP_METRICS"):
        Settings.from_env({"CANTSTOP_METRICS": "yes"})


# ------------------------------------------------------------------------------ JSON lines
def test_json_log_lines(tmp_path: Path) -> None:
    port = free_port()
    access = tmp_path / "access.log"
    env = {
        "CANTSTOP_LOG_FORMAT": "json",
        "CANTSTOP_ACCESS_LOG": str(access),
        "CANTSTOP_SCHEDULER": "off",
    }
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    with serving(tmp_path, *args, env=env, ready_port=port) as served:
        reply = send(
            port, "GET", "/v1/games/nope?limit=5&token=secret", headers={"X-Request-Id": "j-1"}
        )
        assert reply.status == 404

        def logged() -> dict[str, Any] | None:
            lines = access.read_text().splitlines() if access.exists() else []
            found = [json.loads(line) for line in lines]
            return next((line for line in found if line.get("request_id") == "j-1"), None)

        wait_until(lambda: logged() is not None, 20, "the JSON access line")
        line = logged()
        assert line is not None
        assert line["status"] == "404" and line["level"] == "info"
        assert line["request"] == "GET /v1/games/nope?limit=5&… HTTP/1.1"
        assert "secret" not in access.read_text()
        served.stop()
        # The server's own lines (gunicorn's, on standard error) are JSON too.
        for text in served.output().splitlines():
            if text.startswith("{"):
                assert json.loads(text)["logger"]
        assert any(text.startswith("{") for text in served.output().splitlines())


def test_a_figure_the_store_cannot_give_now_is_left_out_of_the_scrape(tmp_path: Path) -> None:
    """A store's own error (SQLite busy, PostgreSQL gone) while a figure is read leaves that
    figure out of the scrape, as the collector promises; it never makes the scrape a 500."""
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'busy.sqlite'}", metrics=True),
        create_tables=True,
    )
    collector = StoreCollector(app.extensions["cantstop"])
    try:
        for error in (sqlite3.OperationalError("database is locked"), psycopg.OperationalError()):

            def fails(error: Exception = error) -> Any:
                raise error

            collector._lag = fails  # type: ignore[method-assign]
            names = {family.name for family in collector.collect()}
            assert "cantstop_view_lag_events" not in names
            assert "cantstop_analysis_jobs" in names
    finally:
        app.extensions["cantstop"].close()


def test_a_process_file_still_being_created_does_not_fail_the_scrape(server: Server) -> None:
    """A process's metrics file created at the moment of a scrape is empty until its header is
    written: prometheus_client's own collector failed on it (a 500, once in a CI run); the
    scrape passes over it and counts the others."""
    empty = server.metrics_dir / "counter_4194303.db"
    empty.touch()
    try:
        samples = scrape(port=server.port)
        assert any(name == "cantstop_view_lag_events" for name, _, _ in samples)
        assert any(name.startswith("cantstop_http_request_duration") for name, _, _ in samples)
    finally:
        empty.unlink()
