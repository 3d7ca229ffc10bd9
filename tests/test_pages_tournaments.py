"""The tournament pages (issue #45) in a real browser: Debian's Chromium driven by Playwright,
against ``cantstop serve`` in a subprocess, as tests/test_pages_accounts.py drives the account
pages; and the pages' own words, in process.

``/tournaments`` lists them (under way, upcoming, finished); ``/tournaments/{id}`` shows one:
its standings and players as they change (the page follows the tournament's stream), its rounds'
tables linked to their games, and Register / Withdraw for the signed-in account, which act with
the personal token in the Authorization header only. Each page is scanned with the vendored
axe-core and checked on a phone's screen.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect

from service.http.pages import table_groups, table_outcome, tournament_text
from tests.support.browser import (
    ACCESS_LOG,
    PASSWORD,
    Server,
    axe,
    context,
    shot,
    sign_up,
    started_server,
)
from tests.support.http import send

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with started_server(tmp_path_factory.mktemp("tournament-pages"), env=ACCESS_LOG) as started:
        yield started


def account(server: Server, handle: str) -> str:
    """A new account's personal token (signed up through the API)."""
    reply = send(server.port, "POST", "/v1/accounts", {"handle": handle, "password": PASSWORD})
    assert reply.status == 201, reply.body[:300]
    token: str = reply.json()["token"]
    return token


def swiss(server: Server, token: str, name: str) -> str:
    """A Swiss of one round at tables of two, started by its creator: its id."""
    body = {
        "name": name,
        "kind": "swiss",
        "rules": {"columns_to_win": 1},
        "players_per_table": 2,
        "rounds": 1,
        "clock": {"turn_seconds": 600},
        "rated": False,
        "starts_at": None,
    }
    return str(server.api("POST", "/v1/tournaments", body, token)["tournament"]["id"])


def players_shown(page: Page) -> Any:
    return page.locator("#players-list")


def standings_rows(page: Page) -> Any:
    return page.locator("#standings-body tr")


# --------------------------------------------------------------------------------- tests
def test_register_withdraw_and_follow_a_tournament_live(server: Server, browser: Browser) -> None:
    suffix = uuid.uuid4().hex[:6]
    creator, me = f"bob{suffix}", f"ann{suffix}"
    creator_token = account(server, creator)
    name = f"Sunday <b>Swiss</b> {suffix}"  # a name with markup: shown as text
    tid = swiss(server, creator_token, name)

    with context(browser, server) as (ctx, watch):
        page = ctx.new_page()
        my_token = sign_up(page, me)
        page.goto("/tournaments")
        upcoming = page.get_by_role("region", name="Upcoming")
        upcoming.get_by_role("link", name=name).click()
        expect(page.get_by_role("heading", level=1, name=name)).to_be_visible()
        expect(page.locator("#tournament-status")).to_have_text("upcoming")
        expect(page.get_by_text("Nobody has registered yet.")).to_be_visible()

        # Register with the button: the page shows the account among the players and standings.
        page.get_by_role("button", name="Register").click()
        expect(players_shown(page)).to_contain_text(me)
        expect(standings_rows(page)).to_have_count(1)
        expect(page.get_by_role("button", name="Withdraw")).to_be_visible()
        expect(page.get_by_role("button", name="Register")).to_be_hidden()

        # Someone else registers through the API: the page follows without a reload.
        server.api("POST", f"/v1/tournaments/{tid}/players", None, creator_token)
        expect(players_shown(page)).to_contain_text(creator)
        expect(standings_rows(page)).to_have_count(2)

        # Withdraw, then register again.
        page.get_by_role("button", name="Withdraw").click()
        expect(players_shown(page)).not_to_contain_text(me)
        expect(standings_rows(page)).to_have_count(1)
        page.get_by_role("button", name="Register").click()
        expect(players_shown(page)).to_contain_text(me)
        axe(page, "a tournament page, registered")

        # Its creator starts it: the round's table appears, linked to its game, still live.
        server.api("POST", f"/v1/tournaments/{tid}/start", None, creator_token)
        expect(page.locator("#tournament-status")).to_have_text("under way")
        table = page.locator("#rounds").get_by_role("link")
        expect(table).to_have_count(1)
        href = table.get_attribute("href")
        assert href is not None and href.startswith("/games/")
        game = server.api("GET", f"/v1{href}")
        assert sorted(p["account"] for p in game["players"]) == sorted([me, creator])
        expect(page.get_by_role("button", name="Register")).to_be_hidden()
        shot(page, "tournament")

        page.goto("/tournaments")
        expect(
            page.get_by_role("region", name="Under way").get_by_role("link", name=name)
        ).to_be_visible()
        axe(page, "the tournaments page")
        shot(page, "tournaments")

    for url in watch.requests:
        assert my_token not in url and creator_token not in url, url
    log = server.log()
    assert my_token not in log and creator_token not in log


def test_the_tournament_pages_fit_a_phone(server: Server, browser: Browser) -> None:
    token = account(server, f"cy{uuid.uuid4().hex[:6]}")
    tid = swiss(server, token, "A tournament with a rather long name that must wrap on a phone")
    server.api("POST", f"/v1/tournaments/{tid}/players", None, token)
    phone: ViewportSize = {"width": 390, "height": 844}
    with context(browser, server, viewport=phone, is_mobile=True) as (ctx, _):
        page = ctx.new_page()
        for path in ("/tournaments", f"/tournaments/{tid}"):
            page.goto(path)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= phone["width"], f"wider than the screen: {width} px on {path}"
            shot(page, "phone-" + path.strip("/").replace("/", "-")[:40])
        expect(page.get_by_role("link", name="Sign in")).to_be_visible()  # signed out: no buttons
        expect(page.get_by_role("button", name="Register")).to_be_hidden()


def test_an_unknown_tournament_is_a_not_found_page(server: Server) -> None:
    for path in (f"/tournaments/{uuid.uuid4()}", "/tournaments/not-an-id"):
        reply = send(server.port, "GET", path, None, {"Accept": BROWSER_ACCEPT})
        assert reply.status == 404, (path, reply.status)
        assert reply.headers["content-type"].startswith("text/html")
        assert "unsafe-inline" not in reply.headers["content-security-policy"]


# ------------------------------------------------------------------------- in words
def test_a_tournament_and_its_tables_in_words() -> None:
    swiss_json = {
        "kind": "swiss",
        "status": "created",
        "rounds_planned": 3,
        "players_per_table": 3,
        "rules": {"columns_to_win": 3, "dice_faces": 6},
        "players": ["ann", "bob"],
        "rated": True,
        "clock": {"turn_seconds": 60},
        "starts_at": "2026-12-01T18:00:00.000000Z",
    }
    assert tournament_text(swiss_json) == (
        "Swiss · 3 rounds · tables of 3 · 3 columns to win · 6-sided dice · 2 players · rated"
        " · 60 s a turn · starts 2026-12-01 18:00 UTC"
    )
    listed = {"kind": "arena", "status": "started", "players": 1, "starts_at": None}
    assert tournament_text(listed) == "Arena · 1 player"
    assert table_outcome({"result": None}) == "under way"
    assert table_outcome({"result": {"aborted": True, "places": {}}}) == "aborted: no points"
    won = {"result": {"aborted": False, "places": {"ann": 1, "bob": 0, "cy": 0}}}
    assert table_outcome(won) == "bob and cy won"
    rounds = [{"number": 1, "tables": [{"game_id": "g", "players": ["a", "b"]}], "byes": ["c"]}]
    grouped = table_groups({"kind": "swiss", "rounds": rounds})
    assert [(g["title"], g["byes"]) for g in grouped] == [("Round 1", ["c"])]
    tables = [{"game_id": f"g{i}", "players": ["a", "b"], "result": None} for i in range(3)]
    arena = table_groups({"kind": "arena", "rounds": [], "tables": tables})
    assert [t["game_id"] for t in arena[0]["tables"]] == ["g2", "g1", "g0"]
    assert table_groups({"kind": "arena", "rounds": [], "tables": []}) == []
