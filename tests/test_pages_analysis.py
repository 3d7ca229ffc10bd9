"""The analysis in the pages (contract 1.2, "Receipts and analysis"), in a real browser: Debian's
Chromium driven by Playwright, against ``cantstop serve`` in a subprocess.

The replay page draws each seat's winning chance over the versions (in solitaire, the turns
expected to finish) as an SVG figure whose accessible name begins "Winning chances" (or "Turns to
finish"), marks the luckiest and unluckiest rolls and the costliest decisions as links to their
versions, and gives every point again as a table; the game page shows it once the game ends.
Games of computer players play themselves on the server, so the games are real ones. The
analysis is a job (contract 1.3): the page says it is queued or how far it has run, and asks
again after each Retry-After until it is kept.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from tests.support.browser import Server, axe, context, shot, started_server
from tests.support.http import HOST, send
from tests.support.polling import poll, wait_until
from tests.support.servers import free_port, serving

Json = dict[str, Any]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with started_server(tmp_path_factory.mktemp("analysis-pages")) as started:
        yield started


def finished_game(server: Server, body: dict[str, object]) -> str:
    """A game of computer players, played to its end by the server's own loop."""
    game_id: str = server.api("POST", "/v1/games", body)["game"]["id"]

    def over() -> bool:
        return bool(server.api("GET", f"/v1/games/{game_id}")["status"] == "finished")

    wait_until(over, 120, f"game {game_id} to be played to its end")
    return game_id


def kept(server: Server, game_id: str) -> Json:
    """The analysis once the server's analysis worker kept it (202 until then)."""

    def ready() -> Json | None:
        reply = send(server.port, "GET", f"/v1/games/{game_id}/analysis")
        # 429: the poll outran the analysis' rate limit while the worker was busy: ask again.
        assert reply.status in (200, 202, 429), reply.body[:300]
        return reply.json() if reply.status == 200 else None

    found: Json = poll(ready, 120)
    return found


def test_the_replay_draws_winning_chances_with_marks_that_step_to_their_versions(
    browser: Browser, server: Server
) -> None:
    game_id = finished_game(
        server,
        {
            "players": [
                {"name": "Rosa", "bot": "rule-of-28"},
                {"name": "Xavi", "bot": "expert"},
            ]
        },
    )
    analysis = kept(server, game_id)
    total = analysis["version"]
    with context(browser, server) as (ctx, _):
        page = ctx.new_page()
        page.goto(f"/games/{game_id}/replay")
        chart = page.get_by_role("figure", name=re.compile(r"^Winning chances"))
        expect(chart).to_be_visible(timeout=30_000)
        # one line per seat, in the seat's colour
        expect(chart.locator("polyline.analysis-line")).to_have_count(2)
        # the luckiest and unluckiest rolls, and the costliest decisions, are links
        lucky = page.get_by_role("link", name=re.compile(r"^Luckiest roll: "))
        expect(lucky.first).to_be_visible()
        expect(
            page.get_by_role("link", name=re.compile(r"^Unluckiest roll: ")).first
        ).to_be_visible()
        losses = [d for d in analysis["decisions"] if d["loss"] > 1e-9]
        costly = page.get_by_role("link", name=re.compile(r"^Costly decision: "))
        assert costly.count() == 2 * min(3, len(losses))  # on the chart and in the list
        best = max(analysis["rolls"], key=lambda r: r["luck"])
        # the list's link (the last of the two) steps the replay to that roll's version
        page.get_by_role("list").get_by_role("link", name=re.compile(r"^Luckiest roll: ")).click()
        expect(page.get_by_text(f"Version {best['version']} of {total}")).to_be_visible()
        # the table alternative holds every point
        page.get_by_text("Every point of the chart, as a table").click()
        table = page.get_by_role("table", name=re.compile(r"^Winning chances"))
        expect(table).to_be_visible()
        versions = {v["version"] for v in analysis["values"]}
        expect(table.locator("tbody tr")).to_have_count(len(versions))
        per_seat = page.get_by_role("table", name="Luck and play, per player")
        expect(per_seat.get_by_role("row", name=re.compile(r"^Rosa "))).to_be_visible()
        shot(page, "replay-analysis")
        axe(page, "the replay with its analysis")

        # the game page shows it too, now that the game is over; its marks open the replay
        page.goto(f"/games/{game_id}")
        chart = page.get_by_role("figure", name=re.compile(r"^Winning chances"))
        expect(chart).to_be_visible(timeout=30_000)
        href = lucky.first.get_attribute("href")
        assert href == f"/games/{game_id}/replay#version={best['version']}"
        axe(page, "the finished game with its analysis")


def test_a_solitaire_games_chart_is_turns_to_finish(browser: Browser, server: Server) -> None:
    game_id = finished_game(
        server,
        {"players": [{"name": "Sol", "bot": "expert"}], "rules": {"solitaire": "easy"}},
    )
    kept(server, game_id)  # the module's one analysis worker may still be busy with others
    with context(browser, server, viewport={"width": 390, "height": 844}) as (ctx, _):
        page = ctx.new_page()
        page.goto(f"/games/{game_id}/replay")
        chart = page.get_by_role("figure", name=re.compile(r"^Turns to finish"))
        expect(chart).to_be_visible(timeout=30_000)
        expect(chart.locator("polyline.analysis-line")).to_have_count(1)
        # On a phone the labels stay readable, and the seats' table scrolls in its own box
        # with a hint saying so, while the page itself never scrolls sideways.
        heights = page.evaluate(
            "[...document.querySelectorAll('svg.chart text')]"
            ".map(t => t.getBoundingClientRect().height)"
        )
        assert heights and min(heights) >= 11, heights
        expect(page.get_by_role("region", name=re.compile("scrolls sideways"))).to_be_visible()
        expect(page.get_by_text("The table scrolls sideways")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        shot(page, "replay-analysis-solitaire")


def test_the_page_shows_a_queued_analysis_then_draws_it_once_a_worker_ran_it(
    browser: Browser, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A host that runs no analysis worker (CANTSTOP_ANALYSIS_WORKERS=0): the page says the
    analysis is queued, and draws it once a worker of another process has worked it out."""
    tmp = tmp_path_factory.mktemp("analysis-queued")
    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    env = {"CANTSTOP_BOT_PAUSE": "0", "CANTSTOP_ANALYSIS_WORKERS": "0"}
    with serving(tmp, *args, env=env, ready_port=port, name="queued") as served:
        server = Server(f"http://{HOST}:{port}", port, served)
        game_id = finished_game(
            server,
            {"players": [{"name": "Rosa", "bot": "rule-of-28"}, {"name": "Xavi", "bot": "expert"}]},
        )
        with context(browser, server) as (ctx, _):
            page = ctx.new_page()
            page.goto(f"/games/{game_id}/replay")
            expect(page.get_by_role("status").filter(has_text="Analysis queued")).to_be_visible(
                timeout=30_000
            )
            worker_env = {k: v for k, v in os.environ.items() if not k.startswith("CANTSTOP_")}
            worker_env["CANTSTOP_DATABASE_URL"] = f"sqlite:///{tmp / 'queued.sqlite'}"
            worker_env["PYTHONPATH"] = str(Path.cwd())
            analyst = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "analyst"],
                env=worker_env,
                cwd=tmp,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                chart = page.get_by_role("figure", name=re.compile(r"^Winning chances"))
                expect(chart).to_be_visible(timeout=60_000)
            finally:
                analyst.terminate()
                analyst.wait(15)
