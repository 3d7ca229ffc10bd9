"""The analysis in the pages (contract 1.2, "Receipts and analysis"), in a real browser: Debian's
Chromium driven by Playwright, against ``cantstop serve`` in a subprocess.

The replay page draws each seat's winning chance over the versions (in solitaire, the turns
expected to finish) as an SVG figure whose accessible name begins "Winning chances" (or "Turns to
finish"), marks the luckiest and unluckiest rolls and the costliest decisions as links to their
versions, and gives every point again as a table; the game page shows it once the game ends.
Games of computer players play themselves on the server, so the games are real ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from tests.support.browser import Server, axe, context, shot
from tests.support.http import HOST
from tests.support.polling import wait_until
from tests.support.servers import free_port, serving

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("analysis-pages")
    port = free_port()
    args = ("--host", HOST, "--port", str(port), "--workers", "1")
    env = {"CANTSTOP_BOT_PAUSE": "0", "CANTSTOP_THREADS": "32"}
    with serving(tmp, *args, env=env, ready_port=port) as served:
        yield Server(f"http://{HOST}:{port}", port, served)


def finished_game(server: Server, body: dict[str, object]) -> str:
    """A game of computer players, played to its end by the server's own loop."""
    game_id: str = server.api("POST", "/v1/games", body)["game"]["id"]

    def over() -> bool:
        return bool(server.api("GET", f"/v1/games/{game_id}")["status"] == "finished")

    wait_until(over, 120, f"game {game_id} to be played to its end")
    return game_id


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
    analysis = server.api("GET", f"/v1/games/{game_id}/analysis")
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
    with context(browser, server, viewport={"width": 390, "height": 844}) as (ctx, _):
        page = ctx.new_page()
        page.goto(f"/games/{game_id}/replay")
        chart = page.get_by_role("figure", name=re.compile(r"^Turns to finish"))
        expect(chart).to_be_visible(timeout=30_000)
        expect(chart.locator("polyline.analysis-line")).to_have_count(1)
        shot(page, "replay-analysis-solitaire")
